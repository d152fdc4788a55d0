"""A report's ops as the builder makes them: rows first, records when read, each record the dataclass' own.

The builder keeps each op as a row of :class:`OpPlacement`'s first nine fields (``PendingOps``) and makes the
records when ``report.ops`` is first read (``OpsField``), through ``make_op``, which sets the slots by plain
assignment and then gives the object its class. What a reader sees must not tell the two apart.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from tfdevices.verify import PlacementReport
from tfdevices.verify.records import OpPlacement, PendingOps, make_op

ROWS = [
    ("seq/dense/MatMul", "MatMul", "CPU:0", "", 0, "_FusedMatMul", "seq/dense/Relu", 1.5, 0.25),
    ("seq/dense/Relu", "Relu", "CPU:0", "CPU:0", 0, "_FusedMatMul", "seq/dense/Relu", 1.5, 0.25),
    ("f", "XlaCluster", "?", "", 3, "XlaCluster", "f", None, None),
]


def test_make_op_makes_the_dataclass_own_record() -> None:
    for row in ROWS:
        made, own = make_op(*row), OpPlacement(*row)
        assert type(made) is OpPlacement
        assert made == own and hash(made) == hash(own) and repr(made) == repr(own)
        assert dataclasses.asdict(made) == dataclasses.asdict(own)
        assert pickle.loads(pickle.dumps(made)) == own
        assert dataclasses.replace(made, device="CPU:1") == dataclasses.replace(own, device="CPU:1")
    with pytest.raises(dataclasses.FrozenInstanceError):  # frozen, as the dataclass' own
        setattr(made, "device", "CPU:1")  # noqa: B010 (mypy knows the field is read-only)


def test_a_report_of_rows_reads_as_a_report_of_records() -> None:
    def pending() -> PlacementReport:
        return PlacementReport(PendingOps(list(ROWS)), busy_us={"CPU:0": 0.25})  # type: ignore[arg-type]

    own = PlacementReport(tuple(OpPlacement(*row) for row in ROWS), busy_us={"CPU:0": 0.25})
    report = pending()
    assert report.ops == own.ops and type(report.ops) is tuple
    assert report.ops is report.ops  # made once, then kept
    assert pending() == own and repr(pending()) == repr(own) and pending().to_json() == own.to_json()
    assert dataclasses.asdict(pending()) == dataclasses.asdict(own)
    assert dataclasses.replace(pending(), cold=True) == dataclasses.replace(own, cold=True)
    assert pickle.loads(pickle.dumps(pending())) == own  # its rows travel, made when read
    assert copy.deepcopy(pending()) == own
    assert pending().devices == own.devices and pending().summary() == own.summary()
