"""Linear at cluster scale: SLURM node-list expansion, job layout, rank and task planning at 1k, 4k and 16k.

Every case runs at 1,000, 4,000 and 16,000 hosts or tasks in one process, each
size ``--rounds`` times (the best run, garbage collector paused: the
machine is shared, and the least disturbed run is the code's own cost). The growth ratios t(4k)/t(1k) and t(16k)/t(4k)
are measured side by side: about 4 means linear, about 16 quadratic. The floor
from issue 13: 16,000 hosts or tasks in under 0.1 s.

    python benchmarks/bench_scale.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

from tfdevices.jobs.env import LaunchInfo, launch_info
from tfdevices.jobs.ranks import gpu_for_rank, plan_ranks
from tfdevices.jobs.slurm import expand_nodelist, expand_tasks_per_node
from tfdevices.scopes import plan_assignment

SIZES = (1000, 4000, 16_000)
FLOOR_S = 0.1


def _slurm_env(n: int) -> dict[str, str]:
    return {
        "SLURM_PROCID": str(n - 1),
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": str(n),
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NODELIST": f"node[00000-{n - 1:05d}]",
        "SLURM_STEP_TASKS_PER_NODE": f"1(x{n})",
        "SLURM_NODEID": str(n - 1),
        "SLURM_STEP_GPUS": "0-7",
    }


def cases() -> dict[str, Callable[[int], object]]:
    one = LaunchInfo()
    return {
        "expand_nodelist 'node[00000-N]'": lambda n: expand_nodelist(f"node[00000-{n - 1:05d}]"),
        "expand_nodelist 'h0,h1,...' (N names)": lambda n: expand_nodelist(",".join(f"h{i}" for i in range(n))),
        "expand_nodelist 'r[0-N/4]n[1-4]'": lambda n: expand_nodelist(f"r[0-{n // 4 - 1}]n[1-4]"),
        "expand_tasks_per_node '1(xN)'": lambda n: expand_tasks_per_node(f"1(x{n})"),
        "launch_info: SLURM step of N tasks": lambda n: launch_info(_slurm_env(n)),
        "plan_ranks: N ranks on 8 GPUs (share)": lambda n: plan_ranks(
            one, list(range(8)), local_world_size=n, share=True
        ),
        "plan_ranks: N ranks on N GPUs": lambda n: plan_ranks(one, list(range(n)), local_world_size=n),
        "plan_ranks: N ranks weighted on 8 GPUs": lambda n: plan_ranks(
            one,
            list(range(8)),
            local_world_size=n,
            mapping="weighted",
            share=True,
            speeds={g: 1.0 + g for g in range(8)},
        ),
        "plan_ranks + every GpuAssignment (N on 8 GPUs)": lambda n: list(
            plan_ranks(one, list(range(8)), local_world_size=n, share=True)
        ),
        "gpu_for_rank: last of N ranks on 8 GPUs": lambda n: gpu_for_rank(
            one, list(range(8)), local_rank=n - 1, local_world_size=n, share=True
        ),
        "plan_assignment: N tasks round robin on 8 devices": lambda n: plan_assignment(
            [f"t{i}" for i in range(n)], [f"CPU:{d}" for d in range(8)]
        ),
        "plan_assignment: N tasks by memory on 8 GPUs": lambda n: plan_assignment(
            [f"t{i}" for i in range(n)],
            [str(d) for d in range(8)],
            "by_memory",
            free_memory={str(d): (d + 1) << 30 for d in range(8)},
        ),
    }


def measure(fn: Callable[[int], object], n: int, rounds: int) -> float:
    """Best (least disturbed) seconds of ``fn(n)``; the cyclic garbage collector is paused while it runs (its passes
    over everything alive would otherwise land at random in one case or another)."""
    times = []
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            fn(n)
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    header = f"| case | {' | '.join(f'{n:,} ms' for n in SIZES)} | 4k/1k | 16k/4k | 16k under {FLOOR_S} s |"
    print(header)
    print("|---|" + "---:|" * (len(SIZES) + 3))
    worst = 0.0
    for name, fn in cases().items():
        t = [measure(fn, n, args.rounds) for n in SIZES]
        worst = max(worst, t[-1])
        print(
            f"| {name} | {' | '.join(f'{x * 1000:.2f}' for x in t)} | {t[1] / t[0]:.1f} | {t[2] / t[1]:.1f} | "
            f"{'yes' if t[-1] < FLOOR_S else 'NO'} |"
        )
    print(
        f"\nslowest case at 16,000: {worst * 1000:.1f} ms (floor {FLOOR_S * 1000:.0f} ms); "
        "growth ratios near 4 are linear, near 16 quadratic"
    )


if __name__ == "__main__":
    main()
