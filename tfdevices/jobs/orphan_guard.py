"""Workers never outlive their launcher, even one killed by SIGKILL.

A small process started beside the launcher reads the workers' process groups from a
pipe. When the pipe closes without ``done`` (the launcher is gone, however it went) it
sends each group SIGTERM, then SIGKILL after :data:`ORPHAN_GUARD_GRACE_S` seconds.
"""

from __future__ import annotations

import subprocess
import sys

ORPHAN_GUARD_GRACE_S = 2.0


_ORPHAN_GUARD = r"""
import os, signal, sys, time
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
    signal.signal(s, signal.SIG_IGN)
groups = set()
for line in sys.stdin:
    word = line.strip()
    if word == "done":
        sys.exit(0)
    if word[:1] in "+-" and word[1:].isdigit():
        (groups.add if word[0] == "+" else groups.discard)(int(word[1:]))
def alive(g):
    try:
        os.killpg(g, 0)
        return True
    except OSError:
        return False
for g in groups:
    try:
        os.killpg(g, signal.SIGTERM)
    except OSError:
        pass
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline and any(alive(g) for g in groups):
    time.sleep(0.05)
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""


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
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _ORPHAN_GUARD, str(ORPHAN_GUARD_GRACE_S)],
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
