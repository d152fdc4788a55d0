"""Demo: put a Keras model's layers on several devices, and prove where they ran.

It splits the CPU into logical devices when there is no GPU, builds an MLP,
and compares, with :func:`tfdevices.verify` on one forward step:

* before: the by-hand habit (``with tf.device(...)`` around each layer call):
  compute moves, the weights stay where the layers were built, so every step
  copies them across devices;
* after: :func:`tfdevices.plan_layers` (optimal plan, printed as a table) and
  :func:`tfdevices.place_layers`: no weight read crosses devices, one
  activation per stage boundary. Then it trains one epoch with ``fit``.

    python -m tfdevices.demos.layers --layers=24 --devices=4
    tfdevices demo layers --gpus=0,1
"""

from __future__ import annotations

import re
import sys
from typing import Any

from absl import flags, logging as absl_logging

import tfdevices
from tfdevices import flags as tfd_flags
from tfdevices.demos import no_arguments, run_script
from tfdevices.strategy import explanation

tfd_flags.define_flags()
flags.DEFINE_integer("layers", 12, "Dense layers in the MLP.", lower_bound=1)
flags.DEFINE_integer("width", 64, "Units of the narrow layers (every third layer is 4x wider).", lower_bound=1)
flags.DEFINE_integer(
    "devices", 4, "Devices to spread the layers over (GPUs when 2+ are selected, else logical CPUs).", lower_bound=1
)
flags.DEFINE_integer("batch_size", 32, "Batch size.", lower_bound=1)
flags.adopt_module_key_flags(tfd_flags)

FLAGS = flags.FLAGS
CPU_DEVICES = 4


def make_mlp(keras: Any, n_layers: int, width: int, seed: int = 0) -> Any:
    """An MLP whose every third layer is 4x wider, so layers differ in cost."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((width,))]
        + [
            keras.layers.Dense(width * (4 if i % 3 == 1 else 1), activation="relu", name=f"dense_{i}")
            for i in range(n_layers)
        ]
    )


def by_hand(keras: Any, tf: Any, model: Any, assignment: dict[str, str]) -> Any:
    """The ``.to(device)`` habit in Keras: the model's own layers, each called under ``tf.device``."""
    layers = [layer for layer in model.layers if type(layer).__name__ != "InputLayer"]

    class ByHand(keras.Model):
        def call(self, x: Any) -> Any:
            for layer in layers:
                with tf.device(assignment[layer.name]):
                    x = layer(x)
            return x

    wrapper = ByHand()
    wrapper.hand_layers = layers
    return wrapper


def forward_traffic(tf: Any, model: Any, x: Any, layer_names: list[str]) -> dict[str, Any]:
    """One forward step under capture: data transfers and bytes, activation transfers between
    layers (the last layer's output, returned to the caller, left out), weight reads that cross devices.
    """
    report = tfdevices.capture(tf.function(lambda t: model(t)), x)
    data = [t for t in report.transfers if "ctrl" not in t.tensor]
    inner = re.compile(r"(^|/)(" + "|".join(map(re.escape, layer_names[:-1])) + r")(_\d+)?/")
    reads = {r.op for r in report.variables_on()}
    activations = [t for t in data if inner.search(t.tensor) and t.tensor.rsplit(":", 1)[0] not in reads]
    return {
        "transfers": len(data),
        "bytes": sum(t.bytes or 0 for t in data),
        "activations": len(activations),
        "activation_bytes": sum(t.bytes or 0 for t in activations),
        "weights_across": sum(r.crosses_devices for r in report.variables_on()),
        "weight_bytes_across": sum(r.bytes or 0 for r in report.variables_on() if r.crosses_devices),
        "report": report,
    }


def pick_devices(logical: tuple[str, ...], count: int) -> list[str]:
    """The first ``count`` GPUs when there are two or more, else the first logical CPUs."""
    gpus = [d for d in logical if d.startswith("GPU:")]
    pool = gpus if len(gpus) >= 2 else [d for d in logical if d.startswith("CPU:")]
    return pool[:count]


def _line(name: str, traffic: dict[str, Any]) -> str:
    return (
        f"{name:<8} weights read across devices: {traffic['weights_across']} "
        f"({traffic['weight_bytes_across']} B); activation transfers: {traffic['activations']} "
        f"({traffic['activation_bytes']} B); all transfers: {traffic['transfers']} ({traffic['bytes']} B)"
    )


def main(argv: list[str]) -> None:
    """Runs the demo (``absl.app.run`` calls it with the arguments left after the flags)."""
    no_arguments(argv)
    if not FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)
    setup = explanation(tfd_flags.configure_from_flags(cpu_virtual_devices=max(CPU_DEVICES, FLAGS.devices)))
    tf = tfdevices.core.tf_door.import_tf()
    import keras  # noqa: PLC0415 (lazy Keras)
    import numpy as np  # noqa: PLC0415 (lazy NumPy, with TensorFlow)

    devices = pick_devices(setup.runtime.logical_devices, FLAGS.devices)
    print(f"devices: {', '.join(devices)}\n")
    x = tf.constant(np.random.default_rng(0).random((FLAGS.batch_size, FLAGS.width), dtype=np.float32))

    model = make_mlp(keras, FLAGS.layers, FLAGS.width)
    plan = tfdevices.plan_layers(model, devices)
    print(plan.table(), "\n")

    names = list(plan.layers)
    before = forward_traffic(tf, by_hand(keras, tf, model, plan.assignment), x, names)
    print(_line("by hand", before))
    expected = model(x)
    placed = tfdevices.place_layers(model, plan)
    after = forward_traffic(tf, placed, x, names)
    print(_line("placed", after))
    print(
        f"\nplaced: activation transfers {after['activations']}, expected by the plan {plan.transfers}; "
        "same outputs as before placing: "
        f"{bool(np.allclose(placed(x).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6))}"
    )
    for device in plan.loads():
        reads = after["report"].variables_on(device)
        print(f"  {device}: {len(reads)} weight reads, all local: {not any(r.crosses_devices for r in reads)}")

    placed.compile(optimizer="adam", loss="mse")
    history = placed.fit(x, tf.zeros_like(placed(x)), epochs=2, verbose=0)
    losses = ", ".join(f"{v:.4g}" for v in history.history["loss"])
    print(f"\nfit on the placed model: loss per epoch {losses}")


if __name__ == "__main__":
    run_script(sys.modules[__name__])
