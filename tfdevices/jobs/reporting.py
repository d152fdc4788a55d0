"""Each rank of a multi-worker job says where it is; where no launcher watches, rank 0 watches.

:func:`start_reporting` (called by ``build_strategy`` for a multi-worker strategy, and by every worker
``tfdevices launch`` starts) opens this rank's progress record (:mod:`tfdevices.jobs.progress`) and arms
the mends that fill it: ``step_progress`` (a custom loop's steps), ``fit_progress`` (``fit``'s steps and
callbacks), ``collective_wait`` (each step's wait in its collectives and for its input) and ``stack_dumps``
(``SIGUSR1`` writes the Python stack). Under ``tfdevices launch`` the
launcher watches every rank (``--stall-timeout``); under ``srun`` and other launchers whose ranks share a
machine, rank 0 runs the job's watch (:class:`~tfdevices.jobs.watch.JobWatch`) on a thread, and
:func:`stall_timeout` (or ``TFDEVICES_STALL_TIMEOUT``) makes it stop the job; with ``TFDEVICES_METRICS``
or :func:`~tfdevices.jobs.metrics.serve_metrics` that watch also serves the job's metrics for Prometheus
(:mod:`tfdevices.jobs.metrics`). TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping

from tfdevices.core.errors import InputError, TfDevicesError
from tfdevices.core.units import shown
from tfdevices.jobs.env import launch_info
from tfdevices.jobs.metrics import watch_metrics
from tfdevices.jobs.progress import ProgressWriter, progress_dir, read_records
from tfdevices.jobs.stacks import ask_stacks
from tfdevices.jobs.stall import STACKS_DIR_ENV, Stall, StallPolicy, policy_from_env
from tfdevices.jobs.watch import JobWatch, write_snapshot
from tfdevices.mends import collective_wait, fit_progress, stack_dumps, step_progress
from tfdevices.mends.at_exit import call_at_exit
from tfdevices.mends.base import when_imported

#: Set by ``tfdevices launch`` in its workers: the launcher watches, rank 0 need not.
LAUNCHER_WATCHES_ENV = "TFDEVICES_LAUNCHER_WATCHES"
#: A job stopped for a stall by rank 0's watch ends with this status.
STALL_STATUS = 3
_POLL_S = 1.0


@dataclasses.dataclass(frozen=True)
class _Asked:
    """What the program asked from Python (it beats the environment): replaced whole, never changed in place, so
    rank 0's watch thread reads one consistent record.
    """

    timeout_s: float | None = None
    timeout_asked: bool = False
    slow_rank: bool | None = None


class _ThisRank:
    """This process's part of the job: its record's writer, rank 0's watch, and what the program asked."""

    def __init__(self) -> None:
        self.writer: ProgressWriter | None = None
        self.watch: JobWatch | None = None
        self.asked = _Asked()


_RANK = _ThisRank()


def stall_timeout(seconds: float | None) -> None:
    """Stops the job when a stall lasts ``seconds`` past its window (``None``: report only); from Python.

    For jobs started by ``srun``, Ray Train or any launcher other than ``tfdevices launch`` (which takes
    ``--stall-timeout``): rank 0's watch reads it at its next look. An explicit call beats
    ``TFDEVICES_STALL_TIMEOUT``.

    Raises:
        InputError: ``seconds`` is not a number of seconds > 0.
    """
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf
    ):
        raise InputError(f"stall_timeout({shown(seconds)}): not a number of seconds > 0.", hint="e.g. 300, or None.")
    _RANK.asked = dataclasses.replace(_RANK.asked, timeout_s=seconds, timeout_asked=True)


def slow_rank_report(enabled: bool) -> None:
    """Turns the slow-rank report (the rank the others wait for, named while the job runs, and each rank's step
    split at its end) on or off, from Python; it is on by default.

    For jobs started by ``srun``, Ray Train or any launcher other than ``tfdevices launch`` (which takes
    ``--no-slow-rank``): rank 0's watch reads it at its next look. An explicit call beats ``TFDEVICES_SLOW_RANK``.

    Raises:
        InputError: ``enabled`` is not a bool.
    """
    if not isinstance(enabled, bool):
        raise InputError(
            f"slow_rank_report({shown(enabled)}): not True or False.", hint="e.g. slow_rank_report(False)."
        )
    _RANK.asked = dataclasses.replace(_RANK.asked, slow_rank=enabled)


def asked_policy(policy: StallPolicy, asked: _Asked | None = None) -> StallPolicy:
    """The environment's policy with what Python calls asked (they beat the environment)."""
    asked = _RANK.asked if asked is None else asked
    timeout = asked.timeout_s if asked.timeout_asked else policy.timeout_s
    slow = policy.slow_rank
    if asked.slow_rank is not None:
        slow = dataclasses.replace(slow, enabled=asked.slow_rank)
    return dataclasses.replace(policy, timeout_s=timeout, slow_rank=slow)


