"""A real Prometheus server scrapes a real 2-worker job under ``tfdevices launch --metrics``, rank 1 slowed
on purpose; its HTTP API must hold every rank's series, the steps the job ran, and the fast rank waiting. It
also scrapes a job of 1,000 ranks (its collector, served over HTTP), whose dashboard panels over the ranks must
read the job's aggregates.

Debian's ``prometheus`` is started by the test on 127.0.0.1 with its storage in a temporary directory, and
stopped after. Without it the test is skipped, except under ``CI=true`` (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from tests.helpers import REPO, subprocess_env, unavailable
from tests.jobs.test_metrics import dashboard_queries
from tests.jobs.test_metrics_large_job import large_job_collector, scraped
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory
from tfdevices.jobs.metrics import SERIES

SCRIPT = os.path.join(REPO, "tests", "scripts", "metrics_job.py")
STEPS = 200
#: Every series a running job serves for each rank (a worker's exit status only once it exited).
PER_RANK = [
    name for s in SERIES if "rank" in s.labels and s.name != "tfdevices_worker_exit_status" for name in s.served
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _h200_inventory(path: str) -> str:
    """Two GPUs with the numbers a real, busy H200 gave (`tfdevices list --json`, shared/real-gpu)."""
    gpus = tuple(
        GpuInfo(
            index=i,
            name="NVIDIA H200",
            uuid=f"GPU-1be11b0e-d9c7-f695-cfb6-fb82f383fb2{i}",
            pci_bus_id=f"00000000:0{i}:06.0",
            memory_total=150754820096,
            memory_used=106648436736,
            memory_free=44106383360,
            utilization=1.0,
            compute_capability=(9, 0),
            cuda_ordinal=i,
            tf_name=f"/GPU:{i}",
            temperature=64,
            power_draw_mw=691562,
            power_limit_mw=700000,
            performance_state=0,
            clock_sm_mhz=1440,
            clock_memory_mhz=3201,
            mig_enabled=False,
        )
        for i in range(2)
    )
    with open(path, "w", encoding="utf-8") as f:
        f.write(Inventory(gpus=gpus, source="nvml").to_json())
    return path


def _get(url: str, timeout: float = 5) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read().decode())


def _start_prometheus(tmp_path, target: int) -> tuple[subprocess.Popen, str]:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: tfdevices\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
    )
    port = _free_port()
    proc = subprocess.Popen(
        [
            shutil.which("prometheus") or "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "w"),
        start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{api}/-/ready", timeout=2)
            return proc, api
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.3)
    proc.kill()
    pytest.fail("prometheus did not start: " + (tmp_path / "prometheus.log").read_text()[-2000:])


def _query(api: str, promql: str) -> dict[str, float]:
    """rank (and gpu) -> value of an instant query."""
    got = _get(f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert got["status"] == "success", got
    return {
        ",".join(f"{k}={v}" for k, v in sorted(r["metric"].items()) if k in ("rank", "gpu", "part")): float(
            r["value"][1]
        )
        for r in got["data"]["result"]
    }


def _ranged(api: str, query: str, start: float, end: float) -> list:
    """The series a dashboard panel's query shows over the job, ``$job`` and Grafana's rate interval filled in."""
    promql = query.replace("$job", "metrics_job.py").replace("$__rate_interval", "10s")
    params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"}
    got = _get(f"{api}/api/v1/query_range?" + urllib.parse.urlencode(params))
    assert got["status"] == "success", got
    return list(got["data"]["result"])


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
def test_a_real_prometheus_scrapes_every_rank_of_a_job_with_a_slow_rank(tmp_path) -> None:
    if shutil.which("prometheus") is None:
        unavailable("Debian's prometheus is not installed")
    target = _free_port()
    prometheus, api = _start_prometheus(tmp_path, target)
    try:
        began = time.time()
        job = subprocess.run(
            [sys.executable, "-m", "tfdevices", "launch", "-n", "2", "--gpus", "0,1", "--metrics", str(target)]
            + ["--", sys.executable, SCRIPT, str(STEPS), "4"],
            env=subprocess_env({"TFDEVICES_INVENTORY": _h200_inventory(str(tmp_path / "h200.json"))}),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        out = job.stdout + job.stderr
        assert job.returncode == 0 and "[0] rank 0 done" in out and "[1] rank 1 done" in out, out[-3000:]
        last = {name: _query(api, f"last_over_time({name}[10m])") for name in PER_RANK}
        panels = {q: _ranged(api, q, began, time.time()) for q in dashboard_queries() if "label_values" not in q}
        jobs = _get(f"{api}/api/v1/label/job/values")["data"]
    finally:
        os.killpg(prometheus.pid, signal.SIGTERM)
        prometheus.wait(timeout=30)
    for name, found in last.items():
        ranks = {key.split("rank=")[1].split(",")[0] for key in found}
        assert ranks == {"0", "1"}, (name, found)
    assert last["tfdevices_rank_steps_total"] == {"rank=0": STEPS, "rank=1": STEPS}
    wait = last["tfdevices_rank_wait_ratio"]
    assert wait["rank=0"] > wait["rank=1"], wait  # rank 0 waits for rank 1 in the all-reduce
    assert last["hw_gpu_utilization"] == {"gpu=0,rank=0": 1.0, "gpu=1,rank=1": 1.0}
    assert last["hw_gpu_memory_limit_bytes"]["gpu=1,rank=1"] == 150754820096
    assert last["tfdevices_rank_slow"] == {"rank=0": 0.0, "rank=1": 1.0}
    assert "metrics_job.py" in jobs  # the dashboard's job variable
    for query, series in panels.items():  # every panel of the dashboard shows something
        assert series, query
    split = last["tfdevices_rank_split_seconds"]
    assert split["part=between,rank=1"] > split["part=between,rank=0"], split


def _spread_queries() -> list[str]:
    """The dashboard's panels over the ranks (min, median, max): each reads a job's aggregate, else every rank's."""
    return [q for q in dashboard_queries() if "tfdevices_job_" in q and " or " in q]


