"""Placement capture + TensorBoard write cost, against tracing and running the step once.

For Keras MLPs of 10, 100 and 1,000 Dense layers, in one process, side by side:

* ``baseline``: a fresh ``tf.function`` train step traced, compiled and run once
  (what the first step of any training costs);
* ``first call``: :func:`tfdevices.verify.capture` of a fresh step's first call
  (traced and compiled under capture) plus :func:`tfdevices.tensorboard.write_placement`;
* ``compiled``: the same for the baseline's step, already compiled: capture clears the
  kernel cache, so TensorFlow recompiles it (without retracing).

Prints the ratio at each size and the growth of capture+write from 100 to 1,000
layers, and whether the floors of issue 4 are met (ratio <= 1.5x at 1,000 layers,
growth <= 12x for 10x the layers). Run: ``.venv/bin/python benchmarks/bench_placement.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RATIO_FLOOR = 1.5
sys.setrecursionlimit(20000)  # Keras builds a 1,000-layer Sequential recursively
GROWTH_FLOOR = 12.0


def _step(keras, tf, layers: int):
    model = keras.Sequential([keras.Input((8,)), *[keras.layers.Dense(8, activation="relu") for _ in range(layers)],
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


def measure(layers: int, repeats: int) -> tuple[float, float, float, int]:
    """Best-of-``repeats`` seconds for (baseline, capture of a first call, capture of a compiled step) and ops."""
    import keras

    from tfdevices.core._tf import import_tf
    from tfdevices.verify import capture
    from tfdevices.tensorboard import write_placement

    tf = import_tf()
    x, y = tf.ones([16, 8]), tf.zeros([16, 1])
    base, first, again, ops = [], [], [], 0

    def capture_and_write(step) -> tuple[float, int]:
        with tempfile.TemporaryDirectory() as logdir:
            start = time.perf_counter()
            report = capture(step, x, y)
            write_placement(report, logdir)
            return time.perf_counter() - start, len(report.ops)

    for _ in range(repeats):
        step = _step(keras, tf, layers)
        start = time.perf_counter()
        step(x, y).numpy()
        base.append(time.perf_counter() - start)
        seconds, ops = capture_and_write(step)  # already compiled: capture recompiles it
        again.append(seconds)
        seconds, _ = capture_and_write(_step(keras, tf, layers))  # first call: traced under capture
        first.append(seconds)
    return min(base), min(first), min(again), ops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="layer counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=2, help="runs per size; the best is kept")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    measure(2, 1)  # warm up TensorFlow and Keras
    print(f"{'layers':>7} {'ops':>7} {'baseline s':>11} {'first call s':>13} {'ratio':>7} "
          f"{'compiled s':>11} {'ratio':>7}")
    results = {}
    for layers in sizes:
        base, first, again, ops = measure(layers, args.repeats)
        results[layers] = (base, first, again)
        print(f"{layers:>7} {ops:>7} {base:>11.3f} {first:>13.3f} {first / base:>6.2f}x "
              f"{again:>11.3f} {again / base:>6.2f}x")
    for column, label in ((1, "capture+write of a first call"), (2, "capture+write of a compiled step")):
        if 1000 in results:
            ratio = results[1000][column] / results[1000][0]
            print(f"{label}: ratio at 1,000 layers {ratio:.2f}x (floor <= {RATIO_FLOOR}x): "
                  f"{'met' if ratio <= RATIO_FLOOR else 'NOT met'}")
        if 100 in results and 1000 in results:
            growth = results[1000][column] / results[100][column]
            print(f"{label}: growth 100 -> 1,000 layers {growth:.1f}x (floor <= {GROWTH_FLOOR}x): "
                  f"{'met' if growth <= GROWTH_FLOOR else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
