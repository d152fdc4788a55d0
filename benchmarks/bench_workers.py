"""Step time of a small Keras model on 1 vs 2 local workers, and the communication share.

Each case runs ``tfdevices launch -n N`` (TF_CONFIG on loopback, TensorFlow's gRPC
collectives) with this file as the worker. A worker trains a small tf_keras MLP
with ``MultiWorkerMirroredStrategy`` (``fit``, a fixed per-worker batch: weak
scaling) and records the time between consecutive batch ends; then it times an
all-reduce of tensors shaped like the model's gradients through the same
strategy. Communication share = all-reduce time / step time. Every worker uses
one intra-op and one inter-op thread, so 1 and 2 workers each get one core per
worker on a 2-core machine.

    .venv/bin/python benchmarks/bench_workers.py [--steps 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PER_WORKER_BATCH = 64
WARMUP = 10


def sharded_data(tf: Any, global_batch: int) -> Any:
    """The benchmarks' input: 8 batches of 128 random features and 10 classes, sharded by data."""
    import numpy as np

    rng = np.random.RandomState(0)
    x = rng.normal(size=(global_batch * 8, 128)).astype("float32")
    y = rng.randint(0, 10, size=(global_batch * 8,))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch).repeat().with_options(options)


def worker(steps: int) -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"  # Keras 3 fit fails under MultiWorkerMirroredStrategy (keras#20585)
    import time

    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    from tfdevices.jobs.env import launch_info

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    info = launch_info()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = PER_WORKER_BATCH * info.world_size
    data = sharded_data(tf, global_batch)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.layers.Dense(512, activation="relu", input_shape=(128,)),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
    ends: list[float] = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            ends.append(time.perf_counter())

    model.fit(data, epochs=1, steps_per_epoch=steps + WARMUP, callbacks=[Clock()], verbose=0)
    step_s = statistics.median(b - a for a, b in zip(ends[WARMUP:], ends[WARMUP + 1 :]))

    shapes = [v.shape for v in model.trainable_variables]

    @tf.function
    def reduce_once() -> object:
        def fn() -> object:
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, [tf.ones(s) for s in shapes])

        return strategy.run(fn)

    times = []
    for i in range(steps + WARMUP):
        start = time.perf_counter()
        out = reduce_once()
        float(tf.reduce_sum(strategy.experimental_local_results(out)[0][0]))
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    params = sum(int(np.prod(s)) for s in shapes)
    print(
        "RESULT "
        + json.dumps(
            {
                "rank": info.rank,
                "workers": info.world_size,
                "step_s": step_s,
                "allreduce_s": statistics.median(times),
                "params": params,
            }
        ),
        flush=True,
    )


def run_case(n: int, steps: int) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "tfdevices",
        "launch",
        "-n",
        str(n),
        "--",
        sys.executable,
        __file__,
        "--worker",
        "--steps",
        str(steps),
    ]
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{n} worker(s) failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return [json.loads(m) for m in re.findall(r"RESULT (\{.*\})", proc.stdout)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.steps)
        return 0
    rows: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.rounds):  # alternate the cases so drift on a shared machine hits both
        for n in (1, 2):
            results = run_case(n, args.steps)
            rows[n].append(
                {
                    "step_s": max(r["step_s"] for r in results),
                    "allreduce_s": max(r["allreduce_s"] for r in results),
                    "params": results[0]["params"],
                }
            )
    summary = {}
    for n, runs in rows.items():
        step = statistics.median(r["step_s"] for r in runs)
        comm = statistics.median(r["allreduce_s"] for r in runs)
        summary[n] = (step, comm)
        print(
            f"{n} worker(s): step {step * 1000:.2f} ms, all-reduce {comm * 1000:.2f} ms "
            f"({comm / step:.0%} of the step), {n * PER_WORKER_BATCH / step:,.0f} samples/s "
            f"[{runs[0]['params']:,} parameters, batch {PER_WORKER_BATCH} per worker]"
        )
    (s1, _), (s2, _) = summary[1], summary[2]
    print(f"step time 2 / 1 workers: {s2 / s1:.2f}x; throughput 2 / 1 workers: {2 * s1 / s2:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
