"""Placement in TensorBoard: the writer and reader of placement runs and the Keras
callbacks that capture a training step.

``import tfdevices.tensorboard`` does not import TensorFlow or TensorBoard.
"""

from __future__ import annotations

from tfdevices.tensorboard.callbacks import PlacementLogger, PlacementLoggerConfig
from tfdevices.tensorboard.job_metrics import JobMetricsLogger
from tfdevices.tensorboard.writer import format_placement, merged_graph_def, read_placement, write_placement

__all__ = [
    "JobMetricsLogger",
    "PlacementLogger",
    "PlacementLoggerConfig",
    "format_placement",
    "merged_graph_def",
    "read_placement",
    "write_placement",
]
