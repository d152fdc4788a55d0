"""Keras callbacks: log where a real training step of ``fit`` ran.

:class:`PlacementLogger` captures a training step of ``model.fit`` (or one every N steps) with
:func:`tfdevices.verify.capturing`, writes it with
:func:`tfdevices.tensorboard.write_placement`, and logs per-device memory
(``tf.config.experimental.get_memory_info``, where the device supports it) at
the end of every epoch. It works with Keras 3 and with ``tf_keras``; every write
opens, flushes and closes its own summary writer, so nothing is left unwritten
when training raises.

>>> import tempfile, keras, numpy as np
>>> from tfdevices.tensorboard.callbacks import PlacementLogger
>>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> logger = PlacementLogger(tempfile.mkdtemp(), at_step=1)
>>> _ = model.fit(np.ones((8, 4)), np.ones((8, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])
>>> logger.report.devices
('CPU:0',)
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import statistics
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from tfdevices.core.devices import short_name
from tfdevices.core.errors import InputError, PlacementChangedError
from tfdevices.core.tf_door import import_tf
from tfdevices.core.units import format_bytes
from tfdevices.mends import fit_end
from tfdevices.tensorboard.worker import Worker
from tfdevices.tensorboard.writer import EventWriter, summary_writer, write_summaries
from tfdevices.verify import PlacementReport, capturing
from tfdevices.verify.drift import PlacementChange, drift, functions_of
from tfdevices.verify.profiling import Capture
from tfdevices.verify.run_metadata import Instantiation, PlacementWatch, traced_functions

_FRAMEWORKS = ("keras", "tf_keras")


def keras_framework(framework: str | None) -> str:
    """The explicit argument, else ``tf_keras`` when ``TF_USE_LEGACY_KERAS`` is set, else Keras 3."""
    if framework is None:
        legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")
        return "tf_keras" if legacy else "keras"
    if framework not in _FRAMEWORKS:
        raise InputError(
            f"PlacementLogger(framework={framework!r}): expected one of {', '.join(_FRAMEWORKS)}.",
            hint="framework='keras' for Keras 3, 'tf_keras' for the legacy tf.keras.",
        )
    return framework


@functools.cache
def with_callback_base(cls: type, framework: str) -> type:
    """``cls`` combined with the framework's ``Callback`` base class (one class per framework)."""
    if framework == "tf_keras":
        import tf_keras as module  # noqa: PLC0415 (lazy Keras)
    else:
        import keras as module  # noqa: PLC0415 (lazy Keras)
    return type(
        f"{cls.__name__}[{framework}]",
        (cls, module.callbacks.Callback),
        {"__module__": cls.__module__, "__doc__": cls.__doc__},
    )


