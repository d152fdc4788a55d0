"""Capture: run code under TensorFlow's profiler and report where its ops really ran."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tfdevices.core._tf import import_tf
from tfdevices.core.errors import InputError, TfDevicesError
from tfdevices.verify.building import build_report
from tfdevices.verify.host import _Trace, read_trace
from tfdevices.verify.recording import _Recorder, _recording
from tfdevices.verify.report import PlacementReport

__all__ = ["Capture", "capture", "capturing"]

_lock = threading.Lock()
_active = False

class Capture:
    """What :func:`capturing` yields; ``report`` is set when the block ends."""

    def __init__(self) -> None:
        self._report: PlacementReport | None = None

    @property
    def report(self) -> PlacementReport:
        """The placement of everything that ran inside the block.

        Raises:
            TfDevicesError: read before the ``with`` block ended.
        """
        if self._report is None:
            raise TfDevicesError("the placement report is ready only after the 'with capturing()' block ends.",
                                 hint="read cap.report after the block.")
        return self._report


@contextlib.contextmanager
def _profiling(tf: Any, out: list[bytes]) -> Iterator[None]:
    """Runs TensorFlow's profiler around the block; appends the XSpace it wrote (serialized) to ``out``."""
    logdir = tempfile.mkdtemp(prefix="tfdevices-capture-")
    try:
        try:
            # TensorFlow's defaults are what capture reads: every kernel (host tracer level 2), device
            # kernels (device tracer level 1), no Python calls. TF 2.21 warns "expects an i value" on any
            # option passed, and ignores it.
            tf.profiler.experimental.start(logdir)
        except tf.errors.AlreadyExistsError:
            raise InputError("TensorFlow's profiler is already running in this process; a placement capture "
                             "reads its own profile.",
                             hint="stop the other profile (tf.profiler.experimental.stop()) before capturing.") from None
        try:
            yield
        finally:
            tf.profiler.experimental.stop()
            for root, _, files in os.walk(logdir):
                for name in files:
                    if name.endswith(".xplane.pb"):
                        with open(os.path.join(root, name), "rb") as f:
                            out.append(f.read())
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


@contextlib.contextmanager
def capturing() -> Iterator[Capture]:
    """Captures the placement of everything TensorFlow runs inside the block.

    TensorFlow's profiler records every kernel that runs, with its start and
    duration; an op callback records each eager op and function call. Nothing is
    recompiled or retraced: capturing a step that already ran costs about one
    profiled call of it.

    Yields:
        A :class:`Capture`; its ``report`` is ready when the block ends (even if it raised).

    Raises:
        InputError: a capture (or TensorFlow's profiler) is already running in this process.

    >>> import tensorflow as tf
    >>> from tfdevices.verify import capturing
    >>> with capturing() as cap:
    ...     with tf.device("/CPU:0"):
    ...         y = tf.constant([1.0, 2.0]) * 3.0
    >>> cap.report.ops_on("CPU:0")[0].type
    'Mul'
    """
    global _active
    tf = import_tf()
    with _lock:
        if _active:
            raise InputError("a placement capture is already running in this process; captures do not nest.",
                             hint="end the outer 'with capturing()' block (or capture()) first.")
        _active = True
    cap = Capture()
    recorder = _Recorder()
    spaces: list[bytes] = []
    try:
        with _profiling(tf, spaces), _recording(recorder):
            yield cap
    finally:
        try:
            cap._report = build_report(read_trace(spaces[0]) if spaces else _Trace(), recorder)
        finally:
            with _lock:
                _active = False


def capture(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> PlacementReport:
    """Runs ``fn(*args, **kwargs)`` once and reports where its ops really ran.

    Args:
        fn: a ``tf.function``, a plain (eager) function, a Keras model, or a train step.
        *args: positional arguments for ``fn``.
        **kwargs: keyword arguments for ``fn``.

    Returns:
        The :class:`PlacementReport` of that one call.

    Raises:
        InputError: ``fn`` is not callable, or a capture is already running.

    >>> import tensorflow as tf
    >>> from tfdevices.verify import capture
    >>> report = capture(lambda: tf.reduce_sum(tf.ones([3])))
    >>> report.devices
    ('CPU:0',)
    """
    if not callable(fn):
        raise InputError(f"capture(fn=...): expected something callable, got {type(fn).__name__}.",
                         hint="pass the function itself, e.g. capture(step, x), not its result.")
    with capturing() as cap:
        fn(*args, **kwargs)
    return cap.report
