"""Workers never outlive their launcher, even one killed by SIGKILL.

A small process started beside the launcher reads the workers' process groups from a
pipe. When the pipe closes without ``done`` (the launcher is gone, however it went) it
sends each group SIGTERM, then SIGKILL after :data:`ORPHAN_GUARD_GRACE_S` seconds, with
:func:`~tfdevices.jobs.process_stop.stop_processes`: the guard runs with ``python -I -S``
(no site, no path: nothing of the user's environment), so it runs that module's source
(:func:`~tfdevices.jobs.process_stop.stop_source`) rather than importing it.
"""

from __future__ import annotations

import subprocess
import sys

from tfdevices.jobs.process_stop import stop_source

ORPHAN_GUARD_GRACE_S = 2.0


_GUARD_MAIN = r"""
import signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
    signal.signal(s, signal.SIG_IGN)
groups = set()
for line in sys.stdin:
    word = line.strip()
    if word == "done":
        sys.exit(0)
    if word[:1] in "+-" and word[1:].isdigit():
        (groups.add if word[0] == "+" else groups.discard)(int(word[1:]))
stop_processes(sorted(groups), float(sys.argv[1]), groups=True)
"""
"""The guard's own lines, run after :mod:`tfdevices.jobs.process_stop`'s source (it cannot import the package)."""


class OrphanGuard:
    """A small process that ends the workers' process groups when the launcher dies, even by SIGKILL.

    It reads the groups to guard from a pipe; the pipe closing without ``done`` (the
    launcher is gone, however it went) makes it send SIGTERM, then SIGKILL after
    :data:`ORPHAN_GUARD_GRACE_S` seconds. It runs in its own session, so a Ctrl-C meant
    for the launcher does not reach it.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> OrphanGuard:
        try:
            script = stop_source() + _GUARD_MAIN  # the one way to stop processes, as text: -I -S imports no package
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", script, str(ORPHAN_GUARD_GRACE_S)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            self._proc = None  # no orphan_guard: the launcher still stops its workers itself
        return self

    def guard(self, pgid: int) -> None:
        """Ends process group ``pgid`` (SIGTERM, then SIGKILL) if the launcher dies."""
        self._send(f"+{pgid}")

    def release(self, pgid: int) -> None:
        """Stops guarding process group ``pgid`` (it ended)."""
        self._send(f"-{pgid}")

    def _send(self, word: str) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            try:
                self._proc.stdin.write(f"{word}\n".encode())
                self._proc.stdin.flush()
            except OSError:
                pass

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        self._send("done")
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
