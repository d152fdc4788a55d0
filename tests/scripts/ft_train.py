"""Fault-tolerant multi-worker training with fit and BackupAndRestore: tf_keras, or Keras 3 (FT_KERAS=3).

With FT_KERAS=3 the strategy comes from tfdevices.build_strategy (which mends Keras 3 fit on
many workers) and each rank keeps its own backup directory (Keras 3 callbacks do not know
about workers); tf_keras' BackupAndRestore shares one directory itself.

Run under ``tfdevices launch -n 2 --max-restarts 1`` (or ``srun``); every worker runs it.

Usage: ft_train.py OUT_DIR EPOCHS STEPS_PER_EPOCH [KILL_AT]
  KILL_AT 'E:B': on the first attempt, rank 1 stops after batch B of epoch E, writes
  OUT_DIR/ready-to-die (its pid) and waits to be killed (the test sends kill -9).
Writes OUT_DIR/log-rank{R}.jsonl (epoch begin/end per attempt) and
OUT_DIR/weights-rank{R}.npz (the final weights and optimizer step count).
"""

from __future__ import annotations

import json
import os
import sys
import time

KERAS3 = os.environ.get("FT_KERAS") == "3"
if not KERAS3:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from tfdevices.jobs.env import launch_info  # noqa: E402

GLOBAL_BATCH = 8


def main(argv: list[str]) -> int:
    out, epochs, steps = argv[0], int(argv[1]), int(argv[2])
    kill_at = tuple(int(v) for v in argv[3].split(":")) if len(argv) > 3 else None
    info = launch_info()  # TF_CONFIG under tfdevices launch, SLURM under srun
    attempt = int(os.environ.get("TFDEVICES_RESTART", "0"))

    if KERAS3:
        import tfdevices

        strategy = tfdevices.build_strategy("multi_worker")
        import keras
        import tensorflow as tf
    else:
        import tensorflow as tf
        import tf_keras as keras

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    keras.utils.set_random_seed(7)
    rng = np.random.RandomState(0)
    x = rng.normal(size=(steps * GLOBAL_BATCH, 4)).astype("float32")  # exactly one epoch of data
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32") + 0.1).astype("float32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat().with_options(options)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")

    log_path = os.path.join(out, f"log-rank{info.rank}.jsonl")

    class Log(keras.callbacks.Callback):
        def _write(self, event: str, epoch: int) -> None:
            with open(log_path, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "attempt": attempt,
                            "event": event,
                            "epoch": epoch,
                            "iterations": int(self.model.optimizer.iterations.numpy()),
                        }
                    )
                    + "\n"
                )

        def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
            self.epoch = epoch
            self._write("begin", epoch)

        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            self._write("end", epoch)

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            if kill_at and attempt == 0 and info.rank == 1 and (self.epoch, batch) == kill_at:
                with open(os.path.join(out, "ready-to-die"), "w") as f:
                    f.write(str(os.getpid()))
                while True:  # mid-epoch: wait for kill -9
                    time.sleep(1)

    log = Log()
    backup_dir = os.path.join(out, "backup", f"rank{info.rank}" if KERAS3 else "")
    backup = keras.callbacks.BackupAndRestore(backup_dir=backup_dir)
    model.fit(data, epochs=epochs, steps_per_epoch=steps, callbacks=[backup, log], verbose=0)
    weights = {f"w{i}": w for i, w in enumerate(model.get_weights())}
    np.savez(
        os.path.join(out, f"weights-rank{info.rank}.npz"), iterations=int(model.optimizer.iterations.numpy()), **weights
    )
    print(
        f"rank {info.rank} of {info.world_size} done: attempt {attempt}, "
        f"{int(model.optimizer.iterations.numpy())} steps, {strategy.num_replicas_in_sync} replicas",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
