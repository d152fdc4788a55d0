"""How a placement report is marked for the Placement dashboard in a TensorBoard run.

A report stored as a string tensor summary whose metadata names the ``placement``
plugin shows in the Placement tab only (not as a JSON blob in the Text tab), and
TensorBoard enables the tab from the data alone. The dashboard also reads reports
stored as text (``NAME/json`` beside ``NAME/report``, as ``write_placement`` has
written them). Importing this module imports nothing from TensorBoard.

>>> summary_metadata().plugin_data.plugin_name
'placement'
"""

from __future__ import annotations

from typing import Any

#: The dashboard's name: its tab, its routes (``/data/plugin/placement/...``), its summaries' plugin name.
PLUGIN_NAME = "placement"


def summary_metadata() -> Any:
    """``SummaryMetadata`` for a report's JSON: the placement plugin's, data class tensor.

    Pass it to ``tf.summary.write(tag, report.to_json(), step=step, metadata=summary_metadata())``.
    """
    from tensorboard.compat.proto import summary_pb2  # noqa: PLC0415 (lazy TensorBoard)

    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=b"{}"),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )
