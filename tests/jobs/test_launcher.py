"""tfdevices launch: real worker processes, real ports, real signals (workers without TensorFlow)."""

from __future__ import annotations

import doctest
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, kill_all, run_py, subprocess_env
from tests.jobs.launching import WORKER, reports, run_launcher, worker
from tfdevices import runtime
from tfdevices.core.errors import LaunchError, SelectionError
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory
from tfdevices.jobs import launcher, worker_plan
from tfdevices.jobs.launcher import plan_workers
from tfdevices.jobs.tfconfig import parse_tf_config


def fake_inventory_file(tmp_path, n: int) -> str:
    gpus = tuple(
        GpuInfo(
            index=i,
            name="Fake",
            uuid=f"GPU-{i}",
            cuda_ordinal=i,
            tf_name=f"/GPU:{i}",
            memory_total=8 << 30,
            memory_free=8 << 30,
        )
        for i in range(n)
    )
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
    shared = run_launcher(
        "-n", "3", "--gpus", "auto:2", "--share", "--virtual-devices", "2", *worker("report"), env=inv
    )
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
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    ], again.stdout
    ports = re.findall(r"127\.0\.0\.1:(\d+)", again.stdout)
    # ports are chosen again for the restart: free now, distinct within each attempt
    assert len(ports) == 4 and len(set(ports[:2])) == 2 and len(set(ports[2:])) == 2, again.stdout


