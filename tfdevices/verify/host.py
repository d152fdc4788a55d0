"""Reading the profiler's host plane: calls, executor steps and the kernels that ran in them.

:func:`read_trace` reads one serialized XSpace (what TensorFlow's profiler writes as
``<host>.xplane.pb``): the host plane here, each GPU's plane in
:mod:`tfdevices.verify.device`. One pass over the events; nothing is kept that the
report does not use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tfdevices.verify.device import GpuPlane, gpu_index, read_gpu_plane
from tfdevices.verify.records import TRANSFER_OPS, _gc_paused
from tfdevices.verify.xplane import xplane_module

__all__ = ["read_trace", "parse_space"]

#: The host plane's name in every XSpace TensorFlow writes.
HOST_PLANE = "/host:CPU"
#: Step markers written by ``tf.profiler.experimental.Trace(NAME, step_num=N)`` (tf_keras' fit, custom loops).
_STEP_EVENTS = frozenset({"train", "test", "predict"})


@dataclass(slots=True)
class _Kernel:
    """One kernel event of the trace (internal)."""

    name: str
    kernel: str
    start_ps: int
    duration_ps: int
    context: int = 0
    stats: dict[str, Any] | None = None


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


def _stat_value(stat: Any, names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    value: Any = getattr(stat, kind) if kind else None
    return names.get(value, value) if kind == "ref_value" else value


def parse_space(data: bytes | bytearray | memoryview) -> Any:
    """The XSpace a ``*.xplane.pb`` file holds (``DecodeError`` when it is not one); TensorFlow is not imported."""
    return xplane_module().XSpace.FromString(data)


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
    space = parse_space(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    trace = _Trace()
    with _gc_paused():
        for plane in space.planes:
            index = gpu_index(plane.name)
            if plane.name == HOST_PLANE:
                _read_host_plane(plane, trace)
            elif index is not None:
                trace.gpus[index] = read_gpu_plane(plane, index)
            elif plane.lines:
                trace.skipped.append(plane.name)
    trace.executions.sort(key=lambda e: e.start_ps)
    _claim_orphans(trace)
    return trace


def _claim_orphans(trace: _Trace) -> None:
    """Gives executor contexts whose ``FunctionRun`` is missing from the trace to the call that ran them.

    A context is claimed by the function call whose span holds its first kernel.
    """
    known = set(trace.parents) | trace.outside | {c for e in trace.executions for c in e.contexts}
    first: dict[int, int] = {}
    for kernel in trace.kernels:
        if kernel.context and kernel.context not in known and kernel.context not in first:
            first[kernel.context] = kernel.start_ps
    calls = [e for e in trace.executions if e.is_function and e.contexts]
    for context, start in first.items():
        owner = next((e for e in calls if e.start_ps <= start <= e.start_ps + e.duration_ps), None)
        if owner is not None:
            owner.contexts.append(context)


(_KERNEL, _PROCESS, _ASYNC, _EAGER, _RUN, _ASYNC_DONE, _DONE_CALLBACK, _SCHEDULED, _REGION_START, _REGION_STOP) = range(
    10
)
_STEP = 10  # a step marker (tf.profiler.experimental.Trace("train", step_num=N))
_EVENT_KINDS = {
    "ExecutorState::Process": _PROCESS,
    "ExecutorState::ProcessAsync::Start": _ASYNC,
    "EagerExecute": _EAGER,
    "FunctionRun": _RUN,
    "ExecutorState::ProcessAsync::Done": _ASYNC_DONE,
    "ExecutorDoneCallback": _DONE_CALLBACK,
    "ThreadpoolListener::Record": _SCHEDULED,
    "ThreadpoolListener::StartRegion": _REGION_START,
    "ThreadpoolListener::StopRegion": _REGION_STOP,
}

#: Where an event ran, before the thread-pool links are followed (internal): ``("step", context)``,
#: ``("async", id)`` (inside the completion of an asynchronous kernel), ``("region", event)`` (in a
#: thread-pool closure outside any recorded step: the ``StartRegion`` event, whose id is read only
#: when a kernel needs it) or ``None`` (nowhere a step can be read from).
_Where = tuple[str, Any] | None


def _event_kinds(plane: Any) -> dict[int, tuple[int, str, str, bool]]:
    """``metadata id -> (kind, op name, kernel, whether its stats are read)`` for the events capture reads.

    Other events are skipped. A kernel's stats are read for transfers only (their key names the devices).
    """
    kinds = {}
    metadata = plane.event_metadata
    for key in metadata:  # a kernel's is "op:Kernel", its display name "Kernel"; most events are kernels
        meta = metadata[key]
        name = meta.name
        known = _EVENT_KINDS.get(name)
        if known is not None:
            kinds[key] = (known, name, "", False)
            continue
        op, colon, kernel = name.rpartition(":")
        if colon and kernel and kernel == meta.display_name:
            kinds[key] = (_KERNEL, op, kernel, kernel in TRANSFER_OPS)
        elif name in _STEP_EVENTS:
            kinds[key] = (_STEP, name, "", False)
    return kinds


@dataclass
class _Links:
    """What ties kernels to executor steps across threads (internal), filled while reading lines.

    Most kernels run inside a recorded step; the thread pool's records are read (their ids
    decoded) only when some kernel ran outside one.
    """

    consumed_id: int = -1  # the ``_c`` stat's id
    produced_id: int = -1  # the ``_p`` stat's id
    records: list[tuple[Any, _Where]] = field(default_factory=list)  # (Record event, where it was scheduled)
    async_starts: dict[int, _Where] = field(default_factory=dict)  # async kernel id -> where it started
    pending: list[tuple[_Kernel, _Where]] = field(default_factory=list)  # kernels outside any recorded step
    _scheduled: dict[int, _Where] | None = None

    def resolve(self, where: _Where) -> int:
        """The executor context ``where`` leads to, or 0 when the trace does not say."""
        if self._scheduled is None:  # closure id -> where it was scheduled, decoded once
            self._scheduled = {_int_stat(event, self.produced_id): at for event, at in self.records}
        seen: set[tuple[str, int]] = set()
        while where is not None and where[0] in ("region", "async"):
            kind, key = where
            if kind == "region":
                key = _int_stat(key, self.consumed_id)
            if (kind, key) in seen:
                break
            seen.add((kind, key))
            where = (self._scheduled if kind == "region" else self.async_starts).get(key)
        return where[1] if where is not None and where[0] == "step" else 0


def _read_host_plane(plane: Any, trace: _Trace) -> None:
    names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    kinds = _event_kinds(plane)
    ids = {name: key for key, name in names.items() if name in ("_c", "_p", "step_num")}
    links = _Links(ids.get("_c", -1), ids.get("_p", -1))
    for line in plane.lines:
        trace.host_events += len(line.events)
        _read_line(line, kinds, names, ids, trace, links)
    for kernel, where in links.pending:
        kernel.context = links.resolve(where)
        if not kernel.context:
            trace.unplaced.append(kernel)


def _read_line(
    line: Any,
    kinds: dict[int, tuple[int, str, str, bool]],
    names: dict[int, str],
    ids: dict[str, int],
    trace: _Trace,
    links: _Links,
) -> None:
    """Reads one thread's events; kernels outside any recorded step go to ``links.pending``.

    ``ids`` holds the ids of the ``_c`` and ``_p`` stats (the flow ids TensorFlow's profiler ties a
    producer event to its consumer with) and of ``step_num`` (a step marker's number).

    The loop is the hot path of a capture (one turn per host event, thousands per step): the
    commonest events (kernels inside a step, the step itself, the thread pool's records) come
    first and read only the fields they need; a step's context is its last stat (``_c``).
    """
    consumed, step_num = ids.get("_c", -1), ids.get("step_num", -1)
    base = line.timestamp_ns * 1000
    kernels = trace.kernels
    add_kernel = kernels.append
    pending = links.pending.append
    records = links.records.append
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
        if code == _REGION_START:  # a thread-pool closure starts: no time read (it opens no span)
            region = ("region", event)
            continue
        if code == _REGION_STOP:
            region = None
            continue
        if code == _STEP:
            if any(stat.metadata_id == step_num for stat in event.stats):
                trace.steps.add(_int_stat(event, step_num))
            continue
        start = base + event.offset_ps
        if start >= end >= 0:
            while spans and spans[-1][0] <= start:
                spans.pop()
            end, inner = spans.pop() if spans else (-1, None)
        where = inner if end >= 0 else region
        if code == _KERNEL:
            kernel = kind[2]
            if kernel == xla_name:
                current.xla = True  # type: ignore[union-attr]  # the function ran as one compiled XLA executable
                continue
            in_step = where is not None and where[0] == "step"
            if not in_step and _int_stat(event, consumed):
                # The body of an asynchronous kernel (a collective) run by its own executor, outside any
                # step; the kernel is recorded where it started (ProcessAsync::Start).
                continue
            found = _Kernel(kind[1], kernel, start, event.duration_ps, 0, _stats(event, names) if kind[3] else None)
            add_kernel(found)
            if in_step:
                found.context = where[1]  # type: ignore[index]
            elif where is None or where[0] != "eager":  # eager ops are reported from their calls
                pending((found, where))
        elif code == _PROCESS:
            stats = event.stats
            last = stats[-1] if stats else None
            context = (
                (last.uint64_value or last.int64_value)
                if last is not None and last.metadata_id == consumed
                else _int_stat(event, consumed)
            )
            process_end = start + event.duration_ps
            if end >= 0:
                spans.append((end, inner))
            end, inner = process_end, ("step", context)
        elif code == _SCHEDULED:
            records((event, where))
        else:
            if end >= 0:  # the other events read the whole stack: the innermost span joins it
                spans.append((end, inner))
                end, inner = -1, None
            current = _read_call(code, event, start, names, ids, where, spans, current, process_end, trace, links)
            xla_name = current.name if current is not None and current.is_function else None
            if spans:
                end, inner = spans.pop()


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
    links: _Links,
) -> _Execution | None:
    """The rarer events of a line (calls, function runs, asynchronous kernels); returns the current call.

    ``spans`` is the whole stack of open spans, innermost last; ``where`` the innermost span's place.
    """
    consumed, produced_id = ids.get("_c", -1), ids.get("_p", -1)
    if code == _ASYNC:  # an asynchronous kernel (_Recv, collectives) starts
        stats = _stats(event, names)
        kernel = _Kernel(str(stats.get("name", "")), str(stats.get("kernel_type", "")), start, event.duration_ps)
        trace.kernels.append(kernel)
        _place(kernel, where, links)
        links.async_starts[_int_stat(event, produced_id)] = where
    elif code == _ASYNC_DONE:  # it completes: what it schedules continues the step it started in
        spans.append((start + event.duration_ps, ("async", _int_stat(event, consumed))))
    elif code == _DONE_CALLBACK:  # a step's callback: what it schedules is not that step's work
        spans.append((start + event.duration_ps, None))
    elif code == _EAGER:
        stats = _stats(event, names)
        current = _Execution(str(stats.get("eager_op", "")), bool(stats.get("is_func")), start, event.duration_ps)
        trace.executions.append(current)
        spans.append((start + event.duration_ps, ("eager", 0)))  # an eager op's kernels: no step
    else:  # FunctionRun: a function partition starts; its executor steps consume the context it produces
        produced = _int_stat(event, produced_id)
        caller = next((w[1] for _, w in reversed(spans) if w is not None and w[0] == "step"), 0)
        spans.append((start + event.duration_ps, ("step", produced)))
        if current is not None and start < current.start_ps + current.duration_ps:
            current.contexts.append(produced)
        elif caller and start < process_end:
            trace.parents[produced] = caller  # a function called from inside a function
        else:  # a run outside any call or step (tf.data and the like): not reported
            trace.outside.add(produced)
    return current


def _place(kernel: _Kernel, inner: _Where, links: _Links) -> None:
    """Sets the kernel's context from the innermost span around it, or leaves it for the thread-pool links.

    ``inner`` is that span (or the thread-pool closure running when no span is open).
    """
    if inner is not None and inner[0] == "step":
        kernel.context = inner[1]
    elif inner is None or inner[0] != "eager":  # eager ops are reported from their calls, not their kernels
        links.pending.append((kernel, inner))


def _int_stat(event: Any, stat_id: int) -> int:
    """The integer value of the event's stat ``stat_id`` (0 when absent).

    From the last stat back: the flow ids (``_c``, ``_p``) TensorFlow writes last.
    """
    for stat in reversed(event.stats):
        if stat.metadata_id == stat_id:
            return stat.uint64_value or stat.int64_value
    return 0


def _stats(event: Any, names: dict[int, str]) -> dict[str, Any]:
    return {names[s.metadata_id]: _stat_value(s, names) for s in event.stats}
