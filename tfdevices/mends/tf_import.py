"""Mends ``quiet_import`` and ``autograph_skip``: what tfdevices changes when it imports TensorFlow.

``quiet_import``: the C++ start-up lines TensorFlow prints before its logging reads
``TF_CPP_MIN_LOG_LEVEL`` (``Could not find cuda drivers ...``, twice per process) are dropped when
that level hides INFO; so are, on a Linux machine with no NVIDIA driver loaded, CUDA's ``failed call
to cuInit`` at the first device listing (which then happens during the import), and TensorFlow 2.16's
``Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN when one has
already been registered``, three lines at every import (tensorflow/tensorflow#62075). It changes the
process's file descriptor 2 (stderr) while TensorFlow is first imported through tfdevices: into a
temporary file, then back, the lines kept written to stderr. Detected: the level hides INFO and
stderr is a file descriptor. Off: TensorFlow prints its start-up lines. Undone: at once, after the
import (nothing stays changed).

``autograph_skip``: AutoGraph converts the functions a traced function calls; when it cannot convert
one (a method of ``os.environ``, say) it logs the object, and ``os.environ``'s repr is the whole
environment. tfdevices code is plain Python: nothing in it needs converting. The mend puts
``DoNotConvert("tfdevices")`` first in AutoGraph's ``CONVERSION_RULES``, so tfdevices functions
called inside a ``tf.function`` run as they are. Detected: ``tensorflow.python.autograph.core.config``
has ``CONVERSION_RULES`` and ``DoNotConvert``. Off, or not detected (said once, as a warning): AutoGraph
converts tfdevices code as any other, and may log what it could not convert. Undone: the rule is taken
out again.

Both take effect through :func:`tfdevices.core.tf_door.import_tf`, the one door tfdevices imports
TensorFlow by; importing this module (as importing :mod:`tfdevices.mends` does) sets its hooks.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tfdevices.core import tf_door
from tfdevices.mends.base import APPLIED, Finding, Mend, needed, not_needed, register, unknown, without_tensorflow

#: C++ lines TensorFlow prints before its log level applies: INFO lines and absl's banner.
_EARLY_NOISE = re.compile(r"^(I\d{4} .*|WARNING: All log messages before absl::InitializeLog\(\) is called.*)$")
#: CUDA's complaint when it finds no driver: noise on a machine that has no NVIDIA driver at all.
_NO_DRIVER_NOISE = re.compile(r"^E\d{4} .*failed call to cuInit.*$")
#: TensorFlow 2.16's three lines at import (cuFFT, cuDNN, cuBLAS registered twice): noise on any machine.
_DUPLICATE_FACTORY_NOISE = re.compile(
    r"^.*\bE.* Unable to register cu(FFT|DNN|BLAS) factory: Attempting to register factory for plugin "
    r"cu(FFT|DNN|BLAS) when one has already been registered$"
)
_NVIDIA_DRIVER = "/proc/driver/nvidia"  # present on Linux whenever the NVIDIA kernel driver is loaded


class QuietImport(Mend):
    """TensorFlow's C++ start-up lines dropped from stderr (file descriptor 2) while it is first imported."""

    name = "quiet_import"
    changes = "file descriptor 2 (stderr), while TensorFlow is first imported through tfdevices"
    why = "TensorFlow prints C++ start-up lines before its logging reads TF_CPP_MIN_LOG_LEVEL"
    detects = "TF_CPP_MIN_LOG_LEVEL hides INFO and stderr is a file descriptor"

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def _check(self) -> Finding:
        missing = without_tensorflow()
        if missing is not None:
            return missing
        if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip() in ("", "0"):
            return not_needed("TF_CPP_MIN_LOG_LEVEL shows INFO: TensorFlow's start-up lines are asked for")
        try:
            os.fstat(2)
        except (OSError, ValueError):
            return not_needed("stderr is no file descriptor (an embedded interpreter)")
        return needed(self.detects)

    def _apply(self) -> str:
        return "TensorFlow's start-up lines are dropped from stderr while it is first imported"

    def _undo(self) -> None:
        """Nothing stays changed after the import: fd 2 is restored at its end."""

    def around(self, importer: Callable[[], ModuleType]) -> ModuleType:
        """Runs ``importer`` (``import tensorflow``) with stderr caught, then writes back the lines kept."""
        if self.apply().state != APPLIED:
            return importer()
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError):  # fails closed: a plain import, stderr untouched
            return importer()
        no_driver = sys.platform.startswith("linux") and not os.path.exists(_NVIDIA_DRIVER)
        with tempfile.TemporaryFile() as caught:
            os.dup2(caught.fileno(), 2)
            try:
                tensorflow = importer()
                if no_driver:  # CUDA is probed (and fails) at the first device listing: do it here, quietly
                    tensorflow.config.list_physical_devices("GPU")
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                self._write_back(caught, no_driver)
        return tensorflow

    def _write_back(self, caught: Any, no_driver: bool) -> None:
        caught.seek(0)
        lines = caught.read().decode(errors="replace").splitlines()
        kept = [
            line
            for line in lines
            if not _EARLY_NOISE.match(line)
            and not _DUPLICATE_FACTORY_NOISE.match(line)
            and not (no_driver and _NO_DRIVER_NOISE.match(line))
        ]
        self.dropped += len(lines) - len(kept)
        self._detail = f"{self.dropped} start-up line(s) of TensorFlow dropped from stderr during its import"
        if kept:
            sys.stderr.write("\n".join(kept) + "\n")


