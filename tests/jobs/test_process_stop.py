"""The one way to stop processes (tfdevices/jobs/process_stop.py): SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import ast
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import kill_all
from tfdevices.jobs.process_stop import process_running, stop_processes, stop_source

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platform: process groups and /proc")

_IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"
)


def _child(code: str, **kwargs) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _ends(pid: int) -> bool:
    """``pid`` ends (a zombie counts as ended) within a minute: SIGKILL is delivered, not waited for."""
    deadline = time.monotonic() + 60
    while process_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not process_running(pid)


def test_a_child_that_ends_on_sigterm_ends_by_it() -> None:
    child = _child("import time; print('ready', flush=True); time.sleep(600)")
    stop_processes([child], grace_s=30.0)
    assert child.returncode == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period() -> None:
    child = _child(_IGNORES_TERM)
    stop_processes([child], grace_s=0.2)
    assert child.returncode == -signal.SIGKILL


def test_a_group_ends_whole_even_when_its_leader_ended_in_time() -> None:
    """The leader ends on SIGTERM; its own child ignores SIGTERM and is still killed (SIGKILL to the group)."""
    code = (
        "import subprocess, sys, time\n"
        f"kid = subprocess.Popen([sys.executable, '-c', {_IGNORES_TERM!r}], stdout=subprocess.PIPE, text=True)\n"
        "kid.stdout.readline()\n"
        "print(kid.pid, flush=True)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    assert proc.stdout.readline().strip() == "ready"
    try:
        stop_processes([proc], grace_s=0.2)
        assert proc.returncode == -signal.SIGTERM
        assert _ends(grandchild)
    finally:
        kill_all([grandchild])


def test_process_ids_without_groups_and_processes_already_gone() -> None:
    child = _child(_IGNORES_TERM)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stop_processes([child.pid, gone.pid], grace_s=0.2, groups=False)  # nothing raised for the one gone
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def test_a_zombie_does_not_run() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    assert not process_running(child.pid)
    child.wait()


def test_its_source_runs_alone_under_python_isolated_without_site() -> None:
    """What the orphan guard does: the module's text, run by ``python -I -S``, stops a process group."""
    child = _child(_IGNORES_TERM)
    script = stop_source() + f"\nstop_processes([{child.pid}], 0.2)\n"
    subprocess.run([sys.executable, "-I", "-S", "-c", script], check=True, timeout=60)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def test_one_way_to_stop_processes_in_the_package() -> None:
    """Architecture, rule 14: no function but process_stop.py's sends SIGTERM and then SIGKILL of its own."""
    package = pathlib.Path(__file__).resolve().parents[2] / "tfdevices"
    both = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
                names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                if {"SIGTERM", "SIGKILL"} <= names:
                    both.append(f"{path.relative_to(package).as_posix()}:{node.lineno} {node.name}")
    where = [b.split(":")[0] for b in both]
    assert where == ["jobs/process_stop.py"], f"stop processes with tfdevices.jobs.process_stop.stop_processes: {both}"
