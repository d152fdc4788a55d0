"""GPU time from the device planes, on XSpaces built in the shapes TensorFlow's GPU tracer writes.

Each trace holds known kernel times, copies and an NCCL kernel; the report's GPU
durations, busy time, copy bytes and collective times must equal what was written.
Times in the builders are microseconds from the trace's first event (here: 40 us).
"""

from __future__ import annotations

import pytest

from tests.xspaces import Space, derived_op, gpu_copy, gpu_kernel, host_call
from tfdevices.verify.building import build_report
from tfdevices.verify.host import read_trace

MATMUL, RELU = "model/dense/MatMul", "model/dense/Relu"


def _host_step(space: Space, at: float = 40.0, context: int = 7) -> None:
    """One call of train_step: the host launches MatMul at +10 us and Relu at +15 us."""
    host_call(
        space,
        "__inference_train_step_12",
        at,
        at + 160,
        context,
        [(MATMUL, "MatMul", at + 10, 3.0), (RELU, "Relu", at + 15, 2.0)],
    )


def _streams(space: Space, *, annotated: bool = True, legacy: bool = False) -> None:
    """GPU:0 runs MatMul as two kernels (20 + 4 us), Relu (2 us), copies and an NCCL all-reduce (30 us)."""

    def op(name: str, kind: str) -> str:
        return f"{name}:{kind}" if annotated else ""

    gpu_kernel(space, 0, 13, "volta_sgemm_128x64_nn", 100, 20, op(MATMUL, "MatMul"), legacy=legacy)
    gpu_kernel(space, 0, 13, "splitKreduce_kernel", 121, 4, op(MATMUL, "MatMul"), legacy=legacy)
    gpu_kernel(space, 0, 13, "void Eigen::internal::EigenMetaKernel<relu>", 130, 2, op(RELU, "Relu"), legacy=legacy)
    gpu_kernel(space, 0, 20, "ncclKernel_AllReduce_RING_LL_Sum_float", 140, 30, legacy=legacy)
    gpu_copy(space, 0, 14, "H2D", 90, 6, 4096, op="IteratorGetNext:IteratorGetNext")
    gpu_copy(space, 0, 15, "D2H", 175, 1.5, 2048)


def _report(space: Space):
    return build_report(read_trace(space.bytes()))


def _op(report, name):
    (op,) = [o for o in report.ops if o.name == name]
    return op


@pytest.mark.parametrize("legacy", [False, True], ids=["tf_op-by-reference", "level-0-inline"])
def test_raw_streams_time_each_op_by_its_kernels_on_the_gpu(legacy):
    space = Space()
    _host_step(space)
    _streams(space, legacy=legacy)
    report = _report(space)
    matmul, relu = _op(report, MATMUL), _op(report, RELU)
    assert (matmul.device, matmul.type) == ("GPU:0", "MatMul")
    assert (matmul.start_us, matmul.duration_us, matmul.launch_us) == (60.0, 24.0, 10.0)  # union of 20 + 4 us
    assert matmul.kernels == ("volta_sgemm_128x64_nn", "splitKreduce_kernel")
    assert (relu.start_us, relu.duration_us, relu.launch_us) == (90.0, 2.0, 15.0)
    assert report.busy_us["GPU:0"] == 56.0  # 20 + 4 + 2 + 30: kernels only, copies run on copy engines


def test_copies_and_nccl_kernels_carry_their_bytes_and_gpu_time():
    space = Space()
    _host_step(space)
    _streams(space)
    report = _report(space)
    h2d, d2h = report.transfers_between(dst="GPU:0"), report.transfers_between(src="GPU:0")
    assert [(t.src, t.kind, t.bytes, t.start_us, t.duration_us) for t in h2d] == [("CPU:0", "H2D", 4096, 50.0, 6.0)]
    assert h2d[0].tensor == "IteratorGetNext:0"
    assert [(t.dst, t.kind, t.bytes, t.duration_us) for t in d2h] == [("CPU:0", "D2H", 2048, 1.5)]
    (nccl,) = report.collectives
    assert (nccl.type, nccl.device, nccl.start_us, nccl.duration_us) == ("AllReduce", "GPU:0", 100.0, 30.0)
    assert "AllReduce: 1" in report.summary()


def test_a_derived_tensorflow_ops_line_gives_the_ops_their_gpu_time():
    space = Space()
    _host_step(space)
    _streams(space, annotated=False)  # kernels without annotations: only the derived line names the ops
    derived_op(space, 0, f"{MATMUL}:MatMul", 100, 25)
    derived_op(space, 0, f"{RELU}:Relu", 130, 2)
    report = _report(space)
    assert (_op(report, MATMUL).start_us, _op(report, MATMUL).duration_us) == (60.0, 25.0)
    assert (_op(report, RELU).start_us, _op(report, RELU).duration_us) == (90.0, 2.0)
    assert report.busy_us["GPU:0"] == 56.0


