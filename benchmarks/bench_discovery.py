"""Discovery cost: tfdevices vs TensorFlow, each in fresh processes.

Measures wall time and peak RSS of a fresh Python process for:

* ``import tfdevices``   vs ``import tensorflow``;
* ``python -m tfdevices list --json``  vs  listing GPUs through TensorFlow
  (``import tensorflow as tf; tf.config.list_physical_devices("GPU")``);
* ``python -m tfdevices list``  vs  the floor: a bare ``python`` that imports
  ``pynvml`` and calls ``nvmlInit`` (nothing can list GPUs with less).

The cases run alternately, ``--rounds`` times each, so a noisy neighbour hits
both sides alike; medians and ratios are printed, with whether the issue's
floors hold (tfdevices list at most 1/20 of the TensorFlow way in time and
1/10 in peak memory; at most 1.5x the NVML floor in time). Peak RSS is the child's ``ru_maxrss`` from ``wait4``.

Usage::

    .venv/bin/python benchmarks/bench_discovery.py [--rounds 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "import tfdevices": ["-c", "import tfdevices"],
    "import tensorflow": ["-c", "import tensorflow"],
    "tfdevices list --json": ["-m", "tfdevices", "list", "--json"],
    "TF list_physical_devices": ["-c", "import tensorflow as tf; tf.config.list_physical_devices('GPU')"],
    "tfdevices list": ["-m", "tfdevices", "list"],
    "NVML floor": ["-c", "import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError:\n    pass"],
}
PAIRS = [  # (tfdevices way, other way, time floor, memory floor): floors as "at most 1/N"
    ("import tfdevices", "import tensorflow", None, None),
    ("tfdevices list --json", "TF list_physical_devices", 20, 10),
]
OVER_FLOOR = [("tfdevices list", "NVML floor", 1.5)]  # (case, floor case, at most this ratio in time)


def run_once(args: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Runs ``python ARGS`` in a fresh process; returns (wall seconds, peak RSS bytes)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{err.decode(errors='replace')}")
    return wall, usage.ru_maxrss * 1024  # Linux reports KiB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--json", metavar="FILE", help="also write the raw figures as JSON")
    opts = parser.parse_args(argv)
    env = dict(os.environ)
    for name in ("TFDEVICES_INVENTORY", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        env.pop(name, None)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    # as after 'pip install': modules run from their compiled bytecode (the warm-up run writes it),
    # as pynvml's own does; PYTHONDONTWRITEBYTECODE would recompile tfdevices in every process
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in CASES}
    for args in CASES.values():  # warm the file cache once, unmeasured
        run_once(args, env)
    for r in range(opts.rounds):
        names = list(CASES) if r % 2 == 0 else list(reversed(CASES))
        for name in names:
            runs[name].append(run_once(CASES[name], env))

    med = {
        name: (statistics.median(w for w, _ in rs), statistics.median(m for _, m in rs)) for name, rs in runs.items()
    }
    print(
        f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"{opts.rounds} alternating rounds, fresh process each, medians"
    )
    print(f"{'case':28} {'wall s':>8} {'peak RSS MiB':>13}")
    for name, (wall, rss) in med.items():
        print(f"{name:28} {wall:8.3f} {rss / 2**20:13.1f}")
    print()
    for ours, theirs, t_floor, m_floor in PAIRS:
        t_ratio = med[ours][0] / med[theirs][0]
        m_ratio = med[ours][1] / med[theirs][1]
        line = (
            f"{ours} / {theirs}: time {t_ratio:.3f} (1/{1 / t_ratio:.1f}), peak RSS {m_ratio:.3f} (1/{1 / m_ratio:.1f})"
        )
        if t_floor:
            line += (
                f"; floor time <= 1/{t_floor}: {'met' if t_ratio <= 1 / t_floor else 'NOT met'}"
                f", memory <= 1/{m_floor}: {'met' if m_ratio <= 1 / m_floor else 'NOT met'}"
            )
        print(line)
    for ours, floor, most in OVER_FLOOR:
        t_ratio = med[ours][0] / med[floor][0]
        print(f"{ours} / {floor}: time {t_ratio:.3f}; at most {most}x: {'met' if t_ratio <= most else 'NOT met'}")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as f:
            json.dump({"rounds": opts.rounds, "runs": runs, "medians": med}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
