"""Mend ``exit_barrier``: the workers of a multi-worker job leave together.

TensorFlow's coordination service watches every task's heartbeat; when one worker finishes and
exits while another still runs, the service reports it as unhealthy and the survivor prints
"The tasks have crashed ..." although both succeed (measured: a 2-worker job whose ranks end at
different moments). This mend registers an ``atexit`` barrier (``context.wait_at_barrier``) so
every worker waits until all have reached it, and wraps ``sys.excepthook`` so that a worker that
ends with an uncaught exception does not wait (its peers may be blocked on it; they see it go, as
without the mend). A task that really crashed stops sending heartbeats and fails the barrier at once.

The wait is bounded by the job's own exit wait: ``TFDEVICES_EXIT_WAIT`` seconds (``tfdevices launch
--exit-wait`` sets it; default :data:`DEFAULT_EXIT_WAIT_S`).

Detected: ``Context.wait_at_barrier`` exists and a coordination service runs (only multi-worker jobs
have one). Off: workers leave as TensorFlow has them, and rank 0 may print "The tasks have crashed".
Undone: the ``atexit`` hook is unregistered and ``sys.excepthook`` restored (when it is still ours).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Mapping
from typing import Any

from tfdevices.core.errors import EnvVarError
from tfdevices.core.tf_door import import_tf
from tfdevices.core.units import parse_seconds
from tfdevices.mends.base import Finding, Mend, needed, register, unknown, without_tensorflow

#: Seconds a worker waits at exit for the others when nothing else is said.
DEFAULT_EXIT_WAIT_S = 300.0
#: Environment variable that bounds the wait (seconds).
EXIT_WAIT_ENV = "TFDEVICES_EXIT_WAIT"
_MAX_EXIT_WAIT_S = 86400.0


def exit_wait_s(env: Mapping[str, str] | None = None) -> float:
    """Seconds the barrier waits: ``TFDEVICES_EXIT_WAIT``, else :data:`DEFAULT_EXIT_WAIT_S`.

    Raises:
        EnvVarError: the value is not a number of seconds in (0, 86400].

    >>> exit_wait_s({"TFDEVICES_EXIT_WAIT": "30"})
    30.0
    """
    text = (os.environ if env is None else env).get(EXIT_WAIT_ENV)
    if text is None:
        return DEFAULT_EXIT_WAIT_S
    value = parse_seconds(text, most=_MAX_EXIT_WAIT_S)
    if value is None:
        raise EnvVarError(
            f"{EXIT_WAIT_ENV} is not a number of seconds in (0, 86400].",
            hint="tfdevices launch --exit-wait SECONDS sets it; unset it for the default (300).",
        )
    return value


class ExitBarrier(Mend):
    """An ``atexit`` barrier on the coordination service, and an excepthook that skips it after a crash."""

    name = "exit_barrier"
    changes = "atexit (a barrier at exit) and sys.excepthook (wrapped: a crash skips the barrier)"
    why = "a worker that exits first makes TensorFlow's coordination service report 'The tasks have crashed'"
    detects = "TensorFlow's Context.wait_at_barrier exists (its coordination service's barrier)"
    hint = "a rank 0 line 'The tasks have crashed' after every rank exited 0 is that: the job succeeded."

    def __init__(self) -> None:
        super().__init__()
        self.crashed = False
        self.exits = 0  # times the barrier ran at exit
        self._hook: Any = None
        self._previous_hook: Any = None

    def _check(self) -> Finding:
        missing = without_tensorflow()
        if missing is not None:
            return missing
        import_tf()
        from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

        if not callable(getattr(context.Context, "wait_at_barrier", None)):
            return unknown("this TensorFlow has no Context.wait_at_barrier", self.hint)
        exit_wait_s()  # a bad TFDEVICES_EXIT_WAIT is said now, not at exit
        return needed(self.detects)

    def _apply(self) -> str:
        atexit.register(self.wait_for_the_others)
        previous = self._previous_hook = sys.excepthook
        mend = self

        def crashed(*info: Any) -> None:  # this worker must not wait for peers that may be blocked on it
            mend.crashed = True
            previous(*info)

        self._hook = sys.excepthook = crashed
        return f"workers wait for each other at exit (up to {exit_wait_s():g} s); a crash does not wait"

    def _undo(self) -> None:
        atexit.unregister(self.wait_for_the_others)
        if sys.excepthook is self._hook:
            sys.excepthook = self._previous_hook

    def wait_for_the_others(self) -> None:
        """The barrier itself (run at exit): waits for every task, or returns at once after a crash."""
        self.exits += 1
        if self.crashed:
            return
        try:
            from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

            if context.context().coordination_service is None:
                return
            context.context().wait_at_barrier("tfdevices/exit", int(exit_wait_s() * 1000))
        except Exception:  # noqa: BLE001 (a peer that crashed fails the barrier: TensorFlow reports it)
            return


MEND = register(ExitBarrier())


def leave_together() -> None:
    """Makes the workers of a multi-worker job leave together (the mend ``exit_barrier``). Idempotent.

    Called by :func:`tfdevices.build_strategy` when it builds a multi-worker strategy, and by the
    ``keras_fit`` mend when a multi-worker ``fit`` starts.
    """
    MEND.apply()
