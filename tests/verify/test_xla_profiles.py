"""XLA on GPUs and CPUs: real H200 profiles read by module and fusion; a CPU ``jit_compile=True`` cluster counted once.

The H200 profiles (``tests/data/profiles``, their README says how each was made): JAX's XLA
through the GPU runtime and CUPTI tracer TensorFlow's ``jit_compile=True`` uses. Every
expected figure is read from the file itself with the schema (kernels on the GPU's plane,
their spans, their ``hlo_module``/``hlo_op`` stats), not written here. A step profiled with
XLA's command buffers (its defaults) is held to the same step profiled without them, where
every kernel names its own instruction: the ground truth. Damaged copies (a computation
missing from the HLO, instructions out of order, a graph with more kernels than
instructions) must say why their kernels are not tied, for how much of the time, and the fix.
"""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest

from tests.helpers import REPO
from tests.xspaces import Space, gpu_kernel, hlo_pb2
from tfdevices.core.errors import InputError
from tfdevices.verify import XLA_CLUSTER, read_profile
from tfdevices.verify.clusters import cluster_runs
from tfdevices.verify.records import union_length
from tfdevices.verify.xplane import xplane_module

PROFILES = os.path.join(REPO, "tests", "data", "profiles")
XLA_STEP = os.path.join(PROFILES, "h200_jax_xla_step.xplane.pb")
COMMAND_BUFFER = os.path.join(PROFILES, "h200_jax_command_buffer.xplane.pb")
TRAIN_STEP = os.path.join(PROFILES, "h200_jax_train_step.xplane.pb")
TRANSFORMER = os.path.join(PROFILES, "h200_jax_transformer.xplane.pb")
TRANSFORMER_PLAIN = os.path.join(PROFILES, "h200_jax_transformer_no_cmdbuf.xplane.pb")
CONVNET = os.path.join(PROFILES, "h200_jax_convnet.xplane.pb")
CONVNET_PLAIN = os.path.join(PROFILES, "h200_jax_convnet_no_cmdbuf.xplane.pb")
FIX = "XLA_FLAGS=--xla_gpu_enable_command_buffer="


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
            stats = {names[s.metadata_id]: names.get(s.ref_value) or s.str_value or s.int64_value for s in event.stats}
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
    assert any("module jit__lambda (3 instruction(s), 5 run(s))" in note for note in report.notes), report.notes


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


def test_a_command_buffers_kernels_find_their_instructions_the_cublas_gemm_too():
    kernels = _kernels(COMMAND_BUFFER)
    assert {k["hlo_op"] for k in kernels} == {"command_buffer_1"}  # the graph, not the fusion
    report = read_profile(COMMAND_BUFFER)
    by_kernel: dict[str, set[str]] = {}
    for op in report.ops:
        by_kernel.setdefault(op.kernels[0], set()).add(op.name)
    assert "jit(step)/tanh" in by_kernel["wrapped_tanh"]
    assert "jit(step)/add" in by_kernel["loop_add_fusion"]
    (gemm,) = {k["kernel"] for k in kernels if k["kernel"].endswith("_cublas")}
    assert by_kernel[gemm] == {"jit(step)/dot_general"}  # the library's kernel: the custom call's op
    assert {op.fusion for op in report.ops if op.kernels == (gemm,)} == {"custom-call.1"}
    assert {op.graph for op in report.ops} == {"command_buffer_1"}
    assert not any("not tied" in note for note in report.notes), report.notes


def _runs(path: str) -> list[tuple[str, str, float]]:
    """Each kernel run of a report, in time order: its kernel, its instruction (``fusion``), its start."""
    seen = {(op.kernels[0], op.fusion, op.start_us) for op in read_profile(path).ops}
    return sorted(seen, key=lambda run: run[2])


@pytest.mark.parametrize("graphs, plain", [(TRANSFORMER, TRANSFORMER_PLAIN), (CONVNET, CONVNET_PLAIN)])
def test_every_command_buffer_kernel_names_the_instruction_the_step_without_command_buffers_names(graphs, plain):
    inside = _kernels(graphs)
    assert sum(k["hlo_op"].startswith("command_buffer_") for k in inside) >= 42  # 1,608 and 42 of their runs
    truth = [k["hlo_op"] for k in sorted(_kernels(plain), key=lambda k: k["span"])]  # each kernel's own instruction
    assert not any(op.startswith("command_buffer_") for op in truth)
    runs = _runs(graphs)
    assert [run[0] for run in runs] == [k["kernel"] for k in sorted(inside, key=lambda k: k["span"])]
    assert [run[1] for run in runs] == truth  # kernel by kernel, cuBLAS and cuDNN calls included


