"""PlacementLogger inside real ``fit`` runs, with Keras 3 and with tf_keras.

These tests depend on the kernels TensorFlow picks (oneDNN or not): run them under
both TF_ENABLE_ONEDNN_OPTS=1 and TF_ENABLE_ONEDNN_OPTS=0.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import os

import numpy as np
import pytest

from tests.keras_models import on_device_layer, shape_switch
from tfdevices.core.errors import InputError
from tfdevices.tensorboard import read_placement
from tfdevices.tensorboard.callbacks import PlacementLogger
from tfdevices.verify import capture


def _model(K, tf, moved_device: str | None = None):  # noqa: N803 (K: the Keras module, keras or tf_keras)
    """dense_1 -> dense_2 -> dense_3; dense_2 called under ``tf.device(moved_device)`` when given."""
    OnDevice = on_device_layer(K, tf)  # noqa: N806 (a class)
    second = K.layers.Dense(6, name="dense_2")
    layers = [
        K.layers.Dense(5, name="dense_1"),
        OnDevice(second, moved_device, name="moved") if moved_device else second,
        K.layers.Dense(2, name="dense_3"),
    ]
    model = K.Sequential([K.Input((4,)), *layers])
    model.compile(optimizer="sgd", loss="mse")
    return model


@pytest.mark.parametrize(
    "framework, dense_2_weights_on",
    [
        ("keras", "CPU:0"),  # Keras 3 builds the layer outside the tf.device scope: weights copied every step
        ("tf_keras", "CPU:1"),  # tf_keras builds it inside the scope: weights live where they are used
    ],
)
def test_logger_captures_one_fit_step_and_writes_it(tf4, tmp_path, framework, dense_2_weights_on):
    K = importlib.import_module(framework)  # noqa: N806 (the Keras module)
    model = _model(K, tf4, moved_device="/CPU:1")
    logger = PlacementLogger(tmp_path, at_step=2, framework=framework)
    assert isinstance(logger, K.callbacks.Callback) and isinstance(logger, PlacementLogger)
    model.fit(np.ones((12, 4)), np.zeros((12, 2)), batch_size=4, epochs=2, verbose=0, callbacks=[logger])
    report = logger.report
    assert report is not None
    report.assert_on("CPU:1", ops="/sequential*/moved*/*", types=["MatMul", "BiasAdd"])  # the forward pass
    assert report.transfers_between(src="CPU:0", dst="CPU:1") and report.transfers_between(src="CPU:1", dst="CPU:0")
    dense_2_reads = [r for r in report.variables_on() if "dense_2" in r.op and "gradient" not in r.op]
    assert dense_2_reads and {r.stored_on for r in dense_2_reads} == {dense_2_weights_on}
    assert all("CPU:1" in r.read_on for r in dense_2_reads)
    stored = read_placement(tmp_path)
    assert stored.ops == report.ops and stored.transfers == report.transfers
    # one memory series for the host allocator (when oneDNN's allocator keeps statistics), never one per logical CPU
    assert logger.memory_devices in ((), ("CPU",))
    assert capture(lambda: None).ops == ()  # the capture ended with the step


def test_logger_writes_and_releases_the_capture_when_the_step_raises(tf4, tmp_path):
    import keras

    tf = tf4

    class Checked(keras.layers.Layer):
        def call(self, x):
            tf.debugging.assert_less(tf.reduce_max(x), 10.0, message="input too large")
            return x

    model = keras.Sequential([keras.Input((4,)), Checked(), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((8, 4), dtype="float32")
    x[4:] = 100.0  # the second batch (step 1) fails
    logger = PlacementLogger(tmp_path, at_step=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="input too large"):
        model.fit(x, np.zeros((8, 2)), batch_size=4, shuffle=False, epochs=1, verbose=0, callbacks=[logger])
    assert logger.report is not None
    assert read_placement(tmp_path).ops == logger.report.ops
    assert capture(lambda: None).ops == ()  # no capture left running


@pytest.mark.parametrize("framework", ["keras", "tf_keras"])
def test_a_fit_that_raises_elsewhere_leaves_nothing_on(tf4, tmp_path, framework):
    """Keras calls no on_train_end when fit raises: the watch, the wrapped train function and the worker let go."""
    from tfdevices import runtime

    K = importlib.import_module(framework)  # noqa: N806 (the Keras module)

    class Fails(K.callbacks.Callback):  # another callback fails before the step the logger wrapped runs
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 3:
                raise RuntimeError("another callback failed")

    model = _model(K, tf4)
    logger = PlacementLogger(tmp_path, at_step=3, framework=framework)
    held = runtime._RUN_METADATA["holders"]
    with pytest.raises(RuntimeError, match="another callback failed"):
        model.fit(np.ones((24, 4)), np.zeros((24, 2)), batch_size=4, verbose=0, callbacks=[logger, Fails()])
    assert logger._captures.watch is not None and not logger._captures.watch.running
    assert runtime._RUN_METADATA["holders"] == held  # the logger's hold let go
    assert model.train_function.__name__ != "captured"  # Keras' own again
    assert logger._captures.worker._thread is None  # written what it had, and ended
    model.fit(np.ones((8, 4)), np.zeros((8, 2)), batch_size=4, verbose=0)  # fits on as Keras made it


def test_step_beyond_training_captures_nothing(tf4, tmp_path):
    import keras

    model = _model(keras, tf4)
    logger = PlacementLogger(tmp_path, at_step=50)
    with pytest.warns(RuntimeWarning, match=r"^PlacementLogger\(at_step=50\) captured nothing: training ran 2 step"):
        model.fit(np.ones((8, 4)), np.zeros((8, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])
    assert logger.report is None
    assert model.train_function.__name__ != "captured"  # Keras' own (TF 2.16's tf.function has a __wrapped__ too)
    with pytest.raises(InputError, match="no placement summary") as err:  # the logger said why, in placement/status
        read_placement(tmp_path)
    assert "HINT: a PlacementLogger ran here but captured no step: its at_step never came" in str(err.value), str(
        err.value
    )


@pytest.mark.parametrize(
    "kwargs, first_words",
    [
        ({"at_step": -1}, "PlacementLogger(at_step=-1): expected a training step >= 0"),
        ({"at_step": 1.5}, "PlacementLogger(at_step=1.5): expected a training step >= 0"),
        ({"framework": "jax"}, "PlacementLogger(framework='jax'): expected one of keras, tf_keras"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, first_words):
    with pytest.raises(InputError) as err:
        PlacementLogger(tmp_path, **kwargs)
    assert str(err.value).startswith(first_words)


def test_an_argument_the_logger_does_not_have_is_named_with_those_it_has(tmp_path):
    with pytest.raises(InputError) as err:
        PlacementLogger(tmp_path, evry=100, framework="keras")
    assert str(err.value).startswith(
        "PlacementLogger(evry=...): no such argument; PlacementLogger takes logdir, at_step, every, budget,"
    )
    assert "HINT:" in str(err.value)


def test_the_arguments_are_one_checked_record_and_the_signature_says_them(tmp_path, monkeypatch):
    from tfdevices.tensorboard import PlacementLoggerConfig

    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    logger = PlacementLogger(tmp_path, 3, every=10, memory=False)
    assert logger.config == PlacementLoggerConfig(at_step=3, every=10, framework="keras", memory=False)
    assert (logger.logdir, type(logger.config.budget)) == (str(tmp_path), float)
    with pytest.raises(InputError, match=r"^PlacementLogger\(budget=2\)"):
        PlacementLoggerConfig(budget=2)
    signature = inspect.signature(PlacementLogger)
    assert list(signature.parameters)[:3] == ["logdir", "at_step", "every"]
    assert set(signature.parameters) == {"logdir"} | {f.name for f in dataclasses.fields(PlacementLoggerConfig)}


def test_every_n_steps_makes_series_over_steps_and_one_host_memory_series(tf4, tmp_path):
    import keras
    from tensorboard.backend.event_processing import event_accumulator

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    logger = PlacementLogger(tmp_path, at_step=1, every=2, framework="keras")
    model.fit(np.ones((24, 4)), np.zeros((24, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])
    assert logger.steps == [1, 3, 5]
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()[event_accumulator.TENSORS]
    # a series, not a single point: each capture's op counts, by device (on TensorFlow 2.16 a capture of a
    # function that ran before may report some kernels on '?': README's support table), at its step
    ops_tags = [t for t in tags if t.startswith("placement/ops/")]
    assert sorted({e.step for t in ops_tags for e in acc.Tensors(t)}) == [1, 3, 5], ops_tags
    memory = [t for t in tags if t.startswith("placement/memory/")]
    assert all(t.startswith("placement/memory/CPU/") for t in memory), memory  # the shared host allocator once
    # the Text tab shows the markdown report; the JSON is the Placement tab's data, not a text entry
    assert acc.SummaryMetadata("placement/report").plugin_data.plugin_name == "text"
    assert acc.SummaryMetadata("placement/json").plugin_data.plugin_name == "placement"
    assert read_placement(tmp_path).ops  # the latest capture reads back


@pytest.mark.parametrize("every", [0, -1, 1.5, True, "2"])
def test_every_must_be_a_whole_number_of_steps(every, tmp_path):
    with pytest.raises(InputError, match=r"^PlacementLogger\(every="):
        PlacementLogger(tmp_path, every=every, framework="keras")


# ----------------------------------------------------------------------------- a logger you can leave on


def _retracing_fit(tf, tmp_path, **logger_kwargs):
    """50 steps of batch 16, then a new input shape (batch 4): Keras retraces its train function at step 50."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), shape_switch(keras, tf), keras.layers.Dense(1, name="head")])
    model.compile(optimizer="sgd", loss="mse")

    def data(batch, batches):
        x = tf.ones([batch * batches, 8])
        return tf.data.Dataset.from_tensor_slices((x, tf.zeros([batch * batches, 1]))).batch(batch, drop_remainder=True)

    logger = PlacementLogger(tmp_path, at_step=10, every=10, framework="keras", **logger_kwargs)
    model.fit(data(16, 50), epochs=1, verbose=0, callbacks=[logger])
    model.fit(data(4, 10), epochs=1, verbose=0, callbacks=[logger])
    return logger


