"""Step time of Keras 3 ``fit`` on 2 workers through tfdevices vs tf_keras ``fit`` on the same 2 workers.

Keras 3 ``fit`` under ``MultiWorkerMirroredStrategy`` works through tfdevices' fit adapter
(keras-team/keras#20585); tf_keras' ``fit`` is what people used instead. Both cases
run ``tfdevices launch -n 2`` (TF_CONFIG on loopback, TensorFlow's gRPC ring all-reduce)
with this file as the worker, the same MLP (128 -> 512 -> 512 -> 10), the same data and a
batch of 64 per worker: Keras 3 with ``tfdevices.build_strategy()``, tf_keras
(``TF_USE_LEGACY_KERAS=1``) with TensorFlow's own ``MultiWorkerMirroredStrategy``. Step
time is the median time between consecutive batch ends after the warm-up; the slower
worker counts. Every worker uses one intra-op and one inter-op thread. The cases
alternate, round after round, so drift on a shared machine hits both.

    .venv/bin/python benchmarks/bench_fit.py [--steps 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from bench_workers import sharded_data  # benchmarks/ is on the path of a script run from it

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PER_WORKER_BATCH = 64
WARMUP = 10


def worker(keras_major: str, steps: int) -> None:
    import time

    import tensorflow as tf

    import tfdevices

    tf.config.threading.set_intra_op_parallelism_threads(1)  # before the strategy starts the runtime
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if keras_major == "3":
        strategy = tfdevices.build_strategy("multi_worker")  # installs the fit adapter
        import keras
    else:
        import tf_keras as keras

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    info = tfdevices.launch_info()
    global_batch = PER_WORKER_BATCH * info.world_size
    data = sharded_data(tf, global_batch)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((128,)),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    ends: list[float] = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            ends.append(time.perf_counter())

    history = model.fit(data, epochs=1, steps_per_epoch=steps + WARMUP, callbacks=[Clock()], verbose=0)
    step_s = statistics.median(b - a for a, b in zip(ends[WARMUP:], ends[WARMUP + 1 :]))
    print(
        "RESULT "
        + json.dumps(
            {"rank": info.rank, "step_s": step_s, "keras": keras.__version__, "loss": history.history["loss"][-1]}
        ),
        flush=True,
    )


def run_case(keras_major: str, steps: int) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "tfdevices",
        "launch",
        "-n",
        "2",
        "--",
        sys.executable,
        __file__,
        "--worker",
        keras_major,
        "--steps",
        str(steps),
    ]
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if keras_major == "2":
        env["TF_USE_LEGACY_KERAS"] = "1"
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    results = [json.loads(m) for m in re.findall(r"RESULT (\{.*\})", proc.stdout)]
    if proc.returncode != 0 or len(results) != 2:
        raise SystemExit(f"Keras {keras_major} case failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", choices=("2", "3"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.steps)
        return 0
    steps: dict[str, list[float]] = {"3": [], "2": []}
    versions = {}
    for _ in range(args.rounds):
        for major in ("3", "2"):
            results = run_case(major, args.steps)
            steps[major].append(max(r["step_s"] for r in results))
            versions[major] = results[0]["keras"]
    k3, k2 = (statistics.median(steps[m]) for m in ("3", "2"))
    for major, name in (("3", "Keras 3 fit through tfdevices"), ("2", "tf_keras fit (TensorFlow's strategy)")):
        rounds = ", ".join(f"{s * 1000:.2f}" for s in steps[major])
        print(
            f"{name} [{versions[major]}]: step {statistics.median(steps[major]) * 1000:.2f} ms "
            f"(rounds: {rounds} ms), 2 workers x batch {PER_WORKER_BATCH}"
        )
    print(f"step time Keras 3 via tfdevices / tf_keras: {k3 / k2:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
