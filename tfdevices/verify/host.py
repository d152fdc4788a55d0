"""Reading the profiler's host plane: calls, executor steps and the kernels that ran in them.

:func:`read_trace` reads one serialized XSpace (what TensorFlow's profiler writes as
``<host>.xplane.pb``): the host plane here, each GPU's plane in
:mod:`tfdevices.verify.device`. One pass over the events; nothing is kept that the
report does not use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Final

from tfdevices.verify.device import GpuPlane, gpu_index, read_gpu_plane
from tfdevices.verify.hlo import METADATA_PLANE
from tfdevices.verify.kinds import (
    _ASYNC,
    _ASYNC_DONE,
    _DONE_CALLBACK,
    _EAGER,
    _KERNEL,
    _KINDS_BY_NAME,
    _PROCESS,
    _REGION_START,
    _REGION_STOP,
    _RUN,
    _SCHEDULED,
    _SKIPPED_KIND,
    _STEP,
    _context_of,
    _event_kinds,
    _int_stat,
    _kind_of_name,
    _stats,
)
from tfdevices.verify.records import _gc_paused
from tfdevices.verify.xplane import xplane_module

__all__ = ["read_trace", "parse_space"]

#: The host plane's name in every XSpace TensorFlow writes.
HOST_PLANE = "/host:CPU"


#: One kernel event of the trace (internal), a plain tuple (made thousands of times a capture, in
#: 30 ns; a slotted record takes 400): ``(key, start_ps, duration_ps, context, stats)``. ``key`` is
#: ``(op name, kernel)``, one tuple per kernel metadata of the trace (the builder's cache key),
#: ``context`` the executor step's (0 when the trace does not name one), ``stats`` the event's
#: stats for a transfer (``_Send``: its rendezvous key), else ``None``. Read by the indices below.
_Kernel = tuple[tuple[str, str], int, int, int, "dict[str, Any] | None"]
KEY: Final = 0
START: Final = 1
DURATION: Final = 2
CONTEXT: Final = 3
STATS: Final = 4


@dataclass
class _Execution:
    """One call TensorFlow executed (internal): a function, an XLA cluster or an eager op."""

    name: str
    is_function: bool
    start_ps: int
    duration_ps: int
    contexts: list[int] = field(default_factory=list)
    xla: bool = False


@dataclass
class _Trace:
    """What the profiler recorded (internal): calls on the Python thread, kernels by executor context."""

    executions: list[_Execution] = field(default_factory=list)
    kernels: list[_Kernel] = field(default_factory=list)
    parents: dict[int, int] = field(default_factory=dict)  # nested function context -> caller context
    outside: set[int] = field(default_factory=set)  # contexts of runs outside any call (tf.data ...)
    unplaced: list[_Kernel] = field(default_factory=list)  # kernels whose executor step the trace does not name
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


def read_trace(data: bytes | Any) -> _Trace:
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
    if _compiled is not None and isinstance(data, (bytes, bytearray, memoryview)):
        read = _read_compiled(_compiled, data)
        if read is not None:
            return read
    space = parse_space(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    trace = _Trace()
    with _gc_paused():
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


def _read_compiled(module: Any, data: bytes | bytearray | memoryview) -> _Trace | None:
    """:func:`read_trace` with the host plane's first walk compiled; ``None``: the Python path reads ``data``.

    ``module.planes`` finds the planes in the serialized bytes and ``module.walk`` reads the
    host plane as :func:`_read_lines` does without links; where it returns ``None`` (it would
    raise :class:`_NeedLinks`) protobuf and the Python walk read that plane. Other planes are
    parsed by protobuf. Bytes the compiled reader cannot read exactly as protobuf would
    (``ValueError``), or any other error, give ``None``: the Python path reads them again and
    raises what it raises.
    """
    try:
        trace = _Trace()
        with _gc_paused():
            for name, start, end in module.planes(data):
                read = None
                if name == HOST_PLANE:
                    read = module.walk(memoryview(data)[start:end], _KINDS_BY_NAME, _kind_of_name, _SKIPPED_KIND)
                if read is not None:
                    kernels, executions, parents, outside, steps, host_events, lost, done_at = read
                    trace.done_at.update(done_at)
                    trace.kernels += kernels
                    if lost:  # the last ``lost`` kernels: known by their completion only (see _Asyncs)
                        trace.unplaced += kernels[-lost:]
                        trace.lost_starts += [kernel[KEY][0] for kernel in kernels[-lost:]]
                    trace.executions += [_Execution(*e) for e in executions]
                    trace.parents.update(parents)
                    trace.outside |= outside
                    trace.steps |= steps
                    trace.host_events += host_events
                    continue
                plane = xplane_module().XPlane.FromString(bytes(memoryview(data)[start:end]))  # protobuf 4: bytes
                index = gpu_index(name)
                if name == HOST_PLANE:
                    _read_host_plane(plane, trace)
                elif index is not None:
                    trace.gpus[index] = read_gpu_plane(plane, index)
                elif name == METADATA_PLANE:
                    trace.metadata = plane
                elif plane.lines:
                    trace.skipped.append(name)
    except Exception:  # noqa: BLE001  (the Python path reads the bytes again and raises its own error)
        return None
    trace.executions.sort(key=lambda e: e.start_ps)
    _claim_orphans(trace)
    return trace


def _claim_orphans(trace: _Trace) -> None:
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


class _NeedLinks(Exception):  # noqa: N818  (control flow, not an error)
    """A kernel ran outside any recorded step: the host plane is read again, following the thread pool's links."""


