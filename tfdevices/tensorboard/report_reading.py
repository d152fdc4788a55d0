"""The small readers of a stored report the dashboard's views share: its ops, transfers and busy time per
device (pure, TensorBoard-free; the report is the plain ``dict`` of :mod:`tfdevices.tensorboard.views`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfdevices.verify.records import union_length

Report = dict[str, Any]


def report_ops(report: Report) -> list[dict[str, Any]]:
    """The report's ops (``[]`` when it has none)."""
    return list(report.get("ops") or ())


def report_transfers(report: Report) -> list[dict[str, Any]]:
    """The report's transfers (``[]`` when it has none)."""
    return list(report.get("transfers") or ())


def is_timed(record: dict[str, Any]) -> bool:
    """Whether an op or transfer has both a start and a duration."""
    return record.get("start_us") is not None and record.get("duration_us") is not None


@dataclass(frozen=True)
class PreparedReport:
    """What several views need from one report, computed once (a 1,000-layer step has 10^4 ops)."""

    ops: list[dict[str, Any]]
    transfers: list[dict[str, Any]]
    devices: list[str]
    kernel_keys: list[tuple[Any, ...]]
    timed: list[bool]
    busy: dict[str, float]


def prepare_report(report: Report) -> PreparedReport:
    """What several views need from ``report``, computed once."""
    ops = report_ops(report)
    return PreparedReport(
        ops,
        report_transfers(report),
        devices_of(report),
        [_kernel_key(op) for op in ops],
        [is_timed(op) for op in ops],
        busy_us(report),
    )


def devices_of(report: Report) -> list[str]:
    """Every device that ran an op or took part in a transfer, sorted."""
    names = {op.get("device", "?") for op in report_ops(report)}
    for t in report_transfers(report):
        names.update((t.get("src", "?"), t.get("dst", "?")))
    names.update(_stored_busy(report))
    return sorted(names)


def _stored_busy(report: Report) -> dict[str, float]:
    """The report's own busy time per device (``busy_us``: ``{device: microseconds}``), if it has one."""
    stored = report.get("busy_us") or {}
    return {str(k): float(v) for k, v in stored.items() if v is not None} if isinstance(stored, dict) else {}


def _kernel_key(op: dict[str, Any]) -> tuple[Any, ...]:
    """One kernel execution: the ops a fused kernel ran share it (and their time)."""
    return (
        op.get("device"),
        op.get("call", 0),
        op.get("kernel", ""),
        op.get("kernel_name") or op.get("name"),
        op.get("start_us"),
    )


def busy_us(report: Report) -> dict[str, float]:
    """Busy time per device in microseconds: the report's own figure, else the union of its op times.

    Devices without timed ops are left out (a report captured without timing gives ``{}``).

    >>> busy_us({"ops": [{"device": "CPU:0", "start_us": 0, "duration_us": 5},
    ...                  {"device": "CPU:0", "start_us": 3, "duration_us": 4}]})
    {'CPU:0': 7.0}
    """
    out = _stored_busy(report)
    spans: dict[str, list[tuple[float, float]]] = {}
    for op in report_ops(report):
        if op.get("device") not in out and is_timed(op):
            start = float(op["start_us"])
            spans.setdefault(op["device"], []).append((start, start + float(op["duration_us"])))
    out.update({device: union_length(s) for device, s in spans.items()})
    return dict(sorted(out.items()))