def _gpu_time(path: str) -> dict[str, float]:
    """The report's GPU time by op type (what its Markdown's table shows)."""
    from tfdevices.verify.clusters import type_times

    return type_times(read_profile(path).ops)["GPU:0"]


def _tied_share(path: str) -> float:
    (note,) = [n for n in read_profile(path).notes if "XLA kernel run(s) on GPU:0" in n]
    return float(re.search(r"; ([\d.]+)% of their summed time", note)[1])


def test_a_transformer_step_reads_alike_with_and_without_command_buffers():
    graphs, plain = _gpu_time(TRANSFORMER), _gpu_time(TRANSFORMER_PLAIN)
    assert set(graphs) == set(plain) and len(plain) > 20
    total = sum(plain.values())
    for op_type, us in plain.items():  # within 5%, or 5 us for the smallest (3 runs of a few-us kernel: noise)
        assert abs(graphs[op_type] - us) <= max(0.05 * us, 5.0), (op_type, graphs[op_type], us)
    assert sum(us for t, us in plain.items() if abs(graphs[t] - us) <= 0.05 * us) > 0.999 * total
    assert plain["dot_general"] > 0.4 * total  # the matrix products: cuBLAS's kernels are most of them
    assert _tied_share(TRANSFORMER) >= 99.0 and _tied_share(TRANSFORMER_PLAIN) >= 99.0
    (note,) = [n for n in read_profile(TRANSFORMER).notes if "XLA kernel run(s) on GPU:0" in n]
    assert "1608 in command buffers (command_buffer_1), 1608 of them tied to their instruction by the order" in note
    cublas = [k for k in _kernels(TRANSFORMER) if k["kernel"].startswith("nvjet_")]
    assert len(cublas) == 255
    report, truth = read_profile(TRANSFORMER), read_profile(TRANSFORMER_PLAIN)
    cublas_ops = Counter(op.type for op in report.ops if op.kernels[0].startswith("nvjet_"))
    assert cublas_ops == Counter(op.type for op in truth.ops if op.kernels[0].startswith("nvjet_"))
    assert cublas_ops.most_common(1)[0][0] == "dot_general"
    assert "| GPU:0 | dot_general |" in report.to_markdown()


def test_the_runs_of_a_module_are_its_calls():
    report = read_profile(TRANSFORMER)
    assert Counter(op.call for op in report.ops if op.kernels == ("loop_broadcast_fusion",)) == {0: 1, 1: 1, 2: 1}
    per_call = Counter(run[0] for run in {(op.call, op.start_us) for op in report.ops})
    assert per_call == {0: 536, 1: 536, 2: 536}  # 1,608 kernel runs, 3 steps


def test_a_kernel_xla_made_itself_counts_under_the_ops_that_use_its_output():
    report = read_profile(CONVNET)
    made = {op.type for op in report.ops if op.fusion == "loop_broadcast_fusion"}
    assert made == {"select_and_scatter", "reduce_window_max", "select_n"}
    assert not any("not tied" in note for note in report.notes), report.notes
    assert any("loop_broadcast_fusion, which XLA made itself" in note for note in report.notes), report.notes
    convolutions = {op.fusion for op in report.ops if op.type == "conv_general_dilated"}
    assert {"cudnn-conv.3", "cudnn-conv-bw-filter.5", "cudnn-conv-bw-input.2"} <= convolutions
    assert {op.graph for op in report.ops} == {"", "command_buffer_1", "command_buffer_12"}


def test_the_instructions_table_gives_each_its_share_of_the_devices_kernel_time():
    from tfdevices.verify.clusters import fusion_times

    report = read_profile(TRANSFORMER)
    fusions = fusion_times(report.ops)
    assert len(fusions) == 536 and {f.runs for f in fusions} == {3}
    assert sum(f.us for f in fusions) == pytest.approx(sum(_gpu_time(TRANSFORMER).values()), rel=1e-6)
    top = fusions[0]
    markdown = report.to_markdown()
    assert f"| jit_step | `{top.fusion}` | GPU:0 | command_buffer_1 | 3 | {top.us:.0f} us |" in markdown


def _with_hlo(tmp_path, path: str, change) -> str:
    """A copy of ``path`` whose module ``jit_step``'s HLO went through ``change(module proto)``."""
    space = _space(path)
    plane = next(p for p in space.planes if p.name == "/host:metadata")
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    for meta in plane.event_metadata.values():
        for stat in meta.stats:
            if names[stat.metadata_id] == "Hlo Proto" and meta.name.startswith("jit_step("):
                proto = hlo_pb2().HloProto.FromString(stat.bytes_value)
                change(proto.hlo_module)
                stat.bytes_value = proto.SerializeToString()
    out = tmp_path / "damaged.xplane.pb"
    out.write_bytes(space.SerializeToString())
    return str(out)


