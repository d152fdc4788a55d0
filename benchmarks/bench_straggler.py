"""What the slow-rank report costs a step, how soon it names a slow rank, and the scores it gives.

Every job is ``tfdevices launch -n 2`` of this file's worker: a custom loop over
``build_strategy("multi_worker")`` whose ``tf.function`` step does a few 256 x 256 matmuls and sums a
128 x 128 tensor across the workers (an all-reduce); rank 1 sleeps ``--imbalance`` x the balanced job's
whole step before each step when asked (a slow input pipeline or host code on one machine).

1. Cost per step: a balanced job of ``--steps`` steps run twice with the report on (the marks in each
   rank's record and the sampled steps) and twice off (``--mends-off step_progress --no-slow-rank``),
   alternating. Each worker prints its loop's wall time, the steps its sampler ran the profiler around
   and what they cost in all (the profiler's start and stop, the profile read). Reported: the samples'
   cost as a share of the loop (each run's, the two on-runs side by side), and the on/off ratio of the
   median step (end to end, which the machine's noise dominates).
2. How soon the slow rank is named, against its imbalance: for each of 10%, 50% and 10x the balanced
   step, seconds from the first step to the launcher's line, and the steps done by then.
3. Scores against the imbalance made on purpose: rank 1's relative performance score from ``ranks.json``
   against the one the sleep makes (the balanced step's own work over it plus the sleep).

Run: ``.venv/bin/python benchmarks/bench_straggler.py`` (about 4 minutes on a 2-core machine). Its jobs run
with ``TFDEVICES_STEP_SAMPLING=1`` (sampled steps are off by default since 0.3.0).
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
# sampled steps are off by default (TensorFlow's profiler stop can abort a rank: tfdevices/mends/step_sampling.py);
# part 1 measures what they cost, so its jobs ask for them
os.environ.setdefault("TFDEVICES_STEP_SAMPLING", "1")
LINE = "tfdevices: rank 1 is the slow one"


def worker(steps: int, sleep_s: float) -> None:
    import tfdevices

    strategy = tfdevices.build_strategy("multi_worker")
    tf = tfdevices.core._tf.import_tf()
    rank = tfdevices.launch_info().rank
    with strategy.scope():
        w = tf.Variable(tf.zeros((128, 128)))
        m = tf.Variable(tf.random.stateless_normal((256, 256), seed=(3, 4)) * 0.03)

    @tf.function
    def step():
        def replica():
            y = m
            for _ in range(4):
                y = tf.tanh(tf.matmul(y, m))
            context = tf.distribute.get_replica_context()
            w.assign_add(context.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_mean(y) * tf.ones((128, 128))))

        strategy.run(replica)

    for _ in range(20):  # compiled and warm before the timed loop
        step()
    print(f"LOOP {time.time()}", flush=True)
    times = []
    start = time.perf_counter()
    for _ in range(steps):
        if sleep_s and rank == 1:
            time.sleep(sleep_s)
        began = time.perf_counter()
        step()
        times.append(time.perf_counter() - began)
    wall = time.perf_counter() - start
    from tfdevices.mends import step_progress

    sampler = step_progress.MEND.sampler
    print(
        "TIMING "
        + json.dumps(
            {
                "rank": rank,
                "steps": steps,
                "wall_s": wall,
                "median_step_s": statistics.median(times),
                "samples": sampler.samples,
                "spent_s": sampler.spent_s,
                "every": sampler.every,
            }
        ),
        flush=True,
    )


def _launch(steps: int, sleep_s: float, *extra: str, log_dir: str | None = None) -> dict:
    """Runs one job; returns each rank's TIMING, when the slow rank was named, and the launcher's output."""
    cmd = [sys.executable, "-m", "tfdevices", "launch", "-n", "2", "--all-ranks", *extra]
    if log_dir:
        cmd += ["--log-dir", log_dir]
    cmd += ["--", sys.executable, os.path.abspath(__file__), "--worker", str(steps), str(sleep_s)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    began, named, timings, lines, loop = time.monotonic(), None, {}, [], None
    for line in proc.stdout:  # type: ignore[union-attr]
        lines.append(line.rstrip("\n"))
        if LINE in line and named is None:
            named = time.time()
        match = re.search(r"\[0\] LOOP ([\d.]+)", line)
        if match:
            loop = float(match.group(1))
        match = re.search(r"TIMING (\{.*\})", line)
        if match:
            data = json.loads(match.group(1))
            timings[data["rank"]] = data
    proc.wait()
    for rank in (0, 1):  # with --log-dir the console shows rank 0's lines; each rank's are in its log
        path = os.path.join(log_dir or "", f"rank{rank}.log")
        if log_dir and rank not in timings and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                found = re.findall(r"TIMING (\{.*\})", f.read())
            if found:
                timings[rank] = json.loads(found[-1])
    if proc.returncode != 0 or len(timings) != 2:
        raise SystemExit("job failed:\n" + "\n".join(lines[-40:]))
    after = None if named is None or loop is None else named - loop  # from the timed loop's first step
    return {"timings": timings, "named_after_s": after, "lines": lines, "wall_s": time.monotonic() - began}


def cost(steps: int) -> float:
    print(f"## 1. cost per step: a balanced 2-worker loop, {steps} steps\n")
    print("| run | report | median step ms (rank 0, 1) | samples (rank 0, 1) | every | samples' cost, % of the loop |")
    print("|---|---|---|---|---|---|")
    step_ms = {"on": [], "off": []}
    shares = []
    for run in (1, 2):
        for case, extra in (("off", ("--mends-off", "step_progress", "--no-slow-rank")), ("on", ())):
            t = _launch(steps, 0.0, *extra)["timings"]
            medians = [t[r]["median_step_s"] * 1e3 for r in (0, 1)]
            step_ms[case].append(statistics.mean(medians))
            share = max(t[r]["spent_s"] / t[r]["wall_s"] * 100 for r in (0, 1))
            if case == "on":
                shares.append(share)
            print(
                f"| {run} | {case} | {medians[0]:.2f}, {medians[1]:.2f} | {t[0]['samples']}, {t[1]['samples']} "
                f"| {t[0]['every']}, {t[1]['every']} | {share:.2f} |"
            )
    ratio = statistics.median(step_ms["on"]) / statistics.median(step_ms["off"])
    print(
        f"\nsamples' cost: run 1 {shares[0]:.2f}%, run 2 {shares[1]:.2f}% "
        f"(apart by {abs(shares[0] - shares[1]):.2f} point)"
    )
    print(f"median step on/off: {ratio:.3f} (end to end; each run's step moves a few % on this machine)\n")
    return statistics.median(step_ms["off"]) / 1e3


def detection(steps: int, balanced_s: float) -> None:
    print(
        f"## 2-3. how soon, and the scores: rank 1 sleeps before each step (balanced step {balanced_s * 1e3:.2f} ms)\n"
    )
    print(
        "| imbalance | sleep ms | named after s (from step 21) | steps by then | rank 1's score | score made | line |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, factor in (("10%", 0.1), ("50%", 0.5), ("10x", 10.0)):
        sleep_s = factor * balanced_s
        with tempfile.TemporaryDirectory() as log_dir:
            job = _launch(steps, sleep_s, log_dir=log_dir)
            with open(os.path.join(log_dir, "ranks.json"), encoding="utf-8") as f:
                ranks = json.load(f)
        wall = job["timings"][1]["wall_s"]
        named = job["named_after_s"]
        steps_then = "-" if named is None else 20 + round(named / (wall / steps))  # the 20 warm-up steps first
        score = {r["rank"]: r["score"] for r in ranks["ranks"]}.get(1)
        own = ranks["ranks"][0]["between_ms"] + ranks["ranks"][0]["compute_ms"]  # the fast rank's own work
        made = own / (own + sleep_s * 1e3) if own else None
        line = next((x.split("tfdevices: ", 1)[1][:110] for x in job["lines"] if LINE in x), "not named")
        print(
            f"| {label} | {sleep_s * 1e3:.2f} | {'-' if named is None else f'{named:.1f}'} | {steps_then} "
            f"| {score} | {'-' if made is None else f'{made:.2f}'} | {line} |"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps of each cost run")
    parser.add_argument("--detect-steps", type=int, default=600, help="steps of each detection run")
    parser.add_argument("--balanced-ms", type=float, help="skip part 1: the balanced step to make imbalances of")
    args = parser.parse_args()
    print(f"# bench_straggler, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}\n")
    balanced = args.balanced_ms / 1e3 if args.balanced_ms else cost(args.steps)
    detection(args.detect_steps, balanced)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), float(sys.argv[3]))
    else:
        main()
