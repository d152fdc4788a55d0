"""Placement verification: where every op really ran, in the ops the program wrote.

:func:`capture` (or the :func:`capturing` block) runs code under TensorFlow's
profiler, which records every kernel TensorFlow executes with its start and
duration, and the ``_Send`` of every tensor copied between devices (its key names
both devices). Nothing is retraced or recompiled: a step that already ran is
captured for about the cost of one profiled call. The result is a frozen
:class:`PlacementReport`: every executed op with its device, the device the program
asked for, the model op it is and the kernel that ran it, its start and duration;
every cross-device transfer with the tensor and its size where the shape is known;
the collective ops; and checks that read as sentences.

>>> import tensorflow as tf
>>> import tfdevices.verify as verify
>>> @tf.function
... def step(x):
...     with tf.device("/CPU:0"):
...         return tf.reduce_sum(x * 2.0)
>>> report = verify.capture(step, tf.ones([4]))
>>> report.assert_on("CPU:0", ops="*", types=["Mul"])
>>> report.transfers()
()

**Model ops and kernels.** TensorFlow rewrites graphs before running them: with
oneDNN (the default on CPUs with AVX-512) a MatMul runs as ``_MklMatMul`` and a Dense
layer's MatMul+BiasAdd+Relu as one ``_MklNativeFusedMatMul`` (``_FusedMatMul``
without oneDNN) named after its last op. A report speaks of the ops the program
wrote, whatever ran them: each op carries its model op (``type``, read from the
function's traced graph) and the kernel (``kernel``, ``kernel_name``); a fused
kernel counts as each op it fused. Ops that XLA compiled (``jit_compile=True``) are
reported on the device their cluster ran on, with the kernel ``"XlaCluster"``.

**Where each op ran.** The profiler records, for each function partition that runs,
the executor context its kernels run in; a partition's device is read from the
``_Send`` keys of the tensors it sends or receives. A partition that copies nothing
(a function on one device) runs on the device its ops asked for or, when none
asked, where its outputs were placed. Eager ops are recorded by an op callback,
on the device of their output. A step's span is written when the step ends, so one
that ends after the profiler stopped is missing while its kernels are not; those
kernels are tied to their step through the thread pool's record of who scheduled
the work they ran in. A kernel the trace ties to no step is reported on device
``"?"``, and the report's ``notes`` say so: never on a guessed device.

Device names in reports are TensorFlow's short names, ``"CPU:1"``, ``"GPU:0"``,
prefixed with the task (``"worker:1/GPU:0"``) when the device belongs to a job
other than the local one.

**JSON** (:meth:`PlacementReport.to_json`, what TensorBoard stores and the
Placement dashboard reads), version 2::

    {"version": 2,
     "ops": [{"name": "seq/dense_1/MatMul",   # the op as the program wrote it
              "type": "MatMul",               # the model op
              "device": "CPU:1",              # where it ran
              "requested": "CPU:1",           # what the program asked for ("" when nothing)
              "call": 0,                      # index of the function call (or eager op)
              "kernel": "_FusedMatMul",       # the kernel that ran it ("XlaCluster" for XLA)
              "kernel_name": "seq/dense_1/Relu",  # the kernel's node (shared by the ops it fused)
              "start_us": 12.5,               # kernel start, microseconds from the first event; null if unknown
              "duration_us": 3.25}, ...],     # kernel duration (shared by the ops it fused); null if unknown
     "transfers": [{"src": "CPU:0", "dst": "CPU:1", "tensor": "x:0", "dtype": "float32",
                    "shape": [4, 16], "bytes": 256,   # shape/bytes null when unknown
                    "send_op": "x/_1", "recv_op": "x/_2", "call": 0,
                    "start_us": 10.0, "duration_us": 1.5}, ...],   # the _Send's start and duration
     "collectives": [{"name": ..., "type": "CollectiveReduceV2", "device": "CPU:0",
                      "reduction": "Add", "dtype": "float32", "call": 0}, ...],
     "busy_us": {"CPU:0": 48.2, "CPU:1": 95.0},   # per device: time at least one kernel ran
     "notes": []}   # what could not be established (ops on device "?"); absent in older reports

Times come from one clock (the profiler's) for all devices of the process.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import gc
import json
import math
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tfdevices.core._tf import import_tf
from tfdevices.core.devices import short_name, task_of
from tfdevices.core.errors import InputError, PlacementAssertionError, SpecError, TfDevicesError
from tfdevices.core.units import format_bytes

__all__ = [
    "Capture", "Collective", "OpPlacement", "PlacementDiff", "PlacementReport", "Transfer",
    "VariableRead", "capture", "capturing", "union_length",
]

#: Function plumbing, not computation: left out of ``report.ops``.
PLUMBING = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval", "NoOp"})
#: Transfer ops: reported as :class:`Transfer`, not as ops.
TRANSFER_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
_COLLECTIVE = re.compile(r"^_?(Collective|Nccl)")
#: The kernel named for ops that XLA compiled together into one executable.
XLA_CLUSTER = "XlaCluster"
#: The device of an op whose kernel the trace does not tie to a device (the report's notes say which).
UNKNOWN_DEVICE = "?"
#: The version of the JSON schema :meth:`PlacementReport.to_json` writes (see the module docstring).
JSON_VERSION = 2
_DTYPE_BYTES = {
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "half": 2, "float": 4, "double": 8,
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
    "uint64": 8, "bool": 1, "complex64": 8, "complex128": 16,
}
_DEVICE_PATTERN = re.compile(
    r"^(?:/job:(?P<job>[\w*-]+)(?:/replica:\d+)?(?:/task:(?P<task>\d+|\*))?)?"
    r"(?:/?(?:device:)?)(?P<type>[A-Za-z_*]+):(?P<index>\d+|\*)$")
_DEVICE_HINT = "name a TensorFlow device: 'GPU:1', '/device:CPU:1', or a pattern such as 'CPU:*'."
_lock = threading.Lock()
_active = False


# ----------------------------------------------------------------------------- records

@dataclass(frozen=True)
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
        start_us: when the kernel started, in microseconds from the first event captured
            (``None`` when the profiler did not time it).
        duration_us: how long the kernel ran, in microseconds (shared by the ops it fused).
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


@dataclass(frozen=True)
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
        start_us: when the ``_Send`` started, in microseconds from the first event captured.
        duration_us: how long the ``_Send`` ran, in microseconds.
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

    def describe(self) -> str:
        """``"CPU:0 -> CPU:1 dense_1/BiasAdd:0 float32[32,16] 2.0 KiB"``."""
        shape = "?" if self.shape is None else ",".join("?" if d < 0 else str(d) for d in self.shape)
        return f"{self.src} -> {self.dst} {self.tensor} {self.dtype or '?'}[{shape}] {format_bytes(self.bytes)}"


@dataclass(frozen=True)
class Collective:
    """One collective op (all-reduce, all-gather, broadcast ... of ``tf.distribute`` or NCCL).

    Attributes:
        name: the op's name.
        type: the op type (``"CollectiveReduceV2"``, ``"NcclAllReduce"`` ...).
        device: where it ran.
        reduction: the merge op of a reduction (``"Add"``), ``""`` for others.
        dtype: the reduced tensor's dtype name.
        call: index of the compiled function it belongs to.
    """

    name: str
    type: str
    device: str
    reduction: str = ""
    dtype: str = ""
    call: int = 0


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


# ----------------------------------------------------------------------------- device patterns

@functools.lru_cache(maxsize=1024)
def _location(device: str) -> str:
    """Report name of a TF device string: ``"CPU:1"`` or ``"worker:1/CPU:1"``; ``"?"`` when unplaced."""
    if not device:
        return "?"
    try:
        short = short_name(device)
    except SpecError:
        return device
    task = task_of(device)
    return short if task is None or task.startswith("localhost:") else f"{task}/{short}"


def _device_matcher(device: object, *, what: str = "device") -> Callable[[str], bool]:
    """A predicate on report device names for a TF logical name or pattern ("CPU:*").

    Raises:
        SpecError: ``device`` is a physical GPU index or not a device name.
    """
    if isinstance(device, bool) or isinstance(device, int) or (isinstance(device, str) and device.strip().isdigit()):
        raise SpecError(
            f"{what} {device!r} is a physical GPU index (nvidia-smi numbering), but placement reports "
            "name TensorFlow's logical devices.",
            hint=f"write the TensorFlow name, e.g. 'GPU:{str(device).strip()}' (masking renumbers GPUs: "
                 "tfdevices.select shows which logical name an NVML index gets).")
    match = _DEVICE_PATTERN.match(device.strip()) if isinstance(device, str) else None
    if match is None:
        raise SpecError(f"{what} {device!r} is not a TensorFlow device name or pattern.", hint=_DEVICE_HINT)
    short = f"{match['type'].upper()}:{match['index']}"
    if match["job"] is None or match["job"] == "localhost":
        return lambda name: fnmatch.fnmatchcase(name.rsplit("/", 1)[-1], short)
    task = f"{match['job']}:{match['task'] or 0}"
    return lambda name: fnmatch.fnmatchcase(name, f"{task}/{short}")


def _name_matcher(pattern: str | Iterable[str]) -> Callable[[str], bool]:
    """Matches op names by glob at any scope boundary: "dense_2/*" matches "model/dense_2/MatMul".

    A pattern that starts with "/" matches from the start of the name only:
    "/model/*" matches "model/dense_2/MatMul" but not "gradient_tape/model/dense_2/MatMul".
    """
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    if not patterns or not all(isinstance(p, str) and p.strip("/") for p in patterns):
        raise InputError(f"ops={pattern!r}: expected a glob pattern or a list of them.",
                         hint="e.g. ops='dense_2/*' or ops=['*MatMul*', '*BiasAdd*'].")
    anchored = [p[1:] for p in patterns if p.startswith("/")]
    anywhere = [p for p in patterns if not p.startswith("/")]

    def matches(name: str) -> bool:
        if any(fnmatch.fnmatchcase(name, p) for p in anchored):
            return True
        parts = name.split("/")
        suffixes = ["/".join(parts[i:]) for i in range(len(parts))]
        return any(fnmatch.fnmatchcase(s, p) for p in anywhere for s in suffixes)
    return matches


# ----------------------------------------------------------------------------- the report

@dataclass(frozen=True)
class PlacementReport:
    """Where the ops of one captured run really ran.

    Attributes:
        ops: every executed op except function plumbing (``_Arg``, ``_Retval``, ``NoOp``)
            and transfers.
        copies: every cross-device transfer; filter with :meth:`transfers`.
        collectives: the collective ops (all-reduce and friends).
        graphs: each called function's graph as the program wrote it, as
            ``(namespace, graph)``, one namespace per call; ``graph`` is TensorFlow's
            traced graph (or a serialized GraphDef). ``tfdevices.tensorboard`` writes
            them with every node's executed device.
        busy_us: per device, the microseconds during which at least one of its kernels ran.
        notes: what the report could not establish, as sentences: ops the profiler's trace does
            not tie to a device are reported on device ``"?"`` (:data:`UNKNOWN_DEVICE`) and named here.
    """

    ops: tuple[OpPlacement, ...]
    copies: tuple[Transfer, ...] = ()
    collectives: tuple[Collective, ...] = ()
    graphs: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)
    busy_us: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    # -- queries

    @property
    def devices(self) -> tuple[str, ...]:
        """Every device that ran an op or took part in a transfer, sorted."""
        names = {op.device for op in self.ops} | {t.src for t in self.copies} | {t.dst for t in self.copies}
        return tuple(sorted(names))

    @property
    def op_counts(self) -> dict[str, int]:
        """Number of executed ops per device."""
        return dict(sorted(Counter(op.device for op in self.ops).items()))

    @property
    def kernel_counts(self) -> dict[str, int]:
        """Number of kernels TensorFlow executed per device (a fused kernel counts once)."""
        return dict(sorted(Counter(device for device, *_ in _kernels(self.ops)).items()))

    @property
    def xla_clusters(self) -> dict[str, tuple[str, int]]:
        """Each XLA cluster that ran: its function name -> ``(device, ops compiled together)``."""
        clusters: dict[str, tuple[str, int]] = {}
        for op in self.ops:
            if op.kernel == XLA_CLUSTER:
                device, count = clusters.get(op.kernel_name, (op.device, 0))
                clusters[op.kernel_name] = (device, count + 1)
        return clusters

    def ops_on(self, device: str) -> tuple[OpPlacement, ...]:
        """The ops that ran on ``device`` (a name or pattern such as ``"CPU:*"``).

        Raises:
            SpecError: ``device`` is not a TensorFlow device name or pattern.
        """
        on = _device_matcher(device)
        return tuple(op for op in self.ops if on(op.device))

    def transfers(self, src: str | None = None, dst: str | None = None) -> tuple[Transfer, ...]:
        """The cross-device transfers, optionally only those from ``src`` and/or to ``dst``.

        Args:
            src: a device name or pattern for the sender, or ``None`` for any.
            dst: a device name or pattern for the receiver, or ``None`` for any.

        Returns:
            The matching transfers, in capture order.

        Raises:
            SpecError: ``src`` or ``dst`` is not a TensorFlow device name or pattern.
        """
        from_src = (lambda _: True) if src is None else _device_matcher(src, what="src")
        to_dst = (lambda _: True) if dst is None else _device_matcher(dst, what="dst")
        return tuple(t for t in self.copies if from_src(t.src) and to_dst(t.dst))

    def variables_on(self, device: str | None = None) -> tuple[VariableRead, ...]:
        """Where each variable read happens: the variables stored on ``device`` and who reads them.

        A ``VariableRead`` whose ``read_on`` names another device is a weight copied
        across devices on every call: the classic silent slowdown.

        Args:
            device: a device name or pattern for the variables' device, ``None`` for all.

        Returns:
            One :class:`VariableRead` per ``ReadVariableOp`` executed.

        Raises:
            SpecError: ``device`` is not a TensorFlow device name or pattern.
        """
        on = (lambda _: True) if device is None else _device_matcher(device)
        by_tensor: dict[tuple[int, str], list[Transfer]] = {}
        for t in self.copies:
            by_tensor.setdefault((t.call, t.tensor.rsplit(":", 1)[0]), []).append(t)
        reads = []
        for op in self.ops:
            if op.type != "ReadVariableOp" or not on(op.device):
                continue
            sent = by_tensor.get((op.call, op.name), [])
            read_on = tuple(sorted({op.device} | {t.dst for t in sent})) if sent else (op.device,)
            size = next((t.bytes for t in sent if t.bytes is not None), None)
            reads.append(VariableRead(op=op.name, stored_on=op.device, read_on=read_on, bytes=size))
        return tuple(reads)

    # -- assertions

    def assert_on(self, device: str, ops: str | Iterable[str] = "*", *, types: Iterable[str] | None = None) -> None:
        """Checks that every executed op matching ``ops`` (and ``types``) ran on ``device``.

        Args:
            device: a TensorFlow device name (``"GPU:1"``, ``"/device:CPU:1"``) or pattern (``"CPU:*"``).
            ops: glob pattern(s) on the op names the program wrote, matched at any scope
                boundary (``"dense_2/*"`` matches ``"model/dense_2/MatMul"``); a leading
                ``"/"`` matches from the start only (``"/model/*"`` leaves out
                ``"gradient_tape/model/..."``).
            types: only ops of these model op types (``["MatMul"]``: the ops the program
                wrote, whichever kernel ran them; a fused kernel counts as each op it
                fused), or ``None`` for all.

        Raises:
            PlacementAssertionError: an op ran elsewhere, or no executed op matches.
            SpecError: ``device`` is a physical GPU index or not a device name.
            InputError: ``ops`` is not a pattern.
        """
        on, selected = _device_matcher(device), self._select(ops, types)
        offenders = [op for op in selected if not on(op.device)]
        if offenders:
            where = Counter(op.device for op in offenders)
            listing = _listed(offenders, _where_ran)
            raise PlacementAssertionError(
                f"expected ops matching {ops!r} on {device}, but {len(offenders)} of {len(selected)} ran "
                f"elsewhere ({', '.join(f'{d}: {n}' for d, n in sorted(where.items()))}): {listing}.",
                hint=f"pin them with tf.device('{device}') where they are created, or create their "
                     "variables on that device.")

    def assert_no_transfers(self, src: str | None = None, dst: str | None = None) -> None:
        """Checks that no tensor was copied between devices (optionally only ``src`` -> ``dst``).

        Raises:
            PlacementAssertionError: transfers were found; the message lists them.
            SpecError: ``src`` or ``dst`` is not a TensorFlow device name or pattern.
        """
        found = self.transfers(src, dst)
        if found:
            scope = "" if src is None and dst is None else f" from {src or 'any device'} to {dst or 'any device'}"
            listing = _listed(found, Transfer.describe)
            raise PlacementAssertionError(
                f"expected no cross-device transfers{scope}, but {len(found)} ran "
                f"({format_bytes(_total(found))} where known): {listing}.",
                hint="keep each op on the device of its inputs and variables (report.variables_on() "
                     "shows weights read from another device).")

    def _select(self, ops: str | Iterable[str], types: Iterable[str] | None) -> list[OpPlacement]:
        named = _name_matcher(ops)
        wanted = None if types is None else set([types] if isinstance(types, str) else types)
        by_name = [op for op in self.ops if named(op.name)]
        selected = [op for op in by_name if wanted is None or op.type in wanted]
        if selected:
            return selected
        if by_name and wanted is not None:
            listing = _listed(by_name, _where_ran)
            raise PlacementAssertionError(
                f"expected ops matching {ops!r} of types {sorted(wanted)} to check, but none of the "
                f"{len(by_name)} ops matching {ops!r} is of those types: {listing}.",
                hint="types name the ops the program wrote (MatMul, BiasAdd, Relu ...), whichever kernel "
                     "ran them; pick types from this list.")
        sample = ", ".join(sorted({op.name for op in self.ops})[:8]) or "none"
        raise PlacementAssertionError(
            f"expected ops matching {ops!r}{'' if types is None else f' of types {sorted(wanted)}'} "
            f"to check, but none of the {len(self.ops)} executed ops matches; they include: {sample}.",
            hint="check the pattern against report.ops (names are matched at scope boundaries).")

    # -- comparison

    def diff(self, other: PlacementReport) -> PlacementDiff:
        """What changed from this report to ``other``: moved, added and removed ops, and transfers.

        Ops are matched by name (and occurrence, for names that repeat).
        """
        mine, theirs = _keyed(self.ops), _keyed(other.ops)
        moved = tuple((k[0], mine[k].device, theirs[k].device)
                      for k in mine if k in theirs and mine[k].device != theirs[k].device)
        added = tuple((k[0], theirs[k].device) for k in theirs if k not in mine)
        removed = tuple((k[0], mine[k].device) for k in mine if k not in theirs)
        return PlacementDiff(moved, added, removed, _pair_counts(self.copies), _pair_counts(other.copies))

    # -- output

    def summary(self) -> str:
        """A few lines for people: ops per device, transfers per device pair, collectives."""
        counts = ", ".join(f"{d}: {n}" for d, n in self.op_counts.items()) or "none"
        lines = [f"{len(self.ops)} ops on {len(self.op_counts)} device(s) ({counts})"]
        pairs = _pair_counts(self.copies)
        lines.append(f"{len(self.copies)} transfer(s)" + (
            f" ({format_bytes(_total(self.copies))} where known): "
            + ", ".join(f"{p}: {n}" for p, n in pairs.items()) if pairs else ""))
        clusters = self.xla_clusters
        if clusters:
            lines.append(f"{sum(n for _, n in clusters.values())} op(s) compiled together by XLA in "
                         f"{len(clusters)} cluster(s): " + ", ".join(
                             f"{name} on {device} ({n} ops)" for name, (device, n) in sorted(clusters.items())))
        kinds = Counter(c.type for c in self.collectives)
        lines.append(f"{len(self.collectives)} collective(s)" + (
            ": " + ", ".join(f"{t}: {n}" for t, n in sorted(kinds.items())) if kinds else ""))
        crossing = [r for r in self.variables_on() if r.crosses_devices]
        if crossing:
            lines.append(f"{len(crossing)} variable read(s) copied to another device every call")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """Markdown tables: ops per device (with the commonest types), transfers, collectives."""
        out = ["| device | ops | commonest ops | kernels | busy |", "|---|---:|---|---:|---:|"]
        kernels = self.kernel_counts
        for device, n in self.op_counts.items():
            types = Counter(op.type for op in self.ops if op.device == device).most_common(4)
            busy = self.busy_us.get(device)
            out.append(f"| {device} | {n} | {', '.join(f'{t} ({c})' for t, c in types)} | "
                       f"{kernels.get(device, 0)} | {'?' if busy is None else f'{busy:.0f} us'} |")
        out += ["", f"**Transfers: {len(self.copies)}**", ""]
        if self.copies:
            out += ["| src | dst | tensor | dtype | shape | size |", "|---|---|---|---|---|---:|"]
            for t in self.copies:
                shape = "?" if t.shape is None else str(list(t.shape))
                out.append(f"| {t.src} | {t.dst} | `{t.tensor}` | {t.dtype or '?'} | {shape} | {format_bytes(t.bytes)} |")
        out += ["", f"**Collectives: {len(self.collectives)}**", ""]
        if self.collectives:
            out += ["| device | type | op | reduction |", "|---|---|---|---|"]
            out += [f"| {c.device} | {c.type} | `{c.name}` | {c.reduction} |" for c in self.collectives]
        crossing = [r for r in self.variables_on() if r.crosses_devices]
        if crossing:
            out += ["", f"**Variable reads crossing devices: {len(crossing)}**", "",
                    "| read op | stored on | read on | size |", "|---|---|---|---:|"]
            out += [f"| `{r.op}` | {r.stored_on} | {', '.join(r.read_on)} | {format_bytes(r.bytes)} |"
                    for r in crossing]
        return "\n".join(out)

    def to_json(self) -> str:
        """The report as JSON (without the graphs); :meth:`from_json` reads it back."""
        return json.dumps({
            "version": JSON_VERSION,
            "ops": [_flat(op) for op in self.ops],
            "transfers": [asdict(t) for t in self.copies],  # shapes are tuples: asdict copies them
            "collectives": [_flat(c) for c in self.collectives],
            "busy_us": self.busy_us,
            "notes": list(self.notes),
        })

    @classmethod
    def from_json(cls, text: str) -> PlacementReport:
        """Reads :meth:`to_json` output back.

        Raises:
            InputError: ``text`` is not a placement report in JSON.
        """
        try:
            data = json.loads(text)
            return cls(
                ops=tuple(OpPlacement(**op) for op in data["ops"]),
                copies=tuple(Transfer(**{**t, "shape": None if t["shape"] is None else tuple(t["shape"])})
                             for t in data["transfers"]),
                collectives=tuple(Collective(**c) for c in data["collectives"]),
                busy_us={str(k): float(v) for k, v in data.get("busy_us", {}).items()},
                notes=tuple(str(n) for n in data.get("notes", ())))
        except (ValueError, KeyError, TypeError) as err:
            raise InputError(f"not a placement report in JSON ({err}): {text[:80]!r}",
                             hint="pass the output of PlacementReport.to_json().") from None


def _ran_as(op: OpPlacement) -> str:
    """``"MatMul via _FusedMatMul"``, or just ``"MatMul"`` when the kernel is the op itself."""
    return op.type if op.kernel in ("", op.type) else f"{op.type} via {op.kernel}"


def _kernels(ops: Iterable[OpPlacement]) -> set[tuple[str, int, str, str, float | None]]:
    """The distinct kernels behind ``ops`` (a fused kernel's ops share one)."""
    return {(op.device, op.call, op.kernel, op.kernel_name or op.name, op.start_us) for op in ops}


def _total(transfers: Iterable[Transfer]) -> int:
    return sum(t.bytes or 0 for t in transfers)


def _pair_counts(transfers: Iterable[Transfer]) -> dict[str, int]:
    return dict(sorted(Counter(f"{t.src} -> {t.dst}" for t in transfers).items()))


def _keyed(ops: Iterable[OpPlacement]) -> dict[tuple[str, int], OpPlacement]:
    seen: Counter[str] = Counter()
    keyed = {}
    for op in ops:
        keyed[(op.name, seen[op.name])] = op
        seen[op.name] += 1
    return keyed


# ----------------------------------------------------------------------------- what ran: the profiler's trace

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


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector while a report's records are made.

    Tens of thousands of small records would trigger full collections that walk every
    live object, making the work grow faster than the number of ops.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _stat_value(stat: Any, names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    value = getattr(stat, kind) if kind else None
    return names.get(value, value) if kind == "ref_value" else value


def read_trace(data: bytes) -> _Trace:
    """Reads a serialized XSpace (``*.xplane.pb``) into calls and kernels, one pass over its events.

    On the host plane, TensorFlow records each eager call (``EagerExecute``, with the op or
    function name), each function partition it runs (``FunctionRun``, producing a context
    id), each executor step of a partition (``ExecutorState::Process``, consuming that id)
    and, inside it, each kernel as ``name:kernel`` with its start and duration.

    A span is written when it ends, so a step still ending when the profiler stops is
    missing while its kernels are not (the call returns as soon as its last kernel is
    done, on another thread). Such kernels are given the step that scheduled them: the
    thread pool records each closure it is given (``ThreadpoolListener::Record``) and the
    start of its run (``ThreadpoolListener::StartRegion``) with one id; the span around
    the ``Record`` names the step. A kernel whose step cannot be traced this way keeps
    no context and is reported on an unknown device.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: PLC0415 (lazy TensorFlow)

    space = xplane_pb2.XSpace.FromString(data)
    trace = _Trace()
    with _gc_paused():
        for plane in space.planes:
            if plane.name == "/host:CPU":
                _read_host_plane(plane, trace)
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


(_KERNEL, _PROCESS, _ASYNC, _EAGER, _RUN, _ASYNC_DONE, _DONE_CALLBACK, _SCHEDULED, _REGION_START,
 _REGION_STOP) = range(10)
_EVENT_KINDS = {"ExecutorState::Process": _PROCESS, "ExecutorState::ProcessAsync::Start": _ASYNC,
                "EagerExecute": _EAGER, "FunctionRun": _RUN, "ExecutorState::ProcessAsync::Done": _ASYNC_DONE,
                "ExecutorDoneCallback": _DONE_CALLBACK, "ThreadpoolListener::Record": _SCHEDULED,
                "ThreadpoolListener::StartRegion": _REGION_START, "ThreadpoolListener::StopRegion": _REGION_STOP}

#: Where an event ran, before the thread-pool links are followed (internal): ``("step", context)``,
#: ``("async", id)`` (inside the completion of an asynchronous kernel), ``("region", id)`` (in a
#: thread-pool closure outside any recorded step) or ``None`` (nowhere a step can be read from).
_Where = tuple[str, int] | None


def _event_kinds(plane: Any) -> dict[int, tuple[int, str, str]]:
    """``metadata id -> (kind, op name, kernel)`` for the events capture reads; others are skipped."""
    kinds = {}
    for key, meta in plane.event_metadata.items():
        name, kernel = meta.name, meta.display_name
        if kernel and name.endswith(":" + kernel):
            kinds[key] = (_KERNEL, name[: -len(kernel) - 1], kernel)
        elif name in _EVENT_KINDS:
            kinds[key] = (_EVENT_KINDS[name], name, "")
    return kinds


@dataclass
class _Links:
    """What ties kernels to executor steps across threads (internal), filled while reading lines."""

    scheduled: dict[int, _Where] = field(default_factory=dict)  # closure id -> where it was scheduled
    async_starts: dict[int, _Where] = field(default_factory=dict)  # async kernel id -> where it started
    pending: list[tuple[_Kernel, _Where]] = field(default_factory=list)  # kernels outside any recorded step

    def resolve(self, where: _Where) -> int:
        """The executor context ``where`` leads to, or 0 when the trace does not say."""
        seen: set[tuple[str, int]] = set()
        while where is not None and where[0] in ("region", "async") and where not in seen:
            seen.add(where)
            kind, key = where
            where = (self.scheduled if kind == "region" else self.async_starts).get(key)
        return where[1] if where is not None and where[0] == "step" else 0


def _read_host_plane(plane: Any, trace: _Trace) -> None:
    names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    kinds = _event_kinds(plane)
    ids = {name: key for key, name in names.items() if name in ("_c", "_p")}
    links = _Links()
    for line in plane.lines:
        _read_line(line, kinds, names, ids.get("_c", -1), ids.get("_p", -1), trace, links)
    for kernel, where in links.pending:
        kernel.context = links.resolve(where)
        if not kernel.context:
            trace.unplaced.append(kernel)


def _read_line(line: Any, kinds: dict[int, tuple[int, str, str]], names: dict[int, str], consumed: int,
               produced_id: int, trace: _Trace, links: _Links) -> None:
    """Reads one thread's events; kernels outside any recorded step go to ``links.pending``.

    ``consumed`` and ``produced_id`` are the ids of the ``_c`` and ``_p`` stats (the flow ids
    TensorFlow's profiler ties a producer event to its consumer with).
    """
    base = line.timestamp_ns * 1000
    kernels = trace.kernels
    # The spans open at the current event, innermost last, as (end, where); the thread-pool closure running.
    spans: list[tuple[int, _Where]] = []
    region: _Where = None
    process_end = 0
    current: _Execution | None = None
    for event in line.events:
        kind = kinds.get(event.metadata_id)
        if kind is None:
            continue
        code, name, kernel = kind
        start = base + event.offset_ps
        while spans and spans[-1][0] <= start:
            spans.pop()
        inner = spans[-1][1] if spans else region
        if code == _KERNEL:
            if current is not None and current.is_function and kernel == current.name:
                current.xla = True  # the function ran as one compiled XLA executable
                continue
            if (inner is None or inner[0] != "step") and _int_stat(event, consumed):
                # The body of an asynchronous kernel (a collective) run by its own executor, outside any
                # step; the kernel is recorded where it started (ProcessAsync::Start).
                continue
            stats = _stats(event, names) if kernel in TRANSFER_OPS else None
            kernels.append(_Kernel(name, kernel, start, event.duration_ps, 0, stats))
            _place(kernels[-1], inner, links)
        elif code == _PROCESS:
            process_end = start + event.duration_ps
            spans.append((process_end, ("step", _int_stat(event, consumed))))
        elif code == _ASYNC:  # an asynchronous kernel (_Recv, collectives) starts
            stats = _stats(event, names)
            kernels.append(_Kernel(str(stats.get("name", "")), str(stats.get("kernel_type", "")), start,
                                   event.duration_ps))
            _place(kernels[-1], inner, links)
            links.async_starts[_int_stat(event, produced_id)] = inner
        elif code == _ASYNC_DONE:  # it completes: what it schedules continues the step it started in
            spans.append((start + event.duration_ps, ("async", _int_stat(event, consumed))))
        elif code == _DONE_CALLBACK:  # a step's callback: what it schedules is not that step's work
            spans.append((start + event.duration_ps, None))
        elif code == _SCHEDULED:
            links.scheduled[_int_stat(event, produced_id)] = inner
        elif code == _REGION_START:
            region = ("region", _int_stat(event, consumed))
        elif code == _REGION_STOP:
            region = None
        elif code == _EAGER:
            stats = _stats(event, names)
            current = _Execution(str(stats.get("eager_op", "")), bool(stats.get("is_func")), start,
                                 event.duration_ps)
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


def _place(kernel: _Kernel, inner: _Where, links: _Links) -> None:
    """Sets the kernel's context from the innermost span around it, or leaves it for the thread-pool links.

    ``inner`` is that span (or the thread-pool closure running when no span is open).
    """
    if inner is not None and inner[0] == "step":
        kernel.context = inner[1]
    elif inner is None or inner[0] != "eager":  # eager ops are reported from their calls, not their kernels
        links.pending.append((kernel, inner))


def _int_stat(event: Any, stat_id: int) -> int:
    """The integer value of the event's stat ``stat_id`` (0 when absent)."""
    for stat in event.stats:
        if stat.metadata_id == stat_id:
            return stat.uint64_value or stat.int64_value
    return 0


def _stats(event: Any, names: dict[int, str]) -> dict[str, Any]:
    return {names[s.metadata_id]: _stat_value(s, names) for s in event.stats}


# ----------------------------------------------------------------------------- the model graph of a function

_OPS_BY_NAME: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


class _Graph:
    """The ops a function's traced graph holds, looked up by executed name (internal).

    TensorFlow inlines the functions a function calls, naming their ops after the
    call op (``"StatefulPartitionedCall/model/dense/MatMul"``); those are looked up in
    the called function's graph and reported by the name the program gave them there
    (``"model/dense/MatMul"``; ``kernel_name`` keeps the executed name).
    """

    def __init__(self, graph: Any) -> None:
        self._graph = graph
        self._ops: dict[str, Any] = {}
        self._inner: dict[str, _Graph | None] = {}
        self._asked: dict[str, str] = {}
        if graph is not None:
            cached = _OPS_BY_NAME.get(graph)
            if cached is None:
                cached = _OPS_BY_NAME[graph] = {op.name: op for op in graph.get_operations()}
            self._ops = cached

    def find(self, name: str) -> tuple[Any, str]:
        """The op an executed node name stands for, and the prefix of the call it was inlined from."""
        op = self._ops.get(name)
        if op is not None or self._graph is None:
            return op, ""
        at = name.find("/")
        while at > 0:
            inner = self._called(name[:at])
            if inner is not None:
                op, prefix = inner.find(name[at + 1:])
                if op is not None:
                    return op, f"{name[:at]}/{prefix}"
            at = name.find("/", at + 1)
        return None, ""

    def op(self, name: str) -> Any:
        return self.find(name)[0]

    def asked(self, op: Any) -> str:
        """The device ``op`` asked for (read from TensorFlow once per op)."""
        device = self._asked.get(op.name)
        if device is None:
            device = self._asked[op.name] = op.device
        return device

    def _called(self, call_name: str) -> _Graph | None:
        if call_name not in self._inner:
            call = self._ops.get(call_name)
            inner = None
            if call is not None and call.type in _CALL_OPS:
                try:
                    function = getattr(self._graph, "_functions", {}).get(call.get_attr("f").name)
                    inner = _Graph(function.graph) if function is not None else None
                except (ValueError, AttributeError):
                    inner = None
            self._inner[call_name] = inner
        return self._inner[call_name]

    def tensor(self, name: str) -> Any:
        op_name, _, index = name.rpartition(":")
        op = self.op(op_name)
        try:
            return op.outputs[int(index)] if op is not None else None
        except (IndexError, ValueError):
            return None


_MKL_PREFIX = re.compile(r"^_Mkl(?:Native)?")
_FUSED_BASE = {"FusedBatchNormEx": "FusedBatchNormV3"}


def _base_type(kernel: str) -> str:
    """The op a kernel implements: ``_MklMatMul`` -> ``MatMul``, ``_FusedMatMul`` -> ``MatMul``."""
    plain = _MKL_PREFIX.sub("", kernel).lstrip("_")
    if plain.startswith("Fused") and plain not in ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"):
        plain = plain[len("Fused"):]
    return _FUSED_BASE.get(plain, plain)


def _is_fused(kernel: str) -> bool:
    return "Fused" in kernel and _base_type(kernel) != _MKL_PREFIX.sub("", kernel).lstrip("_")


def _fused_chain(op: Any, base: str, depth: int = 4) -> list[Any] | None:
    """The ops from a fused kernel's first op (of type ``base``) to ``op``, its last; ``None`` if not found."""
    if op.type == base:
        return [op]
    if depth == 0:
        return None
    for tensor in op.inputs:
        chain = _fused_chain(tensor.op, base, depth - 1)
        if chain is not None:
            return [*chain, op]
    return None


def _model_ops(graph: _Graph, name: str, kernel: str) -> list[tuple[str, str, str]]:
    """``(name, model op, requested device)`` for each op the user wrote that this kernel ran."""
    op, _ = graph.find(name)
    if op is None:
        return [(name, _base_type(kernel), "")]
    if _is_fused(kernel):
        chain = _fused_chain(op, _base_type(kernel))
        if chain is not None:
            return [(o.name, o.type, graph.asked(o)) for o in chain]
    return [(op.name, op.type, graph.asked(op))]


# ----------------------------------------------------------------------------- what Python saw: calls and graphs

@dataclass
class _Call:
    """One op or function call seen by the op callback (internal)."""

    name: str
    is_function: bool
    device: str  # where its outputs (or, with none, its first input) live
    requested: str  # the device scope it was called in


@dataclass
class _Recorder:
    """What :func:`capturing` records on the Python side while the block runs (internal)."""

    calls: list[_Call] = field(default_factory=list)
    graphs: dict[str, Any] = field(default_factory=dict)

    def on_op(self, op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None,
              graph: Any = None) -> None:
        """The op callback: records eager ops and function calls, ignores graph construction."""
        if graph is not None:
            return
        from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

        name = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
        values = list(outputs or ()) or list(inputs or ())
        device = getattr(values[0], "device", "") if values else ""
        self.calls.append(_Call(name, name in self.graphs, device or "", context.context().device_name or ""))


@contextlib.contextmanager
def _recording(recorder: _Recorder) -> Iterator[None]:
    """Records calls (an op callback) and the graph of every function called (internal)."""
    from tensorflow.python.eager.polymorphic_function import atomic_function  # noqa: PLC0415
    from tensorflow.python.framework import op_callbacks  # noqa: PLC0415 (lazy TensorFlow)

    original = atomic_function.AtomicFunction.call_flat

    def call_flat(function: Any, *args: Any) -> Any:
        name = function.name.decode()
        if name not in recorder.graphs:
            recorder.graphs[name] = function.graph
        return original(function, *args)

    atomic_function.AtomicFunction.call_flat = call_flat
    op_callbacks.add_op_callback(recorder.on_op)
    try:
        yield
    finally:
        op_callbacks.remove_op_callback(recorder.on_op)
        atomic_function.AtomicFunction.call_flat = original


# ----------------------------------------------------------------------------- building the report

@dataclass
class _Built:
    """The records of a report being built, and the timing origin (internal)."""

    ops: list[OpPlacement] = field(default_factory=list)
    copies: list[Transfer] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    graphs: list[tuple[str, Any]] = field(default_factory=list)
    spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _pair_calls(trace: _Trace, recorder: _Recorder) -> list[tuple[_Call | None, _Execution | None]]:
    """Matches the calls Python made with the executions the profiler saw, in call order."""
    queues: dict[tuple[str, bool], list[_Execution]] = {}
    for execution in reversed(trace.executions):
        queues.setdefault((execution.name, execution.is_function), []).append(execution)
    paired: list[tuple[_Call | None, _Execution | None]] = []
    for call in recorder.calls:
        queue = queues.get((call.name, call.is_function))
        paired.append((call, queue.pop() if queue else None))
    left = sorted((e for q in queues.values() for e in q if e.is_function), key=lambda e: e.start_ps)
    return paired + [(None, execution) for execution in left]


def build_report(trace: _Trace, recorder: _Recorder) -> PlacementReport:
    """Builds the report from the profiler's trace and the calls Python made (linear in the events)."""
    with _gc_paused():
        return _build_report(trace, recorder)


def _build_report(trace: _Trace, recorder: _Recorder) -> PlacementReport:
    by_context: dict[int, list[_Kernel]] = {}
    for kernel in trace.kernels:
        by_context.setdefault(kernel.context, []).append(kernel)
    paired = _pair_calls(trace, recorder)
    origin = min([k.start_ps for k in trace.kernels] + [e.start_ps for _, e in paired if e is not None] or [0])
    built = _Built()
    for index, (call, execution) in enumerate(paired):
        if execution is not None and execution.is_function and execution.contexts and not execution.xla:
            name = execution.name
            unplaced = [k for k in trace.unplaced
                        if execution.start_ps <= k.start_ps <= execution.start_ps + execution.duration_ps]
            _add_function(built, index, _Graph(recorder.graphs.get(name)), call,
                          _contexts(execution, trace.parents), by_context, origin, unplaced)
        elif execution is not None and execution.is_function or call is not None and call.is_function:
            _add_cluster(built, index, call, execution, recorder, origin)
        elif call is not None:
            _add_eager(built, index, call, execution, origin)
    busy = {device: round(union_length(spans) / 1e6, 3) for device, spans in sorted(built.spans.items())}
    return PlacementReport(tuple(built.ops), tuple(built.copies), tuple(built.collectives), tuple(built.graphs),
                           busy_us=busy, notes=tuple(built.notes))


def _contexts(execution: _Execution, parents: dict[int, int]) -> list[int]:
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


def _us(ps: int) -> float:
    return ps // 1000 / 1000  # nanosecond resolution


_LISTED = 20  # items an assertion message lists before "... N more"


def _listed(items: list[Any] | tuple[Any, ...], describe: Callable[[Any], str]) -> str:
    """``"a; b; ... 5 more"``: what an assertion message lists, at most :data:`_LISTED` items."""
    more = f"; ... {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return "; ".join(describe(item) for item in items[:_LISTED]) + more


def _where_ran(op: OpPlacement) -> str:
    return f"{op.name} ({_ran_as(op)}) on {op.device}"


def union_length(spans: Iterable[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` spans: the time at least one of them covers.

    >>> union_length([(0, 5), (3, 7), (10, 11)])
    8
    """
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def _context_devices(contexts: list[int], by_context: dict[int, list[_Kernel]]) -> dict[int, str]:
    """The device of each executor context, from the transfers it sent or received."""
    devices: dict[int, str] = {}
    owner = {k.name: c for c in contexts for k in by_context.get(c, ()) if k.kernel not in TRANSFER_OPS}
    recv_owner = {k.name: c for c in contexts for k in by_context.get(c, ()) if k.kernel in TRANSFER_OPS
                  and k.stats is None}
    for context in contexts:
        for kernel in by_context.get(context, ()):
            if kernel.stats is None:
                continue
            src, dst = _send_devices(kernel)
            devices.setdefault(context, src)
            receiver = recv_owner.get(_recv_name(kernel.name), owner.get(str(kernel.stats.get("to", ""))))
            if receiver is not None and dst:
                devices.setdefault(receiver, dst)
    return devices


def _recv_name(send: str) -> str:
    """The ``_Recv`` TensorFlow's partitioner pairs with a ``_Send`` ("x/_1" -> "x/_2")."""
    prefix, _, number = send.rpartition("/_")
    return f"{prefix}/_{int(number) + 1}" if number.isdigit() else ""


def _send_devices(kernel: _Kernel) -> tuple[str, str]:
    parts = str((kernel.stats or {}).get("key", "")).split(";")
    return (parts[0], parts[2]) if len(parts) >= 3 else ("", "")


def _fallback_device(kernels: list[_Kernel], graph: _Graph, call: _Call | None) -> str:
    """The device of a partition that copied nothing: the one its ops asked for, else the call's."""
    asked = set()
    for kernel in kernels:
        op = graph.op(kernel.name)
        device = graph.asked(op) if op is not None else ""
        if device:
            asked.add(device)
            if len(asked) > 1:
                break
    if len(asked) == 1:
        return asked.pop()
    if call is not None and call.device:
        return call.device
    return call.requested if call is not None and call.requested else "/device:CPU:0"


def _add_function(built: _Built, index: int, graph: _Graph, call: _Call | None, contexts: list[int],
                  by_context: dict[int, list[_Kernel]], origin: int, unplaced: list[_Kernel]) -> None:
    """Adds one function call's kernels; ``unplaced`` are those whose executor step the trace does not name."""
    devices = _context_devices(contexts, by_context)
    recvs = {k.name: (c, k) for c in contexts for k in by_context.get(c, ()) if k.kernel in TRANSFER_OPS
             and k.stats is None}
    for context in contexts:
        kernels = by_context.get(context, [])
        where = devices.get(context) or _fallback_device(kernels, graph, call)
        _add_kernels(built, index, graph, kernels, _location(where), recvs, origin)
    # Kernels of this call's graph only: other work (tf.data threads ...) may run during the call.
    mine = [k for k in unplaced if k.kernel not in PLUMBING
            and graph.find(str(k.stats.get("from", "")) if k.stats else k.name)[0] is not None]
    for kernel in mine:  # a _Send runs on the device its key names first
        if kernel.stats is not None:
            _add_kernels(built, index, graph, [kernel], _location(_send_devices(kernel)[0]), recvs, origin)
    unknown = [k for k in mine if k.kernel not in TRANSFER_OPS]
    if unknown:
        _add_kernels(built, index, graph, unknown, UNKNOWN_DEVICE, recvs, origin)
        names = sorted({k.name for k in unknown})
        built.notes.append(f"call {index}: the profiler's trace does not tie {len(unknown)} kernel(s) to an "
                           f"executor step ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}): "
                           f"reported on device {UNKNOWN_DEVICE!r}")
    if graph._graph is not None:  # serialized by the writer, which puts each node's executed device in
        built.graphs.append((f"call_{index:03d}", graph._graph))


def _add_kernels(built: _Built, index: int, graph: _Graph, kernels: list[_Kernel], device: str,
                 recvs: dict[str, tuple[int, _Kernel]], origin: int) -> None:
    """Adds the ops, transfers and collectives of kernels that ran on ``device``."""
    for kernel in kernels:
        if kernel.kernel in PLUMBING or (kernel.kernel in TRANSFER_OPS and kernel.stats is None):
            continue
        start, duration = _us(kernel.start_ps - origin), _us(kernel.duration_ps)
        if device != UNKNOWN_DEVICE:
            built.spans.setdefault(device, []).append((kernel.start_ps, kernel.start_ps + kernel.duration_ps))
        if kernel.stats is not None:
            built.copies.append(_transfer(kernel, graph, recvs, index, start, duration))
            continue
        for name, model_op, asked in _model_ops(graph, kernel.name, kernel.kernel):
            built.ops.append(OpPlacement(name, model_op, device, _requested(asked), index, kernel.kernel,
                                         kernel.name, start, duration))
        if _COLLECTIVE.match(kernel.kernel):
            op = graph.op(kernel.name)
            built.collectives.append(Collective(kernel.name, kernel.kernel, device, _attr(op, "merge_op"),
                                                _attr(op, "T"), index))


def _transfer(send: _Kernel, graph: _Graph, recvs: dict[str, tuple[int, _Kernel]], call: int,
              start: float, duration: float) -> Transfer:
    src, dst = _send_devices(send)
    stats = send.stats or {}
    source = str(stats.get("from", ""))
    consumer, prefix = graph.find(str(stats.get("to", "")))
    index = next((t.value_index for t in getattr(consumer, "inputs", ()) if prefix + t.op.name == source), 0)
    producer, _ = graph.find(source)
    outputs = producer.outputs if producer is not None else ()
    value = outputs[index] if index < len(outputs) else None
    tensor = f"{producer.name if producer is not None else source}:{index}"
    dtype = value.dtype.name if value is not None else ""
    shape = None
    if value is not None and value.shape.rank is not None:
        shape = tuple(-1 if d is None else d for d in value.shape.as_list())
    size = None
    if shape is not None and all(d >= 0 for d in shape) and dtype in _DTYPE_BYTES:
        size = _DTYPE_BYTES[dtype] * math.prod(shape)
    recv = _recv_name(send.name)
    return Transfer(_location(src), _location(dst), tensor, dtype, shape, size, send.name,
                    recv if recv in recvs else "", call, start, duration)


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


def _add_cluster(built: _Built, index: int, call: _Call | None, execution: _Execution | None,
                 recorder: _Recorder, origin: int) -> None:
    """A function XLA compiled into one executable: its ops ran together on the call's device."""
    name = execution.name if execution is not None else call.name if call is not None else ""
    graph = recorder.graphs.get(name)
    device = _location((call.device or call.requested) if call is not None else "") if call else "?"
    start = _us(execution.start_ps - origin) if execution is not None else None
    duration = _us(execution.duration_ps) if execution is not None else None
    if execution is not None:
        built.spans.setdefault(device, []).append((execution.start_ps, execution.start_ps + execution.duration_ps))
    ops = [op for op in graph.get_operations() if op.type not in _GRAPH_PLUMBING] if graph is not None else []
    for op in ops:
        built.ops.append(OpPlacement(op.name, op.type, device, _requested(op.device), index, XLA_CLUSTER, name,
                                     start, duration))
    if not ops:
        built.ops.append(OpPlacement(name, XLA_CLUSTER, device, "", index, XLA_CLUSTER, name, start, duration))


def _add_eager(built: _Built, index: int, call: _Call, execution: _Execution | None, origin: int) -> None:
    device = _location(call.device or call.requested)
    start = _us(execution.start_ps - origin) if execution is not None else None
    duration = _us(execution.duration_ps) if execution is not None else None
    if execution is not None:
        built.spans.setdefault(device, []).append((execution.start_ps, execution.start_ps + execution.duration_ps))
    if call.name in PLUMBING:
        return
    built.ops.append(OpPlacement(call.name, call.name, device, _requested(call.requested), index, call.name,
                                 call.name, start, duration))
    if _COLLECTIVE.match(call.name):
        built.collectives.append(Collective(call.name, call.name, device, "", "", index))




def _requested(device: str) -> str:
    return _location(device) if device else ""


# ----------------------------------------------------------------------------- capture

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


def _flat(record: Any) -> dict[str, Any]:
    """``dataclasses.asdict`` for a record of plain fields, without its deep copies (reports hold 10^4 ops)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


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
