"""Rank 1 raises right after the strategy is built; rank 0 then waits on it in an all-reduce.

Usage: under ``tfdevices launch -n 2``. The crash must still be reported (by TensorFlow on rank 0, "The tasks
have crashed", or by the launcher stopping the job), promptly: a crashed worker does not wait at the exit barrier.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tfdevices

strategy = tfdevices.build_strategy("multi_worker")
import tensorflow as tf  # noqa: E402

if tfdevices.launch_info().rank == 1:
    raise RuntimeError("rank 1 fails on purpose")
strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
print("rank 0 passed the all-reduce", flush=True)
