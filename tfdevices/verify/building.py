"""Building the report: the calls Python made, paired with what the profiler saw them run.

Each function call's executor contexts are placed on a device (from the ``_Send``
keys of the tensors they copied, else the device their ops asked for, else the
call's), each kernel becomes the ops of the model it ran (:mod:`tfdevices.verify.graph`),
and on GPUs each op is then timed by the GPU's own clock (:mod:`tfdevices.verify.timing`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import Any

from tfdevices.verify.graph import FunctionGraph, model_ops
from tfdevices.verify.hlo import HloModules
from tfdevices.verify.host import CONTEXT, KEY, START, STATS, Execution, KernelEvent, ProfilerTrace
from tfdevices.verify.recording import Call, Recorder
from tfdevices.verify.records import (
    COLLECTIVE_OP,
    PLUMBING,
    TRANSFER_OPS,
    UNKNOWN_DEVICE,
    XLA_CLUSTER,
    Collective,
    OpPlacement,
    Transfer,
    gc_paused,
    make_op,
    program_name,
    ps_to_us,
    report_device,
    union_length,
)
from tfdevices.verify.report import PlacementReport
from tfdevices.verify.timing import apply_gpu_time, gpu_op_names
from tfdevices.verify.transfers import context_devices, kernel_name, make_transfer, send_devices, transfer_kernels


@dataclass
class _Built:
    """The records of a report being built, and the timing origin (internal)."""

    ops: list[OpPlacement] = field(default_factory=list)
    transfers: list[Transfer] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    graphs: list[tuple[str, Any]] = field(default_factory=list)
    spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    on_gpu: dict[str, int] = field(default_factory=dict)  # op name -> the GPU that ran it (from device planes)


def _pair_calls(
    trace: ProfilerTrace, recorder: Recorder, *, eager: bool = False
) -> list[tuple[Call | None, Execution | None]]:
    """Matches the calls Python made with the executions the profiler saw, in call order.

    Executions no call matches follow, in time order: function calls, and with ``eager``
    (reading a profile, where Python's calls were not recorded) eager ops too.
    """
    queues: dict[tuple[str, bool], list[Execution]] = {}
    for execution in reversed(trace.executions):
        queues.setdefault((execution.name, execution.is_function), []).append(execution)
    paired: list[tuple[Call | None, Execution | None]] = []
    for call in recorder.calls:
        queue = queues.get((call.name, call.is_function))
        paired.append((call, queue.pop() if queue else None))
    left = sorted((e for q in queues.values() for e in q if e.is_function or eager), key=lambda e: e.start_ps)
    return paired + [(None, execution) for execution in left]


def build_report(trace: ProfilerTrace, recorder: Recorder | None = None) -> PlacementReport:
    """Builds the report from the profiler's trace and the calls Python made (linear in the events).

    Without a recorder (a profile read from disk) every execution the trace holds is
    reported: ops whose device the trace does not name go to the host's CPU, and GPU
    ops the host plane does not show are taken from the GPU's plane.
    """
    with gc_paused():
        return _build_report(trace, recorder)


def _build_report(trace: ProfilerTrace, recorder: Recorder | None) -> PlacementReport:
    profile = recorder is None
    recorder = recorder or Recorder()
    by_context: dict[int, list[KernelEvent]] = {}
    for context, run in groupby(trace.kernels, _context_of):  # a step's kernels come in runs
        by_context.setdefault(context, []).extend(run)
    paired = _pair_calls(trace, recorder, eager=profile)
    gpu_starts = [min(k.start_ps for k in gpu.kernels) for gpu in trace.gpus.values() if gpu.kernels]
    starts = [e.start_ps for _, e in paired if e is not None] + gpu_starts
    if trace.kernels:
        starts.append(min(map(_start_of, trace.kernels)))
    origin = min(starts or [0])
    built = _Built(on_gpu=gpu_op_names(trace.gpus))
    sources = _Sources(trace, by_context, origin, recorder.placed)
    for index, (call, execution) in enumerate(paired):
        if execution is not None and execution.is_function and execution.contexts and not execution.xla:
            _add_function(built, sources, _CallKernels.of(built, sources, index, recorder, call, execution), execution)
        elif (execution is not None and execution.is_function) or (call is not None and call.is_function):
            _add_cluster(built, index, call, execution, recorder, origin)
        elif call is not None:
            _add_eager(built, index, call, execution, origin)
        elif execution is not None and execution.name not in built.on_gpu:  # an eager op read from a profile
            _add_eager(built, index, Call(execution.name, False, "/device:CPU:0", ""), execution, origin)
    busy = {device: round(union_length(spans) / 1e6, 3) for device, spans in sorted(built.spans.items())}
    if trace.gpus:
        starts = [e.start_ps if e is not None else 0 for _, e in paired]
        modules = HloModules(trace.metadata)
        busy.update(apply_gpu_time(built, trace.gpus, origin, starts, keep_unmatched=profile, modules=modules))
    return PlacementReport(
        tuple(built.ops),
        tuple(built.transfers),
        tuple(built.collectives),
        tuple(built.graphs),
        busy_us=dict(sorted(busy.items())),
        notes=tuple(built.notes),
        steps=tuple(sorted(trace.steps)),
    )


def _contexts(execution: Execution, parents: dict[int, int]) -> list[int]:
    """The executor contexts of one function call, including functions it called."""
    mine = set(execution.contexts)
    nested = [c for c in parents if _root(c, parents) in mine]
    return list(execution.contexts) + nested


def _root(context: int, parents: dict[int, int]) -> int:
    seen = set()
    while context in parents and context not in seen:
        seen.add(context)
        context = parents[context]
    return context


_context_of, _start_of, _key_of, _kind_of_key = itemgetter(CONTEXT), itemgetter(START), itemgetter(KEY), itemgetter(1)


def _fallback_device(
    kernels: list[KernelEvent], graph: FunctionGraph, call: Call | None, on_gpu: dict[str, int]
) -> str:
    """The device of a partition that copied nothing: the one its ops asked for, else the call's.

    With no call (a profile), the GPU whose plane ran its kernels, else the host's CPU.
    """
    asked = "" if graph.asks_nothing() else graph.asked_by(list(map(_key_of, kernels)))
    if asked:
        return asked
    if call is not None and call.device:
        return call.device
    if call is None:
        gpus = [on_gpu[kernel_name(k)] for k in kernels if kernel_name(k) in on_gpu]
        if gpus:
            return f"/device:GPU:{max(set(gpus), key=gpus.count)}"
    return call.requested if call is not None and call.requested else "/device:CPU:0"


@dataclass(frozen=True)
class _Sources:
    """What every call's kernels are read against (internal): the trace, its kernels by executor context, the
    timing origin, the device TensorFlow placed each op on when it instantiated a function (by op name), and
    each function's graph, made once per build (a profile's calls have none: what a kernel stands for is then
    worked out once per function, not once per call).
    """

    trace: ProfilerTrace
    by_context: dict[int, list[KernelEvent]]
    origin: int
    placed: dict[str, str]
    graphs: dict[str, FunctionGraph] = field(default_factory=dict)

    def graph(self, name: str, recorder: Recorder) -> FunctionGraph:
        graph = self.graphs.get(name)
        if graph is None:
            graph = self.graphs[name] = FunctionGraph(recorder.graphs.get(name))
        return graph


@dataclass(frozen=True)
class _CallKernels:
    """One function call whose kernels are being added (internal): its graph, its executor contexts (its own
    and those of the functions it called), and its ``_Recv`` kernels by name.
    """

    built: _Built
    index: int
    graph: FunctionGraph
    call: Call | None
    contexts: list[int]
    transfers: list[tuple[int, KernelEvent]]
    recvs: dict[str, tuple[int, KernelEvent]]
    origin: int

    @classmethod
    def of(
        cls,
        built: _Built,
        sources: _Sources,
        index: int,
        recorder: Recorder,
        call: Call | None,
        execution: Execution,
    ) -> _CallKernels:
        contexts = _contexts(execution, sources.trace.parents)
        transfers = transfer_kernels(contexts, sources.by_context)
        recvs = {kernel_name(k): (c, k) for c, k in transfers if k[STATS] is None}
        graph = sources.graph(execution.name, recorder)
        return cls(built, index, graph, call, contexts, transfers, recvs, sources.origin)

    def add(self, kernels: list[KernelEvent], device: str) -> None:
        """Adds the ops, transfers and collectives of ``kernels``, which ran on ``device``."""
        _add_kernels(self.built, self.index, self.graph, kernels, device, self.recvs, self.origin)


def _add_function(built: _Built, sources: _Sources, adding: _CallKernels, execution: Execution) -> None:
    """Adds one function call's kernels: each executor step's on the step's device, then the kernels whose step
    the trace does not name (:func:`_add_unplaced`), and the call's graph.
    """
    devices = context_devices(adding.contexts, sources.by_context, adding.transfers)
    known: dict[int, str] = {}  # the steps whose device the trace shows: they copied, or ran kernels
    for context in adding.contexts:
        kernels = sources.by_context.get(context, [])
        where = devices.get(context) or _fallback_device(kernels, adding.graph, adding.call, built.on_gpu)
        if context in devices or kernels:
            known[context] = where
        adding.add(kernels, report_device(where))
    end = execution.start_ps + execution.duration_ps
    unplaced = [k for k in sources.trace.unplaced if execution.start_ps <= k[START] <= end]
    _add_unplaced(adding, unplaced, known, sources)
    if adding.graph._graph is not None:  # serialized by the writer, which puts each node's executed device in
        built.graphs.append((f"call_{adding.index:03d}", adding.graph._graph))


def _add_unplaced(adding: _CallKernels, unplaced: list[KernelEvent], known: dict[int, str], sources: _Sources) -> None:
    """Adds the kernels of the call whose executor step the trace does not name (``unplaced``: those in its span).

    Those take the device TensorFlow assigned them when it instantiated the function (``sources.placed``,
    by op name, from the run metadata of capture's warm-up) where known; else, for an op of the call's own
    graph, the device of the one step of the call that may have run it (:func:`_running_steps`), where the
    trace shows that step's device (``known``); else :data:`UNKNOWN_DEVICE`. ``trace.lost_starts`` names
    the asynchronous kernels the trace knows by their completion only (no time).
    """
    graph, built, index = adding.graph, adding.built, adding.index
    # Kernels of this call's graph only: other work (tf.data threads ...) may run during the call.
    mine = [
        k
        for k in unplaced
        if k[KEY][1] not in PLUMBING
        and graph.find(str(k[STATS].get("from", "")) if k[STATS] else kernel_name(k))[0] is not None
    ]
    for kernel in mine:  # a _Send runs on the device its key names first
        if kernel[STATS] is not None:
            adding.add([kernel], report_device(send_devices(kernel)[0]))
    lost = sorted({kernel_name(k) for k in mine} & set(sources.trace.lost_starts)) if sources.trace.lost_starts else []
    if lost:
        built.notes.append(
            f"call {index}: the profiler's trace lost the start of {len(lost)} asynchronous kernel(s) "
            f"({_first_names(lost)}): the span of each start ended after the profiler stopped; each is read from "
            "its completion, with no time of its own"
        )
    unknown = [k for k in mine if k[KEY][1] not in TRANSFER_OPS]
    if unknown and sources.placed:  # where TensorFlow placed them when it instantiated the function (run metadata)
        placed = sources.placed
        unknown = _add_grouped(adding, unknown, lambda k: placed.get(program_name(kernel_name(k)), ""), str)
    if unknown:
        done_at = sources.trace.done_at
        unknown = _add_grouped(adding, unknown, lambda k: _running_step(k, adding, done_at, known), known.__getitem__)
    if unknown:
        adding.add(unknown, UNKNOWN_DEVICE)
        built.notes.append(
            f"call {index}: the profiler's trace does not tie {len(unknown)} kernel(s) to an "
            f"executor step ({_first_names(sorted({kernel_name(k) for k in unknown}))}): "
            f"reported on device {UNKNOWN_DEVICE!r}"
        )


def _first_names(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _add_grouped(
    adding: _CallKernels,
    kernels: list[KernelEvent],
    group_of: Callable[[KernelEvent], Any],
    device_of: Callable[[Any], str],
) -> list[KernelEvent]:
    """Adds the kernels group by group (``group_of``, in the order first seen), each group on ``device_of`` it;
    returns those ``group_of`` puts in no group (a false value).
    """
    groups: dict[Any, list[KernelEvent]] = {}
    for kernel in kernels:
        groups.setdefault(group_of(kernel), []).append(kernel)
    for group, members in groups.items():
        if group:
            adding.add(members, report_device(device_of(group)))
    return [kernel for group, members in groups.items() if not group for kernel in members]


def _running_step(kernel: KernelEvent, adding: _CallKernels, done_at: dict[int, int], known: dict[int, str]) -> int:
    """The one executor step of the call that may have run ``kernel`` (an op of the call's own graph), where the
    trace shows that step's device (``known``); else 0.
    """
    if adding.graph.find(kernel_name(kernel))[1] != "":
        return 0
    running = _running_steps(kernel, adding.contexts, done_at)
    return running[0] if len(running) == 1 and running[0] in known else 0


def _running_steps(kernel: KernelEvent, contexts: list[int], done_at: dict[int, int]) -> list[int]:
    """The executor steps of a call that may have run ``kernel``: those not done before it started.

    A step's done callback runs after its last kernel ends, so a step whose callback started
    before the kernel did cannot have run it. On TensorFlow 2.16 (no thread-pool links in the
    trace) this is what ties a kernel whose step's span ended after the profiler stopped.
    """
    start = kernel[START]
    return [c for c in contexts if done_at.get(c, start) >= start]


def _add_kernels(
    built: _Built,
    index: int,
    graph: FunctionGraph,
    kernels: list[KernelEvent],
    device: str,
    recvs: dict[str, tuple[int, KernelEvent]],
    origin: int,
) -> None:
    """Adds the ops, transfers and collectives of kernels that ran on ``device``.

    The hot path of a build (a turn per kernel): what a kernel stands for in the graph is read
    once per traced function (:func:`_placed_ops`); here each kernel only gets its times.
    """
    spans = None if device == UNKNOWN_DEVICE else built.spans.setdefault(device, [])
    known = graph._known.placed
    add_span = spans.append if spans is not None else None
    add_op = built.ops.append
    make = make_op
    for kernel in kernels:
        key, begin, length, _, stats = kernel
        placed = known.get(key)
        if placed is None:
            placed = known[key] = _placed_ops(graph, key[0], key[1])
        ops, collective = placed
        if ops is _SKIPPED and stats is None:
            continue
        start, duration = (begin - origin) // 1000 / 1000, length // 1000 / 1000  # records.ps_to_us, inlined
        if add_span is not None:
            add_span((begin, begin + length))
        if stats is not None:
            built.transfers.append(make_transfer(kernel, graph, recvs, index, start, duration))
            continue
        name, kind = key
        for op_name, model_op, asked in ops:
            add_op(make(op_name, model_op, device, asked, index, kind, name, start, duration))
        if collective:
            op = graph.op(name)
            built.collectives.append(Collective(name, kind, device, _attr(op, "merge_op"), _attr(op, "T"), index))


#: What :func:`_placed_ops` gives a kernel that is plumbing, or a transfer without its key: nothing reported.
_SKIPPED: tuple[tuple[str, str, str], ...] = ()


def _placed_ops(graph: FunctionGraph, name: str, kind: str) -> tuple[tuple[tuple[str, str, str], ...], bool]:
    """``(name, model op, requested device as reported)`` of each op a kernel ran (:data:`_SKIPPED` for
    none), and whether the kernel is a collective.

    Kept per traced graph (``graph._known.placed``): read once per function, not per capture.
    """
    if kind in PLUMBING or kind in TRANSFER_OPS:
        return _SKIPPED, False
    ops = tuple(
        (op, model_op, report_device(asked) if asked else "") for op, model_op, asked in model_ops(graph, name, kind)
    )
    return ops, COLLECTIVE_OP.match(kind) is not None


def _attr(op: Any, name: str) -> str:
    if op is None:
        return ""
    try:
        value = op.get_attr(name)
    except (ValueError, TypeError):
        return ""
    if isinstance(value, bytes):
        return value.decode()
    return getattr(value, "name", str(value))


_GRAPH_PLUMBING = frozenset({"Placeholder", "NoOp", "Identity", "IdentityN"})


def _add_cluster(
    built: _Built, index: int, call: Call | None, execution: Execution | None, recorder: Recorder, origin: int
) -> None:
    """A function XLA compiled into one executable: its ops ran together on the call's device."""
    name = execution.name if execution is not None else call.name if call is not None else ""
    graph = recorder.graphs.get(name)
    device = report_device((call.device or call.requested) if call is not None else "") if call else "?"
    start = ps_to_us(execution.start_ps - origin) if execution is not None else None
    duration = ps_to_us(execution.duration_ps) if execution is not None else None
    if execution is not None:
        built.spans.setdefault(device, []).append((execution.start_ps, execution.start_ps + execution.duration_ps))
    ops = [op for op in graph.get_operations() if op.type not in _GRAPH_PLUMBING] if graph is not None else []
    for op in ops:
        built.ops.append(
            OpPlacement(op.name, op.type, device, _requested(op.device), index, XLA_CLUSTER, name, start, duration)
        )
    if not ops:
        built.ops.append(OpPlacement(name, XLA_CLUSTER, device, "", index, XLA_CLUSTER, name, start, duration))


def _add_eager(built: _Built, index: int, call: Call, execution: Execution | None, origin: int) -> None:
    device = report_device(call.device or call.requested)
    start = ps_to_us(execution.start_ps - origin) if execution is not None else None
    duration = ps_to_us(execution.duration_ps) if execution is not None else None
    if execution is not None:
        built.spans.setdefault(device, []).append((execution.start_ps, execution.start_ps + execution.duration_ps))
    if call.name in PLUMBING:
        return
    built.ops.append(
        OpPlacement(
            call.name, call.name, device, _requested(call.requested), index, call.name, call.name, start, duration
        )
    )
    if COLLECTIVE_OP.match(call.name):
        built.collectives.append(Collective(call.name, call.name, device, "", "", index))


def _requested(device: str) -> str:
    return report_device(device) if device else ""
