"""The one way to stop processes: SIGTERM, a grace period, then SIGKILL (architecture, rule 14).

:func:`stop_processes` is used by the launcher (its workers' process groups), rank 0's
watch (a launcher-less job's ranks), ``tfdevices tune`` (a candidate's child) and the
orphan guard, whose child runs with ``python -I -S`` and cannot import the package: it
runs this module's own source (:func:`stop_source`), so there is still one copy.

This module imports the standard library only (``os``, ``signal``, ``subprocess``,
``time``), and nothing at module level may change that: the orphan guard runs its text.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable

_POLL_S = 0.05


def stop_processes(
    targets: Iterable[subprocess.Popen[bytes] | subprocess.Popen[str] | int],
    grace_s: float,
    *,
    groups: bool = True,
    reap_s: float = 5.0,
) -> None:
    """SIGTERM each target, wait up to ``grace_s`` seconds for them to end, then SIGKILL what still runs.

    A target is a child (a :class:`subprocess.Popen`, which is reaped) or a process id. With
    ``groups`` each target is the leader of a process group (``start_new_session=True``) and the
    whole group is signalled, and SIGKILL goes to every target's group at the end, even one whose
    leader ended in time: what it started is not left behind. Processes already gone are skipped;
    nothing is raised.

    Args:
        targets: the processes (or process groups' leaders) to stop.
        grace_s: seconds they have to end after SIGTERM (TensorFlow's workers may catch it); 0: none.
        groups: signal each target's process group rather than the process alone.
        reap_s: seconds to wait, after SIGKILL, for each child to be reaped.

    >>> child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    >>> stop_processes([child], grace_s=2.0)
    >>> child.returncode
    -15
    """
    listed = list(targets)
    for target in listed:
        if _running(target, groups):
            _signal(target, signal.SIGTERM, groups)
    deadline = time.monotonic() + max(0.0, grace_s)
    alive = [t for t in listed if _running(t, groups)]
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        alive = [t for t in alive if _running(t, groups)]
    for target in listed if groups else alive:
        _signal(target, signal.SIGKILL, groups)
    for target in listed:
        if not isinstance(target, int):
            try:
                target.wait(timeout=reap_s)
            except subprocess.TimeoutExpired:
                pass


def _signal(target: subprocess.Popen[bytes] | subprocess.Popen[str] | int, signum: int, groups: bool) -> None:
    pid = target if isinstance(target, int) else target.pid
    try:
        (os.killpg if groups else os.kill)(pid, signum)
    except OSError:
        pass  # gone already, or no longer ours


def _running(target: subprocess.Popen[bytes] | subprocess.Popen[str] | int, groups: bool) -> bool:
    """A child runs until it is reaped; a process id runs while it exists and is not a zombie."""
    if not isinstance(target, int):
        return target.poll() is None
    return process_running(target, group=groups)


def process_running(pid: int, *, group: bool = False) -> bool:
    """Whether process ``pid`` (with ``group``: any process of group ``pid``) runs: it exists and, for one
    process, is no zombie (exited, not yet reaped by its parent).

    >>> process_running(os.getpid())
    True
    """
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except OSError:
        return False
    if group:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux): it exists


def stop_source() -> str:
    """This module's source, for a child that cannot import the package (the orphan guard's ``python -I -S``).

    Raises:
        OSError: the source is not installed (a package of compiled files only).
    """
    with open(__file__, encoding="utf-8") as f:
        return f.read()
