"""A 2-worker job over build_strategy("multi_worker") with one rank slow on purpose, for the slow-rank tests.

Usage: slow_rank.py MODE KIND RANKS STEPS
MODE: loop (a custom loop: a tf.function step whose all-reduce sums across workers) or fit (Keras fit).
KIND:
  between     RANKS sleep 40 ms before each step (a slow input pipeline or host code)
  compute     RANKS' step does 40 more matmuls before the all-reduce (a slower or busier device)
  balanced    nobody is slow
  checkpoint  fit over 2 epochs whose chief (rank 0) alone sleeps 1.5 s at each epoch's end in a callback
RANKS: a comma list of ranks ("1", "0,1"; "" for none); every listed rank is slowed alike.
Each rank prints "rank R done" when it ends.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfdevices

SLEEP_S = 0.04
EXTRA_MATMULS = 40


def main(mode: str, kind: str, ranks: set[int], steps: int) -> None:
    strategy = tfdevices.build_strategy("multi_worker")
    tf = tfdevices.core._tf.import_tf()
    rank = tfdevices.launch_info().rank
    slow = rank in ranks
    extra = EXTRA_MATMULS if kind == "compute" and slow else 0
    if mode == "loop":
        loop(
            tf,
            strategy,
            steps,
            extra,
            sleep=SLEEP_S if kind == "between" and slow else 0.0,
        )
    else:
        fit(tf, strategy, rank, kind, steps, extra, slow)
    print(f"rank {rank} done", flush=True)


def _work(tf, x, extra: int):
    y = x
    for _ in range(extra):  # more work on this replica before the all-reduce
        y = tf.tanh(tf.matmul(y, x))
    return y


def loop(tf, strategy, steps: int, extra: int, sleep: float) -> None:
    with strategy.scope():
        w = tf.Variable(tf.zeros((128, 128)))
    x = tf.random.stateless_normal((128, 128), seed=(1, 2)) * 0.1

    @tf.function
    def step():
        def replica():
            y = _work(tf, x, extra)
            context = tf.distribute.get_replica_context()
            w.assign_add(context.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_mean(y) * tf.ones((128, 128))))

        strategy.run(replica)

    for _ in range(steps):
        if sleep:
            time.sleep(sleep)  # the input pipeline or host code of this rank
        step()


def fit(tf, strategy, rank: int, kind: str, steps: int, extra: int, slow: bool) -> None:
    import keras

    class Slow(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if kind == "between" and slow:
                time.sleep(SLEEP_S)  # host code of this rank (an unnamed hook: not a phase)

        def on_epoch_end(self, epoch, logs=None):
            if kind == "checkpoint" and rank == 0:
                time.sleep(1.5)  # the chief alone writes a slow checkpoint

    class Extra(keras.layers.Layer):
        def call(self, x):
            return x + 0.0 * tf.reduce_mean(_work(tf, tf.ones((128, 128)) * 0.01, extra))

    x = tf.random.stateless_normal((16 * steps, 4), seed=(1, 2))
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), Extra(), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    epochs = 2 if kind == "checkpoint" else 1
    model.fit(
        data,
        epochs=epochs,
        steps_per_epoch=steps // epochs,
        verbose=0,
        callbacks=[Slow()],
    )


if __name__ == "__main__":
    main(
        sys.argv[1],
        sys.argv[2],
        {int(r) for r in sys.argv[3].split(",") if r},
        int(sys.argv[4]),
    )
