"""Reserve: claim GPUs so that concurrent processes on one host never share a "free" one.

A reservation is an OS file lock (``fcntl.flock``) on one file per GPU in a lock
directory. The kernel drops the lock when its process ends, however it ends
(exit, crash, ``kill -9``), so a dead holder never blocks anyone. Choosing and
claiming happen under one directory-wide lock: two processes asking for
``"auto:1"`` at the same moment get two different GPUs, or one of them waits or
gets a :class:`~tfdevices.core.errors.ReservationError` naming who holds what.

Each GPU's lock file holds a line of JSON about its holder (pid, host, command,
since when). A file that is unlocked but not empty was left by a holder that
died without releasing: it is wiped on the next reservation and reported in
:attr:`Reservation.cleaned`.

The lock directory is ``lock_dir=``, else ``$TFDEVICES_LOCK_DIR``, else
``<tmp>/tfdevices-locks``. Every process that should respect the reservations of
the others must use the same directory.

>>> import tempfile
>>> from tfdevices.gpus.inventory import GpuInfo, Inventory
>>> inv = Inventory(gpus=tuple(GpuInfo(index=i, name="Fake", uuid=f"GPU-{i}", cuda_ordinal=i)
...                            for i in range(2)), source="nvml")
>>> locks = tempfile.mkdtemp()
>>> first = reserve("auto:1", inv, lock_dir=locks)
>>> second = reserve("auto:1", inv, lock_dir=locks)
>>> first.indices, second.indices
((0,), (1,))
>>> reserve("auto:1", inv, lock_dir=locks)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
tfdevices.core.errors.ReservationError: reserve 'auto:1': 0 of 2 GPU(s) free in ...
>>> first.release(); reserve("auto:1", inv, lock_dir=locks).indices
(0,)
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping

from tfdevices.core.errors import ReservationError, SelectionError
from tfdevices.gpus.discovery import discover
from tfdevices.gpus.inventory import GpuInfo, Inventory
from tfdevices.gpus.selection import Selection, select
from tfdevices.gpus.spec import parse_spec

LOCK_DIR_ENV = "TFDEVICES_LOCK_DIR"
_SELECT_LOCK = ".select.lock"
_HINT = ("wait for a GPU (timeout=SECONDS), ask for fewer or other GPUs, or ask the holders; "
         "a holder's lock goes away when its process ends.")


def default_lock_dir(env: Mapping[str, str] | None = None) -> str:
    """``$TFDEVICES_LOCK_DIR``, else ``<tmp>/tfdevices-locks``.

    >>> default_lock_dir({"TFDEVICES_LOCK_DIR": "/scratch/locks"})
    '/scratch/locks'
    """
    env = os.environ if env is None else env
    return env.get(LOCK_DIR_ENV) or os.path.join(tempfile.gettempdir(), "tfdevices-locks")


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds (or last held) one GPU's lock.

    Attributes:
        gpu: the GPU's key (``"2"``, ``"0:1"``).
        pid: the holder's process id.
        host: the holder's host name.
        command: the holder's command line (shortened).
        since: when it took the lock (seconds since the epoch).
    """

    gpu: str
    pid: int | None = None
    host: str = "?"
    command: str = ""
    since: float | None = None

    def describe(self, now: float | None = None) -> str:
        """``"GPU 2 by pid 4121 on node7 (python train.py) for 42 s"``."""
        age = "" if self.since is None else f" for {max(0.0, (now or time.time()) - self.since):.0f} s"
        cmd = f" ({self.command})" if self.command else ""
        who = "an unknown process" if self.pid is None else f"pid {self.pid} on {self.host}"
        return f"GPU {self.gpu} by {who}{cmd}{age}"


