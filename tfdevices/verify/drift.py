"""Placement drift: what changed between two captures of a long run.

A placement that is right at step 1 can change later: a retrace for a new input shape
compiles a new function that may place ops differently, a soft-placement fallback
moves an op to the CPU, a callback runs eager ops between steps. :func:`drift`
compares a capture with the previous one of the same function, or, when the step
now runs a new traced function, with the capture of the function it replaced, and
says why it was retraced (its inputs).

>>> from tfdevices.verify import OpPlacement, PlacementReport
>>> a = PlacementReport((OpPlacement("d/MatMul", "MatMul", "CPU:0"),), busy_us={"CPU:0": 10.0})
>>> b = PlacementReport((OpPlacement("d/MatMul", "MatMul", "CPU:1"),), busy_us={"CPU:1": 10.0})
>>> print(drift(a, b, step=50, previous_step=40).summary())
step 50 (since step 40): 1 op(s) moved: d/MatMul CPU:0 -> CPU:1; busy time moved: CPU:0 10 -> 0 us, CPU:1 0 -> 10 us
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from tfdevices.verify.records import UNKNOWN_DEVICE
from tfdevices.verify.report import PlacementReport, list_for_message

_NAMED = 8  # ops named in a summary before "... N more"


@dataclass(frozen=True)
class PlacementChange:
    """What changed at ``step`` since ``previous_step``.

    Attributes:
        step: the step of the new capture.
        previous_step: the step it is compared with.
        retraced: whether the step ran a newly traced function (compared with the one it replaced).
        functions: the new capture's function names.
        why: for a retrace, how the functions' inputs changed (``""`` when they did not, or unknown).
        moved: ``(op, device before, device after)`` for ops that changed device.
        added: after a retrace, ops only in the new capture, as ``(op, device)`` (between captures of
            the same function an op that comes or goes is the trace's timing, not a change).
        removed: after a retrace, ops only in the previous capture, as ``(op, device)``.
        transfers: per ``"src -> dst"``, ``(before, after)`` for pairs whose transfer count changed.
        busy: per device, ``(before, after)`` microseconds where busy time shifted more than the threshold.
    """

    step: int
    previous_step: int
    retraced: bool = False
    functions: tuple[str, ...] = ()
    why: str = ""
    moved: tuple[tuple[str, str, str], ...] = ()
    added: tuple[tuple[str, str], ...] = ()
    removed: tuple[tuple[str, str], ...] = ()
    transfers: tuple[tuple[str, int, int], ...] = ()
    busy: tuple[tuple[str, float, float], ...] = ()

    @property
    def changed(self) -> bool:
        """Whether anything changed worth telling: a retrace, ops that moved or came and went, transfers, busy time."""
        return bool(self.retraced or self.moved or self.added or self.removed or self.transfers or self.busy)

    def summary(self) -> str:
        """One line: ``step 50 (since step 40): retraced ...; 2 op(s) moved: ...``."""
        parts = []
        if self.retraced:
            parts.append(
                f"a new traced function ({', '.join(self.functions) or '?'})"
                + (f", its inputs {self.why}" if self.why else "")
            )
        if self.moved:
            parts.append(f"{len(self.moved)} op(s) moved: " + _named([f"{n} {a} -> {b}" for n, a, b in self.moved]))
        if self.added:
            parts.append(f"{len(self.added)} op(s) appeared: " + _named([f"{n} on {d}" for n, d in self.added]))
        if self.removed:
            parts.append(f"{len(self.removed)} op(s) vanished: " + _named([f"{n} from {d}" for n, d in self.removed]))
        if self.transfers:
            parts.append("transfers changed: " + ", ".join(f"{p} {a} -> {b}" for p, a, b in self.transfers))
        if self.busy:
            parts.append("busy time moved: " + ", ".join(f"{d} {a:.0f} -> {b:.0f} us" for d, a, b in self.busy))
        return f"step {self.step} (since step {self.previous_step}): " + ("; ".join(parts) or "unchanged")


def _named(items: list[str]) -> str:
    return list_for_message(items, limit=_NAMED, sep=", ")


def functions_of(report: PlacementReport) -> tuple[int, ...]:
    """Which traced functions a capture ran: their graphs' identities (a retrace makes a new graph), sorted."""
    return tuple(sorted({id(graph) for _, graph in report.graphs}))


def _names(report: PlacementReport) -> tuple[str, ...]:
    return tuple(sorted({str(getattr(graph, "name", "") or "?") for _, graph in report.graphs}))


def inputs_of(report: PlacementReport) -> tuple[str, ...]:
    """Each captured function's inputs as ``"(16, 8) float32"``: its input signature (an iterator's elements
    included), else its graph's inputs (resource handles left out).
    """
    out: list[str] = []
    for _, graph in report.graphs:
        signature = getattr(graph, "structured_input_signature", None)
        found = _specs(signature) if signature is not None else []
        if not found:
            found = [t for t in getattr(graph, "inputs", ()) if getattr(t.dtype, "name", "") != "resource"]
        out += [_spec_text(spec) for spec in found]
    return tuple(out)


def _specs(value: Any, depth: int = 0) -> list[Any]:
    """The tensor specs in a nested input signature (bounded depth), an iterator's element spec included."""
    if depth > 16:
        return []
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _specs(v, depth + 1)]
    if isinstance(value, dict):
        return [s for k in sorted(value, key=str) for s in _specs(value[k], depth + 1)]
    element = getattr(value, "element_spec", None) or getattr(value, "_element_spec", None)  # an IteratorSpec
    if element is not None:
        return _specs(element, depth + 1)
    if getattr(value, "shape", None) is not None and getattr(value, "dtype", None) is not None:
        return [value] if getattr(value.dtype, "name", "") != "resource" else []
    return []


