"""What serving a job's metrics to Prometheus costs a step: ``tfdevices launch --metrics`` scraped every second
against the same job not served.

1. The launcher's work per scrape, in this process: a job's board of 2 ranks (real progress records, 40
   steps each), its stall and slow-rank watch, the GPUs of an H200-shaped inventory file (``TFDEVICES_INVENTORY``;
   on a GPU machine with ``--nvml``, NVML itself), served on 127.0.0.1: the CPU time (``time.process_time``)
   of ``--scrapes`` renders of the registry (what the serving thread does per scrape), and of as many full
   HTTP scrapes (server and client both in this process). The workers do nothing more when served, so at
   one scrape a second the job pays this CPU time once a second, whatever its step: its share of one core
   is the cost, and per step it is that share of each step's time.
2. End to end: a 2-worker job (``tfdevices launch -n 2``) runs a custom loop over ``build_strategy("multi_worker")`` (a
128x128 matmul and an all-reduce per step, as ``tests/scripts/slow_rank.py`` does, nobody slowed): 20 warm-up
steps, then ``--steps`` timed steps; each rank prints its mean step. The two cases alternate ``--pairs`` times:
*off* (no ``--metrics``) and *on* (``--metrics`` with this script scraping ``/metrics`` every second, as a
Prometheus would, for the whole job). Printed: each pair's mean step of rank 0 and rank 1, the on/off ratio
per pair, their median, and the scrapes' latency (median and max, ms) with the number of scrapes.

The workers do nothing more when served (the launcher reads their progress records when scraped): what
could cost them is the launcher's work competing for this 2-core machine's CPUs.

Run: ``.venv/bin/python benchmarks/bench_metrics.py [--pairs 3] [--steps 400] [--scrapes 500] [--nvml]``
(``--pairs 0`` skips part 2).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = """
import os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tfdevices
strategy = tfdevices.build_strategy("multi_worker")
tf = tfdevices.core.tf_door.import_tf()
rank = tfdevices.launch_info().rank
with strategy.scope():
    w = tf.Variable(tf.zeros((128, 128)))
x = tf.random.stateless_normal((128, 128), seed=(1, 2)) * 0.1

@tf.function
def step():
    def replica():
        y = tf.tanh(tf.matmul(x, x))
        context = tf.distribute.get_replica_context()
        w.assign_add(context.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_mean(y) * tf.ones((128, 128))))
    strategy.run(replica)

for _ in range(20):
    step()
steps = int(sys.argv[1])
start = time.perf_counter()
for _ in range(steps):
    step()
