"""What measuring each rank's wait costs a step, how soon a slow rank is named, and the scores it gives.

Every job is ``tfdevices launch -n 2`` of this file's worker: a custom loop over
``build_strategy("multi_worker")`` whose ``tf.function`` step does a few 256 x 256 matmuls and sums a
128 x 128 tensor across the workers (an all-reduce; ``--grads``: eight tensors the size of a small MLP's
gradients, in one batch all-reduce, as ``fit``'s optimizer does).

1. Cost per step of the wait measurement (the ``collective_wait`` mend), side by side in one process: each
   worker traces the same step twice, once without the mend's timestamps and once with them, and calls the
   two alternately, one step each (the same order on both ranks), ``--pairs`` times. Reported: each
   function's median step, the median of the pairs' ratios (each pair's two steps ran a few milliseconds
   apart: a busy machine slows both alike), and what the reads of the measured waits (every few steps,
   after the step) cost as a share of the loop. The job runs twice: the two runs' costs side by side.
2. How soon the slow rank is named, against its imbalance: rank 1 sleeps 10%, 50% or 10x the balanced
   step before each step (slow between steps), or does more matmuls before the all-reduce (slow inside its
   step: ``compute``): seconds from the first timed step to the launcher's line, and the steps done by then.
3. Scores against the imbalance made on purpose: rank 1's relative performance score from ``ranks.json``
   against the one the sleep makes (the balanced step's own work over it plus the sleep).

Run: ``.venv/bin/python benchmarks/bench_straggler.py`` (about 6 minutes on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
LINE = "rank 1 is the slow one"
EXTRA = 32  # matmuls rank 1's step does more than rank 0's in the "compute" jobs


def _model(tf, strategy, grads: bool):
    """The variables of the step and its replica function: 4 chained matmuls, then one all-reduce."""
    with strategy.scope():
        w = tf.Variable(tf.zeros((128, 128)))
        m = tf.Variable(tf.random.stateless_normal((256, 256), seed=(3, 4)) * 0.03)
    shapes = [(784, 64), (64,), (64, 64), (64,), (64, 32), (32,), (32, 10), (10,)]

    def replica(extra: int = 0):
        y = m
        for _ in range(4 + extra):
            y = tf.tanh(tf.matmul(y, m))
        context = tf.distribute.get_replica_context()
        value = tf.reduce_mean(y)
        if grads:  # eight gradient-like tensors in one batch all-reduce (fit's optimizer)
            reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [value * tf.ones(s) for s in shapes])
            value = tf.add_n([tf.reduce_mean(r) for r in reduced])
        w.assign_add(context.all_reduce(tf.distribute.ReduceOp.SUM, value * tf.ones((128, 128))))

    return replica


def cost_worker(pairs: int, grads: bool) -> None:
    """Part 1's worker: the same step traced without and with the timestamps, called alternately."""
    import tfdevices
    from tfdevices.mends import collective_wait

    strategy = tfdevices.build_strategy("multi_worker")
    tf = tfdevices.core.tf_door.import_tf()
    rank = tfdevices.launch_info().rank
    replica = _model(tf, strategy, grads)
    plain = tf.function(lambda: strategy.run(replica))
    timed = tf.function(lambda: strategy.run(replica))
    writer, collective_wait.MEND.writer = collective_wait.MEND.writer, None
    plain()  # traced with the mend passing every collective through: no timestamps
    collective_wait.MEND.writer = writer
    timed()  # traced with them
    stamps = {
        name: sum(op.type == "Timestamp" for op in fn.get_concrete_function().graph.get_operations())
        for name, fn in (("plain", plain), ("timed", timed))
    }
    for _ in range(20):  # warm, and the reads' spacing settled
        plain()
        timed()
    times: dict[str, list[float]] = {"plain": [], "timed": []}
    began, reads, spent = time.perf_counter(), collective_wait.MEND.reads, collective_wait.MEND.spent_s
    for n in range(pairs):
        for name, fn in (("plain", plain), ("timed", timed)) if n % 2 == 0 else (("timed", timed), ("plain", plain)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    wall = time.perf_counter() - began
    out = {
        "rank": rank,
        "stamps": stamps,
        "plain_ms": statistics.median(times["plain"]) * 1e3,
        "timed_ms": statistics.median(times["timed"]) * 1e3,
        "ratio": statistics.median(t / p for t, p in zip(times["timed"], times["plain"])),
        "reads": collective_wait.MEND.reads - reads,
        "read_share": (collective_wait.MEND.spent_s - spent) / wall,
        "every": collective_wait.MEND.every,
        "wall_s": wall,
    }
    print("COST " + json.dumps(out), flush=True)


def slow_worker(steps: int, sleep_s: float, extra: int) -> None:
    """Parts 2-3's worker: rank 1 sleeps before each step, or does ``extra`` more matmuls inside it."""
    import tfdevices

    strategy = tfdevices.build_strategy("multi_worker")
    tf = tfdevices.core.tf_door.import_tf()
    rank = tfdevices.launch_info().rank
    replica = _model(tf, strategy, grads=False)
    step = tf.function(lambda: strategy.run(replica, args=(extra if rank == 1 else 0,)))
    for _ in range(20):  # compiled and warm before the timed loop
        step()
    print(f"LOOP {time.time()}", flush=True)
    start = time.perf_counter()
    for _ in range(steps):
        if sleep_s and rank == 1:
            time.sleep(sleep_s)
        step()
    print("TIMING " + json.dumps({"rank": rank, "steps": steps, "wall_s": time.perf_counter() - start}), flush=True)


def _launch(worker: list[str], *extra: str, log_dir: str | None = None) -> dict:
    """Runs one job; returns each rank's TIMING or COST, when the slow rank was named, and the launcher's output."""
    cmd = [sys.executable, "-m", "tfdevices", "launch", "-n", "2", "--all-ranks", *extra]
    if log_dir:
        cmd += ["--log-dir", log_dir, "--tee"]  # every rank's lines on the console too
    cmd += ["--", sys.executable, os.path.abspath(__file__), *worker]
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    named, found, lines, loop = None, {}, [], None
    for line in proc.stdout:  # type: ignore[union-attr]
        lines.append(line.rstrip("\n"))
        if LINE in line and "[launcher]" in line and named is None:
            named = time.time()
        match = re.search(r"\[0\] LOOP ([\d.]+)", line)
        if match:
            loop = float(match.group(1))
        match = re.search(r"(TIMING|COST) (\{.*\})", line)
        if match:
            data = json.loads(match.group(2))
            found[data["rank"]] = data
    proc.wait()
    if proc.returncode != 0 or len(found) != 2:
        raise SystemExit("job failed:\n" + "\n".join(lines[-40:]))
    after = None if named is None or loop is None else named - loop  # from the timed loop's first step
    return {"ranks": found, "named_after_s": after, "lines": lines}


def cost(pairs: int, grads: bool) -> float:
    what = "eight gradient-like tensors and a 128 x 128 one" if grads else "a 128 x 128 tensor"
    print(f"## 1. cost per step: a balanced 2-worker loop all-reducing {what}, {pairs} pairs of steps\n")
    print(
        "| run | rank | timestamps (plain, timed) | plain ms | timed ms | timed/plain (pairs) | reads | every | reads |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    totals, plain = [], []
    for run in (1, 2):
        ranks = _launch(["--cost", str(pairs), str(int(grads))])["ranks"]
        for rank in (0, 1):
            r = ranks[rank]
            print(
                f"| {run} | {rank} | {r['stamps']['plain']}, {r['stamps']['timed']} | {r['plain_ms']:.3f} "
                f"| {r['timed_ms']:.3f} | {r['ratio']:.4f} | {r['reads']} | {r['every']} | {r['read_share']:.3%} |"
            )
            plain.append(r["plain_ms"])
        # the two ranks' steps end together (the all-reduce): their mean, not the larger of two noisy figures
        totals.append(statistics.mean((ranks[r]["ratio"] - 1) + ranks[r]["read_share"] for r in (0, 1)))
    print(
        f"\ncost per step (timestamps + reads, the two ranks' mean): run 1 {totals[0]:+.2%}, "
        f"run 2 {totals[1]:+.2%} (apart by {abs(totals[0] - totals[1]) * 100:.2f} point)\n"
    )
    return statistics.median(plain) / 1e3


def detection(steps: int, balanced_s: float) -> None:
    print(f"## 2-3. how soon, and the scores: rank 1 slower (balanced step {balanced_s * 1e3:.2f} ms)\n")
    print("| imbalance | how | named after s (from step 21) | steps by then | rank 1's score | score made | line |")
    print("|---|---|---:|---:|---:|---:|---|")
    cases = [("10%", 0.1, 0), ("50%", 0.5, 0), ("10x", 10.0, 0), (f"{EXTRA} more matmuls", 0.0, EXTRA)]
    for label, factor, extra in cases:
        sleep_s = factor * balanced_s
        with tempfile.TemporaryDirectory() as log_dir:
            job = _launch(["--slow", str(steps), str(sleep_s), str(extra)], log_dir=log_dir)
            with open(os.path.join(log_dir, "ranks.json"), encoding="utf-8") as f:
                ranks = json.load(f)
        wall = job["ranks"][1]["wall_s"]
        named = job["named_after_s"]
        steps_then = "-" if named is None else 20 + round(named / (wall / steps))  # the 20 warm-up steps first
        score = {r["rank"]: r["score"] for r in ranks["ranks"]}.get(1)
        own = ranks["ranks"][0]["between_ms"] + ranks["ranks"][0]["compute_ms"]  # the fast rank's own work
        made = own / (own + sleep_s * 1e3) if own and sleep_s else None
        line = next((x.split("tfdevices: ", 1)[1][:110] for x in job["lines"] if LINE in x), "not named")
        how = "inside its step" if extra else "between steps"
        print(
            f"| {label} | {how} | {'-' if named is None else f'{named:.1f}'} | {steps_then} "
            f"| {score} | {'-' if made is None else f'{made:.2f}'} | {line} |"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4000, help="pairs of steps (one plain, one timed) of part 1")
    parser.add_argument("--grads", action="store_true", help="part 1 all-reduces eight gradient-like tensors too")
    parser.add_argument("--detect-steps", type=int, default=1500, help="steps of each detection run")
    parser.add_argument("--balanced-ms", type=float, help="skip part 1: the balanced step to make imbalances of")
    parser.add_argument("--no-detect", action="store_true", help="part 1 only")
    args = parser.parse_args()
    print(f"# bench_straggler, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}\n")
    balanced = args.balanced_ms / 1e3 if args.balanced_ms else cost(args.pairs, args.grads)
    if not args.no_detect:
        detection(args.detect_steps, balanced)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--cost":
        cost_worker(int(sys.argv[2]), sys.argv[3] == "1")
    elif len(sys.argv) > 1 and sys.argv[1] == "--slow":
        slow_worker(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
