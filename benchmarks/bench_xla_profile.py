"""Reading real XLA GPU profiles without TensorFlow installed: a step in command buffers against the same without.

``tests/data/profiles/h200_jax_transformer.xplane.pb`` (1.8 MB: a 12-layer transformer's
training step on an H200, XLA's defaults, its 1,608 kernel runs inside command buffers and tied
to their instructions by the order they ran in) and ``h200_jax_transformer_no_cmdbuf.xplane.pb``
(1.9 MB: the same step, every kernel naming its own instruction) are read with
:func:`tfdevices.verify.read_profile` in fresh processes of a Python without TensorFlow
(``build/venv-no-tf``, which ``make test-no-tf`` makes; ``--python`` names another), the two
files alternating, ``--rounds`` times each. Per process: its whole wall time (start, imports,
one read: what ``tfdevices placement FILE`` costs before printing), the first read in it (the
schemas built, the HLO parsed) and the best of ``--repeats`` reads. The floor: the command-buffer
profile's first read at most 0.5 s (the median); side by side, what placing the kernels by their
order costs (the command-buffer profile against the other, medians) and, with ``--baseline DIR``
(another checkout, ``/work/main`` say), the same reads with that checkout's tfdevices, in the same
rounds: on a busy machine the ratio holds where the seconds do not.

Run: ``.venv/bin/python benchmarks/bench_xla_profile.py [--baseline DIR]`` (after ``make test-no-tf``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "tests", "data", "profiles")
FILES = {
    "command buffers": os.path.join(PROFILES, "h200_jax_transformer.xplane.pb"),
    "without": os.path.join(PROFILES, "h200_jax_transformer_no_cmdbuf.xplane.pb"),
}
FLOOR_S = 0.5
NO_TF_PYTHON = os.path.join(ROOT, "build", "venv-no-tf", "bin", "python")

CHILD = """
import importlib.util, json, sys, time
if importlib.util.find_spec("tensorflow") is not None:
    sys.exit("this Python has TensorFlow installed: the measurement is of reading without it")
start = time.perf_counter()
from tfdevices.verify import read_profile
imported = time.perf_counter()
report = read_profile(sys.argv[1])
first = time.perf_counter() - imported
best = first
for _ in range(int(sys.argv[2])):
    again = time.perf_counter()
    read_profile(sys.argv[1])
    best = min(best, time.perf_counter() - again)
assert "tensorflow" not in sys.modules
print(json.dumps({"import_s": imported - start, "first_s": first, "best_s": best, "ops": len(report.ops)}))
"""


def measure(python: str, path: str, repeats: int, checkout: str = ROOT) -> dict[str, float]:
    """One fresh process reading ``path`` with ``checkout``'s tfdevices: its wall time and what it measured inside."""
    start = time.perf_counter()
    out = subprocess.run(
        [python, "-c", CHILD, path, str(repeats)],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=checkout),
    )
    wall = time.perf_counter() - start
    return dict(json.loads(out.stdout.strip().splitlines()[-1]), process_s=wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=NO_TF_PYTHON, help="a Python without TensorFlow (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=7, help="fresh processes per file, the files alternating")
    parser.add_argument("--repeats", type=int, default=5, help="reads after the first in each process")
    parser.add_argument("--baseline", help="another checkout whose tfdevices reads the same files, side by side")
    args = parser.parse_args(argv)
    if not os.path.exists(args.python):
        print(f"no Python at {args.python}: run `make test-no-tf` first, or pass --python", file=sys.stderr)
        return 2
    results: dict[str, list[dict[str, float]]] = {name: [] for name in FILES}
    readers = [("", ROOT)] + ([(" (baseline)", args.baseline)] if args.baseline else [])
    for k in range(args.rounds):
        for name in FILES if k % 2 == 0 else reversed(list(FILES)):
            for suffix, checkout in readers if k % 2 == 0 else reversed(readers):
                results.setdefault(name + suffix, []).append(measure(args.python, FILES[name], args.repeats, checkout))
    print(f"{'profile':<27} {'MB':>5} {'ops':>6} {'process s':>10} {'import s':>9} {'first read s':>13} {'best s':>7}")
    medians = {}
    for name, runs in results.items():
        medians[name] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        m = medians[name]
        size = os.path.getsize(FILES[name.split(" (")[0]]) / 1e6
        print(
            f"{name:<27} {size:>5.2f} {m['ops']:>6.0f} {m['process_s']:>10.3f} "
            f"{m['import_s']:>9.3f} {m['first_s']:>13.3f} {m['best_s']:>7.3f}"
        )
    first = medians["command buffers"]["first_s"]
    print(
        f"the command-buffer profile's first read: {first:.3f} s (median of {args.rounds}; floor <= {FLOOR_S:g} s: "
        f"{'met' if first <= FLOOR_S else 'NOT met'}); placing by order: "
        f"{first / medians['without']['first_s']:.2f}x the first read of the profile without command buffers, "
        f"{medians['command buffers']['best_s'] / medians['without']['best_s']:.2f}x its best"
    )
    if args.baseline:
        for name in FILES:
            mine, theirs = medians[name], medians[f"{name} (baseline)"]
            print(
                f"{name}: this checkout against the baseline: first read {mine['first_s'] / theirs['first_s']:.2f}x, "
                f"best {mine['best_s'] / theirs['best_s']:.2f}x, process {mine['process_s'] / theirs['process_s']:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
