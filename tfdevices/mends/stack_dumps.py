"""Mend ``stack_dumps``: ``SIGUSR1`` writes every thread's Python stack to this rank's stack file.

When a job stalls (:mod:`tfdevices.jobs.stall`), whoever watches it asks each local rank where it is:
``faulthandler.register(SIGUSR1, file, all_threads=True)`` makes the interpreter write each thread's
stack from a C signal handler, even while the main thread blocks inside TensorFlow. A signal handler is
process state, so it is a mend: registered only where a multi-worker job reports progress and the
program has no ``SIGUSR1`` handler of its own.

Detected: ``faulthandler.register`` and ``SIGUSR1`` exist (POSIX), ``SIGUSR1`` has its default action.
Off: a stall report names ranks and phases but shows no frames. Undone: ``faulthandler.unregister``.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from typing import IO

from tfdevices.mends.base import Finding, Mend, needed, not_needed, register, unknown


class StackDumps(Mend):
    """Registers ``faulthandler`` on ``SIGUSR1``, writing to a file named before :meth:`apply`."""

    name = "stack_dumps"
    changes = "the SIGUSR1 handler (faulthandler.register: each thread's stack to the rank's stack file)"
    why = "a stalled rank's frame is what says why it stalled"
    detects = "faulthandler.register and SIGUSR1 exist, and SIGUSR1 has no handler yet"
    hint = "a stall report names the ranks and their phases; dump a stalled rank's frames with py-spy."

    def __init__(self) -> None:
        super().__init__()
        self.path: str | None = None
        self._file: IO[str] | None = None

    def _check(self) -> Finding:
        usr1 = getattr(signal, "SIGUSR1", None)
        if usr1 is None or not hasattr(faulthandler, "register"):
            return unknown("this platform has no SIGUSR1 or faulthandler.register", self.hint)
        if self.path is None:
            return not_needed("no stack file was named (not a job that reports progress)")
        if signal.getsignal(usr1) not in (signal.SIG_DFL, None):
            return unknown("the program handles SIGUSR1 itself: left to it", self.hint)
        return needed(self.detects)

    def _apply(self) -> str:
        assert self.path is not None
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the C handler)
        faulthandler.register(signal.SIGUSR1, file=self._file, all_threads=True, chain=False)
        return f"SIGUSR1 writes every thread's stack to {self.path}"

    def _undo(self) -> None:
        faulthandler.unregister(signal.SIGUSR1)
        if self._file is not None:
            self._file.close()


MEND = register(StackDumps())


def dump_stacks_to(path: str) -> None:
    """Names this rank's stack file and applies the mend (where on)."""
    MEND.path = path
    MEND.apply()