def _spec_text(spec: Any) -> str:
    shape = spec.shape
    dims = "?" if getattr(shape, "rank", None) is None else str(tuple(shape.as_list()))
    return f"{dims} {spec.dtype.name}".replace("None", "?")


def drift(
    before: PlacementReport, after: PlacementReport, *, step: int, previous_step: int, busy_threshold: float = 0.25
) -> PlacementChange:
    """Compares two captures: ops that moved device, came or went, transfers per device pair, busy time.

    Args:
        before: the earlier capture.
        after: the new one.
        step: the new capture's step.
        previous_step: the earlier capture's step.
        busy_threshold: a device's busy time counts as shifted when its share of all devices'
            busy time changed by more than this (0.25: by 25 points). Shares, not times: a
            machine that got slower or faster as a whole moved no work.

    Returns:
        A :class:`PlacementChange` (``changed`` is False when nothing moved).
    """
    diff = before.diff(after)
    old, new = functions_of(before), functions_of(after)
    retraced = bool(new) and new != old
    why = ""
    if retraced:
        inputs_before, inputs_after = inputs_of(before), inputs_of(after)
        if inputs_before != inputs_after:
            why = f"{', '.join(inputs_before) or '()'} -> {', '.join(inputs_after) or '()'}"
    pairs = sorted(set(diff.transfers_before) | set(diff.transfers_after))
    transfers = tuple(
        (p, diff.transfers_before.get(p, 0), diff.transfers_after.get(p, 0))
        for p in pairs
        if diff.transfers_before.get(p, 0) != diff.transfers_after.get(p, 0)
    )
    total_a, total_b = sum(before.busy_us.values()) or 1.0, sum(after.busy_us.values()) or 1.0
    busy = tuple(
        (device, before.busy_us.get(device, 0.0), after.busy_us.get(device, 0.0))
        for device in sorted(set(before.busy_us) | set(after.busy_us))
        if device != UNKNOWN_DEVICE
        if abs(after.busy_us.get(device, 0.0) / total_b - before.busy_us.get(device, 0.0) / total_a) > busy_threshold
    )
    known = UNKNOWN_DEVICE  # an op the trace did not tie to a device did not move: it is not known where it ran
    moved = [m for m in diff.moved if known not in (m[1], m[2])]
    # The same traced function runs the same ops: one that comes or goes between two of its captures is the
    # trace's timing (an input pipeline's op that ran just before the profiler started), not a change.
    added = [a for a in diff.added if a[1] != known] if retraced else []
    removed = [r for r in diff.removed if r[1] != known] if retraced else []
    return PlacementChange(
        step,
        previous_step,
        retraced,
        _names(after) if retraced else (),
        why,
        _unique(moved),
        _unique(added),
        _unique(removed),
        transfers,
        busy,
    )


def _unique(items: list[Any]) -> tuple[Any, ...]:
    """Each entry once (an op that repeats in a step moves once), in order."""
    return tuple(Counter(items))
