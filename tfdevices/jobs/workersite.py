"""The ``sitecustomize`` that ``tfdevices launch`` puts first on its workers' ``PYTHONPATH``.

It runs the ``sitecustomize`` it hides (if any), then, in a worker whose Python has
tfdevices, waits for the program's own imports: when Keras' trainer loads it mends
Keras 3 ``model.fit`` for ``MultiWorkerMirroredStrategy`` (:func:`tfdevices.training.install_when_imported`),
and in a one-machine job, when TensorFlow loads, it keeps TensorFlow's servers on
127.0.0.1 (:mod:`tfdevices.jobs.loopback`). No change to the script. No TensorFlow here.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import MutableMapping

_TEMPLATE = '''"""Written by tfdevices launch for this worker: mend={mend}, loopback={loopback}."""
import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def _chain():
    """Runs the sitecustomize this one hides (later on sys.path), if there is one."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        hidden = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hidden)


_chain()
if {loopback}:
    try:
        from tfdevices.jobs.loopback import confine_when_imported
    except ImportError:  # tfdevices is not installed in this worker's Python
        pass
    else:
        confine_when_imported()
if {mend}:
    try:
        from tfdevices.training import install_when_imported
    except ImportError:  # tfdevices is not installed in this worker's Python: nothing to mend with
        pass
    else:
        install_when_imported()
'''


def worker_site(env: MutableMapping[str, str], *, mend: bool, loopback: bool) -> str | None:
    """Writes the workers' ``sitecustomize`` into a new directory put first on ``env``'s ``PYTHONPATH``.

    Args:
        env: the workers' environment (changed).
        mend: mend Keras 3 ``model.fit`` when Keras' trainer loads.
        loopback: keep TensorFlow's servers on 127.0.0.1 when TensorFlow loads (a one-machine job).

    Returns:
        The directory (the caller removes it), or ``None`` when there is nothing to do.
    """
    if not (mend or loopback):
        return None
    site = tempfile.mkdtemp(prefix="tfdevices-site-")
    with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write(_TEMPLATE.format(mend=bool(mend), loopback=bool(loopback)))
    env["PYTHONPATH"] = site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return site


__all__ = ["worker_site"]
