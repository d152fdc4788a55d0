"""A TensorFlow worker for the listen tests: MultiWorkerMirroredStrategy forms, one all-reduce runs, and the
worker holds while a test reads its sockets.

Usage: listen_worker.py HOLD_DIR [undo]
With ``undo``, right after ``import tensorflow`` (where the loopback mend applies) and before the strategy
starts TensorFlow's server, the mend is undone: the server binds its port as TensorFlow has it, as if through a
path the mend does not catch. Once the job formed, prints ``mend STATE: DETAIL`` (the mend's own report), the
all-reduced sum, then ``ready RANK``, and waits (at most 120 s) for HOLD_DIR/go.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from tfdevices.mends import loopback


def main(argv: list[str]) -> int:
    if argv[1:] == ["undo"]:
        loopback.MEND.undo()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id

    @tf.function
    def summed() -> tf.Tensor:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(rank + 1.0)), axis=None)

    total = summed()
    status = loopback.MEND.status()
    print(f"mend {status.state}: {status.detail}", flush=True)
    print(f"sum {float(total):g}", flush=True)
    print(f"ready {rank}", flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(argv[0], "go")) and time.monotonic() < deadline:
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