def test_each_gpu_execution_belongs_to_the_launch_before_it():
    space = Space()
    _host_step(space, at=40.0, context=7)
    _host_step(space, at=240.0, context=8)
    gpu_kernel(space, 0, 13, "sgemm", 100, 20, f"{MATMUL}:MatMul", group=1)
    gpu_kernel(space, 0, 13, "sgemm", 300, 7, f"{MATMUL}:MatMul", group=2)
    report = _report(space)
    matmuls = sorted((op.call, op.launch_us, op.start_us, op.duration_us) for op in report.ops if op.name == MATMUL)
    assert matmuls == [(0, 10.0, 60.0, 20.0), (1, 210.0, 260.0, 7.0)]


def test_a_gpu_op_without_device_kernels_keeps_host_time_and_says_so():
    space = Space()
    _host_step(space)
    gpu_kernel(space, 0, 13, "sgemm", 100, 20, f"{MATMUL}:MatMul")
    report = _report(space)
    relu = _op(report, RELU)
    assert (relu.device, relu.start_us, relu.duration_us, relu.launch_us, relu.kernels) == (
        "GPU:0",
        15.0,
        2.0,
        None,
        (),
    )
    assert any("1 op(s) on GPU:0 ran no kernel on the device" in note for note in report.notes)


def test_two_gpus_are_timed_on_their_own_planes():
    space = Space()
    host_call(space, "__inference_step_3", 40, 200, 7, [(MATMUL, "MatMul", 50, 3)])
    host_call(space, "__inference_step_4", 40, 200, 9, [("replica_1/" + MATMUL, "MatMul", 52, 3)])
    gpu_kernel(space, 0, 13, "sgemm", 100, 20, f"{MATMUL}:MatMul")
    gpu_kernel(space, 1, 13, "sgemm", 110, 11, f"replica_1/{MATMUL}:MatMul")
    gpu_copy(space, 1, 16, "P2P", 130, 3, 512, dest=0)
    report = _report(space)
    assert {op.name: (op.device, op.duration_us) for op in report.ops} == {
        MATMUL: ("GPU:0", 20.0),
        "replica_1/" + MATMUL: ("GPU:1", 11.0),
    }
    assert report.busy_us == {"GPU:0": 20.0, "GPU:1": 11.0}
    assert [(t.src, t.dst, t.kind, t.bytes) for t in report.transfers] == [("GPU:1", "GPU:0", "P2P", 512)]


def test_a_cpu_only_trace_is_unchanged_by_the_gpu_reading():
    space = Space()
    host_call(space, "__inference_step_3", 40, 200, 7, [(MATMUL, "_MklMatMul", 50, 3)])
    report = _report(space)
    (op,) = report.ops
    assert (op.device, op.type, op.start_us, op.duration_us, op.launch_us, op.kernels) == (
        "CPU:0",
        "MatMul",
        10.0,
        3.0,
        None,
        (),
    )
    assert report.busy_us == {"CPU:0": 3.0}


def test_json_round_trip_keeps_the_gpu_fields():
    space = Space()
    _host_step(space)
    _streams(space)
    report = _report(space)
    back = type(report).from_json(report.to_json())
    assert back.ops == report.ops and back.transfers == report.transfers and back.collectives == report.collectives
    assert back.busy_us == report.busy_us


def test_version_2_json_still_reads():
    old = (
        '{"version": 2, "ops": [{"name": "a", "type": "MatMul", "device": "CPU:0", "requested": "", "call": 0,'
        ' "kernel": "MatMul", "kernel_name": "a", "start_us": 1.0, "duration_us": 2.0}], "transfers": [],'
        ' "collectives": [{"name": "c", "type": "CollectiveReduceV2", "device": "CPU:0", "reduction": "Add",'
        ' "dtype": "float32", "call": 0}], "busy_us": {"CPU:0": 2.0}, "notes": []}'
    )
    from tfdevices.verify import PlacementReport

    report = PlacementReport.from_json(old)
    assert (report.ops[0].launch_us, report.ops[0].kernels, report.collectives[0].duration_us) == (None, (), None)


def test_a_capture_counts_gpu_work_it_did_not_launch_without_reporting_it_as_ops():
    from tfdevices.verify.recording import Recorder

    space = Space()
    _host_step(space)
    gpu_kernel(space, 0, 13, "sgemm", 100, 20, f"{MATMUL}:MatMul")
    gpu_kernel(space, 0, 17, "prefetch_copy_kernel", 30, 5, "other_thread/Identity:Identity")  # before any launch
    report = build_report(read_trace(space.bytes()), Recorder())
    assert "other_thread/Identity" not in {op.name for op in report.ops}
    assert report.busy_us["GPU:0"] == 25.0
    assert any("1 kernel execution(s) on GPU:0 belong to no captured op" in note for note in report.notes)


def test_the_chrome_trace_shows_gpu_time_with_the_launch_and_kernels():
    from tfdevices.tensorboard.trace import chrome_trace

    space = Space()
    _host_step(space)
    _streams(space)
    events = chrome_trace(_report(space))["traceEvents"]
    (matmul,) = [e for e in events if e.get("name") == MATMUL]
    assert (matmul["ts"], matmul["dur"], matmul["args"]["launched at (host, us)"]) == (60.0, 24.0, 10.0)
    assert matmul["args"]["GPU kernels"] == ["volta_sgemm_128x64_nn", "splitKreduce_kernel"]
    assert {e["args"]["memcpy"] for e in events if e.get("cat") == "transfer" and e["ph"] == "X"} == {"H2D", "D2H"}
