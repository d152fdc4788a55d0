"""PlacementLogger inside real ``fit`` runs, with Keras 3 and with tf_keras.

These tests depend on the kernels TensorFlow picks (oneDNN or not): run them under
both TF_ENABLE_ONEDNN_OPTS=1 and TF_ENABLE_ONEDNN_OPTS=0.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tfdevices.core.errors import InputError
from tfdevices.tensorboard.callbacks import PlacementLogger
from tfdevices.verify import capture
from tfdevices.tensorboard import read_placement
from tests.keras_models import on_device_layer


def _model(K, tf, moved_device: str | None = None):
    """dense_1 -> dense_2 -> dense_3; dense_2 called under ``tf.device(moved_device)`` when given."""
    OnDevice = on_device_layer(K, tf)
    second = K.layers.Dense(6, name="dense_2")
    layers = [K.layers.Dense(5, name="dense_1"),
              OnDevice(second, moved_device, name="moved") if moved_device else second,
              K.layers.Dense(2, name="dense_3")]
    model = K.Sequential([K.Input((4,)), *layers])
    model.compile(optimizer="sgd", loss="mse")
    return model


@pytest.mark.parametrize("framework, dense_2_weights_on", [
    ("keras", "CPU:0"),  # Keras 3 builds the layer outside the tf.device scope: weights copied every step
    ("tf_keras", "CPU:1"),  # tf_keras builds it inside the scope: weights live where they are used
])
def test_logger_captures_one_fit_step_and_writes_it(tf4, tmp_path, framework, dense_2_weights_on):
    K = importlib.import_module(framework)
    model = _model(K, tf4, moved_device="/CPU:1")
    logger = PlacementLogger(tmp_path, at_step=2, framework=framework)
    assert isinstance(logger, K.callbacks.Callback) and isinstance(logger, PlacementLogger)
    model.fit(np.ones((12, 4)), np.zeros((12, 2)), batch_size=4, epochs=2, verbose=0, callbacks=[logger])
    report = logger.report
    assert report is not None
    report.assert_on("CPU:1", ops="/sequential*/moved*/*", types=["MatMul", "BiasAdd"])  # the forward pass
    assert report.transfers(src="CPU:0", dst="CPU:1") and report.transfers(src="CPU:1", dst="CPU:0")
    dense_2_reads = [r for r in report.variables_on() if "dense_2" in r.op and "gradient" not in r.op]
    assert dense_2_reads and {r.stored_on for r in dense_2_reads} == {dense_2_weights_on}
    assert all("CPU:1" in r.read_on for r in dense_2_reads)
    stored = read_placement(tmp_path)
    assert stored.ops == report.ops and stored.copies == report.copies
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


def test_step_beyond_training_captures_nothing(tf4, tmp_path):
    import keras

    model = _model(keras, tf4)
    logger = PlacementLogger(tmp_path, at_step=50)
    model.fit(np.ones((8, 4)), np.zeros((8, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])
    assert logger.report is None
    assert not hasattr(model.train_function, "__wrapped__") and model.train_function.__name__ != "captured"
    with pytest.raises(InputError, match="holds no TensorBoard event files|no placement summary"):
        read_placement(tmp_path)


@pytest.mark.parametrize("kwargs, first_words", [
    ({"at_step": -1}, "PlacementLogger(at_step=-1): expected a training step >= 0"),
    ({"at_step": 1.5}, "PlacementLogger(at_step=1.5): expected a training step >= 0"),
    ({"framework": "jax"}, "PlacementLogger(framework='jax'): expected one of keras, tf_keras"),
])
def test_bad_arguments(tmp_path, kwargs, first_words):
    with pytest.raises(InputError) as err:
        PlacementLogger(tmp_path, **kwargs)
    assert str(err.value).startswith(first_words)


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
    ops_tag = next(t for t in tags if t.startswith("placement/ops/"))
    assert sorted(e.step for e in acc.Tensors(ops_tag)) == [1, 3, 5]  # a series, not a single point
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
