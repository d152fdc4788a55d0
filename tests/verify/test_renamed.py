"""Names renamed in 0.3.0 still answer for one version, with a DeprecationWarning that names the new one:
``PlacementReport.copies`` (now ``transfers``) and the call ``report.transfers(src, dst)`` (now
``transfers_between``); the new names do not warn, and the report is the same record as before."""

from __future__ import annotations

import dataclasses
import pickle
import warnings

import pytest

from tfdevices.verify.records import OpPlacement, Transfer
from tfdevices.verify.report import PlacementReport

A = Transfer("CPU:0", "CPU:1", "a:0", "float32", (4,), 16)
B = Transfer("CPU:1", "CPU:2", "b:0", "float32", (2,), 8)
REPORT = PlacementReport((OpPlacement("d/MatMul", "MatMul", "CPU:0"),), (A, B))


def test_copies_is_transfers_and_warns_with_the_new_name():
    with pytest.warns(DeprecationWarning, match=r"PlacementReport.copies is PlacementReport.transfers since .*0\.3\.0"):
        copies = REPORT.copies
    assert copies == (A, B) == REPORT.transfers


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        (("CPU:0", "CPU:1"), {}, (A,)),
        ((), {"dst": "CPU:2"}, (B,)),
        (("CPU:*",), {}, (A, B)),
        ((), {}, (A, B)),
    ],
)
def test_the_old_call_form_filters_as_transfers_between_and_warns(args, kwargs, expected):
    with pytest.warns(DeprecationWarning, match=r"transfers\(src, dst\) is PlacementReport.transfers_between"):
        got = REPORT.transfers(*args, **kwargs)
    assert got == expected == REPORT.transfers_between(*args, **kwargs)


def test_the_new_names_do_not_warn_and_the_record_is_unchanged():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert REPORT.transfers == (A, B) and REPORT.transfers_between("CPU:1") == (B,)
        assert len(REPORT.transfers) == 2 and list(REPORT.transfers) == [A, B]
        assert repr(REPORT.transfers) == repr((A, B))
        assert PlacementReport.from_json(REPORT.to_json()) == REPORT
        assert pickle.loads(pickle.dumps(REPORT)) == REPORT
        again = dataclasses.replace(REPORT, notes=("x",))
        assert again.transfers == (A, B) and callable(again.transfers)
        assert PlacementReport(()).transfers == ()


def test_a_bad_device_in_the_old_call_form_is_the_same_error():
    from tfdevices.core.errors import SpecError

    with pytest.warns(DeprecationWarning, match="transfers_between"), pytest.raises(SpecError, match="src"):
        REPORT.transfers("not a device")
