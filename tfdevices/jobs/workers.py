"""One attempt's worker processes on this machine, as the launcher supervises them: started, their output pumped
to the console and their logs, checked where they listen, signalled and stopped; and the launcher's signals
forwarded to them.

:class:`Workers` holds the processes of the attempt that runs (:mod:`tfdevices.jobs.launcher` starts one attempt
after another), :class:`SignalForwarding` the launcher's SIGINT, SIGTERM and SIGHUP. TensorFlow-free.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from tfdevices.core.errors import LaunchError
from tfdevices.core.units import short_repr
from tfdevices.jobs.console import PROGRESS, Console, Record, Splitter
from tfdevices.jobs.listen_check import LISTEN_MARK, LISTEN_STATUS, OutsideCheck
from tfdevices.jobs.orphan_guard import OrphanGuard
from tfdevices.jobs.process_stop import stop_processes
from tfdevices.jobs.ranks import pinned
from tfdevices.jobs.worker_plan import WorkerPlan
from tfdevices.jobs.worker_sitecustomize import VARIABLE_LIMIT, tf_config_by_file, too_large
from tfdevices.mends.loopback import LISTEN_ENV, parse_listen

#: The signals the launcher passes to its workers.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Seconds the workers are given to end after a signal, or at the job's end, before they are killed.
GRACE_S = 10.0
#: A failed rank's last lines kept, to show when the console did not show them.
TAIL_LINES = 20


class Workers:
    """This machine's workers of one attempt: their processes, output pumps, logs and listen checks.

    Args:
        command: the program and its arguments.
        console: the job's console.
        log_dir: where each rank's lines are kept (``None``: nowhere).
        orphan_guard: kills the workers' process groups if the launcher dies (``None``: none).
    """

    def __init__(
        self, command: Sequence[str], console: Console, log_dir: str | None, orphan_guard: OrphanGuard | None
    ) -> None:
        self.command = list(command)
        self.console = console
        self.log_dir = log_dir
        self.orphan_guard = orphan_guard
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ranks: list[int] = []
        self._pumps: list[threading.Thread] = []
        self._logs: list[IO[str] | None] = []
        self._tails: dict[int, collections.deque[str]] = {}
        self.listen_failed: set[int] = set()  # ranks whose own listen check stopped them
        self.listen_breach: tuple[int, str] | None = None  # the rank the launcher's listen check stopped, and why
        self._configs: str | None = None  # where TF_CONFIGs too large for a variable are written

    def start(self, plan: WorkerPlan, env: Mapping[str, str], cpus: tuple[int, ...] | None) -> None:
        """Starts one worker (its log opened, bound to ``cpus``) and the thread that pumps its output.

        Raises:
            LaunchError: its log cannot be written.
            OSError: the command cannot start.
        """
        log = self._open_log(plan.rank)
        self._logs.append(log)
        env = self._sized(dict(env), plan.rank)
        with pinned(cpus):
            proc = subprocess.Popen(
                self.command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs.append(proc)
        self.ranks.append(plan.rank)
        if self.orphan_guard is not None:
            self.orphan_guard.guard(proc.pid)
        gpus = ",".join(map(str, plan.gpus)) or "none (CPU)"
        self.console.say(f"worker {plan.rank}: pid {proc.pid}, {plan.address}, GPUs {gpus}")
        pump = threading.Thread(target=self._pump, args=(proc, plan.rank, log), daemon=True)
        pump.start()
        self._pumps.append(pump)

    def check_listen(self, plans: Sequence[WorkerPlan]) -> OutsideCheck:
        """The launcher's own listen check of this attempt's workers, read from outside them (started)."""
        workers = [(plan.rank, proc.pid, parse_listen(plan.env[LISTEN_ENV])) for plan, proc in zip(plans, self.procs)]
        return OutsideCheck(workers, self._listen_stop).start()

    def _listen_stop(self, rank: int, line: str) -> None:
        """The launcher's listen check found ``rank`` listening beyond --listen: that worker is killed at once
        (no clean-up may keep its port open longer); the job's loop stops the others and says why.
        """
        self.listen_breach = (rank, line)
        for plan_rank, proc in zip(self.ranks, self.procs):
            if plan_rank == rank and proc.poll() is None:
                signal_group(proc, signal.SIGKILL)

    def codes(self) -> list[int | None]:
        """Each worker's exit code (``None`` while it runs), in the order they started."""
        return [p.poll() for p in self.procs]

    def statuses(self) -> dict[int, int | None]:
        """Each started worker's exit status (``None`` while it runs), for the metrics."""
        return {rank: None if (c := p.poll()) is None else exit_status(c) for rank, p in zip(self.ranks, self.procs)}

    def failure(self, rank: int, code: int) -> int:
        """A worker failed with exit code ``code``: said, with its last lines where the console hid them; its
        status.
        """
        status = exit_status(code)
        if status == LISTEN_STATUS:
            time.sleep(0.2)  # let its pump read its last line
        self.console.say(
            f"worker {rank} exited with status {status}"
            + (f" (signal {-code})" if code < 0 else "")
            + (
                ": its listen check found its TensorFlow server listening on more than --listen asked"
                if status == LISTEN_STATUS and rank in self.listen_failed
                else ""
            )
            + "; stopping the others"
        )
        self._show_tail(rank)
        return status

    def signal_all(self, signum: int) -> None:
        """Sends ``signum`` to every worker that runs (its process group)."""
        for p in self.procs:
            if p.poll() is None:
                signal_group(p, signum)

    def _sized(self, env: dict[str, str], rank: int) -> dict[str, str]:
        """``env``, its ``TF_CONFIG`` in a file where it is more than one variable may hold (said once)."""
        config = env.get("TF_CONFIG", "")
        if not too_large(config):
            return env
        if self._configs is None:
            self._configs = tempfile.mkdtemp(prefix="tfdevices-tf-config-")
            self.console.say(
                f"TF_CONFIG is {len(config.encode('utf-8')) >> 10} KiB, more than one variable may hold "
                f"({VARIABLE_LIMIT >> 10} KiB): each worker's sitecustomize reads it from a file (a worker started "
                "with python -I or -S would have none)"
            )
        tf_config_by_file(env, self._configs, rank)
        return env

    def stop_all(self, grace_s: float) -> None:
        """Stops every worker: SIGTERM, SIGKILL after ``grace_s``; then their own children (the process groups:
        :func:`~tfdevices.jobs.process_stop.stop_processes`).
        """
        stop_processes(self.procs, grace_s, reap_s=30.0)  # a killed worker may take long to be reaped
        if self.orphan_guard is not None:
            for p in self.procs:
                self.orphan_guard.release(p.pid)

    def close(self) -> None:
        """After :meth:`stop_all`: their output read to its end, their logs closed."""
        for pump in self._pumps:
            pump.join(timeout=5)
        for log in self._logs:
            if log is not None:
                log.close()
        if self._configs is not None:
            shutil.rmtree(self._configs, ignore_errors=True)

    def _open_log(self, rank: int) -> IO[str] | None:
        if not self.log_dir:
            return None
        path = os.path.join(self.log_dir, f"rank{rank}.log")
        try:
            return open(path, "a", encoding="utf-8", errors="replace")
        except OSError as err:
            raise LaunchError(
                f"--log-dir: cannot write {short_repr(path)} ({err.strerror}).",
                hint="name a directory you can write to.",
            ) from None

    def _pump(self, proc: subprocess.Popen[bytes], rank: int, log: IO[str] | None) -> None:
        stream = proc.stdout
        if stream is None:
            return
        splitter = Splitter()
        tail = self._tails.setdefault(rank, collections.deque(maxlen=TAIL_LINES))
        tail.clear()
        while True:
            data = stream.read1(1 << 16)  # type: ignore[attr-defined]  # a BufferedReader, typed IO[bytes] by Popen
            if not data:
                break
            for record in splitter.feed(data):
                self._record(rank, record, log, tail)
        for record in splitter.close():
            self._record(rank, record, log, tail)
        stream.close()

    def _record(self, rank: int, record: Record, log: IO[str] | None, tail: collections.deque[str]) -> None:
        if record.text.startswith(LISTEN_MARK):
            self.listen_failed.add(rank)
        if record.kind != PROGRESS:
            tail.append(record.text)
            if log is not None:
                try:
                    log.write(record.text + "\n")
                    log.flush()
                except OSError:  # a full disk must not stop the job's output pump
                    pass
        self.console.show(rank, record)

    def _show_tail(self, rank: int) -> None:
        """A failed rank whose lines the console did not show: its last lines."""
        if self.console.ranks is None or rank in self.console.ranks:
            return
        time.sleep(0.2)  # let its pump read what it wrote last
        lines = list(self._tails.get(rank, ()))
        if lines:
            self.console.say(
                f"the last {len(lines)} line(s) of rank {rank} ({os.path.join(self.log_dir or '', f'rank{rank}.log')}):"
            )
            for line in lines:
                self.console.echo(f"[{rank}] {line}")


