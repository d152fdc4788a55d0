"""Placement verification: where every op really ran.

:func:`capture` runs a function once with TensorFlow's run metadata switched on
and reads the partition graphs TensorFlow actually executed (not the devices
that were requested). The result is a frozen :class:`PlacementReport`: every
executed op with its requested and assigned device, every cross-device
transfer (``_Send``/``_Recv`` pairs, matched into ``src -> dst`` with the tensor
and its size where the shape is known), the collective ops, and checks that
read as sentences.

>>> import tensorflow as tf
>>> import tfdevices.verify as placement
>>> @tf.function
... def step(x):
...     with tf.device("/CPU:0"):
...         return tf.reduce_sum(x * 2.0)
>>> report = placement.capture(step, tf.ones([4]))
>>> report.assert_on("CPU:0", ops="*")
>>> report.transfers()
()

TensorFlow compiles each function (and each eager op) once and caches the
result; the executed graphs are reported when a function is compiled. So that
every call inside a capture is reported, capture clears TensorFlow's kernel
cache first: functions are recompiled (not retraced) once.

Device names in reports are TensorFlow's short names, ``"CPU:1"``, ``"GPU:0"``,
prefixed with the task (``"worker:1/GPU:0"``) when the device belongs to a job
other than the local one.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import re
import threading
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
    "VariableRead", "capture", "capturing",
]

#: Function plumbing, not computation: left out of ``report.ops``.
PLUMBING = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval", "NoOp"})
#: Transfer ops: reported as :class:`Transfer`, not as ops.
TRANSFER_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
_COLLECTIVE = re.compile(r"^_?(Collective|Nccl)")
_EDGE_PREFIX = re.compile(r"^edge_\d+_")
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

    Attributes:
        name: the op's name in the executed graph (``"sequential/dense_2/MatMul"``).
        type: the op type (``"MatMul"``).
        device: where it ran: ``"CPU:1"``, or ``"worker:1/GPU:0"`` on another job's task.
        requested: the device the program asked for (``""`` when none or unknown).
        call: index of the compiled function (or eager op) it belongs to, in capture order.
    """

    name: str
    type: str
    device: str
    requested: str = ""
    call: int = 0


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
        recv_op: the ``_Recv`` op's name (``""`` when the receiver is the client).
        call: index of the compiled function it belongs to.
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
    """Matches op names by glob at any scope boundary: "dense_2/*" matches "model/dense_2/MatMul"."""
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise InputError(f"ops={pattern!r}: expected a glob pattern or a list of them.",
                         hint="e.g. ops='dense_2/*' or ops=['*MatMul*', '*BiasAdd*'].")

    def matches(name: str) -> bool:
        parts = name.split("/")
        suffixes = ["/".join(parts[i:]) for i in range(len(parts))]
        return any(fnmatch.fnmatchcase(s, p) for p in patterns for s in suffixes)
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
        graphs: the executed partition graphs as ``(namespace, serialized GraphDef)``,
            one namespace per compiled function; what ``tfdevices.tensorboard`` writes.
    """

    ops: tuple[OpPlacement, ...]
    copies: tuple[Transfer, ...] = ()
    collectives: tuple[Collective, ...] = ()
    graphs: tuple[tuple[str, bytes], ...] = field(default=(), repr=False, compare=False)

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
            ops: glob pattern(s) on op names, matched at any scope boundary
                (``"dense_2/*"`` matches ``"model/dense_2/MatMul"``).
            types: only ops of these types (``["MatMul"]``), or ``None`` for all.

        Raises:
            PlacementAssertionError: an op ran elsewhere, or no executed op matches.
            SpecError: ``device`` is a physical GPU index or not a device name.
            InputError: ``ops`` is not a pattern.
        """
        on, selected = _device_matcher(device), self._select(ops, types)
        offenders = [op for op in selected if not on(op.device)]
        if offenders:
            where = Counter(op.device for op in offenders)
            listing = "; ".join(f"{op.name} ({op.type}) on {op.device}" for op in offenders[:20])
            more = f"; ... {len(offenders) - 20} more" if len(offenders) > 20 else ""
            raise PlacementAssertionError(
                f"expected ops matching {ops!r} on {device}, but {len(offenders)} of {len(selected)} ran "
                f"elsewhere ({', '.join(f'{d}: {n}' for d, n in sorted(where.items()))}): {listing}{more}.",
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
            listing = "; ".join(t.describe() for t in found[:20])
            more = f"; ... {len(found) - 20} more" if len(found) > 20 else ""
            raise PlacementAssertionError(
                f"expected no cross-device transfers{scope}, but {len(found)} ran "
                f"({format_bytes(_total(found))} where known): {listing}{more}.",
                hint="keep each op on the device of its inputs and variables (report.variables_on() "
                     "shows weights read from another device).")

    def _select(self, ops: str | Iterable[str], types: Iterable[str] | None) -> list[OpPlacement]:
        named = _name_matcher(ops)
        wanted = None if types is None else set([types] if isinstance(types, str) else types)
        selected = [op for op in self.ops if named(op.name) and (wanted is None or op.type in wanted)]
        if not selected:
            sample = ", ".join(sorted({op.name for op in self.ops})[:8]) or "none"
            raise PlacementAssertionError(
                f"expected ops matching {ops!r}{'' if types is None else f' of types {sorted(wanted)}'} "
                f"to check, but none of the {len(self.ops)} executed ops matches; they include: {sample}.",
                hint="check the pattern against report.ops (names are matched at scope boundaries).")
        return selected

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
        kinds = Counter(c.type for c in self.collectives)
        lines.append(f"{len(self.collectives)} collective(s)" + (
            ": " + ", ".join(f"{t}: {n}" for t, n in sorted(kinds.items())) if kinds else ""))
        crossing = [r for r in self.variables_on() if r.crosses_devices]
        if crossing:
            lines.append(f"{len(crossing)} variable read(s) copied to another device every call")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """Markdown tables: ops per device (with the commonest types), transfers, collectives."""
        out = ["| device | ops | commonest op types |", "|---|---:|---|"]
        for device, n in self.op_counts.items():
            types = Counter(op.type for op in self.ops if op.device == device).most_common(4)
            out.append(f"| {device} | {n} | {', '.join(f'{t} ({c})' for t, c in types)} |")
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
            "ops": [_flat(op) for op in self.ops],
            "transfers": [asdict(t) for t in self.copies],  # shapes are tuples: asdict copies them
            "collectives": [_flat(c) for c in self.collectives],
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
                collectives=tuple(Collective(**c) for c in data["collectives"]))
        except (ValueError, KeyError, TypeError) as err:
            raise InputError(f"not a placement report in JSON ({err}): {text[:80]!r}",
                             hint="pass the output of PlacementReport.to_json().") from None


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


