"""Keras 3 ``fit`` on 2 workers under the three engines, side by side: ``tfdevices launch``, ``srun``, Ray Train.

Every engine runs tests/scripts/keras3_fit.py's training (the same model, data, global batch of 16,
``fit`` with metrics and ``validation_data``, through ``tfdevices.build_strategy("auto")``) on 2 CPU
workers of this machine, ``--rounds`` times in turn; SLURM is a one-node cluster started here
(tests/engines.py, needs root and Debian's slurmd, slurmctld, munge), Ray a local cluster on 127.0.0.1.
Each worker times its own epochs; the step time is the last epoch's over its steps (the first traces and
compiles), the slower worker's, median of the rounds. Prints each engine's step time and its ratio to
``tfdevices launch``.
Run: ``.venv/bin/python benchmarks/bench_engines.py`` (as root, for SLURM).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SCRIPT = os.path.join(ROOT, "tests", "scripts", "keras3_fit.py")
RAY_SCRIPT = os.path.join(ROOT, "tests", "scripts", "ray_fit.py")


def _step_s(out: str, epochs: int, steps: int) -> float:
    """The slower worker's step time in the last epoch (the first one traces and compiles)."""
    results = []
    for rank in (0, 1):
        with open(os.path.join(out, f"result-rank{rank}.json")) as f:
            results.append(json.load(f))
    return max(r["epochs_s"][-1] for r in results) / steps


def _run(command: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, encoding="utf-8", errors="replace", timeout=900
    )
    if proc.returncode != 0:
        raise SystemExit(f"{command[:3]} failed ({proc.returncode}): {proc.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100, help="steps per epoch")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from tests.engines import slurm_cluster

    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    times: dict[str, list[float]] = {"tfdevices launch": [], "srun": [], "Ray Train": []}
    with tempfile.TemporaryDirectory() as tmp, slurm_cluster(os.path.join(tmp, "slurm")) as slurm:
        for r in range(args.rounds):
            for engine in times:
                out = os.path.join(tmp, f"{engine.split()[0]}-{r}")
                os.makedirs(out)
                fit = [SCRIPT, out, str(args.epochs), str(args.steps)]
                if engine == "tfdevices launch":
                    _run([sys.executable, "-m", "tfdevices", "launch", "-n", "2", "--", sys.executable, *fit], env)
                elif engine == "srun":
                    _run(["srun", "-n", "2", "--kill-on-bad-exit=1", sys.executable, *fit], {**env, **slurm})
                else:
                    _run([sys.executable, RAY_SCRIPT, out, str(args.epochs), str(args.steps)], env)
                times[engine].append(_step_s(out, args.epochs, args.steps))
    base = statistics.median(times["tfdevices launch"])
    print(
        f"Keras 3 fit on 2 CPU workers, global batch 16, {args.epochs} x {args.steps} steps, "
        f"median of {args.rounds} rounds (the slower worker's last epoch)"
    )
    print(f"{'engine':<18} {'step ms':>8} {'vs launch':>10}")
    for engine, values in times.items():
        step = statistics.median(values)
        print(f"{engine:<18} {1e3 * step:>8.2f} {step / base:>9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