class PlacementLogger:
    """Keras callback: captures training step ``at_step`` of ``fit`` (and later ones) to TensorBoard, and watches them.

    The arguments after ``logdir`` are the fields of a :class:`PlacementLoggerConfig` (``config``), checked
    when the logger is made.

    Args:
        logdir: the TensorBoard run directory to write into.
        at_step: the training step to capture, counted from 0 over the whole ``fit``
            (Keras' ``optimizer.iterations``); the default 1 is the first step after tracing.
            ``None``: no profiler capture at all (the watch still sees every instantiation).
        every: also capture every ``every`` steps after ``at_step``; ``"auto"`` spaces the
            captures so that they cost about ``budget`` of the training time (from the
            measured cost of the last capture and the measured step time); ``None``: that
            step only. Each capture is written at its own step, so the scalars become
            series over steps.
        budget: with ``every="auto"``, the share of training time captures may take (0.01: 1%).
        on_change: what to do when a capture differs from the previous one of the same
            function, or a new traced function replaced it (ops that moved device, transfers
            that appeared or vanished, busy time that shifted, a retrace): ``None`` records
            it (``changes``, the summaries and the report's notes), ``"warn"`` also warns,
            ``"raise"`` stops ``fit`` with :class:`~tfdevices.PlacementChangedError`, a
            callable is called with the :class:`~tfdevices.verify.drift.PlacementChange`.
        busy_threshold: a device's busy time counts as shifted when its share of all devices'
            busy time changed by more than this (0.25: by 25 points).
        name: the prefix of the summary tags.
        framework: ``"keras"`` (Keras 3) or ``"tf_keras"``; by default ``tf_keras`` when
            ``TF_USE_LEGACY_KERAS`` is set, else Keras 3.
        watch: whether to see every new instantiation of the train function from the runtime's
            placed graphs (:class:`~tfdevices.verify.run_metadata.PlacementWatch`), without the
            profiler and at no per-step cost: its first placement, and at each retrace the ops
            that moved, the transfers that changed and its new input signature, as a
            :class:`~tfdevices.verify.drift.PlacementChange` in ``changes`` (unless a capture
            at that step reported it) and as ``NAME/placed`` text at its step. It turns
            TensorFlow's run metadata on for the fit (a process-wide setting; off again at
            the end if it turned it on) and says so in ``NAME/status``.
        memory: whether to log memory at each capture and at the end of each epoch, one series
            per allocator (each GPU's own, and one for the host CPU however many logical CPUs
            share it): the current use, and the peak since the last point. A GPU whose peak
            passes 90% of its configured memory limit is warned about once.

    Attributes:
        config: the arguments after ``logdir``, checked (a :class:`PlacementLoggerConfig`).
        steps: the steps captured so far.
        changes: the :class:`~tfdevices.verify.drift.PlacementChange` of each capture that
            differed from the one it was compared with.
        costs: seconds each capture added to its step on the training thread (the step run under the
            profiler, its start and stop); building the report and writing it run on a background
            worker (``worker_costs``: its seconds per capture), flushed at the end of ``fit`` and at exit.
            When ``fit`` raises (the model, another callback), Keras calls no ``on_train_end``: the
            mend ``fit_end`` stops the watch, puts the model's train function back and ends the worker.
        errors: the errors of the worker's jobs (each also warned about on the training thread).
        placed: ``(step, Instantiation)`` of every instantiation the watch saw, at the step that ran it.

    Raises:
        InputError: ``at_step``, ``every``, ``budget``, ``on_change`` or ``busy_threshold`` is out
            of range, or ``framework`` is unknown.

    Step 1 of a ``fit`` captured into ``logs/placement``, read back as a report
    (``tensorboard --logdir logs`` shows it in the Placement tab):

    >>> import keras  # doctest: +SKIP
    >>> import numpy as np  # doctest: +SKIP
    >>> from tfdevices.tensorboard import PlacementLogger, read_placement  # doctest: +SKIP
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])  # doctest: +SKIP
    >>> model.compile(optimizer="sgd", loss="mse")  # doctest: +SKIP
    >>> logger = PlacementLogger("logs/placement")  # doctest: +SKIP
    >>> x, y = np.ones((64, 4)), np.ones((64, 2))  # doctest: +SKIP
    >>> history = model.fit(x, y, batch_size=8, verbose=0, callbacks=[logger])  # doctest: +SKIP
    >>> logger.steps, len(read_placement("logs/placement").devices)  # doctest: +SKIP
    ([1], 1)
    """

    model: Any  # the model being trained: Keras' Callback.set_model sets it
    __signature__: ClassVar[inspect.Signature]  # __init__'s (below the class)

    def __new__(cls, *args: Any, **kwargs: Any) -> PlacementLogger:
        """An instance of the callback class of the chosen Keras (``framework=``)."""
        if cls is PlacementLogger:
            cls = with_callback_base(PlacementLogger, keras_framework(kwargs.get("framework")))
        return super().__new__(cls)

    def __init__(self, logdir: str | os.PathLike[str], at_step: int | None = 1, **options: Any) -> None:
        super().__init__()
        self.logdir = os.fspath(logdir)
        self.config = _config(at_step, options)
        self._step = 0  # the training step about to run, counted over the whole fit
        self._captures = _Captures(self.logdir, self.config, f"placement-{id(self):x}")
        kept = self._captures  # the same lists: the captures fill them, the logger shows them
        self.steps: list[int] = kept.steps
        self.changes: list[PlacementChange] = kept.changes
        self.costs: list[float] = kept.costs
        self.worker_costs: list[float] = kept.worker_costs
        self.errors: list[BaseException] = kept.errors
        self.placed: list[tuple[int, Instantiation]] = kept.placed
        fit_end.arm()  # Keras calls no on_train_end when fit raises: the mend tells the abort (before fit starts)

    @property
    def report(self) -> PlacementReport | None:
        """The latest captured :class:`~tfdevices.verify.PlacementReport`, ``None`` until step ``at_step`` ran
        (reading it waits for the worker to finish the captures handed to it).
        """
        self._captures.worker.flush()
        return self._captures.compared.report

    @property
    def memory_devices(self) -> tuple[str, ...]:
        """The allocators whose memory was logged (``"GPU:0"``, ``"CPU"`` for the host); devices without memory
        statistics are skipped.
        """
        return self._captures.memory.devices

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Wraps the model's train function for the one call that runs a step to capture."""
        if self._captures.step_begins(self._step):
            self._captures.swap(self.model, self._step)
        self._step += 1

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        """Starts watching the train function's instantiations (``watch=True``)."""
        fit_end.when_fit_fails(self.model, self._captures.abort)
        if self.config.watch:
            self._captures.start_watch(getattr(self.model, "train_function", None), self._step)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Reads the placement of a train function instantiated in this step (nothing when none was)."""
        self._captures.poll(max(self._step - 1, 0))
        self._captures.deliver()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """Puts the model's own train function back if the captured step never ran; stops the watch."""
        self._captures.end_fit(max(self._step - 1, 0))
        self._captures.deliver()
        fit_end.forget(self.model, self._captures.abort)
        if self.config.at_step is not None and not self.steps and self._step <= self.config.at_step:
            said = (
                f"PlacementLogger(at_step={self.config.at_step}) captured nothing: training ran {self._step} "
                f"step(s) (0..{max(self._step - 1, 0)}), so step {self.config.at_step} never came"
            )
            with summary_writer(self.logdir) as writer:  # for `tfdevices placement` to say so, too (worker idle)
                writer.text(f"{self.config.name}/status", said, max(self._step - 1, 0))
            warnings.warn(
                f"{said}. HINT: pass at_step={min(1, max(self._step - 1, 0))} (steps count from 0 over the whole fit).",
                RuntimeWarning,
                stacklevel=2,
            )

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """Logs ``current`` memory and the ``peak`` since the last point, at the current step."""
        if self.config.memory:
            step, memory = max(self._step - 1, 0), self._captures.memory
            self._captures.write(lambda writer: memory.log(writer, step))


