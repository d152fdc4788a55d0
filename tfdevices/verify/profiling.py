"""Capture: run code under TensorFlow's profiler and report where its ops really ran."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tfdevices.core.errors import InputError, TfDevicesError
from tfdevices.core.tf_door import import_tf
from tfdevices.core.units import short_repr
from tfdevices.mends.at_exit import call_at_exit
from tfdevices.runtime import hold_run_metadata, release_run_metadata, run_metadata_held
from tfdevices.verify.building import build_report
from tfdevices.verify.host import ProfilerTrace, read_trace
from tfdevices.verify.recording import Recorder, record_calls
from tfdevices.verify.report import PlacementReport
from tfdevices.verify.run_metadata import placed_devices

_lock = threading.Lock()
_active = False


class Capture:
    """What :func:`capturing` yields; ``report`` can be read when the block ends.

    The block's end stops the profiler and keeps the trace it wrote; the report is built
    from it when ``report`` is first read (on any thread: a logger builds it off the
    training thread), once.
    """

    def __init__(self) -> None:
        self._report: PlacementReport | None = None
        self._source: tuple[list[bytes], Recorder] | None = None
        self._building = threading.Lock()

    @property
    def report(self) -> PlacementReport:
        """The placement of everything that ran inside the block (built on first read).

        Raises:
            TfDevicesError: read before the ``with`` block ended.
        """
        with self._building:
            if self._report is None and self._source is not None:
                spaces, recorder = self._source
                self._report = _with_cold(
                    build_report(read_trace(spaces[0]) if spaces else ProfilerTrace(), recorder), recorder.traced
                )
                self._source = None
        if self._report is None:
            raise TfDevicesError(
                "the placement report is ready only after the 'with capturing()' block ends.",
                hint="read cap.report after the block.",
            )
        return self._report


_logdir: str | None = None  # the process's capture directory, removed at exit
_SHM = "/dev/shm"  # memory-backed on Linux


def _capture_dir() -> str:
    """One temporary directory for every capture of the process, in memory where the system has one.

    Directory changes can cost milliseconds on a disk (4 ms per ``rmdir``, 2 ms per ``rename``
    on this machine's ext4; microseconds in memory): the directory is made in ``/dev/shm``
    where it is writable (the profile never touches a disk), once per process; each
    capture's session directory is moved aside once read, and all of them are removed
    with the directory at exit.
    """
    global _logdir
    if _logdir is None or not os.path.isdir(_logdir):
        memory = _SHM if os.path.isdir(_SHM) and os.access(_SHM, os.W_OK | os.X_OK) else None
        _logdir = tempfile.mkdtemp(prefix="tfdevices-capture-", dir=memory)
        os.mkdir(os.path.join(_logdir, "read"))
        call_at_exit(shutil.rmtree, _logdir, True)
    return _logdir


@contextlib.contextmanager
def _profiling(tf: Any, out: list[bytes]) -> Iterator[None]:
    """Runs TensorFlow's profiler around the block; appends the XSpace it wrote (serialized) to ``out``."""
    logdir = _capture_dir()
    try:
        # TensorFlow's defaults are what capture reads: every kernel (host tracer level 2), device
        # kernels (device tracer level 1), no Python calls. TF 2.21 warns "expects an i value" on any
        # option passed, and ignores it.
        tf.profiler.experimental.start(logdir)
    except tf.errors.AlreadyExistsError:
        raise InputError(
            "TensorFlow's profiler is already running in this process; a placement capture reads its own profile.",
            hint="stop the other profile (tf.profiler.experimental.stop()) before capturing.",
        ) from None
    try:
        yield
    finally:
        tf.profiler.experimental.stop()
        _take_sessions(logdir, out)


def _take_sessions(logdir: str, out: list[bytes]) -> None:
    """Reads the profile files the profiler wrote under ``logdir``, then moves their sessions aside."""
    sessions = os.path.join(logdir, "plugins", "profile")
    for session in sorted(os.listdir(sessions)) if os.path.isdir(sessions) else []:
        here = os.path.join(sessions, session)
        for name in sorted(os.listdir(here)):
            if name.endswith(".xplane.pb"):
                with open(os.path.join(here, name), "rb") as f:
                    out.append(f.read())
        os.rename(here, tempfile.mkdtemp(dir=os.path.join(logdir, "read")))


@contextlib.contextmanager
def capturing() -> Iterator[Capture]:
    """Captures the placement of everything TensorFlow runs inside the block.

    TensorFlow's profiler records every kernel that runs, with its start and
    duration; an op callback records each eager op and function call. Nothing is
    recompiled or retraced: capturing a step that already ran costs about one
    profiled call of it.

    Yields:
        A :class:`Capture`; its ``report`` can be read when the block ends (even if it raised),
        and is built from the profiler's trace when it is first read.

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
    with _capturing({}) as cap:
        yield cap


@contextlib.contextmanager
def _capturing(placed: dict[str, str]) -> Iterator[Capture]:
    """:func:`capturing`; ``placed``: devices TensorFlow assigned ops by name, for kernels the trace places nowhere."""
    global _active
    tf = import_tf()
    with _lock:
        if _active:
            raise InputError(
                "a placement capture is already running in this process; captures do not nest.",
                hint="end the outer 'with capturing()' block (or capture()) first.",
            )
        _active = True
    cap = Capture()
    recorder = Recorder(placed=placed)
    spaces: list[bytes] = []
    try:
        with _profiling(tf, spaces), record_calls(recorder):
            yield cap
    finally:
        cap._source = (spaces, recorder)
        with _lock:
            _active = False


def _with_cold(report: PlacementReport, traced: list[str]) -> PlacementReport:
    """Marks a report of a first execution (something was traced while it was captured)."""
    if not traced:
        return report
    names = sorted(set(traced))
    note = (
        f"a first execution (cold): {len(traced)} function(s) were traced during the capture "
        f"({', '.join(short_repr(n, 60) for n in names[:3])}{', ...' if len(names) > 3 else ''}); its times include "
        "one-time set-up (tracing, kernel initialisation, autotuning): capture a later call for warm times"
    )
    return dataclasses.replace(report, cold=True, notes=(note, *report.notes))


#: Calls of plain (not tf.function) callables already run with an input signature: ``(id, signature)``.
_seen: dict[tuple[int, Any], Any] = {}
_SEEN_MAX = 4096


def _signature(value: Any) -> Any:
    """What decides a trace: each tensor's or array's shape and dtype, other values' types (bounded)."""
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value[:64])
    if isinstance(value, dict):
        return tuple((str(k), _signature(v)) for k, v in list(value.items())[:64])
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return (tuple(shape), str(dtype))
    return type(value).__name__


