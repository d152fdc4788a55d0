"""The one place TensorFlow is imported from, lazily.

It writes nothing: TensorFlow's log level default is set by :mod:`tfdevices.runtime`
(``configure`` and the entry points), the only module that writes the environment.
"""

from __future__ import annotations

from types import ModuleType

from tfdevices.core.errors import TensorFlowMissingError


def import_tf() -> ModuleType:
    """Imports and returns ``tensorflow``.

    Raises:
        TensorFlowMissingError: TensorFlow is not installed.
    """
    try:
        import tensorflow as tf
    except ImportError as err:
        raise TensorFlowMissingError(
            f"this needs TensorFlow, which cannot be imported ({err}).",
            hint="pip install 'tfdevices[cpu]' (or 'tfdevices[and-cuda]' on a machine with an NVIDIA GPU).",
        ) from None
    return tf
