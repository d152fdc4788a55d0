"""The ``sitecustomize`` that ``tfdevices launch`` puts first on its workers' ``PYTHONPATH``.

It runs the ``sitecustomize`` it hides (if any), then, in a worker whose Python has
tfdevices, calls :func:`start_worker`: the worker's mends wait for the program's own
imports. When Keras' trainer loads, the ``keras_fit`` mend mends Keras 3 ``model.fit`` for
``MultiWorkerMirroredStrategy``; when TensorFlow loads, the ``loopback`` mend keeps the
worker's TensorFlow server on the address the launcher asked (``TFDEVICES_LISTEN``), and
the worker's own listen check starts (:func:`~tfdevices.jobs.listen_check.watch_listen`): a
server listening on more than was asked ends the worker, whatever the mend did. The launcher
reads every worker's sockets from outside too (:class:`~tfdevices.jobs.listen_check.OutsideCheck`),
so a worker that never runs this file (``python -I``, ``-S``) is stopped all the same. Each
mend is skipped where ``TFDEVICES_MENDS`` turns it off; the checks are not mends and are never
off. No change to the script, no TensorFlow here.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import MutableMapping

from tfdevices.core.errors import EnvVarError, TfDevicesError
from tfdevices.jobs.console import worker_lines
from tfdevices.jobs.listen_check import LISTEN_MARK, LISTEN_STATUS, watch_listen
from tfdevices.jobs.rank_hooks import start_reporting
from tfdevices.mends import keras_fit, loopback as loopback_mend
from tfdevices.mends.base import MENDS_ENV, parse_mends_off
from tfdevices.mends.loopback import LISTEN_ENV, parse_listen

_log = logging.getLogger(__name__)

_TEMPLATE = '''"""Written by tfdevices launch for this worker."""
import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_config = os.environ.get("TFDEVICES_TF_CONFIG_FILE")
if _config and "TF_CONFIG" not in os.environ:  # a cluster too large for one variable: the launcher wrote it here
    with open(_config, encoding="utf-8") as _f:
        os.environ["TF_CONFIG"] = _f.read()
    os.unsetenv("TF_CONFIG")  # for Python only: a program this one starts could not (too large); it reads the file


def _chain():
    """Runs the sitecustomize this one hides (later on sys.path), if there is one."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        hidden = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hidden)


_chain()
try:
    from tfdevices.jobs.worker_sitecustomize import start_worker
except ImportError:  # tfdevices is not installed in this worker's Python: nothing to mend with
    pass
else:
    start_worker()
'''


#: Where a worker's ``TF_CONFIG`` is, when it is too large for one variable (the sitecustomize reads it in).
TF_CONFIG_FILE_ENV = "TFDEVICES_TF_CONFIG_FILE"
#: The most one variable may hold, ``NAME=value`` and its NUL (Linux's ``MAX_ARG_STRLEN``: 32 pages of 4 KiB).
VARIABLE_LIMIT = 32 * 4096


def too_large(config: str) -> bool:
    """Whether a ``TF_CONFIG`` is more than one variable may hold (:data:`VARIABLE_LIMIT`)."""
    return len("TF_CONFIG=") + len(config.encode("utf-8")) + 1 > VARIABLE_LIMIT


def tf_config_by_file(env: dict[str, str], directory: str, rank: int) -> None:
    """Moves ``env``'s ``TF_CONFIG`` (one :func:`too_large`: a cluster of thousands of workers with long host
    names) into a file in ``directory``, named by :data:`TF_CONFIG_FILE_ENV`; the workers' sitecustomize reads it
    back in before the program runs.
    """
    path = os.path.join(directory, f"tf_config.{rank}.json")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        f.write(env.pop("TF_CONFIG"))
    env[TF_CONFIG_FILE_ENV] = path


def start_worker(env: MutableMapping[str, str] | None = None) -> None:
    """What a launched worker does at start-up: arm its mends and its listen check, which start when the
    program imports what they concern.

    Args:
        env: the worker's environment (default ``os.environ``): ``TFDEVICES_LISTEN`` says where its
            TensorFlow server may listen, ``RANK`` names it in messages.

    A malformed ``TFDEVICES_LISTEN`` ends the worker (status :data:`LISTEN_STATUS`) with one line
    naming the variable: it cannot be kept where nobody can say.
    """
    worker_lines()  # tfdevices' lines reach the launcher as they are, whatever logging the program configures
    env = os.environ if env is None else env
    rank = env.get("RANK", "?")
    value = env.get(LISTEN_ENV)
    if value is not None:
        try:
            target = parse_listen(value)
        except EnvVarError as err:
            _log.error("%s %s", LISTEN_MARK, err)
            os._exit(LISTEN_STATUS)
        loopback_mend.confine_when_imported(target, then=lambda: watch_listen(target, rank))
    try:
        start_reporting()  # where this rank is, for the launcher's stall watch
        keras_fit.install_when_imported()
    except TfDevicesError as err:  # a bad TFDEVICES_MENDS: the launcher checked it, the worker says it
        _log.warning("tfdevices: %s", err)


def worker_site(env: MutableMapping[str, str], *, mends_off: frozenset[str] = frozenset()) -> str:
    """Writes the workers' ``sitecustomize`` into a new directory put first on ``env``'s ``PYTHONPATH``.

    Args:
        env: the workers' environment (changed).
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
        f.write(_TEMPLATE)
    env["PYTHONPATH"] = site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return site
