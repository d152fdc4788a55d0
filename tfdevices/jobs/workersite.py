"""The ``sitecustomize`` that ``tfdevices launch`` puts first on its workers' ``PYTHONPATH``.

It runs the ``sitecustomize`` it hides (if any), then, in a worker whose Python has
tfdevices, calls :func:`start_worker`: the worker's mends wait for the program's own
imports. When Keras' trainer loads, the ``keras_fit`` mend mends Keras 3 ``model.fit`` for
``MultiWorkerMirroredStrategy``; in a one-machine job, when TensorFlow loads, the
``loopback`` mend keeps TensorFlow's servers on 127.0.0.1 (:mod:`tfdevices.mends`). Each
is skipped where ``TFDEVICES_MENDS`` turns it off. No change to the script, no TensorFlow here.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import MutableMapping

from tfdevices.core.errors import TfDevicesError
from tfdevices.jobs.reporting import start_reporting
from tfdevices.mends import keras_fit, loopback as loopback_mend
from tfdevices.mends.base import MENDS_ENV, parse_mends_off

_TEMPLATE = '''"""Written by tfdevices launch for this worker: loopback={loopback}."""
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
try:
    from tfdevices.jobs.workersite import start_worker
except ImportError:  # tfdevices is not installed in this worker's Python: nothing to mend with
    pass
else:
    start_worker(loopback={loopback})
'''


def start_worker(*, loopback: bool) -> None:
    """What a launched worker does at start-up: arm its mends, which apply when the program imports
    what they change.

    Args:
        loopback: a one-machine job: keep TensorFlow's servers on 127.0.0.1 (mend ``loopback``).
    """
    try:
        start_reporting()  # where this rank is, for the launcher's stall watch
        if loopback:
            loopback_mend.confine_when_imported()
        keras_fit.install_when_imported()
    except TfDevicesError as err:  # a bad TFDEVICES_MENDS: the launcher checked it, the worker says it
        print(f"tfdevices: {err}", file=sys.stderr, flush=True)


def worker_site(env: MutableMapping[str, str], *, loopback: bool, mends_off: frozenset[str] = frozenset()) -> str:
    """Writes the workers' ``sitecustomize`` into a new directory put first on ``env``'s ``PYTHONPATH``.

    Args:
        env: the workers' environment (changed).
        loopback: keep TensorFlow's servers on 127.0.0.1 when TensorFlow loads (a one-machine job).
        mends_off: mends turned off in the workers, added to what ``TFDEVICES_MENDS`` in ``env`` says.

    Returns:
        The directory (the caller removes it).

    Raises:
        EnvVarError: ``TFDEVICES_MENDS`` in ``env`` names no mend.
    """
    off = parse_mends_off(env.get(MENDS_ENV, "")) | mends_off
    if off:
        env[MENDS_ENV] = ",".join(sorted(off))
    site = tempfile.mkdtemp(prefix="tfdevices-site-")
    with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write(_TEMPLATE.format(loopback=bool(loopback)))
    env["PYTHONPATH"] = site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return site


__all__ = ["start_worker", "worker_site"]
