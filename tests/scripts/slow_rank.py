"""A 2-worker job over build_strategy("multi_worker") with one rank slow on purpose, for the slow-rank tests.

Usage: slow_rank.py MODE KIND RANKS STEPS
MODE: loop (a custom loop: a tf.function step whose all-reduce sums across workers) or fit (Keras fit).
KIND:
  between     RANKS sleep 40 ms before each step (a slow input pipeline or host code)
  compute     RANKS' step does 40 more matmuls before the all-reduce (a slower or busier device)
  balanced    nobody is slow
  checkpoint  fit in epochs of CHECKPOINT_EVERY steps whose chief (rank 0) alone sleeps 1.5 s at each epoch's end in a
              callback (a checkpoint every CHECKPOINT_EVERY steps, while the job runs)
RANKS: a comma list of ranks ("1", "0,1"; "" for none); every listed rank is slowed alike.
STEPS: the steps each rank runs; with SLOW_RANK_MIN_S and SLOW_RANK_SYNC (a directory both ranks see) set, at
least that many and at least that many seconds: rank 0 names the last step in SLOW_RANK_SYNC once both are
passed, and every rank ends there (a job as long in time on a fast machine as on a slow one).
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
#: Steps per epoch of the checkpoint kind: the chief's checkpoint comes that often, mid-job.
CHECKPOINT_EVERY = 30
EXTRA_MATMULS = 40
MATRIX = 256
#: Steps past the one where rank 0 names the last: a rank is at most a step ahead of another (each step's
#: all-reduce waits for all), so every rank reads the name before it gets there.
_RUN_ON = 16


class Length:
    """How many steps this rank runs: STEPS, or (SLOW_RANK_MIN_S and SLOW_RANK_SYNC set) at least STEPS and
    at least SLOW_RANK_MIN_S seconds from the first step, ending at the step rank 0 names.
    """

    def __init__(self, rank: int, steps: int) -> None:
        self.rank, self.steps = rank, steps
        self.min_s = float(os.environ.get("SLOW_RANK_MIN_S", "0"))
        sync = os.environ.get("SLOW_RANK_SYNC", "")
        self.path = os.path.join(sync, "last_step") if sync and self.min_s > 0 else ""
        self.last = None if self.path else steps
        self.began = time.monotonic()

    def over(self, step: int) -> bool:
        """Whether the job ends after step ``step`` (from 1); called by every rank after every step."""
        if self.last is None:
            if self.rank == 0 and step >= self.steps and time.monotonic() - self.began >= self.min_s:
                self.last = step + _RUN_ON
                with open(self.path + ".tmp", "w") as f:
                    f.write(str(self.last))
                os.replace(self.path + ".tmp", self.path)
            elif self.rank != 0 and os.path.exists(self.path):
                with open(self.path) as f:
                    self.last = int(f.read())
        return self.last is not None and step >= self.last


def main(mode: str, kind: str, ranks: set[int], steps: int) -> None:
    strategy = tfdevices.build_strategy("multi_worker")
    tf = tfdevices.core.tf_door.import_tf()
    rank = tfdevices.launch_info().rank
    slow = rank in ranks
    extra = EXTRA_MATMULS if kind == "compute" and slow else 0
    length = Length(rank, steps)
    if mode == "loop":
        loop(
            tf,
            strategy,
            length,
            extra,
            sleep=SLEEP_S if kind == "between" and slow else 0.0,
        )
    else:
        fit(tf, strategy, rank, kind, length, extra, slow)
    print(f"rank {rank} done", flush=True)


def _work(tf, x, extra: int):
    """``extra`` matmuls of ``x`` (a variable: nothing folded at trace time): more work on this replica."""
    y = x
    for _ in range(extra):
        y = tf.tanh(tf.matmul(y, x))
    return tf.reduce_mean(y)


def loop(tf, strategy, length: Length, extra: int, sleep: float) -> None:
    with strategy.scope():
        w = tf.Variable(tf.zeros((128, 128)))
        m = tf.Variable(tf.random.stateless_normal((MATRIX, MATRIX), seed=(3, 4)) * 0.03)
    x = tf.random.stateless_normal((128, 128), seed=(1, 2)) * 0.1

    @tf.function
    def step():
        def replica():
            y = tf.reduce_mean(tf.matmul(x, x)) + _work(tf, m, extra)
            context = tf.distribute.get_replica_context()
            w.assign_add(context.all_reduce(tf.distribute.ReduceOp.SUM, y * tf.ones((128, 128))))

        strategy.run(replica)

    done = 0
    while not length.over(done):
        if sleep:
            time.sleep(sleep)  # the input pipeline or host code of this rank
        step()
        done += 1


def fit(tf, strategy, rank: int, kind: str, length: Length, extra: int, slow: bool) -> None:
    keras = tf.keras  # Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1

    class Slow(keras.callbacks.Callback):
        done = 0  # steps over the epochs

        def on_train_batch_begin(self, batch, logs=None):
            if kind == "between" and slow:
                time.sleep(SLEEP_S)  # host code of this rank (an unnamed hook: not a phase)

        def on_train_batch_end(self, batch, logs=None):
            # a callback of our own: Keras 3 runs the batch's end in line (no async_safe), so every rank sees
            # stop_training after the same step
            Slow.done += 1
            if length.over(Slow.done):
                self.model.stop_training = True

        def on_epoch_end(self, epoch, logs=None):
            if kind == "checkpoint" and rank == 0:
                time.sleep(1.5)  # the chief alone writes a slow checkpoint

    class Extra(keras.layers.Layer):
        def build(self, shape):
            self.m = self.add_weight(shape=(MATRIX, MATRIX), initializer="random_normal", trainable=False)

        def call(self, x):
            return x + 0.0 * _work(tf, self.m, extra)

    steps = length.steps if length.last is not None else 1 << 20  # to the step rank 0 names
    x = tf.random.stateless_normal((16 * length.steps, 4), seed=(1, 2))
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), Extra(), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    per_epoch = min(CHECKPOINT_EVERY, steps) if kind == "checkpoint" else steps
    model.fit(
        data,
        epochs=max(1, steps // per_epoch),
        steps_per_epoch=per_epoch,
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
