"""Tests for tfdevices.layers.place on 4 logical CPUs, verified with tfdevices.verify."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.helpers import run_py
from tests.keras_models import skip_model
from tfdevices.core.errors import PlanError
from tfdevices.layers.plan import LayerPlan, plan_layers

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


def mlp(keras, n=8, width=16, seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((width,))] + [keras.layers.Dense(width * (1 + i % 2), name=f"d{i}") for i in range(n)]
    )


def activation_transfers(report, plan: LayerPlan):
    """Transfers of a planned layer's output between planned devices, leaving out the model's final output."""
    inner = list(plan.layers[:-1])
    scoped = re.compile(r"(^|/)(" + "|".join(map(re.escape, inner)) + r")(_\d+)?/")
    return [
        t
        for t in report.transfers
        if t.src in plan.devices and t.dst in plan.devices and "ctrl" not in t.tensor and scoped.search(t.tensor)
    ]


def weight_reads_across(report):
    return [r for r in report.variables_on() if r.crosses_devices]


def devices_of(model):
    from tfdevices.core.devices import short_name

    return {w.path: short_name(w.value.device) for w in model.weights}


def copy_of(keras, model):
    twin = keras.models.clone_model(model)
    twin.set_weights(model.get_weights())
    return twin


PLANS = [
    ("optimal", lambda keras: mlp(keras), DEVICES),
    ("optimal-2", lambda keras: mlp(keras, n=5), DEVICES[:2]),
    ("manual-skip", lambda keras: skip_model(keras, seed=0), {"a": "CPU:0", "b": "CPU:1", "c": "CPU:0", "d": "CPU:2"}),
    ("manual-sandwich", lambda keras: mlp(keras, n=3), {"d0": "CPU:0", "d1": "CPU:3", "d2": "CPU:0"}),
]


@pytest.mark.parametrize("name,make,devices", PLANS, ids=[p[0] for p in PLANS])
def test_placed_forward_pass_reads_weights_locally_and_moves_each_activation_once(tf4, name, make, devices):
    import keras

    from tfdevices import capture, place_layers

    tf = tf4
    model = make(keras)
    plan = plan_layers(model, devices)
    reference = copy_of(keras, model)
    x = tf.constant(np.random.default_rng(1).random((8, model.inputs[0].shape[-1]), dtype=np.float32))
    placed = place_layers(model, plan)

    homes = devices_of(placed)
    for layer in placed.layers[-len(plan.layers) :]:
        assert {homes[w.path] for w in layer.weights} <= {plan.device_of(layer.name)}
    step = tf.function(lambda t: placed(t))
    report = capture(step, x)
    assert weight_reads_across(report) == []
    moved = activation_transfers(report, plan)
    assert len(moved) == plan.transfers
    for layer in plan.layers:
        if placed.get_layer(layer).weights:
            report.assert_on(plan.device_of(layer), ops=[f"{layer}/*", f"{layer}_[0-9]*/*"])
    np.testing.assert_array_equal(step(x).numpy(), reference(x).numpy())


def test_the_by_hand_tf_device_habit_copies_weights_every_step(tf4):
    """The trap the module fixes: tf.device in call moves compute, not the variables."""
    import keras

    from tfdevices import capture

    tf = tf4

    class ByHand(keras.Model):
        def __init__(self):
            super().__init__()
            self.one, self.two = keras.layers.Dense(8), keras.layers.Dense(8)

        def call(self, x):
            with tf.device("/CPU:0"):
                x = self.one(x)
            with tf.device("/CPU:1"):
                return self.two(x)

    model = ByHand()
    x = tf.ones((4, 8))
    model(x)
    report = capture(tf.function(lambda t: model(t)), x)
    crossing = weight_reads_across(report)
    assert crossing and all(r.stored_on == "CPU:0" and "CPU:1" in r.read_on for r in crossing)


def test_fit_trains_like_the_unplaced_model_with_optimizer_state_on_each_device(tf4):
    import keras

    from tfdevices import capture, place_layers

    tf = tf4
    model = mlp(keras, n=6)
    reference = copy_of(keras, model)
    plan = plan_layers(model, DEVICES)
    placed = place_layers(model, plan)
    rng = np.random.default_rng(2)
    x, y = rng.random((32, 16), dtype=np.float32), rng.random((32, 32), dtype=np.float32)
    for m in (placed, reference):
        m.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        m.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(placed.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(placed.get_weights()[0], copy_of(keras, mlp(keras, n=6)).get_weights()[0])

    homes = devices_of(placed)
    for slot in placed.optimizer.variables:
        owner = [p for p in homes if slot.name.startswith(p.replace("/", "_") + "_")]
        if owner:
            assert slot.value.device.endswith(homes[max(owner, key=len)])
    data = iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat())
    report = capture(placed.train_function, data)
    across = weight_reads_across(report)
    assert all(r.bytes is not None and r.bytes <= 8 for r in across), across  # only step counter / learning rate
    assert len(activation_transfers(report, plan)) >= plan.transfers


def test_save_and_load_keep_weights_and_the_plan_reapplies(tf4, tmp_path):
    import keras

    from tfdevices import place_layers

    tf = tf4
    plan = plan_layers(skip_model(keras, seed=0), DEVICES[1:3])
    placed = place_layers(skip_model(keras, seed=3), plan)
    placed.compile(optimizer="sgd", loss="mse")
    x = tf.constant(np.random.default_rng(4).random((5, 6), dtype=np.float32))
    placed.save(tmp_path / "m.keras")
    placed.save_weights(tmp_path / "m.weights.h5")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert set(devices_of(loaded).values()) == {"CPU:0"}
    again = place_layers(loaded, plan)
    assert dict(devices_of(again)) == {w.path: plan.device_of(w.path.split("/")[-2]) for w in again.weights}
    np.testing.assert_allclose(again(x).numpy(), placed(x).numpy(), rtol=1e-6)
    fresh = place_layers(skip_model(keras, seed=9), plan)
    fresh.load_weights(tmp_path / "m.weights.h5")
    np.testing.assert_allclose(fresh(x).numpy(), placed(x).numpy(), rtol=1e-6)
    assert set(devices_of(fresh).values()) == set(plan.devices)


def test_builder_creates_each_variable_on_its_device(tf4):
    import keras

    from tfdevices import place_layers

    tf = tf4
    plan = plan_layers(mlp(keras, n=4), DEVICES)
    created = []

    def spy(next_creator, **kwargs):
        var = next_creator(**kwargs)
        created.append(var.device)
        return var

    with tf.variable_creator_scope(spy):
        placed = place_layers(lambda: mlp(keras, n=4), plan)
    assert sorted({d[-5:] for d in created}) == sorted(set(plan.devices))
    assert [devices_of(placed)[w.path] for w in placed.weights] == [
        plan.device_of(w.path.split("/")[-2]) for w in placed.weights
    ]


def test_balance_by_time_measures_every_layer_on_every_device(tf4):
    import keras

    model = mlp(keras, n=4)
    plan = plan_layers(model, DEVICES[:2], balance_by="time", sample=np.ones((4, 16), np.float32))
    assert plan.balance_by == "time" and all(c > 0 for c in plan.costs)
    assert plan.bottleneck == max(s.cost for s in plan.stages)


BAD = [
    (
        "unknown device",
        lambda keras: (mlp(keras, n=2), {"*": "CPU:7"}),
        {},
        "plan puts layers on ['CPU:7'], which TensorFlow does not see; it sees",
    ),
    ("another model", lambda keras: (mlp(keras, n=2), None), {"other": True}, "plan is for layers"),
]


@pytest.mark.parametrize("what,make,opts,message", BAD, ids=[b[0] for b in BAD])
def test_bad_placements_are_plan_errors(tf4, what, make, opts, message):
    import keras

    from tfdevices import place_layers

    model, mapping = make(keras)
    plan = plan_layers(skip_model(keras, seed=0) if opts.get("other") else model, mapping or DEVICES[:2])
    with pytest.raises(PlanError) as err:
        place_layers(model, plan)
    assert str(err.value).startswith(message) and "HINT:" in str(err.value)


def test_jit_compile_true_is_refused_on_a_placed_model(tf4):
    import keras

    from tfdevices import place_layers

    model = mlp(keras, n=2)
    placed = place_layers(model, plan_layers(model, DEVICES[:2]))
    with pytest.raises(PlanError, match="jit_compile=True on a placed model"):
        placed.compile(optimizer="sgd", loss="mse", jit_compile=True)
    placed.compile(optimizer="sgd", loss="mse")
    assert placed.jit_compile is False


def test_tf_keras_models_are_refused_with_a_clear_error(tf4):
    import tf_keras

    from tfdevices import place_layers

    model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2, name="d")])
    plan = plan_layers([1.0], ["CPU:0"])
    with pytest.raises(PlanError, match="is not a Keras 3 model"):
        place_layers(model, plan)


def test_layers_demo_runs_and_shows_the_plan_and_verified_placement():
    proc = run_py(
        """
        import sys
        from tfdevices.demos import layers
        from absl import app
        sys.argv = ["layers", "--layers=12", "--devices=3"]
        app.run(layers.main)
    """,
        check=False,
        timeout=240,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "bottleneck" in out and "by hand" in out and "placed" in out
    assert re.search(r"weights read across devices: 0\b", out), out
