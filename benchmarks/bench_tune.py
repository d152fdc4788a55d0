"""tune's winner and ties against every candidate re-measured separately; predictions before and after the probe.

    .venv/bin/python benchmarks/bench_tune.py [--steps 20] [--runs 2] [--models wide_mlp,deep_mlp,small_convnet]

For each model of :mod:`tfdevices.decide.examples`, on 4 logical CPUs: ``tune`` ``--runs`` times with
its defaults (2 rounds each, the candidates still tied with the fastest timed again up to 5), then
every candidate re-measured separately with 3x the steps (2 rounds each, no extra rounds): the
reference. A run meets the issue's bound when its winner's reference throughput is within 5% of the
fastest reference candidate's, or that fastest candidate is in the run's tie set. Prints, per model
and candidate, the step predicted before the copy probe (one copy cost for every pair) and after it
(each pair's probed cost), each run's step and spread, the reference step, and predicted over
measured (run 1) before and after.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.2f}"


def _ratio(predicted: float | None, measured: float | None) -> str:
    return "-" if predicted is None or not measured else f"{predicted / measured:.2f}"


def _cell(c: Any, result: Any) -> str:
    """A run's spread for ``c`` (fastest-second fastest round, rounds), ``*`` the winner, ``=`` tied."""
    from tfdevices.decide.ties import spread

    if c is None or c.status != "ok" or not c.round_step_s:
        return "-" if c is None else c.status
    low, high = spread(c.round_step_s)
    mark = " *" if result.winner is not None and c.name == result.winner.name else " =" if c.name in result.tied else ""
    return f"{_ms(low)}-{_ms(high)} ({len(c.round_step_s)}){mark}"


def bench(model: str, steps: int, runs: int) -> list[str]:
    from tfdevices.decide.tune import tune

    target = f"tfdevices.decide.examples:{model}"
    started = time.perf_counter()
    results = [tune(target, steps=steps) for _ in range(runs)]
    reference = tune(target, steps=3 * steps, rounds=2, max_rounds=2)
    took = time.perf_counter() - started
    ref = {c.name: c for c in reference.candidates}
    first = results[0]
    head = [f"run {i + 1} spread ms (rounds)" for i in range(runs)]
    lines = [
        f"### {model}",
        "",
        "| candidate | predicted before ms | predicted after ms | "
        + " | ".join(head)
        + " | reference ms | before / run 1 | after / run 1 |",
        "|---|---:|---:|" + "---:|" * runs + "---:|---:|---:|",
    ]
    for c in first.candidates:
        again = [{x.name: x for x in r.candidates}.get(c.name) for r in results]
        cells = [_cell(a, r) for a, r in zip(again, results)]
        lines.append(
            f"| {c.name} | {_ms(c.predicted_uncalibrated_s)} | {_ms(c.predicted_step_s)} | "
            + " | ".join(cells)
            + f" | {_ms(ref[c.name].step_s if c.name in ref else None)} | "
            f"{_ratio(c.predicted_uncalibrated_s, c.step_s)} | {_ratio(c.predicted_step_s, c.step_s)} |"
        )
    ok = [c for c in reference.candidates if c.step_s]
    fastest = min(ok, key=lambda c: c.step_s or 0.0)
    lines.append("")
    for i, r in enumerate(results):
        won = ref.get(r.winner.name) if r.winner else None
        share = (fastest.step_s / won.step_s) if won and won.step_s and fastest.step_s else 0.0
        inside = fastest.name in r.tied
        met = "met" if share >= 0.95 or inside else "missed"
        lines.append(
            f"- run {i + 1}: winner **{r.winner.name if r.winner else '-'}** ({r.reason}); tied: "
            f"{', '.join(r.tied) or '-'}; reference fastest {fastest.name}: the winner at {share:.1%} of it, "
            f"{'in' if inside else 'not in'} the tie set: **{met}**"
        )
    probe, links = first.probe_s, first.links
    latency = [link.latency_s * 1e6 for link in links]
    lines += [
        (
            f"- copy probe: {len(links)} pairs in {probe:.2f} s, latency {min(latency):.1f}-{max(latency):.1f} us, "
            f"a cost per byte on {sum(bool(link.bytes_per_s) for link in links)} pairs"
        )
        if probe is not None and links
        else "- copy probe: none",
        f"- {took:.0f} s for the {runs} runs and the reference",
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--models", default="wide_mlp,deep_mlp,small_convnet")
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f}", flush=True)
    for model in args.models.split(","):
        print("\n".join(bench(model, args.steps, args.runs)), flush=True)
        print(f"load average: {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
