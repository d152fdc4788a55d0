"""Why is this step slow: findings read from one captured step, each with its numbers and a fix.

:func:`advise` takes a :class:`~tfdevices.verify.PlacementReport` (a capture, a placement run,
a TensorFlow profile read with :func:`tfdevices.read_profile`) and returns :class:`Finding`
records ordered by the time at stake. Every finding is computed from the report's own
times; a report without times gives no finding (never a guess).

>>> report = {"ops": [
...     {"name": "a/MatMul", "type": "MatMul", "device": "CPU:0", "start_us": 0, "duration_us": 50},
...     {"name": "b/MatMul", "type": "MatMul", "device": "CPU:1", "start_us": 50, "duration_us": 50}],
...     "transfers": [], "collectives": []}
>>> [(f.kind, f.time_us) for f in advise(report)]
[('idle_devices', 50.0)]
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tfdevices.core.errors import InputError
from tfdevices.core.units import format_bytes
from tfdevices.tensorboard.views import busy_us, critical_path, weight_reads
from tfdevices.verify import PlacementReport
from tfdevices.verify.records import union_length

#: The kinds of finding, in the order they are checked.
KINDS = (
    "idle_devices",
    "copies_on_critical_path",
    "weights_across_devices",
    "all_reduce",
    "cpu_fallback",
    "input_bound",
    "launch_bound",
)
#: A finding about a share of the step is made from this share up.
MIN_SHARE = 0.05
#: Devices are "idle while others work" when this share of the step could be saved by overlapping them.
MIN_IDLE_SHARE = 0.2
#: A GPU is launch-bound when it waits this share of its span for the host to launch the next kernel.
MIN_LAUNCH_SHARE = 0.2
#: Ops that wait on the input pipeline.
ITERATOR_TYPES = frozenset(
    {
        "IteratorGetNext",
        "IteratorGetNextSync",
        "IteratorGetNextAsOptional",
        "MultiDeviceIteratorGetNextFromShard",
        "OptionalGetValue",
    }
)

Report = dict[str, Any]


@dataclass(frozen=True)
class Finding:
    """One reason a step is slower than it could be.

    Attributes:
        kind: one of :data:`KINDS`.
        time_us: the microseconds of the captured step at stake (what the fix could save at most).
        evidence: the numbers from the report that show it, as a sentence.
        fix: what to change.
    """

    kind: str
    time_us: float
    evidence: str
    fix: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.time_us:.0f} us at stake): {self.evidence} FIX: {self.fix}"


def advise(report: PlacementReport | Report | str) -> tuple[Finding, ...]:
    """Findings about one captured step, ordered by the time at stake (largest first).

    Args:
        report: a :class:`~tfdevices.verify.PlacementReport`, its JSON, or that JSON parsed (a dict).

    Returns:
        A tuple of :class:`Finding`; empty for a clean step or a report without times.

    Raises:
        InputError: ``report`` is none of these.
    """
    data = _as_dict(report)
    span = _span(data)
    if not span:
        return ()
    found = [f for check in _CHECKS for f in check(data, span)]
    return tuple(sorted(found, key=lambda f: (-f.time_us, KINDS.index(f.kind))))


def format_findings(findings: Iterable[Finding]) -> str:
    """The findings for people: one numbered paragraph each, or one line saying there are none."""
    findings = tuple(findings)
    if not findings:
        return (
            "no findings: no device idles while others work, no copy on the critical path, no weight read "
            "across devices, no large all-reduce, no CPU fallback, no input or launch wait."
        )
    return "\n\n".join(
        f"{i}. {f.kind}: {f.time_us:.0f} us at stake\n   {f.evidence}\n   FIX: {f.fix}"
        for i, f in enumerate(findings, 1)
    )


def time_shares(report: PlacementReport | Report | str) -> dict[str, Any]:
    """Where one step's time went: ``{"step_us", "copies", "all_reduce", "idle": {device: share}}``.

    Shares are of the step's span (first event to last); ``{}`` for a report without times.

    >>> time_shares({"ops": [{"device": "CPU:0", "start_us": 0, "duration_us": 80}],
    ...              "transfers": [{"src": "CPU:0", "dst": "CPU:1", "start_us": 80, "duration_us": 20}]})
    {'step_us': 100.0, 'copies': 0.2, 'all_reduce': 0.0, 'idle': {'CPU:0': 0.2}}
    """
    data = _as_dict(report)
    span = _span(data)
    if not span:
        return {}
    length = _length(span)
    share = lambda records: round(union_length(_spans(records)) / length, 4)
    idle = {d: round(max(0.0, 1 - us / length), 4) for d, us in sorted(_busy(data).items()) if d != "?"}
    return {
        "step_us": float(length),
        "copies": share(data.get("transfers", ())),
        "all_reduce": share(data.get("collectives", ())),
        "idle": idle,
    }


# ----------------------------------------------------------------------------- reading the report


def _as_dict(report: object) -> Report:
    if isinstance(report, PlacementReport):
        return json.loads(report.to_json())
    if isinstance(report, str):
        return json.loads(PlacementReport.from_json(report).to_json())
    if isinstance(report, dict) and isinstance(report.get("ops"), list):
        return report
    raise InputError(
        f"advise({type(report).__name__}): expected a PlacementReport, its JSON or that JSON parsed.",
        hint="pass tfdevices.capture(...), tfdevices.read_profile(path), or "
        "tfdevices.tensorboard.writer.load_placement(logdir).",
    )


def _timed(record: dict[str, Any]) -> bool:
    return record.get("start_us") is not None and record.get("duration_us") is not None


def _spans(records: Iterable[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(float(r["start_us"]), float(r["start_us"]) + float(r["duration_us"])) for r in records if _timed(r)]


def _span(data: Report) -> tuple[float, float] | None:
    """(start, end) of the captured step: first event to last, over ops, copies and collectives."""
    spans = _spans([*data.get("ops", ()), *data.get("transfers", ()), *data.get("collectives", ())])
    if not spans:
        return None
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return (start, end) if end > start else None


def _busy(data: Report) -> dict[str, float]:
    """Busy time per device: the report's own, else the union of its ops' and collectives' times."""
    if data.get("busy_us"):
        return busy_us(data)
    spans: dict[str, list[tuple[float, float]]] = {}
    for record in [*data.get("ops", ()), *data.get("collectives", ())]:
        spans.setdefault(str(record.get("device", "?")), []).extend(_spans([record]))
    return {device: union_length(s) for device, s in spans.items()}


