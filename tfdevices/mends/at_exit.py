"""Mend ``at_exit``: tfdevices' own clean-ups run when the process exits.

A PlacementLogger writes captures on a background thread (:mod:`tfdevices.tensorboard.worker`): what it
was given when the program ends must still be written, and its errors said, not lost. Captures keep
their profiles in one scratch directory per process (:mod:`tfdevices.verify.profiling`), removed at the
end. Both need Python's exit hooks: this mend registers one ``atexit`` hook, the first time a clean-up is
asked for, that runs them in the order they were asked.

Detected: always applies. Off: nothing runs at exit: a PlacementLogger's last writes can be lost (flush
it yourself: read ``logger.report``) and scratch directories stay. Undone: the hook is unregistered.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Any

from tfdevices.mends.base import Mend, register


class AtExit(Mend):
    """One ``atexit`` hook for tfdevices' own clean-ups."""

    name = "at_exit"
    changes = "atexit (one hook: tfdevices' own clean-ups, the PlacementLogger's pending writes, scratch directories)"
    why = "a background writer's last captures, and the captures' scratch files, must not outlive their process"
    detects = "always: tfdevices has its own clean-ups to run at exit"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def _apply(self) -> str:
        atexit.register(self.run)
        return "one atexit hook runs tfdevices' clean-ups"

    def _undo(self) -> None:
        atexit.unregister(self.run)

    def run(self) -> None:
        """Runs every clean-up once, in order; one that fails does not stop the others."""
        calls, self.calls = self.calls, []
        for function, args in calls:
            try:
                function(*args)
            except Exception:  # noqa: BLE001 (at exit: nothing left to tell, the next clean-up must run)
                pass


MEND = register(AtExit())


def call_at_exit(function: Callable[..., Any], *args: Any) -> None:
    """Runs ``function(*args)`` when the process exits (where the mend is on)."""
    if MEND.apply().state == "applied":
        MEND.calls.append((function, args))
