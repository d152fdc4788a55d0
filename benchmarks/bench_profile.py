"""Reading profiles: time and peak memory of :func:`tfdevices.verify.read_profile` against profile size.

Profiles are built in the shape TensorFlow's profiler writes on a GPU machine
(``tests/xspaces.py``): per step, a ``tf.function`` call on the host plane whose
executor launches 100 ops, and on ``/device:GPU:0`` 100 annotated kernels (every
fourth op runs two) and two memcpys, with about the mix of the issue's 3 MB
profile (15,000 host and 8,000 device events). Sizes: about 23 thousand events
(that 3 MB case), 10 thousand, 100 thousand and 1 million events.

Each size is read in a fresh process (best of ``--repeats`` reads, wall time and the process'
CPU time; peak memory is the growth of the process's peak RSS over the read, against the file's
size), so one size's memory does not hide another's. Prints time per event (linear when it
stays flat) and memory per file byte. ``--files`` reads real profiles the same way
(the H200's in ``../shared/real-gpu``: ``h200_jax_transformer.xplane.pb``, 1.8 MB).

Then ``tfdevices placement PROFILE`` on a 3 MB profile against
``python -c "import tensorflow"``: ``--cli-rounds`` pairs, each pair in a fresh
process each and in alternating order; the median of the per-pair ratios is held
to the floor (at most 0.3x).
Run: ``.venv/bin/python benchmarks/bench_profile.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

OPS_PER_STEP = 100
FLOOR_3MB_S = 1.0
CLI_STEPS = 280  # about 3 MB
FLOOR_CLI_RATIO = 0.3  # tfdevices placement PROFILE / python -c "import tensorflow"


def build(path: str, steps: int) -> int:
    """Writes a profile of ``steps`` steps to ``path``; returns its number of events."""
    from tests.xspaces import Space, gpu_copy, gpu_kernel, host_call

    space = Space()
    at = 0.0
    for step in range(steps):
        ops = [(f"model/layer_{i}/MatMul", "MatMul", at + 10 + i * 2, 1.0) for i in range(OPS_PER_STEP)]
        host_call(space, f"__inference_train_step_{step % 3}", at, at + 20 + 2 * OPS_PER_STEP, step + 1, ops)
        for i, (op, kind, start, _) in enumerate(ops):
            gpu_kernel(space, 0, 13, "volta_sgemm_128x64_nn", start + 30, 1.5, f"{op}:{kind}", group=step)
            if i % 4 == 0:
                gpu_kernel(space, 0, 13, "splitKreduce_kernel", start + 31.6, 0.3, f"{op}:{kind}", group=step)
        gpu_copy(space, 0, 14, "H2D", at + 5, 2, 4096, op="IteratorGetNext:IteratorGetNext")
        gpu_copy(space, 0, 15, "D2H", at + 40 + 2 * OPS_PER_STEP, 1, 4)
        at += 40 + 3 * OPS_PER_STEP
    space.write(path)
    return sum(len(line.events) for plane in space.space.planes for line in plane.lines)


def measure_one(path: str, repeats: int) -> dict[str, float]:
    """In this (fresh) process: best read time and peak-RSS growth of reading ``path``."""
    from tfdevices.core.tf_door import import_tf
    from tfdevices.verify import read_profile

    import_tf()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    best = best_cpu = float("inf")
    ops = 0
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        report = read_profile(path)
        best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - cpu)
        ops = len(report.ops)
        del report
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"seconds": best, "cpu_seconds": best_cpu, "peak_growth": peak - before, "ops": ops}


def _read_apart(path: str, repeats: int) -> dict[str, float]:
    """:func:`measure_one` of ``path`` in a fresh process."""
    out = subprocess.run(
        [sys.executable, __file__, "--one", path, str(repeats)], capture_output=True, text=True, check=True, env=_env()
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _seconds(command: list[str]) -> float:
    """Wall time of ``command`` in a fresh process (its output discarded; it must succeed)."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    return time.perf_counter() - start


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=ROOT)


