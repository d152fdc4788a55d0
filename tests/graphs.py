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
