"""The ``sitecustomize`` that ``tfdevices launch`` puts first on its workers' ``PYTHONPATH``.

It runs the ``sitecustomize`` it hides (if any), then, in a worker whose Python has
tfdevices, calls :func:`start_worker`: the worker's mends wait for the program's own
imports. When Keras' trainer loads, the ``keras_fit`` mend mends Keras 3 ``model.fit`` for
``MultiWorkerMirroredStrategy``; when TensorFlow loads, the ``loopback`` mend keeps the
worker's TensorFlow server on the address the launcher asked (``TFDEVICES_LISTEN``), and
the worker's listen check starts (:func:`watch_listen`): once the server listens, it reads
where (``/proc/net/tcp`` and ``/proc/net/tcp6``), and a server listening on more than was
asked ends the worker with :data:`LISTEN_STATUS`, whatever the mend did: the launcher then
stops the job. Each mend is skipped where ``TFDEVICES_MENDS`` turns it off; the check is not
a mend and is never off. No change to the script, no TensorFlow here.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, MutableMapping

from tfdevices.core.errors import EnvVarError, TfDevicesError
from tfdevices.jobs.reporting import start_reporting
from tfdevices.mends import keras_fit, loopback as loopback_mend
from tfdevices.mends.base import MENDS_ENV, parse_mends_off
from tfdevices.mends.loopback import LISTEN_ENV, LOOPBACK, Listen, parse_listen

#: A worker whose server listens on more than it was asked ends with this status; the launcher names it.
LISTEN_STATUS = 86
#: How the worker's listen-check line begins (the launcher recognises it).
LISTEN_MARK = "tfdevices: listen check:"
_EVERY = {"0.0.0.0", "::"}
_POLL_S = (0.02, 0.25)  # the listen check's first and longest pause between two looks (the window it leaves)

_TEMPLATE = '''"""Written by tfdevices launch for this worker."""
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
    start_worker()
'''


def start_worker(env: MutableMapping[str, str] | None = None) -> None:
    """What a launched worker does at start-up: arm its mends and its listen check, which start when the
    program imports what they concern.

    Args:
        env: the worker's environment (default ``os.environ``): ``TFDEVICES_LISTEN`` says where its
            TensorFlow server may listen, ``RANK`` names it in messages.

    A malformed ``TFDEVICES_LISTEN`` ends the worker (status :data:`LISTEN_STATUS`) with one line
    naming the variable: it cannot be kept where nobody can say.
    """
    env = os.environ if env is None else env
    rank = env.get("RANK", "?")
    value = env.get(LISTEN_ENV)
    if value is not None:
        try:
            target = parse_listen(value)
        except EnvVarError as err:
            _stderr(f"{LISTEN_MARK} {err}")
            os._exit(LISTEN_STATUS)
        loopback_mend.confine_when_imported(target, then=lambda: watch_listen(target, rank))
    try:
        start_reporting()  # where this rank is, for the launcher's stall watch
        keras_fit.install_when_imported()
    except TfDevicesError as err:  # a bad TFDEVICES_MENDS: the launcher checked it, the worker says it
        _stderr(f"tfdevices: {err}")


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


# --------------------------------------------------------------------------- the listen check


def watch_listen(
    target: Listen,
    rank: str,
    *,
    pid: str = "self",
    stop: Callable[[int], None] = os._exit,
    out: Callable[[str], None] | None = None,
) -> threading.Thread:
    """Starts the listen check: a daemon thread that waits for this process to listen on ``target.port``,
    then says where and, if that is more than ``target`` allows, stops the worker.

    It looks at once, then backs off to four looks a second; it ends after its one verdict.

    Args:
        target: where the server may listen.
        rank: the worker's rank, for the message.
        pid: the process whose sockets to read (``self``).
        stop: ends the worker with :data:`LISTEN_STATUS` (``os._exit``: no clean-up may open the port longer).
        out: prints a line (default: stderr, flushed).

    Returns:
        The thread.
    """
    say = out or _stderr

    def check() -> None:
        pause = _POLL_S[0]
        while True:
            found = listening(target.port, pid)
            if found:
                break
            time.sleep(pause)
            pause = min(pause * 2, _POLL_S[1])
        problem = listen_verdict(target, found, rank)
        if target.everywhere:
            where = ", ".join(sorted(_shown(h, p) for h, p in found))
            say(
                f"tfdevices: rank {rank}'s TensorFlow server listens on every interface, port {target.port} "
                "(--listen all): whoever reaches this machine on that port can run graphs in this worker"
                if any(h in _EVERY for h, _ in found)
                else f"tfdevices: rank {rank}'s TensorFlow server listens on {where} (--listen all)"
            )
        elif problem is not None:
            say(f"{LISTEN_MARK} {problem}")
            stop(LISTEN_STATUS)

    thread = threading.Thread(target=check, name="tfdevices-listen-check", daemon=True)
    thread.start()
    return thread


def listen_verdict(target: Listen, found: Iterable[tuple[str, int]], rank: str = "?") -> str | None:
    """Whether the sockets ``found`` listening on ``target.port`` stay within ``target`` (pure).

    Args:
        target: where the server may listen.
        found: ``(host, port)`` of each listening socket on the port.
        rank: the worker's rank, for the message.

    Returns:
        ``None`` when they do (or ``target`` is every interface); else what is wrong, in one line.

    >>> listen_verdict(Listen("127.0.0.1", 8000), [("::ffff:127.0.0.1", 8000)]) is None
    True
    >>> print(listen_verdict(Listen("127.0.0.1", 8000), [("::", 8000)], rank="1"))  # doctest: +ELLIPSIS
    rank 1's TensorFlow server listens on [::]:8000 (every interface), not 127.0.0.1 as tfdevices launch asked ...
    """
    if target.host is None:
        return None
    allowed = {target.host, f"::ffff:{target.host}"} | ({"::1"} if target.host == LOOPBACK else set())
    wrong = sorted(_shown(h, p) + (" (every interface)" if h in _EVERY else "") for h, p in found if h not in allowed)
    if not wrong:
        return None
    status = loopback_mend.MEND.status()
    why = (
        f"the loopback mend is {status.state}: {status.detail}"
        if status.state != "applied"
        else "the loopback mend is applied, so the server was bound another way"
    )
    return (
        f"rank {rank}'s TensorFlow server listens on {', '.join(wrong)}, not {target.host} as tfdevices launch "
        f"asked ({why}). It has no authentication: whoever reaches this machine's port {target.port} could run "
        "graphs in this worker; stopping it. HINT: launch with --listen all if every interface is intended "
        "(then keep the port behind a firewall)."
    )


def listening(port: int, pid: str = "self") -> list[tuple[str, int]]:
    """``(host, port)`` of each TCP socket of process ``pid`` listening on ``port`` (``/proc``; Linux).

    Returns:
        The sockets; empty when there is none yet (or ``/proc`` cannot be read).
    """
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                match = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                continue
            if match:
                inodes.add(match.group(1))
    except OSError:
        return []
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            with open(table, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hexaddr, hexport = fields[1].split(":")
            if int(hexport, 16) == port:
                found.append((_host(hexaddr, family), port))
    return found


def _host(hexaddr: str, family: int) -> str:
    """An address as ``/proc/net/tcp*`` writes it (each 32-bit word in host order) in the usual form."""
    raw = bytes.fromhex(hexaddr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw)


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


__all__ = ["LISTEN_MARK", "LISTEN_STATUS", "listen_verdict", "listening", "start_worker", "watch_listen", "worker_site"]
