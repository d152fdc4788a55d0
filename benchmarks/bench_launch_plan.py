"""Planning ``tfdevices launch -n N``: time to plan N workers (TF_CONFIG, ranks, GPUs), at two sizes.

Linear planning takes 4x the time for 4x the workers; quadratic 16x. Two cases: the CPU
(no GPU candidates) and 8 GPUs shared by every worker (``--share``), the case that
planned each rank's GPUs over the whole plan again. N stops at the launcher's bound of
1024 workers per machine.

    .venv/bin/python benchmarks/bench_launch_plan.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from tfdevices.jobs.launcher import plan_workers

SIZES = (256, 1024)


def timed(n: int, gpus: list[int], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        plan_workers(n, list(range(20000, 20000 + n)), gpus, share=bool(gpus))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    for name, gpus in (("CPU", []), ("8 GPUs, shared", list(range(8)))):
        small, big = (timed(n, gpus, args.rounds) for n in SIZES)
        print(
            f"{name}: {SIZES[0]} workers {small * 1000:.1f} ms, {SIZES[1]} workers {big * 1000:.1f} ms; "
            f"ratio {big / small:.1f}x for {SIZES[1] // SIZES[0]}x the workers"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