@dataclass
class _Links:
    """What ties kernels to executor steps across threads (internal), filled while reading lines.

    Most kernels run inside a recorded step, and the host plane is first read without these
    links (the thread pool's events skipped: half the events of a step); it is read again with
    them only when some kernel ran outside a recorded step. The thread pool's records are
    then decoded (their ids read) only when a kernel needs them.
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
            self._scheduled = {_int_stat(event, self.produced_id): at for event, at in self.records}
        seen: set[tuple[str, int]] = set()
        while where is not None and where.__class__ is not int and where[0] in ("region", "async"):  # type: ignore[index]
            kind, key = where  # type: ignore[misc]
            if kind == "region":
                key = _int_stat(key, self.consumed_id)
            if (kind, key) in seen:
                break
            seen.add((kind, key))
            where = (self._scheduled if kind == "region" else self.async_starts).get(key)
        return where if where.__class__ is int else 0


def _read_host_plane(plane: Any, trace: _Trace) -> None:
    """Reads the host plane into ``trace``: without the thread pool's links, then with them if a kernel needs them."""
    names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    ids = {name: key for key, name in names.items() if name in ("_c", "_p", "step_num")}
    try:
        _read_lines(plane, names, ids, trace, None)
    except _NeedLinks:
        trace.executions, trace.kernels, trace.parents, trace.outside = [], [], {}, set()
        trace.steps, trace.host_events, trace.unplaced, trace.lost_starts, trace.done_at = set(), 0, [], [], {}
        links = _Links(ids.get("_c", -1), ids.get("_p", -1))
        _read_lines(plane, names, ids, trace, links)
        kernels = trace.kernels
        for index, where in links.pending:
            kernel = kernels[index]
            context = links.resolve(where)
            if context:
                kernels[index] = (kernel[KEY], kernel[START], kernel[DURATION], context, kernel[STATS])
            else:
                trace.unplaced.append(kernel)


def _read_lines(plane: Any, names: dict[int, str], ids: dict[str, int], trace: _Trace, links: _Links | None) -> None:
    kinds = _event_kinds(plane, links is not None)
    asyncs = _Asyncs()
    for line in plane.lines:
        trace.host_events += len(line.events)
        _read_line(line, kinds, names, ids, trace, links, asyncs)
    for consumed, event, start in asyncs.done:
        if consumed and consumed not in asyncs.started:  # its start is lost: a kernel of no step, and no time
            stats = _stats(event, names)
            kernel = ((str(stats.get("name", "")), str(stats.get("kernel_type", ""))), start, 0, 0, None)
            trace.kernels.append(kernel)
            trace.unplaced.append(kernel)
            trace.lost_starts.append(kernel[KEY][0])


