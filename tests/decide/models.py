"""Model functions for tune's tests (children import them by MODULE:FUNCTION)."""

from __future__ import annotations

import os
import time

from tfdevices.decide.examples import tiny_mlp

__all__ = ["hang", "huge", "raises", "tiny_mlp"]


def hang():
    """Never returns; writes its pid to the file named by TFDEVICES_TEST_PIDFILE first (tests wait on it),
    and to one named by the pid beside it (``PIDFILE.<pid>``: each process of a candidate writes one).
    """
    path = os.environ.get("TFDEVICES_TEST_PIDFILE")
    if path:
        for name in (path, f"{path}.{os.getpid()}"):
            # a candidate's processes get here side by side: each writes a file of its own, hidden from "PIDFILE.*"
            scratch = os.path.join(os.path.dirname(name), f".{os.getpid()}.tmp")
            with open(scratch, "w") as f:
                f.write(str(os.getpid()))
            os.replace(scratch, name)
    while True:
        time.sleep(1)


def huge():
    """A Dense layer with 2**40 weights (4 TiB): out of memory on any machine."""
    import keras

    model = keras.Sequential([keras.Input((1 << 20,)), keras.layers.Dense(1 << 20)])
    model.compile(optimizer="sgd", loss="mse")
    return model, tiny_mlp()[1]


def raises():
    raise RuntimeError("no model today")
