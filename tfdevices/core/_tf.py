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
    if not _autograph_told:
        _leave_to_python()
    return tf


_autograph_told = False


def _leave_to_python() -> None:
    """Tells AutoGraph to call tfdevices functions as they are inside a ``tf.function``, never convert them.

    AutoGraph converts the functions a traced function calls; when it cannot convert
    one (a method of ``os.environ``, say) it logs the object, and ``os.environ``'s repr
    is the whole environment. tfdevices code is plain Python: nothing in it needs
    converting, so nothing of it can end up in such a log.
    """
    global _autograph_told
    _autograph_told = True
    try:
        from tensorflow.python.autograph.core import config  # noqa: PLC0415 (lazy TensorFlow)

        if not any(getattr(rule, "_prefix", None) == "tfdevices" for rule in config.CONVERSION_RULES):
            config.CONVERSION_RULES = (config.DoNotConvert("tfdevices"), *config.CONVERSION_RULES)
    except (ImportError, AttributeError):  # another TensorFlow layout: AutoGraph's own defaults apply
        pass