def _entry(module):
    return next(c for c in module.computations if c.id == module.entry_computation_id)


def _untied_note(report, why: str) -> str:
    """The one note on kernels not tied: it names the fix, then why (its first words)."""
    (note,) = [n for n in report.notes if "not tied" in n]
    assert FIX in note and f": {why}" in note, note
    return note


def _share(kernels: list[dict], chosen: list[dict]) -> str:
    spent = sum(k["span"][1] - k["span"][0] for k in chosen)
    return f"{100 * spent / sum(k['span'][1] - k['span'][0] for k in kernels):.1f}% of the XLA kernels' time"


def test_a_computation_missing_from_the_hlo_leaves_its_graphs_kernels_untied_and_says_why(tmp_path):
    def drop_entry(module):
        kept = [c for c in module.computations if c.id != module.entry_computation_id]
        del module.computations[:]
        module.computations.extend(kept)

    report = read_profile(_with_hlo(tmp_path, TRANSFORMER, drop_entry))
    kernels = _kernels(TRANSFORMER)
    assert {op.type for op in report.ops if op.kernel == XLA_CLUSTER} == {k["kernel"] for k in kernels}
    note = _untied_note(report, "no kernel of theirs is named after an instruction")
    assert f"({len(kernels)} kernel run(s)" in note and "100.0% of the XLA kernels' time" in note


def test_instructions_out_of_order_leave_the_library_kernels_untied_and_say_why(tmp_path):
    def swap(module):  # the first cuBLAS call and the fusion after it, in the schedule and the instructions
        entry = _entry(module)
        order = module.schedule.sequences[entry.id].instruction_ids
        ids = {i.name: i.id for i in entry.instructions}
        a, b = list(order).index(ids["custom-call.1"]), list(order).index(ids["input_transpose_fusion.1"])
        order[a], order[b] = order[b], order[a]

    report = read_profile(_with_hlo(tmp_path, TRANSFORMER, swap))
    kernels = _kernels(TRANSFORMER)
    cublas = [k for k in kernels if k["kernel"].startswith("nvjet_")]
    assert {op.type for op in report.ops if op.kernels[0].startswith("nvjet_")} == {k["kernel"] for k in cublas}
    note = _untied_note(report, "their kernels do not follow the order")
    assert f"({len(cublas)} kernel run(s)" in note and _share(kernels, cublas) in note
    fused = {op.type for op in report.ops if op.kernels[0].startswith("gemm_fusion_dot")}
    assert "dot_general" in fused  # XLA's own kernels: still tied, by their names, and the notes say so
    (named,) = [n for n in report.notes if "by their names alone" in n]
    assert "their kernels do not follow the order" in named and FIX in named, named


def test_a_graph_with_more_kernels_than_instructions_leaves_the_extra_ones_untied(tmp_path):
    space = _space(TRANSFORMER)
    plane = next(p for p in space.planes if p.name == "/device:GPU:0")
    (line,) = plane.lines
    first_run = [e for e in line.events if _correlation(plane, e) == 232 and _is_kernel(plane, e)]
    end = max(e.offset_ps + e.duration_ps for e in first_run)
    extra = []
    for event in sorted(first_run, key=lambda e: e.offset_ps)[6:9]:  # a cuBLAS kernel and two fusions, again
        copy = line.events.add()
        copy.CopyFrom(event)
        copy.offset_ps, end = end + 1000, end + 1000 + event.duration_ps
        extra.append(plane.event_metadata[event.metadata_id].name)
    damaged = tmp_path / "extra.xplane.pb"
    damaged.write_bytes(space.SerializeToString())
    report = read_profile(str(damaged))
    untied = sorted(op.name for op in report.ops if op.name == op.kernels[0])  # reported under the kernel's name
    assert untied == sorted(extra) and any(name.startswith("nvjet_") for name in untied)
    note = _untied_note(report, "they ran more kernels than")
    assert "(3 kernel run(s)" in note
    tied = {(op.kernels, op.start_us) for op in report.ops if op.name != op.kernels[0]}
    assert len(tied) == 1608  # every run's own kernels


#: A computation's commands for the table below: fusions (``K``), library calls (``L``), a loop (``C``).
_COMMANDS = (
    ("input_fusion.0", "K", "kInput input_fusion"),
    ("while.1", "C", "while"),
    ("loop_fusion.2", "K", "kLoop loop_fusion"),
    ("custom-call.3", "L", "cuBLAS"),
    ("custom-call.4", "L", "cuBLAS"),
    ("loop_fusion.5", "K", "kLoop loop_fusion"),
    ("input_fusion.6", "K", "kInput input_fusion"),
    ("custom-call.7", "L", "cuDNN"),
    ("loop_fusion.8", "K", "kLoop loop_fusion"),
)
C3, C4, C7 = ("custom-call.3",), ("custom-call.4",), ("custom-call.7",)
F0, F2, F5, F6, F8 = (
    ("input_fusion.0",),
    ("loop_fusion.2",),
    ("loop_fusion.5",),
    ("input_fusion.6",),
    ("loop_fusion.8",),
)