def _read_line(
    line: Any,
    kinds: dict[int, tuple[Any, ...]],
    names: dict[int, str],
    ids: dict[str, int],
    trace: _Trace,
    links: _Links | None,
    asyncs: _Asyncs,
) -> None:
    """Reads one thread's events; kernels outside any recorded step go to ``links.pending``.

    Without ``links`` (the first read) such a kernel raises :class:`_NeedLinks`. ``ids`` holds
    the ids of the ``_c`` and ``_p`` stats (the flow ids TensorFlow's profiler ties a producer
    event to its consumer with) and of ``step_num`` (a step marker's number).

    The loop is the hot path of a capture (one turn per host event, tens of thousands per
    step): kernels come first and, inside a step, cost a tuple; a step's context is its last
    stat (``_c``). Closing the spans an event starts after is written out in each branch
    that reads a time (a call costs more than the check).
    """
    consumed, step_num = ids.get("_c", -1), ids.get("step_num", -1)
    base = line.timestamp_ns * 1000
    kernels = trace.kernels
    add_kernel = kernels.append
    kind_of = kinds.get
    # The spans open at the current event, innermost last, as (end, where); the thread-pool closure running.
    spans: list[tuple[int, _Where]] = []
    end = -1  # the innermost span's end (-1: none open)
    inner: _Where = None  # where the innermost span says an event runs
    region: _Where = None
    process_end = 0
    current: _Execution | None = None
    xla_name: str | None = None  # the function whose kernel of its own name means it ran as one XLA executable
    for event in line.events:
        kind = kind_of(event.metadata_id)
        if kind is None:
            continue
        code = kind[0]
        if code == _KERNEL:
            start = base + event.offset_ps
            if start >= end >= 0:
                while spans and spans[-1][0] <= start:
                    spans.pop()
                end, inner = spans.pop() if spans else (-1, None)
            where = inner if end >= 0 else region
            key = kind[1]
            if xla_name is not None and key[1] == xla_name:
                current.xla = True  # type: ignore[union-attr]  # the function ran as one compiled XLA executable
                continue
            if where.__class__ is int:
                add_kernel((key, start, event.duration_ps, where, _stats(event, names) if kind[2] else None))
            elif not _int_stat(event, consumed):  # else the body of an async kernel, recorded where it started
                _add_outside(event, kind, start, where, names, kernels, links)
        elif code == _PROCESS:
            start = base + event.offset_ps
            if start >= end >= 0:
                while spans and spans[-1][0] <= start:
                    spans.pop()
                end, inner = spans.pop() if spans else (-1, None)
            context = _context_of(event, consumed)
            process_end = start + event.duration_ps
            if end >= 0:
                spans.append((end, inner))
            end, inner = process_end, context
        elif code == _REGION_START:  # a thread-pool closure starts: no time read (it opens no span)
            region = ("region", event)
        elif code == _REGION_STOP:
            region = None
        elif code == _STEP:
            if any(stat.metadata_id == step_num for stat in event.stats):
                trace.steps.add(_int_stat(event, step_num))
        else:
            start = base + event.offset_ps
            if start >= end >= 0:
                while spans and spans[-1][0] <= start:
                    spans.pop()
                end, inner = spans.pop() if spans else (-1, None)
            where = inner if end >= 0 else region
            if code == _SCHEDULED:
                links.records.append((event, where))  # type: ignore[union-attr]  # read only with links
                continue
            if end >= 0:  # the other events read the whole stack: the innermost span joins it
                spans.append((end, inner))
                end, inner = -1, None
            current = _read_call(
                code, event, start, names, ids, where, spans, current, process_end, trace, links, asyncs
            )
            xla_name = current.name if current is not None and current.is_function else None
            if spans:
                end, inner = spans.pop()


