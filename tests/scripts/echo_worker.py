"""A worker without TensorFlow, for tests/jobs/test_launcher.py.

Usage: echo_worker.py MODE [ARG]
  report        print one JSON line: what the launcher gave this worker (env, launch_info, gpu_for_rank)
  exit CODES    exit with CODES[rank] (comma-separated); ranks > 0 first sleep until stopped when CODE is 'wait'
  fail-first    rank 1 exits 3 on the first attempt (TFDEVICES_RESTART=0); everyone succeeds after
  trap DIR      write DIR/ready-RANK, then wait for a signal; on SIGTERM write DIR/term-RANK and exit 0
  stubborn DIR  ignore SIGINT and SIGTERM, start a child (sleep) in the same process group, write
                DIR/ready-RANK holding both pids, and sleep
  chatty        print lines forever
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from tfdevices.jobs.env import launch_info
from tfdevices.jobs.ranks import gpu_for_rank


def main(argv: list[str]) -> int:
    mode = argv[0]
    info = launch_info()
    rank = info.rank
    if mode == "report":
        a = gpu_for_rank(info)
        print(
            json.dumps(
                {
                    "rank": rank,
                    "world": info.world_size,
                    "local_rank": info.local_rank,
                    "source": info.source,
                    "ignored": list(info.ignored),
                    "tf_config": os.environ["TF_CONFIG"],
                    "address": info.tf_config.address,
                    "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "gpus": list(a.gpus),
                    "method": a.method,
                    "restart": os.environ.get("TFDEVICES_RESTART"),
                    "virtual": os.environ.get("TFDEVICES_VIRTUAL_DEVICES"),
                }
            )
        )
        print(f"second line from {rank}", file=sys.stderr)
        return 0
    if mode == "exit":
        code = argv[1].split(",")[rank]
        if code == "wait":
            time.sleep(120)
            return 0
        return int(code)
    if mode == "fail-first":
        restart = int(os.environ["TFDEVICES_RESTART"])
        print(f"attempt {restart}", flush=True)
        if rank == 1 and restart == 0:
            time.sleep(1.0)  # rank 0 prints before the launcher stops it
            return 3
        return 0
    if mode == "trap":
        folder = argv[1]

        def on_term(signum: int, frame: object) -> None:
            open(os.path.join(folder, f"term-{rank}"), "w").close()
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, on_term)
        open(os.path.join(folder, f"ready-{rank}"), "w").close()
        time.sleep(120)
        return 1
    if mode == "stubborn":
        import subprocess

        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        child = subprocess.Popen(["sleep", "300"])  # a grandchild of the launcher, in this worker's group
        with open(os.path.join(argv[1], f"ready-{rank}"), "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        time.sleep(300)
        return 1
    if mode == "chatty":
        while True:
            print(f"rank {rank} says something rather long to fill the pipe " + "." * 60, flush=True)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
