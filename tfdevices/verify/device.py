"""Reading a GPU's own timeline: the ``/device:GPU:N`` planes of the profiler's trace.

On a GPU the host plane's kernel events are *launches*; the GPU runs each kernel
later, for another length of time. TensorFlow's GPU tracer (CUPTI) writes what the
GPU really ran on one plane per GPU, a line per CUDA stream (``Stream #134(Kernel)``,
``Stream #135(MemcpyH2D)`` ...):

* kernels, with the stats ``kernel_details`` (``regs:38 shm:0 grid:160,1,1 ...``),
  ``correlation_id``, ``group_id`` (the step) and the TensorFlow op that launched them:
  ``tf_op`` (``"dense/MatMul:MatMul"``) in current versions, ``annotation`` or
  ``level 0`` (the annotation stack, ``::``-separated, ops possibly followed by
  ``#key=value#`` arguments) in older ones; XLA's kernels carry ``hlo_module``, ``hlo_op``
  and ``program_id`` instead, and inside a CUDA graph (an XLA command buffer)
  ``cuda_graph_id`` and ``cuda_graph_node_id``, the graph launch's ``correlation_id``
  shared by its kernels;
* memory copies, with ``memcpy_details`` (``kind_src:device kind_dst:pinned size:112
  dest:4 async:0``; older versions: ``size:112 dest:4 async:0``), their direction in
  the event or line name (``MemcpyH2D``, ``MemcpyD2H``, ``MemcpyD2D``, ``MemcpyP2P``);
* NCCL's kernels (``ncclKernel_AllReduce_...``, ``ncclDevKernel_...``) on their streams;
* in post-processed traces, derived lines: ``TensorFlow Ops`` (an event per op
  execution, named ``op_name:OpType``, displayed as ``OpType``), ``TensorFlow Name
  Scope``, ``XLA Ops``, ``XLA Modules``, ``Steps``, ``Source code``.

:class:`GpuPlane` keeps the kernels and copies; :meth:`GpuPlane.executions` gives each
op's executions on the device, from the derived ``TensorFlow Ops`` line when the trace
has one, else from the kernels' annotations (consecutive kernels of one op and step are
one execution, as TensorFlow's own tools derive that line). An execution's duration is
the union of its kernels' time: the device's clock, not the host's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tfdevices.verify.records import union_length

_GPU_PLANE = re.compile(r"^/device:GPU:(\d{1,6})$")
#: Lines TensorFlow's tools derive from the streams; only ``TensorFlow Ops`` is read (the rest repeat it).
_DERIVED = (
    "TensorFlow Ops",
    "TensorFlow Name Scope",
    "XLA Ops",
    "XLA Modules",
    "Steps",
    "Source code",
    "Framework Ops",
    "Framework Name Scope",
    "Launch Stats",
    "XLA TraceMe",
    "Async XLA Ops",
)
_OPS_LINE = "TensorFlow Ops"
_ANNOTATIONS = ("tf_op", "annotation", "level 0")
_COPY_KINDS = (
    ("H2D", "H2D"),
    ("HTOD", "H2D"),
    ("D2H", "D2H"),
    ("DTOH", "D2H"),
    ("D2D", "D2D"),
    ("DTOD", "D2D"),
    ("P2P", "P2P"),
    ("PTOP", "P2P"),
    ("PEER", "P2P"),
)
_NOT_KERNELS = ("Memset", "MemoryAlloc", "MemoryFree", "MemoryResidency", "CUPTI overhead")
_NCCL = re.compile(r"^(?:void )?nccl", re.IGNORECASE)
_NCCL_PRIMITIVE = re.compile(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv|AllToAll)")


def gpu_index(plane_name: str) -> int | None:
    """The ordinal of a GPU plane (``"/device:GPU:3"`` -> 3), ``None`` for any other plane.

    >>> gpu_index("/device:GPU:3"), gpu_index("/host:CPU"), gpu_index("/device:TPU:0")
    (3, None, None)
    """
    match = _GPU_PLANE.match(plane_name)
    return int(match[1]) if match else None


@functools.lru_cache(maxsize=1 << 16)  # a step's ops repeat every step: parse each annotation once, share its strings
def parse_annotation(text: str) -> tuple[str, str]:
    """The TensorFlow op an annotation names, as ``(op name, op type)``; ``("", "")`` when none.

    The outermost annotation of the stack names the op (as TensorFlow's GPU tracer
    reads it); ``#...#`` arguments are dropped. An annotation without a type names an
    op by its type (eager ops).

    >>> parse_annotation("model/dense/MatMul:MatMul#id=4,bytes=64#")
    ('model/dense/MatMul', 'MatMul')
    >>> parse_annotation("train_step::grad/Relu:ReluGrad")
    ('grad/Relu', 'ReluGrad')
    >>> parse_annotation("")
    ('', '')
    """
    for part in text.split("::"):
        name = part.split("#", 1)[0].strip()
        if not name:
            continue
        op, sep, op_type = name.rpartition(":")
        if sep and op and op_type and " " not in op_type:
            return op, op_type
    first = text.split("::", 1)[0].split("#", 1)[0].strip()
    return (first, first) if first and " " not in first and ":" not in first else ("", "")


@dataclass(slots=True)
class GpuKernel:
    """One kernel the GPU ran (internal): its op (``""`` when not annotated), name and span in ps."""

    op: str
    type: str
    name: str
    start_ps: int
    end_ps: int
    group: int = -1
    module: str = ""  # the XLA module that ran it (``hlo_module`` stat), ``""`` outside XLA
    fusion: str = ""  # its HLO instruction in that module (``hlo_op``: ``"gemm_fusion_dot.2"``)
    program: int = -1  # the module's ``program_id`` (two modules may share a name)
    graph: int = -1  # the CUDA graph it ran in (``cuda_graph_id``): XLA's command buffer; -1 outside one
    node: int = -1  # its node in that graph (``cuda_graph_node_id``)
    launch: int = -1  # its launch (``correlation_id``): a graph's kernels share their graph launch's


@dataclass(slots=True)
class GpuCopy:
    """One memory copy the GPU ran: direction, op, bytes, destination device, span in ps."""

    kind: str
    op: str
    bytes: int | None
    dest: int | None
    start_ps: int
    end_ps: int


@dataclass(slots=True)
class GpuOp:
    """One execution of a TensorFlow op on the GPU: its span, its kernels' busy time, their names."""

    op: str
    type: str
    start_ps: int
    end_ps: int
    busy_ps: int
    kernels: tuple[str, ...]
    group: int = -1

    @property
    def is_collective(self) -> bool:
        """Whether it ran NCCL's kernels."""
        return any(_NCCL.match(name) for name in self.kernels)


