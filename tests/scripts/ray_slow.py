"""tests/scripts/slow_rank.py's custom loop on 2 Ray Train workers (a local Ray cluster bound to 127.0.0.1):
rank 1 sleeps 40 ms before each step. Rank 0's watch (no launcher here) names it on its stderr, which Ray
hands to this driver.

Usage: ray_slow.py OUT_DIR STEPS
"""

from __future__ import annotations

import os
import sys


def train_loop(config: dict) -> None:
    sys.path.insert(0, config["repo"])
    from tests.scripts import slow_rank

    slow_rank.main("loop", "between", {1}, config["steps"])


def main(argv: list[str]) -> int:
    from ray_fit import run_on_ray  # beside this script (the script's folder leads sys.path)

    out, steps = os.path.abspath(argv[0]), int(argv[1])
    run_on_ray(train_loop, {"steps": steps}, out, "slow")
    print("ray slow done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
