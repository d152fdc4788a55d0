"""A 2-worker custom loop whose rank 1 sleeps before each step, for the metrics test under a real Prometheus.

Usage: metrics_job.py STEPS HOLD_S
Runs slow_rank.py's loop (rank 1 sleeps 40 ms before each step: rank 0 waits for it in the all-reduce),
prints "rank R done", then stays HOLD_S seconds so that a scrape sees the steps it ran. The launcher may
give the ranks GPUs from a saved inventory (its metrics read their sensors there); this CPU machine has
none, so the ranks run on the CPU.
"""

from __future__ import annotations

import os
import sys
import time

for name in ("TFDEVICES_INVENTORY", "TFDEVICES_RANK_GPUS"):
    os.environ.pop(name, None)
os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import slow_rank  # noqa: E402 (after the environment above)

if __name__ == "__main__":
    slow_rank.main("loop", "between", {1}, int(sys.argv[1]))
    time.sleep(float(sys.argv[2]))
