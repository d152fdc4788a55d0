"""XLA on GPUs and CPUs: real H200 profiles read by module and fusion; a CPU ``jit_compile=True`` cluster counted once.

The H200 profiles (``tests/data/profiles``, made by ``xla.sh`` beside the real GPU outputs):
JAX's XLA through the GPU runtime and CUPTI tracer TensorFlow's ``jit_compile=True`` uses.
Every expected figure is read from the file itself with the schema (kernels on the GPU's
plane, their spans, their ``hlo_module``/``hlo_op`` stats), not written here.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers import REPO
from tests.xspaces import Space, gpu_kernel
from tfdevices.core.errors import InputError
from tfdevices.verify import XLA_CLUSTER, read_profile
from tfdevices.verify.clusters import cluster_runs
from tfdevices.verify.records import union_length
from tfdevices.verify.xplane import xplane_module

PROFILES = os.path.join(REPO, "tests", "data", "profiles")
XLA_STEP = os.path.join(PROFILES, "h200_jax_xla_step.xplane.pb")
COMMAND_BUFFER = os.path.join(PROFILES, "h200_jax_command_buffer.xplane.pb")
TRAIN_STEP = os.path.join(PROFILES, "h200_jax_train_step.xplane.pb")


def _space(path: str):
    with open(path, "rb") as f:
        return xplane_module().XSpace.FromString(f.read())


def _kernels(path: str) -> list[dict]:
    """Each kernel event of the file's GPU plane: its name, span (ps) and string stats."""
    plane = next(p for p in _space(path).planes if p.name == "/device:GPU:0")
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    out = []
    for line in plane.lines:
        for event in line.events:
            stats = {names[s.metadata_id]: names.get(s.ref_value) or s.str_value for s in event.stats}
            if "kernel_details" in stats:
                start = line.timestamp_ns * 1000 + event.offset_ps
                out.append(
                    dict(
                        stats,
                        kernel=plane.event_metadata[event.metadata_id].name,
                        span=(start, start + event.duration_ps),
                    )
                )
    return out


def _without(path: str, tmp_path, *planes: str) -> str:
    space = _space(path)
    kept = [p for p in space.planes if p.name not in planes]
    del space.planes[:]
    space.planes.extend(kept)
    out = tmp_path / os.path.basename(path)
    out.write_bytes(space.SerializeToString())
    return str(out)


@pytest.mark.parametrize("path", [XLA_STEP, TRAIN_STEP, COMMAND_BUFFER])
def test_a_real_h200_xla_profile_reads_as_its_modules_kernels_by_the_gpus_clock(path):
    kernels = _kernels(path)
    report = read_profile(path)
    assert report.kernel_counts == {"GPU:0": len(kernels)}
    assert report.busy_us["GPU:0"] == round(union_length([k["span"] for k in kernels]) / 1e6, 3)
    assert f"GPU busy (device clock): GPU:0: {report.busy_us['GPU:0']:.0f} us" in report.summary()
    on_gpu = [op for op in report.ops if op.device == "GPU:0"]
    assert {op.kernel for op in on_gpu} == {XLA_CLUSTER}
    modules = {k["hlo_module"] for k in kernels}
    assert set(cluster_runs(on_gpu)) == modules == {op.kernel_name for op in on_gpu}
    for module in modules:  # each module: its kernels' runs, their time counted once
        mine = [k for k in kernels if k["hlo_module"] == module]
        assert cluster_runs(on_gpu)[module].runs == len(mine)
        assert cluster_runs(on_gpu)[module].us == round(union_length([k["span"] for k in mine]) / 1e6, 3)
    assert {op.kernels for op in on_gpu} == {(k["kernel"],) for k in kernels}  # grouped by fusion
    assert "no ops" not in report.summary() and "older than 2.4" not in report.summary()


def test_the_xla_step_is_one_module_of_three_fusions_tied_to_its_ops():
    report = read_profile(XLA_STEP)
    assert report.devices == ("GPU:0",)
    assert {op.kernels[0] for op in report.ops} == {
        "gemm_fusion_dot_general_1",
        "input_reduce_fusion",
        "input_reduce_fusion_1",
    }
    matmul = {op.name for op in report.ops if op.kernels == ("gemm_fusion_dot_general_1",)}
    assert {"jit(<lambda>)/dot_general", "jit(<lambda>)/tanh"} <= matmul  # the matmul and the tanh fused into it
    assert any("module jit__lambda (3 fusion(s))" in note for note in report.notes), report.notes


