"""Placement capture of a step that already ran, against one plain call of it.

For Keras 3 MLPs of 100 and 1,000 Dense(8, relu) layers (a ``tf.function`` train step
with GradientTape and SGD, traced and run before anything is measured), in one
process, side by side:

* ``plain``: one call of the traced step (best of ``--calls``);
* ``capture``: :func:`tfdevices.verify.capture` of one call of the same step (best of
  ``--repeats``): TensorFlow's profiler runs around the call, then tfdevices reads
  the trace into a report; nothing is retraced or recompiled;
* tfdevices' own work, measured apart on the same trace: parsing the profiler's
  XSpace, building the report, and :func:`tfdevices.tensorboard.write_placement`.

Prints the ratio capture / plain at each size and the growth of tfdevices' own work
(parse + build + write) from 100 to 1,000 layers, and whether the floors of issue 10
are met (ratio <= 20x at 100 layers; own work grows <= 11x for 10x the layers).
Run: ``.venv/bin/python benchmarks/bench_placement.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.setrecursionlimit(20000)  # Keras builds a 1,000-layer Sequential recursively

RATIO_FLOOR = 20.0
GROWTH_FLOOR = 11.0


def _step(keras, tf, layers: int):
    model = keras.Sequential(
        [keras.Input((8,)), *[keras.layers.Dense(8, activation="relu") for _ in range(layers)], keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


def _best(fn, times: int) -> float:
    best = float("inf")
    for _ in range(times):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure(layers: int, calls: int, repeats: int) -> dict[str, float]:
    """Best-of seconds for a plain call, a capture, and tfdevices' own parse, build and write."""
    import keras

    from tfdevices import verify
    from tfdevices.core._tf import import_tf
    from tfdevices.tensorboard import write_placement

    tf = import_tf()
    x, y = tf.ones([16, 8]), tf.zeros([16, 1])
    step = _step(keras, tf, layers)
    step(x, y).numpy()  # traced and compiled here, before anything is measured
    plain = _best(lambda: step(x, y).numpy(), calls)

    def profiled() -> None:  # TensorFlow's profiler alone: start, the call, stop (writes the XSpace)
        logdir = tempfile.mkdtemp()
        tf.profiler.experimental.start(logdir)
        step(x, y).numpy()
        tf.profiler.experimental.stop()
        shutil.rmtree(logdir, ignore_errors=True)

    profiler = _best(profiled, repeats)
    capture = _best(lambda: verify.capture(lambda: step(x, y).numpy(), warmup=0), repeats)
    from tfdevices.verify import profiling, recording

    recorder, spaces = recording._Recorder(), []
    with profiling._profiling(tf, spaces), recording._recording(recorder):
        step(x, y).numpy()
    parse = _best(lambda: verify.read_trace(spaces[0]), repeats)
    trace = verify.read_trace(spaces[0])
    build = _best(lambda: verify.build_report(trace, recorder), repeats)
    report = verify.build_report(trace, recorder)
    with tempfile.TemporaryDirectory() as logdir:
        write = _best(lambda: write_placement(report, logdir), repeats)
    return {
        "plain": plain,
        "profiler": profiler,
        "capture": capture,
        "parse": parse,
        "build": build,
        "write": write,
        "ops": len(report.ops),
        "kernels": sum(report.kernel_counts.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="layer counts, comma-separated")
    parser.add_argument("--calls", type=int, default=20, help="plain calls per size; the best is kept")
    parser.add_argument("--repeats", type=int, default=5, help="captures per size; the best is kept")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    measure(2, 2, 1)  # warm up TensorFlow, Keras and the profiler
    print(
        f"{'layers':>7} {'ops':>7} {'kernels':>8} {'plain ms':>9} {'profiler':>9} {'capture ms':>11} {'ratio':>7} "
        f"{'/profiler':>9} {'parse ms':>9} {'build ms':>9} {'write ms':>9} {'own ms':>8}"
    )
    results = {}
    for layers in sizes:
        r = results[layers] = measure(layers, args.calls, args.repeats)
        own = r["parse"] + r["build"] + r["write"]
        print(
            f"{layers:>7} {r['ops']:>7} {r['kernels']:>8} {1e3 * r['plain']:>9.2f} {r['profiler'] / r['plain']:>8.2f}x "
            f"{1e3 * r['capture']:>11.2f} {r['capture'] / r['plain']:>6.2f}x {r['capture'] / r['profiler']:>8.2f}x "
            f"{1e3 * r['parse']:>9.2f} {1e3 * r['build']:>9.2f} {1e3 * r['write']:>9.2f} {1e3 * own:>8.2f}"
        )
    if 100 in results:
        ratio = results[100]["capture"] / results[100]["plain"]
        print(
            f"capture of a traced 100-layer step: {ratio:.2f}x one plain call (floor <= {RATIO_FLOOR:g}x): "
            f"{'met' if ratio <= RATIO_FLOOR else 'NOT met'}"
        )
    if 100 in results and 1000 in results:
        own = {n: results[n]["parse"] + results[n]["build"] + results[n]["write"] for n in (100, 1000)}
        growth = own[1000] / own[100]
        print(
            f"tfdevices' own capture work (parse + build + write), 100 -> 1,000 layers: {growth:.1f}x "
            f"(floor <= {GROWTH_FLOOR:g}x): {'met' if growth <= GROWTH_FLOOR else 'NOT met'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