class Reservation:
    """GPUs held by this process until :meth:`release` or the process ends.

    Not garbage-collected away: dropping the object keeps the locks (so that
    ``tfdevices.reserve("auto:1")`` as a statement holds the GPU for the whole
    run). Use it as a context manager to release at the end of a block.

    Attributes:
        gpus: the reserved GPUs.
        selection: a :class:`~tfdevices.gpus.selection.Selection` of them, for
            :func:`tfdevices.configure`.
        lock_dir: the lock directory used.
        request: the spec asked for.
        waited: seconds spent waiting for a GPU to become free.
        cleaned: holders whose stale lock files were wiped (they had died without releasing).
    """

    def __init__(self, gpus: tuple[GpuInfo, ...], selection: Selection, lock_dir: str, fds: dict[str, int],
                 request: str, waited: float, cleaned: tuple[Holder, ...]) -> None:
        self.gpus = gpus
        self.selection = selection
        self.lock_dir = lock_dir
        self.request = request
        self.waited = waited
        self.cleaned = cleaned
        self._fds = dict(fds)

    @property
    def indices(self) -> tuple[int, ...]:
        """The reserved GPUs' NVML indices."""
        return tuple(g.index for g in self.gpus)

    @property
    def held(self) -> bool:
        """Whether the locks are still held by this object."""
        return bool(self._fds) or not self.gpus

    @property
    def cuda_visible_devices(self) -> str:
        """The mask that makes exactly the reserved GPUs visible (``"-1"``: none)."""
        return self.selection.cuda_visible_devices

    def env(self) -> dict[str, str]:
        """The variables that apply this reservation in a process not yet using CUDA."""
        return self.selection.env()

    def release(self) -> None:
        """Releases every lock (idempotent). The holder line is wiped first, so the file is left clean."""
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self._fds else "released" if self.gpus else "no GPU"
        return f"Reservation(gpus={list(self.indices)}, {state}, lock_dir={self.lock_dir!r})"


def reserve(request: object = "auto:1", inventory: Inventory | None = None, *, lock_dir: str | None = None,
            timeout: float | None = 0.0, poll_interval: float = 0.05, min_free_memory: int | str | None = None,
            max_utilization: float | None = None) -> Reservation:
    """Selects and claims GPUs under one lock, so no other process gets them.

    Args:
        request: a :class:`~tfdevices.gpus.selection.Selection` (claim exactly its GPUs), or a
            spec: ``"auto:N"`` (the N best free GPUs), ``"all"`` (every free visible GPU,
            at least one), ``"0,2"`` (these, all of them free), ``"none"`` (nothing).
        inventory: what exists; ``None`` runs :func:`tfdevices.discover`.
        lock_dir: the lock directory (see the module docstring).
        timeout: seconds to wait for GPUs to become free; ``0`` fails at once, ``None``
            waits forever.
        poll_interval: seconds between attempts while waiting.
        min_free_memory: passed to :func:`tfdevices.select` for spec requests.
        max_utilization: passed to :func:`tfdevices.select` for spec requests.

    Returns:
        A held :class:`Reservation`.

    Raises:
        ReservationError: the GPUs are held by other processes (the message says who),
            past ``timeout``; or the lock directory cannot be used.
        SpecError, SelectionError: the request is malformed or could never be met on
            this machine, whoever holds what.
    """
    if inventory is None:
        inventory = discover()
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
        raise ReservationError(f"timeout={timeout!r} must be seconds >= 0 or None.", hint="e.g. timeout=60.")
    directory = lock_dir or default_lock_dir()
    if isinstance(request, Selection):
        wanted, text, exact = request.gpus, request.spec, True
    else:
        parsed = parse_spec(request, what="reserve")
        text = parsed.text
        base = _select(request, inventory, None, min_free_memory, max_utilization)  # raises if never possible
        wanted, exact = base.gpus, parsed.kind == "explicit"
        if not base.gpus:  # "none", or "all" on a machine without a visible GPU: nothing to claim
            return Reservation((), base, directory, {}, text, 0.0, ())
    _prepare(directory)
    start = time.monotonic()
    while True:
        with _directory_lock(directory):
            free_fds, holders, cleaned = _probe(directory, inventory)
            chosen = _choose(request, inventory, wanted, exact, free_fds, min_free_memory, max_utilization)
            keep = {} if chosen is None else {g.key: free_fds.pop(g.key) for g in chosen.gpus}
            for fd in free_fds.values():
                os.close(fd)
            if chosen is not None:
                waited = time.monotonic() - start
                for gpu in chosen.gpus:
                    _write_holder(keep[gpu.key], gpu)
                return Reservation(chosen.gpus, chosen, directory, keep, text, waited, cleaned)
        waited = time.monotonic() - start
        if timeout is not None and waited >= timeout:
            raise _busy(text, inventory, wanted, exact, holders, directory, waited)
        time.sleep(poll_interval)


def holders(inventory: Inventory | None = None, *, lock_dir: str | None = None) -> tuple[Holder, ...]:
    """Who holds which GPU right now, according to the lock files (claims nothing).

    Args:
        inventory: the GPUs to look at; ``None`` runs :func:`tfdevices.discover`.
        lock_dir: the lock directory (see the module docstring).

    Returns:
        One :class:`Holder` per held GPU, in inventory order.
    """
    if inventory is None:
        inventory = discover()
    directory = lock_dir or default_lock_dir()
    if not os.path.isdir(directory):
        return ()
    with _directory_lock(directory):
        free_fds, held, _ = _probe(directory, inventory, clean=False)
        for fd in free_fds.values():
            os.close(fd)
    return tuple(held.values())