def start_reporting(env: Mapping[str, str] | None = None) -> ProgressWriter | None:
    """Opens this rank's progress record and arms the mends that fill it; idempotent.

    Returns:
        The record's writer, or ``None`` where there is nothing to report to (one process, or no
        progress directory: not under ``tfdevices launch`` or ``srun``, and ``TFDEVICES_PROGRESS_DIR`` unset).
    """
    if _RANK.writer is not None:
        return _RANK.writer
    env = os.environ if env is None else env
    try:
        directory = progress_dir(env)
        info = launch_info(env)
        policy = policy_from_env(env)
    except TfDevicesError as err:
        print(f"tfdevices: no stall detection in this rank: {err}", file=sys.stderr, flush=True)
        return None
    if directory is None or info.world_size < 2:
        return None
    try:
        writer = ProgressWriter(directory, info.rank)
    except OSError as err:
        print(f"tfdevices: no stall detection in this rank: cannot write {directory} ({err.strerror})", file=sys.stderr)
        return None
    _RANK.writer = step_progress.MEND.writer = fit_progress.MEND.writer = collective_wait.MEND.writer = writer
    when_imported("tensorflow", _tensorflow_imported)
    for keras in ("keras.src.callbacks.callback_list", "tf_keras.src.callbacks"):
        when_imported(keras, _fit_imported)
    stacks = env.get(STACKS_DIR_ENV) or os.path.join(directory, "stacks")
    stack_dumps.dump_stacks_to(os.path.join(stacks, f"rank{info.rank}.txt"))
    if info.rank == 0 and not env.get(LAUNCHER_WATCHES_ENV):
        expected = range(info.world_size) if info.local_world_size == info.world_size else ()
        _watch_from_rank_0(directory, stacks, expected, policy, env)
    return writer


def _watch_from_rank_0(
    directory: str, stacks: str, expected: Iterable[int], policy: StallPolicy, env: Mapping[str, str]
) -> None:
    """Rank 0 watches the job where no launcher does: a thread that looks about once a second."""

    def frames(stall: Stall) -> dict[int, list[str]]:
        return ask_stacks([r for r in stall.records if not r.node], stacks, stall.missing)

    where = os.path.join(stacks, "rank<R>.txt")
    watch = JobWatch(list(expected), lambda: asked_policy(policy), frames=frames, stacks_where=where)
    _RANK.watch = watch
    watch_metrics(watch, env, _say)  # TFDEVICES_METRICS or serve_metrics(): rank 0 serves the job's metrics
    threading.Thread(target=_watching, args=(watch, directory), name="tfdevices-job-watch", daemon=True).start()
    call_at_exit(_summary, watch, directory)  # the at_exit mend: tfdevices' own clean-ups, one hook


def _tensorflow_imported() -> None:
    step_progress.MEND.apply()
    collective_wait.MEND.apply()


def _summary(watch: JobWatch, directory: str) -> None:
    """Rank 0 ends: one last look, then each rank's step split (the table) on its stderr."""
    try:
        watch.poll(read_records(directory))
        for line in watch.summary().lines():
            _say(f"tfdevices: {line}")
    except Exception as err:  # noqa: BLE001 (a summary must never fail the exit)
        _say(f"tfdevices: no slow-rank summary: {type(err).__name__}: {err}")


def _fit_imported() -> None:
    fit_progress.MEND.apply()
    if fit_progress.MEND.applied:
        fit_progress.MEND.extend()


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _watching(watch: JobWatch, directory: str) -> None:
    """Rank 0's watch: looks until a stall outlasts the timeout, then stops every local rank."""
    while True:
        time.sleep(_POLL_S)
        try:
            snapshot = watch.poll(read_records(directory))
        except Exception as err:  # noqa: BLE001 (the watch must never take the worker down)
            _say(f"tfdevices: the job's watch stopped: {type(err).__name__}: {err}")
            return
        for line in snapshot.said:
            _say(line)
        write_snapshot(snapshot, directory)
        if snapshot.stop is None:
            continue
        _say(f"tfdevices: {snapshot.stop}")
        _stop(record.pid for record in read_records(directory) if record.pid != os.getpid())
        os._exit(STALL_STATUS)


def _stop(pids: Iterable[int], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL what still runs after ``grace_s`` (TensorFlow's workers may catch SIGTERM)."""
    alive = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            alive.append(pid)
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in alive if _running(pid)]
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is not running
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


__all__ = ["LAUNCHER_WATCHES_ENV", "STALL_STATUS", "slow_rank_report", "start_reporting", "stall_timeout"]
