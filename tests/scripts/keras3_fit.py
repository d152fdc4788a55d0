"""Plain Keras 3 ``model.fit`` on many workers through tfdevices: the multi-worker tutorial's shape.

Run under ``tfdevices launch -n 2`` (or ``srun``); every worker runs it.

Usage: keras3_fit.py OUT_DIR [EPOCHS] [STEPS_PER_EPOCH]
Writes OUT_DIR/result-rank{R}.json: the History, the final weights, the Keras version,
and the strategy's kind, workers and replicas. Checkpoints go to OUT_DIR/ckpt-rank{R}.weights.h5
(each rank writes its own file: Keras 3 callbacks do not know about workers).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

import tfdevices

GLOBAL_BATCH = 16


def main(argv: list[str]) -> int:
    out = argv[0]
    epochs = int(argv[1]) if len(argv) > 1 else 2
    steps = int(argv[2]) if len(argv) > 2 else 4
    rank = tfdevices.launch_info().rank
    strategy = tfdevices.build_strategy("auto")  # before anything starts TensorFlow's runtime

    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL_BATCH * steps, 4)).astype("float32")
    y = (x.sum(1, keepdims=True) > 0).astype("float32")
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat()
    val = tf.data.Dataset.from_tensor_slices((x[::-1].copy(), y[::-1].copy())).batch(GLOBAL_BATCH)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1, activation="sigmoid")]
        )
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy", metrics=["accuracy"])
    checkpoint = keras.callbacks.ModelCheckpoint(
        os.path.join(out, f"ckpt-rank{rank}.weights.h5"), save_weights_only=True
    )
    epochs_s: list[float] = []
    timer = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: epochs_s.append(-time.perf_counter()),
        on_epoch_end=lambda epoch, logs: epochs_s.__setitem__(-1, epochs_s[-1] + time.perf_counter()),
    )
    started = time.perf_counter()
    history = model.fit(
        train, epochs=epochs, steps_per_epoch=steps, validation_data=val, callbacks=[checkpoint, timer], verbose=1
    )
    fit_s = time.perf_counter() - started
    result = {
        "history": history.history,
        "keras": keras.__version__,
        "kind": strategy.kind,
        "workers": strategy.num_workers,
        "replicas": strategy.num_replicas_in_sync,
        "weights": [w.tolist() for w in model.get_weights()],
        "fit_s": fit_s,
        "epochs_s": epochs_s,
    }
    with open(os.path.join(out, f"result-rank{rank}.json"), "w") as f:
        json.dump(result, f)
    print(f"rank {rank} done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
