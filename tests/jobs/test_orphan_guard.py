"""The orphan_guard: workers' process groups end when their launcher dies, even by SIGKILL."""

from __future__ import annotations

import sys
import time

import pytest

from tests.helpers import kill_all, run_py

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="platform: process groups and /proc (Linux)"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def _owner(then: str) -> list[int]:
    """Runs a process that guards two 'sleep' process groups with an OrphanGuard, then ``then``; returns their pids."""
    proc = run_py(
        f"""
        import os, signal, subprocess, sys
        from tfdevices.jobs.orphan_guard import OrphanGuard
        dog = OrphanGuard().__enter__()
        kids = [subprocess.Popen(["sleep", "600"], start_new_session=True, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL) for _ in range(2)]
        for kid in kids:
            dog.guard(kid.pid)
        print(" ".join(str(k.pid) for k in kids), flush=True)
        {then}
    """,
        check=False,
        timeout=60,
    )
    return [int(p) for p in proc.stdout.split()]


def test_the_groups_end_when_the_owner_is_killed():
    pids = _owner("os.kill(os.getpid(), signal.SIGKILL)")
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert len(pids) == 2 and not [p for p in pids if _alive(p)], "a guarded group outlived its owner"
    finally:
        kill_all(pids)


def test_released_groups_and_a_clean_exit_are_left_alone():
    pids = _owner("dog.release(kids[0].pid); dog.__exit__(None, None, None); os.kill(os.getpid(), signal.SIGKILL)")
    try:
        time.sleep(1)
        assert len(pids) == 2 and all(_alive(p) for p in pids), "the orphan_guard ended groups after 'done'"
    finally:
        kill_all(pids)
