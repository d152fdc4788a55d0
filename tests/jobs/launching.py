"""Running ``tfdevices launch`` in the jobs tests: real launcher processes, workers without TensorFlow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

from tests.helpers import REPO, kill_all, subprocess_env
from tfdevices.jobs.rendezvous import free_ports

WORKER = os.path.join(REPO, "tests", "scripts", "echo_worker.py")
#: The TensorFlow worker of the listen tests (MultiWorkerMirroredStrategy, one all-reduce, then it holds).
LISTEN_WORKER = os.path.join(REPO, "tests", "scripts", "listen_worker.py")
#: Node 1's address where two launchers on this machine stand for two nodes.
NODE1 = "127.0.0.2"


def run_launcher(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfdevices", "launch", *args],
        env=subprocess_env(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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


def two_nodes(*script: str, launcher: tuple[str, ...] = (), env: dict[str, str] | None = None) -> tuple[str, str, list]:
    """Runs node 0's and node 1's launchers (node 1's workers on 127.0.0.2), each with its own temporary
    directory; returns both consoles and both exit statuses.
    """
    port = free_ports(1)[0]
    common = ["-n", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port), *launcher]
    with tempfile.TemporaryDirectory() as tmp0, tempfile.TemporaryDirectory() as tmp1:
        runs = []
        for node, tmp in ((1, tmp1), (0, tmp0)):  # node 1 first: it waits for node 0
            extra = ["--node-addr", NODE1] if node == 1 else []
            command = [sys.executable, "-m", "tfdevices", "launch", *common, "--node-rank", str(node), *extra]
            runs.append((command + ["--", sys.executable, *script], {**(env or {}), "TMPDIR": tmp}))
        outs, codes = together(runs)
    return outs[1], outs[0], [codes[1], codes[0]]


def together(runs: list[tuple[list[str], dict[str, str]]]) -> tuple[list[str], list[int]]:
    """Starts every ``(command, env)`` at once, in order, as the machines of one job; returns their outputs and
    exit statuses, in the same order (none outlives the call)."""
    procs = [
        subprocess.Popen(
            command, env=subprocess_env(env), cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for command, env in runs
    ]
    try:
        outs = [p.communicate(timeout=400)[0] for p in procs]
    finally:
        kill_all(p.pid for p in procs)
    return outs, [p.returncode for p in procs]


def launch_listen(
    tmp_path, order: str = "tensorflow", *python: str, options: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``tfdevices launch -n 2 [options]`` of the listen worker beginning in ``order`` (``python``: the workers'
    interpreter flags, e.g. ``-I``); it holds in ``tmp_path`` until :func:`held` lets it go."""
    command = [sys.executable, "-m", "tfdevices", "launch", "-n", "2", *options, "--", sys.executable, *python]
    return subprocess.Popen(
        [*command, LISTEN_WORKER, str(tmp_path), order],
        env=subprocess_env(env),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def held(
    proc: subprocess.Popen, tmp_path, check=None, *, until_stopped: bool = False
) -> tuple[str, dict[int, tuple[int, int]]]:
    """Reads the launcher until both workers are ready (or it ends), runs ``check(pids)`` while they hold, lets
    them go; returns everything it printed and each rank's (pid, port). ``proc.returncode`` is its exit status.
    ``until_stopped``: the workers are let go only once the launcher ended (a job no check stops holds for the
    worker's 120 s and then ends with status 0), so a check that looks late still finds them listening."""
    lines: list[str] = []
    pids: dict[int, tuple[int, int]] = {}
    try:
        ready: set[int] = set()
        deadline = time.monotonic() + 240
        while len(ready) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if match := re.match(r"\[launcher\] worker (\d): pid (\d+), 127\.0\.0\.1:(\d+)", line):
                pids[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
            if match := re.match(r"\[(\d)\] ready \d", line):
                ready.add(int(match.group(1)))
        if ready == {0, 1} and check is not None:
            check(pids)
        if until_stopped:
            lines.append(proc.communicate(timeout=200)[0])
    finally:
        (tmp_path / "go").touch()
        try:
            rest = "" if proc.returncode is not None else proc.communicate(timeout=120)[0]
        finally:
            kill_all([proc.pid] + [pid for pid, _ in pids.values()])
    return "".join(lines) + rest, pids