def test_sigterm_is_forwarded_to_every_worker(tmp_path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdevices", "launch", "-n", "2", *worker("trap", str(tmp_path))],
        env=subprocess_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
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


@pytest.mark.parametrize(
    "args,message",
    [
        (["-n", "0", "--", "true"], "-n 0: the number of workers must be a whole number >= 1."),
        (["-n", "2"], "no command to run."),
        (["-n", "two", "--", "true"], "argument -n/--num-workers: invalid int value: 'two'."),
        (["--", "true"], "the following arguments are required: -n/--num-workers."),
        (["-n", "1", "--bogus", "--", "true"], "unrecognized arguments: --bogus."),
        (["-n", "1", "--gpus", "9", "--", "true"], "--gpus '9': "),
        (["-n", "1", "--max-restarts", "-1", "--", "true"], "--max-restarts -1 must be between 0 and 1000."),
        (["-n", "1", "--", "/nonexistent/program"], "cannot start '/nonexistent/program': No such file"),
        (["-n", str(10**30), "--", "true"], "-n 1000000000000000000000000000000: at most 1024 workers per machine."),
        (["-n", "1025", "--oversubscribe", "--", "true"], "-n 1025: at most 1024 workers per machine."),
        (
            ["-n", str(4 * (os.cpu_count() or 1) + 1), "--", "true"],
            f"-n {4 * (os.cpu_count() or 1) + 1}: this machine has {os.cpu_count()} CPU cores",
        ),
        (["-n", "1", "--max-restarts", str(10**20), "--", "true"], "--max-restarts 100000000000000000000 must be"),
        (["-n", "1", "--tee", "--", "true"], "--tee without --log-dir"),
        (["-n", "1", "--node-rank", "1", "--", "true"], "--node-rank 1 without --nnodes."),
        (["-n", "1", "--rdzv-id", "exp7", "--", "true"], "--rdzv-id 'exp7' without --nnodes."),
        (
            ["-n", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--rdzv-id", "", "--", "true"],
            "--rdzv-id '' must be 1 to 256 characters.",
        ),
        (
            [
                "-n",
                "1",
                "--nnodes",
                "2",
                "--master-addr",
                "127.0.0.1",
                "--rdzv-token-file",
                "/nonexistent/token",
                "--",
                "true",
            ],
            "--rdzv-token-file '/nonexistent/token': cannot read it (No such file or directory).",
        ),
        (
            ["-n", "1", "--nnodes", "2", "--node-rank", "2", "--", "true"],
            "--node-rank 2 is out of range for --nnodes 2.",
        ),
        (["-n", "1", "--nnodes", "2", "--", "true"], "--nnodes 2 needs --master-addr"),
        (
            ["-n", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--max-restarts", "1", "--", "true"],
            "--max-restarts with --nnodes > 1",
        ),
        (["-n", "1", "--log-dir", "/dev/null/logs", "--", "true"], "--log-dir '/dev/null/logs': cannot create it"),
        (["-n", "1", "--listen", "localhost", "--", "true"], "--listen 'localhost': not loopback, all or an IPv4"),
        (["-n", "1", "--listen", "::1", "--", "true"], "--listen '::1': not loopback, all or an IPv4 address."),
        (["-n", "1", "--listen", "0.0.0.0", "--", "true"], "--listen 0.0.0.0: that is every interface; say it as"),
        (["-n", "1", "--listen", "192.0.2.1", "--", "true"], "--listen 192.0.2.1: cannot listen there on this"),
        (
            ["-n", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--node-addr", "127.0.0.2"]
            + ["--listen", "loopback", "--", "true"],
            "--listen 127.0.0.1 but the other machines reach this one's workers at '127.0.0.2'",
        ),
        (
            ["-n", "1", "--nnodes", "2", "--master-addr", "localhost", "--", "true"],
            "this machine's address in the job, 'localhost', resolves here to 127.0.0.1, a loopback address",
        ),
    ],
)
def test_bad_input_is_one_line_and_status_2(args: list[str], message: str) -> None:
    proc = run_launcher(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tfdevices launch: error: {message}"), proc.stderr
    assert "HINT:" in lines[0]


def test_listen_names_where_a_one_machine_jobs_workers_are_reached() -> None:
    """--listen 127.0.0.2: the workers' TF_CONFIG names 127.0.0.2 and each is told to listen there, on its port."""
    proc = run_launcher("-n", "2", "--listen", "127.0.0.2", *worker("report"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = reports(proc.stdout)
    assert [got[r]["address"].rsplit(":", 1)[0] for r in (0, 1)] == ["127.0.0.2", "127.0.0.2"], got
    assert "[launcher] the workers' TensorFlow servers listen on 127.0.0.2 only" in proc.stdout


def test_plan_workers() -> None:
    plans = plan_workers(2, [6001, 6002], [5, 6], virtual_devices=3, restart=1)
    assert [p.env["TFDEVICES_RANK_GPUS"] for p in plans] == ["5", "6"]
    assert {p.env["TFDEVICES_VIRTUAL_DEVICES"] for p in plans} == {"3"}
    assert {p.env["TFDEVICES_RESTART"] for p in plans} == {"1"}
    assert parse_tf_config(plans[1].env["TF_CONFIG"]).address == "127.0.0.1:6002"
    assert [p.env["TFDEVICES_LISTEN"] for p in plans] == ["127.0.0.1:6001", "127.0.0.1:6002"]
    assert [p.env["TFDEVICES_LISTEN"] for p in plan_workers(2, [1, 2], listen="all")] == ["all:1", "all:2"]
    assert plan_workers(1, [3], host="10.0.0.5")[0].env["TFDEVICES_LISTEN"] == "10.0.0.5:3"
    with pytest.raises(LaunchError, match=r"listen='host0': the workers' servers listen on an IPv4 address"):
        plan_workers(1, [3], host="host0")
    assert plan_workers(2, [1, 2])[0].env["CUDA_VISIBLE_DEVICES"] == "-1"
    with pytest.raises(LaunchError, match=r"2 workers need 2 distinct ports, got \[1, 1\]"):
        plan_workers(2, [1, 1])
    with pytest.raises(SelectionError, match="2 local ranks but only 1 GPU"):
        plan_workers(2, [1, 2], [0])


def test_configure_worker_splits_the_cpu() -> None:
    proc = run_py(
        """
        import tensorflow as tf
        from tfdevices.runtime import configure_worker
        configure_worker()
        print(len(tf.config.list_logical_devices("CPU")))
    """,
        env={"TFDEVICES_VIRTUAL_DEVICES": "3"},
        timeout=120,
    )
    assert proc.stdout.split()[-1] == "3"
    with pytest.raises(Exception, match=r"TFDEVICES_VIRTUAL_DEVICES is not a whole number >= 1"):
        runtime.configure_worker({"TFDEVICES_VIRTUAL_DEVICES": "0"})


def test_docstring_examples() -> None:
    results = [doctest.testmod(module) for module in (launcher, worker_plan)]  # plan_workers' examples moved
    failed, tried = sum(r.failed for r in results), sum(r.attempted for r in results)
    assert tried >= 2 and failed == 0


def test_oversubscribe_goes_beyond_the_machine_bound() -> None:
    n = 4 * (os.cpu_count() or 1) + 1
    proc = run_launcher("-n", str(n), "--oversubscribe", "--", "true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("[launcher] worker ") == n


def test_log_dir_keeps_one_log_per_rank_and_shows_a_failed_rank(tmp_path) -> None:
    proc = run_launcher("-n", "2", "--log-dir", str(tmp_path), *worker("exit", "0,5"))
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["rank0.log", "rank1.log"]
    tee = run_launcher("-n", "2", "--log-dir", str(tmp_path), "--tee", *worker("report"))
    assert tee.returncode == 0 and sorted(reports(tee.stdout)) == [0, 1], tee.stdout  # --tee: every rank shown
    quiet = run_launcher("-n", "2", "--log-dir", str(tmp_path), *worker("report"))
    assert sorted(reports(quiet.stdout)) == [0], quiet.stdout  # without: rank 0 only
    for rank in (0, 1):  # every run appended its rank's lines
        log = (tmp_path / f"rank{rank}.log").read_text()
        assert log.count(f"second line from {rank}") == 2 and log.count(f'"rank": {rank},') == 2, log


def _pids_in_groups(groups: set[int]) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) in groups and _alive(int(entry)):
                    found.add(int(entry))
            except OSError:
                pass
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def _start_stubborn(tmp_path) -> tuple[subprocess.Popen, set[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdevices", "launch", "-n", "2", *worker("stubborn", str(tmp_path))],
        env=subprocess_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{r}").exists() and (tmp_path / f"ready-{r}").read_text() for r in (0, 1)):
        assert proc.poll() is None and time.monotonic() < deadline, "the workers did not start"
        time.sleep(0.1)
    pids = {int(p) for r in (0, 1) for p in (tmp_path / f"ready-{r}").read_text().split()}
    assert all(_alive(p) for p in pids)
    return proc, pids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platform: reads /proc (Linux)")
def test_sigkill_of_the_launcher_leaves_no_worker(tmp_path) -> None:
    """Workers (which ignore SIGTERM) and their children are gone 5 s after the launcher is killed by SIGKILL."""
    proc, pids = _start_stubborn(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGKILL)  # the launcher only: no handler, no clean-up runs
        proc.wait(timeout=30)
        time.sleep(5)
        assert not {p for p in pids if _alive(p)}, "workers outlived their launcher"
    finally:
        kill_all(pids)
        proc.communicate(timeout=30)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platform: reads /proc (Linux)")
def test_a_second_signal_kills_workers_that_ignore_the_first(tmp_path) -> None:
    proc, pids = _start_stubborn(tmp_path)
    try:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # the workers ignore SIGINT: the launcher waits (up to its grace period)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        kill_all(pids)
    assert proc.returncode == 128 + signal.SIGINT, out
    assert (
        "[launcher] signal 2 passed to the workers" in out and "[launcher] a second signal: killing the workers" in out
    )
    assert re.search(r"worker \d exited with status 137 \(signal 9\)", out), out
    assert not {p for p in pids if _alive(p)}, out  # their children too: the whole process group


def test_output_piped_into_head_ends_the_job_quietly() -> None:
    shell = (
        f"set -o pipefail; {sys.executable} -m tfdevices launch -n 2 -- {sys.executable} {WORKER} chatty | head -n 3"
    )
    proc = subprocess.run(
        ["bash", "-c", shell], env=subprocess_env(), cwd=REPO, capture_output=True, text=True, timeout=120
    )  # a hang fails here
    assert len(proc.stdout.splitlines()) == 3, proc.stdout
    assert proc.returncode == 128 + signal.SIGPIPE, proc.stderr  # the launcher's status, through pipefail
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
