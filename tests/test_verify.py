"""Placement capture on 4 logical CPUs: real TensorFlow runs, read from TensorFlow's profiler.

These tests depend on the kernels TensorFlow picks (oneDNN or not): run them under
both TF_ENABLE_ONEDNN_OPTS=1 and TF_ENABLE_ONEDNN_OPTS=0.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import run_py
from tests.keras_models import on_device_layer
from tfdevices.core.errors import InputError, PlacementAssertionError, SpecError, TfDevicesError
from tfdevices.verify import PlacementReport, capture, capturing


def _pinned_step(tf, device: str):
    """A tf.function whose 'pinned' scope runs on ``device``; its input comes from CPU:0."""

    @tf.function
    def step(x):
        with tf.name_scope("pinned"), tf.device(device):
            y = tf.matmul(x, x, transpose_b=True)
            y = tf.nn.relu(y) + 1.0
        return tf.reduce_sum(y)

    return step


@pytest.mark.parametrize("device", ["CPU:1", "CPU:2", "CPU:3"])
def test_ops_pinned_to_a_device_are_reported_there(tf4, device):
    tf = tf4
    step = _pinned_step(tf, f"/device:{device}")
    x = tf.ones([3, 5])
    step(x)  # compiled before the capture: capture must still see it
    report = capture(step, x)
    pinned = [op for op in report.ops if op.name.startswith("pinned/")]
    assert {op.type for op in pinned} >= {"MatMul", "Relu"}
    assert {op.device for op in pinned} == {device}
    assert {op.requested for op in pinned} == {device}
    report.assert_on(device, ops="pinned/*")
    report.assert_on(device.replace("CPU", "cpu"), ops=["pinned/*"], types=["MatMul"])
    assert set(report.ops_on(device)) >= set(pinned)
    assert report.op_counts[device] == len(report.ops_on(device))


def test_transfer_into_a_pinned_scope_is_matched_with_its_size(tf4):
    tf = tf4
    step = _pinned_step(tf, "/CPU:2")
    x = tf.ones([3, 5])
    report = capture(step, x)
    into = report.transfers_between(src="CPU:0", dst="CPU:2")
    assert [t.tensor for t in into] == ["x:0"]
    (t,) = into
    assert (t.dtype, t.shape, t.bytes) == ("float32", tuple(x.shape), x.shape.num_elements() * 4)
    assert t.send_op and t.recv_op
    assert all(t.src != t.dst for t in report.transfers)
    assert report.transfers_between(src="CPU:3") == ()
    assert report.transfers_between(dst="CPU:*") == report.transfers


def test_assert_on_names_expected_device_actual_device_and_ops(tf4):
    tf = tf4
    report = capture(_pinned_step(tf, "/CPU:1"), tf.ones([2, 2]))
    with pytest.raises(PlacementAssertionError) as err:
        report.assert_on("CPU:3", ops="pinned/*")
    message = str(err.value)
    n = len([op for op in report.ops if op.name.startswith("pinned/")])
    assert message.startswith(f"expected ops matching 'pinned/*' on CPU:3, but {n} of {n} ran elsewhere (CPU:1: {n})")
    assert "pinned/MatMul (MatMul" in message  # the model op, then the kernel when another one ran it
    assert "HINT:" in message
    assert isinstance(err.value, AssertionError)


def test_assert_on_a_pattern_matching_nothing_fails(tf4):
    tf = tf4
    report = capture(_pinned_step(tf, "/CPU:1"), tf.ones([2, 2]))
    with pytest.raises(PlacementAssertionError, match=r"^expected ops matching 'dense_9/\*' to check, but none"):
        report.assert_on("CPU:1", ops="dense_9/*")


def test_assert_no_transfers_lists_the_copies(tf4):
    tf = tf4
    report = capture(_pinned_step(tf, "/CPU:1"), tf.ones([4, 3]))
    with pytest.raises(PlacementAssertionError) as err:
        report.assert_no_transfers()
    count = len(report.transfers)
    assert str(err.value).startswith(f"expected no cross-device transfers, but {count} ran")
    assert "CPU:0 -> CPU:1 x:0 float32[4,3] 48 B" in str(err.value)
    report.assert_no_transfers(src="CPU:2")
    with pytest.raises(PlacementAssertionError, match="^expected no cross-device transfers from CPU:1 to CPU:0"):
        report.assert_no_transfers(src="CPU:1", dst="CPU:0")


def test_single_device_function_has_no_transfers(tf4):
    tf = tf4
    step = _pinned_step(tf, "/CPU:0")
    report = capture(step, tf.ones([2, 2]))
    report.assert_no_transfers()
    report.assert_on("CPU:0")
    assert report.devices == ("CPU:0",)


def test_eager_ops_are_captured(tf4):
    tf = tf4
    with capturing() as cap:
        with tf.device("/CPU:3"):
            a = tf.constant([1.0, 2.0])
            b = tf.math.square(a) * 2.0
    assert b.device.endswith("CPU:3")
    types = {op.type for op in cap.report.ops_on("CPU:3")}
    assert {"Square", "Mul"} <= types
    cap.report.assert_on("CPU:3", types=["Square", "Mul"])


def test_report_is_available_only_after_the_block(tf4):
    with capturing() as cap:
        with pytest.raises(TfDevicesError, match="^the placement report is ready only after"):
            cap.report  # noqa: B018
        with pytest.raises(InputError, match="^a placement capture is already running"):
            with capturing():
                pass
    assert isinstance(cap.report, PlacementReport)


@pytest.mark.parametrize(
    "bad, first_words",
    [
        (1, "device 1 is a physical GPU index"),
        ("2", "device '2' is a physical GPU index"),
        ("gpu one", "device 'gpu one' is not a TensorFlow device name"),
        ("", "device '' is not a TensorFlow device name"),
    ],
)
def test_bad_device_names_are_spec_errors(tf4, bad, first_words):
    report = PlacementReport(ops=())
    with pytest.raises(SpecError) as err:
        report.ops_on(bad)
    assert str(err.value).startswith(first_words)
    assert err.value.hint


@pytest.mark.parametrize(
    "spelling",
    ["CPU:1", "cpu:1", "/CPU:1", "/device:CPU:1", "/job:localhost/replica:0/task:0/device:CPU:1", "CPU:*", "*:1"],
)
def test_device_spellings_select_the_same_ops(tf4, spelling):
    tf = tf4
    report = capture(_pinned_step(tf, "/CPU:1"), tf.ones([2, 2]))
    assert set(report.ops_on("CPU:1")) <= set(report.ops_on(spelling))
    assert report.ops_on("CPU:1")


def test_capture_rejects_something_not_callable(tf4):
    with pytest.raises(InputError, match="^capture\\(fn=...\\): expected something callable, got EagerTensor"):
        capture(tf4.ones([1]))


def test_diff_shows_moved_ops(tf4):
    tf = tf4
    x = tf.ones([2, 2])
    before = capture(_pinned_step(tf, "/CPU:1"), x)
    after = capture(_pinned_step(tf, "/CPU:2"), x)
    diff = before.diff(after)
    moved = {name: (a, b) for name, a, b in diff.moved}
    assert moved["pinned/MatMul"] == ("CPU:1", "CPU:2")
    assert diff.transfers_before != diff.transfers_after
    assert "moved pinned/MatMul: CPU:1 -> CPU:2" in diff.summary()
    assert before.diff(before).unchanged


def test_json_markdown_and_summary(tf4):
    tf = tf4
    report = capture(_pinned_step(tf, "/CPU:1"), tf.ones([3, 3]))
    again = PlacementReport.from_json(report.to_json())
    assert again == report
    markdown = report.to_markdown()
    for device, n in report.op_counts.items():
        assert f"| {device} | {n} |" in markdown
    assert "| CPU:0 | CPU:1 | `x:0` | float32 | [3, 3] | 1 | 36 B |" in markdown  # grouped: count, bytes
    assert "| CPU:0 | CPU:1 | `x:0` | float32 | [3, 3] | 36 B |" in report.to_markdown(all_transfers=True)
    assert report.summary().startswith(f"{len(report.ops)} ops on {len(report.op_counts)} device(s)")
    with pytest.raises(InputError, match="^not a placement report in JSON"):
        PlacementReport.from_json("{}")


@pytest.fixture(scope="module")
def three_layer_report(tf4):
    """A Keras 3 train step of dense_1 (CPU:0) -> dense_2 moved to CPU:1 -> dense_3 (CPU:0)."""
    import keras

    tf = tf4
    on_device = on_device_layer(keras, tf)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, name="dense_1"),
            on_device(keras.layers.Dense(12, name="dense_2"), "/CPU:1", name="moved"),
            keras.layers.Dense(4, name="dense_3"),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    x, y = tf.ones([32, 8]), tf.zeros([32, 4])
    model.train_on_batch(x, y)
    return capture(model.train_on_batch, x, y)


def test_three_layer_model_shows_activation_transfers(three_layer_report):
    report = three_layer_report
    report.assert_on("CPU:1", ops="/sequential*/moved*/*", types=["MatMul", "BiasAdd"])  # the forward pass moved
    with pytest.raises(PlacementAssertionError, match=r"ran elsewhere \(CPU:0: \d+\): gradient_tape/"):
        report.assert_on("CPU:1", ops="gradient_tape/*moved*/*")  # its gradients did not
    forward_in = [t for t in report.transfers_between(src="CPU:0", dst="CPU:1") if "dense_1" in t.tensor]
    forward_out = [t for t in report.transfers_between(src="CPU:1", dst="CPU:0") if "dense_2" in t.tensor]
    assert forward_in and forward_out
    assert all(t.shape == (32, 16) and t.bytes == 32 * 16 * 4 for t in forward_in)
    assert all(t.shape == (32, 12) for t in forward_out)
    with pytest.raises(PlacementAssertionError, match="^expected no cross-device transfers"):
        report.assert_no_transfers()


def test_three_layer_model_shows_weight_reads_crossing_devices(three_layer_report):
    reads = three_layer_report.variables_on("CPU:0")
    crossing = [r for r in reads if r.crosses_devices]
    assert crossing and all("dense_2" in r.op for r in crossing)
    assert all(r.stored_on == "CPU:0" and "CPU:1" in r.read_on for r in crossing)
    assert {r.bytes for r in crossing} == {16 * 12 * 4, 12 * 4}
    assert not [r for r in reads if r.crosses_devices and ("dense_1" in r.op or "dense_3" in r.op)]
    assert three_layer_report.variables_on("CPU:1") == ()


def _mirrored_train_step(tf):
    """A train step of a two-replica MirroredStrategy on CPU:0 and CPU:1 that all-reduces, and its inputs."""
    import keras
    from tensorflow.python.distribute import cross_device_ops

    from tfdevices.training import install_fit_adapter

    install_fit_adapter()  # a strategy built without tfdevices: Keras 3.3-3.4 sum no gradients without the mend
    devices = ["/CPU:0", "/CPU:1"]
    strategy = tf.distribute.MirroredStrategy(
        devices,
        cross_device_ops=cross_device_ops.CollectiveAllReduce(
            devices=devices, group_size=len(devices), options=tf.distribute.experimental.CommunicationOptions()
        ),
    )
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.01)
        optimizer.build(model.trainable_variables)

    @tf.function
    def train_step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.run(replica, args=(x, y))

    return train_step, tf.ones([8, 4]), tf.zeros([8, 1])


def test_mirrored_strategy_train_step_shows_all_reduce(tf4):
    train_step, x, y = _mirrored_train_step(tf4)
    report = capture(train_step, x, y)
    reduces = [c for c in report.collectives if "Reduce" in c.type]
    assert {c.device for c in reduces} == {"CPU:0", "CPU:1"}
    assert {c.reduction for c in reduces} == {"Add"}
    assert "collective(s): CollectiveReduce" in report.summary()


def test_an_all_reduce_whose_start_the_trace_lost_is_placed_from_its_completion(tf4):
    # Under load the thread that started one replica's all-reduce can be descheduled until after
    # the profiler stops: the span of its start (ProcessAsync::Start) is then never written, while
    # its completion (ProcessAsync::Done, on the collective's own thread) is. Seen in 3 captures of
    # 40 with two busy processes beside; made so here on a real trace whose all-reduce has both
    # (a busy machine loses either, completions too: captured again until both all-reduces have both).
    from tfdevices.verify import profiling
    from tfdevices.verify.building import build_report
    from tfdevices.verify.host import parse_space, read_trace
    from tfdevices.verify.kinds import stats_by_name

    train_step, x, y = _mirrored_train_step(tf4)
    placed: dict[str, str] = {}
    with profiling._placements(placed, True):
        train_step(x, y)
    for _ in range(5):
        with profiling._capturing(placed) as cap:
            train_step(x, y)
        spaces, recorder = cap._source
        space = parse_space(spaces[0])
        (plane,) = [p for p in space.planes if p.name == "/host:CPU"]
        kinds = {k: m.name.rpartition("::")[2] for k, m in plane.event_metadata.items() if "ProcessAsync::" in m.name}
        names = {k: m.name for k, m in plane.stat_metadata.items()}
        seen: dict[tuple[str, str], tuple] = {}  # (op, "Start" or "Done") -> (line, event)
        for line in plane.lines:
            for event in line.events:
                name = str(stats_by_name(event, names).get("name", ""))
                if event.metadata_id in kinds and "CollectiveReduce" in name:
                    seen[(name, kinds[event.metadata_id])] = (line, event)
        both = sorted(name for name, kind in seen if kind == "Start" and (name, "Done") in seen)
        if len(both) == 2:
            break
    assert len(both) == 2, f"5 captures without both all-reduces' starts and completions traced: {sorted(seen)}"
    lost = both[0]
    line, event = seen[(lost, "Start")]
    line.events.remove(event)
    report = build_report(read_trace(space.SerializeToString()), recorder)
    reduces = [c for c in report.collectives if "Reduce" in c.type]
    assert {c.device for c in reduces} == {"CPU:0", "CPU:1"}
    device = placed[lost].rsplit("device:", 1)[1]
    assert [(op.device, op.duration_us) for op in report.ops if op.name == lost] == [(device, 0.0)]
    assert any(f"lost the start of 1 asynchronous kernel(s) ({lost})" in note for note in report.notes)


# ----------------------------------------------------------------------------- model ops, kernels, eager, XLA, timing


@pytest.fixture(scope="module")
def relu_layer_report(tf4):
    """A traced Keras 3 forward step: Dense(relu) layers, the middle one moved to CPU:1; captured after it ran."""
    import keras

    tf = tf4
    on_device = on_device_layer(keras, tf)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu", name="first"),
            on_device(keras.layers.Dense(12, activation="relu", name="middle"), "/CPU:1", name="moved"),
            keras.layers.Dense(4, activation="relu", name="last"),
        ]
    )
    step = tf.function(model)
    x = tf.ones([32, 8])
    step(x)
    traces = step.experimental_get_tracing_count()
    report = capture(step, x)
    assert step.experimental_get_tracing_count() == traces  # captured without retracing
    return report


def test_dense_relu_layer_moved_to_cpu1_is_found_by_model_op(relu_layer_report):
    report = relu_layer_report
    report.assert_on("CPU:1", ops="moved*/*", types=["MatMul"])  # whichever kernel ran it
    report.assert_on("CPU:1", ops="moved*/*", types=["MatMul", "BiasAdd", "Relu"])
    # the bias: BiasAdd, or AddV2 on Keras 3.3-3.4 (their Dense adds it with ops.add)
    moved = [op for op in report.ops if "/moved" in op.name and op.type in ("MatMul", "BiasAdd", "AddV2", "Relu")]
    types = sorted("BiasAdd" if op.type == "AddV2" else op.type for op in moved)
    assert types == ["BiasAdd", "MatMul", "Relu"]  # a fused kernel counts as each op
    assert all(op.kernel and op.kernel_name for op in moved)
    assert len({op.kernel_name for op in moved}) <= len(moved)
    others = [op for op in report.ops if op.type == "MatMul" and "/moved" not in op.name]
    assert {op.device for op in others} == {"CPU:0"}


def test_kernels_and_times_are_reported(relu_layer_report):
    report = relu_layer_report
    assert all(op.start_us is not None and op.start_us >= 0 and op.duration_us >= 0 for op in report.ops)
    assert all(t.start_us is not None and t.duration_us >= 0 for t in report.transfers)
    assert set(report.busy_us) == set(report.op_counts)
    assert all(busy > 0 for busy in report.busy_us.values())
    assert sum(report.kernel_counts.values()) <= len(report.ops)
    again = PlacementReport.from_json(report.to_json())
    assert again == report
    assert again.busy_us == report.busy_us


def test_a_failing_type_filter_lists_the_ops_matched_by_name(relu_layer_report):
    with pytest.raises(PlacementAssertionError) as err:
        relu_layer_report.assert_on("CPU:1", ops="moved*/*", types=["Conv2D"])
    message = str(err.value)
    assert message.startswith("expected ops matching 'moved*/*' of types ['Conv2D'] to check, but none of the")
    assert re.search(r"moved(_1)?/middle(_1)?/MatMul \(MatMul", message)  # Keras 3.16 scopes: sequential/moved/middle
    assert "on CPU:1" in message
    assert "HINT: types name the ops the program wrote" in message


def test_an_eager_matmul_is_reported_once(tf4):
    tf = tf4
    a = tf.ones([3, 3])
    with capturing() as cap:
        with tf.device("/CPU:2"):
            tf.matmul(a, a)
        tf.matmul(a, a)
    asked, default = cap.report.ops
    assert (asked.type, asked.device, asked.requested) == ("MatMul", "CPU:2", "CPU:2")
    assert (default.type, default.device, default.requested) == ("MatMul", "CPU:0", "")
    assert asked.call != default.call


def test_jit_compiled_step_reports_its_cluster(tf4):
    tf = tf4

    @tf.function(jit_compile=True)
    def step(x):
        return tf.nn.relu(tf.matmul(x, x) + 1.0)

    x = tf.ones([4, 4])
    with tf.device("/CPU:3"):
        step(x)
        report = capture(step, x)
    assert report.ops  # never nothing
    assert {op.device for op in report.ops} == {"CPU:3"}
    assert {op.kernel for op in report.ops} == {"XlaCluster"}
    assert {"MatMul", "AddV2", "Relu"} <= {op.type for op in report.ops}
    ((cluster, (device, count)),) = report.xla_clusters.items()
    assert device == "CPU:3" and count == len(report.ops)
    assert f"compiled together by XLA in 1 cluster(s): {cluster} on CPU:3" in report.summary()
    report.assert_on("CPU:3", types=["MatMul"])


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("/pinned/*", True),
        ("pinned/*", True),
        ("/MatMul", False),
        ("/x/pinned/*", False),
    ],
)
def test_a_leading_slash_anchors_the_name_pattern(tf4, pattern, expected):
    report = capture(_pinned_step(tf4, "/CPU:1"), tf4.ones([2, 2]))
    found = bool([op for op in report.ops if op.name.startswith("pinned/")])
    assert found
    if expected:
        report.assert_on("CPU:1", ops=pattern, types=["MatMul"])
    else:
        with pytest.raises(PlacementAssertionError):
            report.assert_on("CPU:1", ops=pattern, types=["MatMul"])


def test_capture_refuses_to_run_beside_another_profile(tf4, tmp_path):
    tf = tf4
    tf.profiler.experimental.start(str(tmp_path))
    try:
        with pytest.raises(InputError, match="^TensorFlow's profiler is already running in this process"):
            capture(lambda: tf.ones([2]) * 2.0)
    finally:
        tf.profiler.experimental.stop()
    assert capture(lambda: tf.ones([2]) * 2.0).ops  # and captures again once it stopped


_FIRST_CAPTURE = """
    import json
    import tfdevices
    tfdevices.configure(tfdevices.select("none", tfdevices.Inventory()), virtual_devices=4)
    import tensorflow as tf
    from tfdevices.verify import capture
    from tests.graphs import one_then_four
    step, x = one_then_four(tf)
    report = capture(step, x)
    print(json.dumps({"matmuls": sorted((op.name, op.device) for op in report.ops if op.type == "MatMul"),
                      "busy": sorted(report.busy_us), "copies": len(report.transfers_between("CPU:0", "CPU:1")),
                      "notes": list(report.notes)}))