class _Captures:
    """What a :class:`PlacementLogger` does between Keras' calls (internal): when to capture (the schedule), the
    step captured (the train function swapped for one call), the watch of the train function's instantiations,
    the comparison of each capture with the one before (a retrace, ``on_change``), and the writing.

    Building, comparing and writing a capture run on the background worker; the reactions to a change (a
    warning, ``on_change``'s call or error) and the worker's errors are delivered on the training thread.

    Args:
        logdir: the TensorBoard run directory to write into.
        config: the logger's checked arguments.
        name: the worker's name (its thread is ``tfdevices-NAME``).
    """

    def __init__(self, logdir: str, config: PlacementLoggerConfig, name: str) -> None:
        self.logdir = logdir
        self.config = config
        self.steps: list[int] = []
        self.changes: list[PlacementChange] = []
        self.costs: list[float] = []
        self.worker_costs: list[float] = []
        self.errors: list[BaseException] = []
        self.placed: list[tuple[int, Instantiation]] = []
        self.schedule = _CaptureSchedule()
        self.swapped: _Swapped | None = None  # the train function put in for the step to capture
        self.worker = Worker(name)
        self.watch: PlacementWatch | None = None
        self.compared = _Compared()
        self.memory = _MemoryLog(config.name)
        self.reactions: list[PlacementChange] = []  # changes the worker found, reacted to on the training thread

    def step_begins(self, step: int) -> bool:
        """Times the step that begins (for ``every="auto"``); whether it is one to capture."""
        self.schedule.tick(self.config.budget)
        return self.schedule.due(step, self.config.at_step, self.config.every)

    def swap(self, model: Any, step: int) -> None:
        """Puts in the model's train function one that captures its next call, then puts the original back."""
        original = model.train_function

        def captured(*args: Any, **kwargs: Any) -> Any:
            model.train_function = original
            started = time.perf_counter()
            try:
                with capturing() as cap:
                    return original(*args, **kwargs)
            finally:
                self.captured(cap, step, started)

        model.train_function = captured
        self.swapped = _Swapped(model, original, captured)

    def start_watch(self, function: Any, step: int) -> None:
        """Starts watching the instantiations of the train function ``function`` (``None``: not made yet)."""
        if self.watch is None:  # one watch for every fit: a retrace in a later fit is compared with the earlier
            self.watch = PlacementWatch()
        self.watch.functions = traced_functions([function] if function is not None else [])
        self.watch.start()
        status = (
            "watching the train function's instantiations from the runtime's placed graphs: TensorFlow's "
            "run metadata (a process-wide setting) "
            + ("turned on by tfdevices for this fit" if self.watch.turned_on else "already on (left as it was)")
        )
        self.write(lambda writer: writer.text(f"{self.config.name}/status", status, step))

    def poll(self, step: int) -> None:
        """Reads the placement of each train function instantiated since the last poll, at ``step``."""
        if self.watch is not None and self.watch.running:
            self.placed_at(self.watch.poll(), step)

    def write(self, write: Callable[[EventWriter], Any]) -> None:
        """Writes on the worker, in its own event file."""

        def job() -> None:
            with summary_writer(self.logdir) as writer:
                write(writer)

        self.worker.submit(job)

    def placed_at(self, found: list[Instantiation], step: int) -> None:
        """The instantiations the watch found, kept, written and, where one changed the placement, reacted to."""
        if found:
            self.worker.flush()  # a capture of this step may have reported the change already
        for new in found:
            previous = self.placed[-1][0] if self.placed else step
            self.placed.append((step, new))
            change = new.change
            if change is not None:
                change = dataclasses.replace(change, step=step, previous_step=previous)
            reported = any(c.step == step and c.retraced for c in self.changes)  # a capture of this step said it
            news = change is not None and change.changed and not reported

            def write(writer: EventWriter, new: Instantiation = new, change: Any = change, news: bool = news) -> None:
                writer.text(
                    f"{self.config.name}/placed",
                    f"{_indented(new.report.summary())}\n\n{new.report.to_markdown()}",
                    step,
                )
                if news and change is not None:
                    _write_change(writer, self.config.name, change)

            self.write(write)
            if news and change is not None:
                self.changes.append(change)
                self.react(change)

    def end_fit(self, step: int) -> None:
        """The fit ended: the last instantiations read, the watch stopped, the train function back, all written."""
        watch = self.watch
        if watch is not None and watch.running:
            try:
                self.placed_at(watch.poll(), step)
            finally:
                watch.stop()
        self.put_back()
        self.worker.flush()

    def put_back(self) -> None:
        """The model's own train function back, if the step to capture never ran."""
        swapped, self.swapped = self.swapped, None
        if swapped is not None and swapped.model.train_function is swapped.captured:
            swapped.model.train_function = swapped.original

    def abort(self) -> None:
        """``fit`` raised, so Keras calls no ``on_train_end`` (mend ``fit_end``): nothing is left on.

        The watch lets TensorFlow's run metadata go, the model gets its own train function back and
        the worker writes what it was given, then its thread ends.
        """
        if self.watch is not None:
            self.watch.stop()
        self.put_back()
        self.worker.close()

    def captured(self, cap: Capture, step: int, started: float) -> None:
        """On the training thread: the profiler has stopped; the rest is handed to the worker."""
        self.steps.append(step)
        self.worker.submit(lambda: self.build(cap, step))
        self.costs.append(time.perf_counter() - started)
        self.schedule.captured(step, self.costs[-1])
        self.deliver()

    def build(self, cap: Capture, step: int) -> None:
        """On the worker: the report built, compared and written."""
        started = time.perf_counter()
        report = cap.report
        change = self.compared.change(report, step, self.config.busy_threshold)
        if change is not None and change.changed:
            self.changes.append(change)
            self.reactions.append(change)
            report = dataclasses.replace(report, notes=(f"changed: {change.summary()}", *report.notes))
        self.compared.report = report
        functions = functions_of(report)
        graphs = functions not in self.compared.graphs_written
        self.compared.graphs_written.add(functions)
        with summary_writer(self.logdir) as writer:  # one event file for everything of this capture
            write_summaries(writer, report, step, self.config.name, graphs=graphs)
            if change is not None:
                _write_change(writer, self.config.name, change)
            if self.config.memory:
                self.memory.log(writer, step)
        self.worker_costs.append(time.perf_counter() - started)

    def deliver(self) -> None:
        """On the training thread: the worker's errors warned about, its changes reacted to (which may raise)."""
        for err in self.worker.take_errors():
            self.errors.append(err)
            warnings.warn(
                f"PlacementLogger could not build or write a capture: {type(err).__name__}: {err}",
                RuntimeWarning,
                stacklevel=3,
            )
        while self.reactions:
            self.react(self.reactions.pop(0))

    def react(self, change: PlacementChange) -> None:
        """What ``on_change`` asks for a change: nothing more, a warning, an error that stops ``fit``, or a call."""
        if self.config.on_change == "warn":
            warnings.warn(f"placement changed: {change.summary()}", RuntimeWarning, stacklevel=2)
        elif self.config.on_change == "raise":
            if self.watch is not None:  # fit stops here without on_train_end: run metadata off now
                self.watch.stop()
            raise PlacementChangedError(
                f"placement changed during training: {change.summary()}.",
                hint="pin the moved ops with tf.device where they are created, or keep "
                "input shapes fixed (drop_remainder=True) so the step is not retraced; "
                "on_change='warn' only warns.",
            )
        elif callable(self.config.on_change):
            self.config.on_change(change)