def _first_run(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``fn`` has not run yet with these inputs' shapes (so its next call would be cold).

    A ``tf.function`` has run with them when it holds a trace for them; for other callables,
    when an earlier capture in this process ran them with the same shapes.
    """
    count = getattr(fn, "experimental_get_tracing_count", None)
    if callable(count):
        before = count()
        try:
            fn.get_concrete_function(*args, **kwargs)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 (inputs it cannot trace now: the call itself will say)
            return True
        return count() != before
    key = (id(fn), _signature((args, kwargs)))
    if key in _seen:
        return False
    if len(_seen) >= _SEEN_MAX:  # bounded: forgetting only costs a warm-up call
        _seen.clear()
    _seen[key] = True
    return True


def capture(fn: Callable[..., Any], *args: Any, warmup: int | None = None, **kwargs: Any) -> PlacementReport:
    """Runs ``fn(*args, **kwargs)`` and reports where its ops really ran, from a warm call.

    The first execution of a function pays one-time set-up (tracing, kernel
    initialisation, cuDNN autotuning, XLA compilation) that later steps do not, so by
    default a function that has not run yet with these input shapes runs once before
    the captured call. Mind that a train step then runs twice.

    Args:
        fn: a ``tf.function``, a plain (eager) function, a Keras model, or a train step.
        *args: positional arguments for ``fn``.
        warmup: calls before the captured one: ``None`` (default) one when ``fn`` has not
            run yet with these input shapes, else none; ``0`` captures the call as it is
            (a first call is then marked ``cold``).
        **kwargs: keyword arguments for ``fn``.

    Returns:
        The :class:`PlacementReport` of the captured call.

    Raises:
        InputError: ``fn`` is not callable, ``warmup`` is not a count, or a capture is already running.

    >>> import tensorflow as tf
    >>> from tfdevices.verify import capture
    >>> report = capture(lambda: tf.reduce_sum(tf.ones([3])))
    >>> report.devices, report.cold
    (('CPU:0',), False)
    """
    if not callable(fn):
        raise InputError(
            f"capture(fn=...): expected something callable, got {type(fn).__name__}.",
            hint="pass the function itself, e.g. capture(step, x), not its result.",
        )
    if warmup is not None and (isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup <= 100):
        raise InputError(
            f"capture(warmup={warmup!r}): expected a number of calls from 0 to 100, or None.",
            hint="warmup=1 runs the function once before the captured call; warmup=0 captures it cold.",
        )
    runs = (1 if _first_run(fn, args, kwargs) else 0) if warmup is None else warmup
    placed: dict[str, str] = {}
    # Run metadata over the captured call too: a function traced but not yet run is instantiated by
    # it (a function already instantiated records nothing), and the report is built after the block.
    with _placements(placed, True):
        for _ in range(runs):
            fn(*args, **kwargs)
        with _capturing(placed) as cap:
            fn(*args, **kwargs)
    return cap.report


@contextlib.contextmanager
def _placements(placed: dict[str, str], wanted: bool) -> Iterator[None]:
    """Fills ``placed`` with the devices TensorFlow assigns the ops of functions instantiated in the block.

    From the run metadata of their partition graphs: the device of a kernel that the profiler's
    trace later ties to no executor step (TensorFlow 2.16 leaves some so in a process's first
    capture). Only when no other tfdevices reader holds run metadata (a :class:`PlacementWatch`
    reads what it records, and reading it consumes it).
    """
    if not wanted or run_metadata_held():
        yield
        return
    from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

    hold_run_metadata()
    try:
        context.export_run_metadata()  # what was recorded before is not this block's
        yield
        metadata = context.export_run_metadata()
    finally:
        release_run_metadata()
    placed.update(placed_devices(metadata.function_graphs if metadata is not None else ()))
