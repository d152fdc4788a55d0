"""A captured step as a Chrome trace: the ``traceEvents`` JSON that Perfetto and chrome://tracing open.

One track (trace process) per device, its ops as timed slices on it (each run of an XLA
cluster one slice, its ops in the slice's arguments); each transfer
is a slice on the sending device's "transfers out" row with a flow arrow to the
receiving device. Needs a report captured with timing (ops with ``start_us``
and ``duration_us``).

>>> report = {"ops": [{"name": "m/MatMul", "type": "MatMul", "device": "CPU:0",
...                    "start_us": 10.0, "duration_us": 5.0}], "transfers": []}
>>> [e["name"] for e in chrome_trace(report)["traceEvents"] if e["ph"] == "X"]
['m/MatMul']
"""

from __future__ import annotations

import json
import os
from typing import Any

from tfdevices.core.errors import InputError
from tfdevices.tensorboard.report_reading import devices_of, is_timed

_OPS_ROW, _TRANSFERS_ROW = 0, 1


def _as_dict(report: Any) -> dict[str, Any]:
    if isinstance(report, dict):
        return report
    if hasattr(report, "to_json"):
        return json.loads(report.to_json())
    raise InputError(
        f"chrome_trace(report=...): expected a PlacementReport or its JSON dict, got {type(report).__name__}.",
        hint="pass what tfdevices.verify.capture returns.",
    )


def chrome_trace(report: Any) -> dict[str, Any]:
    """The report's step as a Chrome trace.

    Args:
        report: a ``PlacementReport`` or the dict of its JSON.

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ms"}``: one process per device (named after it),
        ops as complete (``"X"``) events with positive durations, copies with flow arrows.

    Raises:
        InputError: the report has no op, or its ops carry no times.
    """
    data = _as_dict(report)
    ops = list(data.get("ops") or ())
    if not ops or not all(is_timed(op) for op in ops):
        untimed = sum(not is_timed(op) for op in ops)
        raise InputError(
            f"the report has {len(ops)} op(s), {untimed} without start_us/duration_us: no timeline to write.",
            hint="capture the step with a tfdevices that records op times, then write the trace.",
        )
    pid = {device: i + 1 for i, device in enumerate(devices_of(data))}
    events: list[dict[str, Any]] = []
    for device, p in pid.items():
        events.append({"name": "process_name", "ph": "M", "pid": p, "tid": _OPS_ROW, "args": {"name": device}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": p, "tid": _OPS_ROW, "args": {"sort_index": p}})
        events.append({"name": "thread_name", "ph": "M", "pid": p, "tid": _OPS_ROW, "args": {"name": "ops"}})
    for op in _units(ops):
        events.append(
            {
                "name": op.get("name", "?"),
                "cat": op.get("type", "op"),
                "ph": "X",
                "ts": float(op["start_us"]),
                "dur": max(float(op["duration_us"]), 0.001),
                "pid": pid[op.get("device", "?")],
                "tid": _OPS_ROW,
                "args": _op_args(op),
            }
        )
    events += _transfer_events(data, pid)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _units(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ops as slices: each run of an XLA cluster is one slice (named after the cluster, its ops in ``ops``).

    >>> run = {"device": "CPU:0", "call": 0, "kernel": "XlaCluster", "kernel_name": "step", "start_us": 0,
    ...        "duration_us": 9}
    >>> [(u["name"], u["ops"]) for u in _units([dict(run, name="a"), dict(run, name="b")])]
    [('step', ['a', 'b'])]
    """
    out: list[dict[str, Any]] = []
    runs: dict[tuple[Any, ...], dict[str, Any]] = {}
    for op in ops:
        if op.get("kernel") != "XlaCluster":
            out.append(op)
            continue
        key = (op.get("device"), op.get("call"), op.get("kernel_name"), op["start_us"], op["duration_us"])
        if key not in runs:
            runs[key] = dict(op, name=op.get("kernel_name") or op.get("name", "?"), type="XlaCluster", ops=[])
            out.append(runs[key])
        runs[key]["ops"].append(op.get("name", "?"))
    return out


def _op_args(op: dict[str, Any]) -> dict[str, Any]:
    """What a slice shows when clicked: the model op, its kernel, and on a GPU the launch and device kernels."""
    args = {"type": op.get("type", ""), "kernel": op.get("kernel", ""), "requested": op.get("requested", "")}
    if op.get("launch_us") is not None:
        args["launched at (host, us)"] = op["launch_us"]
    if op.get("kernels"):
        args["GPU kernels"] = list(op["kernels"])
    if op.get("ops"):
        args["ops compiled together (XLA)"] = op["ops"]
    return args


def _transfer_events(data: dict[str, Any], pid: dict[str, int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    named: set[int] = set()
    for i, t in enumerate(data.get("transfers") or ()):
        if not is_timed(t):
            continue
        src, dst = pid[t.get("src", "?")], pid[t.get("dst", "?")]
        if src not in named:
            named.add(src)
            events.append(
                {"name": "thread_name", "ph": "M", "pid": src, "tid": _TRANSFERS_ROW, "args": {"name": "transfers out"}}
            )
        start, duration = float(t["start_us"]), max(float(t["duration_us"]), 0.001)
        args = {
            "to": t.get("dst"),
            "dtype": t.get("dtype", ""),
            "shape": t.get("shape"),
            "bytes": t.get("bytes"),
            "memcpy": t.get("kind") or None,
        }
        events.append(
            {
                "name": f"transfer {t.get('tensor', '?')}",
                "cat": "transfer",
                "ph": "X",
                "ts": start,
                "dur": duration,
                "pid": src,
                "tid": _TRANSFERS_ROW,
                "args": args,
            }
        )
        events.append(
            {"name": "transfer", "cat": "transfer", "ph": "s", "id": i, "ts": start, "pid": src, "tid": _TRANSFERS_ROW}
        )
        events.append(
            {
                "name": "transfer",
                "cat": "transfer",
                "ph": "f",
                "bp": "e",
                "id": i,
                "ts": start + duration,
                "pid": dst,
                "tid": _OPS_ROW,
            }
        )
    return events


def write_trace(report: Any, path: str | os.PathLike[str]) -> str:
    """Writes :func:`chrome_trace` of ``report`` to ``path`` (JSON) and returns the path.

    Raises:
        InputError: the report has no timing, or ``path``'s folder does not exist or cannot be written.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InputError(
            f"--trace {path!r}: folder {folder!r} does not exist.",
            hint="create the folder first or write the trace elsewhere.",
        )
    trace = chrome_trace(report)
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(trace, f)
    except OSError as err:  # a directory, no permission, a full disk
        raise InputError(
            f"--trace {path!r}: cannot write it: {err.strerror or err}.",
            hint="name a file in a folder you can write, on a disk with room.",
        ) from None
    return path