# ----------------------------------------------------------------------------- reading run metadata

def report_from_run_metadata(metadata: Any) -> PlacementReport:
    """Builds a report from a ``RunMetadata`` proto (what :func:`capture` does after running).

    Args:
        metadata: a ``tensorflow.RunMetadata`` with ``function_graphs`` or ``partition_graphs``.

    Returns:
        The report; one ``call`` per function graph.
    """
    calls = [(list(fg.partition_graphs), fg.pre_optimization_graph, fg.post_optimization_graph)
             for fg in metadata.function_graphs]
    if not calls and len(metadata.partition_graphs):
        calls = [(list(metadata.partition_graphs), None, None)]
    ops: list[OpPlacement] = []
    copies: list[Transfer] = []
    collectives: list[Collective] = []
    graphs: list[tuple[str, bytes]] = []
    calls = [call for call in calls  # drop calls of nothing but plumbing (the NoOp that flushes the metadata)
             if not all(node.op in PLUMBING for partition in call[0] for node in partition.node)]
    for index, (partitions, pre, post) in enumerate(calls):
        requested = {n.name: n.device for n in pre.node} if pre is not None else {}
        sends: dict[tuple[str, str, str], Any] = {}
        recvs: list[Any] = []
        for partition in partitions:
            for node in partition.node:
                if node.op in PLUMBING:
                    continue
                if node.op in TRANSFER_OPS:
                    (sends.__setitem__(_transfer_key(node), node) if node.op.endswith("Send")
                     else recvs.append(node))
                    continue
                device = _location(node.device)
                ops.append(OpPlacement(node.name, node.op, device, _requested(requested.get(node.name, "")), index))
                if _COLLECTIVE.match(node.op):
                    collectives.append(Collective(
                        node.name, node.op, device, _attr_s(node, "merge_op"), _attr_dtype(node, "T"), index))
        if sends or recvs:  # shapes cost a graph import: only for calls that copy tensors
            copies += _match_transfers(sends, recvs, _infer_shapes(post), index)
        namespace = f"call_{index:03d}"
        graphs += [(namespace, p.SerializeToString()) for p in partitions]
    return PlacementReport(tuple(ops), tuple(copies), tuple(collectives), tuple(graphs))


