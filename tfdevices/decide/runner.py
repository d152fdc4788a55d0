"""Runs tune's candidates, each in its own process and process group, and talks to them.

Each candidate's process lives while tune measures: it is built once, then times windows when
asked (:mod:`~tfdevices.decide.messages`: commands on its standard input, replies on a pipe of
its own, one JSON line each). A child that does not answer in time is killed, whole group, and
reads as :class:`~tfdevices.decide.messages.Failed` (``timeout``); Ctrl-C or SIGTERM in the parent
kills every child's group before the parent stops; a parent that dies any other way (SIGKILL
included) leaves the :class:`~tfdevices.jobs.orphan_guard.OrphanGuard` to end them. Nothing travels
through the environment.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from tfdevices.decide.messages import ChildSpec, Command, Failed, Reply, Stop, decode, encode
from tfdevices.jobs.orphan_guard import OrphanGuard
from tfdevices.jobs.process_stop import stop_processes

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_GRACE_S = 2.0


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


@contextlib.contextmanager
def supervised() -> Iterator[OrphanGuard]:
    """An orphan guard for the children, and SIGTERM turned into KeyboardInterrupt (in the main thread)."""

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = None
    with contextlib.suppress(ValueError):  # not the main thread: SIGTERM keeps its handler
        previous = signal.signal(signal.SIGTERM, stop)
    try:
        with OrphanGuard() as orphan_guard:
            yield orphan_guard
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class Child:
    """One candidate's live process: :meth:`ask` sends a command and waits for its reply.

    Args:
        proc: the process (its own session: its group is killed with it).
        replies: the read end of its reply pipe.
        orphan_guard: ends it if the parent dies.
        scratch: the directory holding its spec (removed on :meth:`close`).
    """

    def __init__(self, proc: subprocess.Popen[str], replies: IO[str], orphan_guard: OrphanGuard, scratch: str) -> None:
        self.proc, self._replies, self._orphan_guard, self._scratch = proc, replies, orphan_guard, scratch
        self.ended: Failed | None = None

    def ask(self, command: Command | None, timeout_s: float) -> Reply:
        """Sends ``command`` (``None``: only waits, for the first reply) and returns the child's reply.

        A child that does not answer within ``timeout_s`` is stopped; one that ends without
        answering is read by how it ended (SIGKILL: most likely the out-of-memory killer).
        """
        if self.ended is not None:
            return self.ended
        try:
            if command is not None:
                assert self.proc.stdin is not None
                self.proc.stdin.write(encode(command) + "\n")
                self.proc.stdin.flush()
            line = self._read_line(timeout_s)
        except BrokenPipeError:
            line = ""
        except BaseException:
            self.close()
            raise
        if line is None:
            return self._end(Failed("timeout", f"no answer within {timeout_s:.0f} s: stopped. HINT: raise timeout_s"))
        if not line:
            return self._end(self._gone())
        reply = decode(line)
        if isinstance(reply, Failed):
            self._end(reply)
        return reply  # type: ignore[return-value]

    def _read_line(self, timeout_s: float) -> str | None:
        ready, _, _ = select.select([self._replies], [], [], timeout_s)
        return self._replies.readline() if ready else None

    def _gone(self) -> Failed:
        code = self.proc.wait()
        if code < 0 and -code == signal.SIGKILL:
            return Failed(
                "out_of_memory",
                "killed by SIGKILL without an answer (the system's out-of-memory killer, most likely). "
                "HINT: fewer candidates at once (candidates=...), or a smaller batch",
            )
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
        return Failed("failed", f"the process ended with {how} without an answer")

    def _end(self, failed: Failed) -> Failed:
        self.ended = failed
        self.close()
        return failed

    def stop(self) -> None:
        """Asks the child to stop (it ends its ``fit`` and exits); returns at once."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.write(encode(Stop()) + "\n")
                self.proc.stdin.flush()

    def close(self) -> None:
        """Asks the child to stop, then ends its process group whatever it does. Idempotent."""
        if self.proc.poll() is None:
            self.stop()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=_GRACE_S)
        stop_processes([self.proc], _GRACE_S)  # its process group: SIGTERM, then SIGKILL
        self._orphan_guard.release(self.proc.pid)
        for stream in (self.proc.stdin, self._replies):
            with contextlib.suppress(OSError, ValueError):
                stream.close()  # type: ignore[union-attr]
        shutil.rmtree(self._scratch, ignore_errors=True)


def start_child(spec: ChildSpec, orphan_guard: OrphanGuard) -> Child:
    """Starts one candidate's process (it builds and warms up; its first reply is Ready or Failed)."""
    scratch = tempfile.mkdtemp(prefix="tfdevices-tune-")
    spec_path = os.path.join(scratch, "spec.json")
    with open(spec_path, "w") as f:
        f.write(encode(spec))
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tfdevices.decide.child", spec_path, str(write_fd)],
            env=_child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=(write_fd,),
            text=True,
        )
    finally:
        os.close(write_fd)
    orphan_guard.guard(proc.pid)
    return Child(proc, os.fdopen(read_fd, "r"), orphan_guard, scratch)
