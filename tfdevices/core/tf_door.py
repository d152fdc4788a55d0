"""How tfdevices imports TensorFlow: lazily, its first import through :func:`import_tf`.

Every part of tfdevices that needs TensorFlow calls :func:`import_tf` first: ``import tensorflow``
appears elsewhere only for type hints; modules that use one of TensorFlow's own modules
(``tensorflow.python.eager.context`` ...) import it where they use it, once TensorFlow is loaded.

It writes no environment: TensorFlow's log level default is set by
:mod:`tfdevices.runtime` (``configure`` and the entry points), the only module that
writes the environment. On its first call TensorFlow's Python INFO lines (``Reduce
to ... then broadcast``, which absl apps would show) are hidden unless a level was
set for the ``tensorflow`` logger or ``--verbosity`` was given.

What changes code tfdevices does not own around that import lives in :mod:`tfdevices.mends`
(the mends ``quiet_import``, TensorFlow's C++ start-up lines dropped from stderr while it is
imported, and ``autograph_skip``, AutoGraph told to leave tfdevices' code alone): they set this
door's hooks (:func:`use_import_hooks`) when :mod:`tfdevices.mends` is imported, as every part
of tfdevices that imports TensorFlow does first.
"""

from __future__ import annotations

import sys
from types import ModuleType

from tfdevices.core.errors import TensorFlowMissingError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the GPU listing's path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


#: How the first import runs (``around(importer)``) and what runs once after it: set by
#: :mod:`tfdevices.mends.tf_import`, the mends that quiet TensorFlow's start-up and keep AutoGraph off
#: tfdevices' code. core offers the place; every change to code tfdevices does not own lives in mends/.
_hooks: dict[str, Callable[..., Any] | None] = {"around": None, "after": None}


def use_import_hooks(around: Callable[[Callable[[], ModuleType]], ModuleType], after: Callable[[], object]) -> None:
    """Sets how :func:`import_tf` imports TensorFlow the first time and what it runs once after (for the mends).

    Args:
        around: called with the plain importer; returns ``tensorflow``.
        after: called once, at the first :func:`import_tf`, TensorFlow imported.
    """
    _hooks["around"], _hooks["after"] = around, after


def import_tf() -> ModuleType:
    """Imports and returns ``tensorflow``.

    Raises:
        TensorFlowMissingError: TensorFlow is not installed.
    """
    around = _hooks["around"]
    try:
        if "tensorflow" in sys.modules:
            tf = sys.modules["tensorflow"]
        else:
            tf = around(_plain_import) if around is not None else _plain_import()
    except ImportError as err:
        raise TensorFlowMissingError(
            f"this needs TensorFlow, which cannot be imported ({err}).",
            hint="in the tfdevices clone, pip install -e '.[cpu]' (or '.[and-cuda]' on a machine with an NVIDIA GPU).",
        ) from None
    global _after_hook_ran
    if not _after_hook_ran:
        _after_hook_ran = True
        after = _hooks["after"]
        if after is not None:
            after()
        _quiet_python_logs(tf)
    return tf


def _plain_import() -> ModuleType:
    import tensorflow  # noqa: PLC0415 (lazy TensorFlow)

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


_after_hook_ran = False  # the first import_tf ran its after-hook