def _requested(device: str) -> str:
    return _location(device) if device else ""


def _transfer_key(node: Any) -> tuple[str, str, str]:
    return (node.attr["tensor_name"].s.decode(), node.attr["send_device"].s.decode(),
            node.attr["recv_device"].s.decode())


def _match_transfers(sends: dict[tuple[str, str, str], Any], recvs: list[Any],
                     shapes: dict[str, tuple[int, ...] | None], call: int) -> list[Transfer]:
    out = []
    matched = set()
    for recv in recvs:
        key = _transfer_key(recv)
        send = sends.get(key)
        matched.add(key)
        out.append(_transfer(key, send, recv, shapes, call))
    out += [_transfer(key, send, None, shapes, call) for key, send in sends.items() if key not in matched]
    return out


def _transfer(key: tuple[str, str, str], send: Any, recv: Any,
              shapes: dict[str, tuple[int, ...] | None], call: int) -> Transfer:
    tensor_name, src, dst = key
    source = send.input[0] if send is not None and send.input else _EDGE_PREFIX.sub("", tensor_name)
    tensor = source if ":" in source else f"{source}:0"
    dtype = _attr_dtype(send, "T") if send is not None else _attr_dtype(recv, "tensor_type")
    shape = shapes.get(tensor)
    size = None
    if shape is not None and all(d >= 0 for d in shape) and dtype in _DTYPE_BYTES:
        size = _DTYPE_BYTES[dtype]
        for d in shape:
            size *= d
    return Transfer(_location(src), _location(dst), tensor, dtype, shape, size,
                    send.name if send is not None else "", recv.name if recv is not None else "", call)


def _attr_s(node: Any, name: str) -> str:
    return node.attr[name].s.decode() if name in node.attr else ""


def _attr_dtype(node: Any, name: str) -> str:
    if node is None or name not in node.attr:
        return ""
    from tensorflow.python.framework import dtypes  # noqa: PLC0415 (lazy TensorFlow)

    try:
        return dtypes.as_dtype(node.attr[name].type).name
    except TypeError:
        return ""


def _infer_shapes(graph_def: Any) -> dict[str, tuple[int, ...] | None]:
    """Output shapes by tensor name ("op:0"), by importing the optimized graph; empty if that fails."""
    if graph_def is None or not len(graph_def.node):
        return {}
    tf = import_tf()
    stripped = tf.compat.v1.GraphDef()
    stripped.CopyFrom(graph_def)
    for node in stripped.node:
        node.device = ""
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(stripped, name="")
    except Exception:  # noqa: BLE001 -- an op this build cannot import: sizes stay unknown
        return {}
    shapes: dict[str, tuple[int, ...] | None] = {}
    for op in graph.get_operations():
        for out in op.outputs:
            dims = out.shape.as_list() if out.shape.rank is not None else None
            shapes[out.name] = None if dims is None else tuple(-1 if d is None else d for d in dims)
    return shapes


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
def capturing() -> Iterator[Capture]:
    """Captures the placement of everything TensorFlow runs inside the block.

    Clears TensorFlow's kernel cache on entry, so functions compiled earlier are
    compiled again (not retraced) and reported. Eager ops are reported too; copies
    of eager tensors between devices are not ops and do not show.

    Yields:
        A :class:`Capture`; its ``report`` is ready when the block ends (even if it raised).

    Raises:
        InputError: a capture is already running in this process.

    >>> import tensorflow as tf
    >>> from tfdevices.verify import capturing
    >>> with capturing() as cap:
    ...     with tf.device("/CPU:0"):
    ...         y = tf.constant([1.0, 2.0]) * 3.0
    >>> "CPU:0" in cap.report.op_counts
    True
    """
    global _active
    tf = import_tf()
    from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

    with _lock:
        if _active:
            raise InputError("a placement capture is already running in this process; captures do not nest.",
                             hint="end the outer 'with capturing()' block (or capture()) first.")
        _active = True
    ctx = context.context()
    cap = Capture()
    try:
        ctx.ensure_initialized()
        ctx.clear_kernel_cache()
        ctx.enable_run_metadata()
        ctx.export_run_metadata()  # drop anything recorded before this capture
        try:
            yield cap
        finally:
            # Graphs of a call that raised reach the metadata only when the next kernel runs.
            tf.raw_ops.NoOp()
            metadata = ctx.export_run_metadata()
            ctx.disable_run_metadata()
            cap._report = report_from_run_metadata(metadata)
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
