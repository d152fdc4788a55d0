"""The GPU commands against the python+NVML floor, whole processes, over the fake NVML serving the real H200.

The floor is what ``../shared/real-gpu/check.sh`` times on a GPU machine: a fresh ``python -c`` that
imports ``pynvml``, starts NVML and reads one GPU (name, UUID, memory, utilization, temperature,
power). Against it, in fresh processes too: ``tfdevices list``, ``list --json``, ``list --processes``,
``select auto:1`` and ``topo``. The cases alternate, ``--rounds`` times; medians of wall time and of
the child's CPU time (user + system, from ``wait4``) are printed with their ratios to the floor side
by side. On a machine whose cores are all busy (load above the core count) a process waits for a core
longer than it runs, and wall time measures the queue: read the CPU column there.

Every process imports the same ``pynvml``: ``tests/pynvml_fake``, nvidia-ml-py's own module whose
NVML calls the fake answers (``FAKE_NVML=h200``, the H200 of ``tests/data/h200-*``). The fake starts
NVML at once, where a real driver takes about 100 ms (127 ms floor on the H200): the ratios here are
tfdevices' own start-up and work against Python's start and nvidia-ml-py's import, harsher than on a
GPU machine. Processes run with ``python -S`` and the repository, the fake and the venv's
site-packages on ``PYTHONPATH``, as after a plain ``pip install``: a development install's
editable-import finder (pathlib, re, subprocess loaded by ``site`` in every process, about 12 ms)
is left out of both sides.

``--tree DIR`` times the tfdevices of another checkout (``git worktree add --detach DIR COMMIT``)
with this one's fake; given several times, the trees' cases alternate in one run, against one
floor: the figures before and after a change, side by side.

Usage::

    .venv/bin/python benchmarks/bench_floor.py [--rounds 21] [--fixture h200] [--tree DIR ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE = os.path.join(REPO, "tests", "pynvml_fake")
FLOOR = (
    "import pynvml; pynvml.nvmlInit(); h=pynvml.nvmlDeviceGetHandleByIndex(0); pynvml.nvmlDeviceGetName(h); "
    "pynvml.nvmlDeviceGetUUID(h); pynvml.nvmlDeviceGetMemoryInfo(h); pynvml.nvmlDeviceGetUtilizationRates(h); "
    "pynvml.nvmlDeviceGetTemperature(h, 0); pynvml.nvmlDeviceGetPowerUsage(h)"
)
CASES: dict[str, list[str]] = {
    "NVML floor": ["-c", FLOOR],
    "tfdevices list": ["-m", "tfdevices", "list"],
    "tfdevices list --json": ["-m", "tfdevices", "list", "--json"],
    "tfdevices list --processes": ["-m", "tfdevices", "list", "--processes"],
    "tfdevices select auto:1": ["-m", "tfdevices", "select", "auto:1"],
    "tfdevices topo": ["-m", "tfdevices", "topo"],
}
TARGET = 1.3  # issue 37: list, select and topo at or below 1.3x the floor


def run_once(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Runs ``python -S ARGS``; returns (wall seconds, the child's CPU seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-S", *args],
        env=env,
        cwd=env["BENCH_TREE"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"python -S {' '.join(args)} failed ({os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_utime + usage.ru_stime


def environment(fixture: str, tree: str = REPO) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("TFDEVICES_INVENTORY", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([FAKE, tree, sysconfig.get_paths()["purelib"]])
    env["FAKE_NVML"] = fixture
    env["BENCH_TREE"] = tree
    return env


def measure(rounds: int, fixture: str, trees: list[str]) -> dict[tuple[str, str], tuple[float, float]]:
    """Medians of (wall, CPU) per (tree, case), the cases of every tree alternating in order and reversed.

    The floor is run once per round (against the first tree's path: it imports no tfdevices but the
    fake's records module).
    """
    envs = {tree: environment(fixture, tree) for tree in trees}
    cases = [(trees[0], "NVML floor")] + [(t, n) for t in trees for n in CASES if n != "NVML floor"]
    for tree, name in cases:  # warm the file cache and write the bytecode, unmeasured
        run_once(CASES[name], envs[tree])
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {c: [] for c in cases}
    for r in range(rounds):
        for tree, name in cases if r % 2 == 0 else list(reversed(cases)):
            runs[(tree, name)].append(run_once(CASES[name], envs[tree]))
    return {c: (statistics.median(w for w, _ in rs), statistics.median(u for _, u in rs)) for c, rs in runs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21, help="alternating rounds (default 21)")
    parser.add_argument("--fixture", default="h200", help="FAKE_NVML fixture (default h200)")
    parser.add_argument(
        "--tree",
        action="append",
        help="a checkout whose tfdevices is timed (default: this one); give several to compare them in one run",
    )
    opts = parser.parse_args(argv)
    trees = [os.path.abspath(t) for t in opts.tree or [REPO]]
    med = measure(opts.rounds, opts.fixture, trees)
    print(
        f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f}; {opts.rounds} alternating rounds, fresh 'python -S' each, medians; "
        f"fake NVML: {opts.fixture}"
    )
    wall0, cpu0 = med[(trees[0], "NVML floor")]
    print(f"{'NVML floor':28} wall {wall0 * 1e3:6.1f} ms  CPU {cpu0 * 1e3:6.1f} ms")
    for tree in trees:
        label = os.path.relpath(tree, REPO) if tree != REPO else "this tree"
        print(f"\ntfdevices from {label}:")
        print(f"{'case':28} {'wall ms':>8} {'/ floor':>8} {'CPU ms':>8} {'/ floor':>8}")
        for name in CASES:
            if name == "NVML floor":
                continue
            wall, cpu = med[(tree, name)]
            print(f"{name:28} {wall * 1e3:8.1f} {wall / wall0:8.2f} {cpu * 1e3:8.1f} {cpu / cpu0:8.2f}")
        named = ("tfdevices list", "tfdevices select auto:1", "tfdevices topo")
        wall = max(med[(tree, n)][0] / wall0 for n in named)
        cpu = max(med[(tree, n)][1] / cpu0 for n in named)
        print(f"list, select, topo: worst {wall:.2f}x the floor in wall time, {cpu:.2f}x in CPU time (issue 37: 1.3x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