@dataclass(frozen=True)
class PlacementLoggerConfig:
    """What a :class:`PlacementLogger` captures, how often, and what it logs beside: its arguments after
    ``logdir`` (described there), each checked when the record is made; ``framework`` is resolved
    (``None``: ``tf_keras`` when ``TF_USE_LEGACY_KERAS`` is set, else ``keras``).

    Raises:
        InputError: ``at_step``, ``every``, ``budget``, ``on_change`` or ``busy_threshold`` is out
            of range, or ``framework`` is unknown.
    """

    at_step: int | None = 1
    every: int | str | None = None
    budget: float = 0.01
    on_change: str | Callable[[PlacementChange], Any] | None = None
    busy_threshold: float = 0.25
    name: str = "placement"
    framework: str | None = None
    memory: bool = True
    watch: bool = True

    def __post_init__(self) -> None:
        _check(self.at_step, self.every, self.budget, self.on_change, self.busy_threshold)
        object.__setattr__(self, "budget", float(self.budget))
        object.__setattr__(self, "busy_threshold", float(self.busy_threshold))
        object.__setattr__(self, "framework", keras_framework(self.framework))


def _config(at_step: int | None, options: dict[str, Any]) -> PlacementLoggerConfig:
    """The logger's arguments after ``logdir`` as a checked record; an argument it does not have is an error."""
    known = [f.name for f in dataclasses.fields(PlacementLoggerConfig)]
    unknown = sorted(set(options) - set(known[1:]))
    if unknown:
        raise InputError(
            f"PlacementLogger({unknown[0]}=...): no such argument; PlacementLogger takes logdir, {', '.join(known)}.",
            hint="PlacementLogger(logdir, at_step=1, every=100) captures step 1, then every 100 steps.",
        )
    return PlacementLoggerConfig(at_step, **options)


