"""The placement report's record: its 0.2 names are gone in 0.4.0 (``report.copies``, the call
``report.transfers(src, dst)``); ``transfers`` is a plain tuple and ``transfers_between`` filters it."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from tfdevices.verify.records import OpPlacement, Transfer
from tfdevices.verify.report import PlacementReport

A = Transfer("CPU:0", "CPU:1", "a:0", "float32", (4,), 16)
B = Transfer("CPU:1", "CPU:2", "b:0", "float32", (2,), 8)
REPORT = PlacementReport((OpPlacement("d/MatMul", "MatMul", "CPU:0"),), (A, B))


def test_the_0_2_names_are_gone():
    with pytest.raises(AttributeError, match="no attribute 'copies'"):
        REPORT.copies  # noqa: B018
    with pytest.raises(TypeError, match="not callable"):
        REPORT.transfers("CPU:0", "CPU:1")  # type: ignore[operator]


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        (("CPU:0", "CPU:1"), {}, (A,)),
        ((), {"dst": "CPU:2"}, (B,)),
        (("CPU:*",), {}, (A, B)),
        ((), {}, (A, B)),
    ],
)
def test_transfers_between_filters_by_source_and_destination(args, kwargs, expected):
    assert REPORT.transfers_between(*args, **kwargs) == expected


def test_transfers_is_a_plain_tuple_that_survives_json_pickle_and_replace():
    assert type(REPORT.transfers) is tuple and REPORT.transfers == (A, B)
    assert PlacementReport.from_json(REPORT.to_json()) == REPORT
    assert pickle.loads(pickle.dumps(REPORT)) == REPORT
    assert dataclasses.replace(REPORT, notes=("x",)).transfers == (A, B)
    assert PlacementReport(()).transfers == ()
