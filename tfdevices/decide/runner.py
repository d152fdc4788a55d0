"""Runs tune's candidates, each in its own fresh process and process group.

A child that runs past its time is killed, whole group; Ctrl-C or SIGTERM in the parent
kills the running child's group before the parent stops; a parent that dies any other
way (SIGKILL included) leaves the :class:`~tfdevices.jobs.watchdog.Watchdog` to end it.
Children answer with one JSON file, never through the environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from tfdevices.jobs.watchdog import Watchdog

__all__ = ["run_candidate", "supervised"]

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_GRACE_S = 2.0


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child's process group, SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, _GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def supervised() -> Iterator[Watchdog]:
    """A watchdog for the children, and SIGTERM turned into KeyboardInterrupt (in the main thread)."""

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = None
    with contextlib.suppress(ValueError):  # not the main thread: SIGTERM keeps its handler
        previous = signal.signal(signal.SIGTERM, stop)
    try:
        with Watchdog() as watchdog:
            yield watchdog
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run_candidate(spec: dict[str, Any], *, timeout_s: float, watchdog: Watchdog) -> dict[str, Any]:
    """Runs one candidate's child; returns its result, or a timeout / failure result.

    Raises:
        KeyboardInterrupt: Ctrl-C (or SIGTERM) in the parent, after the child's group is killed.
    """
    with tempfile.TemporaryDirectory(prefix="tfdevices-tune-") as tmp:
        spec_path, result_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "result.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tfdevices.decide.child", spec_path, result_path],
            env=_child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        watchdog.guard(proc.pid)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return {"status": "timeout", "detail": f"still running after {timeout_s:.0f} s: stopped"}
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            watchdog.release(proc.pid)
        _kill_group(proc)  # anything the child left in its group
        return _read(result_path, proc.returncode, time.perf_counter() - started)


def _read(path: str, code: int, wall_s: float) -> dict[str, Any]:
    try:
        with open(path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        if code < 0 and -code == signal.SIGKILL:
            return {
                "status": "out_of_memory",
                "detail": "killed by SIGKILL without a result (the system's out-of-memory killer, most likely)",
            }
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
        return {"status": "failed", "detail": f"the process ended with {how} without a result"}
    result["wall_s"] = wall_s
    return result
