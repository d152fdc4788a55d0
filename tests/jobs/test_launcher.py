"""tfdevices launch: real worker processes, real ports, real signals (workers without TensorFlow)."""

from __future__ import annotations

import doctest
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, run_py, subprocess_env
from tfdevices import runtime
from tfdevices.jobs import launcher
from tfdevices.core.errors import LaunchError, SelectionError
from tfdevices.gpus.inventory import GpuInfo, Inventory
from tfdevices.jobs.launcher import plan_workers
from tfdevices.jobs.tfconfig import parse_tf_config

WORKER = os.path.join(REPO, "tests", "scripts", "echo_worker.py")


def run_launcher(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tfdevices", "launch", *args], env=subprocess_env(env), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def worker(*args: str) -> list[str]:
    return ["--", sys.executable, WORKER, *args]


def reports(stdout: str) -> dict[int, dict]:
    out = {}
    for line in stdout.splitlines():
        match = re.match(r"^\[(\d+)\] (\{.*\})$", line)
        if match:
            data = json.loads(match.group(2))
            assert data["rank"] == int(match.group(1)), line  # the prefix is the worker's own rank
            out[data["rank"]] = data
    return out


def fake_inventory_file(tmp_path, n: int) -> str:
    gpus = tuple(GpuInfo(index=i, name="Fake", uuid=f"GPU-{i}", cuda_ordinal=i, tf_name=f"/GPU:{i}",
                         memory_total=8 << 30, memory_free=8 << 30) for i in range(n))
    path = tmp_path / "inventory.json"
    path.write_text(Inventory(gpus=gpus, source="nvml").to_json())
    return str(path)


def test_workers_get_one_cluster_on_loopback() -> None:
    proc = run_launcher("-n", "3", *worker("report"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = reports(proc.stdout)
    assert sorted(got) == [0, 1, 2]
    clusters = {json.dumps(dict(parse_tf_config(r["tf_config"]).cluster)) for r in got.values()}
    assert len(clusters) == 1, clusters  # every worker sees the same cluster
    addresses = parse_tf_config(got[0]["tf_config"]).cluster["worker"]
    assert [r["address"] for r in (got[0], got[1], got[2])] == list(addresses)
    assert all(a.startswith("127.0.0.1:") for a in addresses) and len(set(addresses)) == 3
    for rank, r in got.items():
        assert (r["world"], r["local_rank"], r["source"], r["restart"]) == (3, rank, "TF_CONFIG", "0")
        assert r["ignored"] == ["ENV"]  # RANK/WORLD_SIZE are set too, and agree
        assert (r["cuda"], r["gpus"], r["method"]) == ("-1", [], "launcher")
        assert f"[{rank}] second line from {rank}" in proc.stdout  # stderr is prefixed too
    for line in proc.stdout.splitlines():
        assert re.match(r"^\[(\d+|launcher)\] ", line), line


def test_one_gpu_per_worker_from_the_inventory(tmp_path) -> None:
    inv = {"TFDEVICES_INVENTORY": fake_inventory_file(tmp_path, 4)}
    got = reports(run_launcher("-n", "2", "--gpus", "1,3", *worker("report"), env=inv).stdout)
    assert [(got[r]["cuda"], got[r]["gpus"]) for r in (0, 1)] == [("1", [1]), ("3", [3])]
    shared = run_launcher("-n", "3", "--gpus", "auto:2", "--share", "--virtual-devices", "2",
                          *worker("report"), env=inv)
    got = reports(shared.stdout)
    assert [got[r]["cuda"] for r in (0, 1, 2)] == ["0", "1", "0"], shared.stdout + shared.stderr
    assert {got[r]["virtual"] for r in got} == {"2"}
    refused = run_launcher("-n", "3", "--gpus", "auto:2", *worker("report"), env=inv)
    assert refused.returncode == 2
    assert refused.stderr.startswith("tfdevices launch: error: 3 local ranks but only 2 GPU(s) (0,1).")
    assert "--share" in refused.stderr and "[0]" not in refused.stdout  # nothing was started


def test_first_failure_stops_the_others_and_is_the_exit_status() -> None:
    start = time.monotonic()
    proc = run_launcher("-n", "3", *worker("exit", "wait,7,wait"))
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "[launcher] worker 1 exited with status 7; stopping the others" in proc.stdout
    assert time.monotonic() - start < 60  # the sleeping workers (120 s) were stopped, not awaited


def test_max_restarts_restarts_the_job() -> None:
    once = run_launcher("-n", "2", *worker("fail-first"))
    assert once.returncode == 3 and "restarting" not in once.stdout, once.stdout + once.stderr
    again = run_launcher("-n", "2", "--max-restarts", "2", *worker("fail-first"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "[launcher] restarting all 2 workers (restart 1 of 2)" in again.stdout, again.stdout
    assert sorted(re.findall(r"^\[(\d)\] attempt (\d)$", again.stdout, re.M)) == [
        ("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")], again.stdout
    ports = re.findall(r"127\.0\.0\.1:(\d+)", again.stdout)
    # ports are chosen again for the restart: free now, distinct within each attempt
    assert len(ports) == 4 and len(set(ports[:2])) == 2 and len(set(ports[2:])) == 2, again.stdout


def test_sigterm_is_forwarded_to_every_worker(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "tfdevices", "launch", "-n", "2", *worker("trap", str(tmp_path))],
                            env=subprocess_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{r}").exists() for r in (0, 1)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # the launcher only, not its process group
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    assert all((tmp_path / f"term-{r}").exists() for r in (0, 1)), out + err
    assert proc.returncode == 128 + signal.SIGTERM, out + err


@pytest.mark.parametrize("args,message", [
    (["-n", "0", "--", "true"], "-n 0: the number of workers must be a whole number >= 1."),
    (["-n", "2"], "no command to run."),
    (["-n", "two", "--", "true"], "argument -n/--num-workers: invalid int value: 'two'."),
    (["--", "true"], "the following arguments are required: -n/--num-workers."),
    (["-n", "1", "--bogus", "--", "true"], "unrecognized arguments: --bogus."),
    (["-n", "1", "--gpus", "9", "--", "true"], "GPU spec '9': "),
    (["-n", "1", "--max-restarts", "-1", "--", "true"], "--max-restarts -1 must be between 0 and 1000."),
    (["-n", "1", "--", "/nonexistent/program"], "cannot start '/nonexistent/program': No such file"),
])
def test_bad_input_is_one_line_and_status_2(args: list[str], message: str) -> None:
    proc = run_launcher(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tfdevices launch: error: {message}"), proc.stderr
    assert "HINT:" in lines[0]


def test_plan_workers() -> None:
    plans = plan_workers(2, [6001, 6002], [5, 6], virtual_devices=3, restart=1)
    assert [p.env["TFDEVICES_RANK_GPUS"] for p in plans] == ["5", "6"]
    assert {p.env["TFDEVICES_VIRTUAL_DEVICES"] for p in plans} == {"3"}
    assert {p.env["TFDEVICES_RESTART"] for p in plans} == {"1"}
    assert parse_tf_config(plans[1].env["TF_CONFIG"]).address == "127.0.0.1:6002"
    assert plan_workers(2, [1, 2])[0].env["CUDA_VISIBLE_DEVICES"] == "-1"
    with pytest.raises(LaunchError, match=r"2 workers need 2 distinct ports, got \[1, 1\]"):
        plan_workers(2, [1, 1])
    with pytest.raises(SelectionError, match="2 local ranks but only 1 GPU"):
        plan_workers(2, [1, 2], [0])


def test_free_ports_are_distinct_and_bindable_on_loopback() -> None:
    ports = launcher.free_ports(4)
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_configure_worker_splits_the_cpu() -> None:
    proc = run_py("""
        import tensorflow as tf
        from tfdevices.runtime import configure_worker
        configure_worker()
        print(len(tf.config.list_logical_devices("CPU")))
    """, env={"TFDEVICES_VIRTUAL_DEVICES": "3"}, timeout=120)
    assert proc.stdout.split()[-1] == "3"
    with pytest.raises(Exception, match=r"TFDEVICES_VIRTUAL_DEVICES='0' is not a whole number >= 1"):
        runtime.configure_worker({"TFDEVICES_VIRTUAL_DEVICES": "0"})


def test_docstring_examples() -> None:
    failed, tried = doctest.testmod(launcher)
    assert tried >= 2 and failed == 0
