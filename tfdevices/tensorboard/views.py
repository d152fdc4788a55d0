"""What the Placement dashboard shows, computed from a stored report (pure, TensorBoard-free).

Every function here takes the report as the plain ``dict`` that
``json.loads(PlacementReport.to_json())`` gives, so a report written by an older
or newer tfdevices still reads: fields a report lacks (op and transfer times, the
kernel of each op, busy time per device) are left out of the view, never guessed.

>>> report = {"ops": [{"name": "m/d/MatMul", "type": "MatMul", "device": "CPU:1", "requested": "CPU:1"}],
...           "transfers": [], "collectives": []}
>>> [d["name"] for d in device_table(report)]
['CPU:1']
>>> [node[0] for node in scope_tree(report)["nodes"]]
['m', 'd', 'MatMul']
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tfdevices.tensorboard.report_reading import (
    PreparedReport,
    Report,
    busy_us,
    devices_of,
    is_timed,
    prepare_report,
    report_ops,
    report_transfers,
)
from tfdevices.verify.records import XLA_CLUSTER, union_length

__all__ = [
    "busy_us",
    "device_table",
    "diff_view",
    "dashboard_view",
    "scope_tree",
    "timeline",
    "transfer_matrix",
    "critical_path",
    "weight_reads",
    "xla_runs",
    "xla_table",
]

# ----------------------------------------------------------------------------- the views


def device_table(
    report: Report, memory: dict[str, dict[str, float]] | None = None, *, prepared: PreparedReport | None = None
) -> list[dict[str, Any]]:
    """One row per device: model ops, kernels, busy time, transfers in and out, memory.

    Args:
        report: the stored report.
        memory: ``{device: {"current_bytes": .., "peak_bytes": ..}}`` logged beside it, if any.
        prepared: the report's indexes already built for another view of it (built here by default).

    Returns:
        Rows sorted by device name; ``busy_us`` and ``memory`` are ``None`` when not recorded.
    """
    prep = prepared or prepare_report(report)
    busy = prep.busy
    types: defaultdict[str, Counter[str]] = defaultdict(Counter)
    kernels: defaultdict[str, Counter[str]] = defaultdict(Counter)
    seen: set[tuple[Any, ...]] = set()
    for op, key in zip(prep.ops, prep.kernel_keys):
        device = op.get("device", "?")
        types[device][op.get("type", "?")] += 1
        if key not in seen:
            seen.add(key)
            kernels[device][op.get("kernel") or op.get("type") or "?"] += 1
    transfers_in: Counter[str] = Counter()
    transfers_out: Counter[str] = Counter()
    for t in prep.transfers:
        transfers_out[t.get("src", "?")] += 1
        transfers_in[t.get("dst", "?")] += 1
    rows = []
    for device in prep.devices:
        rows.append(
            {
                "name": device,
                "ops": sum(types.get(device, Counter()).values()),
                "op_types": types.get(device, Counter()).most_common(6),
                "kernels": sum(kernels.get(device, Counter()).values()),
                "kernel_types": kernels.get(device, Counter()).most_common(6),
                "busy_us": busy.get(device),
                "transfers_in": transfers_in[device],
                "transfers_out": transfers_out[device],
                "memory": _memory_of(memory or {}, device),
            }
        )
    return rows


def transfer_matrix(report: Report, *, prepared: PreparedReport | None = None) -> dict[str, Any]:
    """Source x destination: count, bytes and time of the transfers, each cell with its tensors.

    Returns:
        ``{"devices": [...], "cells": [{"src", "dst", "count", "bytes", "unknown_bytes", "us", "tensors"}]}``;
        ``us`` is ``None`` when no transfer in the cell was timed.
    """
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for t in report_transfers(report):
        key = (t.get("src", "?"), t.get("dst", "?"))
        cell = cells.setdefault(
            key, {"src": key[0], "dst": key[1], "count": 0, "bytes": 0, "unknown_bytes": 0, "us": None, "tensors": []}
        )
        cell["count"] += 1
        if t.get("bytes") is None:
            cell["unknown_bytes"] += 1
        else:
            cell["bytes"] += int(t["bytes"])
        if is_timed(t):
            cell["us"] = (cell["us"] or 0.0) + float(t["duration_us"])
        cell["tensors"].append(
            {
                "tensor": t.get("tensor", "?"),
                "dtype": t.get("dtype", ""),
                "shape": t.get("shape"),
                "bytes": t.get("bytes"),
                "us": float(t["duration_us"]) if is_timed(t) else None,
            }
        )
    return {"devices": prepared.devices if prepared else devices_of(report), "cells": [cells[k] for k in sorted(cells)]}


@dataclass
class _Tree:
    """The scope tree while it is built: parallel lists indexed by node id (parents before children)."""

    names: list[str] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    children: list[list[int]] = field(default_factory=list)
    own: list[list[int]] = field(default_factory=list)
    roots: list[int] = field(default_factory=list)

    def add(self, name: str, parent: int) -> int:
        node = len(self.names)
        self.names.append(name)
        self.parents.append(parent)
        self.children.append([])
        self.own.append([])
        (self.children[parent] if parent >= 0 else self.roots).append(node)
        return node


def _grow(ops: list[dict[str, Any]]) -> tuple[_Tree, list[int]]:
    """The name-scope tree of ``ops`` and the node of each op (an op's node is its full name)."""
    tree = _Tree()
    ids: dict[str, int] = {}

    def node_of(path: str) -> int:
        node = ids.get(path)
        if node is None:  # new: make its scope first (ops share scopes, so this walks up a step or two)
            scope, _, name = path.rpartition("/")
            node = ids[path] = tree.add(name, node_of(scope) if scope else -1)
        return node

    nodes = []
    for i, op in enumerate(ops):
        node = node_of(str(op.get("name", "?")))
        tree.own[node].append(i)
        nodes.append(node)
    return tree, nodes


def _indices(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def scope_tree(report: Report, *, prepared: PreparedReport | None = None) -> dict[str, Any]:
    """The name scopes (layers) of the run: device asked for and device run on, mismatches first.

    A node is a mismatch when its ops asked for devices and some of them ran elsewhere
    (for example a layer asked for ``CPU:1`` whose weights are still read on ``CPU:0``).
    A node's time is the time of its kernels, a fused kernel's split evenly among its ops.
    Flat and compact, for 10^4 ops: nodes in display order (depth first; among siblings
    mismatches first, scopes before ops, then by name), each naming its parent; eight or
    more sibling ops numbered alike (``Assign``, ``Assign_1`` ...) sit under one ``Assign_*`` node.

    Returns:
        ``{"devices": [...], "nodes": [[name, parent, ops, asked, ran, mismatch, busy_us, op]], "node_of_op"}``:
        ``asked``/``ran`` are indices into ``devices``; ``op`` is ``None`` for a scope, else
        ``[type, kernel ("" when it is the type), device index, requested, duration_us, repeats]``;
        ``node_of_op[i]`` is op i's node.
    """
    prep = prepared or prepare_report(report)
    index = {d: i for i, d in enumerate(prep.devices)}
    tree, node_of = _grow(prep.ops)
    totals = _scope_totals(tree, prep, index)
    masks: dict[int, list[int]] = {}

    def devices_in(mask: int) -> list[int]:
        return masks[mask] if mask in masks else masks.setdefault(mask, _indices(mask))

    nodes: list[list[Any]] = []
    new_id = [0] * len(tree.names)
    stack: list[tuple[Any, int]] = [(item, -1) for item in reversed(_arrange(tree, tree.roots, totals.mismatch))]
    while stack:
        item, parent = stack.pop()
        here = len(nodes)
        members = item.members if isinstance(item, _Series) else [item]
        a = r = 0
        for k in members:
            a, r = a | totals.asked[k], r | totals.ran[k]
        times = [totals.busy[k] for k in members if totals.busy[k] is not None]
        name = f"{item.base}_*" if isinstance(item, _Series) else tree.names[item]
        cell = None if isinstance(item, _Series) else _op_cell(prep.ops, tree.own[item], index)
        count = sum(totals.count[k] for k in members)
        mismatch = any(totals.mismatch[k] for k in members)
        nodes.append([name, parent, count, devices_in(a), devices_in(r), mismatch, sum(times) if times else None, cell])
        if isinstance(item, _Series):
            stack += [(k, here) for k in reversed(members)]
            continue
        new_id[item] = here
        stack += [(kid, here) for kid in reversed(_arrange(tree, tree.children[item], totals.mismatch))]
    return {"devices": prep.devices, "nodes": nodes, "node_of_op": [new_id[k] for k in node_of]}


@dataclass
class _Totals:
    """Each scope node's devices asked for and run on (bit masks), op count, time and mismatch (internal)."""

    asked: list[int]
    ran: list[int]
    count: list[int]
    busy: list[float | None]
    mismatch: list[bool]


def _scope_totals(tree: _Tree, prep: PreparedReport, index: dict[str, int]) -> _Totals:
    """Each node's totals, its ops' and its children's (a fused kernel's time split evenly among its ops)."""
    ops, keys, timed = prep.ops, prep.kernel_keys, prep.timed
    shares = Counter(k for k, t in zip(keys, timed) if t)
    n = len(tree.names)
    totals = _Totals([0] * n, [0] * n, [0] * n, [None] * n, [])
    for node in range(n - 1, -1, -1):  # children have larger ids: they are done first
        for i in tree.own[node]:
            op = ops[i]
            totals.ran[node] |= 1 << index[op.get("device", "?")]
            if op.get("requested") in index:
                totals.asked[node] |= 1 << index[op["requested"]]
            totals.count[node] += 1
            if timed[i]:
                totals.busy[node] = (totals.busy[node] or 0.0) + float(op["duration_us"]) / shares[keys[i]]
        parent = tree.parents[node]
        if parent >= 0:
            totals.asked[parent] |= totals.asked[node]
            totals.ran[parent] |= totals.ran[node]
            totals.count[parent] += totals.count[node]
            spent = totals.busy[node]
            if spent is not None:
                totals.busy[parent] = (totals.busy[parent] or 0.0) + spent
    totals.mismatch = [bool(totals.asked[k]) and bool(totals.ran[k] & ~totals.asked[k]) for k in range(n)]
    return totals


@dataclass(frozen=True)
class _Series:
    """Sibling ops named ``base``, ``base_1``, ``base_2`` ...: one collapsible row (``base_*``)."""

    base: str
    members: list[int]


_NUMBERED = re.compile(r"^(.*?)(?:_\d+)?$")
_SERIES_MIN = 8


def _arrange(tree: _Tree, kids: list[int], mismatch: list[bool]) -> list[Any]:
    """Siblings in display order: mismatches first, scopes before ops, then by name; long series of
    numbered ops (``AssignSubVariableOp_1`` ... ``_999``) as one :class:`_Series`.
    """
    if len(kids) < 2:
        return list(kids)
    series: dict[str, list[int]] = defaultdict(list)
    for k in kids:
        if not tree.children[k]:
            series[_NUMBERED.sub(r"\1", tree.names[k])].append(k)
    grouped = {k for members in series.values() if len(members) >= _SERIES_MIN for k in members}
    items: list[tuple[tuple[bool, bool, str], Any]] = [
        ((not mismatch[k], not tree.children[k], tree.names[k]), k) for k in kids if k not in grouped
    ]
    for base, members in series.items():
        if len(members) >= _SERIES_MIN:
            members.sort(key=lambda k: (not mismatch[k], tree.names[k]))
            items.append(((not any(mismatch[k] for k in members), True, base), _Series(base, members)))
    items.sort(key=lambda pair: pair[0])
    return [item for _, item in items]


def _op_cell(ops: list[dict[str, Any]], own: list[int], index: dict[str, int]) -> list[Any] | None:
    if not own:
        return None
    op = ops[own[0]]
    kernel = op.get("kernel", "")
    return [
        op.get("type", "?"),
        "" if kernel == op.get("type") else kernel,
        index[op.get("device", "?")],
        op.get("requested", ""),
        float(op["duration_us"]) if is_timed(op) else None,
        len(own),
    ]


def weight_reads(report: Report) -> list[dict[str, Any]]:
    """Variable reads whose value is copied to another device on every call, with what each copy costs.

    Returns:
        One row per crossing read ``{"op", "stored_on", "read_on", "bytes", "us"}``, largest first.
    """
    sent: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for t in report_transfers(report):
        sent.setdefault((int(t.get("call", 0)), str(t.get("tensor", "")).rsplit(":", 1)[0]), []).append(t)
    rows = []
    for op in report_ops(report):
        if op.get("type") != "ReadVariableOp":
            continue
        copies = [
            t for t in sent.get((int(op.get("call", 0)), op.get("name", "")), ()) if t.get("dst") != op.get("device")
        ]
        if not copies:
            continue
        timed = [float(t["duration_us"]) for t in copies if is_timed(t)]
        rows.append(
            {
                "op": op["name"],
                "stored_on": op.get("device", "?"),
                "read_on": sorted({t.get("dst", "?") for t in copies}),
                "bytes": sum(int(t["bytes"]) for t in copies if t.get("bytes") is not None) or None,
                "us": sum(timed) if timed else None,
            }
        )
    rows.sort(key=lambda r: (-(r["bytes"] or 0), r["op"]))
    return rows


def timeline(
    report: Report, node_of_op: list[int] | None = None, *, prepared: PreparedReport | None = None
) -> dict[str, Any]:
    """The captured step as lanes (one per device) of ops, and transfers drawn between lanes.

    With timing, positions are microseconds from the first op; without it (``"timed": False``)
    each lane shows its ops in execution order, one unit each, so the order still reads.

    Args:
        report: the stored report.
        node_of_op: each op's node in :func:`scope_tree` (the page names ops through it);
            by default the op's index.
        prepared: the report's indexes already built for another view of it (built here by default).

    Each run of an XLA cluster (a ``jit_compile`` function's, or a module's on a GPU) is one
    bar with its ops inside it, and inside it each run of a command buffer (:func:`xla_runs`);
    an op's color is its kernel's (an XLA op's: its type's).

    Returns:
        One dict, compact for 10^4 ops,
        ``{"timed", "lanes", "end", "types", "ops": [[lane, start, duration, node, type index, run]],
        "runs": [[lane, start, duration, name, parent, ops]], "transfers": [[src lane, dst lane, start,
        duration, tensor]]}``; an op's ``run`` is the innermost run it is in (``-1``: none).
    """
    prep = prepared or prepare_report(report)
    lanes, ops, transfers = prep.devices, prep.ops, prep.transfers
    lane_of = {device: i for i, device in enumerate(lanes)}
    timed = bool(ops) and all(prep.timed)
    types: dict[str, int] = {}
    rows: list[list[Any]] = []
    placed: dict[tuple[int, str], tuple[float, float]] = {}
    origin = min(float(r["start_us"]) for r in [*ops, *transfers] if is_timed(r)) if timed else 0.0
    cursor: Counter[int] = Counter()
    for i, op in enumerate(ops):
        lane = lane_of[op.get("device", "?")]
        if timed:
            start, duration = round(float(op["start_us"]) - origin, 3), float(op["duration_us"])
        else:
            start, duration = float(cursor[lane]), 1.0
            cursor[lane] += 1
        placed[(int(op.get("call", 0)), op.get("name", ""))] = (start, duration)
        kernel = (op.get("type") if op.get("kernel") == XLA_CLUSTER else op.get("kernel")) or op.get("type") or "?"
        rows.append([lane, start, duration, node_of_op[i] if node_of_op else i, types.setdefault(kernel, len(types))])
    runs, run_of = xla_runs(ops, rows)
    for row, run in zip(rows, run_of):
        row.append(run)
    drawn = [_drawn_transfer(t, lane_of, origin if timed else None, placed) for t in transfers]
    end = max([r[1] + r[2] for r in rows] + [c[2] + c[3] for c in drawn] + [0.0])
    return {"timed": timed, "lanes": lanes, "end": end, "types": list(types), "ops": rows, "runs": runs,
            "transfers": drawn}  # fmt: skip


def _drawn_transfer(
    t: dict[str, Any], lane_of: dict[str, int], origin: float | None, placed: dict[tuple[int, str], tuple[float, float]]
) -> list[Any]:
    """A transfer between lanes: at its own time (``origin`` given and it was timed), else from the end of the op
    that produced its tensor, where known.
    """
    if origin is not None and is_timed(t):
        start, duration = round(float(t["start_us"]) - origin, 3), float(t["duration_us"])
    else:
        made = placed.get((int(t.get("call", 0)), str(t.get("tensor", "")).rsplit(":", 1)[0]))
        start, duration = (made[0] + made[1], 0.0) if made else (0.0, 0.0)
    return [lane_of[t.get("src", "?")], lane_of[t.get("dst", "?")], start, duration, t.get("tensor", "?")]


def xla_runs(ops: list[dict[str, Any]], rows: list[list[Any]]) -> tuple[list[list[Any]], list[int]]:
    """The runs of XLA clusters among ``ops`` placed at ``rows`` (``[lane, start, duration, ...]``), and each op's.

    A cluster's run is its ops of one call on one device (``kernel_name`` the cluster); inside
    it, a command buffer's run is a stretch of its kernels, in time order, that ran in one
    graph (``graph``). A run is ``[lane, start, duration, name, parent run (-1: none), ops]``;
    each op's run is the innermost it is in (``-1`` for an op outside any).

    >>> op = {"kernel": "XlaCluster", "kernel_name": "jit_step", "call": 0, "graph": "command_buffer_1"}
    >>> xla_runs([op, op, dict(op, graph="")], [[0, 0.0, 2.0], [0, 2.0, 3.0], [0, 6.0, 1.0]])
    ([[0, 0.0, 7.0, 'jit_step', -1, 3], [0, 0.0, 5.0, 'command_buffer_1', 0, 2]], [1, 1, 0])
    """
    runs: list[list[Any]] = []
    members: dict[tuple[Any, ...], list[int]] = {}
    for i, op in enumerate(ops):
        if op.get("kernel") == XLA_CLUSTER:
            members.setdefault((rows[i][0], op.get("kernel_name"), op.get("call", 0)), []).append(i)
    run_of = [-1] * len(ops)
    for (lane, name, _), mine in members.items():
        parent = len(runs)
        runs.append(_span(rows, mine, lane, name, -1))
        stretch: list[int] = []
        for i in sorted(mine, key=lambda i: rows[i][1]) + [-1]:
            run_of[i] = parent
            graph = ops[i].get("graph") if i >= 0 else None
            if stretch and graph != ops[stretch[0]].get("graph"):
                for k in stretch:
                    run_of[k] = len(runs)
                runs.append(_span(rows, stretch, lane, ops[stretch[0]]["graph"], parent))
                stretch = []
            if graph:
                stretch.append(i)
    return runs, run_of


def _span(rows: list[list[Any]], members: list[int], lane: int, name: str, parent: int) -> list[Any]:
    start = min(rows[i][1] for i in members)
    end = max(rows[i][1] + rows[i][2] for i in members)
    return [lane, start, round(end - start, 3), name, parent, len(members)]


#: At most this many instructions of a module travel to the page (the module's figures cover all of them).
XLA_INSTRUCTIONS_SHOWN = 200


def xla_table(report: Report, *, prepared: PreparedReport | None = None) -> list[dict[str, Any]]:
    """Each XLA cluster (on a GPU, a module) on each device, with how much of the device's time it took.

    Its time is the union of its kernels' spans; from a GPU profile, its instructions (fusions and
    library calls: ``fusion``) each with their kernels' summed time, the longest first, and the
    part of its time inside command buffers. Shares are of the device's busy time.

    Returns:
        One row per cluster and device, the longest first: ``{"device", "module", "runs" (its calls),
        "kernel_runs", "us", "share", "graph_us", "instructions": [{"fusion", "graph", "runs", "us", "share",
        "types"}], "more"}``: at most :data:`XLA_INSTRUCTIONS_SHOWN` instructions, ``more`` the others' count;
        ``us`` ``None`` when untimed.

    >>> run = {"kernel": "XlaCluster", "kernel_name": "jit_step", "device": "GPU:0", "call": 0, "graph": ""}
    >>> ops = [dict(run, type="dot", fusion="custom-call.1", start_us=0.0, duration_us=3.0),
    ...        dict(run, type="add", fusion="fusion.2", start_us=3.0, duration_us=1.0)]
    >>> [(r["module"], r["us"], r["share"], [i["fusion"] for i in r["instructions"]])
    ...  for r in xla_table({"ops": ops, "busy_us": {"GPU:0": 8.0}})]
    [('jit_step', 4.0, 0.5, ['custom-call.1', 'fusion.2'])]
    """
    prep = prepared or prepare_report(report)
    modules: dict[tuple[str, str], dict[tuple[Any, ...], dict[str, Any]]] = {}  # -> kernel run -> its ops
    for op, key, timed in zip(prep.ops, prep.kernel_keys, prep.timed):
        if op.get("kernel") == XLA_CLUSTER:
            run = modules.setdefault((op.get("device", "?"), op.get("kernel_name", "?")), {}).setdefault(key, {})
            run.setdefault("op", op)
            run.setdefault("types", {})[op.get("type", "?")] = None
            run["timed"] = timed
    rows = [_xla_row(device, module, runs, prep.busy.get(device)) for (device, module), runs in modules.items()]
    return sorted(rows, key=lambda r: (-(r["us"] or 0.0), r["device"], r["module"]))


def _xla_row(device: str, module: str, runs: dict[Any, dict[str, Any]], busy: float | None) -> dict[str, Any]:
    """One cluster's row of :func:`xla_table` from its kernel runs (each ``{"op", "types", "timed"}``)."""
    spans = [_op_span(run["op"]) for run in runs.values() if run["timed"]]
    in_graphs = [_op_span(run["op"]) for run in runs.values() if run["timed"] and run["op"].get("graph")]
    by_fusion: dict[str, dict[str, Any]] = {}
    for run in runs.values():
        op = run["op"]
        if not op.get("fusion"):
            continue
        row = by_fusion.setdefault(op["fusion"], {"fusion": op["fusion"], "graph": op.get("graph", ""), "runs": 0})
        row["runs"] += 1
        row.setdefault("types", {}).update(run["types"])
        if run["timed"]:
            row["us"] = row.get("us", 0.0) + float(op["duration_us"])
    listed = sorted(by_fusion.values(), key=lambda r: (-r.get("us", 0.0), r["fusion"]))
    for row in listed:
        row["us"] = row.get("us")
        row["share"] = _of(row["us"], busy)
        row["types"] = list(row["types"])
    us = union_length(spans) if spans else None
    return {
        "device": device,
        "module": module,
        "runs": len({key[1] for key in runs}),
        "kernel_runs": len(runs),
        "us": us,
        "share": _of(us, busy),
        "graph_us": union_length(in_graphs) if in_graphs else None,
        "instructions": listed[:XLA_INSTRUCTIONS_SHOWN],
        "more": max(0, len(listed) - XLA_INSTRUCTIONS_SHOWN),
    }


def _op_span(op: dict[str, Any]) -> tuple[float, float]:
    start = float(op["start_us"])
    return start, start + float(op["duration_us"])


def _of(us: float | None, busy: float | None) -> float | None:
    """``us`` as a share of ``busy`` (``None`` when either is unknown)."""
    return None if us is None or not busy else round(us / busy, 4)


# ----------------------------------------------------------------------------- where the time went

#: At most this many events of the critical path travel to the page (the figures cover all of them).
CRITICAL_EVENTS_SHOWN = 2000


def critical_path(report: Report, *, prepared: PreparedReport | None = None) -> dict[str, Any]:
    """The chain of kernels and transfers that ends the step: where the step's time went.

    Read from the timeline alone, backwards from the event that ends last: each kernel
    waited on what ended last, before it started, on its own device (the kernel before
    it there, or a transfer that arrived there); each transfer waited on what ended last on its
    source device. Gaps between links are waiting the trace does not explain (the
    runtime's own work).

    Returns:
        The path as one dict,
        ``{"us": length of the path, "events": [[kind ("kernel" or "transfer"), name, lane, start_us, duration_us], ...]
        (at most :data:`CRITICAL_EVENTS_SHOWN`, in time order), "count": events on the path,
        "by_device": {device: microseconds of kernels on the path}, "transfers_us": microseconds
        of transfers on the path}``; an empty path (``us`` ``None``) when the report has no times.

    >>> path = critical_path({"ops": [
    ...     {"name": "a", "device": "CPU:0", "start_us": 0, "duration_us": 10},
    ...     {"name": "c", "device": "CPU:0", "start_us": 12, "duration_us": 3},
    ...     {"name": "b", "device": "CPU:1", "start_us": 12, "duration_us": 18}],
    ...     "transfers": [{"tensor": "a:0", "src": "CPU:0", "dst": "CPU:1", "start_us": 10, "duration_us": 2}]})
    >>> [e[1] for e in path["events"]], path["us"], path["by_device"], path["transfers_us"]
    (['a', 'a:0', 'b'], 30.0, {'CPU:0': 10.0, 'CPU:1': 18.0}, 2.0)
    """
    events = _timed_events(prepared or prepare_report(report))
    if not events:
        return {"us": None, "events": [], "count": 0, "by_device": {}, "transfers_us": None}
    path = _path_back(events)
    by_device: dict[str, float] = {}
    transfers = 0.0
    for i in path:
        end, start, kind, _, waits_on, _ = events[i]
        if kind == "kernel":
            by_device[waits_on] = by_device.get(waits_on, 0.0) + end - start
        else:
            transfers += end - start
    shown = [
        [events[i][2], events[i][3], events[i][5], events[i][1], events[i][0] - events[i][1]]
        for i in path[-CRITICAL_EVENTS_SHOWN:]
    ]
    return {
        "us": events[path[-1]][0] - events[path[0]][1],
        "events": shown,
        "count": len(path),
        "by_device": dict(sorted(by_device.items())),
        "transfers_us": transfers,
    }


#: One event of the timeline as the critical path reads it: ``(end, start, kind, name, waits on, lane)``.
_Event = tuple[float, float, str, str, str, str]


def _timed_events(prep: PreparedReport) -> list[_Event]:
    """Each timed kernel (a fused kernel once) and transfer: what it waits on is its device, or its source's."""
    events: list[_Event] = []
    seen: set[tuple[Any, ...]] = set()
    for op, key, timed in zip(prep.ops, prep.kernel_keys, prep.timed):
        if timed and key not in seen:
            seen.add(key)
            start, device = float(op["start_us"]), str(op.get("device", "?"))
            name = str(op.get("kernel_name") or op.get("name", "?")) + (f" {op['fusion']}" if op.get("fusion") else "")
            events.append((start + float(op["duration_us"]), start, "kernel", name, device, device))
    for t in prep.transfers:
        if is_timed(t):
            start, src = float(t["start_us"]), str(t.get("src", "?"))
            lane = f"{src} -> {t.get('dst', '?')}"
            events.append((start + float(t["duration_us"]), start, "transfer", str(t.get("tensor", "?")), src, lane))
    return events


def _path_back(events: list[_Event]) -> list[int]:
    """From the event that ends last, back through what each waited on (ended last before it started, where it
    waits); the path in time order.
    """
    arrivals: dict[str, list[tuple[float, float, int]]] = {}  # device -> (end, start, event) of what it waits on
    for i, (end, start, kind, _, waits_on, lane) in enumerate(events):
        device = waits_on if kind == "kernel" else lane.rpartition(" -> ")[2]
        arrivals.setdefault(device, []).append((end, start, i))
    order = {d: sorted(v) for d, v in arrivals.items()}
    ends = {d: [a[0] for a in v] for d, v in order.items()}
    path = [max(range(len(events)), key=lambda i: (events[i][0], -events[i][1]))]
    while True:
        _, start, _, _, waits_on, _ = events[path[-1]]
        at = bisect.bisect_right(ends.get(waits_on, []), start + 1e-9) - 1
        while at >= 0 and order[waits_on][at][1] >= start:  # only what started before: no loops
            at -= 1
        if at < 0:
            break
        path.append(order[waits_on][at][2])
    path.reverse()
    return path


def _memory_of(memory: dict[str, dict[str, float]], device: str) -> dict[str, float] | None:
    """A device's memory figures: its own, or the host's (``"CPU"``) that every logical CPU shares."""
    if device in memory:
        return memory[device]
    host = memory.get("CPU") if device.startswith("CPU:") or "/CPU:" in device else None
    return None if host is None else {**host, "shared": 1.0}


def dashboard_view(report: Report, memory: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """Everything the dashboard draws for one run and step."""
    prep = prepare_report(report)
    busy = prep.busy
    transfer_us = [float(t["duration_us"]) for t in prep.transfers if is_timed(t)]
    scopes = scope_tree(report, prepared=prep)
    line = timeline(report, scopes.pop("node_of_op"), prepared=prep)
    return {
        "summary": {
            "ops": len(prep.ops),
            "devices": len(prep.devices),
            "transfers": len(prep.transfers),
            "bytes": sum(int(t["bytes"]) for t in prep.transfers if t.get("bytes") is not None),
            "collectives": len(report.get("collectives") or ()),
            "timed": line["timed"],
            "busy_us": sum(busy.values()) if busy else None,
            "transfer_us": sum(transfer_us) if transfer_us else None,
            "step_us": line["end"] if line["timed"] else None,
            "notes": [str(n) for n in report.get("notes") or ()],  # e.g. kernels whose device is unknown ('?')
        },
        "devices": device_table(report, memory, prepared=prep),
        "matrix": transfer_matrix(report, prepared=prep),
        "scopes": scopes,
        "weights": weight_reads(report),
        "timeline": line,
        "critical_path": critical_path(report, prepared=prep),
        "xla": xla_table(report, prepared=prep),
    }


def _keyed(ops: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    seen: Counter[str] = Counter()
    keyed = {}
    for op in ops:
        name = op.get("name", "?")
        keyed[(name, seen[name])] = op
        seen[name] += 1
    return keyed


def _pairs(report: Report) -> dict[str, int]:
    return dict(sorted(Counter(f"{t.get('src')} -> {t.get('dst')}" for t in report_transfers(report)).items()))


def diff_view(before: Report, after: Report) -> dict[str, Any]:
    """What changed from ``before`` to ``after`` (two runs, or two steps of one run).

    Returns:
        The changes as one dict,
        ``{"moved": [[name, device before, device after]], "added": [[name, device]], "removed": [...],
        "devices": [{"name", "ops_before", "ops_after", "busy_before", "busy_after"}],
        "transfers": [{"pair", "before", "after"}], "unchanged"}``.
    """
    mine, theirs = _keyed(report_ops(before)), _keyed(report_ops(after))
    moved = [
        [k[0], mine[k].get("device"), theirs[k].get("device")]
        for k in mine
        if k in theirs and mine[k].get("device") != theirs[k].get("device")
    ]
    added = [[k[0], theirs[k].get("device")] for k in theirs if k not in mine]
    removed = [[k[0], mine[k].get("device")] for k in mine if k not in theirs]
    counts_a = Counter(op.get("device") for op in report_ops(before))
    counts_b = Counter(op.get("device") for op in report_ops(after))
    busy_a, busy_b = busy_us(before), busy_us(after)
    devices = [
        {
            "name": d,
            "ops_before": counts_a[d],
            "ops_after": counts_b[d],
            "busy_before": busy_a.get(d),
            "busy_after": busy_b.get(d),
        }
        for d in sorted(set(devices_of(before)) | set(devices_of(after)))
    ]
    pairs_a, pairs_b = _pairs(before), _pairs(after)
    transfers = [
        {"pair": p, "before": pairs_a.get(p, 0), "after": pairs_b.get(p, 0)}
        for p in sorted(set(pairs_a) | set(pairs_b))
    ]
    return {
        "moved": moved,
        "added": added,
        "removed": removed,
        "devices": devices,
        "transfers": transfers,
        "unchanged": not (moved or added or removed) and pairs_a == pairs_b,
    }
