"""What a Keras user calls, through ``tf.keras``: Keras 3, or tf_keras (Keras 2) under ``TF_USE_LEGACY_KERAS=1``.

The same tests run in both flavours: ``make test`` runs them on Keras 3, ``make test-tf-keras``
(CI's tf_keras leg) with ``TF_USE_LEGACY_KERAS=1``, where ``tf.keras`` is tf_keras.
``build_strategy`` + ``fit``, ``PlacementLogger``, ``capture``, ``plan_layers`` /
``place_layers`` and ``launch -n 2`` with ``fit``. Where a feature is Keras 3's only
(``place_layers``), the tf_keras run checks that it says so, with a HINT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.helpers import REPO, subprocess_env
from tfdevices.core.errors import PlanError

LEGACY = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def keras(tf4):
    """``tf.keras``: the Keras this run's users get."""
    return tf4.keras


def _model(keras, seed: int = 1):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="tanh", name="d1"), keras.layers.Dense(1, name="d2")]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    return x, x.sum(1, keepdims=True).astype("float32")


def test_tf_keras_is_the_keras_this_run_asked_for(keras):
    """The tf_keras leg must run tf_keras: a Keras 3 there would leave it untested."""
    version = keras.__version__ if hasattr(keras, "__version__") else __import__("tf_keras").__version__
    assert version.startswith("2." if LEGACY else "3."), (LEGACY, version, keras.__name__)


def test_build_strategy_and_fit_end_where_one_device_ends(tf4, keras):
    import tfdevices

    strategy = tfdevices.build_strategy("mirrored", ["CPU:0", "CPU:1"])  # mends Keras 3.3-3.7's fit (keras_fit)
    x, y = _data()
    ds = tf4.data.Dataset.from_tensor_slices((x, y)).batch(16)
    with strategy.scope():
        mirrored = _model(keras)
    mirrored.fit(ds, epochs=2, verbose=0, shuffle=False)
    with tf4.device("/CPU:0"):
        single = _model(keras)
        single.fit(ds, epochs=2, verbose=0, shuffle=False)
    for got, want in zip(mirrored.get_weights(), single.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_placement_logger_records_a_fit_step(tf4, keras, tmp_path):
    from tfdevices.tensorboard import read_placement
    from tfdevices.tensorboard.callbacks import PlacementLogger

    model = _model(keras)
    logger = PlacementLogger(tmp_path, at_step=2)
    assert isinstance(logger, keras.callbacks.Callback)
    x, y = _data()
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[logger])
    assert logger.report is not None
    assert "MatMul" in {op.type for op in logger.report.ops}
    assert read_placement(tmp_path).ops == logger.report.ops


def test_capture_puts_each_layer_on_the_device_it_was_called_under(tf4, keras):
    from tfdevices import capture

    model = _model(keras)
    x = tf4.constant(_data()[0][:8])

    @tf4.function
    def step(t):
        with tf4.device("/CPU:1"):
            return model(t)

    report = capture(step, x)
    computed = [op for op in report.ops if op.type in ("MatMul", "BiasAdd", "Tanh")]
    assert [op.type for op in computed].count("MatMul") == 2 and {op.device for op in computed} == {"CPU:1"}, computed


def test_place_layers_places_keras_3_and_refuses_tf_keras_with_a_hint(tf4, keras):
    from tfdevices import place_layers, plan_layers

    model = _model(keras)
    plan = plan_layers(model, ["CPU:1", "CPU:2"])  # both flavours are planned
    assert list(plan.layers) and set(plan.devices) <= {"CPU:1", "CPU:2"}
    if not LEGACY:
        placed = place_layers(model, plan)
        homes = {getattr(w, "value", w).device.split("device:")[-1] for w in placed.weights}
        assert homes <= {"CPU:1", "CPU:2"}, homes
        return
    with pytest.raises(PlanError, match="is not a Keras 3 model") as caught:
        place_layers(model, plan)
    assert "HINT: place_layers supports Keras 3" in str(caught.value)


LAUNCHED = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tfdevices
    strategy = tfdevices.build_strategy("auto")   # before TensorFlow's runtime starts
    import tensorflow as tf
    keras = tf.keras
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32"); y = x.sum(1, keepdims=True).astype("float32")
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=2, verbose=0)
    rank = tfdevices.launch_info().rank
    with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
        json.dump({"workers": strategy.num_workers, "loss": history.history["loss"],
                   "weights": [w.tolist() for w in model.get_weights()]}, f)
""")


@pytest.mark.slow
def test_launch_two_workers_fit_the_same_weights(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tfdevices", "launch", "-n", "2", "--", sys.executable, "-c", LAUNCHED, str(tmp_path)],
        env=subprocess_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    first, second = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert first["workers"] == second["workers"] == 2
    assert first["loss"][1] < first["loss"][0]
    for a, b in zip(first["weights"], second["weights"]):
        np.testing.assert_array_equal(np.array(a), np.array(b))
