"""A 2-worker job over build_strategy("multi_worker") whose ranks stop where a test says, for the stall tests.

Usage: stuck_rank.py MODE RANKS SECONDS [STEPS]
MODE:
  loop        a custom loop (a tf.function step with an all-reduce); RANKS sleep SECONDS before step 5
  fit         Keras 3 fit; RANKS' callback sleeps SECONDS at the beginning of batch 5 (the fifth step)
  checkpoint  fit over 2 epochs; rank 0's callback sleeps SECONDS at the end of epoch 1 (a chief-only save)
  dataset     a custom loop whose input sleeps SECONDS per batch on every rank (slow, but moving)
RANKS: a comma list of ranks ("1", "0,1"; "" for none). Each rank prints "rank R done" when it ends.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfdevices


def main(mode: str, ranks: set[int], seconds: float, steps: int) -> None:
    strategy = tfdevices.build_strategy("multi_worker")
    tf = tfdevices.core.tf_door.import_tf()
    rank = tfdevices.launch_info().rank
    if mode in ("loop", "dataset"):
        loop(tf, strategy, rank, mode, ranks, seconds, steps)
    else:
        fit(tf, strategy, rank, mode, ranks, seconds, steps)
    print(f"rank {rank} done", flush=True)


def loop(tf, strategy, rank: int, mode: str, ranks: set[int], seconds: float, steps: int) -> None:
    with strategy.scope():
        w = tf.Variable(0.0)

    @tf.function
    def step():
        def replica():
            context = tf.distribute.get_replica_context()
            w.assign_add(context.all_reduce(tf.distribute.ReduceOp.SUM, 1.0))

        strategy.run(replica)

    for n in range(1, steps + 1):
        if mode == "loop" and n == 5 and rank in ranks:
            time.sleep(seconds)  # alive, but not at step 5's all-reduce
        if mode == "dataset":
            time.sleep(seconds)  # the input of every rank: slow, the same on each
        step()
    assert float(w.numpy()) == 2.0 * steps, float(w.numpy())


def fit(tf, strategy, rank: int, mode: str, ranks: set[int], seconds: float, steps: int) -> None:
    import keras

    class Sleeper(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if mode == "fit" and batch == 4 and rank in ranks:
                time.sleep(seconds)

    class SlowCheckpoint(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if mode == "checkpoint" and epoch == 0 and rank == 0:
                time.sleep(seconds)  # the chief alone writes a slow checkpoint

    x = tf.random.stateless_normal((8 * steps, 4), seed=(1, 2))
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    epochs = 2 if mode == "checkpoint" else 1
    model.fit(data, epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=[Sleeper(), SlowCheckpoint()])


if __name__ == "__main__":
    chosen = {int(r) for r in sys.argv[2].split(",") if r}
    main(sys.argv[1], chosen, float(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 8)