# ---------------------------------------------------------------- internals

def _select(request: object, inventory: Inventory, exclude: list[str] | None, min_free: object,
            max_util: object) -> Selection:
    return select(request, inventory, min_free_memory=min_free, max_utilization=max_util, exclude=exclude)


def _choose(request: object, inventory: Inventory, wanted: tuple[GpuInfo, ...], exact: bool,
            free: dict[str, int], min_free: object, max_util: object) -> Selection | None:
    """The selection to claim now, or ``None`` when what is free does not suffice."""
    if exact:
        if not all(g.key in free for g in wanted):
            return None
        return request if isinstance(request, Selection) else _select(request, inventory, None, min_free, max_util)
    busy = [g.key for g in inventory.gpus if g.key not in free]
    try:
        chosen = _select(request, inventory, busy or None, min_free, max_util)
    except SelectionError:
        return None
    return chosen if chosen.gpus else None


def _prepare(directory: str) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
        with contextlib.suppress(OSError):  # shared by every user of the machine, like /tmp
            if os.stat(directory).st_uid == os.getuid():
                os.chmod(directory, 0o1777)
    except OSError as err:
        raise ReservationError(
            f"lock directory {directory!r} cannot be created: {err.strerror}.",
            hint=f"set {LOCK_DIR_ENV} (or lock_dir=) to a writable directory on this host.") from None


def _open(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        fd = os.open(path, os.O_RDONLY)
    except OSError as err:
        raise ReservationError(f"lock file {path!r} cannot be opened: {err.strerror}.",
                               hint=f"set {LOCK_DIR_ENV} (or lock_dir=) to a writable local directory.") from None
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


@contextlib.contextmanager
def _directory_lock(directory: str) -> Iterator[None]:
    fd = _open(os.path.join(directory, _SELECT_LOCK))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _lock_name(gpu: GpuInfo) -> str:
    ident = gpu.uuid or f"index-{gpu.key}"
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", ident) + ".lock"


def _probe(directory: str, inventory: Inventory, *, clean: bool = True
           ) -> tuple[dict[str, int], dict[str, Holder], tuple[Holder, ...]]:
    """Locks every free GPU file (caller keeps or closes them); reads the holders of the others."""
    free: dict[str, int] = {}
    held: dict[str, Holder] = {}
    cleaned: list[Holder] = []
    for gpu in inventory.gpus:
        fd = _open(os.path.join(directory, _lock_name(gpu)))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise
            held[gpu.key] = _read_holder(fd, gpu.key)
            os.close(fd)
            continue
        stale = _read_holder(fd, gpu.key)
        if clean and stale.pid is not None:
            cleaned.append(stale)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        free[gpu.key] = fd
    return free, held, tuple(cleaned)


def _read_holder(fd: int, key: str) -> Holder:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        return Holder(key)
    if not isinstance(data, dict):
        return Holder(key)
    pid, since = data.get("pid"), data.get("since")
    return Holder(key, pid if isinstance(pid, int) else None, str(data.get("host", "?")),
                  str(data.get("command", "")), since if isinstance(since, (int, float)) else None)


def _write_holder(fd: int, gpu: GpuInfo) -> None:
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:120]
    line = json.dumps({"gpu": gpu.key, "uuid": gpu.uuid, "pid": os.getpid(), "host": socket.gethostname(),
                       "command": command, "since": time.time()}) + "\n"
    with contextlib.suppress(OSError):  # a read-only lock file still locks; only the note is lost
        os.ftruncate(fd, 0)
        os.pwrite(fd, line.encode(), 0)


def _busy(text: str, inventory: Inventory, wanted: tuple[GpuInfo, ...], exact: bool,
          held: dict[str, Holder], directory: str, waited: float) -> ReservationError:
    now = time.time()
    considered = wanted if exact else inventory.gpus
    taken = [held[g.key] for g in considered if g.key in held]
    free = len(considered) - len(taken)
    shown = "; ".join(h.describe(now) for h in taken) or "none"
    scope = f"GPU(s) {','.join(g.key for g in wanted)} asked for" if exact else "GPU(s)"
    return ReservationError(
        f"reserve {text!r}: {free} of {len(considered)} {scope} free in {directory} "
        f"(waited {waited:.1f} s); held: {shown}.", hint=_HINT)
