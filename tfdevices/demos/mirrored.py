"""Demo: train a small Keras model with the strategy the flags choose.

On a machine without a GPU it splits the CPU into ``--virtual_devices`` logical
devices (4 when unset) and mirrors over them, which checks distribution, not
speed. It prints the devices, the strategy and its replicas, the throughput of
each epoch, and where the TensorBoard logs are (``tensorboard --logdir ...``).

    python -m tfdevices.demos.mirrored --epochs=2
    tfdevices demo mirrored --gpus=auto:2 --strategy=mirrored
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from absl import flags, logging as absl_logging

import tfdevices
from tfdevices import flags as tfd_flags
from tfdevices.demos import no_arguments, run_script, shown_in_tables
from tfdevices.strategy import explanation
from tfdevices.training import train

tfd_flags.define_flags()
flags.DEFINE_integer("epochs", 2, "Epochs to train.", lower_bound=1)
flags.DEFINE_integer("steps_per_epoch", 20, "Batches per epoch.", lower_bound=1)
flags.DEFINE_integer("batch_size", 128, "Global batch size (split across the replicas).", lower_bound=1)
flags.FLAGS.set_default("logdir", os.path.join("logs", "mirrored"))
flags.FLAGS.set_default("log_placement", True)
flags.adopt_module_key_flags(tfd_flags)

FLAGS = flags.FLAGS
CPU_DEVICES = 4  # logical CPUs when no GPU is selected and --virtual_devices is unset


def make_data(tf: Any, n: int, seed: int = 0) -> tuple[Any, Any]:
    """A learnable synthetic classification set: 10 classes of 64-feature points."""
    rng = tf.random.Generator.from_seed(seed)
    x = rng.normal([n, 64])
    w = tf.random.stateless_normal([64, 10], seed=[seed, 1])
    y = tf.argmax(x @ w, axis=1)
    return x, y


def make_model(keras: Any) -> Any:
    """The demo's model: three Dense layers, built with the ``keras`` module given."""
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def main(argv: list[str]) -> None:
    """Runs the demo (``absl.app.run`` calls it with the arguments left after the flags)."""
    no_arguments(argv)
    if not FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)  # TensorFlow's per-step INFO lines drown the output
    print(tfdevices.discover().table(), "\n", flush=True)
    with shown_in_tables():  # --batch_size below the replica count: a usage error before TensorFlow starts
        setup = explanation(
            tfd_flags.configure_from_flags(cpu_virtual_devices=CPU_DEVICES, global_batch_size=FLAGS.batch_size)
        )
    print(setup.table(), "\n", flush=True)
    tf = tfdevices.core.tf_door.import_tf()
    import keras  # noqa: PLC0415 (lazy Keras)

    info = setup.strategy
    batch = FLAGS.batch_size
    x, y = make_data(tf, batch * FLAGS.steps_per_epoch)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True).repeat()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    logdir = FLAGS.logdir
    if info.kind == "multi_worker":
        start = time.perf_counter()
        result = train(
            info,
            lambda: make_model(keras),
            data,
            loss=loss,
            optimizer_fn=lambda: keras.optimizers.Adam(1e-3),
            epochs=FLAGS.epochs,
            steps_per_epoch=FLAGS.steps_per_epoch,
            global_batch_size=batch,
        )
        seconds = time.perf_counter() - start
        print(
            f"trained by {result.path}: losses {[round(v, 4) for v in result.losses]}, "
            f"{FLAGS.epochs * FLAGS.steps_per_epoch * batch / seconds:,.0f} examples/s"
        )
        return
    with info.strategy.scope():
        model = make_model(keras)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, metrics=["accuracy"])
    callbacks = [Throughput(batch, FLAGS.steps_per_epoch, info.num_replicas)]
    if logdir:
        callbacks.append(keras.callbacks.TensorBoard(logdir, write_graph=False))
    model.fit(
        data, epochs=FLAGS.epochs, steps_per_epoch=FLAGS.steps_per_epoch, callbacks=callbacks, verbose=0, shuffle=False
    )
    report = tfd_flags.log_placement(model.train_on_batch, x[:batch], y[:batch])
    if report is not None:
        used = sorted({op.device for op in report.ops})
        print(
            f"\nplacement of one step: {len(report.ops)} ops on {', '.join(used)}; "
            f"{len(report.transfers)} cross-device transfers"
        )
    if logdir:
        print(f"\nTensorBoard logs: {os.path.abspath(logdir)}\n  tensorboard --logdir {logdir}")


class Throughput:
    """A Keras callback printing examples per second for each epoch."""

    def __new__(cls, batch: int, steps: int, replicas: int) -> Any:
        """A Keras callback of the running Keras (imported here, when the demo runs)."""
        import keras  # noqa: PLC0415 (lazy Keras)

        class _Throughput(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
                self.start = time.perf_counter()

            def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
                seconds = time.perf_counter() - self.start
                logs = logs or {}
                print(
                    f"epoch {epoch + 1}: loss {logs.get('loss', float('nan')):.4f} "
                    f"accuracy {logs.get('accuracy', float('nan')):.3f}  "
                    f"{batch * steps / seconds:,.0f} examples/s on {replicas} replica(s) "
                    f"({seconds:.2f} s)",
                    flush=True,
                )

        return _Throughput()


if __name__ == "__main__":
    run_script(sys.modules[__name__])