class SignalForwarding:
    """The launcher's SIGINT, SIGTERM and SIGHUP, passed to the workers that run; a second one, or :data:`GRACE_S`
    seconds, and they are killed.
    """

    def __init__(self) -> None:
        self.workers: Workers | None = None  # the attempt that runs
        self.stopped_by: int | None = None  # the first signal
        self.count = 0
        self.kill_at: float | None = None  # when the workers still running are killed
        self.notices: list[str] = []  # lines for the job's loop to say (a handler must not take the console's lock)

    def forwarding(self) -> Any:
        """A context in which the launcher's signals are forwarded (on the main thread; elsewhere nothing)."""
        forwarding = self

        class _Forward:
            def __enter__(self) -> None:
                self.saved = {}
                if threading.current_thread() is threading.main_thread():
                    self.saved = {s: signal.signal(s, forwarding.forward) for s in FORWARDED}

            def __exit__(self, *exc: object) -> None:
                for s, handler in self.saved.items():
                    signal.signal(s, handler)

        return _Forward()

    def forward(self, signum: int, frame: object) -> None:
        """The signal handler: the first signal forwarded, a second one kills."""
        self.count += 1
        self.stopped_by = self.stopped_by or signum
        if self.count == 1:  # forward it; kill what still runs after the grace period
            self.kill_at = time.monotonic() + GRACE_S
            self.notices.append(
                f"signal {signum} passed to the workers; those still running in {GRACE_S:g} s, "
                "or at a second signal, are killed"
            )
            if self.workers is not None:
                self.workers.signal_all(signum)
        else:  # a second signal: no more waiting (said by the job's loop: a handler must not take the console's lock)
            self.kill_at = None
            self.notices.append("a second signal: killing the workers")
            if self.workers is not None:
                self.workers.signal_all(signal.SIGKILL)

    def signalled(self) -> bool:
        """The launcher got SIGINT, SIGTERM or SIGHUP: every wait ends at once."""
        return self.stopped_by is not None

    def kill_due(self) -> bool:
        """The grace period after the first signal is over (true once)."""
        if self.kill_at is None or time.monotonic() < self.kill_at:
            return False
        self.kill_at = None
        return True

    def grace_s(self) -> float:
        """How long the workers are given to end at the attempt's end: none after a second signal."""
        return 0 if self.count > 1 else GRACE_S


def signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Sends ``signum`` to a worker's process group (gone already: nothing)."""
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def exit_status(code: int) -> int:
    """A process's exit status as a shell says it: ``128 + N`` for a signal N."""
    return 128 - code if code < 0 else code
