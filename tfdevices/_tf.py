"""The one place TensorFlow is imported from, lazily."""

from __future__ import annotations

from types import ModuleType

from tfdevices.errors import TensorFlowMissingError


def import_tf() -> ModuleType:
    """Imports and returns ``tensorflow``.

    Raises:
        TensorFlowMissingError: TensorFlow is not installed.
    """
    from tfdevices.runtime import quiet_tensorflow_logs

    quiet_tensorflow_logs()
    try:
        import tensorflow as tf
    except ImportError as err:
        raise TensorFlowMissingError(
            f"this needs TensorFlow, which cannot be imported ({err}).",
            hint="pip install 'tfdevices[cpu]' (or 'tfdevices[and-cuda]' on a machine with an NVIDIA GPU).",
        ) from None
    return tf