def cli_against_import(path: str, rounds: int) -> dict[str, float]:
    """Paired rounds of ``tfdevices placement PATH`` and ``python -c "import tensorflow"``, in alternating order."""
    cli = [sys.executable, "-m", "tfdevices", "placement", path]
    tf = [sys.executable, "-c", "import tensorflow"]
    pairs = []
    for k in range(rounds):
        if k % 2:
            t_tf, t_cli = _seconds(tf), _seconds(cli)
        else:
            t_cli, t_tf = _seconds(cli), _seconds(tf)
        pairs.append((t_cli, t_tf))
    ratios = sorted(c / t for c, t in pairs)
    return {
        "cli_s": statistics.median(c for c, _ in pairs),
        "tf_s": statistics.median(t for _, t in pairs),
        "ratio": statistics.median(ratios),
        "ratio_min": ratios[0],
        "ratio_max": ratios[-1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        default="100,43,430,4300",
        help="steps per profile, comma-separated (defaults: ~10k, 23k, 100k, 1M events)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="reads per size in its process; the best is kept")
    parser.add_argument("--cli-rounds", type=int, default=5, help="paired rounds of the CLI against import tensorflow")
    parser.add_argument("--files", nargs="*", default=[], help="real profiles, each read in a fresh process too")
    parser.add_argument("--one", nargs=2, metavar=("PATH", "REPEATS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one[0], int(args.one[1]))))
        return 0
    rows = []
    real = [(path, _read_apart(path, args.repeats)) for path in args.files]
    cli: dict[str, float] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for steps in sorted(int(s) for s in args.steps.split(",")):
            path = os.path.join(tmp, f"host-{steps}.xplane.pb")
            events = build(path, steps)
            rows.append((events, os.path.getsize(path), _read_apart(path, args.repeats)))
            os.remove(path)
        if args.cli_rounds > 0:  # a file of about 3 MB, as the issue's (its events carry fewer stats than these)
            path = os.path.join(tmp, "host-3mb.xplane.pb")
            build(path, CLI_STEPS)
            cli_size = os.path.getsize(path)
            cli = cli_against_import(path, args.cli_rounds)
    print(
        f"{'events':>9} {'file MB':>8} {'ops':>7} {'read s':>8} {'cpu s':>7} {'us/event':>9} {'peak MB':>8} "
        f"{'peak/file':>9}"
    )
    for events, size, r in rows:
        print(
            f"{events:>9,} {size / 1e6:>8.2f} {r['ops']:>7,} {r['seconds']:>8.3f} {r['cpu_seconds']:>7.3f} "
            f"{1e6 * r['seconds'] / events:>9.2f} {r['peak_growth'] / 1e6:>8.1f} {r['peak_growth'] / size:>8.1f}x"
        )
    for path, r in real:
        size = os.path.getsize(path) / 1e6
        print(
            f"{os.path.basename(path)}: {size:.2f} MB, {r['ops']:,} ops, read in {r['seconds']:.3f} s "
            f"({r['cpu_seconds']:.3f} s of CPU)"
        )
    small, large = rows[0], rows[-1]
    growth = (large[2]["seconds"] / small[2]["seconds"]) / (large[0] / small[0])
    print(f"time per event, {small[0]:,} -> {large[0]:,} events: {growth:.2f}x (1.00x = linear)")
    issue = min(rows, key=lambda row: abs(row[0] - 23_000))  # the issue's 3 MB profile: ~15k host + 8k device events
    print(
        f"the profile of {issue[0]:,} events (the issue's 3 MB case) reads in {issue[2]['seconds']:.3f} s "
        f"(floor < {FLOOR_3MB_S:g} s: {'met' if issue[2]['seconds'] < FLOOR_3MB_S else 'NOT met'}); "
        f"peak memory {issue[2]['peak_growth'] / issue[0]:.0f} B per event"
    )
    if cli is not None:
        print(
            f"tfdevices placement PROFILE ({cli_size / 1e6:.1f} MB): {cli['cli_s']:.2f} s; "
            f'python -c "import tensorflow": {cli["tf_s"]:.2f} s (medians of {args.cli_rounds} pairs); '
            f"ratio {cli['ratio']:.2f}x (pairs {cli['ratio_min']:.2f}-{cli['ratio_max']:.2f}; floor <= "
            f"{FLOOR_CLI_RATIO:g}x: {'met' if cli['ratio'] <= FLOOR_CLI_RATIO else 'NOT met'})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
