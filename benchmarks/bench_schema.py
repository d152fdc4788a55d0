"""The project's XSpace schema against TensorFlow's ``xplane_pb2``: parsing the same profile, side by side.

Both are protobuf message classes over the same C parser (upb), so their parse times should
match: this measures that, on the 3 MB profile of ``bench_profile.py`` (23,000 events) and on
the real H200 XLA profile (``tests/data/profiles``). TensorFlow's module is loaded by its path
(TensorFlow not imported). Rounds alternate the two; the median of the per-round ratios
(ours / TensorFlow's) is printed. (``read_profile``'s own time: ``bench_profile.py``.)
Run: ``.venv/bin/python benchmarks/bench_schema.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_profile import CLI_STEPS, build  # noqa: E402


def tensorflows_xplane():
    spec = importlib.util.find_spec("tensorflow")
    path = os.path.join(spec.submodule_search_locations[0], "tsl", "profiler", "protobuf", "xplane_pb2.py")
    loaded = importlib.util.spec_from_file_location("bench_tf_xplane_pb2", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def best(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def ratios(a, b, rounds: int) -> tuple[float, float, float]:
    """Median seconds of ``a`` and ``b`` over alternating rounds, and the median of the per-round ratios a / b."""
    ta, tb, r = [], [], []
    for i in range(rounds):
        if i % 2:
            y, x = best(b), best(a)
        else:
            x, y = best(a), best(b)
        ta.append(x)
        tb.append(y)
        r.append(x / y)
    return statistics.median(ta), statistics.median(tb), statistics.median(r)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    from tfdevices.verify.xplane import xplane_module

    ours, theirs = xplane_module().XSpace, tensorflows_xplane().XSpace
    with tempfile.TemporaryDirectory() as tmp:
        synthetic = os.path.join(tmp, "host-3mb.xplane.pb")
        events = build(synthetic, CLI_STEPS)
        real = os.path.join(ROOT, "tests", "data", "profiles", "h200_jax_train_step.xplane.pb")
        print("| profile | bytes | ours ms | TensorFlow's ms | ours / TensorFlow's (median of rounds) |")
        print("|---|---:|---:|---:|---:|")
        for name, path in ((f"synthetic, {events:,} events", synthetic), ("real H200 XLA train step", real)):
            with open(path, "rb") as f:
                data = f.read()
            a, b, r = ratios(lambda d=data: ours.FromString(d), lambda d=data: theirs.FromString(d), args.rounds)
            print(f"| {name} | {len(data):,} | {a * 1e3:.2f} | {b * 1e3:.2f} | {r:.2f} |")


if __name__ == "__main__":
    main()
