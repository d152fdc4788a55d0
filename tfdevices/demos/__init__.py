"""Demos: absl apps that show the toolkit at work (``tfdevices demo NAME [flags]``).

Each demo is ``tfdevices/demos/<name>.py``: module-level flags (the toolkit's, from
:func:`tfdevices.flags.define_flags`, plus its own), ``main(argv)``, and
``app.run(main)`` when run as a script (``python -m tfdevices.demos.mirrored``).

>>> "mirrored" in DEMOS and "tasks" in DEMOS
True
"""

from __future__ import annotations

import importlib

from tfdevices.core.errors import InputError

DEMOS: dict[str, str] = {
    "mirrored": "train a small Keras model with the chosen strategy (logical CPUs when there is no GPU), "
                "print replicas, throughput and where the TensorBoard logs are",
    "tasks": "two independent computations on two devices and a final op that needs both: "
             "the cross-device copy it costs, measured",
    "layers": "plan a Keras model's layers onto devices, place them, and compare the by-hand tf.device habit "
              "with the placed model: weights read across devices, activation transfers, the plan table",
    "workers": "one process per GPU: run alone, under 'tfdevices launch -n N --' or srun; each worker takes "
               "its GPU, trains with MultiWorkerMirroredStrategy and prints its weights checksum",
}


def run_demo(name: str, argv: list[str]) -> int:
    """Runs demo ``name`` under ``absl.app.run`` with ``argv`` (flags, without the program name).

    Args:
        name: a key of :data:`DEMOS`.
        argv: the demo's command-line arguments, e.g. ``["--epochs=1"]``.

    Returns:
        The exit code: 0 on success, 1 for a usage error (absl prints the message).

    Raises:
        InputError: ``name`` is not a demo.
    """
    if name not in DEMOS:
        raise InputError(f"demo {name!r} does not exist; demos: {', '.join(sorted(DEMOS))}.",
                         hint="run 'tfdevices demo mirrored', or 'tfdevices demo NAME --helpfull' for its flags.")
    from absl import app  # noqa: PLC0415 (lazy absl: when a demo runs)

    module = importlib.import_module(f"tfdevices.demos.{name}")
    try:
        app.run(module.main, argv=[f"tfdevices demo {name}", *argv])
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
