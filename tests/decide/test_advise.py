"""advise(): each finding provoked on purpose in a report, found with its numbers, and absent on a clean step."""

from __future__ import annotations

import pytest

from tfdevices import InputError, PlacementReport
from tfdevices.decide.advise import KINDS, Finding, advise


def op(name, device, start, duration, *, type="MatMul", requested=None, launch=None, call=0, kernel_name=None):
    return {
        "name": name,
        "type": type,
        "device": device,
        "requested": device if requested is None else requested,
        "call": call,
        "kernel": type,
        "kernel_name": kernel_name or name,
        "start_us": start,
        "duration_us": duration,
        "launch_us": launch,
        "kernels": [],
    }


def copy(tensor, src, dst, start, duration, nbytes=4096, call=0):
    return {
        "src": src,
        "dst": dst,
        "tensor": tensor,
        "dtype": "float32",
        "shape": [nbytes // 4],
        "bytes": nbytes,
        "send_op": f"{tensor}/_1",
        "recv_op": f"{tensor}/_2",
        "call": call,
        "start_us": start,
        "duration_us": duration,
        "kind": "",
    }


def report(ops, transfers=(), collectives=()):
    return {"version": 3, "ops": list(ops), "transfers": list(transfers), "collectives": list(collectives)}


# a clean step: two replicas that work side by side for the whole step, nothing copied, no input wait
CLEAN = report([op("r0/dense/MatMul", "CPU:0", 0, 100), op("r1/dense/MatMul", "CPU:1", 0, 100)])


def kinds(findings):
    return [f.kind for f in findings]


def test_a_clean_step_gives_no_finding():
    assert advise(CLEAN) == ()
    assert advise(PlacementReport.from_json(__import__("json").dumps(CLEAN))) == ()


def test_a_report_without_times_gives_no_finding():
    untimed = report([{**op("a", "CPU:0", 0, 1), "start_us": None, "duration_us": None}])
    assert advise(untimed) == ()


def test_devices_idle_while_others_work_a_split_without_overlap():
    split = report([op("s0/dense/MatMul", "CPU:0", 0, 60), op("s1/dense/MatMul", "CPU:1", 60, 40)])
    (found,) = advise(split)
    assert found.kind == "idle_devices"
    assert found.time_us == 50.0  # 100 us step; 100 us of work on 2 devices could take 50 us
    assert "CPU:0 busy 60 us (idle 40%)" in found.evidence and "CPU:1 busy 40 us (idle 60%)" in found.evidence
    assert "1.00 of them work at once" in found.evidence
    assert "micro-batches" in found.fix


def test_copies_on_the_critical_path():
    ops = [
        op("a/MatMul", "CPU:0", 0, 40),
        op("b/MatMul", "CPU:1", 60, 40),
        op("c/MatMul", "CPU:0", 0, 95),
        op("d/MatMul", "CPU:1", 0, 30),
    ]
    found = {f.kind: f for f in advise(report(ops, [copy("a/MatMul:0", "CPU:0", "CPU:1", 40, 20)]))}
    assert set(found) == {"copies_on_critical_path"}
    assert found["copies_on_critical_path"].time_us == 20.0
    assert (
        "1 copies on the step's critical path take 20 us of its 100 us (20%)"
        in found["copies_on_critical_path"].evidence
    )
    assert "a/MatMul:0 CPU:0 -> CPU:1 20 us" in found["copies_on_critical_path"].evidence


def test_weights_read_from_another_device_every_step():
    ops = [
        op("m/dense/ReadVariableOp", "CPU:0", 0, 1, type="ReadVariableOp"),
        op("m/dense/MatMul", "CPU:1", 0, 100),
        op("m/other/MatMul", "CPU:0", 1, 99),
    ]
    found = {f.kind: f for f in advise(report(ops, [copy("m/dense/ReadVariableOp:0", "CPU:0", "CPU:1", 1, 3, 65536)]))}
    assert set(found) == {"weights_across_devices"}
    w = found["weights_across_devices"]
    assert w.time_us == 3.0
    assert "1 weight(s) are copied" in w.evidence and "64.0 KiB in 3 us of copies (3% of the step)" in w.evidence
    assert "m/dense/ReadVariableOp on CPU:0 read on CPU:1" in w.evidence
    assert "place_layers" in w.fix


def test_all_reduce_share_of_the_step():
    ops = [op("r0/MatMul", "CPU:0", 0, 70), op("r1/MatMul", "CPU:1", 0, 70)]
    collectives = [
        {
            "name": f"r{i}/allreduce",
            "type": "CollectiveReduceV2",
            "device": f"CPU:{i}",
            "reduction": "Add",
            "dtype": "float32",
            "call": 0,
            "start_us": 70,
            "duration_us": 30,
        }
        for i in range(2)
    ]
    (found,) = advise(report(ops, collectives=collectives))
    assert (found.kind, found.time_us) == ("all_reduce", 30.0)
    assert (
        "all-reduce runs 30 us of the 100 us step (30%): 2 collective op(s) (CollectiveReduceV2 x2) on 2"
        in found.evidence
    )


def test_a_small_all_reduce_is_not_a_finding():
    ops = [op("r0/MatMul", "CPU:0", 0, 100), op("r1/MatMul", "CPU:1", 0, 100)]
    collectives = [{"name": "ar", "type": "CollectiveReduceV2", "device": "CPU:0", "start_us": 98, "duration_us": 2}]
    assert advise(report(ops, collectives=collectives)) == ()


def test_ops_that_fell_back_to_the_cpu_in_a_gpu_step():
    ops = [
        op("m/dense/MatMul", "GPU:0", 0, 100),
        op("m/unique/Unique", "CPU:0", 20, 15, type="Unique", requested=""),
        op("m/asked/Shape", "CPU:0", 40, 5, type="Shape", requested="CPU:0"),
        op("IteratorGetNext", "CPU:0", 0, 1, type="IteratorGetNext", requested=""),
    ]
    (found,) = advise(report(ops))
    assert (found.kind, found.time_us) == ("cpu_fallback", 15.0)
    assert (
        "1 op(s) of a GPU step ran on the CPU without asking for it (15 us, 15% of the step): Unique x1"
        in found.evidence
    )


def test_cpu_ops_in_a_cpu_step_are_not_a_fallback():
    assert advise(report([op("m/unique/Unique", "CPU:0", 0, 100, type="Unique", requested="")])) == ()


def test_an_input_bound_step():
    ops = [op("IteratorGetNext", "CPU:0", 0, 40, type="IteratorGetNext"), op("m/MatMul", "CPU:0", 40, 60)]
    (found,) = advise(report(ops))
    assert (found.kind, found.time_us) == ("input_bound", 40.0)
    assert "waits 40 us of its 100 us (40%) for the next batch (1 iterator op(s): IteratorGetNext)" in found.evidence
    assert "prefetch" in found.fix


def test_a_launch_bound_gpu_step():
    # 5 kernels of 2 us each, launched every 10 us: the GPU waits 8 us before each of the last four
    ops = [op(f"k{i}", "GPU:0", 10 * i + 1, 2, launch=10 * i) for i in range(5)]
    (found,) = advise(report(ops))
    assert (found.kind, found.time_us) == ("launch_bound", 32.0)
    assert "GPU:0 waits 32 us of its 42 us (76%)" in found.evidence
    assert "4 of 4 kernels ran shorter than the time between their launches" in found.evidence
    assert "(median kernel 2.0 us, median launch interval 10.0 us)" in found.evidence
    assert "jit_compile=True" in found.fix


def test_a_gpu_kept_busy_by_early_launches_is_not_launch_bound():
    # launched well ahead: each kernel starts when the previous one ends
    ops = [op(f"k{i}", "GPU:0", 10 * i, 10, launch=i) for i in range(5)]
    assert advise(report(ops)) == ()


def test_findings_are_ordered_by_the_time_at_stake():
    ops = [
        op("IteratorGetNext", "CPU:0", 0, 10, type="IteratorGetNext"),
        op("s0/MatMul", "CPU:0", 10, 60),
        op("s1/MatMul", "CPU:1", 70, 30),
    ]
    found = advise(report(ops))
    assert kinds(found) == ["idle_devices", "input_bound"]
    assert [f.time_us for f in found] == [50.0, 10.0]
    assert all(isinstance(f, Finding) and f.kind in KINDS for f in found)


def test_a_finding_reads_as_one_line():
    (found,) = advise(
        report([op("IteratorGetNext", "CPU:0", 0, 40, type="IteratorGetNext"), op("m/MatMul", "CPU:0", 40, 60)])
    )
    assert str(found).startswith("input_bound (40 us at stake): the step waits 40 us") and " FIX: " in str(found)


@pytest.mark.parametrize("bad", [None, 3, {"no": "ops"}, "not json"])
def test_bad_input_is_refused(bad):
    with pytest.raises(InputError, match="advise|not a placement report"):
        advise(bad)
