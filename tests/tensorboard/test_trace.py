"""The Chrome trace of a captured step (``traceEvents`` JSON)."""

from __future__ import annotations

import json
import os

import pytest

from tests.tensorboard.test_views import _timed_report
from tfdevices.core.errors import InputError
from tfdevices.tensorboard.trace import chrome_trace, write_trace

# one worker builds the captures and the tensorboard server these tests share
pytestmark = pytest.mark.xdist_group("dashboard")


def test_trace_file_is_json_with_one_track_per_device_and_positive_durations(tmp_path):
    report = _timed_report()
    path = write_trace(report, tmp_path / "step.trace.json")
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    tracks = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(tracks.values()) == ["CPU:0", "CPU:1"]
    slices = [e for e in events if e["ph"] == "X" and e.get("cat") != "transfer"]
    assert sorted((tracks[e["pid"]], e["name"]) for e in slices) == sorted(
        (op["device"], op["name"]) for op in report["ops"]
    )
    assert all(e["dur"] > 0 for e in slices)
    assert [e["ts"] for e in slices] == [op["start_us"] for op in report["ops"]]
    (copy,) = [e for e in events if e["ph"] == "X" and e.get("cat") == "transfer"]
    assert tracks[copy["pid"]] == "CPU:0" and copy["args"]["to"] == "CPU:1" and copy["dur"] == 12.0
    starts = [e for e in events if e["ph"] == "s"]
    ends = [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(ends) == 1 and tracks[ends[0]["pid"]] == "CPU:1"


def test_trace_needs_op_times(tmp_path):
    untimed = {"ops": [{"name": "m/MatMul", "type": "MatMul", "device": "CPU:0"}], "transfers": []}
    with pytest.raises(InputError, match=r"^the report has 1 op\(s\), 1 without start_us/duration_us"):
        write_trace(untimed, tmp_path / "t.json")
    with pytest.raises(InputError, match="folder .* does not exist"):
        write_trace(_timed_report(), tmp_path / "missing" / "t.json")
    with pytest.raises(InputError, match="expected a PlacementReport or its JSON dict, got str"):
        chrome_trace("report")


def test_trace_of_a_real_capture(to_device_report, tmp_path):
    path = write_trace(to_device_report, tmp_path / "real.trace.json")
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    tracks = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(tracks.values()) == list(to_device_report.devices) == ["CPU:0", "CPU:1", "CPU:2"]
    slices = [e for e in events if e["ph"] == "X" and e.get("cat") != "transfer"]
    assert len(slices) == len(to_device_report.ops) and all(e["dur"] > 0 for e in slices)
    assert {tracks[e["pid"]] for e in slices} == set(to_device_report.op_counts)


def test_the_cli_writes_the_trace_of_a_stored_run(placement_logdir, tmp_path):
    from tests.helpers import run_cli

    out = tmp_path / "step.trace.json"
    proc = run_cli("placement", os.path.join(placement_logdir, "to_device"), "--trace", str(out))
    assert proc.returncode == 0 and proc.stdout.startswith(f"wrote {out}"), proc.stderr
    with open(out, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {"CPU:0", "CPU:1", "CPU:2"}
    bad = run_cli("placement", os.path.join(placement_logdir, "to_device"), "--trace", str(tmp_path))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert (
        bad.stderr.startswith(f"tfdevices placement: error: --trace '{tmp_path}': cannot write it")
        and "HINT:" in bad.stderr
    )
