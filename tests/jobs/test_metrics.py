"""tfdevices launch --metrics: the exporter's address, its collector rendering the watch's look over real progress
records, a real HTTP scrape, the port closed at the job's end, and bad input refused before any worker starts.
"""

from __future__ import annotations

import doctest
import io
import json
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fake_nvml import FakeGpu, FakeNvml
from tests.helpers import REPO, subprocess_env
from tests.jobs.launching import run_launcher, worker
from tfdevices.core.errors import EnvVarError, LaunchError
from tfdevices.jobs import metrics
from tfdevices.jobs.launch_config import LaunchConfig
from tfdevices.jobs.launcher import launch
from tfdevices.jobs.metrics import (
    AGGREGATES,
    SERIES,
    Attempt,
    JobMetrics,
    MetricsAddress,
    gpu_reader,
    metrics_from_env,
    parse_address,
)
from tfdevices.jobs.progress import ProgressWriter, read_records
from tfdevices.jobs.stall import StallPolicy
from tfdevices.jobs.watch import JobWatch


@pytest.mark.parametrize(
    "text, want",
    [
        ("9100", ("127.0.0.1", 9100)),
        ("127.0.0.2:9100", ("127.0.0.2", 9100)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("node-7.cluster:65535", ("node-7.cluster", 65535)),
        (" 9100 ", ("127.0.0.1", 9100)),
    ],
)
def test_an_address_is_host_and_port_on_loopback_by_default(text: str, want: tuple[str, int]) -> None:
    assert parse_address(text) == MetricsAddress(*want)


@pytest.mark.parametrize("text", ["", "abc", "9100x", "65536", "1.2.3.4:", ":", "-1", "a b:9100", "x" * 400, 9100])
def test_a_bad_address_is_refused_with_a_hint(text: object) -> None:
    with pytest.raises(
        LaunchError, match=r"^--metrics .*: not \[HOST:\]PORT: (it |its port |'a b' is no IPv4).+\. HINT"
    ) as info:
        parse_address(text)
    assert "HINT: e.g. --metrics 9100" in str(info.value)


def test_the_launch_record_holds_the_address_checked_in_its_own_terms() -> None:
    assert LaunchConfig(2, metrics="9100").metrics == MetricsAddress("127.0.0.1", 9100)
    with pytest.raises(LaunchError, match=r"^metrics='x:y': not \[HOST:\]PORT"):
        LaunchConfig(2, metrics="x:y")


@pytest.mark.parametrize(
    "env, want",
    [
        ({}, None),
        ({"TFDEVICES_METRICS": " "}, None),
        ({"TFDEVICES_METRICS": "9100"}, MetricsAddress("127.0.0.1", 9100)),
    ],
)
def test_the_environment_variable(env: dict[str, str], want: MetricsAddress | None) -> None:
    assert metrics_from_env(env) == want


def test_a_bad_environment_variable_is_refused() -> None:
    said = r"^TFDEVICES_METRICS: not \[HOST:\]PORT: its port is not 1 to 5 digits"
    with pytest.raises(EnvVarError, match=said) as info:
        metrics_from_env({"TFDEVICES_METRICS": "secret-port"})
    assert "HINT: e.g. TFDEVICES_METRICS=9100" in str(info.value) and "secret" not in str(info.value)


# --------------------------------------------------------------------------- real records, a real scrape


def _board(directory: str, now: list[float]) -> list[ProgressWriter]:
    return [ProgressWriter(directory, rank, clock=lambda: now[0]) for rank in (0, 1)]


def _steps(writers: list[ProgressWriter], now: list[float], steps: int) -> None:
    """Rank 1 spends 51 ms between steps and 5 ms in each; rank 0 1 ms between and 55 ms in (it waits for
    rank 1 in the all-reduce), as the collectives make it.
    """
    for _ in range(steps):
        start = now[0]
        now[0] = start + 0.001
        writers[0].begin_step()
        now[0] = start + 0.051
        writers[1].begin_step()
        now[0] = start + 0.056  # the all-reduce ends both steps
        writers[0].end_step()
        writers[1].end_step()


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(got: dict, name: str, **labels: str) -> float:
    return got[(name, tuple(sorted(labels.items())))]


def test_a_scrape_renders_the_watchs_look_and_reads_the_gpus(tmp_path) -> None:
    now = [1000.0]
    board = str(tmp_path)
    writers = _board(board, now)
    watch = JobWatch([0, 1], StallPolicy(), clock=lambda: now[0])
    for _ in range(4):  # the watch names rank 1 once it persists over looks that saw new steps
        _steps(writers, now, 10)
        watch.poll(read_records(board))
    assert watch.latest.slow is not None and watch.latest.slow.rank == 1
    fake = FakeNvml([FakeGpu(uuid="GPU-0", util_percent=87, memory_used=3 << 30), FakeGpu(uuid="GPU-1")])
    served = JobMetrics(MetricsAddress("127.0.0.1", 0), "train.py", gpu_reader({}, fake))
    try:
        served.collector.start(Attempt(watch, {0: (0,), 1: (1,)}, lambda: {0: None, 1: 3}, restarts=2))
        _steps(writers, now, 10)  # steps after the look: a scrape renders the look, it reads no record
        got = _scrape(served.server.url())
    finally:
        served.close()
    node = socket.gethostname()
    rank = {r: {"job": "train.py", "node": node, "rank": str(r)} for r in (0, 1)}
    assert [_value(got, "tfdevices_rank_steps_total", **rank[r]) for r in (0, 1)] == [40.0, 40.0]
    assert _value(got, "tfdevices_rank_step_seconds_count", **rank[0]) == 38.0  # the first 2 are not timed
    assert _value(got, "tfdevices_rank_step_seconds_sum", **rank[0]) == pytest.approx(38 * 0.055)
    assert _value(got, "tfdevices_rank_split_seconds", part="between", **rank[1]) == pytest.approx(0.051)
    assert _value(got, "tfdevices_rank_split_seconds", part="wait", **rank[0]) == pytest.approx(0.05)
    assert (
        _value(got, "tfdevices_rank_wait_ratio", **rank[0]) > 0.8 > _value(got, "tfdevices_rank_wait_ratio", **rank[1])
    )
    assert [_value(got, "tfdevices_rank_slow", **rank[r]) for r in (0, 1)] == [0.0, 1.0]
    assert (
        _value(got, "tfdevices_rank_slow_score", **rank[0]) == 1.0 > _value(got, "tfdevices_rank_slow_score", **rank[1])
    )
    assert [_value(got, "tfdevices_rank_stalled", **rank[r]) for r in (0, 1)] == [0.0, 0.0]
    gpu0 = {**rank[0], "gpu": "0"}
    assert _value(got, "hw_gpu_utilization", **gpu0) == 0.87
    assert _value(got, "hw_gpu_memory_usage_bytes", **gpu0) == 3 << 30
    assert _value(got, "hw_gpu_memory_limit_bytes", **gpu0) == 40 << 30
    assert _value(got, "hw_gpu_power_watts", **gpu0) == 61.0
    assert _value(got, "hw_gpu_temperature_celsius", **gpu0) == 34.0
    assert _value(got, "hw_gpu_clock_sm_hertz", **gpu0) == 1410e6
    assert ("hw_gpu_utilization", tuple(sorted({**rank[0], "gpu": "1"}.items()))) not in got  # rank 0 has GPU 0 only
    job = {"job": "train.py", "node": node}
    assert _value(got, "tfdevices_job_workers_up", **job) == 1.0
    assert _value(got, "tfdevices_job_restarts_total", **job) == 2.0
    assert _value(got, "tfdevices_worker_exit_status", **rank[1]) == 3.0
    served_names = {name for name, _ in got}
    assert served_names == {name for s in SERIES for name in s.served}  # every series in SERIES, nothing else


def test_a_stalled_rank_is_marked(tmp_path) -> None:
    now = [1000.0]
    board = str(tmp_path)
    writers = _board(board, now)
    _steps(writers, now, 5)
    writers[0].begin_step()  # rank 0 waits in step 6; rank 1 never comes
    watch = JobWatch([0, 1], StallPolicy(window_s=60), clock=lambda: now[0])
    collector = metrics.JobCollector("j", "n")
    collector.start(Attempt(watch))
    assert collector.rows() == ()  # before the watch's first look: nothing to render
    now[0] += 500
    watch.poll(read_records(board))
    assert [(r.rank, r.stalled) for r in collector.rows()] == [(0, False), (1, True)]


def test_the_port_serves_while_the_job_runs_and_closes_when_it_ends() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scrape = (
        "import os, urllib.request; r = os.environ['RANK']; "
        f"t = urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read().decode() if r == '0' else ''; "
        "print([l for l in t.splitlines() if l.startswith('tfdevices_job_workers_up')])"
    )
    out = io.StringIO()  # the launcher runs in this process: once launch() returns, this process still runs,
    code = launch(  # so the port is closed by the launcher, not by the operating system at the process' exit
        [sys.executable, "-c", scrape], LaunchConfig(2, metrics=str(port)), out=out, env=subprocess_env()
    )
    text = out.getvalue()
    assert code == 0, text
    assert f"[launcher] metrics for Prometheus: http://127.0.0.1:{port}/metrics\n" in text
    assert re.search(
        r'^\[0\] \[\'tfdevices_job_workers_up\{job="python-c",node="[^"]+"\} [12]\.0\'\]$', text, re.MULTILINE
    ), text
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def _listening() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


@pytest.mark.parametrize(
    "asked, message",
    [
        ("IN_USE", "--metrics 127.0.0.1:{port}: port {port} is in use on 127.0.0.1."),
        ("192.0.2.1:9100", "--metrics 192.0.2.1:9100: 192.0.2.1 is not an address of this machine."),
        ("no-such-host.invalid:9100", "--metrics no-such-host.invalid:9100: 'no-such-host.invalid' names no IPv4"),
        ("localhost:99999", "--metrics 'localhost:99999': not [HOST:]PORT: its port 99999 is not in 0..65535."),
        ("9100:", "--metrics '9100:': not [HOST:]PORT: it has no port."),
        ("a/b:9100", "--metrics 'a/b:9100': not [HOST:]PORT: 'a/b' is no IPv4 address, [IPv6] address or host name"),
    ],
)
def test_bad_input_is_one_line_before_any_worker_starts(asked: str, message: str) -> None:
    sock, port = _listening()
    try:
        proc = run_launcher("-n", "2", "--metrics", asked.replace("IN_USE", str(port)), *worker("report"))
    finally:
        sock.close()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tfdevices launch: error: {message.format(port=port)}"), lines
    assert "HINT:" in lines[0] and "Traceback" not in proc.stderr
    assert "[0]" not in proc.stdout and "worker 0" not in proc.stdout  # nothing was started


def test_another_interface_is_said_on_the_console() -> None:
    proc = run_launcher("-n", "1", "--metrics", "127.0.0.2:0", "--", sys.executable, "-c", "pass")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "metrics for Prometheus: http://127.0.0.2:" in proc.stdout
    assert "(on 127.0.0.2, as --metrics asked)" in proc.stdout


def test_docstring_examples() -> None:
    results = doctest.testmod(metrics, raise_on_error=False)
    assert results.attempted > 0 and results.failed == 0, results  # the module's examples ran, and passed


# --------------------------------------------------------------------------- the Grafana dashboard

DASHBOARD = os.path.join(REPO, "docs", "grafana", "tfdevices-job.json")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def dashboard_queries() -> list[str]:
    """Every PromQL query of the dashboard: its panels' targets and its variables'."""
    with open(DASHBOARD, encoding="utf-8") as f:
        board = json.load(f)
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["query"]["query"])
    return queries


