"""Three steps of gradient descent on one variable under MultiWorkerMirroredStrategy (TensorFlow's own gRPC
runtime and collectives), for the launcher's tests: the job forms and trains.

Usage: tiny_train.py [HOLD_DIR]
Prints one JSON line: {"rank", "w", "port"}: w after 3 steps of w -= 0.5 * (w - mean(r + 1)) over the
N replicas, the same on every worker when the all-reduce ran over the whole cluster. With HOLD_DIR,
then prints "ready RANK" and waits (at most 120 s) for HOLD_DIR/go, so a test can look at the
worker's sockets while its server runs.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf


def main(argv: list[str]) -> int:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_resolver.task_id
    with strategy.scope():
        w = tf.Variable(0.0)

    @tf.function
    def step() -> None:
        def replica() -> None:
            context = tf.distribute.get_replica_context()
            target = tf.cast(context.replica_id_in_sync_group, tf.float32) + 1.0  # replica r pulls w to r + 1
            with tf.GradientTape() as tape:
                loss = (w - target) ** 2
            grad = context.all_reduce(tf.distribute.ReduceOp.MEAN, tape.gradient(loss, w))
            w.assign_sub(0.25 * grad)

        strategy.run(replica)

    for _ in range(3):
        step()
    address = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][rank]
    print(json.dumps({"rank": rank, "w": float(w.numpy()), "port": int(address.rsplit(":", 1)[1])}), flush=True)
    if argv:
        print(f"ready {rank}", flush=True)
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(argv[0], "go")) and time.monotonic() < deadline:
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