def test_a_retrace_at_step_50_is_reported_with_the_ops_that_moved(tf4, tmp_path):
    from tensorboard.backend.event_processing import event_accumulator

    logger = _retracing_fit(tf4, tmp_path)
    assert logger.steps == [10, 20, 30, 40, 50]
    assert len(logger.changes) == 1, [c.summary() for c in logger.changes]  # steps 20 to 40 repeat step 10
    (change,) = logger.changes
    assert (change.step, change.previous_step, change.retraced) == (50, 40, True)
    moved = {name: (a, b) for name, a, b in change.moved}
    assert moved and all(ab == ("CPU:0", "CPU:1") for ab in moved.values()), moved
    assert any("/switch" in name and name.endswith("/MatMul") for name in moved), moved
    assert change.why.startswith("(16, 8) float32, (16, 1) float32 -> "), change.why  # its inputs changed
    assert logger.report.notes[0].startswith("changed: step 50 (since step 40): a new traced function")
    acc = event_accumulator.EventAccumulator(
        str(tmp_path), size_guidance={event_accumulator.TENSORS: 0, event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    from tensorboard.util import tensor_util

    moved_series = {
        e.step: tensor_util.make_ndarray(e.tensor_proto).item() for e in acc.Tensors("placement/drift/moved_ops")
    }
    assert moved_series == {20: 0.0, 30: 0.0, 40: 0.0, 50: float(len(change.moved))}
    assert [e.step for e in acc.Tensors("placement/drift")] == [50]


def test_on_change_raise_stops_fit_at_the_first_capture_after_the_retrace(tf4, tmp_path):
    from tfdevices.core.errors import PlacementChangedError

    # the ops named: the switch that moved (Keras 3.15), or on Keras 3.3 a new traced function whose ops are
    # listed first by what appeared, the switch among the rest
    with pytest.raises(PlacementChangedError, match=r"^placement changed during training: step 50 .*op\(s\)") as err:
        _retracing_fit(tf4, tmp_path, on_change="raise")
    assert "HINT:" in str(err.value)


def test_on_change_calls_a_callable_and_warns(tf4, tmp_path):
    seen = []
    logger = _retracing_fit(tf4, tmp_path / "a", on_change=seen.append)
    assert [c.step for c in seen] == [50] and seen[0] is logger.changes[0], [c.summary() for c in seen]
    with pytest.warns(RuntimeWarning, match="placement changed: step 50"):
        _retracing_fit(tf4, tmp_path / "b", on_change="warn")


def _graph_events(logdir) -> int:
    from tensorboard.backend.event_processing import event_file_loader

    count = 0
    for root, _, files in os.walk(logdir):
        for name in files:
            if "tfevents" in name:
                count += sum(
                    1
                    for e in event_file_loader.EventFileLoader(os.path.join(root, name)).Load()
                    if e.HasField("graph_def")
                )
    return count


def test_one_traced_function_writes_its_graph_once_however_many_captures(tf4, tmp_path):
    import keras

    model = _model(keras, tf4)
    logger = PlacementLogger(tmp_path, at_step=1, every=2, framework="keras")
    model.fit(np.ones((40, 4)), np.zeros((40, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])
    assert logger.steps == [1, 3, 5, 7, 9]
    assert _graph_events(tmp_path) == 1


def test_every_auto_spaces_captures_by_their_measured_cost(tf4, tmp_path):
    import keras

    model = _model(keras, tf4)
    logger = PlacementLogger(tmp_path, at_step=1, every="auto", budget=0.5, framework="keras")
    model.fit(np.ones((400, 4)), np.zeros((400, 2)), batch_size=2, epochs=1, verbose=0, callbacks=[logger])
    assert len(logger.steps) >= 2 and len(logger.costs) == len(logger.steps)
    gaps = [b - a for a, b in zip(logger.steps, logger.steps[1:])]
    assert all(gap > 1 for gap in gaps), gaps  # spaced out, never every step
    plans = logger._captures.schedule.plans
    assert [p[0] for p in plans[: len(gaps)]] == logger.steps[:-1]  # each capture planned the next one
    for (step, planned, step_s, cost), after, measured in zip(plans, logger.steps[1:], logger.costs):
        # captured where planned, from that capture's own cost; the plan is made once three steps after the
        # capture were timed, so a capture cheap enough to allow an earlier one comes four steps after the last
        assert after == max(planned, step + 4) and cost == measured
        assert planned - step == max(1, math.ceil(cost / (0.5 * step_s)))  # what the budget allows


@pytest.mark.parametrize(
    "kwargs, first_words",
    [
        ({"budget": 0}, "PlacementLogger(budget=0)"),
        ({"budget": 0.9}, "PlacementLogger(budget=0.9)"),
        ({"on_change": "panic"}, "PlacementLogger(on_change='panic')"),
        ({"busy_threshold": 0}, "PlacementLogger(busy_threshold=0)"),
        ({"every": "sometimes"}, "PlacementLogger(every='sometimes')"),
    ],
)
def test_bad_leave_on_arguments(tmp_path, kwargs, first_words):
    with pytest.raises(InputError) as err:
        PlacementLogger(tmp_path, framework="keras", **kwargs)
    assert str(err.value).startswith(first_words) and "HINT:" in str(err.value)