@pytest.mark.parametrize(
    "kernels, instructions, cause",
    [
        (["loop_fusion_2", "gemm", "gemm", "loop_fusion_5", "input_fusion_6"], [F2, C3, C4, F5, F6], None),
        # identical fusions: XLA compiles one kernel, named after the first
        (["loop_fusion_2", "gemm", "gemm", "loop_fusion_2", "input_fusion_6"], [F2, C3, C4, F5, F6], None),
        # one cuDNN call of three kernels
        (["input_fusion_6", "convert", "conv", "conv", "loop_fusion_8"], [F6, C7, C7, C7, F8], None),
        # three kernels for two calls: each shared by both
        (["loop_fusion_2", "gemm", "split", "gemm", "loop_fusion_5"], [F2, C3 + C4, C3 + C4, C3 + C4, F5], None),
        # a graph that starts with library calls: those right before its first fusion
        (["gemm", "gemm", "loop_fusion_5", "input_fusion_6"], [C3, C4, F5, F6], None),
        # a fusion that launched no kernel (a memset): the later fusion of its name
        (["loop_fusion_2", "gemm", "gemm", "input_fusion_6", "conv"], [F2, C3, C4, F6, C7], None),
        # a fusion of two kernels
        (["input_fusion_6", "input_fusion_6", "conv", "loop_fusion_8"], [F6, F6, C7, F8], None),
        # out of order: the call between them launched no kernel
        (["input_fusion_6", "loop_fusion_8"], [F6, ()], "ORDER"),
        # more kernels than its instructions launch
        (["input_fusion_6", "conv", "loop_fusion_8", "input_fusion_6"], [F6, C7, F8, ()], "SURPLUS"),
        # a loop inside the graph
        (["input_fusion_0", "loop_fusion_2"], [F0, ()], "CONTROL"),
        # no kernel named after an instruction
        (["gemm", "conv"], [(), ()], "MISSING"),
    ],
)
def test_a_command_buffers_kernels_are_placed_by_their_order(kernels, instructions, cause):
    from tfdevices.verify.command_buffers import Untied, place_run
    from tfdevices.verify.hlo import Command, HloModule, Launch

    module = HloModule("jit_step")
    kinds = {"K": Launch.KERNEL, "L": Launch.LIBRARY, "C": Launch.CONTROL}
    module.sequences["main"] = tuple(Command(name, kinds[kind], family) for name, kind, family in _COMMANDS)
    module.where.update({name: ("main", i) for i, (name, _, _) in enumerate(_COMMANDS)})
    placed = place_run(tuple(kernels), module)
    assert [list(p) for p in placed.instructions] == [list(i) for i in instructions]
    assert placed.cause == (None if cause is None else Untied[cause])
    assert placed.at == next((i for i, p in enumerate(instructions) if not p), len(kernels))


def test_a_loop_bodys_commands_are_read_again_for_each_of_its_runs_in_a_graph():
    from tfdevices.verify.command_buffers import place_run
    from tfdevices.verify.hlo import Command, HloModule, Launch

    module = HloModule("jit_step")
    body = (Command("fusion.1", Launch.KERNEL, "kLoop fusion"), Command("custom-call.2", Launch.LIBRARY, "cuBLAS"))
    module.sequences["body"] = body
    module.where.update({c.name: ("body", i) for i, c in enumerate(body)})
    kernels = ("fusion_1", "gemm", "fusion_1", "gemm", "fusion_1", "gemm")
    assert place_run(kernels, module).cause is not None  # not a loop's: more kernels than its commands launch
    module.loops.add("body")
    placed = place_run(kernels, module)
    assert placed.instructions == (("fusion.1",), ("custom-call.2",)) * 3 and placed.cause is None and placed.at == 6


def _is_kernel(plane, event) -> bool:
    return not plane.event_metadata[event.metadata_id].name.startswith("Memset")


def _correlation(plane, event) -> int:
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    return next(s.int64_value or s.uint64_value for s in event.stats if names[s.metadata_id] == "correlation_id")


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


def test_the_command_buffer_and_cluster_modules_docstring_examples_run():
    import doctest

    from tfdevices.verify import clusters, command_buffers

    for module in (command_buffers, clusters):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
