"""Node 0's watch over a long job: its memory, history and timeline, look by look, at 512 and 4,096 ranks.

``bench_job_scale.py`` looks 50 times; a job runs for hours. This runs its slow-rank case (one step a second, the
last rank slow from step 20) for many more looks on the same simulated job (each size in a fresh process) and prints,
every 50 looks: the process' resident memory, the looks the watch's history keeps and one in how many, the timeline's
entries and which steps it keeps, and the CPU of the last 50 looks. A watch whose memory grows with the looks grows
here; one that thins its history stays flat once thinned. ::

    .venv/bin/python benchmarks/bench_watch_memory.py                      # 512 and 4,096 ranks, 400 looks
    .venv/bin/python benchmarks/bench_watch_memory.py --sizes 4096 --looks 800
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_job_scale import SimClock, SimJob, deliver, node_zero, rss_mb

EVERY = 50


def run(ranks: int, looks: int) -> list[dict]:
    """One size: the slow-rank job watched for ``looks`` simulated seconds; a row every :data:`EVERY` looks."""
    root = tempfile.mkdtemp(prefix="bench-watch-memory-")
    clock = SimClock(time.time())
    job = SimJob(root, ranks, 1, "slow", 20, clock)
    signal.signal(signal.SIGUSR1, lambda *_: None)
    said: list[str] = []
    loop, channel = node_zero(job, ranks, root, said)
    rows, spent = [{"looks": 0, "rss_mb": rss_mb()}], []
    for look in range(1, looks + 1):
        job.run_until(clock.now + 1.0)
        if channel is not None:
            deliver(job, channel)
        began = time.process_time()
        loop.look()
        spent.append(time.process_time() - began)
        if look % EVERY == 0:
            summary = loop.watch.summary()
            rows.append(
                {
                    "looks": look,
                    "rss_mb": rss_mb(),
                    "history": len(summary.history),
                    "every": getattr(summary, "every", 1),  # before the history was thinned: none
                    "timeline": len(loop.watch.timeline),
                    "timeline_every": getattr(loop.watch, "timeline_every", 1),
                    "look_ms": statistics.median(spent[-EVERY:]) * 1e3,
                }
            )
    shutil.rmtree(root, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="512,4096")
    parser.add_argument("--looks", type=int, default=400)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"# bench_watch_memory, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {load[0]:.1f} "
          f"{load[1]:.1f} {load[2]:.1f}, {os.cpu_count()} CPUs, {args.looks} looks\n")  # fmt: skip
    found = {}
    for ranks in (int(x) for x in args.sizes.split(",")):
        proc = subprocess.run(
            [sys.executable, __file__, "--one", str(ranks), str(args.looks)], capture_output=True, text=True, check=True
        )
        found[ranks] = json.loads(proc.stdout.splitlines()[-1])
        print(f"| {ranks:,} ranks: looks | RSS MB | history kept (one in) | timeline entries (steps kept every) | "
              "look CPU ms (median of 50) |\n|---:|---:|---|---|---:|")  # fmt: skip
        for row in found[ranks][1:]:
            print(f"| {row['looks']} | {row['rss_mb']:.1f} | {row['history']} (1 in {row['every']}) | "
                  f"{row['timeline']:,} ({row['timeline_every']}) | {row['look_ms']:.1f} |")  # fmt: skip
        print(f"\nRSS before the first look: {found[ranks][0]['rss_mb']:.1f} MB; load {os.getloadavg()[0]:.1f}\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(found, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(run(int(sys.argv[2]), int(sys.argv[3]))), flush=True)
    else:
        main()
