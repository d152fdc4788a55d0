"""Reading the profiler's host plane: calls, executor steps and the kernels that ran in them.

:func:`read_trace` reads one serialized XSpace (what TensorFlow's profiler writes as
``<host>.xplane.pb``): the host plane here, each GPU's plane in
:mod:`tfdevices.verify.device`. One pass over the events; nothing is kept that the
report does not use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Final

from tfdevices.verify.device import GpuPlane, gpu_index, read_gpu_plane
from tfdevices.verify.hlo import METADATA_PLANE
from tfdevices.verify.kinds import (
    ASYNC_DONE,
    ASYNC_START,
    DONE_CALLBACK,
    EAGER,
    KERNEL,
    PROCESS,
    REGION_START,
    REGION_STOP,
    SCHEDULED,
    STEP,
    context_of,
    event_kinds,
    int_stat,
    stats_by_name,
)
from tfdevices.verify.records import gc_paused
from tfdevices.verify.xplane import xplane_module

#: The host plane's name in every XSpace TensorFlow writes.
HOST_PLANE = "/host:CPU"


#: One kernel event of the trace, a plain tuple (made thousands of times a capture, in
#: 30 ns; a slotted record takes 400): ``(key, start_ps, duration_ps, context, stats)``. ``key`` is
#: ``(op name, kernel)``, one tuple per kernel metadata of the trace (the builder's cache key),
#: ``context`` the executor step's (0 when the trace does not name one), ``stats`` the event's
#: stats for a transfer (``_Send``: its rendezvous key), else ``None``. Read by the indices below.
KernelEvent = tuple[tuple[str, str], int, int, int, "dict[str, Any] | None"]
KEY: Final = 0
START: Final = 1
DURATION: Final = 2
CONTEXT: Final = 3
STATS: Final = 4


@dataclass
class Execution:
    """One call TensorFlow executed: a function, an XLA cluster or an eager op."""

    name: str
    is_function: bool
    start_ps: int
    duration_ps: int
    contexts: list[int] = field(default_factory=list)
    xla: bool = False


@dataclass
class ProfilerTrace:
    """What the profiler recorded: calls on the Python thread, kernels by executor context."""

    executions: list[Execution] = field(default_factory=list)
    kernels: list[KernelEvent] = field(default_factory=list)
    parents: dict[int, int] = field(default_factory=dict)  # nested function context -> caller context
    outside: set[int] = field(default_factory=set)  # contexts of runs outside any call (tf.data ...)
    unplaced: list[KernelEvent] = field(default_factory=list)  # kernels whose executor step the trace does not name
    gpus: dict[int, GpuPlane] = field(default_factory=dict)  # each GPU's own timeline, by plane ordinal
    steps: set[int] = field(default_factory=set)  # step numbers marked on the host plane
    skipped: list[str] = field(default_factory=list)  # planes not read, as "name (why)"
    host_events: int = 0  # events on the host plane (read or not)
    lost_starts: list[str] = field(default_factory=list)  # asynchronous kernels known by their completion only
    done_at: dict[int, int] = field(default_factory=dict)  # executor context -> its step's done callback's start
    metadata: Any = None  # the ``/host:metadata`` plane (XLA's HLO modules), where the trace has one


@dataclass
class _Asyncs:
    """The asynchronous kernels' starts and completions of a host plane (internal), to pair them.

    A span is written when it ends: an asynchronous kernel's ``ProcessAsync::Start`` still open
    when the profiler stops (as when its thread is descheduled while the kernel completes on
    another) is lost, while its ``ProcessAsync::Done`` is kept. Such a kernel is read from its
    completion.
    """

    started: set[int] = field(default_factory=set)  # the ``_p`` of each start
    done: list[tuple[int, Any, int]] = field(default_factory=list)  # (its ``_c``, the event, its start)


def parse_space(data: bytes | bytearray | memoryview) -> Any:
    """The XSpace a ``*.xplane.pb`` file holds (``DecodeError`` when it is not one); TensorFlow is not imported."""
    return xplane_module().XSpace.FromString(data if isinstance(data, bytes) else bytes(data))  # protobuf 4: bytes


def read_trace(data: bytes | Any) -> ProfilerTrace:
    """Reads an XSpace (serialized, or parsed by :func:`parse_space`) into calls and kernels, one pass.

    On the host plane, TensorFlow records each eager call (``EagerExecute``, with the op or
    function name), each function partition it runs (``FunctionRun``, producing a context
    id), each executor step of a partition (``ExecutorState::Process``, consuming that id)
    and, inside it, each kernel as ``name:kernel`` with its start and duration. On a GPU
    these host kernels are launches; each ``/device:GPU:N`` plane holds what the GPU ran
    (:func:`tfdevices.verify.device.read_gpu_plane`). Other planes are named in ``skipped``.

    A span is written when it ends, so a step still ending when the profiler stops is
    missing while its kernels are not (the call returns as soon as its last kernel is
    done, on another thread). Such kernels are given the step that scheduled them: the
    thread pool records each closure it is given (``ThreadpoolListener::Record``) and the
    start of its run (``ThreadpoolListener::StartRegion``) with one id; the span around
    the ``Record`` names the step. A kernel whose step cannot be traced this way keeps
    no context and is reported on an unknown device.
    """
    space = parse_space(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    trace = ProfilerTrace()
    with gc_paused():
        for plane in space.planes:
            index = gpu_index(plane.name)
            if plane.name == HOST_PLANE:
                _read_host_plane(plane, trace)
            elif index is not None:
                trace.gpus[index] = read_gpu_plane(plane, index)
            elif plane.name == METADATA_PLANE:
                trace.metadata = plane
            elif plane.lines:
                trace.skipped.append(plane.name)
    trace.executions.sort(key=lambda e: e.start_ps)
    _claim_orphans(trace)
    return trace


def _claim_orphans(trace: ProfilerTrace) -> None:
    """Gives executor contexts whose ``FunctionRun`` is missing from the trace to the call that ran them.

    A context is claimed by the function call whose span holds its first kernel.
    """
    known = set(trace.parents) | trace.outside | {c for e in trace.executions for c in e.contexts} | {0}
    orphans = set(map(itemgetter(CONTEXT), trace.kernels)) - known
    if not orphans:
        return
    first: dict[int, int] = {}
    for kernel in trace.kernels:
        if kernel[CONTEXT] in orphans and kernel[CONTEXT] not in first:
            first[kernel[CONTEXT]] = kernel[START]
    calls = [e for e in trace.executions if e.is_function and e.contexts]
    for context, start in first.items():
        owner = next((e for e in calls if e.start_ps <= start <= e.start_ps + e.duration_ps), None)
        if owner is not None:
            owner.contexts.append(context)


#: Where an event ran, before the thread-pool links are followed (internal): an ``int``, the executor
#: context of the step it ran in (the common case, checked as ``where.__class__ is int``);
#: ``("async", id)`` (inside the completion of an asynchronous kernel), ``("region", event)`` (in a
#: thread-pool closure outside any recorded step: the ``StartRegion`` event, whose id is read only
#: when a kernel needs it), :data:`_EAGER_SPAN` (an eager op's kernels) or ``None`` (nowhere a step
#: can be read from).
_Where = int | tuple[str, Any] | None
_EAGER_SPAN = ("eager", 0)


@dataclass
class _Links:
    """What ties kernels to executor steps across threads (internal), filled while reading lines.

    Most kernels run inside a recorded step; the thread pool's events (half the events of a step)
    are kept as they are read, and their records decoded (their ids read) only when some kernel
    ran outside a recorded step and needs them.
    """

    consumed_id: int = -1  # the ``_c`` stat's id
    produced_id: int = -1  # the ``_p`` stat's id
    records: list[tuple[Any, _Where]] = field(default_factory=list)  # (Record event, where it was scheduled)
    async_starts: dict[int, _Where] = field(default_factory=dict)  # async kernel id -> where it started
    pending: list[tuple[int, _Where]] = field(default_factory=list)  # kernels (by index) outside any recorded step
    _scheduled: dict[int, _Where] | None = None

    def resolve(self, where: _Where) -> int:
        """The executor context ``where`` leads to, or 0 when the trace does not say."""
        if self._scheduled is None:  # closure id -> where it was scheduled, decoded once
            self._scheduled = {int_stat(event, self.produced_id): at for event, at in self.records}
        seen: set[tuple[str, int]] = set()
        while where is not None and where.__class__ is not int and where[0] in ("region", "async"):  # type: ignore[index]
            kind, key = where  # type: ignore[misc]
            if kind == "region":
                key = int_stat(key, self.consumed_id)
            if (kind, key) in seen:
                break
            seen.add((kind, key))
            where = (self._scheduled if kind == "region" else self.async_starts).get(key)
        return where if where.__class__ is int else 0


def _read_host_plane(plane: Any, trace: ProfilerTrace) -> None:
    """Reads the host plane into ``trace``, then ties the kernels that ran outside any recorded step to theirs."""
    reader = _HostPlane(plane, trace)
    for line in plane.lines:
        trace.host_events += len(line.events)
        reader.read_line(line)
    reader.finish()


#: The events whose time :meth:`_HostPlane.read_line` does not read.
_TIMELESS = frozenset({REGION_START, REGION_STOP, STEP})


def _close_spans(spans: list[tuple[int, _Where]], start: int) -> tuple[int, _Where]:
    """Drops the spans ended by ``start`` from the top of ``spans``: the innermost still open, popped, or none."""
    while spans and spans[-1][0] <= start:
        spans.pop()
    return spans.pop() if spans else (-1, None)


class _HostPlane:
    """What reading one host plane needs beyond a line (internal): what each event is, the stats' names and
    flow ids, where the trace goes, and the thread pool's links and asynchronous kernels seen so far.
    """

    def __init__(self, plane: Any, trace: ProfilerTrace) -> None:
        self.names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        ids = {name: key for key, name in self.names.items() if name in ("_c", "_p", "step_num")}
        #: The ids of the ``_c`` and ``_p`` stats (the flow ids TensorFlow's profiler ties a producer event to its
        #: consumer with) and of ``step_num`` (a step marker's number); -1 where the plane has none.
        self.consumed, self.produced, self.step_num = ids.get("_c", -1), ids.get("_p", -1), ids.get("step_num", -1)
        self.kinds = event_kinds(plane, True)
        self.trace = trace
        self.links = _Links(self.consumed, self.produced)
        self.asyncs = _Asyncs()

    def read_line(self, line: Any) -> None:
        """Reads one thread's events; kernels outside any recorded step go to ``links.pending``.

        The loop is the hot path of a capture (one turn per host event, tens of thousands per step): a
        kernel inside a step costs a tuple; a step's context is its last stat (``_c``). The spans open at
        the current event are a stack, innermost last, as ``(end, where)``: the innermost one is kept apart
        in ``end`` (-1: none open) and ``inner`` (where it says an event runs), ``region`` is the thread-pool
        closure running (it opens no span). An event that reads a time first closes the spans it starts after.
        """
        base, consumed, kind_of = line.timestamp_ns * 1000, self.consumed, self.kinds.get
        add_kernel, add_record, names = self.trace.kernels.append, self.links.records.append, self.names
        spans: list[tuple[int, _Where]] = []
        end, inner, region, process_end = -1, None, None, 0
        current: Execution | None = None
        xla_name: str | None = None  # the function whose kernel of its own name means it ran as one XLA executable
        for event in line.events:
            kind = kind_of(event.metadata_id)
            if kind is None:
                continue
            code = kind[0]
            if code == KERNEL:
                start = base + event.offset_ps
                if start >= end >= 0:
                    end, inner = _close_spans(spans, start)
                where = inner if end >= 0 else region
                if xla_name is not None and kind[1][1] == xla_name:
                    current.xla = True  # type: ignore[union-attr]  # the function ran as one compiled XLA executable
                elif where.__class__ is int:
                    add_kernel(
                        (kind[1], start, event.duration_ps, where, stats_by_name(event, names) if kind[2] else None)
                    )
                elif not int_stat(event, consumed):  # else the body of an async kernel, recorded where it started
                    self._add_outside(event, kind, start, where)
                continue
            if code in _TIMELESS:  # a thread-pool closure starts or stops (it opens no span), a step marker
                if code == REGION_START:  # its id is read only when a kernel needs it
                    region = ("region", event)
                elif code == REGION_STOP:
                    region = None
                else:
                    self._read_step(event)
                continue
            start = base + event.offset_ps
            if start >= end >= 0:
                end, inner = _close_spans(spans, start)
            where = inner if end >= 0 else region
            if code == PROCESS:
                process_end = start + event.duration_ps
                if end >= 0:
                    spans.append((end, inner))
                end, inner = process_end, context_of(event, consumed)
            elif code == SCHEDULED:
                add_record((event, where))
            else:  # the other events read the whole stack: the innermost span joins it
                if end >= 0:
                    spans.append((end, inner))
                current = self._read_call(code, event, start, where, spans, current, process_end)
                xla_name = current.name if current is not None and current.is_function else None
                end, inner = spans.pop() if spans else (-1, None)

    def _read_step(self, event: Any) -> None:
        """A step marker: its number, where it has one."""
        if any(stat.metadata_id == self.step_num for stat in event.stats):
            self.trace.steps.add(int_stat(event, self.step_num))

    def _add_outside(self, event: Any, kind: tuple[Any, ...], start: int, where: _Where) -> None:
        """A kernel that ran outside any recorded step: kept for the thread pool's links to place (eager ops: no step).

        The body of an asynchronous kernel (a collective) run by its own executor is not one: the
        kernel is recorded where it started (``ProcessAsync::Start``).
        """
        kernels = self.trace.kernels
        if where is not _EAGER_SPAN:  # eager ops are reported from their calls, not their kernels
            self.links.pending.append((len(kernels), where))
        kernels.append((kind[1], start, event.duration_ps, 0, stats_by_name(event, self.names) if kind[2] else None))

    def _read_call(
        self,
        code: int,
        event: Any,
        start: int,
        where: _Where,
        spans: list[tuple[int, _Where]],
        current: Execution | None,
        process_end: int,
    ) -> Execution | None:
        """The rarer events of a line (calls, function runs, asynchronous kernels); returns the current call.

        ``spans`` is the whole stack of open spans, innermost last; ``where`` the innermost span's place;
        ``process_end`` the end of the line's last executor step.
        """
        trace = self.trace
        if code == ASYNC_START:  # an asynchronous kernel (_Recv, collectives) starts
            stats = stats_by_name(event, self.names)
            key = (str(stats.get("name", "")), str(stats.get("kernel_type", "")))
            if where.__class__ is not int and where is not _EAGER_SPAN:  # eager ops: reported from their calls
                self.links.pending.append((len(trace.kernels), where))
            trace.kernels.append((key, start, event.duration_ps, where if where.__class__ is int else 0, None))
            produced = int_stat(event, self.produced)
            self.asyncs.started.add(produced)
            self.links.async_starts[produced] = where
        elif code == ASYNC_DONE:  # it completes: what it schedules continues the step it started in
            done = int_stat(event, self.consumed)
            self.asyncs.done.append((done, event, start))
            spans.append((start + event.duration_ps, ("async", done)))
        elif code == DONE_CALLBACK:  # a step's callback: what it schedules is not that step's work
            trace.done_at.setdefault(int_stat(event, self.consumed), start)  # its step ran no kernel after
            spans.append((start + event.duration_ps, None))
        elif code == EAGER:
            stats = stats_by_name(event, self.names)
            current = Execution(str(stats.get("eager_op", "")), bool(stats.get("is_func")), start, event.duration_ps)
            trace.executions.append(current)
            spans.append((start + event.duration_ps, _EAGER_SPAN))  # an eager op's kernels: no step
        else:  # FunctionRun: a function partition starts; its executor steps consume the context it produces
            current = self._function_run(event, start, spans, current, process_end)
        return current

    def _function_run(
        self, event: Any, start: int, spans: list[tuple[int, _Where]], current: Execution | None, process_end: int
    ) -> Execution | None:
        """A function partition starts: its context belongs to the call running, else to the step that called it
        (a function called from inside a function), else to no call (tf.data and the like: not reported).
        """
        produced = int_stat(event, self.produced)
        caller = next((w for _, w in reversed(spans) if w.__class__ is int), 0)
        spans.append((start + event.duration_ps, produced))
        if current is not None and start < current.start_ps + current.duration_ps:
            current.contexts.append(produced)
        elif caller and start < process_end:
            self.trace.parents[produced] = caller
        else:
            self.trace.outside.add(produced)
        return current

    def finish(self) -> None:
        """After every line: the asynchronous kernels known by their completion only, then the kernels that ran
        outside any recorded step, each given the step the thread pool's links lead to (else no context).
        """
        trace, names = self.trace, self.names
        for consumed, event, start in self.asyncs.done:
            if consumed and consumed not in self.asyncs.started:  # its start is lost: a kernel of no step, no time
                stats = stats_by_name(event, names)
                lost: KernelEvent = ((str(stats.get("name", "")), str(stats.get("kernel_type", ""))), start, 0, 0, None)
                trace.kernels.append(lost)
                trace.unplaced.append(lost)
                trace.lost_starts.append(lost[KEY][0])
        kernels = trace.kernels
        for index, where in self.links.pending:
            kernel = kernels[index]
            context = self.links.resolve(where)
            if context:
                kernels[index] = (kernel[KEY], kernel[START], kernel[DURATION], context, kernel[STATS])
            else:
                trace.unplaced.append(kernel)