class _Swapped(NamedTuple):
    """The model whose train function was swapped for the one that captures a step (internal)."""

    model: Any
    original: Any  # its own train function
    captured: Any  # the one put in its place, which puts the original back when it runs


@dataclass
class _Compared:
    """What each capture is compared with (internal, written by the worker): the last capture of each set of
    traced functions and the last of all, as ``(step, report)``; the sets whose graphs were written.
    """

    by_function: dict[tuple[int, ...], tuple[int, PlacementReport]] = field(default_factory=dict)
    last: tuple[int, PlacementReport] | None = None
    graphs_written: set[tuple[int, ...]] = field(default_factory=set)
    report: PlacementReport | None = None  # the latest captured report

    def change(self, report: PlacementReport, step: int, busy_threshold: float) -> PlacementChange | None:
        """The capture's change since the previous one of its functions, or since the one it replaced; the
        capture is kept as the one the next of its functions (and the next of all) is compared with.
        """
        functions = functions_of(report)
        earlier = self.by_function.get(functions) or self.last
        self.by_function[functions] = self.last = (step, report)
        if earlier is None:
            return None
        return drift(earlier[1], report, step=step, previous_step=earlier[0], busy_threshold=busy_threshold)


# help(), inspect and Sphinx read a class's signature from __new__ before __init__: __new__ only picks the Keras
# base, so the class says its arguments: logdir, at_step, then the other fields of PlacementLoggerConfig.
PlacementLogger.__signature__ = inspect.Signature(
    [
        inspect.Parameter("logdir", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str | os.PathLike[str]"),
        *(
            inspect.Parameter(
                f.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD if f.name == "at_step" else inspect.Parameter.KEYWORD_ONLY,
                default=f.default,
                annotation=f.type,
            )
            for f in dataclasses.fields(PlacementLoggerConfig)
        ),
    ]
)


@dataclass
class _CaptureSchedule:
    """When ``every="auto"`` captures next: from the last capture's cost and the measured step time.

    A step's time is the median of the last uncaptured steps (a step that traced or was
    captured would count its set-up); the next capture waits until three steps after the
    last one have been timed, then comes ``cost / (budget * step time)`` steps after it.
    """

    next_step: int | None = None
    _times: deque[float] = field(default_factory=lambda: deque(maxlen=16))
    _since: int = 0  # steps timed since the pending capture
    _last_tick: float | None = None
    _skip: bool = False  # the step that ended at this tick was captured
    _pending: tuple[int, float] | None = None  # (step, cost) of a capture not yet spaced
    plans: list[tuple[int, int, float, float]] = field(default_factory=list)  # (step, next, step_s, cost)

    @property
    def step_s(self) -> float | None:
        """The median time of the recent uncaptured steps, ``None`` before one was timed."""
        return statistics.median(self._times) if self._times else None

    def due(self, step: int, at_step: int | None, every: int | str | None) -> bool:
        """Whether ``step`` is one to capture: ``at_step``, then every ``every`` steps or when ``"auto"`` says."""
        if at_step is None or step < at_step:
            return False
        if step == at_step:
            return True
        if every == "auto":
            return self.next_step is not None and step >= self.next_step
        return isinstance(every, int) and (step - at_step) % every == 0

    def tick(self, budget: float) -> None:
        now = time.perf_counter()
        if self._last_tick is not None and not self._skip:
            self._times.append(now - self._last_tick)
            self._since += 1
        self._last_tick, self._skip = now, False
        if self._pending is not None and self._since >= 3:
            step, cost = self._pending
            step_s = self.step_s or cost
            self.next_step = step + max(1, math.ceil(cost / (budget * step_s)))
            self.plans.append((step, self.next_step, step_s, cost))
            self._pending = None

    def captured(self, step: int, cost: float) -> None:
        self._skip, self._since = True, 0
        self._pending = (step, cost)
        self.next_step = None


@dataclass
class _MemoryLog:
    """The memory logged at each capture and at the end of each epoch (internal, written by the worker): the
    allocators whose memory was logged, and the GPUs already warned about past 90% of their memory limit.
    """

    name: str  # the prefix of the summary tags
    devices: tuple[str, ...] = ()
    warned: set[str] = field(default_factory=set)

    def log(self, writer: EventWriter, step: int) -> None:
        """Writes each allocator's current use and peak since the last point, warns past 90%."""
        tf = import_tf()
        stats = _memory_stats(tf)
        self.devices = tuple(sorted(stats))
        for device, info in sorted(stats.items()):
            for key in ("current", "peak"):
                writer.scalar(f"{self.name}/memory/{device}/{key}_bytes", info[key], step)
        for device, message in over_limit(stats, _memory_limits(tf)).items():
            if device not in self.warned:
                self.warned.add(device)
                warnings.warn(message, ResourceWarning, stacklevel=2)


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _check(at_step: Any, every: Any, budget: Any, on_change: Any, busy_threshold: Any) -> None:
    if at_step is not None and (isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0):
        raise InputError(
            f"PlacementLogger(at_step={at_step!r}): expected a training step >= 0.",
            hint="at_step=1 captures the first step after tracing.",
        )
    if every is not None and every != "auto" and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise InputError(
            f"PlacementLogger(every={every!r}): expected a whole number of steps >= 1, 'auto', or None.",
            hint="every=100 captures steps at_step, at_step + 100, ...; every='auto' keeps the cost under budget.",
        )
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= 0.5:
        raise InputError(
            f"PlacementLogger(budget={budget!r}): expected a share of training time above 0 and at most 0.5.",
            hint="budget=0.01 lets captures take 1% of the time.",
        )
    if on_change not in (None, "warn", "raise") and not callable(on_change):
        raise InputError(
            f"PlacementLogger(on_change={on_change!r}): expected None, 'warn', 'raise' or a callable.",
            hint="on_change='raise' stops fit when the placement changes.",
        )
    if isinstance(busy_threshold, bool) or not isinstance(busy_threshold, (int, float)) or not 0 < busy_threshold < 1:
        raise InputError(
            f"PlacementLogger(busy_threshold={busy_threshold!r}): expected a share between 0 and 1.",
            hint="busy_threshold=0.25 tells a device whose share of the busy time changed by 25 points.",
        )


def _write_change(writer: EventWriter, name: str, change: PlacementChange) -> None:
    """The change as scalars (ops moved, transfers changed, retraced) and a text line, at its step."""
    writer.scalar(f"{name}/drift/moved_ops", len(change.moved), change.step)
    writer.scalar(f"{name}/drift/changed_transfers", sum(abs(b - a) for _, a, b in change.transfers), change.step)
    writer.scalar(f"{name}/drift/retraced", change.retraced, change.step)
    if change.changed:
        writer.text(f"{name}/drift", change.summary(), change.step)


def _memory_stats(tf: Any) -> dict[str, dict[str, int]]:
    """``{allocator: {"current", "peak"}}`` of every device that reports it; peaks reset (peak since the last read)."""
    stats: dict[str, dict[str, int]] = {}
    for device in tf.config.list_logical_devices():
        allocator = _allocator(short_name(device.name))
        if allocator in stats:
            continue  # logical CPUs share the host's allocator: its figures once, not once per CPU
        try:
            stats[allocator] = tf.config.experimental.get_memory_info(device.name)
            tf.config.experimental.reset_memory_stats(device.name)
        except (ValueError, RuntimeError):
            continue  # devices without allocator statistics (the CPU unless oneDNN's allocator runs)
    return stats


def _memory_limits(tf: Any) -> dict[str, int]:
    """Each logical GPU's configured memory limit in bytes (where ``configure`` or the user set one)."""
    limits: dict[str, int] = {}
    logical = 0
    for gpu in tf.config.list_physical_devices("GPU"):
        configs = tf.config.get_logical_device_configuration(gpu) or [None]
        for config in configs:
            if config is not None and getattr(config, "memory_limit", None):
                limits[f"GPU:{logical}"] = int(config.memory_limit) * 2**20
            logical += 1
    return limits


def over_limit(stats: dict[str, dict[str, int]], limits: dict[str, int], share: float = 0.9) -> dict[str, str]:
    """The devices whose peak passed ``share`` of their memory limit, with a message each.

    >>> over_limit({"GPU:0": {"current": 1, "peak": 950}, "GPU:1": {"current": 1, "peak": 10}},
    ...            {"GPU:0": 1000, "GPU:1": 1000})
    {'GPU:0': 'GPU:0 peaked at 95% of its 1000 B memory limit (950 B): the next larger batch or model may not fit'}
    """
    out = {}
    for device, info in sorted(stats.items()):
        limit = limits.get(device)
        if limit and info.get("peak", 0) > share * limit:
            out[device] = (
                f"{device} peaked at {info['peak'] / limit:.0%} of its {format_bytes(limit)} memory limit "
                f"({format_bytes(info['peak'])}): the next larger batch or model may not fit"
            )
    return out


def _allocator(device: str) -> str:
    """The allocator behind a logical device: each GPU (a logical split included) has its own;
    every logical CPU of a process uses the host's one, named ``"CPU"``.
    """
    return "CPU" if device.startswith("CPU:") else device