class AutographSkip(Mend):
    """``DoNotConvert("tfdevices")`` first in AutoGraph's ``CONVERSION_RULES``."""

    name = "autograph_skip"
    changes = "AutoGraph's CONVERSION_RULES (DoNotConvert('tfdevices') put first)"
    why = "AutoGraph logs what it cannot convert, and os.environ's repr is the whole environment"
    detects = "tensorflow.python.autograph.core.config has CONVERSION_RULES and DoNotConvert"
    hint = "read nothing from os.environ inside a tf.function (AutoGraph may log what it cannot convert)."

    def __init__(self) -> None:
        super().__init__()
        self._rule: Any = None

    def _check(self) -> Finding:
        missing = without_tensorflow()
        if missing is not None:
            return missing
        try:
            from tensorflow.python.autograph.core import config  # noqa: PLC0415 (lazy TensorFlow)
        except ImportError as err:
            return unknown(f"this TensorFlow keeps AutoGraph's config elsewhere ({err})", self.hint)
        if not isinstance(getattr(config, "CONVERSION_RULES", None), tuple) or not hasattr(config, "DoNotConvert"):
            return unknown("this TensorFlow's AutoGraph has no CONVERSION_RULES tuple or DoNotConvert", self.hint)
        return needed(self.detects)

    def _apply(self) -> str:
        from tensorflow.python.autograph.core import config  # noqa: PLC0415 (lazy TensorFlow)

        if not any(getattr(rule, "_prefix", None) == "tfdevices" for rule in config.CONVERSION_RULES):
            self._rule = config.DoNotConvert("tfdevices")
            config.CONVERSION_RULES = (self._rule, *config.CONVERSION_RULES)
        return "AutoGraph calls tfdevices functions as they are inside a tf.function, never converts them"

    def _undo(self) -> None:
        from tensorflow.python.autograph.core import config  # noqa: PLC0415 (lazy TensorFlow)

        config.CONVERSION_RULES = tuple(rule for rule in config.CONVERSION_RULES if rule is not self._rule)
        self._rule = None


QUIET = register(QuietImport())
AUTOGRAPH = register(AutographSkip())
tf_door.use_import_hooks(around=QUIET.around, after=AUTOGRAPH.apply)

#: The one door tfdevices imports TensorFlow by, with the hooks above set.
import_tf = tf_door.import_tf
