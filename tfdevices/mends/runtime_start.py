"""Mend ``runtime_start``: remember which line of the program started TensorFlow's runtime.

TensorFlow's ``set_visible_devices``, ``set_memory_growth`` and ``set_logical_device_configuration``
fail with "Visible devices cannot be modified after being initialized" (or "Physical devices
cannot be modified after being initialized") once the runtime has started, without saying what
started it. ``tensorflow/python/eager/context.py``: every op, device listing and model starts it
through ``Context.ensure_initialized``. This mend wraps that method to note the first caller
outside TensorFlow, Keras and tfdevices, so :class:`~tfdevices.core.errors.RuntimeInitializedError`
names the user's line. Nothing else changes: the wrapper calls the original at once.

Detected: ``Context.ensure_initialized`` and ``Context._context_handle`` exist (every TensorFlow
2.16-2.21). Off: the error says "something in this process started it" instead of the line.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from tfdevices.core.tf_door import import_tf
from tfdevices.mends.base import Finding, Mend, needed, not_needed, register, unknown, without_tensorflow

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RuntimeStart(Mend):
    """Wraps ``Context.ensure_initialized`` to record the line that started TensorFlow's runtime."""

    name = "runtime_start"
    changes = "tensorflow.python.eager.context.Context.ensure_initialized (wrapped: notes its first caller)"
    why = (
        "'Visible devices cannot be modified after being initialized' names no culprit "
        "(tensorflow/python/eager/context.py)"
    )
    detects = "TensorFlow's Context.ensure_initialized exists and the runtime it starts has not started yet"
    hint = "configure devices (tfdevices.configure) before any op, device listing or model starts TensorFlow."

    def __init__(self) -> None:
        super().__init__()
        self.started_by: str | None = None
        self._original: Any = None

    def _check(self) -> Finding:
        missing = without_tensorflow()
        if missing is not None:
            return missing
        import_tf()
        from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

        if not callable(getattr(context.Context, "ensure_initialized", None)):
            return unknown("this TensorFlow has no Context.ensure_initialized (the line that starts it)", self.hint)
        if context.context()._context_handle is not None:
            return not_needed("TensorFlow's runtime had already started when tfdevices was first used")
        return needed("Context.ensure_initialized exists and TensorFlow's runtime has not started yet")

    def _apply(self) -> str:
        from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

        original = self._original = context.Context.ensure_initialized
        mend = self

        def ensure_initialized(ctx: Any) -> Any:
            if mend.started_by is None and ctx._context_handle is None:
                mend.started_by = user_frame()
            return original(ctx)

        ensure_initialized.__wrapped__ = original  # type: ignore[attr-defined]
        context.Context.ensure_initialized = ensure_initialized
        return "Context.ensure_initialized notes the line that starts the runtime"

    def _undo(self) -> None:
        from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

        context.Context.ensure_initialized = self._original


def user_frame() -> str:
    """The innermost caller outside TensorFlow, Keras and tfdevices: the line that started the runtime."""
    skip = (
        os.sep + "tensorflow" + os.sep,
        os.sep + "keras" + os.sep,
        os.sep + "tf_keras" + os.sep,
        _PACKAGE + os.sep,
        "<frozen ",
    )
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not any(s in frame.filename for s in skip):
            return f"{frame.filename}:{frame.lineno} ({(frame.line or frame.name).strip()})"
    return "inside TensorFlow"


MEND = register(RuntimeStart())


def started_by() -> str | None:
    """The line that started TensorFlow's runtime, when the mend was on before it started."""
    return MEND.started_by
