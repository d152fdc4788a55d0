"""Small models for ``tfdevices tune``: each function returns a compiled Keras model and its data.

``tfdevices tune tfdevices.decide.examples:wide_mlp`` runs one. They are tiny on purpose
(the README, the notebook and the tests run them); the benchmark uses the same shapes.
A function for tune takes no argument and returns ``(model, dataset)``: a compiled
Keras model and a ``tf.data.Dataset`` of ``(x, y)`` batches (tune repeats it).
"""

from __future__ import annotations

from typing import Any

from tfdevices.core.tf_door import import_tf

__all__ = ["deep_mlp", "small_convnet", "tiny_mlp", "wide_mlp"]


def _data(tf: Any, shape: tuple[int, ...], classes: int, batch: int, n: int = 8) -> Any:
    x = tf.random.stateless_normal((n * batch, *shape), seed=(1, 2))
    y = tf.random.stateless_uniform((n * batch,), seed=(3, 4), maxval=classes, dtype=tf.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True).cache()


def _mlp(widths: list[int], inputs: int, batch: int) -> tuple[Any, Any]:
    tf = import_tf()
    import keras  # noqa: PLC0415 (lazy Keras)

    layers = [keras.Input((inputs,))] + [keras.layers.Dense(w, activation="relu") for w in widths]
    model = keras.Sequential([*layers, keras.layers.Dense(10)])
    model.compile(
        optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model, _data(tf, (inputs,), 10, batch)


def wide_mlp() -> tuple[Any, Any]:
    """4 Dense layers of 512, batch 256 (the MLP of the issue's orientation figures)."""
    return _mlp([512] * 4, 64, 256)


def deep_mlp() -> tuple[Any, Any]:
    """16 Dense layers of 64, batch 64: many small kernels."""
    return _mlp([64] * 16, 64, 64)


def tiny_mlp() -> tuple[Any, Any]:
    """2 Dense layers of 16, batch 32: for tests and examples (seconds per candidate)."""
    return _mlp([16, 16], 8, 32)


def small_convnet() -> tuple[Any, Any]:
    """Two 3x3 convolutions (16, 32 filters) on 28x28x1 images, batch 64."""
    tf = import_tf()
    import keras  # noqa: PLC0415 (lazy Keras)

    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model, _data(tf, (28, 28, 1), 10, 64)
