"""Each rank of a multi-worker job says where it is; where no launcher watches, rank 0 watches.

:func:`start_reporting` (called by ``build_strategy`` for a multi-worker strategy, and by every worker
``tfdevices launch`` starts) opens this rank's progress record (:mod:`tfdevices.jobs.progress`) and arms
the mends that fill it: ``step_progress`` (a custom loop's steps), ``fit_progress`` (``fit``'s steps and
callbacks), ``collective_wait`` (each step's wait in its collectives and for its input) and ``stack_dumps``
(``SIGUSR1`` writes the Python stack). Under ``tfdevices launch`` the
launcher watches every rank (``--stall-timeout``); under ``srun`` and other launchers whose ranks share a
machine, rank 0 runs the job's one watch loop (:class:`~tfdevices.jobs.watch_loop.WatchLoop`) on a thread, and
:func:`stall_timeout` (or ``TFDEVICES_STALL_TIMEOUT``) makes it stop the job; with ``TFDEVICES_METRICS``
or :func:`~tfdevices.jobs.metrics.serve_metrics` that watch also serves the job's metrics for Prometheus
(:mod:`tfdevices.jobs.metrics`). TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfdevices.core.errors import InputError, TfDevicesError
from tfdevices.core.units import short_repr
from tfdevices.jobs.console import say
from tfdevices.jobs.coordination_keys import KeyPublisher, KeyReader, KeyValue, interval_s
from tfdevices.jobs.env import launch_info
from tfdevices.jobs.metrics import watch_metrics
from tfdevices.jobs.process_stop import stop_processes
from tfdevices.jobs.progress import ProgressWriter, progress_dir, read_records
from tfdevices.jobs.stall import STACKS_DIR_ENV, StallPolicy, policy_from_env
from tfdevices.jobs.watch import JobWatch
from tfdevices.jobs.watch_loop import WatchLoop, WatchPlace
from tfdevices.mends import collective_wait, fit_progress, stack_dumps, step_progress
from tfdevices.mends.at_exit import call_at_exit
from tfdevices.mends.base import when_imported

#: Set by ``tfdevices launch`` in its workers: the launcher watches, rank 0 need not.
LAUNCHER_WATCHES_ENV = "TFDEVICES_LAUNCHER_WATCHES"
#: Seconds between two looks of rank 0's watch.
POLL_S = 1.0


@dataclasses.dataclass(frozen=True)
class Asked:
    """What the program asked from Python (it beats the environment): replaced whole, never changed in place, so
    rank 0's watch thread reads one consistent record.
    """

    timeout_s: float | None = None
    timeout_asked: bool = False
    slow_rank: bool | None = None


class ThisRank:
    """This process's part of the job: its record's writer, rank 0's watch, and what the program asked."""

    def __init__(self) -> None:
        self.writer: ProgressWriter | None = None
        self.watch: JobWatch | None = None
        self.started: bool | None = None  # whether the watching (rank 0's, the store's) is settled
        self.asked = Asked()


#: This process's part of the job (one a process).
THIS_RANK = ThisRank()


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
        raise InputError(
            f"stall_timeout({short_repr(seconds)}): not a number of seconds > 0.", hint="e.g. 300, or None."
        )
    THIS_RANK.asked = dataclasses.replace(THIS_RANK.asked, timeout_s=seconds, timeout_asked=True)


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
            f"slow_rank_report({short_repr(enabled)}): not True or False.", hint="e.g. slow_rank_report(False)."
        )
    THIS_RANK.asked = dataclasses.replace(THIS_RANK.asked, slow_rank=enabled)


def asked_policy(policy: StallPolicy, asked: Asked | None = None) -> StallPolicy:
    """The environment's policy with what Python calls asked (they beat the environment)."""
    asked = THIS_RANK.asked if asked is None else asked
    timeout = asked.timeout_s if asked.timeout_asked else policy.timeout_s
    slow = policy.slow_rank
    if asked.slow_rank is not None:
        slow = dataclasses.replace(slow, enabled=asked.slow_rank)
    return dataclasses.replace(policy, timeout_s=timeout, slow_rank=slow)


def start_reporting(env: Mapping[str, str] | None = None, store: KeyValue | None = None) -> ProgressWriter | None:
    """Opens this rank's progress record and arms the mends that fill it; idempotent.

    Args:
        env: the environment (default ``os.environ``).
        store: the job's key-value store (TensorFlow's coordination service; :func:`tfdevices.build_strategy` hands
            it): where no launcher watches and this machine does not hold every rank, the ranks reach rank 0's watch
            through it (:mod:`tfdevices.jobs.coordination_keys`).

    Returns:
        The record's writer, or ``None`` where there is nothing to report to (one process, or no
        progress directory: not under ``tfdevices launch`` or ``srun``, and ``TFDEVICES_PROGRESS_DIR`` unset).
    """
    env = os.environ if env is None else env
    if THIS_RANK.writer is None:
        THIS_RANK.writer = _open(env)
    if THIS_RANK.writer is not None and THIS_RANK.started is None:
        THIS_RANK.started = _watch_if_rank_0(THIS_RANK.writer, env, store)
    return THIS_RANK.writer