print(f"rank {rank} step_ms {(time.perf_counter() - start) / steps * 1e3:.4f}", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(port: int, stop: threading.Event, latencies: list[float]) -> None:
    """Every second, as Prometheus would: GET /metrics (connection refused before the launcher serves)."""
    while not stop.is_set():
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                response.read()
            latencies.append((time.perf_counter() - start) * 1e3)
        except OSError:
            pass
        stop.wait(max(0.0, 1.0 - (time.perf_counter() - start)))


def _job(script: str, steps: int, served: bool) -> tuple[dict[int, float], list[float]]:
    port = _free_port()
    args = [sys.executable, "-m", "tfdevices", "launch", "-n", "2"]
    if served:
        args += ["--metrics", str(port)]
    latencies: list[float] = []
    stop = threading.Event()
    scraper = threading.Thread(target=_scrape, args=(port, stop, latencies), daemon=True)
    if served:
        scraper.start()
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run(
        [*args, "--", sys.executable, script, str(steps)], env=env, cwd=REPO, capture_output=True, text=True
    )
    stop.set()
    if proc.returncode != 0:
        raise SystemExit(f"the job failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    found = {int(r): float(ms) for r, ms in re.findall(r"^\[\d+\] rank (\d+) step_ms ([\d.]+)$", proc.stdout, re.M)}
    return found, latencies


def _h200_inventory(path: str) -> None:
    from tfdevices.gpus.gpuinfo import GpuInfo
    from tfdevices.gpus.inventory import Inventory

    gpus = tuple(
        GpuInfo(
            index=i,
            name="NVIDIA H200",
            uuid=f"GPU-{i}",
            memory_total=150754820096,
            memory_used=106648436736,
            memory_free=44106383360,
            utilization=1.0,
            cuda_ordinal=i,
            temperature=64,
            power_draw_mw=691562,
            clock_sm_mhz=1440,
        )
        for i in range(2)
    )
    with open(path, "w", encoding="utf-8") as f:
        f.write(Inventory(gpus=gpus, source="nvml").to_json())


def _scrape_cost(scrapes: int, nvml: bool) -> None:
    from prometheus_client import generate_latest

    from tfdevices.jobs.metrics import Attempt, JobMetrics, MetricsAddress, gpu_reader
    from tfdevices.jobs.progress import ProgressWriter
    from tfdevices.jobs.stall import StallPolicy, StallWatch

    board = tempfile.mkdtemp(prefix="bench-metrics-")
    writers = [ProgressWriter(board, rank) for rank in (0, 1)]
    for _ in range(40):
        for writer in writers:
            writer.begin_step()
            writer.end_step()
    env = {}
    if not nvml:
        env["TFDEVICES_INVENTORY"] = os.path.join(board, "h200.json")
        _h200_inventory(env["TFDEVICES_INVENTORY"])
    watch = StallWatch(board, [0, 1], StallPolicy(), lambda line: None)
    watch.poll()
    served = JobMetrics(MetricsAddress("127.0.0.1", 0), "bench", gpu_reader(env))
    served.collector.start(Attempt(board, watch, {0: (0,), 1: (1,)}, lambda: {0: None, 1: None}))
    text = generate_latest(served.registry).decode()
    gpus = sum(1 for line in text.splitlines() if line.startswith("hw_gpu_utilization{"))
    for name, call in (
        ("render", lambda: generate_latest(served.registry)),
        ("http scrape", lambda: urllib.request.urlopen(served.server.url(), timeout=5).read()),
    ):
        call()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(scrapes):
            call()
        cpu_ms = (time.process_time() - cpu) / scrapes * 1e3
        wall_ms = (time.perf_counter() - wall) / scrapes * 1e3
        print(
            f"{name}: {cpu_ms:.3f} ms CPU, {wall_ms:.3f} ms wall per scrape ({scrapes}; {len(text)} bytes, "
            f"{gpus} GPU series from {'NVML' if nvml else 'an inventory file'}): at 1 scrape/s "
            f"{cpu_ms / 10:.3f}% of one core"
        )
    served.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--scrapes", type=int, default=500)
    parser.add_argument("--nvml", action="store_true", help="read this machine's GPUs through NVML")
    args = parser.parse_args()
    sys.path.insert(0, REPO)
    _scrape_cost(args.scrapes, args.nvml)
    if args.pairs < 1:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(WORKER)
    ratios, scrapes = [], []
    print(f"{args.pairs} pairs of 2-worker jobs, {args.steps} timed steps each; load {os.getloadavg()[0]:.1f}")
    for pair in range(args.pairs):
        off, _ = _job(f.name, args.steps, served=False)
        on, latencies = _job(f.name, args.steps, served=True)
        scrapes += latencies
        ratio = statistics.mean(on.values()) / statistics.mean(off.values())
        ratios.append(ratio)
        print(
            f"pair {pair + 1}: off {off[0]:.3f}/{off[1]:.3f} ms, on {on[0]:.3f}/{on[1]:.3f} ms (rank 0/1), "
            f"on/off {ratio:.3f}, {len(latencies)} scrapes"
        )
    print(
        f"median on/off {statistics.median(ratios):.3f} (spread {min(ratios):.3f}-{max(ratios):.3f}); "
        f"scrape median {statistics.median(scrapes):.2f} ms, max {max(scrapes):.2f} ms over {len(scrapes)} scrapes; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    os.unlink(f.name)


if __name__ == "__main__":
    main()
