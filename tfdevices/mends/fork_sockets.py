"""Mend ``fork_sockets``: a forked child lets go of the GPU names its parent holds.

A reservation (:mod:`tfdevices.gpus.reservation`) binds, on Linux, an abstract Unix socket per GPU
held; the kernel frees the name when every copy of the socket is closed. A child made with
``fork()`` (``multiprocessing``'s default start method on Linux, a data loader's workers) gets
copies of the parent's descriptors, so the GPU would stay held while the child lives, after the
parent released it. This mend registers an ``os.register_at_fork(after_in_child=...)`` handler
that closes the child's copies of those sockets (never the lock files: their ``flock`` is the
parent's, and ``release`` in the parent frees it all the same).

Detected: ``os.register_at_fork`` exists (POSIX). Applied on the first reservation that binds a
name, not at import. Off: a forked child keeps the names bound until it ends. Python cannot
unregister a fork handler: undone, the handler stays registered and does nothing.
"""

from __future__ import annotations

import contextlib
import os

from tfdevices.mends.base import Finding, Mend, needed, register, unknown

_SOCKETS: set[int] = set()  # bound names' descriptors of this process: a forked child closes its copies


class ForkSockets(Mend):
    """Registers a fork handler that closes the child's copies of the reservation's sockets."""

    name = "fork_sockets"
    changes = "os.register_at_fork (after_in_child: close the reservation's socket copies)"
    why = "a forked child's copy of a bound abstract socket keeps a released GPU held"
    detects = "os.register_at_fork exists"
    hint = "release the GPUs before forking, or start children with multiprocessing's 'spawn' method."

    def __init__(self) -> None:
        super().__init__()
        self._registered = False

    def _check(self) -> Finding:
        if not hasattr(os, "register_at_fork"):
            return unknown("this platform has no os.register_at_fork", self.hint)
        return needed(self.detects)

    def _apply(self) -> str:
        if not self._registered:
            self._registered = True
            os.register_at_fork(after_in_child=self._in_child)
        return "a forked child closes its copies of the GPU names this process holds"

    def _undo(self) -> None:
        pass  # the handler checks `applied` and does nothing once undone

    def _in_child(self) -> None:
        if self.applied:
            for fd in list(_SOCKETS):
                close(fd)


MEND = register(ForkSockets())


def track(fd: int) -> None:
    """Marks ``fd`` (a bound name's socket) as one a forked child must close; applies the mend."""
    MEND.apply()
    _SOCKETS.add(fd)


def close(fd: int) -> None:
    """Closes ``fd`` and stops tracking it."""
    _SOCKETS.discard(fd)
    with contextlib.suppress(OSError):
        os.close(fd)
