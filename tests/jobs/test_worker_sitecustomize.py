"""A launched worker's start-up: a malformed TFDEVICES_LISTEN stops it at once, naming the variable (the listen
check itself: tests/jobs/test_listen_check.py)."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import run_py
from tfdevices.jobs.listen_check import LISTEN_MARK, LISTEN_STATUS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platform: /proc: Linux")


def test_a_malformed_listen_variable_stops_the_worker_naming_it() -> None:
    proc = run_py(
        """
        from tfdevices.jobs.worker_sitecustomize import start_worker
        start_worker({"TFDEVICES_LISTEN": "0.0.0.0:80", "RANK": "2"})
        print("went on")
        """,
        check=False,
        timeout=60,
    )
    assert proc.returncode == LISTEN_STATUS and "went on" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"{LISTEN_MARK} TFDEVICES_LISTEN: not ADDRESS:PORT"), proc.stderr
    assert "0.0.0.0:80" not in proc.stderr  # the variable's value is not printed


def _cluster(workers: int) -> str:
    """A TF_CONFIG of ``workers`` workers with data-centre host names (33 characters each)."""
    import json

    hosts = [f"gpu-node-{i // 8:04d}.cluster.example.com:{45000 + i % 8}" for i in range(workers)]
    return json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": 3}})


def test_a_tf_config_too_large_for_a_variable_reaches_the_worker_through_its_sitecustomize(tmp_path) -> None:
    import json
    import os
    import subprocess

    from tfdevices.jobs.worker_sitecustomize import TF_CONFIG_FILE_ENV, tf_config_by_file, too_large, worker_site

    config = _cluster(4096)  # 176 KB: 4,096 ranks as 512 nodes of 8
    env = dict(os.environ, TF_CONFIG=config)
    probe = [
        sys.executable,
        "-c",
        "import json, os; c = json.loads(os.environ['TF_CONFIG']); print(len(c['cluster']['worker']), c['task'])",
    ]
    with pytest.raises(OSError, match="Argument list too long") as raised:  # the worker's start, in the variable
        subprocess.run(probe, env=env, check=False)
    assert raised.value.errno == 7  # E2BIG: argument list too long
    site = worker_site(env)
    assert too_large(config) and not too_large(_cluster(2048))
    tf_config_by_file(env, str(tmp_path), 3)
    assert "TF_CONFIG" not in env and os.stat(env[TF_CONFIG_FILE_ENV]).st_mode & 0o077 == 0
    proc = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("4096 {'type': 'worker', 'index': 3}"), proc.stderr
    assert json.loads(open(env[TF_CONFIG_FILE_ENV]).read()) == json.loads(config)
    assert TF_CONFIG_FILE_ENV in open(os.path.join(site, "sitecustomize.py")).read()


def test_a_worker_given_a_tf_config_by_file_can_start_programs_and_its_python_children_read_it_too(tmp_path) -> None:
    """The worker's Python sees the cluster, not its environment: a variable that large would stop every program
    the worker starts (``E2BIG``); a Python child reads the file again through the same sitecustomize.
    """
    import os
    import subprocess

    from tfdevices.jobs.worker_sitecustomize import tf_config_by_file, worker_site

    env = dict(os.environ, TF_CONFIG=_cluster(4096))
    worker_site(env)
    tf_config_by_file(env, str(tmp_path), 3)
    child = "import json, os; print(len(json.loads(os.environ['TF_CONFIG'])['cluster']['worker']))"
    worker = (
        "import json, os, subprocess, sys\n"
        "assert len(json.loads(os.environ['TF_CONFIG'])['cluster']['worker']) == 4096\n"
        "shell = subprocess.run(['sh', '-c', 'echo started'], capture_output=True, text=True).stdout.strip()\n"
        f"python = subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True)\n"
        "print(shell, python.stdout.strip(), python.stderr[-300:])\n"
    )
    proc = subprocess.run([sys.executable, "-c", worker], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["started", "4096"], proc.stdout + proc.stderr


def test_the_launchers_workers_move_only_a_tf_config_too_large_and_say_it_once() -> None:
    import os

    from tfdevices.jobs.workers import Workers

    class _Console:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def say(self, line: str) -> None:
            self.lines.append(line)

    console = _Console()
    workers = Workers(["true"], console, None, None)
    small = workers._sized({"TF_CONFIG": _cluster(8)}, 0)
    assert small == {"TF_CONFIG": _cluster(8)} and console.lines == []
    moved = [workers._sized({"TF_CONFIG": _cluster(4096)}, rank) for rank in (0, 1)]
    assert [sorted(env) for env in moved] == [["TFDEVICES_TF_CONFIG_FILE"]] * 2
    assert moved[0]["TFDEVICES_TF_CONFIG_FILE"] != moved[1]["TFDEVICES_TF_CONFIG_FILE"]
    assert len(console.lines) == 1 and console.lines[0].startswith("TF_CONFIG is 172 KiB, more than one variable")
    workers.close()
    assert not any(os.path.exists(env["TFDEVICES_TF_CONFIG_FILE"]) for env in moved)