def _open(env: Mapping[str, str]) -> ProgressWriter | None:
    """This rank's record, with the mends that fill it armed; ``None`` where there is nothing to report to."""
    try:
        directory = progress_dir(env)
        info = launch_info(env)
    except TfDevicesError as err:
        say(f"tfdevices: no stall detection in this rank: {err}")
        return None
    if directory is None or info.world_size < 2:
        return None
    try:
        writer = ProgressWriter(directory, info.rank)
    except OSError as err:
        say(f"tfdevices: no stall detection in this rank: cannot write {directory} ({err.strerror})")
        return None
    step_progress.MEND.writer = fit_progress.MEND.writer = collective_wait.MEND.writer = writer
    when_imported("tensorflow", _tensorflow_imported)
    for keras in ("keras.src.callbacks.callback_list", "tf_keras.src.callbacks"):
        when_imported(keras, _fit_imported)
    stack_dumps.dump_stacks_to(os.path.join(_stacks_dir(env, directory), f"rank{info.rank}.txt"))
    return writer


def _stacks_dir(env: Mapping[str, str], directory: str) -> str:
    return env.get(STACKS_DIR_ENV) or os.path.join(directory, "stacks")


def _watch_if_rank_0(writer: ProgressWriter, env: Mapping[str, str], store: KeyValue | None) -> bool | None:
    """Where no launcher watches: rank 0's watch, and each rank's publisher where the job spans machines. Returns
    whether that was decided (``None``: not yet: a job over machines waits for the store).
    """
    if env.get(LAUNCHER_WATCHES_ENV):
        return True
    try:
        info, policy = launch_info(env), policy_from_env(env)
    except TfDevicesError as err:
        say(f"tfdevices: no stall detection in this rank: {err}")
        return True
    spread = info.local_world_size is not None and info.local_world_size < info.world_size
    if spread and store is None:
        return None  # build_strategy hands the store once the strategy is built
    directory, node = os.path.dirname(writer.path), _node(info)
    stacks = _stacks_dir(env, directory)
    reader = None
    if spread and store is not None:
        publisher = KeyPublisher(
            store, info.rank, node, writer.path, os.path.join(stacks, f"rank{info.rank}.txt"),
            interval_s(info.world_size), _stopped_by_rank_0,
        )  # fmt: skip
        publisher.start()
        call_at_exit(publisher.close)  # before TensorFlow's context goes
        reader = KeyReader(store, range(info.world_size)) if info.rank == 0 else None
    if info.rank == 0:
        expected = range(info.world_size) if info.local_world_size == info.world_size else ()
        loop = rank_zero_loop(
            directory, stacks, node if reader is not None else "", reader, info.world_size,
            policy=lambda: asked_policy(policy), expected=expected,
        )  # fmt: skip
        _start_watching(loop)
        watch_metrics(loop.watch, env)  # TFDEVICES_METRICS or serve_metrics(): rank 0 serves the job's metrics
    return True


def _node(info: Any) -> str:
    """This machine's name for the job's lines: as the job's environment names it, else its host name."""
    if info.nodes and info.node_rank is not None and 0 <= info.node_rank < len(info.nodes):
        return str(info.nodes[info.node_rank])[:64]
    return socket.gethostname()[:64]


def rank_zero_loop(
    directory: str,
    stacks: str,
    node: str,
    reader: KeyReader | None,
    world_size: int,
    *,
    policy: StallPolicy | Callable[[], StallPolicy] | None = None,
    expected: Sequence[int] = (),
) -> WatchLoop:
    """Rank 0's watch loop where no launcher watches: this machine's records (of this job's ranks, signalled only
    while their writers run) and, where the job spans machines, the others' through the key-value store
    (``reader``).
    """
    where = os.path.join(stacks, "rank<R>.txt") + (" (rank 0's machine)" if reader is not None else "")
    place = WatchPlace(directory, stacks, node, world_size, only_running=True, prefix="tfdevices: ", stacks_where=where)
    return WatchLoop(place, StallPolicy() if policy is None else policy, list(expected), channel=reader)


def _start_watching(loop: WatchLoop) -> None:
    """Rank 0's watch: a thread that looks about once a second; at exit, the job's summary on its stderr."""
    THIS_RANK.watch = loop.watch
    stop = functools.partial(_stop_job, loop)
    threading.Thread(target=loop.run, args=(POLL_S, stop), name="tfdevices-job-watch", daemon=True).start()
    call_at_exit(lambda: _summary(loop))  # the at_exit mend: tfdevices' own clean-ups, one hook


def _stop_job(loop: WatchLoop, status: int) -> None:
    """A stall past the timeout (said, the other machines' ranks told): this machine's ranks stopped, then rank 0."""
    if loop.channel is not None:
        time.sleep(2 * POLL_S)  # the other ranks read the stop (the others stop when rank 0's service goes)
    pids = [r.pid for r in loop.signalled(read_records(loop.place.directory)) if r.pid != os.getpid()]
    stop_processes(pids, 5.0, groups=False)  # SIGTERM, SIGKILL 5 s later (TensorFlow's workers may catch SIGTERM)
    os._exit(status)


def _summary(loop: WatchLoop) -> None:
    """Rank 0 ends: one last look, then each rank's step split (the table) on its stderr."""
    try:
        loop.end()
    except Exception as err:  # noqa: BLE001 (a summary must never fail the exit)
        say(f"tfdevices: no slow-rank summary: {type(err).__name__}: {err}")


def _stopped_by_rank_0(status: int) -> None:
    """Rank 0 said the job stops (a stall past its timeout): this rank ends with that status."""
    say(f"tfdevices: rank 0 stopped the job (a stall past the stall timeout): this rank ends with status {status}")
    os._exit(status)


def _tensorflow_imported() -> None:
    step_progress.MEND.apply()
    collective_wait.MEND.apply()


def _fit_imported() -> None:
    fit_progress.MEND.apply()
    if fit_progress.MEND.applied:
        fit_progress.MEND.extend()
