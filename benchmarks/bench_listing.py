"""Listing and topology cost: tfdevices list --processes and tfdevices topo against gpustat and the NVML floor.

Each case runs in a fresh process, the cases alternating, ``--rounds`` times;
medians of wall time are printed with the ratios side by side:

* ``tfdevices list --processes`` and ``tfdevices topo`` (this machine's NVML);
* ``gpustat`` (``pip install gpustat`` into the venv, for this benchmark only;
  absent: its rows say so);
* the floor: ``import pynvml`` + ``nvmlInit`` (nothing can list GPUs with less);

and, in this process, the Python work on a real-shaped node that no driver is
needed for: discovery (sensors, processes, topology) over the fake NVML serving
the DGX A100 fixture, and the best-linked-set search at its worst (16 GPUs all
alike, auto:8 = 12,870 sets).

Without an NVIDIA driver (as on the machine of RESULTS.md) NVML fails at
``nvmlInit``: every fresh-process case then measures start-up and the failure
path, gpustat included (it exits 1 after NVML's error); the in-process section
measures the per-GPU work.

Usage::

    .venv/bin/python benchmarks/bench_listing.py [--rounds 11]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

GPUSTAT = shutil.which("gpustat", path=os.path.dirname(sys.executable)) or shutil.which("gpustat")
CASES: dict[str, list[str] | None] = {
    "NVML floor": [
        sys.executable,
        "-c",
        "import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError:\n    pass",
    ],
    "tfdevices list --processes": [sys.executable, "-m", "tfdevices", "list", "--processes"],
    "tfdevices topo": [sys.executable, "-m", "tfdevices", "topo"],
    "tfdevices list": [sys.executable, "-m", "tfdevices", "list"],
    "gpustat": [GPUSTAT] if GPUSTAT else None,
}


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    code = subprocess.call(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, code


def fresh_processes(rounds: int) -> dict[str, tuple[float, int]]:
    env = dict(os.environ, PYTHONPATH=REPO)
    for name in ("TFDEVICES_INVENTORY", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    cases = {n: a for n, a in CASES.items() if a}
    for argv in cases.values():  # warm the file cache and the bytecode, unmeasured
        run_once(argv, env)
    runs: dict[str, list[tuple[float, int]]] = {n: [] for n in cases}
    for r in range(rounds):
        for name in list(cases) if r % 2 == 0 else list(reversed(cases)):
            runs[name].append(run_once(cases[name], env))
    return {n: (statistics.median(w for w, _ in rs), rs[-1][1]) for n, rs in runs.items()}


def best_of(fn, repeat: int = 20) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def in_process() -> dict[str, float]:
    from tests import fake_nvml as fk
    from tfdevices.gpus.discovery import discover
    from tfdevices.gpus.inventory import Inventory
    from tfdevices.gpus.selection import select
    from tfdevices.gpus.wiring import best_linked_set

    node = Inventory.load(os.path.join(REPO, "tests", "data", "topo-dgx-a100-nvswitch.json"))
    pids = {str(i): tuple((1000 + 10 * i + k, 1 << 30) for k in range(3)) for i in range(8)}
    fake = fk.from_inventory(node, switches=6, pids=pids)
    return {
        "discover(): 8 GPUs, sensors": best_of(lambda: discover(env={}, nvml_module=fake, topology=False)),
        "discover(): + topology": best_of(lambda: discover(env={}, nvml_module=fake, topology=True)),
        "discover(): + topology + 24 processes (/proc)": best_of(
            lambda: discover(env={}, nvml_module=fake, topology=True, users=True)
        ),
        "select('auto:4') on the DGX A100 fixture": best_of(lambda: select("auto:4", node)),
        "best_linked_set(16, 8), all alike (12,870 sets)": best_of(
            lambda: best_linked_set(16, 8, lambda a, b: 112, list(range(16))), repeat=5
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11, help="alternating rounds (default 11)")
    opts = parser.parse_args(argv)
    print(
        f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"{opts.rounds} alternating rounds, fresh process each, medians; gpustat: {GPUSTAT or 'not installed'}"
    )
    med = fresh_processes(opts.rounds)
    floor = med["NVML floor"][0]
    print(f"{'case':30} {'wall s':>8} {'/ floor':>8} {'exit':>5}")
    for name, (wall, code) in med.items():
        print(f"{name:30} {wall:8.3f} {wall / floor:8.2f} {code:5d}")
    if "gpustat" in med:
        for ours in ("tfdevices list --processes", "tfdevices topo"):
            print(f"{ours} / gpustat: {med[ours][0] / med['gpustat'][0]:.2f}")
    print("\nin this process (fake NVML serving tests/data/topo-dgx-a100-nvswitch.json; best of 20):")
    for name, seconds in in_process().items():
        print(f"  {name:50} {seconds * 1000:8.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
