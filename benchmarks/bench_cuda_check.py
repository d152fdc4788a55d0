"""The TensorFlow-free CUDA checks against ``tfdevices list``, and ``import tfdevices`` without them.

Each case runs in a fresh process, the cases alternating, ``--rounds`` times; medians of wall time:

* ``tfdevices list`` (NVML, the floor of anything that reads the GPUs) and ``tfdevices doctor --cuda`` (the
  diagnosis: metadata, build info, masks, device nodes, NVML, the loader's search, and the driver and libraries
  loaded in a fresh process of its own), each over this machine's NVML and over the fake NVML serving the real
  H200 (``tests/pynvml_fake``);
* ``python -c "import tensorflow as tf; tf.config.list_physical_devices('GPU')"``: what asking TensorFlow costs
  (``--tf-rounds``, 0 to leave it out);

then, in this process, the parts of the diagnosis (best of ``--repeat``): reading the facts without the probe,
the probe (a fresh ``python -I -S``), and the checks over the facts; and which modules ``import tfdevices`` loads
(none of the CUDA checks' modules, and nothing heavy).

Without an NVIDIA driver (as on the machine of RESULTS.md) no library is found, so the probe loads nothing:
on a GPU machine it loads libcuda and up to ten CUDA libraries, which costs more (not measured here).

Usage::

    .venv/bin/python benchmarks/bench_cuda_check.py [--rounds 11] [--tf-rounds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
FAKE = os.path.join(REPO, "tests", "pynvml_fake")
TFDEVICES = [sys.executable, "-m", "tfdevices"]
CASES = {
    "tfdevices list": (TFDEVICES + ["list"], REPO),
    "tfdevices doctor --cuda": (TFDEVICES + ["doctor", "--cuda"], REPO),
    "tfdevices list (fake H200)": (TFDEVICES + ["list"], f"{FAKE}{os.pathsep}{REPO}"),
    "tfdevices doctor --cuda (fake H200)": (TFDEVICES + ["doctor", "--cuda"], f"{FAKE}{os.pathsep}{REPO}"),
}
TF_LIST = [sys.executable, "-c", "import tensorflow as tf; tf.config.list_physical_devices('GPU')"]


def env_for(pythonpath: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=pythonpath, TF_CPP_MIN_LOG_LEVEL="2")
    for name in ("TFDEVICES_INVENTORY", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    return env


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    code = subprocess.call(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, code


def fresh_processes(rounds: int, tf_rounds: int) -> dict[str, tuple[float, int]]:
    cases = {n: (argv, env_for(path)) for n, (argv, path) in CASES.items()}
    for argv, env in cases.values():  # warm the file cache and the bytecode, unmeasured
        run_once(argv, env)
    runs: dict[str, list[tuple[float, int]]] = {n: [] for n in cases}
    for r in range(rounds):
        for name in list(cases) if r % 2 == 0 else list(reversed(cases)):
            runs[name].append(run_once(*cases[name]))
    out = {n: (statistics.median(w for w, _ in rs), rs[-1][1]) for n, rs in runs.items()}
    if tf_rounds:
        tf = [run_once(TF_LIST, env_for(REPO)) for _ in range(tf_rounds)]
        out["TensorFlow lists the GPUs"] = (statistics.median(w for w, _ in tf), tf[-1][1])
    return out


def best_of(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def in_process(repeat: int) -> dict[str, float]:
    from tests.fake_nvml import h200
    from tfdevices.gpus import cuda_check, cuda_facts
    from tfdevices.gpus.nvml import Nvml

    snap = Nvml(module=h200()).snapshot(sensors=False)
    facts = cuda_facts.gather(snapshot=snap, probe=False)
    return {
        "the facts, without the probe (fake H200)": best_of(
            lambda: cuda_facts.gather(snapshot=snap, probe=False), repeat
        ),
        "  of which: the TensorFlow distributions and build info": best_of(cuda_facts.read_tensorflow, repeat),
        "the probe alone (a fresh python -I -S)": best_of(lambda: cuda_facts._probed(facts, os.environ), repeat),
        "the checks over the facts (diagnose)": best_of(lambda: cuda_check.diagnose(facts), repeat),
    }


IMPORTS = (
    "import sys, time; t = time.perf_counter(); import tfdevices; t = time.perf_counter() - t; "
    "mine = sorted(m for m in sys.modules if m.startswith('tfdevices.gpus.cuda')); "
    "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'numpy', 'pynvml', "
    "'ctypes', 'subprocess', 'ast', 'importlib.metadata')); "
    "import tfdevices.gpus.cuda_check, tfdevices.gpus.cuda_facts; "
    "later = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'numpy', 'pynvml')); "
    "print(f'{t * 1000:.1f}', mine, heavy, later)"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11, help="alternating rounds (default 11)")
    parser.add_argument("--tf-rounds", type=int, default=3, help="rounds of TensorFlow listing the GPUs (default 3)")
    parser.add_argument("--repeat", type=int, default=10, help="in-process repeats, best of (default 10)")
    opts = parser.parse_args(argv)
    print(
        f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"{opts.rounds} alternating rounds, fresh process each, medians"
    )
    med = fresh_processes(opts.rounds, opts.tf_rounds)
    print(f"{'case':40} {'wall s':>8} {'exit':>5}")
    for name, (wall, code) in med.items():
        print(f"{name:40} {wall:8.3f} {code:5d}")
    for suffix in ("", " (fake H200)"):
        ratio = med[f"tfdevices doctor --cuda{suffix}"][0] / med[f"tfdevices list{suffix}"][0]
        print(f"doctor --cuda / list{suffix}: {ratio:.2f}x")
    if "TensorFlow lists the GPUs" in med:
        ratio = med["tfdevices doctor --cuda"][0] / med["TensorFlow lists the GPUs"][0]
        print(f"doctor --cuda / TensorFlow listing the GPUs: {ratio:.2f}x")
    print(f"\nin this process (best of {opts.repeat}):")
    for name, seconds in in_process(opts.repeat).items():
        print(f"  {name:58} {seconds * 1000:8.1f} ms")
    imports = [subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, env=env_for(REPO),
                              cwd=REPO, check=True).stdout.strip() for _ in range(5)]  # fmt: skip
    times = sorted(float(line.split()[0]) for line in imports)
    print(
        f"\nimport tfdevices: {times[2]:.1f} ms (median of 5 fresh processes); modules loaded of the CUDA checks, "
        f"of the heavy or the probe's, and heavy after importing the checks: {imports[-1].split(' ', 1)[1]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
