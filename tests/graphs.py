"""Small TensorFlow computations the tests share (call with TensorFlow already configured)."""

from __future__ import annotations

from typing import Any


def one_then_four(tf: Any) -> tuple[Any, Any]:
    """A step with one 384x384 MatMul on CPU:0 feeding a chain of four on CPU:1, traced and run once.

    The chain waits on CPU:0's result, so the two devices (logical CPUs on the same cores) do
    not run at the same time: CPU:1 does four times CPU:0's work. Returns ``(step, x)``.
    """
    with tf.device("/CPU:0"):
        w = [tf.Variable(tf.random.normal([384, 384], stddev=0.05, seed=i)) for i in range(5)]

    @tf.function
    def step(x: Any) -> Any:
        with tf.device("/CPU:0"):
            one = tf.matmul(x, w[0])
        with tf.device("/CPU:1"):
            four = one
            for k in range(1, 5):
                four = tf.matmul(four, w[k])
        return four

    x = tf.random.normal([384, 384], seed=7)
    step(x)
    return step, x


def train_step(tf: Any, layers: int = 20) -> Any:
    """A Keras MLP's train step (``layers`` Dense(8, relu), GradientTape, SGD), as a ``tf.function`` of no arguments."""
    keras = tf.keras
    model = keras.Sequential([keras.Input((8,)), *[keras.layers.Dense(8, activation="relu") for _ in range(layers)]])
    optimizer = keras.optimizers.SGD(0.01)
    x = tf.ones([4, 8])

    @tf.function
    def train() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return train


def split_and_nested(tf: Any) -> Any:
    """A function over CPU:0 and CPU:2 calling one kept apart (not inlined) on CPU:1: transfers among all three."""

    @tf.function(experimental_attributes={"_noinline": True})
    def inner(x: Any) -> Any:
        with tf.device("/CPU:1"):
            return tf.nn.relu(tf.matmul(x, x, transpose_b=True))

    @tf.function
    def outer(x: Any) -> Any:
        with tf.device("/CPU:0"):
            y = inner(x) + 1.0
        with tf.device("/CPU:2"):
            return tf.reduce_sum(y * 2.0)

    x = tf.ones([3, 5])
    return lambda: outer(x)


def eager_ops(tf: Any) -> Any:
    """Eager ops on CPU:1 and CPU:3, as a function of no arguments."""

    def eager() -> Any:
        with tf.device("/CPU:1"):
            y = tf.ones([4, 4]) * 3.0
        with tf.device("/CPU:3"):
            return tf.reduce_sum(tf.matmul(y, y))

    return eager
