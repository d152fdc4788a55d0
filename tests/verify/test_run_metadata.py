"""Placement from the runtime's placed graphs: PlacementWatch and PlacementLogger(watch=True), no profiler."""

from __future__ import annotations

import pytest

from tests.keras_models import shape_switch
from tfdevices import runtime
from tfdevices.tensorboard.callbacks import PlacementLogger
from tfdevices.verify import run_metadata
from tfdevices.verify.run_metadata import RUN_METADATA_NOTE, PlacementWatch


@pytest.fixture
def no_profiler(tf4, monkeypatch):
    """Counts profiler starts (there must be none): TensorFlow's start, wrapped."""
    started = []
    real = tf4.profiler.experimental.start

    def start(*args, **kwargs):
        started.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(tf4.profiler.experimental, "start", start)
    from tensorflow.python.profiler import profiler_v2

    monkeypatch.setattr(profiler_v2, "start", start)
    return started


def _switching_step(tf):
    """A function whose matmul runs on CPU:1 for 4 rows, on CPU:0 otherwise (a retrace moves it)."""

    @tf.function
    def step(x):
        with tf.device("/CPU:1" if x.shape[0] == 4 else "/CPU:0"):
            y = tf.nn.relu(tf.matmul(x, x, name="mm"), name="act")
        return tf.reduce_sum(y * 2.0)

    return step


def test_a_watch_sees_each_instantiation_and_the_ops_a_retrace_moved(tf4, no_profiler):
    step = _switching_step(tf4)
    with PlacementWatch(step) as watch:
        step(tf4.ones([4, 4]))
        (first,) = watch.poll()
        step(tf4.ones([4, 4]))
        assert watch.poll() == []  # no new instantiation: nothing read
        step(tf4.ones([5, 5]))
        (second,) = watch.poll()
    assert first.change is None and first.inputs == ("(4, 4) float32",)
    ops = {op.name: op for op in first.report.ops}
    assert ops["mm"].device == "CPU:1" and ops["mm"].requested == "CPU:1" and ops["Sum"].device == "CPU:0"
    assert {(t.src, t.dst) for t in first.report.transfers} == {("CPU:0", "CPU:1"), ("CPU:1", "CPU:0")}
    assert {t.tensor for t in first.report.transfers} == {"x:0", "act:0"}
    assert RUN_METADATA_NOTE in first.report.notes
    change = second.change
    assert change is not None and change.retraced and change.functions == ("step",)
    assert {n: (a, b) for n, a, b in change.moved} == {"mm": ("CPU:1", "CPU:0"), "act": ("CPU:1", "CPU:0")}
    assert change.why == "(4, 4) float32 -> (5, 5) float32"
    assert not second.report.transfers
    assert no_profiler == []


def test_run_metadata_is_turned_off_by_the_watch_that_turned_it_on(tf4, monkeypatch):
    from tensorflow.python.eager import context

    calls = []
    monkeypatch.setitem(runtime._RUN_METADATA, "holders", 0)  # whatever watch a failed fit elsewhere left on
    monkeypatch.setattr(context, "enable_run_metadata", lambda: calls.append("on"))
    monkeypatch.setattr(context, "disable_run_metadata", lambda: calls.append("off"))
    outer, inner = PlacementWatch(), PlacementWatch()
    with outer:
        with inner:
            assert (outer.turned_on, inner.turned_on) == (True, False)
        assert calls == ["on"]  # the inner watch leaves it to the outer
    assert calls == ["on", "off"] and runtime._RUN_METADATA["holders"] == 0
    assert outer.poll() == []  # a stopped watch reads nothing


def test_the_logger_names_the_ops_a_retrace_moved_without_a_profiler_capture(tf4, tmp_path, no_profiler, monkeypatch):
    import keras
    from tensorboard.backend.event_processing import event_accumulator
    from tensorflow.python.eager import context

    if runtime._RUN_METADATA["holders"]:  # a fit of another test that raised left its watch on (no on_train_end)
        context.disable_run_metadata()
        monkeypatch.setitem(runtime._RUN_METADATA, "holders", 0)

    model = keras.Sequential([keras.Input((8,)), shape_switch(keras, tf4), keras.layers.Dense(1, name="head")])
    model.compile(optimizer="sgd", loss="mse")

    def data(batch, batches):
        x = tf4.ones([batch * batches, 8])
        return tf4.data.Dataset.from_tensor_slices((x, tf4.zeros([batch * batches, 1]))).batch(
            batch, drop_remainder=True
        )

    logger = PlacementLogger(tmp_path, at_step=None, framework="keras")
    model.fit(data(16, 3), epochs=1, verbose=0, callbacks=[logger])
    model.fit(data(4, 2), epochs=1, verbose=0, callbacks=[logger])
    assert no_profiler == [] and logger.steps == []  # no capture ran
    assert [step for step, _ in logger.placed] == [0, 3]
    (change,) = logger.changes
    assert (change.step, change.previous_step, change.retraced) == (3, 0, True)
    moved = {name: (a, b) for name, a, b in change.moved}
    assert any("switch" in name and name.endswith("MatMul") for name in moved), moved
    assert all(ab == ("CPU:0", "CPU:1") for ab in moved.values()), moved
    assert change.why.startswith("(16, 8) float32, (16, 1) float32 -> "), change.why
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    assert [e.step for e in acc.Tensors("placement/drift")] == [3]
    assert [e.step for e in acc.Tensors("placement/placed")] == [0, 3]
    status = acc.Tensors("placement/status")[0].tensor_proto.string_val[0].decode()
    assert "run metadata (a process-wide setting) turned on by tfdevices" in status


def test_the_docstring_example_runs(tf4):
    import doctest

    result = doctest.testmod(run_metadata)
    assert result.attempted > 0 and result.failed == 0
