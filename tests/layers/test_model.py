"""The model reader: a Keras model (3 or tf_keras) into the LayerCosts the planner reads."""

from __future__ import annotations

import pytest

from tests.keras_models import skip_model
from tfdevices.core.errors import PlanError
from tfdevices.layers.model import LayerCosts, read_model


def test_a_functional_graph_gives_its_layers_costs_and_edges(tf4):
    import keras

    model = skip_model(keras)
    costs = read_model(model)
    assert isinstance(costs, LayerCosts) and costs.model is model
    assert costs.names == ("a", "b", "c", "d")  # the InputLayer is left out
    params = (6 * 5 + 5, 5 * 5 + 5, 0, 5 * 3 + 3)
    assert costs.params == tuple(float(p) for p in params)
    assert costs.memory == tuple(4 * p for p in params)  # float32 weights
    assert costs.flops == tuple(float(2 * p + out) for p, out in zip(params, (5, 5, 5, 3)))
    # (producer, output index, consumer); -1 is the model's input; a feeds b and c (the skip)
    assert costs.edges == ((-1, 0, 0), (0, 0, 1), (0, 0, 2), (1, 0, 2), (2, 0, 3))


def test_a_sequential_model_is_a_chain(tf4):
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2), keras.layers.ReLU()])
    costs = read_model(model)
    assert len(costs.names) == 3
    assert costs.edges == ((0, 0, 1), (1, 0, 2))
    assert costs.params == (15.0, 8.0, 0.0)


def test_tf_keras_models_are_read_the_same(tf4):
    import keras
    import tf_keras

    inp = tf_keras.Input((6,))
    a = tf_keras.layers.Dense(5, name="a")(inp)
    b = tf_keras.layers.Dense(5, name="b")(a)
    d = tf_keras.layers.Dense(3, name="d")(tf_keras.layers.Add(name="c")([a, b]))
    old, new = read_model(tf_keras.Model(inp, d)), read_model(skip_model(keras))
    assert (old.names, old.params, old.memory, old.edges) == (new.names, new.params, new.memory, new.edges)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda k: k.Sequential([k.layers.Dense(3)]), "is not built, so its layers have no sizes yet"),
        (lambda k: k.Model(*[k.Input((3,))] * 2), "has no layers to place"),
    ],
)
def test_models_that_cannot_be_read(tf4, make, words):
    import keras

    with pytest.raises(PlanError, match=words):
        read_model(make(keras))
