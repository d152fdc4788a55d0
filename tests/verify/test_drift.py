"""drift: what changed between two captures, on reports built by hand (exact tables)."""

from __future__ import annotations

import pytest

from tfdevices.verify import OpPlacement, PlacementReport, Transfer
from tfdevices.verify.drift import drift


class _Graph:
    def __init__(self, name: str) -> None:
        self.name = name


def _report(
    placement: dict[str, str], busy: dict[str, float] | None = None, copies: int = 0, graph: _Graph | None = None
) -> PlacementReport:
    ops = tuple(OpPlacement(name, "MatMul", device) for name, device in placement.items())
    transfers = tuple(Transfer("CPU:0", "CPU:1", f"t{i}:0") for i in range(copies))
    return PlacementReport(ops, transfers, graphs=(("call_000", graph),) if graph else (), busy_us=busy or {})


def test_a_moved_op_and_new_transfers_are_a_change():
    change = drift(
        _report({"a": "CPU:0", "b": "CPU:0"}),
        _report({"a": "CPU:0", "b": "CPU:1"}, copies=2),
        step=20,
        previous_step=10,
    )
    assert change.changed and not change.retraced
    assert (change.moved, change.transfers) == ((("b", "CPU:0", "CPU:1"),), (("CPU:0 -> CPU:1", 0, 2),))


def test_the_same_capture_again_is_no_change():
    report = _report({"a": "CPU:0"}, {"CPU:0": 5.0, "CPU:1": 5.0})
    change = drift(report, _report({"a": "CPU:0"}, {"CPU:0": 9.0, "CPU:1": 9.0}), step=2, previous_step=1)
    assert not change.changed  # both devices got slower together: their shares held
    assert change.summary() == "step 2 (since step 1): unchanged"


@pytest.mark.parametrize(
    "after, expected",
    [
        ({"CPU:0": 2.0, "CPU:1": 8.0}, (("CPU:0", 5.0, 2.0), ("CPU:1", 5.0, 8.0))),  # 50/50 -> 20/80: 30 points
        ({"CPU:0": 4.0, "CPU:1": 6.0}, ()),  # 50/50 -> 40/60: 10 points, under the 25-point threshold
    ],
)
def test_busy_time_shifts_by_share(after, expected):
    before = _report({"a": "CPU:0"}, {"CPU:0": 5.0, "CPU:1": 5.0})
    assert drift(before, _report({"a": "CPU:0"}, after), step=2, previous_step=1).busy == expected


def test_ops_that_come_and_go_count_only_after_a_retrace_and_unknown_devices_never():
    same = drift(_report({"a": "CPU:0", "it": "CPU:0"}), _report({"a": "?"}), step=2, previous_step=1)
    assert not same.changed  # no retrace: a missing op is the trace's timing; '?' is not a device move
    old, new = _Graph("step"), _Graph("step")
    change = drift(
        _report({"a": "CPU:0"}, graph=old), _report({"a": "CPU:0", "b": "CPU:1"}, graph=new), step=50, previous_step=40
    )
    assert change.retraced and change.functions == ("step",) and change.added == (("b", "CPU:1"),)
    assert change.summary().startswith("step 50 (since step 40): a new traced function (step); 1 op(s) appeared")
