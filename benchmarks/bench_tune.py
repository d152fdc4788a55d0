"""tune's winner against every candidate measured again, longer: is the winner really the fastest?

    .venv/bin/python benchmarks/bench_tune.py [--steps 20] [--rounds 3] [--models wide_mlp,deep_mlp,small_convnet]

For each model of :mod:`tfdevices.decide.examples`, on 4 logical CPUs: ``tune`` with ``--steps``
and ``--rounds`` (every candidate in its own process, each round in a fresh one), then ``tune``
again with 3x the steps (every candidate again, in fresh processes, as many rounds). Prints, per
model, each candidate's predicted step, its step in the first run and in the long run, and the
winner's long-run throughput against the fastest long-run candidate (the issue's bound: within 5%).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.2f}"


def bench(model: str, steps: int, rounds: int) -> list[str]:
    from tfdevices.decide.tune import tune

    target = f"tfdevices.decide.examples:{model}"
    first = tune(target, steps=steps, rounds=rounds)
    again = {c.name: c for c in tune(target, steps=3 * steps, rounds=rounds).candidates}
    lines = [
        f"### {model}",
        "",
        "| candidate | status | predicted ms | tune ms | 3x longer ms | 3x examples/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for c in first.candidates:
        long = again.get(c.name)
        mark = " (winner)" if c is first.winner else ""
        rate = "-" if not long or not long.examples_per_s else f"{long.examples_per_s:,.0f}"
        lines.append(
            f"| {c.name}{mark} | {c.status} | {_ms(c.predicted_step_s)} | {_ms(c.step_s)} | "
            f"{_ms(long and long.step_s)} | {rate} |"
        )
    ok = [c for c in again.values() if c.examples_per_s]
    best = max(ok, key=lambda c: c.examples_per_s)
    won = again.get(first.winner.name) if first.winner else None
    ratio = (won.examples_per_s / best.examples_per_s) if won and won.examples_per_s else 0.0
    lines += [
        "",
        (
            f"winner {first.winner.name if first.winner else '-'}: {ratio:.1%} of the fastest in the long "
            f"run ({best.name}); flags: {first.flags()}"
        ),
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="wide_mlp,deep_mlp,small_convnet")
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f}", flush=True)
    for model in args.models.split(","):
        print("\n".join(bench(model, args.steps, args.rounds)), flush=True)
        print(f"load average: {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