@pytest.mark.slow
def test_a_real_prometheus_reads_the_spread_panels_of_a_large_job_from_its_aggregates(tmp_path) -> None:
    """A job of 1,000 ranks serves per-rank series for a few ranks only: the panels over the ranks must show the
    min, median and max over all 1,000 (the job's aggregates), not over the ranks kept.
    """
    if shutil.which("prometheus") is None:
        unavailable("Debian's prometheus is not installed")
    collector = large_job_collector(1000, slow=999)
    served = scraped(collector)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    target = _free_port()
    server, _ = start_http_server(target, addr="127.0.0.1", registry=registry)
    prometheus, api = _start_prometheus(tmp_path, target)
    try:
        deadline = time.monotonic() + 60
        while not _query(api, "tfdevices_job_ranks") and time.monotonic() < deadline:
            time.sleep(0.3)
        panels = {q: _query(api, q.replace("$job", "train.py")) for q in _spread_queries()}
    finally:
        os.killpg(prometheus.pid, signal.SIGTERM)
        prometheus.wait(timeout=30)
        server.shutdown()
    assert len(panels) == 9, sorted(panels)  # step time, wait share, slow-rank score: min, median and max each
    for query, got in panels.items():
        name, stat = re.search(r"(tfdevices_job_\w+)\{[^}]*stat=\"(\w+)\"", query).groups()  # type: ignore[union-attr]
        over_all = served[(name, (("job", "train.py"), ("node", "n0"), ("stat", stat)))]
        assert got == {"": pytest.approx(over_all)}, (query, got, over_all)
    kept = [v for (name, labels), v in served.items() if name == "tfdevices_rank_slow_score"]
    assert 0 < len(kept) < 100  # the per-rank series: a few ranks only
    median = next(v for q, v in panels.items() if "slow_score" in q and "median" in q)[""]
    assert median != pytest.approx(statistics.median(kept))  # the aggregate, not the median of the ranks kept
