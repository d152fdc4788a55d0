"""Aborted ranks over many jobs of the kind whose rank TensorFlow's profiler stop aborted, per tree measured.

Each job is ``tfdevices launch -n 2`` of ``tests/scripts/slow_rank.py fit between 1 STEPS``: Keras ``fit`` on two
workers, rank 1 sleeping 40 ms in a callback before each step (slow between steps), the kind of job in which
``tf.profiler.experimental.stop`` aborted the slow rank with "double free or corruption" in 2 of 31 runs while
sampled steps were on. Jobs run one at a time, the trees alternating (``--tree before=build/before --tree
after=.``: the same job with each tree's tfdevices on ``PYTHONPATH``), with ``--load`` busy processes
(``yes > /dev/null``) beside. ``TFDEVICES_STEP_SAMPLING=1`` is set in every job: the old tree samples steps
under the profiler, a tree without the profiler path ignores it.

A job counts as aborted when the launcher's exit status is not 0 or a rank did not print "rank R done"; the
line that says why (glibc's message, a signal, the launcher's "worker R exited with status S") is kept.
Each job is one JSON line in ``--out`` (appended, so a run can be stopped and continued); ``--summary FILE``
prints the table.

Run: ``nohup .venv/bin/python benchmarks/bench_aborts.py --jobs 200 --tree before=build/before --tree after=.
--out build/aborts.jsonl > build/aborts.log 2>&1 &`` (hours: about 40 s a job here), then
``.venv/bin/python benchmarks/bench_aborts.py --summary build/aborts.jsonl``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WHY = re.compile(
    r"double free|corruption|munmap_chunk|free\(\): invalid|Aborted|Segmentation fault|"
    r"worker \d+ exited with status \d+.*|stopped sending heartbeats"
)


def run_job(tree: str, steps: int, timeout: float) -> dict:
    """One job with ``tree``'s tfdevices: its status, seconds, whether a rank aborted and why."""
    tree = os.path.abspath(tree)
    env = {
        **os.environ,
        "PYTHONPATH": tree,
        "TFDEVICES_STEP_SAMPLING": "1",
        "PYTHONFAULTHANDLER": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    script = os.path.join(tree, "tests", "scripts", "slow_rank.py")
    command = [sys.executable, "-m", "tfdevices", "launch", "-n", "2", "--"]
    command += [sys.executable, script, "fit", "between", "1", str(steps)]
    began = time.monotonic()
    try:
        proc = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, timeout=timeout)
        out, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        out, code = f"{err.stdout or ''}{err.stderr or ''} [timed out after {timeout:g} s]", -1
    seconds = time.monotonic() - began
    finished = "[0] rank 0 done" in out and "[1] rank 1 done" in out
    aborted = code != 0 or not finished
    why = sorted({m.group(0) for m in _WHY.finditer(out)}) if aborted else []
    return {"status": code, "seconds": round(seconds, 1), "aborted": aborted, "why": why[:5],
            "tail": out[-2000:] if aborted else ""}  # fmt: skip


def _busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(n)]


def measure(trees: dict[str, str], jobs: int, steps: int, load: int, out: str, timeout: float) -> None:
    done = collections.Counter(json.loads(line)["tree"] for line in _lines(out))
    busy = _busy(load)
    try:
        for n in range(jobs):
            for name, tree in trees.items():
                if done[name] > n:
                    continue  # measured by an earlier run of this file
                result = {"tree": name, "job": n, "load": load, "steps": steps, "at": time.time()}
                result.update(run_job(tree, steps, timeout))
                with open(out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(result) + "\n")
                print(f"{name} job {n}: status {result['status']}, {result['seconds']} s"
                      + (f", ABORTED: {result['why']}" if result["aborted"] else ""), flush=True)  # fmt: skip
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line for line in f if line.strip()]
    except FileNotFoundError:
        return []


def summary(path: str) -> None:
    by_tree: dict[str, list[dict]] = collections.defaultdict(list)
    for line in _lines(path):
        row = json.loads(line)
        by_tree[row["tree"]].append(row)
    print("| tree | jobs | aborted | why | median job s | first, last job (UTC) |")
    print("|---|---:|---:|---|---:|---|")
    for tree, rows in by_tree.items():
        aborted = [r for r in rows if r["aborted"]]
        why = collections.Counter(w for r in aborted for w in r["why"])
        seconds = sorted(r["seconds"] for r in rows)
        span = [time.strftime("%H:%M", time.gmtime(r["at"])) for r in (rows[0], rows[-1])]
        print(f"| {tree} | {len(rows)} | {len(aborted)} | {dict(why) or '-'} | {seconds[len(seconds) // 2]} |"
              f" {span[0]} to {span[1]} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs per tree")
    parser.add_argument("--steps", type=int, default=200, help="steps of each job")
    parser.add_argument("--load", type=int, default=2, help="busy processes beside")
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a tfdevices tree (repeatable)")
    parser.add_argument("--out", default=os.path.join(REPO, "build", "aborts.jsonl"))
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a job counts as hung")
    parser.add_argument("--summary", metavar="FILE", help="print the table of FILE and exit")
    args = parser.parse_args()
    if args.summary:
        summary(args.summary)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # kill PID: the busy processes are stopped too
    trees = dict(t.split("=", 1) for t in args.tree) or {"this": REPO}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    measure(trees, args.jobs, args.steps, args.load, args.out, args.timeout)
    summary(args.out)


if __name__ == "__main__":
    main()
