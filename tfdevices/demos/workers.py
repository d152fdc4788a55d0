"""Demo: one process per GPU, the same script alone, under ``tfdevices launch`` or under ``srun``.

Each process asks who it is (:func:`tfdevices.launch_info`), takes its own GPU(s)
before TensorFlow starts (:func:`tfdevices.gpu_for_rank`, :func:`tfdevices.configure`),
builds ``MultiWorkerMirroredStrategy`` on TensorFlow's gRPC runtime and trains a
small Keras model by the path that works with the installed Keras
(:func:`tfdevices.training.train`). Every worker prints a checksum of its final
weights: they are identical.

    tfdevices demo workers                      # one process
    tfdevices launch -n 2 -- tfdevices demo workers
    srun tfdevices demo workers                 # in a SLURM job
"""

from __future__ import annotations

import sys

from absl import flags, logging as absl_logging

import tfdevices
from tfdevices.demos import no_arguments, run_script
from tfdevices.flags import check_batch_size

flags.DEFINE_integer("epochs", 2, "Epochs to train.", lower_bound=1)
flags.DEFINE_integer("steps_per_epoch", 8, "Batches per epoch.", lower_bound=1)
flags.DEFINE_integer("batch_size", 32, "Global batch size (split across the workers).", lower_bound=1)

FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
    """Runs the demo (``absl.app.run`` calls it with the arguments left after the flags)."""
    no_arguments(argv)
    if not FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)  # TensorFlow's INFO lines drown the output
    info = tfdevices.launch_info()
    mine = tfdevices.gpu_for_rank(info, tfdevices.discover())
    check_batch_size(FLAGS.batch_size, info.world_size * max(1, len(mine.gpus)))  # before TensorFlow starts
    tfdevices.configure(mine.spec)  # before TensorFlow starts: this process sees only its GPU(s)
    tf = tfdevices.core.tf_door.import_tf()
    import keras  # noqa: PLC0415 (lazy Keras)

    strategy = tfdevices.build_strategy("multi_worker")
    x = tf.random.stateless_normal([FLAGS.batch_size * FLAGS.steps_per_epoch, 4], seed=[0, 1])
    data = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, axis=1, keepdims=True)))
    data = data.batch(FLAGS.batch_size).repeat()
    result = tfdevices.training.train(
        strategy,
        lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]),
        data,
        loss="mse",
        optimizer_fn=lambda: keras.optimizers.SGD(0.05),
        epochs=FLAGS.epochs,
        steps_per_epoch=FLAGS.steps_per_epoch,
        global_batch_size=FLAGS.batch_size,
    )
    checksum = sum(float(tf.reduce_sum(w)) for w in result.model.weights)
    print(
        f"rank {info.rank}/{info.world_size} ({info.source}), GPUs {mine.spec}, "
        f"{strategy.num_replicas} replica(s), {result.path}, losses "
        + " ".join(f"{loss:.4f}" for loss in result.losses)
        + f", weights checksum {checksum:.6f}",
        flush=True,
    )


if __name__ == "__main__":
    run_script(sys.modules[__name__])
