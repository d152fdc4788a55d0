"""PlacementLogger's cost in ``fit``: the same training with and without it, side by side.

A Keras 3 MLP of 100 Dense(8, relu) layers trains for ``--steps`` steps of batch 16,
with no logger, and with ``PlacementLogger(at_step=1, every=N)`` for N = 10, 100,
1,000 and ``"auto"`` (budget 1%). The cases alternate, ``--rounds`` times, each
``fit`` in this one process (after one warm-up ``fit`` traces the step); the median
wall time of each case is compared with the median of the runs without a logger.
Prints the overhead per case and the captures it took.
Run: ``.venv/bin/python benchmarks/bench_logger.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CASES = (None, 10, 100, 1000, "auto")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="training steps per fit")
    parser.add_argument("--layers", type=int, default=100, help="Dense layers of the model")
    parser.add_argument("--rounds", type=int, default=3, help="fits per case (alternating); medians are compared")
    args = parser.parse_args(argv)

    import keras
    import numpy as np

    from tfdevices.tensorboard.callbacks import PlacementLogger

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            *[keras.layers.Dense(8, activation="relu") for _ in range(args.layers)],
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((16 * args.steps, 8), "float32"), np.zeros((16 * args.steps, 1), "float32")
    model.fit(x[:160], y[:160], batch_size=16, verbose=0)  # traces the train step before anything is timed
    times: dict[object, list[float]] = {case: [] for case in CASES}
    captures: dict[object, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for case in CASES:
                callbacks = (
                    []
                    if case is None
                    else [PlacementLogger(os.path.join(tmp, f"{case}-{r}"), at_step=1, every=case, framework="keras")]
                )
                start = time.perf_counter()
                model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
                times[case].append(time.perf_counter() - start)
                if callbacks:
                    captures[case] = len(callbacks[0].steps)
    base = statistics.median(times[None])
    print(
        f"{args.layers}-layer MLP, {args.steps} steps per fit, median of {args.rounds}: "
        f"{base:.2f} s without a logger ({1e3 * base / args.steps:.2f} ms a step)"
    )
    print(f"{'every':>7} {'captures':>9} {'fit s':>7} {'overhead':>9}")
    for case in CASES[1:]:
        t = statistics.median(times[case])
        print(f"{case!s:>7} {captures[case]:>9} {t:>7.2f} {100 * (t / base - 1):>8.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
