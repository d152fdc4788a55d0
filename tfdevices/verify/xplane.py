"""TensorFlow's ``xplane_pb2`` (the profiler's XSpace) without starting TensorFlow.

The generated module imports only ``google.protobuf``, but importing it as
``tensorflow.tsl.profiler.protobuf.xplane_pb2`` runs TensorFlow's ``__init__`` first
(about 3.5 s). :func:`xplane_module` finds the installed ``tensorflow`` package
without importing it (``importlib.util.find_spec`` reads no package code) and loads the
file by its path. When TensorFlow is already imported, its own module is used: one
module, one set of classes. Both register the same file in protobuf's default pool;
protobuf accepts a file added again with the same contents, so TensorFlow imported
afterwards loads its module as usual (and reads the same descriptors).

>>> space = xplane_module().XSpace()
>>> space.planes.add(name="/host:CPU").name
'/host:CPU'
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from types import ModuleType

from tfdevices.core.errors import TensorFlowMissingError

__all__ = ["xplane_module", "XPLANE_FILES"]

#: Where ``xplane_pb2.py`` lives inside the ``tensorflow`` package: TF 2.12 to 2.21 (checked
#: on 2.21) under ``tsl/``, before that under ``core/``.
XPLANE_FILES = (
    ("tsl/profiler/protobuf/xplane_pb2.py", "tensorflow.tsl.profiler.protobuf.xplane_pb2"),
    ("core/profiler/protobuf/xplane_pb2.py", "tensorflow.core.profiler.protobuf.xplane_pb2"),
)
_LOADED_AS = "tfdevices.verify._xplane_pb2"  # the module's name when loaded by path (not in sys.modules)
_lock = threading.Lock()
_module: ModuleType | None = None


def xplane_module() -> ModuleType:
    """The ``xplane_pb2`` module: TensorFlow's when TensorFlow is imported, else loaded by path.

    Raises:
        TensorFlowMissingError: TensorFlow is not installed, or its package holds no
            ``xplane_pb2.py`` where TensorFlow 2.4 to 2.21 keep it.
    """
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            _module = _imported() or _by_path()
    return _module


def _imported() -> ModuleType | None:
    """TensorFlow's own module, where ``tensorflow`` is already imported."""
    if "tensorflow" not in sys.modules:
        return None
    for _, name in XPLANE_FILES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _by_path() -> ModuleType:
    """The module loaded from its file in the installed ``tensorflow`` package, which is not imported."""
    try:
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    tried = []
    for root in roots:
        for relative, _ in XPLANE_FILES:
            path = os.path.join(root, relative)
            tried.append(relative)
            if os.path.isfile(path):
                return _load(path)
    raise TensorFlowMissingError(
        "reading a profile needs the XSpace protobuf module TensorFlow installs "
        + (
            f"(looked in the tensorflow package for {', '.join(tried)})." if roots else "(TensorFlow is not installed)."
        ),
        hint="pip install 'tfdevices[cpu]' (or 'tfdevices[and-cuda]' on a machine with an NVIDIA GPU).",
    )


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(_LOADED_AS, path)
    if spec is None or spec.loader is None:  # pragma: no cover (a .py file always has a loader)
        raise TensorFlowMissingError(f"{path} cannot be loaded as a module.", hint="reinstall TensorFlow.")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
