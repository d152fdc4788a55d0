"""PlacementLogger's cost in ``fit``: what it adds on the training thread, measured step by step, and its spread.

A Keras 3 MLP of 100 Dense(8, relu) layers trains for ``--steps`` steps of batch 16,
with no logger, with ``PlacementLogger(at_step=1, every=100)`` and with
``every="auto"`` (budget 1%); the logger's watch is on in both (it sees the train
function's instantiations from the runtime's placed graphs). Each round runs every
case once, in an order that rotates from round to round, each ``fit`` in this one
process after a warm-up ``fit`` traced the step.

The headline is derived from what the logger adds on the training thread, measured
inside each fit, so that the load of a shared machine (which moves a whole fit by tens
of percent) cancels out:

* every step is timed from the first callback's batch begin to the last callback's
  batch end; a capture's cost is its step's time less the median uncaptured step of
  the same fit (the step under the profiler, its start and stop, the hand-off);
* the logger's own hooks (``on_train_batch_begin`` / ``_end``) are timed on every step (their
  mean per step over the fit);
* overhead = (captures x median cost per capture + steps x median hook time per step)
  / the median fit time without a logger.

Reported separately: the worker's CPU time per capture (building the report, comparing,
writing: off the training thread, on a machine with no idle core it competes with
training), and the paired end-to-end figure (each round's fit time over the same
round's fit without a logger: median and range) as a cross-check.
Run: ``.venv/bin/python benchmarks/bench_logger.py`` (twice: the two headlines should agree within a point).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CASES: tuple[object, ...] = (None, 100, "auto")


def _timers(keras: Any) -> tuple[Any, Any, list[float]]:
    """Two callbacks, first and last in the list: each step's time from its first batch begin to its last batch end."""
    times: list[float] = []
    began: list[float] = [0.0]

    class Begin(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            began[0] = time.perf_counter()

    class End(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            times.append(time.perf_counter() - began[0])

    return Begin(), End(), times


def _timed_hooks(logger: Any) -> tuple[list[float], list[float]]:
    """Times the logger's batch hooks (training thread) and its worker's job per capture (CPU time), on the instance."""
    hooks: list[float] = []
    worker_cpu: list[float] = []
    for name in ("on_train_batch_begin", "on_train_batch_end"):
        method = getattr(logger, name)

        def hook(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                hooks.append(time.perf_counter() - start)

        setattr(logger, name, hook)
    build = logger._build

    def timed_build(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()  # the worker thread's own CPU time
        try:
            return build(*args, **kwargs)
        finally:
            worker_cpu.append(time.thread_time() - start)

    logger._build = timed_build
    return hooks, worker_cpu


def _spread(values: list[float]) -> str:
    return f"{min(values):+.1f}% .. {max(values):+.1f}%" if values else "-"


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
    fits: dict[object, list[float]] = {case: [] for case in CASES}
    plain_steps: list[float] = []  # the median step of each fit without a logger
    per_capture: dict[object, list[float]] = {case: [] for case in CASES[1:]}
    per_step_hooks: dict[object, list[float]] = {case: [] for case in CASES[1:]}
    captures: dict[object, list[int]] = {case: [] for case in CASES[1:]}
    worker_cpu: dict[object, list[float]] = {case: [] for case in CASES[1:]}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = CASES[r % len(CASES) :] + CASES[: r % len(CASES)]
            for case in order:
                begin, end, steps = _timers(keras)
                callbacks: list[Any] = [begin]
                logger = None
                if case is not None:
                    logger = PlacementLogger(os.path.join(tmp, f"{case}-{r}"), at_step=1, every=case, framework="keras")
                    hooks, cpu = _timed_hooks(logger)
                    callbacks.append(logger)
                callbacks.append(end)
                start = time.perf_counter()
                model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
                fits[case].append(time.perf_counter() - start)
                if logger is None:
                    plain_steps.append(statistics.median(steps))
                    continue
                logger.report  # noqa: B018 (waits for the worker: every capture built and written)
                captured = set(logger.steps)
                typical = statistics.median(t for i, t in enumerate(steps) if i not in captured)
                per_capture[case] += [steps[i] - typical for i in sorted(captured) if i < len(steps)]
                per_step_hooks[case].append(sum(hooks) / len(steps))  # both hooks, every step
                captures[case].append(len(captured))
                worker_cpu[case] += cpu
    base = statistics.median(fits[None])
    print(
        f"{args.layers}-layer MLP, {args.steps} steps per fit, {args.rounds} interleaved rounds; without a logger: "
        f"fit {base:.2f} s median ({min(fits[None]):.2f}-{max(fits[None]):.2f}), a step "
        f"{1e3 * statistics.median(plain_steps):.2f} ms median"
    )
    print(
        f"{'every':>6} {'captures':>8} {'cost/capture ms':>15} {'(range)':>15} {'hooks us/step':>13} "
        f"{'OVERHEAD':>9} | {'worker cpu ms/capture':>21} {'worker/fit':>10} | {'end-to-end':>10} {'range':>16}"
    )
    for case in CASES[1:]:
        n = statistics.median(captures[case])
        cost = statistics.median(per_capture[case])
        hook = statistics.median(per_step_hooks[case])
        overhead = 100 * (n * cost + args.steps * hook) / base
        cpu = statistics.median(worker_cpu[case]) if worker_cpu[case] else float("nan")
        rounds = [100 * (t / b - 1) for t, b in zip(fits[case], fits[None], strict=True)]
        print(
            f"{case!s:>6} {n:>8.0f} {1e3 * cost:>15.2f} "
            f"{1e3 * min(per_capture[case]):>7.2f}-{1e3 * max(per_capture[case]):<7.2f} {1e6 * hook:>13.1f} "
            f"{overhead:>8.2f}% | {1e3 * cpu:>21.2f} {100 * n * cpu / base:>9.2f}% | "
            f"{statistics.median(rounds):>+9.1f}% {_spread(rounds):>16}"
        )
    print(
        "OVERHEAD: on the training thread, (captures x cost per capture + steps x hook time per step) / fit time "
        "without a logger; worker: CPU time off the training thread; end-to-end: each round's fit over the same "
        "round's fit without a logger (median, range over rounds), the cross-check"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
