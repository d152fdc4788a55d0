"""Runs every benchmark (benchmarks/bench_*.py) in turn: ``make bench`` or
``python benchmarks/run.py [NAME ...]`` (e.g. ``discovery placement``).

Each benchmark measures its ratios side by side in one run and prints them;
results worth keeping go to benchmarks/RESULTS.md with the command that gave them.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str]) -> int:
    scripts = sorted(glob.glob(os.path.join(HERE, "bench_*.py")))
    known = {os.path.basename(s)[6:-3]: s for s in scripts}
    unknown = [n for n in argv if n not in known]
    if unknown:
        print(f"benchmarks/run.py: unknown benchmark(s) {unknown}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    status = 0
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE), TF_CPP_MIN_LOG_LEVEL="2")
    for name in argv or list(known):
        print(f"=== {name}: {os.path.relpath(known[name])}", flush=True)
        status |= subprocess.call([sys.executable, known[name]], env=env)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
