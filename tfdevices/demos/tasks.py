"""Demo: two independent computations on two devices, and a final op that needs both.

Each computation runs on its own device (:func:`tfdevices.assign` runs them
concurrently); the last op runs on the first device and needs the second one's
result, so TensorFlow copies it across. :func:`tfdevices.verify` shows that
copy (``_Send``/``_Recv``) with its size, from the graphs TensorFlow executed.

    python -m tfdevices.demos.tasks --size=512
    tfdevices demo tasks --gpus=0,1
"""

from __future__ import annotations

import os
import sys
from typing import Any

from absl import flags, logging as absl_logging

import tfdevices
from tfdevices import flags as tfd_flags
from tfdevices.demos import no_arguments, run_script
from tfdevices.strategy import explanation
from tfdevices.tensorboard.writer import write_placement

tfd_flags.define_flags()
flags.DEFINE_integer("size", 512, "Side of the square matrices each task multiplies.", lower_bound=1)
flags.DEFINE_integer("rounds", 4, "Matrix products per task.", lower_bound=1)
flags.FLAGS.set_default("logdir", os.path.join("logs", "tasks"))
flags.adopt_module_key_flags(tfd_flags)

FLAGS = flags.FLAGS
CPU_DEVICES = 2  # logical CPUs when no GPU is selected and --virtual_devices is unset


def two_devices(logical: tuple[str, ...]) -> tuple[str, str]:
    """The first two GPUs, else the first two logical CPUs, else CPU:0 twice."""
    gpus = [d for d in logical if d.startswith("GPU:")]
    cpus = [d for d in logical if d.startswith("CPU:")]
    pick = gpus if len(gpus) >= 2 else cpus if len(cpus) >= 2 else (gpus or cpus) * 2
    return pick[0], pick[1]


def main(argv: list[str]) -> None:
    """Runs the demo (``absl.app.run`` calls it with the arguments left after the flags)."""
    no_arguments(argv)
    if not FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)
    setup = explanation(tfd_flags.configure_from_flags(cpu_virtual_devices=CPU_DEVICES))
    print(setup.runtime.table(), "\n", flush=True)
    tf = tfdevices.core.tf_door.import_tf()
    first, second = two_devices(setup.runtime.logical_devices)
    n, rounds = FLAGS.size, FLAGS.rounds

    def start(seed: int) -> Any:
        return tf.random.stateless_normal([n, n], seed=[seed, 0]) / n**0.5

    def chain(x: Any) -> Any:
        for _ in range(rounds):
            x = tf.tanh(x @ x)
        return x

    results = tfdevices.assign({"task_a": lambda: chain(start(1)), "task_b": lambda: chain(start(2))}, [first, second])
    for r in results:
        print(f"{r.task}: on {r.tf_device}, {r.seconds:.3f} s, result on {r.result.device.rsplit('device:', 1)[1]}")

    with tf.device(f"/{first}"):
        x_a = start(1)
    with tf.device(f"/{second}"):
        x_b = start(2)

    @tf.function
    def step(x_a: Any, x_b: Any) -> Any:  # inputs as arguments: nothing to constant-fold away
        with tf.device(f"/{first}"):
            a = chain(x_a)
        with tf.device(f"/{second}"):
            b = chain(x_b)
        with tf.device(f"/{first}"):
            return tf.reduce_sum(a * b)  # needs b: copied from the second device

    report = tfdevices.capture(step, x_a, x_b)
    print(f"\nfinal op on {first} needs {second}'s result:")
    for t in report.transfers:
        print("  copy", t.describe())
    if not report.transfers:
        print("  no copy: both tasks ran on the same device")
    if FLAGS.log_placement:
        write_placement(report, FLAGS.logdir)
        print(f"\nTensorBoard logs: {os.path.abspath(FLAGS.logdir)}\n  tensorboard --logdir {FLAGS.logdir}")


if __name__ == "__main__":
    run_script(sys.modules[__name__])