"""


def test_the_first_capture_of_a_fresh_process_puts_every_kernel_on_its_device():
    # The first capture of a process sometimes ends the profile while the executor step that ran
    # the CPU:1 MatMuls is still closing: its span is missing from the trace, its kernels are not.
    # Each fresh process is one more chance to hit that.
    expected = {
        "matmuls": [
            ["MatMul", "CPU:0"],
            ["MatMul_1", "CPU:1"],
            ["MatMul_2", "CPU:1"],
            ["MatMul_3", "CPU:1"],
            ["MatMul_4", "CPU:1"],
        ],
        "busy": ["CPU:0", "CPU:1"],
        "copies": 5,
        "notes": [],
    }
    seen = [json.loads(run_py(_FIRST_CAPTURE, timeout=120).stdout.splitlines()[-1]) for _ in range(8)]
    wrong = [s for s in seen if s != expected]
    assert not wrong, f"{len(wrong)} of {len(seen)} fresh processes: {wrong[0]}"


def test_kernels_the_trace_ties_to_no_executor_step_take_the_device_tensorflow_assigned(tf4):
    # TensorFlow 2.16 sometimes leaves a partition's executor step out of a process's first capture:
    # its kernels are in the trace, tied to no step. Made so here on a real trace: the CPU:1
    # partition's kernels are moved to the trace's unplaced list. capture's warm-up, which
    # instantiates the function, reads where TensorFlow placed each op (run metadata).
    from tfdevices.verify import profiling
    from tfdevices.verify.building import build_report
    from tfdevices.verify.host import CONTEXT, KEY, START, read_trace

    tf = tf4
    with tf.device("/CPU:0"):
        w = [tf.Variable(tf.ones([32, 32]) * 0.01) for _ in range(3)]

    @tf.function
    def step(x):
        with tf.device("/CPU:0"):
            one = tf.matmul(x, w[0])
        with tf.device("/CPU:1"):
            return tf.matmul(tf.matmul(one, w[1]), w[2])

    x = tf.ones([32, 32])
    placed: dict[str, str] = {}
    with profiling._placements(placed, True):
        step(x)
    assert {name: placed[name].rsplit("/device:", 1)[-1] for name in ("MatMul", "MatMul_1", "MatMul_2")} == {
        "MatMul": "CPU:0",
        "MatMul_1": "CPU:1",
        "MatMul_2": "CPU:1",
    }
    with profiling._capturing(placed) as cap:
        step(x)
    spaces, recorder = cap._source
    trace = read_trace(spaces[0])
    (on_cpu1,) = {k[CONTEXT] for k in trace.kernels if k[KEY][0] == "MatMul_1"}
    trace.unplaced += [k for k in trace.kernels if k[CONTEXT] == on_cpu1]
    trace.kernels = [k for k in trace.kernels if k[CONTEXT] != on_cpu1]

    def matmuls(report):
        return sorted((op.name, op.device) for op in report.ops if op.type == "MatMul")

    report = build_report(trace, recorder)
    assert matmuls(report) == [("MatMul", "CPU:0"), ("MatMul_1", "CPU:1"), ("MatMul_2", "CPU:1")]
    assert not any("executor step" in note for note in report.notes)
    recorder.placed = {}  # a function instantiated before the capture: nothing to read, said so
    unknown = build_report(trace, recorder)
    assert matmuls(unknown) == [("MatMul", "CPU:0"), ("MatMul_1", "?"), ("MatMul_2", "?")]
    assert any("does not tie 2 kernel(s) to an executor step" in note for note in unknown.notes)

    # Nor run metadata: the one step of the call not done when the kernels started ran them (a
    # step's done callback runs after its last kernel). The CPU:1 step's copies stay in the trace
    # (what TensorFlow 2.16 loses is the span of the step's last Process, not its earlier ones).
    on_cpu0 = {k[CONTEXT] for k in trace.kernels if k[KEY][0] == "MatMul"}.pop()
    moved = [k for k in trace.unplaced if k[KEY][1] not in ("_Recv", "_Send")]
    trace.kernels += [k for k in trace.unplaced if k not in moved]
    trace.unplaced = moved
    first = min(k[START] for k in moved)
    trace.done_at = {on_cpu0: first - 1, on_cpu1: first + 10**9}
    running = build_report(trace, recorder)
    assert matmuls(running) == [("MatMul", "CPU:0"), ("MatMul_1", "CPU:1"), ("MatMul_2", "CPU:1")]
    assert not any("executor step" in note for note in running.notes)
    trace.done_at = {on_cpu0: max(k[START] for k in moved) + 1}  # both steps still running: not guessed
    assert matmuls(build_report(trace, recorder)) == [("MatMul", "CPU:0"), ("MatMul_1", "?"), ("MatMul_2", "?")]


def test_capture_of_a_function_traced_but_never_run_reads_where_tensorflow_placed_its_ops(tf4, monkeypatch):
    # get_concrete_function traces without running: capture takes the function as warm (no warm-up
    # call), so the captured call instantiates it, and its run metadata gives the devices that the
    # kernels of a step whose span was lost take (TensorFlow 2.16 under load).
    from tfdevices.verify import profiling

    seen = []
    real = profiling._capturing

    def spy(placed):
        seen.append(placed)
        return real(placed)

    monkeypatch.setattr(profiling, "_capturing", spy)
    tf = tf4

    @tf.function
    def step(x):
        with tf.device("/CPU:1"):
            return tf.matmul(x, x)

    x = tf.ones([4, 4])
    step.get_concrete_function(x)
    report = capture(step, x)
    (placed,) = seen
    assert placed["MatMul"].endswith("device:CPU:1")
    assert {op.device for op in report.ops if op.type == "MatMul"} == {"CPU:1"}


def test_capture_warms_up_a_function_that_has_not_run_and_says_when_a_capture_is_cold(tf4):
    tf = tf4
    calls = tf.Variable(0)

    def make():
        @tf.function
        def step(x):
            calls.assign_add(1)
            return tf.reduce_sum(tf.matmul(x, x))

        return step

    x = tf.ones([4, 4])
    warm = capture(make(), x)  # not run yet with these shapes: one warm-up call, then the captured one
    assert (warm.cold, int(calls.numpy())) == (False, 2)
    assert not any("cold" in note for note in warm.notes)
    step = make()
    cold = capture(step, x, warmup=0)  # the first call as it is
    assert cold.cold and cold.notes[0].startswith("a first execution (cold): 1 function(s) were traced")
    assert int(calls.numpy()) == 3
    again = capture(step, x)  # it has run with these shapes: no warm-up
    assert (again.cold, int(calls.numpy())) == (False, 4)
    assert PlacementReport.from_json(cold.to_json()).cold is True
    with capturing() as cap:  # a block that traces is cold too
        make()(x)
    assert cap.report.cold


@pytest.mark.parametrize("bad", [-1, 101, 1.5, True, "1"])
def test_capture_validates_warmup(tf4, bad):
    with pytest.raises(InputError, match=r"^capture\(warmup="):
        capture(lambda: None, warmup=bad)