def _kind(device: str) -> str:
    return device.rsplit("/", 1)[-1].partition(":")[0]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "?"


def _length(span: tuple[float, float]) -> float:
    return span[1] - span[0]


# ----------------------------------------------------------------------------- the checks


def _idle_devices(data: Report, span: tuple[float, float]) -> list[Finding]:
    """Devices of one kind that work one after another: the step could overlap them."""
    busy = {d: us for d, us in _busy(data).items() if d != "?" and us > 0}
    kinds = Counter(_kind(d) for d in busy)
    main = "GPU" if kinds.get("GPU", 0) else "CPU"
    busy = {d: us for d, us in busy.items() if _kind(d) == main}
    if len(busy) < 2:
        return []
    length = _length(span)
    at_stake = length - sum(busy.values()) / len(busy)
    if at_stake < MIN_IDLE_SHARE * length:
        return []
    together = sum(busy.values()) / length
    each = ", ".join(f"{d} busy {us:.0f} us (idle {_pct(length - us, length)})" for d, us in sorted(busy.items()))
    return [
        Finding(
            "idle_devices",
            at_stake,
            f"the step takes {length:.0f} us on {len(busy)} {main}s: {each}; on average {together:.2f} of them "
            f"work at once, so overlapping them fully would save up to {at_stake:.0f} us.",
            "the devices run one after another (a layer split runs its stages in sequence): feed several "
            "micro-batches through the stages so they overlap, or use mirrored (each device runs the whole model "
            "on its share of the batch); tfdevices tune measures both.",
        )
    ]


def _copies_on_critical_path(data: Report, span: tuple[float, float]) -> list[Finding]:
    path = critical_path(data)
    transfers_us, path_us = path.get("transfers_us") or 0.0, path.get("us") or 0.0
    if not path_us or transfers_us < MIN_SHARE * path_us:
        return []
    copies = sorted((e for e in path["events"] if e[0] == "transfer"), key=lambda e: -e[4])
    top = "; ".join(f"{e[1]} {e[2]} {e[4]:.0f} us" for e in copies[:3])
    return [
        Finding(
            "copies_on_critical_path",
            transfers_us,
            f"{len(copies)} copies on the step's critical path take {transfers_us:.0f} us of its {path_us:.0f} us "
            f"({_pct(transfers_us, path_us)}); the longest: {top}.",
            "the step waits for these tensors to move: keep the ops that make and use them on one device "
            "(fewer stage boundaries in a layer plan: tfdevices.plan_layers), or cut where the tensor is small.",
        )
    ]


def _weights_across_devices(data: Report, span: tuple[float, float]) -> list[Finding]:
    rows = weight_reads(data)
    if not rows:
        return []
    us = sum(r["us"] or 0.0 for r in rows)
    size = sum(r["bytes"] or 0 for r in rows)
    top = "; ".join(
        f"{r['op']} on {r['stored_on']} read on {', '.join(r['read_on'])} ({format_bytes(r['bytes'])})"
        for r in rows[:3]
    )
    return [
        Finding(
            "weights_across_devices",
            us,
            f"{len(rows)} weight(s) are copied from the device that stores them to another on every step: "
            f"{format_bytes(size) if size else 'size unknown'} in {us:.0f} us of copies "
            f"({_pct(us, _length(span))} of the step); {top}.",
            "create each layer's variables on the device that computes it: tfdevices.place_layers(model, plan) "
            "(a Keras 3 layer called under tf.device inside call() keeps its variables on the first device).",
        )
    ]


