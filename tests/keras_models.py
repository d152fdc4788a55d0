"""Small Keras models the tests share (Keras 3 or tf_keras: pass the module)."""

from __future__ import annotations

from typing import Any


def on_device_layer(keras: Any, tf: Any) -> type:
    """The layer people write to move one layer to a device: ``call`` under ``tf.device``.

    Keras 3 builds the wrapped layer outside the scope, so its weights stay on the
    first device and are copied every step; tf_keras builds it inside.
    """

    class OnDevice(keras.layers.Layer):
        def __init__(self, layer: Any, device: str, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.layer, self.device = layer, device

        def call(self, x: Any) -> Any:
            with tf.device(self.device):
                return self.layer(x)

    return OnDevice


def skip_model(keras: Any, seed: int | None = None) -> Any:
    """x -> a -> b, c = a + b, d: a functional graph with a skip connection."""
    if seed is not None:
        keras.utils.set_random_seed(seed)
    inp = keras.Input((6,), name="x")
    a = keras.layers.Dense(5, name="a")(inp)
    b = keras.layers.Dense(5, name="b")(a)
    c = keras.layers.Add(name="c")([a, b])
    d = keras.layers.Dense(3, name="d")(c)
    return keras.Model(inp, d)


def fit_with_profile(keras: Any, logdir: str, *, profile_batch: tuple[int, int] = (2, 3)) -> str:
    """Trains a two-Dense-layer model (``hidden``, ``out``) with ``keras.callbacks.TensorBoard(profile_batch=...)``.

    The profile users already have: TensorFlow's profiler writes it under
    ``LOGDIR/train/plugins/profile/<session>/<host>.xplane.pb``. Returns ``logdir``.
    """
    import numpy as np

    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu", name="hidden"), keras.layers.Dense(1, name="out")]
    )
    model.compile("sgd", "mse")
    x, y = np.ones((64, 8), "float32"), np.zeros((64, 1), "float32")
    model.fit(
        x,
        y,
        batch_size=8,
        epochs=1,
        verbose=0,
        callbacks=[keras.callbacks.TensorBoard(logdir, profile_batch=profile_batch)],
    )
    return logdir


def shape_switch(keras: Any, tf: Any) -> Any:
    """A layer whose device depends on its input's static batch size: 16 on CPU:0, anything else on CPU:1."""

    class ShapeSwitch(keras.layers.Layer):
        def build(self, shape: Any) -> None:
            self.dense = keras.layers.Dense(4, name="inner")
            self.dense.build(shape)

        def call(self, x: Any) -> Any:
            with tf.device("/CPU:0" if x.shape[0] == 16 else "/CPU:1"):
                return tf.nn.relu(tf.matmul(x, self.dense.kernel))

    return ShapeSwitch(name="switch")
