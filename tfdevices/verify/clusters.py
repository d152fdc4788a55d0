"""XLA clusters as units: each cluster's ops listed under it, its time counted once; time by op type.

The ops XLA compiled together run as one executable: a CPU capture of a
``jit_compile=True`` function gives each of the cluster's ops the cluster's whole time
(one record per op, all naming the cluster as ``kernel_name`` with ``kernel``
:data:`~tfdevices.verify.XLA_CLUSTER`), and a GPU profile gives each op a fusion came from
that fusion's time (:mod:`tfdevices.verify.xla`). Their times are one run's, shared, not
each op's: :func:`cluster_runs` counts each run once (the union of the distinct runs' spans),
:func:`fusion_times` each instruction's kernels once, and :func:`type_times` splits each
kernel's time evenly among the ops it ran, so that a device's op types add up to its kernels'
time.

>>> from tfdevices.verify import OpPlacement
>>> ops = [OpPlacement(n, t, "CPU:0", "", 0, "XlaCluster", "step", 0.0, 347.0) for n, t in [("a", "A"), ("b", "B")]]
>>> cluster_runs(ops)["step"]
ClusterRun(device='CPU:0', ops=('a', 'b'), runs=1, us=347.0)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tfdevices.core.tables import Column, Table
from tfdevices.verify.records import XLA_CLUSTER, OpPlacement, XlaOpPlacement, union_length

_LISTED = 8  # op names a table row lists before "... N more"
_TOP = 10  # rows of the fusion and op-type tables


@dataclass(frozen=True)
class ClusterRun:
    """One XLA cluster (a CPU capture's ``jit_compile`` function, a GPU profile's module) as one unit.

    Attributes:
        device: where it ran.
        ops: the distinct names of the ops compiled into it, in the order first seen.
        runs: its distinct runs (on a GPU: its fusions' kernel runs).
        us: its time, each run counted once (``None`` when untimed).
    """

    device: str
    ops: tuple[str, ...]
    runs: int
    us: float | None


def cluster_runs(ops: Iterable[OpPlacement]) -> dict[str, ClusterRun]:
    """Each XLA cluster of ``ops``, by its name (``kernel_name``), sorted by name."""
    names: dict[str, dict[str, None]] = {}
    device: dict[str, str] = {}
    spans: dict[str, set[tuple[int, float | None, float | None]]] = {}
    for op in ops:
        if op.kernel != XLA_CLUSTER:
            continue
        names.setdefault(op.kernel_name, {})[op.name] = None
        device.setdefault(op.kernel_name, op.device)
        spans.setdefault(op.kernel_name, set()).add((op.call, op.start_us, op.duration_us))
    out = {}
    for name in sorted(names):
        timed = [(s, s + d) for _, s, d in spans[name] if s is not None and d is not None]
        us = round(union_length(timed), 3) if timed else None
        out[name] = ClusterRun(device[name], tuple(names[name]), len(spans[name]), us)
    return out


@dataclass(frozen=True)
class FusionTime:
    """One instruction of an XLA module read from a GPU profile (a fusion, a library call): its kernels' time.

    Attributes:
        device: where it ran.
        module: its module.
        fusion: the instruction.
        graph: the command buffer its kernels ran in (``""`` outside one).
        runs: its kernel runs.
        us: their time, each kernel run counted once.
        types: the op types it came from, in the order first seen.
    """

    device: str
    module: str
    fusion: str
    graph: str
    runs: int
    us: float
    types: tuple[str, ...]


def _kernel_key(op: OpPlacement) -> tuple[str, int, str, str, float | None]:
    """One kernel run: the ops a fused kernel (an XLA instruction's kernel) ran share it."""
    return (op.device, op.call, op.kernel, op.kernel_name or op.name, op.start_us)


def fusion_times(ops: Iterable[OpPlacement]) -> list[FusionTime]:
    """Each XLA instruction of a GPU profile's modules with its kernels' time, the longest first."""
    runs: dict[tuple[str, str, str], dict[tuple[Any, ...], float]] = {}
    about: dict[tuple[str, str, str], tuple[str, dict[str, None]]] = {}
    for op in ops:
        if not isinstance(op, XlaOpPlacement) or not op.fusion or op.duration_us is None:
            continue
        key = (op.device, op.kernel_name, op.fusion)
        runs.setdefault(key, {})[_kernel_key(op)] = op.duration_us
        about.setdefault(key, (op.graph, {}))[1][op.type] = None
    out = [
        FusionTime(*key, about[key][0], len(spans), round(sum(spans.values()), 3), tuple(about[key][1]))
        for key, spans in runs.items()
    ]
    return sorted(out, key=lambda f: (-f.us, f.device, f.module, f.fusion))


def type_times(ops: Iterable[OpPlacement]) -> dict[str, dict[str, float]]:
    """Each device's time by op type: every kernel run counted once, its time split evenly among the ops it ran.

    >>> from tfdevices.verify import OpPlacement
    >>> ops = [OpPlacement("a", "MatMul", "GPU:0", kernel="k", start_us=0.0, duration_us=6.0),
    ...        OpPlacement("b", "Relu", "GPU:0", kernel="k", kernel_name="a", start_us=0.0, duration_us=6.0)]
    >>> type_times(ops)
    {'GPU:0': {'MatMul': 3.0, 'Relu': 3.0}}
    """
    kernels: dict[tuple[str, int, str, str, float | None], list[OpPlacement]] = {}
    for op in ops:
        if op.duration_us is not None:
            kernels.setdefault(_kernel_key(op), []).append(op)
    out: dict[str, dict[str, float]] = {}
    for members in kernels.values():
        share = (members[0].duration_us or 0.0) / len(members)
        for op in members:
            mine = out.setdefault(op.device, {})
            mine[op.type] = mine.get(op.type, 0.0) + share
    return {
        device: dict(sorted(((t, round(us, 3)) for t, us in times.items()), key=lambda item: (-item[1], item[0])))
        for device, times in sorted(out.items())
    }


def cluster_tables(ops: Iterable[OpPlacement], busy_us: dict[str, float] | None = None) -> list[Table]:
    """The clusters (runs, time counted once, share of their device's busy time, ops) and, from a GPU profile,
    the instructions that took the most time; ``[]`` for none.
    """
    ops = list(ops)
    clusters = cluster_runs(ops)
    if not clusters:
        return []
    busy = busy_us or {}
    rows = []
    for name, c in clusters.items():
        listed = ", ".join(c.ops[:_LISTED]) + (f", ... {len(c.ops) - _LISTED} more" if len(c.ops) > _LISTED else "")
        time = "?" if c.us is None else f"{c.us:.0f} us"
        rows.append((name, c.device, str(c.runs), time, _share(c.us, busy.get(c.device)), f"{len(c.ops)}: {listed}"))
    columns = (
        Column("cluster"),
        Column("device"),
        Column("runs", right=True),
        Column("time", right=True),
        Column("of the device's busy time", right=True),
        Column("ops"),
    )
    kernel_time = {device: sum(times.values()) for device, times in type_times(ops).items()}
    return [Table(f"XLA clusters: {len(clusters)}", columns, tuple(rows))] + _fusion_tables(
        fusion_times(ops), kernel_time
    )


def _fusion_tables(fusions: list[FusionTime], kernel_time: dict[str, float]) -> list[Table]:
    if not fusions:
        return []
    rows = []
    for f in fusions[:_TOP]:
        types = ", ".join(f.types[:_LISTED]) + (", ..." if len(f.types) > _LISTED else "")
        share = _share(f.us, kernel_time.get(f.device))
        rows.append((f.module, f.fusion, f.device, f.graph or "-", str(f.runs), f"{f.us:.0f} us", share, types))
    columns = (
        Column("module"),
        Column("instruction", code=True),
        Column("device"),
        Column("command buffer"),
        Column("runs", right=True),
        Column("time", right=True),
        Column("of the device's kernel time", right=True),
        Column("op types"),
    )
    title = f"XLA instructions by time: the {min(_TOP, len(fusions))} longest of {len(fusions)}"
    return [Table(title, columns, tuple(rows))]


def type_tables(ops: Iterable[OpPlacement]) -> list[Table]:
    """Each GPU's op types that took the most time (:func:`type_times`), each with its share of the GPU's kernel
    time (the kernel runs' time summed); ``[]`` without GPU times.
    """
    times = {d: t for d, t in type_times(ops).items() if d.rsplit("/", 1)[-1].startswith("GPU:")}
    if not times:
        return []
    rows = []
    for device, by_type in times.items():
        total = sum(by_type.values())
        rows += [(device, op_type, f"{us:.0f} us", _share(us, total)) for op_type, us in list(by_type.items())[:_TOP]]
    columns = (
        Column("device"),
        Column("op type"),
        Column("time", right=True),
        Column("of the device's kernel time", right=True),
    )
    note = "(each kernel run counted once, its time split evenly among the ops it ran)"
    return [Table("GPU time by op type", columns, tuple(rows), note)]


def _share(us: float | None, busy: float | None) -> str:
    return "?" if us is None or not busy else f"{100 * us / busy:.1f}%"