def _all_reduce(data: Report, span: tuple[float, float]) -> list[Finding]:
    timed = [c for c in data.get("collectives", ()) if _timed(c)]
    us = union_length(_spans(timed))
    length = _length(span)
    if not timed or us < MIN_SHARE * length:
        return []
    types = ", ".join(f"{t} x{n}" for t, n in sorted(Counter(c.get("type", "?") for c in timed).items()))
    devices = sorted({str(c.get("device", "?")) for c in timed})
    return [
        Finding(
            "all_reduce",
            us,
            f"all-reduce runs {us:.0f} us of the {length:.0f} us step ({_pct(us, length)}): {len(timed)} collective "
            f"op(s) ({types}) on {len(devices)} device(s).",
            "the replicas spend this syncing gradients: raise the batch per replica (the same all-reduce serves "
            "more examples), use fewer replicas, or on GPUs build_strategy(..., cross_device_ops='nccl').",
        )
    ]


def _cpu_fallback(data: Report, span: tuple[float, float]) -> list[Finding]:
    ops = data.get("ops", ())
    if not any(_kind(str(op.get("device", ""))) == "GPU" for op in ops):
        return []
    fell = [
        op
        for op in ops
        if _kind(str(op.get("device", ""))) == "CPU"
        and _kind(str(op.get("requested") or "GPU")) != "CPU"
        and op.get("type") not in ITERATOR_TYPES
    ]
    if not fell:
        return []
    us = union_length(_spans(fell))
    types = Counter(str(op.get("type", "?")) for op in fell).most_common(4)
    return [
        Finding(
            "cpu_fallback",
            us,
            f"{len(fell)} op(s) of a GPU step ran on the CPU without asking for it ({us:.0f} us, "
            f"{_pct(us, _length(span))} of the step): {', '.join(f'{t} x{n}' for t, n in types)}.",
            "these ops have no GPU kernel for their dtype, or soft placement moved them: cast to a supported dtype, "
            "do this work in the tf.data pipeline, or turn soft placement off "
            "(tfdevices.runtime.set_soft_placement(False)) to see why.",
        )
    ]


def _input_bound(data: Report, span: tuple[float, float]) -> list[Finding]:
    waits = [op for op in data.get("ops", ()) if op.get("type") in ITERATOR_TYPES]
    us = union_length(_spans(waits))
    length = _length(span)
    if not waits or us < MIN_SHARE * length:
        return []
    return [
        Finding(
            "input_bound",
            us,
            f"the step waits {us:.0f} us of its {length:.0f} us ({_pct(us, length)}) for the next batch "
            f"({len(waits)} iterator op(s): {', '.join(sorted({str(op.get('type')) for op in waits}))}).",
            "the input pipeline is slower than the step: add dataset.prefetch(tf.data.AUTOTUNE), "
            "map(..., num_parallel_calls=tf.data.AUTOTUNE), and cache() what does not change.",
        )
    ]


def _launch_bound(data: Report, span: tuple[float, float]) -> list[Finding]:
    found = []
    by_device: dict[str, dict[tuple[Any, ...], tuple[float, float, float]]] = {}
    for op in data.get("ops", ()):
        device = str(op.get("device", ""))
        if _kind(device) == "GPU" and _timed(op) and op.get("launch_us") is not None:
            start = float(op["start_us"])
            key = (op.get("call", 0), op.get("kernel_name") or op.get("name"), start)
            by_device.setdefault(device, {})[key] = (start, start + float(op["duration_us"]), float(op["launch_us"]))
    for device, kernels in sorted(by_device.items()):
        finding = _starved(device, sorted(kernels.values()))
        if finding is not None:
            found.append(finding)
    return found


def _starved(device: str, kernels: list[tuple[float, float, float]]) -> Finding | None:
    """A GPU waiting for the host: the next kernel was launched only after the previous one ended."""
    if len(kernels) < 2:
        return None
    waited, short = 0.0, 0
    for (_, prev_end, prev_launch), (start, end, launch) in zip(kernels, kernels[1:]):
        if launch >= prev_end and start > prev_end:
            waited += start - prev_end
        if end - start < launch - prev_launch:
            short += 1
    length = kernels[-1][1] - kernels[0][0]
    if not length or waited < MIN_LAUNCH_SHARE * length:
        return None
    durations = statistics.median(e - s for s, e, _ in kernels)
    gaps = statistics.median(b[2] - a[2] for a, b in zip(kernels, kernels[1:]))
    return Finding(
        "launch_bound",
        waited,
        f"{device} waits {waited:.0f} us of its {length:.0f} us ({_pct(waited, length)}) for the host to launch "
        f"the next kernel: {short} of {len(kernels) - 1} kernels ran shorter than the time between their launches "
        f"(median kernel {durations:.1f} us, median launch interval {gaps:.1f} us).",
        "the host cannot launch small kernels as fast as the GPU runs them: compile the step with XLA "
        "(model.compile(jit_compile=True)), raise the batch size, or run several steps per call "
        "(model.compile(steps_per_execution=N)).",
    )


_CHECKS: tuple[Callable[[Report, tuple[float, float]], list[Finding]], ...] = (
    _idle_devices,
    _copies_on_critical_path,
    _weights_across_devices,
    _all_reduce,
    _cpu_fallback,
    _input_bound,
    _launch_bound,
)
