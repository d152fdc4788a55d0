"""PlacementLogger's cost in ``fit``: the same training with and without it, interleaved, with its spread.

A Keras 3 MLP of 100 Dense(8, relu) layers trains for ``--steps`` steps of batch 16,
with no logger, with ``PlacementLogger(at_step=1, every=100)`` and with
``every="auto"`` (budget 1%); the logger's watch is on in both (it sees the train
function's instantiations from the runtime's placed graphs). Each round runs every
case once, in an order that rotates from round to round, each ``fit`` in this one
process after a warm-up ``fit`` traced the step. A round's overhead for a case is its
fit time over the same round's fit without a logger; the figure is the median over
``--rounds`` rounds, with the spread (lowest and highest round).

It also prints the cost per capture it derives from: the seconds each capture added to
its step on the training thread (``logger.costs``: the step under the profiler, its
start and stop), the worker's seconds per capture (building, comparing, writing: off
the training thread, on the same two cores), and the overhead those predict
(captures x cost per capture / fit time).
Run: ``.venv/bin/python benchmarks/bench_logger.py`` (twice: the two runs should agree within a point).
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

CASES: tuple[object, ...] = (None, 100, "auto")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="training steps per fit")
    parser.add_argument("--layers", type=int, default=100, help="Dense layers of the model")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of every case (order rotating)")
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
    captures: dict[object, list[int]] = {case: [] for case in CASES[1:]}
    costs: dict[object, list[float]] = {case: [] for case in CASES[1:]}
    worker: dict[object, list[float]] = {case: [] for case in CASES[1:]}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = CASES[r % len(CASES) :] + CASES[: r % len(CASES)]
            for case in order:
                logger = (
                    None
                    if case is None
                    else PlacementLogger(os.path.join(tmp, f"{case}-{r}"), at_step=1, every=case, framework="keras")
                )
                start = time.perf_counter()
                model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=[logger] if logger else [])
                times[case].append(time.perf_counter() - start)
                if logger is not None:
                    captures[case].append(len(logger.steps))
                    costs[case] += logger.costs[1:]  # the first capture of a fit also writes the graph
                    worker[case] += logger.worker_costs[1:]
    base = statistics.median(times[None])
    print(
        f"{args.layers}-layer MLP, {args.steps} steps per fit, {args.rounds} interleaved rounds: "
        f"{base:.2f} s without a logger, median ({1e3 * base / args.steps:.2f} ms a step; spread "
        f"{min(times[None]):.2f}-{max(times[None]):.2f} s)"
    )
    print(
        f"{'every':>6} {'captures':>9} {'overhead':>9} {'spread':>16} {'cost/capture ms':>16} "
        f"{'worker ms':>10} {'predicted':>10}"
    )
    for case in CASES[1:]:
        rounds = sorted(100 * (t / b - 1) for t, b in zip(times[case], times[None], strict=True))
        n = statistics.median(captures[case])
        cost = statistics.median(costs[case]) if costs[case] else float("nan")
        work = statistics.median(worker[case]) if worker[case] else float("nan")
        # a capture costs its step's time under the profiler less the step it replaces
        predicted = 100 * n * (cost - base / args.steps) / base
        print(
            f"{case!s:>6} {n:>9.0f} {statistics.median(rounds):>8.1f}% {rounds[0]:>7.1f}% .. {rounds[-1]:>5.1f}% "
            f"{1e3 * cost:>16.2f} {1e3 * work:>10.2f} {predicted:>9.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
