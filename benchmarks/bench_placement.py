"""Placement capture + TensorBoard write cost, against tracing and running the step once.

For Keras MLPs of 10, 100 and 1,000 Dense layers, in one process, side by side:

* ``baseline``: a fresh ``tf.function`` train step traced, compiled and run once
  (what the first step of any training costs);
* ``capture+write``: :func:`tfdevices.placement.capture` of the same step (which
  recompiles it, without retracing) plus :func:`tfdevices.tensorboard.write_placement`.

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


def measure(layers: int, repeats: int) -> tuple[float, float, int]:
    """Best-of-``repeats`` seconds for (baseline, capture+write) and the op count."""
    import keras

    from tfdevices._tf import import_tf
    from tfdevices.placement import capture
    from tfdevices.tensorboard import write_placement

    tf = import_tf()
    x, y = tf.ones([16, 8]), tf.zeros([16, 1])
    base, cap, ops = [], [], 0
    for _ in range(repeats):
        step = _step(keras, tf, layers)
        start = time.perf_counter()
        step(x, y).numpy()
        base.append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory() as logdir:
            start = time.perf_counter()
            report = capture(step, x, y)
            write_placement(report, logdir)
            cap.append(time.perf_counter() - start)
        ops = len(report.ops)
    return min(base), min(cap), ops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="layer counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=2, help="runs per size; the best is kept")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    measure(2, 1)  # warm up TensorFlow and Keras
    print(f"{'layers':>7} {'ops':>7} {'baseline s':>11} {'capture+write s':>16} {'ratio':>7}")
    results = {}
    for layers in sizes:
        base, cap, ops = measure(layers, args.repeats)
        results[layers] = (base, cap)
        print(f"{layers:>7} {ops:>7} {base:>11.3f} {cap:>16.3f} {cap / base:>6.2f}x")
    if 1000 in results:
        ratio = results[1000][1] / results[1000][0]
        print(f"ratio at 1,000 layers: {ratio:.2f}x (floor <= {RATIO_FLOOR}x): "
              f"{'met' if ratio <= RATIO_FLOOR else 'NOT met'}")
    if 100 in results and 1000 in results:
        growth = results[1000][1] / results[100][1]
        print(f"capture+write growth 100 -> 1,000 layers: {growth:.1f}x (floor <= {GROWTH_FLOOR}x): "
              f"{'met' if growth <= GROWTH_FLOOR else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