def series_named(query: str) -> set[str]:
    """The series a PromQL query names: its identifiers outside label matchers, ranges and groupings that are
    neither functions nor keywords.
    """
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\b(by|without|on|ignoring)\s*\([^)]*\)", " ", query)
    text = re.sub(r"label_values\(([^,]+),[^)]*\)", r"\1", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        after = text[match.end() :].lstrip()
        if match.group() not in _KEYWORDS and not after.startswith("(") and not match.group().startswith("$"):
            names.add(match.group())
    return names


def test_every_dashboard_query_names_series_the_exporter_serves() -> None:
    served = {name for s in (*SERIES, *AGGREGATES) for name in s.served}
    queries = dashboard_queries()
    assert len(queries) >= 10
    for query in queries:
        named = series_named(query)
        assert named, query
        assert named <= served, (query, named - served)
    everything = set().union(*(series_named(q) for q in queries))
    for wanted in ("tfdevices_rank_step_seconds_sum", "tfdevices_rank_wait_ratio", "hw_gpu_utilization"):
        assert wanted in everything
    assert any(q.startswith("tfdevices_rank_slow{") and q.endswith("== 1") for q in queries)  # the slow rank


def test_the_query_reader_sees_a_misspelt_series() -> None:
    assert series_named('rate(tfdevice_rank_steps_total{job="$job"}[$__rate_interval])') == {
        "tfdevice_rank_steps_total"
    }
    assert series_named("sum by (rank) (hw_gpu_utilization) / hw_gpu_memory_limit_bytes") == {
        "hw_gpu_utilization",
        "hw_gpu_memory_limit_bytes",
    }


# --------------------------------------------------------------------------- rank 0's watch (srun, Ray Train)

WATCHED = """
import os, sys, time, urllib.request
from tfdevices.jobs import serve_metrics
from tfdevices.jobs.progress import ProgressWriter
from tfdevices.jobs.rank_hooks import start_reporting
if sys.argv[1] == "call":
    serve_metrics("127.0.0.1:" + sys.argv[2])
writer = start_reporting()
other = ProgressWriter(os.environ["TFDEVICES_PROGRESS_DIR"], 1)
for w in (writer, other):
    for _ in range(3):
        w.begin_step(); w.end_step()
deadline = time.monotonic() + 30
while True:  # a scrape renders the watch's latest look: the watch looks about once a second
    text = urllib.request.urlopen("http://127.0.0.1:" + sys.argv[2] + "/metrics", timeout=10).read().decode()
    if 'rank="1"} 3.0' in text or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print("\\n".join(l for l in text.splitlines() if l.startswith(("tfdevices_rank_steps_total", "tfdevices_job_workers"))))
"""


@pytest.mark.parametrize("how", ["env", "call"])
def test_rank_0s_watch_serves_where_no_launcher_watches(tmp_path, how: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "TFDEVICES_PROGRESS_DIR": str(tmp_path)}
    if how == "env":
        env["TFDEVICES_METRICS"] = port
    proc = run_py_args(WATCHED, how, port, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [re.sub(r'node="[^"]+"', "node", line) for line in lines] == [
        'tfdevices_rank_steps_total{job="job",node,rank="0"} 3.0',
        'tfdevices_rank_steps_total{job="job",node,rank="1"} 3.0',
        'tfdevices_job_workers_up{job="job",node} 2.0',
    ]
    assert f"metrics for Prometheus: http://127.0.0.1:{port}/metrics" in proc.stderr


def test_a_bad_variable_in_a_rank_is_said_and_the_job_goes_on(tmp_path) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", "TFDEVICES_PROGRESS_DIR": str(tmp_path), "TFDEVICES_METRICS": "x:y"}
    code = "from tfdevices.jobs.rank_hooks import start_reporting; print(start_reporting() is not None)"
    proc = run_py_args(code, env=env)
    assert proc.returncode == 0 and proc.stdout == "True\n", proc.stdout + proc.stderr
    said = "tfdevices: no metrics served: TFDEVICES_METRICS: not [HOST:]PORT: its port is not 1 to 5 digits. HINT:"
    assert said in proc.stderr and "x:y" not in proc.stderr  # the variable's value is never repeated


def run_py_args(code: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=subprocess_env(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_each_ranks_series_carry_its_node(tmp_path) -> None:
    """Node 0's launcher of a job over two machines serves every rank, each with the machine it runs on."""
    import dataclasses

    now = [1000.0]
    writers = _board(str(tmp_path), now)
    _steps(writers, now, 10)
    records = [dataclasses.replace(r, node=f"gpu0{r.rank}") for r in read_records(str(tmp_path))]
    watch = JobWatch([0, 1], StallPolicy(), clock=lambda: now[0])
    watch.poll(records)
    collector = metrics.JobCollector("j", "this-host")
    collector.start(Attempt(watch))
    steps = {
        (s.labels["rank"], s.labels["node"])
        for family in collector.collect()
        for s in family.samples
        if s.name == "tfdevices_rank_steps_total"
    }
    assert steps == {("0", "gpu00"), ("1", "gpu01")}