@dataclass
class GpuPlane:
    """What one GPU ran, read from its plane (see the module docstring)."""

    index: int
    kernels: list[GpuKernel] = field(default_factory=list)
    copies: list[GpuCopy] = field(default_factory=list)
    derived: list[GpuOp] = field(default_factory=list)
    device_name: str = ""
    events: int = 0

    def executions(self) -> list[GpuOp]:
        """Each op execution on this GPU, sorted by start; unannotated kernels are left out."""
        if self.derived:
            return _with_kernel_names(self.derived, self.kernels)
        return _executions(k for k in self.kernels if k.op)

    def busy_ps(self) -> int:
        """Picoseconds during which at least one kernel ran on this GPU (its derived ops', without kernels)."""
        spans = [(k.start_ps, k.end_ps) for k in self.kernels] or [(o.start_ps, o.end_ps) for o in self.derived]
        return int(union_length(spans))

    def unannotated(self) -> list[GpuKernel]:
        """Kernels no TensorFlow op is named for (NCCL's own, libraries', XLA's: ``tf_op`` reads ``XlaModule:``)."""
        return [k for k in self.kernels if not k.op]


def _executions(kernels: Iterable[GpuKernel]) -> list[GpuOp]:
    """Consecutive kernels (in time) of one op and step are one execution; its busy time is their union."""
    out: list[GpuOp] = []
    names: list[str] = []
    reach = 0
    for k in sorted(kernels, key=lambda k: k.start_ps):
        last = out[-1] if out else None
        if last is not None and last.op == k.op and last.group == k.group:
            last.busy_ps += max(0, k.end_ps - max(k.start_ps, reach))
            reach = max(reach, k.end_ps)
            last.end_ps = max(last.end_ps, k.end_ps)
            if k.name not in names:
                names.append(k.name)
            continue
        if last is not None:
            last.kernels = tuple(names)
        names = [k.name]
        reach = k.end_ps
        out.append(GpuOp(k.op, k.type, k.start_ps, k.end_ps, k.end_ps - k.start_ps, (), k.group))
    if out:
        out[-1].kernels = tuple(names)
    return out


