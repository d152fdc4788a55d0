"""tune's answer from one run to the next: each model tuned several times, loaded and quiet.

    .venv/bin/python benchmarks/bench_tune.py [--runs 3] [--budget 90] [--load 2] [--candidates auto] [--processes 2]

For each model of :mod:`tfdevices.decide.examples`, on 4 logical CPUs: ``tune`` ``--runs`` times
with its defaults and ``budget_s=--budget``, while ``--load`` processes spin beside it (``0``: none:
what the machine has anyway, which on a shared machine is not nothing). A pair of runs agrees
when they name the same winner or each run's winner is in the other run's tie set; the model's
runs agree when every pair does. Prints, per model, each run's winner, tie set, how sure its
rankings are, the budget each took, the load average (1 minute) before and after it, and the
largest gap between two processes of one candidate timed in the same rounds (why tune runs each
candidate in several), as a Markdown section for ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def agree(a: Any, b: Any) -> bool:
    """Same winner, or each winner in the other's tie set."""
    if a.winner is None or b.winner is None:
        return False
    return a.winner.name == b.winner.name or (a.winner.name in b.tied and b.winner.name in a.tied)


def _spinners(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` busy processes beside tune (``yes > /dev/null``)."""
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(count)]


COLUMNS = (
    "| run | winner | tie set | most rounds | took s | load avg before / after | how sure (first two) "
    "| one candidate, process 2 over process 1 (largest gap) | failed |"
)


def process_gap(r: Any) -> str:
    """The largest gap between two processes of one candidate, timed in the same rounds: its second
    process's step over its first's, with the sign test's 95% interval (``-``: one process each).
    """
    from tfdevices.decide.ties import paired

    gaps = [(c.name, *paired(c.process_step_s[1], c.process_step_s[0])) for c in r.candidates if c.processes > 1]
    if not gaps:
        return "-"
    name, ratio, low, high, n = max(gaps, key=lambda g: abs(math.log(g[1])))
    sure = "no interval" if low is None else f"{low - 1:+.0%} to {high - 1:+.0%}"
    return f"{name} {ratio - 1:+.0%} ({sure}, {n} rounds)"


def _line(i: int, r: Any, load: tuple[float, float]) -> str:
    failed = [f"{c.name} ({c.status}: {c.detail})" for c in r.candidates if c.status not in ("ok", "skipped")]
    sure = "; ".join(c.line() for c in r.comparisons[:2]) or "-"
    return (
        f"| {i + 1} | {r.winner.name if r.winner else '-'} | {', '.join(r.tied) or '-'} | "
        f"{max((c.rounds for c in r.candidates), default=0)} | {r.took_s or 0:.0f} | {load[0]:.1f} / {load[1]:.1f} | "
        f"{sure} | {process_gap(r)} | {'; '.join(failed) or '-'} |"
    )


def bench(model: str, runs: int, budget: float, load: int, candidates: str, processes: int) -> list[str]:
    from tfdevices.decide.tune import tune

    target = f"tfdevices.decide.examples:{model}"
    results, lines = [], []
    spinners = _spinners(load)
    try:
        for i in range(runs):
            before = os.getloadavg()[0]
            wanted = "auto" if candidates == "auto" else tuple(candidates.split(","))
            results.append(tune(target, budget_s=budget, candidates=wanted, processes=processes))
            lines.append(_line(i, results[-1], (before, os.getloadavg()[0])))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    pairs = list(itertools.combinations(range(runs), 2))
    held = [agree(results[a], results[b]) for a, b in pairs]
    per = f"{processes} process{'es' * (processes > 1)} per candidate"
    head = [
        f"#### {model}, {f'with {load} busy processes beside' if load else 'no added load'}, {per}",
        "",
        COLUMNS,
        "|---|---|---|---:|---:|---|---|---|---|",
    ]
    verdict = f"- pairs of runs that agree: **{sum(held)} of {len(pairs)}**"
    return [*head, *lines, "", verdict, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budget", type=float, default=90.0)
    parser.add_argument("--load", type=int, default=0, help="busy processes beside tune (yes > /dev/null)")
    parser.add_argument("--models", default="wide_mlp,deep_mlp,small_convnet")
    parser.add_argument("--candidates", default="auto", help="'auto' or names, as tune takes them")
    parser.add_argument("--processes", type=int, default=2, help="processes per candidate (tune's processes=)")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"load average at the start: {os.getloadavg()[0]:.1f}", flush=True)
    for model in args.models.split(","):
        lines = bench(model, args.runs, args.budget, args.load, args.candidates, args.processes)
        print("\n".join(lines), flush=True)
    print(
        f"load average at the end: {os.getloadavg()[0]:.1f}; {time.perf_counter() - started:.0f} s in all", flush=True
    )


if __name__ == "__main__":
    main()