def _add_outside(
    event: Any,
    kind: tuple[Any, ...],
    start: int,
    where: _Where,
    names: dict[int, str],
    kernels: list[_Kernel],
    links: _Links | None,
) -> None:
    """A kernel that ran outside any recorded step: kept for the thread pool's links to place (eager ops: no step).

    The body of an asynchronous kernel (a collective) run by its own executor is not one: the
    kernel is recorded where it started (``ProcessAsync::Start``).

    Raises:
        _NeedLinks: on the first read (without ``links``), for a kernel that is not an eager op's.
    """
    if where is not _EAGER_SPAN:  # eager ops are reported from their calls, not their kernels
        if links is None:
            raise _NeedLinks
        links.pending.append((len(kernels), where))
    kernels.append((kind[1], start, event.duration_ps, 0, _stats(event, names) if kind[2] else None))


def _read_call(
    code: int,
    event: Any,
    start: int,
    names: dict[int, str],
    ids: dict[str, int],
    where: _Where,
    spans: list[tuple[int, _Where]],
    current: _Execution | None,
    process_end: int,
    trace: _Trace,
    links: _Links | None,
    asyncs: _Asyncs,
) -> _Execution | None:
    """The rarer events of a line (calls, function runs, asynchronous kernels); returns the current call.

    ``spans`` is the whole stack of open spans, innermost last; ``where`` the innermost span's place.
    """
    consumed, produced_id = ids.get("_c", -1), ids.get("_p", -1)
    if code == _ASYNC:  # an asynchronous kernel (_Recv, collectives) starts
        stats = _stats(event, names)
        key = (str(stats.get("name", "")), str(stats.get("kernel_type", "")))
        if where.__class__ is int:
            trace.kernels.append((key, start, event.duration_ps, where, None))
        else:
            if where is not _EAGER_SPAN:  # eager ops are reported from their calls, not their kernels
                if links is None:
                    raise _NeedLinks
                links.pending.append((len(trace.kernels), where))
            trace.kernels.append((key, start, event.duration_ps, 0, None))
        produced = _int_stat(event, produced_id)
        asyncs.started.add(produced)
        if links is not None:
            links.async_starts[produced] = where
    elif code == _ASYNC_DONE:  # it completes: what it schedules continues the step it started in
        done = _int_stat(event, consumed)
        asyncs.done.append((done, event, start))
        spans.append((start + event.duration_ps, ("async", done)))
    elif code == _DONE_CALLBACK:  # a step's callback: what it schedules is not that step's work
        trace.done_at.setdefault(_int_stat(event, consumed), start)  # its step ran no kernel after
        spans.append((start + event.duration_ps, None))
    elif code == _EAGER:
        stats = _stats(event, names)
        current = _Execution(str(stats.get("eager_op", "")), bool(stats.get("is_func")), start, event.duration_ps)
        trace.executions.append(current)
        spans.append((start + event.duration_ps, _EAGER_SPAN))  # an eager op's kernels: no step
    else:  # FunctionRun: a function partition starts; its executor steps consume the context it produces
        produced = _int_stat(event, produced_id)
        caller = next((w for _, w in reversed(spans) if w.__class__ is int), 0)
        spans.append((start + event.duration_ps, produced))
        if current is not None and start < current.start_ps + current.duration_ps:
            current.contexts.append(produced)
        elif caller and start < process_end:
            trace.parents[produced] = caller  # a function called from inside a function
        else:  # a run outside any call or step (tf.data and the like): not reported
            trace.outside.add(produced)
    return current


def _load_compiled() -> Any:
    """``tfdevices.verify._hostwalk`` (the compiled first walk); ``None`` where not built or numbering kinds apart."""
    try:
        hostwalk = importlib.import_module("tfdevices.verify._hostwalk")
    except ImportError:
        return None
    codes = (_KERNEL, _PROCESS, _ASYNC, _EAGER, _RUN, _ASYNC_DONE, _DONE_CALLBACK, _SCHEDULED, _REGION_START)
    return hostwalk if (*codes, _REGION_STOP, _STEP) == hostwalk.CODES else None


#: The compiled reader :func:`read_trace` uses on serialized bytes, or ``None`` (tests set it to read both ways).
_compiled: Any = _load_compiled()