def _with_kernel_names(derived: list[GpuOp], kernels: list[GpuKernel]) -> list[GpuOp]:
    """The derived line's executions, each with the names of its op's kernels inside its span."""
    by_op: dict[str, list[GpuKernel]] = {}
    for k in sorted(kernels, key=lambda k: k.start_ps):
        if k.op:
            by_op.setdefault(k.op, []).append(k)
    cursor: dict[str, int] = {}
    out = []
    for op in sorted(derived, key=lambda o: o.start_ps):
        mine, at = by_op.get(op.op, []), cursor.get(op.op, 0)
        names: list[str] = []
        while at < len(mine) and mine[at].start_ps < op.end_ps:
            if mine[at].start_ps >= op.start_ps and mine[at].name not in names:
                names.append(mine[at].name)
            at += 1
        cursor[op.op] = at
        out.append(GpuOp(op.op, op.type, op.start_ps, op.end_ps, op.busy_ps, tuple(names), op.group))
    return out


# ----------------------------------------------------------------------------- reading a plane


@dataclass
class _Ids:
    """Stat metadata ids of one plane (internal); -1 where the plane has no such stat."""

    annotations: dict[int, int]  # stat id -> preference (tf_op first)
    kernel_details: int
    memcpy_details: int
    group: int
    correlation: int
    names: dict[int, str]
    module: int = -1
    fusion: int = -1
    program: int = -1
    graph: int = -1
    node: int = -1
    roles: dict[int, int] = field(default_factory=dict)  # stat id -> what a stream's event reads it as (_ROLES)

    @classmethod
    def of(cls, plane: Any) -> _Ids:
        names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        by_name = {name: key for key, name in names.items()}
        annotations = {by_name[n]: i for i, n in enumerate(_ANNOTATIONS) if n in by_name}
        roles = {by_name[n]: role for role, n in enumerate(_ROLES) if n in by_name}
        roles.update({key: _ANNOTATION + preference for key, preference in annotations.items()})
        return cls(
            annotations,
            by_name.get("kernel_details", -1),
            by_name.get("memcpy_details", -1),
            by_name.get("group_id", -1),
            by_name.get("correlation_id", -1),
            names,
            by_name.get("hlo_module", -1),
            by_name.get("hlo_op", -1),
            by_name.get("program_id", -1),
            by_name.get("cuda_graph_id", -1),
            by_name.get("cuda_graph_node_id", -1),
            roles,
        )

    def text(self, stat: Any) -> str:
        """A string stat's value, whether stored inline or by reference to a stat metadata's name."""
        if stat.ref_value:
            return self.names.get(stat.ref_value, "")
        return stat.str_value


def read_gpu_plane(plane: Any, index: int) -> GpuPlane:
    """Reads one ``/device:GPU:N`` plane: its kernels, copies and derived op line (one pass)."""
    ids = _Ids.of(plane)
    gpu = GpuPlane(index, device_name=_plane_stat(plane, ids, "gpu_device_name"))
    events = plane.event_metadata
    for line in plane.lines:
        gpu.events += len(line.events)
        line_name = line.display_name or line.name
        if line_name.startswith(_OPS_LINE):
            _read_ops_line(line, events, ids, gpu.derived)
        elif not line_name.startswith(_DERIVED):
            _read_stream(line, line_name, events, ids, gpu)
    return gpu


def _plane_stat(plane: Any, ids: _Ids, name: str) -> str:
    for stat in plane.stats:
        if ids.names.get(stat.metadata_id) == name:
            return ids.text(stat)
    return ""


def _read_ops_line(line: Any, events: Any, ids: _Ids, out: list[GpuOp]) -> None:
    base = line.timestamp_ns * 1000
    for event in line.events:
        meta = events.get(event.metadata_id)
        op, op_type = parse_annotation(meta.name if meta is not None else "")
        if not op:
            continue
        if meta is not None and meta.display_name and ":" not in meta.display_name:
            op_type = meta.display_name
        group = -1
        for stat in event.stats:
            if stat.metadata_id == ids.group:
                group = stat.int64_value or stat.uint64_value
        start = base + event.offset_ps
        out.append(GpuOp(op, op_type, start, start + event.duration_ps, event.duration_ps, (), group))