def test_the_train_step_names_its_ops_copies_and_what_its_hlo_does_not_say():
    report = read_profile(TRAIN_STEP)
    fused = {op.name for op in report.ops if op.kernels == ("gemm_fusion_dot_2",)}
    assert "jit(train_step)/jvp()/dot_general" in fused
    kinds = sorted((t.kind, t.bytes) for t in report.transfers)
    assert kinds == [("D2H", 4), ("D2H", 1024), ("H2D", 1024), ("H2D", 524288)]
    # jit_evaluate ran as a CUDA graph XLA built after its HLO (hlo_op: command_buffer_1): its kernels' own names
    # find their fusions, and the ops those came from
    evaluate = {op.name for op in report.ops if op.kernel_name == "jit_evaluate"}
    assert "jit(evaluate)/dot_general" in evaluate and "command_buffer_1" not in evaluate
    assert not any("not tied" in note for note in report.notes), report.notes


def test_a_command_buffers_kernels_find_their_fusions_by_name():
    kernels = _kernels(COMMAND_BUFFER)
    assert {k["hlo_op"] for k in kernels} == {"command_buffer_1"}  # the graph, not the fusion
    report = read_profile(COMMAND_BUFFER)
    by_kernel: dict[str, set[str]] = {}
    for op in report.ops:
        by_kernel.setdefault(op.kernels[0], set()).add(op.name)
    assert "jit(step)/tanh" in by_kernel["wrapped_tanh"]
    assert "jit(step)/add" in by_kernel["loop_add_fusion"]
    (gemm,) = {k["kernel"] for k in kernels if k["kernel"].endswith("_cublas")}
    assert by_kernel[gemm] == {gemm}  # a library's kernel in the graph: no instruction, its own name
    assert any(f"fusion(s) or kernel(s) {gemm} not tied" in note for note in report.notes), report.notes


def test_without_hlo_metadata_fusions_are_named_and_the_notes_say_so(tmp_path):
    report = read_profile(_without(XLA_STEP, tmp_path, "/host:metadata"))
    assert {op.name for op in report.ops} == {
        "gemm_fusion_dot_general.1",
        "input_reduce_fusion",
        "input_reduce_fusion.1",
    }
    assert {op.type for op in report.ops} == {"gemm_fusion_dot_general", "input_reduce_fusion"}
    assert any("the profile holds no HLO metadata" in note for note in report.notes), report.notes


def test_a_kernel_of_no_op_and_no_module_is_an_op_under_its_own_name(tmp_path):
    space = Space()
    gpu_kernel(space, 0, 7, "volta_sgemm_128x64_nn", 10.0, 4.0)
    report = read_profile(space.write(str(tmp_path / "library.xplane.pb")))
    assert [(op.name, op.device, op.duration_us) for op in report.ops] == [("volta_sgemm_128x64_nn", "GPU:0", 4.0)]
    assert any("name no TensorFlow op and no XLA module" in note for note in report.notes)


@pytest.mark.parametrize(
    "build, found",
    [
        (lambda tmp: _without(XLA_STEP, tmp, "/device:GPU:0"), "an XLA or JAX profile (3 HLO module(s))"),
        (lambda tmp: _without(XLA_STEP, tmp, "/device:GPU:0", "/host:metadata"), "from no TensorFlow executor"),
        (lambda tmp: _empty(tmp, "/host:CPU"), "an empty profile"),
        (lambda tmp: _empty(tmp, "/device:TPU:0"), "a TPU profile"),
    ],
)
def test_a_profile_of_no_op_names_what_it_holds(tmp_path, build, found):
    with pytest.raises(InputError) as err:
        read_profile(build(tmp_path))
    assert found in str(err.value) and "HINT:" in str(err.value), err.value
    assert "older than 2.4" not in str(err.value)


def _empty(tmp_path, plane: str) -> str:
    space = Space()
    space.plane(plane)
    return space.write(str(tmp_path / "empty.xplane.pb"))


@pytest.mark.tensorflow
def test_a_jit_compiled_capture_on_a_cpu_counts_its_cluster_once(tf4):
    tf = tf4
    from tfdevices.tensorboard.trace import chrome_trace
    from tfdevices.verify import capture

    @tf.function(jit_compile=True)
    def step(x, w):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0)

    x = tf.ones([64, 64])
    with tf.device("/CPU:0"):
        report = capture(step, x, x)
    ((name, cluster),) = cluster_runs(report.ops).items()
    assert cluster.runs == 1 and len(cluster.ops) == len(report.ops) > 3
    assert {op.duration_us for op in report.ops} == {cluster.us}  # one run's time, shared
    assert report.kernel_counts == {"CPU:0": 1} and report.busy_us["CPU:0"] == pytest.approx(cluster.us, abs=0.01)
    assert f"{name} on CPU:0 ({len(cluster.ops)} ops; 1 run(s), {cluster.us:.0f} us in all)" in report.summary()
    assert "**XLA clusters: 1**" in report.to_markdown()
    slices = [e for e in chrome_trace(report)["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["dur"]) for e in slices] == [(name, cluster.us)]
    assert slices[0]["args"]["ops compiled together (XLA)"] == list(cluster.ops)
