"""What stall detection costs a step, and how soon it names a stuck rank.

1. Per-step cost in ``fit``, end to end: a Keras 3 MLP (a step of about 2 ms here) trains ``--steps`` steps with the
   progress mends on (``fit_progress`` and ``step_progress``, writing a real progress record) and off
   (undone), the two cases alternating ``--rounds`` times in one process after a warm-up; each case's
   median step time, their ratio and the spread (min-max of the per-round ratios).
   And the part that runs on the training thread alone: Keras' per-batch callback dispatch with the
   progress callbacks (two record writes) against without, ``--calls`` x 20 batches, no TensorFlow step
   (on a loaded machine the end-to-end ratio's spread is wider than the cost it looks for).
2. Per-call cost in a custom loop: a ``tf.function`` step called ``--calls`` times with ``step_progress``
   marking it against the same calls with the mend undone (median of ``--rounds`` alternating rounds).
3. Detection latency: ``tfdevices launch -n 2 --stall-window W`` of ``tests/scripts/stuck_rank.py`` (rank 1
   sleeps before step 5): seconds from rank 1's last record change to the launcher's report, against W.

Run: ``.venv/bin/python benchmarks/bench_stall.py`` (``--no-launch`` skips part 3).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _fit_cost(steps: int, rounds: int) -> None:
    import keras
    import numpy as np

    from tfdevices.jobs.progress import ProgressWriter
    from tfdevices.mends import fit_progress, step_progress, turn_off

    writer = ProgressWriter(tempfile.mkdtemp(prefix="bench-stall-"), rank=0)
    for mend in (step_progress.MEND, fit_progress.MEND):
        mend.writer = writer
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32,))] + [keras.layers.Dense(64, activation="relu") for _ in range(20)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.random.rand(16 * steps, 32).astype("float32"), np.random.rand(16 * steps, 64).astype("float32")

    def fit_once() -> float:
        start = time.perf_counter()
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
        return (time.perf_counter() - start) / steps

    fit_once()  # trace
    on, off = [], []
    for _ in range(rounds):
        for case in ("off", "on"):
            if case == "on":
                turn_off()  # every mend on again
                step_progress.MEND.apply()
                fit_progress.MEND.apply()
            else:
                turn_off("step_progress", "fit_progress")  # undone: Keras' and TensorFlow's own code
            (on if case == "on" else off).append(fit_once())
    assert writer.started >= steps, "the progress record was not written: the 'on' case measured nothing"
    ratios = [a / b for a, b in zip(on, off)]
    with_marks, without = statistics.median(on), statistics.median(off)
    print(
        f"fit, {steps} steps x {rounds} rounds: step {without * 1e3:.3f} ms without, "
        f"{with_marks * 1e3:.3f} ms with progress marks: x{with_marks / without:.4f} "
        f"(per-round ratios {min(ratios):.4f}-{max(ratios):.4f}); {writer.started} steps recorded"
    )


def _hook_cost(calls: int, rounds: int) -> None:
    """What fit's per-step callback dispatch costs with and without the progress callbacks (no TensorFlow step)."""
    import keras

    from tfdevices.jobs.progress import ProgressWriter
    from tfdevices.mends import fit_progress, turn_off

    writer = ProgressWriter(tempfile.mkdtemp(prefix="bench-stall-"), rank=0)
    fit_progress.MEND.writer = writer
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    times: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(rounds):
        for case in ("off", "on"):
            if case == "on":
                turn_off()
                fit_progress.MEND.apply()
            else:
                turn_off("fit_progress")
            hooks = keras.callbacks.CallbackList([keras.callbacks.History()], add_progbar=False, model=model)
            hooks.on_train_begin()
            start = time.perf_counter()
            for batch in range(calls):
                hooks.on_train_batch_begin(batch)
                hooks.on_train_batch_end(batch)
            times[case].append((time.perf_counter() - start) / calls)
            hooks.on_train_end()
    extra = (statistics.median(times["on"]) - statistics.median(times["off"])) * 1e6
    print(
        f"fit's callbacks, {calls} batches x {rounds} rounds: {statistics.median(times['off']) * 1e6:.2f} us a batch "
        f"without, {statistics.median(times['on']) * 1e6:.2f} us with the progress callbacks: +{extra:.2f} us a step "
        f"({extra / 2000 * 100:.2f}% of a 2 ms step)"
    )


def _call_cost(calls: int, rounds: int) -> None:
    import tensorflow as tf

    from tfdevices.jobs.progress import ProgressWriter
    from tfdevices.mends import step_progress, turn_off

    writer = ProgressWriter(tempfile.mkdtemp(prefix="bench-stall-"), rank=0)
    step_progress.MEND.writer = writer
    v = tf.Variable(0.0)

    @tf.function
    def step() -> None:
        v.assign_add(1.0)

    step_progress.MEND.apply()
    step()
    step_progress.MEND.step_functions.add(id(step))  # as strategy.run would mark it while traced
    on, off = [], []
    for _ in range(rounds):
        for case in ("off", "on"):
            if case == "on":
                turn_off()
                step_progress.MEND.apply()
            else:
                turn_off("step_progress")
            start = time.perf_counter()
            for _ in range(calls):
                step()
            (on if case == "on" else off).append((time.perf_counter() - start) / calls)
    diffs = sorted((a - b) * 1e6 for a, b in zip(on, off))  # each round's pair, measured back to back
    extra = statistics.median(diffs)
    print(
        f"custom loop, {calls} calls x {rounds} rounds: {statistics.median(off) * 1e6:.1f} us a call without, "
        f"{statistics.median(on) * 1e6:.1f} us with marks: +{extra:.1f} us a step, median of the rounds' pairs "
        f"(pairs {diffs[0]:+.1f} to {diffs[-1]:+.1f} us; {extra / 2000 * 100:.2f}% of a 2 ms step)"
    )


def _latency(window: float) -> None:
    script = os.path.join(REPO, "tests", "scripts", "stuck_rank.py")
    command = [sys.executable, "-m", "tfdevices", "launch", "-n", "2", "--stall-window", f"{window:g}"]
    command += ["--stall-timeout", "1", "--", sys.executable, script, "loop", "1", "600"]
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ)
    )
    reported = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if "tfdevices: stall:" in line and reported is None:
            reported = time.time()
            quiet = float(line.split("waited in it for ")[1].split(" s")[0])
    proc.wait(timeout=600)
    if reported is None:
        print(f"window {window:g} s: no stall reported (exit {proc.returncode})")
        return
    print(f"window {window:g} s: reported after {quiet:.0f} s without a move (the window plus up to 1 s of polling)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-launch", action="store_true", help="skip the detection latency (real jobs)")
    args = parser.parse_args(argv)
    _fit_cost(args.steps, args.rounds)
    _hook_cost(args.calls * 20, args.rounds)
    _call_cost(args.calls, args.rounds)
    if not args.no_launch:
        for window in (5.0, 15.0):
            _latency(window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
