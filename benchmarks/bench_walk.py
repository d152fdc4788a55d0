"""Capture's walk and build alone: one XSpace read and built again and again (to compare two checkouts).

One step of ``bench_placement`` (``forward`` or ``train``, ``--layers``) is captured once;
its XSpace is parsed once, then ``read_trace`` (the walk) and ``build_report`` (the build)
are timed on it: best of 7 batches of ``--repeat`` calls each. The package is whichever
``tfdevices`` comes first on ``PYTHONPATH``, so two checkouts can be compared in one sitting:
``PYTHONPATH=<checkout> .venv/bin/python benchmarks/bench_walk.py train --layers 100``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.setrecursionlimit(20000)  # Keras builds a 1,000-layer Sequential recursively


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(repeat):
            out = fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("forward", "train"))
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5, help="calls per batch")
    args = parser.parse_args(argv)
    import keras

    import tfdevices
    from tfdevices.core.tf_door import import_tf
    from tfdevices.verify import profiling, recording
    from tfdevices.verify.building import build_report
    from tfdevices.verify.host import parse_space, read_trace

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_placement  # the same steps; tfdevices was imported from PYTHONPATH first

    tf = import_tf()
    make = bench_placement._forward if args.step == "forward" else bench_placement._train
    step = make(keras, tf, args.layers)
    step().numpy()
    recorder, spaces = recording.Recorder(), []
    with profiling._profiling(tf, spaces), recording.record_calls(recorder):
        step().numpy()
    space = parse_space(spaces[0])
    walk, trace = _best(lambda: read_trace(space), args.repeat)
    build, report = _best(lambda: build_report(trace, recorder), args.repeat)
    print(
        f"{os.path.dirname(os.path.dirname(tfdevices.__file__))}: {args.step} {args.layers} layers: "
        f"walk {1e3 * walk:.2f} ms, build {1e3 * build:.2f} ms ({trace.host_events} host events, "  # type: ignore[attr-defined]
        f"{len(report.ops)} ops)"  # type: ignore[attr-defined]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
