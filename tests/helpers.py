"""Shared test helpers: subprocess runs (TensorFlow's runtime is configured once
per process, so a test that needs its own device layout runs in a fresh one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def subprocess_env(extra: Mapping[str, str] | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """os.environ plus the repo on PYTHONPATH, TensorFlow's logs quiet, and ``extra``."""
    env = dict(os.environ)
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_CONFIG", "TFDEVICES_INVENTORY", *drop):
        env.pop(name, None)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra or {})
    return env


def run_py(
    code: str, *, env: Mapping[str, str] | None = None, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` (dedented) in a fresh Python; raises with its output if it fails and ``check``."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=subprocess_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m tfdevices ARGS`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "tfdevices", *args],
        env=subprocess_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def run_shown(args: list[str], *, timeout: float, **kwargs) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` with its output captured as text; past ``timeout`` the test fails with the end of what the
    command printed by then (a job that never ended shows how far it got).
    """
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as err:
        parts = (err.stdout, err.stderr)
        printed = "".join(p.decode(errors="replace") if isinstance(p, bytes) else p for p in parts if p)
        raise AssertionError(f"{args[:4]} ran past {timeout:g} s; what it printed, last:\n{printed[-4000:]}") from None


def kill_all(pids: Iterable[int]) -> None:
    """SIGKILLs every process left of ``pids`` (a test's clean-up: gone ones are skipped)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def peak_allocation(call: Callable[[], object]) -> int:
    """Bytes at the peak of Python's allocations while ``call()`` runs (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def unavailable(reason: str) -> None:
    """Skips a test whose real dependency (a browser, an engine) is missing, or fails it under ``CI=true``,
    where ``.ci/run`` must have installed it."""
    import pytest

    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}; CI must provide it (.ci/run installs it)")
    pytest.skip(reason)