#: The stats a stream's event is read for, by role (an index here); annotations are ``_ANNOTATION + preference``.
_ROLES = (
    "kernel_details",
    "memcpy_details",
    "group_id",
    "correlation_id",
    "hlo_module",
    "hlo_op",
    "program_id",
    "cuda_graph_id",
    "cuda_graph_node_id",
)
_DETAILS, _MEMCPY, _GROUP, _CORRELATION, _MODULE, _FUSION = range(6)
_TEXTS = frozenset({_MEMCPY, _MODULE, _FUSION})
_ANNOTATION = 16


def _read_stream(line: Any, line_name: str, events: Any, ids: _Ids, gpu: GpuPlane) -> None:
    """Reads one stream's kernels and copies: each event's stats by their role (:data:`_ROLES`), the rest skipped."""
    base = line.timestamp_ns * 1000
    roles, shown = ids.roles, {key: meta.display_name or meta.name for key, meta in events.items()}
    for event in line.events:
        # details, memcpy, group, correlation, module, fusion (hlo_op), program, graph, node
        v: list[Any] = [False, None, -1, -1, "", "", -1, -1, -1]
        annotation, rank = "", len(_ANNOTATIONS)
        for stat in event.stats:
            role = roles.get(stat.metadata_id)
            if role is None:
                continue
            if role >= _ANNOTATION:
                if role - _ANNOTATION < rank:
                    annotation, rank = ids.text(stat), role - _ANNOTATION
            elif role in _TEXTS:
                v[role] = ids.text(stat)
            elif role == _DETAILS:
                v[role] = True
            else:
                v[role] = stat.int64_value or stat.uint64_value
        details, memcpy, group, correlation, module, fusion, program, graph, node = v
        name = shown.get(event.metadata_id, "")
        start = base + event.offset_ps
        end = start + event.duration_ps
        kind = _copy_kind(name, line_name, memcpy)
        if memcpy is not None or (kind and not details):
            size, dest = _memcpy_numbers(memcpy or "")
            gpu.copies.append(GpuCopy(kind or "", parse_annotation(annotation)[0], size, dest, start, end))
        elif details or (correlation >= 0 and not name.startswith(_NOT_KERNELS)):
            op, op_type = parse_annotation(annotation)
            gpu.kernels.append(
                GpuKernel(op, op_type, name, start, end, group, module, fusion, program, graph, node, correlation)
            )


def _copy_kind(name: str, line_name: str, details: str | None) -> str:
    """``"H2D"``, ``"D2H"``, ``"D2D"``, ``"P2P"`` from the event's or line's name, or the details' memory kinds."""
    for text in (name, line_name if "," not in line_name else ""):
        if "memcpy" in text.lower():
            upper = text.upper()
            for token, kind in _COPY_KINDS:
                if token in upper:
                    return kind
    if details:
        fields = dict(part.split(":", 1) for part in details.split() if ":" in part)
        src, dst = fields.get("kind_src", ""), fields.get("kind_dst", "")
        if src and dst:
            if src == "device":
                return "D2D" if dst == "device" else "D2H"
            return "H2D" if dst == "device" else ""
    return ""


def _memcpy_numbers(details: str) -> tuple[int | None, int | None]:
    """``(size, dest)`` from ``memcpy_details`` (``"size:112 dest:4 async:0"``); ``None`` where absent.

    >>> _memcpy_numbers("kind_src:pinned kind_dst:device size:112 dest:4 async:0")
    (112, 4)
    """
    size = dest = None
    for part in details.split():
        key, _, value = part.partition(":")
        if value.isascii() and value.isdigit() and len(value) < 20:
            if key == "size":
                size = int(value)
            elif key == "dest":
                dest = int(value)
    return size, dest


def nccl_primitive(kernel: str) -> str:
    """The collective a NCCL kernel runs: ``"ncclKernel_AllReduce_RING_LL_Sum_float"`` -> ``"AllReduce"``.

    >>> nccl_primitive("ncclDevKernel_AllGather_RING_LL"), nccl_primitive("volta_sgemm")
    ('AllGather', '')
    """
    if not _NCCL.match(kernel):
        return ""
    match = _NCCL_PRIMITIVE.search(kernel)
    return match[1] if match else "nccl"
