"""The one place TensorFlow is imported from, lazily.

It writes no environment: TensorFlow's log level default is set by
:mod:`tfdevices.runtime` (``configure`` and the entry points), the only module that
writes the environment. On its first call it keeps TensorFlow quiet the way that
level asks: the C++ start-up lines TensorFlow prints before its logging reads
``TF_CPP_MIN_LOG_LEVEL`` (``Could not find cuda drivers ...``, twice per process)
are dropped when that level hides INFO (and, on a Linux machine with no NVIDIA driver
loaded, CUDA's ``failed call to cuInit`` at the first device listing, which then
happens here; and TensorFlow 2.16's ``Unable to register cuDNN factory: Attempting to register
factory for plugin cuDNN when one has already been registered``, three lines at every import,
tensorflow/tensorflow#62075), and TensorFlow's Python INFO lines (``Reduce
to ... then broadcast``, which absl apps would show) are hidden unless a level was
set for the ``tensorflow`` logger or ``--verbosity`` was given.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from tfdevices.core.errors import TensorFlowMissingError
from tfdevices.core.lazy import LazyPattern

__all__ = ["import_tf"]

#: C++ lines TensorFlow prints before its log level applies: INFO lines and absl's banner.
_EARLY_NOISE = LazyPattern(r"^(I\d{4} .*|WARNING: All log messages before absl::InitializeLog\(\) is called.*)$")
#: CUDA's complaint when it finds no driver: noise on a machine that has no NVIDIA driver at all.
_NO_DRIVER_NOISE = LazyPattern(r"^E\d{4} .*failed call to cuInit.*$")
#: TensorFlow 2.16's three lines at import (cuFFT, cuDNN, cuBLAS registered twice): noise on any machine.
_DUPLICATE_FACTORY_NOISE = LazyPattern(
    r"^.*\bE.* Unable to register cu(FFT|DNN|BLAS) factory: Attempting to register factory for plugin "
    r"cu(FFT|DNN|BLAS) when one has already been registered$"
)
_NVIDIA_DRIVER = "/proc/driver/nvidia"  # present on Linux whenever the NVIDIA kernel driver is loaded


def import_tf() -> ModuleType:
    """Imports and returns ``tensorflow``.

    Raises:
        TensorFlowMissingError: TensorFlow is not installed.
    """
    try:
        tf = _import_quietly() if "tensorflow" not in sys.modules else sys.modules["tensorflow"]
    except ImportError as err:
        raise TensorFlowMissingError(
            f"this needs TensorFlow, which cannot be imported ({err}).",
            hint="pip install 'tfdevices[cpu]' (or 'tfdevices[and-cuda]' on a machine with an NVIDIA GPU).",
        ) from None
    if not _autograph_told:
        _leave_to_python()
        _quiet_python_logs(tf)
    return tf


def _import_quietly() -> ModuleType:
    """``import tensorflow``, dropping the start-up lines its C++ prints before its log level applies."""
    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip()
    if level in ("", "0"):
        import tensorflow  # noqa: PLC0415 (lazy TensorFlow)

        return tensorflow
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (embedded interpreters)
        import tensorflow  # noqa: PLC0415 (lazy TensorFlow)

        return tensorflow
    import tempfile  # noqa: PLC0415 (only when TensorFlow is imported: the GPU listing imports this module)

    no_driver = sys.platform.startswith("linux") and not os.path.exists(_NVIDIA_DRIVER)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow  # noqa: PLC0415 (lazy TensorFlow)

            if no_driver:  # CUDA is probed (and fails) at the first device listing: do it here, quietly
                tensorflow.config.list_physical_devices("GPU")
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [
                line
                for line in caught.read().decode(errors="replace").splitlines()
                if not _EARLY_NOISE.match(line)
                and not _DUPLICATE_FACTORY_NOISE.match(line)
                and not (no_driver and _NO_DRIVER_NOISE.match(line))
            ]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
    return tensorflow


def _quiet_python_logs(tf: ModuleType) -> None:
    """Hides TensorFlow's Python INFO lines unless a level was chosen for them.

    TensorFlow sets its own default on first use: INFO in interactive sessions such as
    Jupyter (``INFO:tensorflow:Using MirroredStrategy ...``), none elsewhere (absl apps
    then show INFO). Either default becomes WARNING; a level the program set does not.
    """
    import logging  # noqa: PLC0415 (only once TensorFlow is imported: the GPU listing imports this module)

    logger = logging.getLogger("tensorflow")
    before = logger.level
    tf.get_logger()  # TensorFlow's defaults apply now, not after this
    interactive = hasattr(sys, "ps1") or bool(sys.flags.interactive)  # TensorFlow's own test
    default = logging.INFO if interactive else logging.NOTSET
    if _verbosity_given() or before not in (logging.NOTSET, default) or logger.level not in (logging.NOTSET, default):
        return
    logger.setLevel(logging.WARNING)


def _verbosity_given() -> bool:
    """Whether an absl app was started with ``--verbosity`` (or ``-v``)."""
    absl_flags = sys.modules.get("absl.flags")
    try:
        return bool(absl_flags is not None and absl_flags.FLAGS.is_parsed() and absl_flags.FLAGS["verbosity"].present)
    except KeyError:
        return False


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
