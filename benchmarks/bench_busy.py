"""Busy time per device, as a capture measures it: the device given four times the work shows about four times the time.

    .venv/bin/python benchmarks/bench_busy.py [--rounds 15]

On two logical CPU devices, one traced step runs one 384x384 MatMul on CPU:0 and a chain of four of the same size on
CPU:1 after it (the chain waits for CPU:0's result, so the two never run at once and each has the whole machine).
Each round captures the step once (``tfdevices.verify.capture``) and prints each device's busy time and CPU:1's over
CPU:0's; the summary gives the minimum, median and maximum of that ratio, and the rounds in which CPU:1's busy time
was not the larger (a preempted kernel only ever adds time: on a loaded machine one MatMul of CPU:0 has taken five
times its own). The tests check what the report and the views say of the same capture, not its times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="captures of the step (default 15)")
    args = parser.parse_args(argv)
    import tfdevices

    tfdevices.configure(tfdevices.select("none", tfdevices.Inventory()), virtual_devices=2)
    import tensorflow as tf

    from tests.graphs import one_then_four
    from tfdevices.verify import capture

    step, x = one_then_four(tf)
    ratios, inverted = [], 0
    for n in range(args.rounds):
        busy = capture(step, x).busy_us
        ratio = busy["CPU:1"] / busy["CPU:0"]
        ratios.append(ratio)
        inverted += ratio <= 1
        print(f"round {n + 1}: CPU:0 {busy['CPU:0']:.0f} us, CPU:1 {busy['CPU:1']:.0f} us, CPU:1 / CPU:0 {ratio:.2f}")
    print(
        f"CPU:1 / CPU:0 busy time over {args.rounds} captures: min {min(ratios):.2f}, median "
        f"{statistics.median(ratios):.2f}, max {max(ratios):.2f}; CPU:1 not the larger in {inverted} of {args.rounds}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
