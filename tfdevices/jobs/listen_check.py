"""The listen check: a launched worker's TensorFlow server listens where ``tfdevices launch`` asked, and nowhere else.

TensorFlow's gRPC server has no authentication, and TensorFlow always binds it to every interface
(:mod:`tfdevices.mends.loopback` moves that bind). Whether the promise holds is read from ``/proc``: the
sockets of a process (``/proc/<pid>/fd``, their inodes) that listen on the server's port, in that process's
own network namespace (``/proc/<pid>/net/tcp`` and ``tcp6``). Two sides read it:

* the launcher (:class:`OutsideCheck`): a thread that reads every worker process it started, and the
  processes they started, from outside them, so nothing the worker imports, mends or undoes can bypass it;
  a worker found listening on more than asked is stopped, and so is the job, with :data:`LISTEN_STATUS`;
* the worker itself (:func:`watch_listen`, started by its ``sitecustomize`` once TensorFlow is imported),
  which ends at once with the same status: the earliest look, from where the server runs.

Neither depends on the mend: with the mend off, undone or bypassed, the check still stops the job.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from tfdevices.mends import loopback as loopback_mend
from tfdevices.mends.loopback import LOOPBACK, Listen

#: A worker whose server listens on more than it was asked ends with this status; the launcher names it.
LISTEN_STATUS = 86
#: How a listen-check line begins (the worker's and the launcher's; the launcher recognises it).
LISTEN_MARK = "tfdevices: listen check:"
_EVERY = {"0.0.0.0", "::"}
_POLL_S = (0.02, 0.25)  # the first and longest pause between two looks before the port listens
_AFTER_S = 1.0  # the pause between two looks once every watched port listens (a later socket is seen too)
_MAX_TREE = 256  # processes read under one worker at most (its children, theirs, ...)
_SOCKET = re.compile(r"socket:\[(\d+)\]")


def watch_listen(
    target: Listen,
    rank: str,
    *,
    pid: str = "self",
    stop: Callable[[int], None] = os._exit,
    out: Callable[[str], None] | None = None,
) -> threading.Thread:
    """Starts the worker's own listen check: a daemon thread that waits for this process to listen on
    ``target.port``, then says where and, if that is more than ``target`` allows, stops the worker.

    It looks at once, then backs off to four looks a second; it ends after its one verdict.

    Args:
        target: where the server may listen.
        rank: the worker's rank, for the message.
        pid: the process whose sockets to read (``self``).
        stop: ends the worker with :data:`LISTEN_STATUS` (``os._exit``: no clean-up may keep the port open longer).
        out: says a line (default: logged to ``tfdevices.jobs.listen_check``, ERROR for a breach, else WARNING;
            in a launched worker it reaches the worker's stderr as it is, for the launcher).

    Returns:
        The thread.
    """
    say = out or _log_line

    def check() -> None:
        pause = _POLL_S[0]
        while True:
            found = listening(target.port, pid)
            if found:
                break
            time.sleep(pause)
            pause = min(pause * 2, _POLL_S[1])
        problem = listen_verdict(target, found, rank, why=_mend_state())
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


def _mend_state() -> str:
    """Why the worker's server could listen elsewhere, in the words of the worker's loopback mend."""
    status = loopback_mend.MEND.status()
    if status.state != "applied":
        return f"the loopback mend is {status.state}: {status.detail}"
    return "the loopback mend is applied, so the server was bound another way"


def listen_verdict(target: Listen, found: Iterable[tuple[str, int]], rank: str = "?", *, why: str = "") -> str | None:
    """Whether the sockets ``found`` listening on ``target.port`` stay within ``target`` (pure).

    Args:
        target: where the server may listen.
        found: ``(host, port)`` of each listening socket on the port.
        rank: the worker's rank, for the message.
        why: who saw it, or why it could happen, put in brackets after the address.

    Returns:
        ``None`` when they do (or ``target`` is every interface); else what is wrong, in one line.

    >>> listen_verdict(Listen("127.0.0.1", 8000), [("::ffff:127.0.0.1", 8000)]) is None
    True
    >>> print(listen_verdict(Listen("127.0.0.1", 8000), [("::", 8000)], rank="1"))  # doctest: +ELLIPSIS
    rank 1's TensorFlow server listens on [::]:8000 (every interface), not 127.0.0.1 as tfdevices launch asked. ...
    """
    if target.host is None:
        return None
    allowed = {target.host, f"::ffff:{target.host}"} | ({"::1"} if target.host == LOOPBACK else set())
    wrong = sorted(_shown(h, p) + (" (every interface)" if h in _EVERY else "") for h, p in found if h not in allowed)
    if not wrong:
        return None
    return (
        f"rank {rank}'s TensorFlow server listens on {', '.join(wrong)}, not {target.host} as tfdevices launch "
        f"asked{f' ({why})' if why else ''}. It has no authentication: whoever reaches this machine's port "
        f"{target.port} could run graphs in this worker; stopping it. HINT: launch with --listen all if every "
        "interface is intended (then keep the port behind a firewall)."
    )


def listening(port: int, pid: str | int = "self", *, tree: bool = False) -> list[tuple[str, int]]:
    """``(host, port)`` of each TCP socket of process ``pid`` listening on ``port`` (``/proc``; Linux).

    Args:
        port: the port.
        pid: the process (``"self"``: this one).
        tree: read the process's children too, and theirs (a worker started through a shell).

    Returns:
        The sockets; empty when there is none yet (or ``/proc`` cannot be read).
    """
    pids = process_tree(pid) if tree else [str(pid)]
    inodes: set[str] = set()
    for each in pids:
        inodes |= _socket_inodes(each)
    if not inodes:
        return []
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:  # the process's own network namespace, which may not be the reader's
            with open(f"/proc/{pids[0]}/net/{table}", encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hexaddr, _, hexport = fields[1].partition(":")
            if int(hexport, 16) == port:
                found.append((_host(hexaddr, family), port))
    return found


def process_tree(pid: str | int) -> list[str]:
    """``pid`` and every process below it (``/proc/<pid>/task/<tid>/children``), at most a few hundred."""
    found: list[str] = []
    queue = [str(pid)]
    while queue and len(found) < _MAX_TREE:
        each = queue.pop(0)
        found.append(each)
        try:
            tasks = os.listdir(f"/proc/{each}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{each}/task/{task}/children", encoding="ascii") as f:
                    queue.extend(f.read().split())
            except OSError:
                continue
    return found


def _socket_inodes(pid: str) -> set[str]:
    inodes: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            match = _SOCKET.fullmatch(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if match:
            inodes.add(match.group(1))
    return inodes


class OutsideCheck:
    """The launcher's listen check: reads each worker it started from outside, and stops one listening on more.

    A daemon thread looks at every watched worker (its process and the processes below it) until its port
    listens, backing off from 20 ms to 250 ms, then once a second while the job runs, so a socket opened
    later is seen too. The first worker found listening beyond its target is handed to ``stop`` with the
    line that says so; the check then ends.

    Args:
        workers: ``(rank, pid, target)`` of each worker; those whose target is every interface are not read.
        stop: called once, from the check's thread, with the rank and the line (the job stops that worker
            and the others).
    """

    def __init__(self, workers: Sequence[tuple[int, int, Listen]], stop: Callable[[int, str], None]) -> None:
        self.workers = [w for w in workers if not w[2].everywhere]
        self.stop = stop
        self.looks = 0
        self.all_listen = False  # every watched port listened at the last look
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfdevices-outside-listen-check", daemon=True)

    def start(self) -> OutsideCheck:
        """Starts the thread (nothing to read: nothing started)."""
        if self.workers:
            self._thread.start()
        return self

    def close(self) -> None:
        """Ends the thread (the attempt is over)."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def look(self) -> tuple[int, str] | None:
        """One look at every worker: the first ``(rank, line)`` found beyond its target, else ``None``."""
        self.looks += 1
        heard = 0
        for rank, pid, target in self.workers:
            found = listening(target.port, pid, tree=True)
            heard += bool(found)
            problem = listen_verdict(target, found, str(rank), why=f"seen by the launcher in /proc/{pid}")
            if problem is not None:
                return rank, f"{LISTEN_MARK} {problem}"
        self.all_listen = heard == len(self.workers)
        return None

    def _run(self) -> None:
        pause = _POLL_S[0]
        while not self._done.is_set():
            breach = self.look()
            if breach is not None:
                self.stop(*breach)
                return
            if self._done.wait(pause):
                return
            pause = _AFTER_S if self.all_listen else min(pause * 2, _POLL_S[1])


def _host(hexaddr: str, family: int) -> str:
    """An address as ``/proc/net/tcp*`` writes it (each 32-bit word in host order) in the usual form."""
    raw = bytes.fromhex(hexaddr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw)


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _log_line(line: str) -> None:
    """A line of the worker's listen check, logged: a breach (:data:`LISTEN_MARK`) as an error, else a warning."""
    logging.getLogger(__name__).log(logging.ERROR if line.startswith(LISTEN_MARK) else logging.WARNING, line)
