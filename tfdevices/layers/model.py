"""Reads a Keras model into what the layer planner needs: names, costs, bytes and edges.

The one module of :mod:`tfdevices.layers` that reads Keras internals (a layer's
inbound nodes, its weights, its output shape); :mod:`tfdevices.layers.plan`
works on the :class:`LayerCosts` this returns, and never on the model.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfdevices.core.errors import PlanError
from tfdevices.mends.tf_import import import_tf


@dataclass(frozen=True)
class LayerCosts:
    """What the planner needs from a model: names, costs per kind, bytes, and data edges.

    Pure data: the planner reads this, never the model itself.
    """

    names: tuple[str, ...]
    params: tuple[float, ...]
    flops: tuple[float, ...]
    memory: tuple[int, ...]
    edges: tuple[tuple[int, int, int], ...]  # (producer, output index, consumer); producer -1 = model input
    model: Any = None


def read_model(model: Any) -> LayerCosts:
    """Reads a built Keras model (3 or tf_keras) into layer costs and data edges.

    Raises:
        PlanError: the model is not built or has no layers.
    """
    if not getattr(model, "built", False):
        raise PlanError(
            f"model {getattr(model, 'name', model)!r} is not built, so its layers have no sizes yet.",
            hint="build it first: model.build(input_shape), or start it with keras.Input(...).",
        )
    layers = [layer for layer in model.layers if type(layer).__name__ != "InputLayer"]
    if not layers:
        raise PlanError(f"model {model.name!r} has no layers to place.", hint="plan a model with layers.")
    index = {id(layer): i for i, layer in enumerate(layers)}
    edges = _model_edges(model, layers, index)
    return LayerCosts(
        names=tuple(layer.name for layer in layers),
        params=tuple(float(layer.count_params()) for layer in layers),
        flops=tuple(_flops(layer) for layer in layers),
        memory=tuple(_layer_bytes(layer) for layer in layers),
        edges=edges,
        model=model,
    )


def _model_edges(model: Any, layers: Sequence[Any], index: Mapping[int, int]) -> tuple[tuple[int, int, int], ...]:
    if type(model).__name__ == "Sequential" or not hasattr(layers[0], "_inbound_nodes"):
        return tuple((i, 0, i + 1) for i in range(len(layers) - 1))
    edges = set()
    for c, layer in enumerate(layers):
        for node in layer._inbound_nodes:
            arguments = getattr(node, "arguments", None)  # Keras 3; tf_keras nodes have keras_inputs
            for tensor in arguments.keras_tensors if arguments is not None else node.keras_inputs:
                history = tensor._keras_history
                p = index.get(id(getattr(history, "operation", None) or history.layer), -1)
                edges.add((p, history.tensor_index, c))
    return tuple(sorted(edges))


def _layer_bytes(layer: Any) -> int:
    return sum(_size(w.shape) * _itemsize(str(getattr(w.dtype, "name", w.dtype))) for w in layer.weights)


def _size(shape: Sequence[int | None]) -> int:
    return math.prod(1 if s is None else int(s) for s in shape)


def _itemsize(dtype: str) -> int:
    bits = re.search(r"(\d+)$", dtype)
    return max(1, int(bits.group(1)) // 8) if bits else 1


def _flops(layer: Any) -> float:
    """Per-sample estimate: 2 multiply-adds per weight per output position, plus one op per output value."""
    shape = _output_shape(layer)
    positions = _size(shape[1:-1]) if len(shape) > 2 else 1
    return float(2 * layer.count_params() * positions + _size(shape[1:]))


def _output_shape(layer: Any) -> tuple[int | None, ...]:
    nodes = getattr(layer, "_inbound_nodes", None) or []
    outputs = nodes[0].outputs if nodes else []
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]  # tf_keras: a single tensor
    return tuple(outputs[0].shape) if outputs else (None,)


def measure_layer_times(
    model: Any, sample: Any, devices: Sequence[str], *, repeats: int = 5, number: int = 10
) -> dict[str, list[float]]:
    """Seconds per call of each layer on each device, on the activations ``sample`` produces.

    Each layer is cloned from its config onto each device (weights created there,
    so no weight crosses devices while timing) and run as a ``tf.function`` on a
    copy of its real input; the time is the best of ``repeats`` means over
    ``number`` calls.

    Args:
        model: a built Keras 3 model.
        sample: an input batch for the model.
        devices: TensorFlow logical devices.
        repeats: timing repeats; the fastest is kept.
        number: calls per repeat.

    Returns:
        ``{device: [seconds per call of each layer, in plan order]}``.

    Raises:
        PlanError: a layer cannot be cloned from its config (a custom layer not
            registered with Keras), or the model is not a Keras 3 model.
    """
    tf = import_tf()
    import keras  # noqa: PLC0415 (lazy Keras)

    layers = [layer for layer in model.layers if type(layer).__name__ != "InputLayer"]
    probe = keras.Model(model.inputs, [layer.input for layer in layers])
    inputs = probe(sample)
    times: dict[str, list[float]] = {}
    for device in devices:
        times[device] = [_time_layer(tf, keras, layer, x, device, repeats, number) for layer, x in zip(layers, inputs)]
    return times


def _time_layer(tf: Any, keras: Any, layer: Any, x: Any, device: str, repeats: int, number: int) -> float:
    try:
        clone = keras.layers.deserialize(keras.layers.serialize(layer))
    except Exception as err:  # noqa: BLE001 (any failure to rebuild from config means: cannot time it)
        raise PlanError(
            f"layer {layer.name!r} ({type(layer).__name__}) cannot be rebuilt from its config to "
            f"time it on {device}: {err}",
            hint="register the layer with Keras (keras.saving.register_keras_serializable) or balance by params/flops.",
        ) from None
    with tf.device(device):
        x = tf.nest.map_structure(tf.identity, x)
        step = tf.function(lambda t: clone(t))
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, step(x))
        best = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(number):
                out = step(x)
            tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)
            best.append((time.perf_counter() - start) / number)
    return min(best)
