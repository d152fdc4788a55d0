"""Mend ``capture_calls``: while a placement capture runs, TensorFlow tells it which functions ran and
which were traced.

A capture (:func:`tfdevices.verify.capturing`) reads what ran from the profiler's trace, in the ops
the program wrote; to tie a kernel to the op of a ``tf.function`` it needs each called function's
graph, and to call a capture cold it needs to know which functions were traced while it ran.
TensorFlow has no public hook for either, so during each capture, and only then, this mend wraps
``AtomicFunction.call_flat`` (every call of a traced function: its graph) and
``func_graph.func_graph_from_py_func`` (every trace: its name). Both wrappers call TensorFlow's own
function with the same arguments and return what it returns.

Scope: a capture. :func:`calls_seen` applies the mend when the first capture starts and undoes it
when the last one ends: between captures TensorFlow's functions are its own.

Detected: both functions exist where TensorFlow 2.16 to 2.21 keep them. Off: a capture still reads
the trace, but ties no kernel to a function's graph (ops of a ``tf.function`` are named by their
kernels only) and cannot say that a capture was a first execution.
Undone: both functions are put back (at the end of every capture).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tfdevices.mends.base import Finding, Mend, needed, register, unknown, without_tensorflow

#: Told of each function call: ``(name, graph)``.
OnCall = Callable[[str, Any], None]
#: Told of each trace: the traced function's name.
OnTrace = Callable[[str], None]


class CaptureCalls(Mend):
    """``AtomicFunction.call_flat`` and ``func_graph_from_py_func`` wrapped while a capture runs."""

    name = "capture_calls"
    changes = (
        "TensorFlow's AtomicFunction.call_flat and func_graph.func_graph_from_py_func, during a capture only "
        "(wrapped: each call's graph and each trace are told to the capture)"
    )
    why = "TensorFlow has no public hook for a called function's graph or for a trace starting"
    detects = "AtomicFunction.call_flat and func_graph.func_graph_from_py_func exist"
    hint = "a capture still reads what ran; the ops of a tf.function are named by their kernels only."

    def __init__(self) -> None:
        super().__init__()
        self._originals: tuple[Any, Any] | None = None
        self._listeners: list[tuple[OnCall, OnTrace]] = []
        self._scopes = 0
        self._scope_lock = threading.Lock()
        self.captures = 0  # captures it was in place for

    def _check(self) -> Finding:
        missing = without_tensorflow()
        if missing is not None:
            return missing
        try:
            from tensorflow.python.eager.polymorphic_function import atomic_function  # noqa: PLC0415
            from tensorflow.python.framework import func_graph  # noqa: PLC0415 (lazy TensorFlow)
        except ImportError as err:
            return unknown(f"this TensorFlow keeps them elsewhere ({err})", self.hint)
        if not callable(getattr(atomic_function.AtomicFunction, "call_flat", None)):
            return unknown("this TensorFlow has no AtomicFunction.call_flat", self.hint)
        if not callable(getattr(func_graph, "func_graph_from_py_func", None)):
            return unknown("this TensorFlow has no func_graph.func_graph_from_py_func", self.hint)
        return needed(self.detects)

    def _apply(self) -> str:
        from tensorflow.python.eager.polymorphic_function import atomic_function  # noqa: PLC0415
        from tensorflow.python.framework import func_graph  # noqa: PLC0415 (lazy TensorFlow)

        original, trace = atomic_function.AtomicFunction.call_flat, func_graph.func_graph_from_py_func
        listeners = self._listeners

        def call_flat(function: Any, *args: Any) -> Any:
            name = function.name.decode()
            for on_call, _ in listeners:
                on_call(name, function.graph)
            return original(function, *args)

        def traced(name: Any, *args: Any, **kwargs: Any) -> Any:
            for _, on_trace in listeners:
                on_trace(str(name))
            return trace(name, *args, **kwargs)

        self._originals = (original, trace)
        atomic_function.AtomicFunction.call_flat = call_flat
        func_graph.func_graph_from_py_func = traced
        return "each call's graph and each trace are told to the running capture (undone when it ends)"

    def _undo(self) -> None:
        from tensorflow.python.eager.polymorphic_function import atomic_function  # noqa: PLC0415
        from tensorflow.python.framework import func_graph  # noqa: PLC0415 (lazy TensorFlow)

        if self._originals is not None:
            atomic_function.AtomicFunction.call_flat, func_graph.func_graph_from_py_func = self._originals
            self._originals = None


MEND = register(CaptureCalls())


@contextlib.contextmanager
def calls_seen(on_call: OnCall, on_trace: OnTrace) -> Iterator[bool]:
    """Tells ``on_call`` of every function call and ``on_trace`` of every trace while the block runs.

    The mend applies when the first such block starts and is undone when the last one ends.

    Yields:
        Whether the mend is in place (``False``: turned off, or this TensorFlow is not covered;
        nothing is told then).
    """
    listener = (on_call, on_trace)
    with MEND._scope_lock:
        MEND._scopes += 1
        MEND._listeners.append(listener)
        in_place = MEND.apply().state == "applied"
    try:
        yield in_place
    finally:
        with MEND._scope_lock:
            MEND._listeners.remove(listener)
            MEND._scopes -= 1
            if MEND._scopes == 0 and MEND.undo().state == "undone":
                MEND.captures += 1
                MEND._detail = f"in place during each capture only ({MEND.captures} so far), undone after"
