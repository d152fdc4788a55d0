"""Mend ``step_progress``: each call of a ``tf.function`` that runs a step says so to the job's progress record.

A multi-worker step blocks in its collectives until every rank arrives; to name a rank that does not
(:mod:`tfdevices.jobs.stall`) each rank must say which step it is in. A custom loop calls its step as a
``tf.function`` (``strategy.run`` inside), so Python sees one call per step. This mend wraps
``tensorflow.python.eager.polymorphic_function.polymorphic_function.Function.__call__``: while a function is
traced, the strategies tfdevices builds note that it runs ``strategy.run`` (:func:`note_step_function`); each
later call of such a function from Python marks "in step N" before it and "after step N" when it returns
(about two microseconds), and every few steps has the waits its collectives measured read into the record
(the ``collective_wait`` mend: :mod:`tfdevices.mends.collective_wait`). Other functions pay one set look-up
per call. Nothing else changes.

Detected: ``Function.__call__`` exists (TensorFlow 2.16-2.21). Applied when a multi-worker job reports
progress. Off: custom loops report no steps (the stall detector then sees only ``fit``'s callbacks).
"""

from __future__ import annotations

import threading
from typing import Any

from tfdevices.core.tf_door import import_tf
from tfdevices.mends import collective_wait
from tfdevices.mends.base import Finding, Mend, needed, register, unknown, without_tensorflow

_local = threading.local()


class StepProgress(Mend):
    """Wraps ``Function.__call__`` to mark the steps of functions that run ``strategy.run``."""

    name = "step_progress"
    changes = (
        "tensorflow's Function.__call__ (polymorphic_function.py), wrapped: a step function marks its steps "
        "(and every few steps has its collectives' waits read: collective_wait)"
    )
    why = "a rank stuck before a collective blocks every other rank with no word (TF's gRPC collectives)"
    detects = "polymorphic_function.Function.__call__ exists"

    def __init__(self) -> None:
        super().__init__()
        self.writer: Any = None
        self.step_functions: set[int] = set()
        self.tracing: set[int] = set()  # step functions noted during their first call
        self._original: Any = None

    def _check(self) -> Finding:
        missing = without_tensorflow()
        if missing is not None:
            return missing
        import_tf()
        from tensorflow.python.eager.polymorphic_function import polymorphic_function  # noqa: PLC0415

        if "__call__" not in vars(getattr(polymorphic_function, "Function", object)):
            return unknown(
                "this TensorFlow has no polymorphic_function.Function.__call__",
                "a custom loop's steps are not reported; train with fit, whose callbacks report them.",
            )
        return needed(self.detects)

    def _apply(self) -> str:
        from tensorflow.python.eager.polymorphic_function import polymorphic_function  # noqa: PLC0415

        original = self._original = polymorphic_function.Function.__call__
        mend = self

        def __call__(function: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807 (the method it wraps)
            stack = getattr(_local, "stack", None)
            if stack is None:
                stack = _local.stack = []
            writer = mend.writer
            if stack or writer is None or writer.in_fit or id(function) not in mend.step_functions:
                stack.append(function)
                try:
                    return original(function, *args, **kwargs)
                finally:
                    stack.pop()
                    if not stack and writer is not None and writer.phase == "step" and id(function) in mend.tracing:
                        mend.tracing.discard(id(function))
                        writer.end_step()  # its first call: traced, noted as a step, and run
            writer.begin_step()
            stack.append(function)
            try:
                return original(function, *args, **kwargs)
            finally:
                stack.pop()
                writer.end_step()
                collective_wait.MEND.after_step(writer, writer.done)

        __call__.__wrapped__ = original  # type: ignore[attr-defined]
        polymorphic_function.Function.__call__ = __call__
        return "tf.function calls that run strategy.run mark their steps"

    def _undo(self) -> None:
        from tensorflow.python.eager.polymorphic_function import polymorphic_function  # noqa: PLC0415

        polymorphic_function.Function.__call__ = self._original


MEND = register(StepProgress())


def note_step_function() -> bool:
    """Called by ``strategy.run`` of a strategy tfdevices built: the outermost ``tf.function`` being traced
    runs steps. Returns whether ``run`` was called outside any ``tf.function`` (then it is a step itself).
    """
    stack = getattr(_local, "stack", None)
    if not stack:
        return True
    key = id(stack[0])
    if key not in MEND.step_functions:  # traced by its first call, which is this step: it begins now
        MEND.step_functions.add(key)
        writer = MEND.writer
        if writer is not None and not writer.in_fit and MEND.applied:
            MEND.tracing.add(key)
            writer.begin_step()
    return False


class StepMarks:
    """Mixed in first to the multi-worker strategies tfdevices builds: ``run`` says which step this rank is in.

    Called eagerly, each ``run`` is a step; called while a ``tf.function`` is traced, it marks that
    function as the step (the mend ``step_progress`` then marks each of its calls). Without a progress
    record (one process, or no job to report to) it is TensorFlow's ``run``, unchanged.
    """

    def run(self, fn: Any, args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """``tf.distribute.Strategy.run``, marking the step in this rank's progress record."""
        eager = note_step_function()
        writer = MEND.writer
        if not eager or writer is None or writer.in_fit:
            return super().run(fn, args=args, kwargs=kwargs, options=options)  # type: ignore[misc]
        writer.begin_step()
        try:
            return super().run(fn, args=args, kwargs=kwargs, options=options)  # type: ignore[misc]
        finally:
            writer.end_step()
