"""The records of a placement report: ops, transfers, collectives, variable reads, diffs.

Plain frozen dataclasses and the constants every part of :mod:`tfdevices.verify`
shares; nothing here reads a trace or imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import operator
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from tfdevices.core.devices import short_name, task_of
from tfdevices.core.errors import SpecError
from tfdevices.core.units import format_bytes

#: Function plumbing, not computation: left out of ``report.ops``.
PLUMBING = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval", "NoOp"})
#: Transfer ops: reported as :class:`Transfer`, not as ops.
TRANSFER_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
COLLECTIVE_OP = re.compile(r"^_?(Collective|Nccl)")
#: The kernel named for ops that XLA compiled together into one executable.
XLA_CLUSTER = "XlaCluster"
#: The device of an op whose kernel the trace does not tie to a device (the report's notes say which).
UNKNOWN_DEVICE = "?"
#: The version of the JSON schema :meth:`PlacementReport.to_json` writes (see the module docstring).
JSON_VERSION = 3
DTYPE_BYTES = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class OpPlacement:
    """One executed op.

    A kernel that fused several ops (``_FusedMatMul`` running a MatMul, its BiasAdd and
    its Relu) gives one record per op it ran, each naming that kernel.

    Attributes:
        name: the op's name as the program wrote it (``"sequential/dense_2/MatMul"``).
        type: the model op: the op type the program wrote (``"MatMul"``), whatever kernel ran it.
        device: where it ran: ``"CPU:1"``, or ``"worker:1/GPU:0"`` on another job's task.
        requested: the device the program asked for (``""`` when none was asked).
        call: index of the function call (or eager op) it belongs to, in capture order.
        kernel: the kernel TensorFlow executed (``"_FusedMatMul"``, ``"_MklMatMul"``,
            ``"MatMul"``, or ``"XlaCluster"`` for ops XLA compiled together).
        kernel_name: the executed kernel's node name (a fused kernel is named after its last
            op: ``"dense_2/Relu"``), or the XLA cluster's function name.
        start_us: when the op started, in microseconds from the first event captured
            (``None`` when the profiler did not time it). On a GPU this is the GPU's own clock:
            the start of its first kernel on the device.
        duration_us: how long it ran, in microseconds (shared by the ops a kernel fused). On a
            GPU: the union of its kernels on the device, not the host's launch.
        launch_us: on a GPU, when the host launched it (the host-side event's start), in
            microseconds from the first event; ``None`` for ops that ran on a CPU, and for GPU
            ops read from a profile whose host plane does not show the launch.
        kernels: on a GPU, the names of the device kernels that ran it (``()`` elsewhere, and
            for a GPU op seen only on the host: the report's ``notes`` count those).
    """

    name: str
    type: str
    device: str
    requested: str = ""
    call: int = 0
    kernel: str = ""
    kernel_name: str = ""
    start_us: float | None = None
    duration_us: float | None = None
    launch_us: float | None = None
    kernels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class XlaOpPlacement(OpPlacement):
    """An op XLA compiled, read from a GPU profile: its :class:`OpPlacement` and the HLO instruction that ran it.

    Its ``kernel`` is :data:`XLA_CLUSTER` and its ``kernel_name`` the module; ``kernels`` names
    the kernel run.

    Attributes:
        fusion: the instruction whose kernel ran it: a fusion (``"gemm_fusion_dot.283"``) or a
            library call (``"custom-call.1"``: cuBLAS, cuDNN); ``""`` where the profile does not say.
        graph: the command buffer (a CUDA graph XLA builds: ``"command_buffer_1"``) that kernel ran
            in; ``""`` outside one.
    """

    fusion: str = ""
    graph: str = ""


def _op_maker() -> Callable[..., OpPlacement]:
    """A constructor of :class:`OpPlacement` for the report's builder: the same record, made faster (internal).

    A frozen dataclass' ``__init__`` sets each field through ``object.__setattr__`` (about 1.1 us for
    an op's 11 fields on this machine); the builder makes one record per executed op, thousands
    per capture. This sets the slots through their own descriptors (about 0.6 us), positional
    arguments only, in field order, ``launch_us`` and ``kernels`` left at their defaults.
    """
    new = object.__new__
    setters = tuple(getattr(OpPlacement, name).__set__ for name in OpPlacement.__slots__)
    (name_, type_, device_, requested_, call_, kernel_, kernel_name_, start_, duration_, launch_, kernels_) = setters

    def make(
        name: str,
        type: str,
        device: str,
        requested: str,
        call: int,
        kernel: str,
        kernel_name: str,
        start_us: float | None,
        duration_us: float | None,
    ) -> OpPlacement:
        op = new(OpPlacement)
        name_(op, name)
        type_(op, type)
        device_(op, device)
        requested_(op, requested)
        call_(op, call)
        kernel_(op, kernel)
        kernel_name_(op, kernel_name)
        start_(op, start_us)
        duration_(op, duration_us)
        launch_(op, None)
        kernels_(op, ())
        return op

    return make


make_op = _op_maker()


@dataclass(frozen=True, slots=True)
class Transfer:
    """One tensor copied between devices (a matched ``_Send``/``_Recv`` pair).

    Attributes:
        src: the sending device.
        dst: the receiving device.
        tensor: the tensor copied (``"dense_1/BiasAdd:0"``).
        dtype: its dtype name (``"float32"``), ``""`` when unknown.
        shape: its shape, ``None`` when unknown; ``-1`` marks an unknown dimension.
        bytes: its size, ``None`` unless dtype and shape are fully known.
        send_op: the ``_Send`` op's name (``""`` when the sender is the client).
        recv_op: the ``_Recv`` op's name (``""`` when not seen).
        call: index of the function call it belongs to.
        start_us: when the copy started, in microseconds from the first event captured: the
            ``_Send``'s start, or on a GPU the device's memcpy.
        duration_us: how long it ran, in microseconds (on a GPU, the memcpy's own time).
        kind: ``""`` for a copy seen as a ``_Send``/``_Recv`` pair only; on a GPU the memcpy's
            direction: ``"H2D"``, ``"D2H"``, ``"D2D"`` (within one device) or ``"P2P"`` (peer).
    """

    src: str
    dst: str
    tensor: str
    dtype: str = ""
    shape: tuple[int, ...] | None = None
    bytes: int | None = None
    send_op: str = ""
    recv_op: str = ""
    call: int = 0
    start_us: float | None = None
    duration_us: float | None = None
    kind: str = ""

    def describe(self) -> str:
        """``"CPU:0 -> CPU:1 dense_1/BiasAdd:0 float32[32,16] 2.0 KiB"``."""
        shape = "?" if self.shape is None else ",".join("?" if d < 0 else str(d) for d in self.shape)
        return f"{self.src} -> {self.dst} {self.tensor} {self.dtype or '?'}[{shape}] {format_bytes(self.bytes)}"


@dataclass(frozen=True)
class TransferGroup:
    """The transfers of one tensor from one device to another: how many, and their bytes.

    Attributes:
        src: the sending device.
        dst: the receiving device.
        tensor: the tensor copied.
        count: how many times it was copied.
        bytes: the bytes of all these copies, ``None`` when no copy's size is known.
        dtype: its dtype name, ``""`` when unknown, ``"*"`` when the copies differ.
        shape: its shape (``None`` when unknown or when the copies differ).
    """

    src: str
    dst: str
    tensor: str
    count: int
    bytes: int | None
    dtype: str = ""
    shape: tuple[int, ...] | None = None


def group_transfers(transfers: Iterable[Transfer]) -> tuple[TransferGroup, ...]:
    """Transfers grouped by source, destination and tensor: the commonest first, then the largest.

    >>> t = Transfer("CPU:0", "CPU:1", "x:0", "float32", (4,), 16)
    >>> group_transfers([t, t])
    (TransferGroup(src='CPU:0', dst='CPU:1', tensor='x:0', count=2, bytes=32, dtype='float32', shape=(4,)),)
    """
    groups: dict[tuple[str, str, str], list[Transfer]] = {}
    for t in transfers:
        groups.setdefault((t.src, t.dst, t.tensor), []).append(t)
    out = []
    for (src, dst, tensor), members in groups.items():
        sizes = [t.bytes for t in members if t.bytes is not None]
        dtypes = {t.dtype for t in members}
        shapes = {t.shape for t in members}
        out.append(
            TransferGroup(
                src,
                dst,
                tensor,
                len(members),
                sum(sizes) if sizes else None,
                dtypes.pop() if len(dtypes) == 1 else "*",
                shapes.pop() if len(shapes) == 1 else None,
            )
        )
    return tuple(sorted(out, key=lambda g: (-g.count, -(g.bytes or 0), g.src, g.dst, g.tensor)))


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective op (all-reduce, all-gather, broadcast ... of ``tf.distribute`` or NCCL).

    Attributes:
        name: the op's name.
        type: the op type (``"CollectiveReduceV2"``, ``"NcclAllReduce"`` ...).
        device: where it ran.
        reduction: the merge op of a reduction (``"Add"``), ``""`` for others.
        dtype: the reduced tensor's dtype name.
        call: index of the compiled function it belongs to.
        start_us: when it started, in microseconds from the first event (on a GPU, its NCCL
            kernel's start on the device); ``None`` when not timed.
        duration_us: how long it ran, in microseconds; ``None`` when not timed.
    """

    name: str
    type: str
    device: str
    reduction: str = ""
    dtype: str = ""
    call: int = 0
    start_us: float | None = None
    duration_us: float | None = None


@dataclass(frozen=True)
class VariableRead:
    """A read of a resource variable, and the devices that consumed the value.

    Attributes:
        op: the ``ReadVariableOp``'s name; the variable's layer is its scope.
        stored_on: the device holding the variable (reads run where the variable lives).
        read_on: the variable's own device and every device the value is copied to;
            a device other than ``stored_on`` means a copy on every call.
        bytes: the value's size when known.
    """

    op: str
    stored_on: str
    read_on: tuple[str, ...]
    bytes: int | None = None

    @property
    def crosses_devices(self) -> bool:
        """Whether the value is copied to another device."""
        return any(device != self.stored_on for device in self.read_on)


@dataclass(frozen=True)
class PlacementDiff:
    """What changed between two reports (``before.diff(after)``).

    Attributes:
        moved: ``(op name, device before, device after)`` for ops that changed device.
        added: ops only in the second report, as ``(name, device)``.
        removed: ops only in the first report, as ``(name, device)``.
        transfers_before: transfer counts per ``"src -> dst"`` in the first report.
        transfers_after: the same in the second report.
    """

    moved: tuple[tuple[str, str, str], ...]
    added: tuple[tuple[str, str], ...]
    removed: tuple[tuple[str, str], ...]
    transfers_before: dict[str, int] = field(default_factory=dict)
    transfers_after: dict[str, int] = field(default_factory=dict)

    @property
    def unchanged(self) -> bool:
        """True when no op moved, appeared or disappeared and the transfers are the same."""
        return not (self.moved or self.added or self.removed) and self.transfers_before == self.transfers_after

    def summary(self) -> str:
        """One line per change."""
        if self.unchanged:
            return "placement unchanged"
        lines = [f"moved {name}: {a} -> {b}" for name, a, b in self.moved]
        lines += [f"added {name} on {device}" for name, device in self.added]
        lines += [f"removed {name} from {device}" for name, device in self.removed]
        if self.transfers_before != self.transfers_after:
            lines.append(f"transfers {self.transfers_before} -> {self.transfers_after}")
        return "\n".join(lines)


_CALL_PREFIXES = ("StatefulPartitionedCall/", "PartitionedCall/")  # a called function's ops, inlined


def program_name(name: str) -> str:
    """The op as the program wrote it: inlined calls' prefixes dropped."""
    while name.startswith(_CALL_PREFIXES):
        name = name.split("/", 1)[1]
    return name


@functools.lru_cache(maxsize=1024)
def report_device(device: str) -> str:
    """Report name of a TF device string: ``"CPU:1"`` or ``"worker:1/CPU:1"``; ``"?"`` when unplaced."""
    if not device:
        return "?"
    try:
        short = short_name(device)
    except SpecError:
        return device
    task = task_of(device)
    return short if task is None or task.startswith("localhost:") else f"{task}/{short}"


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Keeps Python's cyclic garbage collector off the objects that existed before the block.

    Tens of thousands of small records trigger collections, and a full one walks every live
    object of the process (TensorFlow's own are most of them), so the work would grow faster
    than the records and end with one long pause. Freezing the objects that already exist
    (``gc.freeze``) leaves the collector only the block's new objects; they rejoin the rest
    when the block ends.
    """
    if not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def ps_to_us(ps: int) -> float:
    """Picoseconds (the profiler's unit) as microseconds (the report's), to the nanosecond."""
    return ps // 1000 / 1000  # nanosecond resolution


def union_length(spans: Iterable[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` spans: the time at least one of them covers.

    >>> union_length([(0, 5), (3, 7), (10, 11)])
    8
    """
    total: float = 0
    reach: float | None = None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


_GETTERS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def record_dict(record: Any) -> dict[str, Any]:
    """``dataclasses.asdict`` for a record of plain fields, without its deep copies (reports hold 10^4 ops).

    The field names and one getter for all of them are made once per record class.
    """
    kind = type(record)
    known = _GETTERS.get(kind)
    if known is None:
        names = tuple(f.name for f in fields(record))
        known = _GETTERS[kind] = (names, operator.attrgetter(*names))
    names, get = known
    return dict(zip(names, get(record)))
