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

**The lock directory** is ``lock_dir=``, else ``$TFDEVICES_LOCK_DIR``, else
:data:`DEFAULT_LOCK_DIR` (``/tmp/tfdevices-locks``): a fixed path, one per
machine, that does not follow ``TMPDIR`` (SLURM gives every job its own
``TMPDIR``; jobs sharing a node must still see each other's locks). Every process
that should respect the reservations of the others must use the same directory.

**Faults it survives.** A lock file deleted while held (a ``/tmp`` cleaner) does
not free the GPU: on Linux each claim also binds an abstract Unix socket named
after the lock directory and the GPU, a name no file cleaner can remove and the
kernel frees when the holder ends, so the next caller sees the GPU held
("its lock file was deleted"); :meth:`Reservation.restore` writes the holder's
file back. A lock file replaced between ``open`` and
``flock`` is detected (inode check) and opened again. A forked child inherits the
locks; the parent's :meth:`Reservation.release` frees them all the same, and a
child's ``release()`` says why it cannot. Anything that fails half-way through
a claim releases everything that claim took.

>>> import tempfile
>>> from tfdevices.gpus.inventory import Inventory
>>> from tfdevices.gpus.gpuinfo import GpuInfo
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
import hashlib
import json
import math
import os
import re
import socket
import sys
import time
from collections.abc import Iterator, Mapping, Sequence

from tfdevices.core.errors import InputError, ReservationError, SelectionError, SpecError
from tfdevices.gpus.discovery import discover
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.selection import Selection, first_overlap, select
from tfdevices.gpus.spec import parse_spec
from tfdevices.mends import fork_sockets

LOCK_DIR_ENV = "TFDEVICES_LOCK_DIR"
DEFAULT_LOCK_DIR = "/tmp/tfdevices-locks"
"""The lock directory when neither ``lock_dir=`` nor ``$TFDEVICES_LOCK_DIR`` is given: one per machine,
whatever ``TMPDIR`` says."""
_SELECT_LOCK = ".select.lock"
_HINT = (
    "wait for a GPU (timeout=SECONDS), ask for fewer or other GPUs, or ask the holders; "
    "a holder's lock goes away when its process ends."
)
_REOPEN_TRIES = 20


def default_lock_dir(env: Mapping[str, str] | None = None) -> str:
    """``$TFDEVICES_LOCK_DIR``, else :data:`DEFAULT_LOCK_DIR` (never ``TMPDIR``, which SLURM sets per job).

    >>> default_lock_dir({"TFDEVICES_LOCK_DIR": "/scratch/locks"})
    '/scratch/locks'
    >>> default_lock_dir({"TMPDIR": "/tmp/job42"})
    '/tmp/tfdevices-locks'
    """
    env = os.environ if env is None else env
    return env.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds (or last held) one GPU's lock.

    Attributes:
        gpu: the GPU's key (``"2"``, ``"0:1"``).
        pid: the holder's process id.
        host: the holder's host name.
        command: the holder's command line (shortened).
        since: when it took the lock (seconds since the epoch).
        note: what else is known (``"its lock file was deleted"``).
    """

    gpu: str
    pid: int | None = None
    host: str = "?"
    command: str = ""
    since: float | None = None
    note: str = ""

    def describe(self, now: float | None = None) -> str:
        """``"GPU 2 by pid 4121 on node7 (python train.py) for 42 s"``."""
        age = "" if self.since is None else f" for {max(0.0, (now or time.time()) - self.since):.0f} s"
        cmd = f" ({self.command})" if self.command else ""
        who = "an unknown process" if self.pid is None else f"pid {self.pid} on {self.host}"
        note = f" ({self.note})" if self.note else ""
        return f"GPU {self.gpu} by {who}{cmd}{age}{note}"


@dataclasses.dataclass
class _Claim:
    """One GPU held: the locked file's descriptor and, on Linux, the bound name's socket descriptor."""

    fd: int
    sock: int | None = None

    def close(self, *, unlock: bool) -> None:
        if self.sock is not None:
            fork_sockets.close(self.sock)
            self.sock = None
        if unlock:  # frees the lock even where a forked child still has a copy of the descriptor
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(self.fd)


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
        pid: the process that made the reservation (the one that can release it).
    """

    def __init__(
        self,
        gpus: tuple[GpuInfo, ...],
        selection: Selection,
        lock_dir: str,
        claims: dict[str, _Claim],
        request: str,
        waited: float,
        cleaned: tuple[Holder, ...],
    ) -> None:
        self.gpus = gpus
        self.selection = selection
        self.lock_dir = lock_dir
        self.request = request
        self.waited = waited
        self.cleaned = cleaned
        self.pid = os.getpid()
        self._claims = dict(claims)

    @property
    def indices(self) -> tuple[int, ...]:
        """The reserved GPUs' NVML indices."""
        return tuple(g.index for g in self.gpus)

    @property
    def held(self) -> bool:
        """Whether the locks are still held by this object."""
        return bool(self._claims) or not self.gpus

    @property
    def cuda_visible_devices(self) -> str:
        """The mask that makes exactly the reserved GPUs visible (``"-1"``: none)."""
        return self.selection.cuda_visible_devices

    def env(self) -> dict[str, str]:
        """The variables that apply this reservation in a process not yet using CUDA."""
        return self.selection.env()

    def release(self) -> None:
        """Releases every lock (idempotent). The holder line is wiped first, so the file is left clean.

        Raises:
            ReservationError: called in a forked child: the locks belong to the process that
                reserved them, which keeps them until it releases or ends. The child's copies
                are closed, so they do not outlive that release.
        """
        claims, self._claims = self._claims, {}
        if os.getpid() != self.pid:
            for claim in claims.values():
                claim.close(unlock=False)
            if claims:
                raise ReservationError(
                    f"release() in pid {os.getpid()}: GPU(s) {','.join(claims)} were reserved by pid {self.pid}, "
                    "which this process was forked from; they stay reserved until pid "
                    f"{self.pid} releases them or ends (this process's copies are closed).",
                    hint="release in the process that called reserve(), or reserve in the child itself.",
                )
            return
        for claim in claims.values():
            with contextlib.suppress(OSError):
                os.ftruncate(claim.fd, 0)
            claim.close(unlock=True)

    def lost(self) -> tuple[str, ...]:
        """Keys of the held GPUs whose lock file is gone or replaced (a ``/tmp`` cleaner).

        The GPUs stay reserved (the bound name still says so on Linux), but
        :func:`holders` can no longer say who holds them.
        """
        gone = []
        for key, claim in self._claims.items():
            gpu = next(g for g in self.gpus if g.key == key)
            if not _same_file(claim.fd, os.path.join(self.lock_dir, _lock_name(gpu))):
                gone.append(key)
        return tuple(gone)

    def restore(self) -> tuple[str, ...]:
        """Recreates the lock files of :meth:`lost` GPUs, with this holder's note, so :func:`holders` names
        this process again. The GPUs were never free meanwhile (on Linux).

        Returns:
            The keys of the GPUs whose lock file was recreated.

        Raises:
            ReservationError: called in a forked child, or the lock directory cannot be used.
        """
        if os.getpid() != self.pid:
            raise ReservationError(
                f"restore() in pid {os.getpid()}: this reservation belongs to pid {self.pid}.",
                hint="call restore() in the process that called reserve().",
            )
        lost = self.lost()
        if not lost:
            return ()
        _prepare(self.lock_dir)
        restored = []
        with _directory_lock(self.lock_dir):  # no other caller is probing the files while we hold it
            for key in lost:
                gpu = next(g for g in self.gpus if g.key == key)
                fd = _lock_file(os.path.join(self.lock_dir, _lock_name(gpu)), blocking=False)
                if fd is None:
                    continue
                _write_holder(fd, gpu)
                claim = self._claims[key]
                with contextlib.suppress(OSError):
                    os.close(claim.fd)  # the deleted file's lock guards nothing any more
                claim.fd = fd
                restored.append(key)
        return tuple(restored)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self._claims else "released" if self.gpus else "no GPU"
        return f"Reservation(gpus={list(self.indices)}, {state}, lock_dir={self.lock_dir!r})"


def reserve(
    request: Selection | str | int | Sequence[int | str] = "auto:1",
    inventory: Inventory | None = None,
    *,
    lock_dir: str | None = None,
    timeout: float | None = 0.0,
    poll_interval: float = 0.05,
    min_free_memory: int | str | None = None,
    max_utilization: float | None = None,
) -> Reservation:
    """Selects and claims GPUs under one lock, so no other process gets them.

    Args:
        request: a :class:`~tfdevices.gpus.selection.Selection` (claim exactly its GPUs), or a
            spec: ``"auto:N"`` (the N best free GPUs), ``"all"`` (every free visible GPU,
            at least one), ``"0,2"`` (these, all of them free), ``"none"`` (nothing).
        inventory: what exists; ``None`` runs :func:`tfdevices.discover`.
        lock_dir: the lock directory (see the module docstring).
        timeout: seconds to wait for GPUs to become free; ``0`` fails at once, ``None``
            (or ``math.inf``) waits forever.
        poll_interval: seconds between attempts while waiting (> 0).
        min_free_memory: passed to :func:`tfdevices.select` for spec requests.
        max_utilization: passed to :func:`tfdevices.select` for spec requests.

    Returns:
        A held :class:`Reservation`.

    Raises:
        ReservationError: the GPUs are held by other processes (the message says who),
            past ``timeout``; or the lock directory cannot be used.
        InputError: ``timeout`` or ``poll_interval`` is not a number of seconds
            (negative, NaN, a string ...).
        SpecError, SelectionError: the request is malformed, names one GPU twice, or
            could never be met on this machine, whoever holds what.
    """
    _check_seconds("timeout", timeout, allow_none=True, allow_zero=True)
    _check_seconds("poll_interval", poll_interval, allow_none=False, allow_zero=False)
    if inventory is None:
        inventory = discover()
    directory = lock_dir or default_lock_dir()
    asked = _wanted(request, inventory, min_free_memory, max_utilization)
    wanted, text, exact, base = asked.gpus, asked.text, asked.exact, asked.selection
    if base is not None and not wanted:  # "none", or "all" on a machine without a visible GPU: nothing to claim
        return Reservation((), base, directory, {}, text, 0.0, ())
    _prepare(directory)
    start = time.monotonic()
    while True:
        got = _attempt(request, inventory, wanted, exact, directory, min_free_memory, max_utilization)
        waited = time.monotonic() - start
        if isinstance(got, tuple):
            chosen, claims, cleaned = got
            return Reservation(chosen.gpus, chosen, directory, claims, text, waited, cleaned)
        if timeout is not None and waited >= timeout:
            raise _busy(text, inventory, wanted, exact, got, directory, waited)
        time.sleep(poll_interval if timeout is None else max(0.0, min(poll_interval, timeout - waited)))


@dataclasses.dataclass(frozen=True)
class _Wanted:
    """What a request asks to claim (internal)."""

    gpus: tuple[GpuInfo, ...]
    text: str  # the request as written back
    exact: bool  # these GPUs and no others (a Selection, or an explicit spec)
    selection: Selection | None  # what a spec selected (None: a Selection was given)


def _wanted(
    request: Selection | str | int | Sequence[int | str],
    inventory: Inventory,
    min_free_memory: int | str | None,
    max_utilization: float | None,
) -> _Wanted:
    """The GPUs ``request`` asks for; a spec that could never be met on this machine raises here."""
    if isinstance(request, Selection):
        _check_distinct(request)
        return _Wanted(request.gpus, request.spec, True, None)
    parsed = parse_spec(request, what="reserve")
    base = _select(request, inventory, None, min_free_memory, max_utilization)  # raises if never possible
    return _Wanted(base.gpus, parsed.text, parsed.kind == "explicit", base)


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
        free, held, _ = _probe(directory, inventory, clean=False)
        for claim in free.values():
            claim.close(unlock=True)
    return tuple(held[g.key] for g in inventory.gpus if g.key in held)


# ---------------------------------------------------------------- internals


def _check_seconds(name: str, value: object, *, allow_none: bool, allow_zero: bool) -> None:
    if value is None and allow_none:
        return
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and not math.isnan(value)
        and (value > 0 or (allow_zero and value == 0))
    )
    if not ok or (not allow_none and value == math.inf):
        wanted = "seconds >= 0 or None (wait forever)" if allow_none else "seconds > 0 (a finite number)"
        raise InputError(
            f"{name}={value!r} must be {wanted}.",
            hint="e.g. timeout=60, poll_interval=0.05." if allow_none else "e.g. poll_interval=0.05.",
        )


def _check_distinct(selection: Selection) -> None:
    clash = first_overlap(selection.gpus)
    if clash is not None:
        (_, a), (_, b) = clash
        raise SpecError(
            f"reserve {selection.spec!r}: the selection holds GPU {a.key} and GPU {b.key}, which are one GPU.",
            hint="build the selection with tfdevices.select(), which names each GPU once.",
        )


def _attempt(
    request: Selection | str | int | Sequence[int | str],
    inventory: Inventory,
    wanted: tuple[GpuInfo, ...],
    exact: bool,
    directory: str,
    min_free: int | str | None,
    max_util: float | None,
) -> tuple[Selection, dict[str, _Claim], tuple[Holder, ...]] | dict[str, Holder]:
    """One try under the directory lock: the claims made, or who holds what. Never leaks a claim."""
    with _directory_lock(directory):
        free, held, cleaned = _probe(directory, inventory)
        try:  # what is not kept is closed before the directory lock goes, so the next caller sees it free
            chosen = _choose(request, inventory, wanted, exact, free, min_free, max_util)
            if chosen is None:
                return held
            keep = {g.key: free.pop(g.key) for g in chosen.gpus}
            try:
                for gpu in chosen.gpus:
                    _write_holder(keep[gpu.key].fd, gpu)
            except BaseException:
                free.update(keep)
                raise
            return chosen, keep, cleaned
        finally:
            for claim in free.values():
                claim.close(unlock=True)


def _select(
    request: str | int | Sequence[int | str],
    inventory: Inventory,
    exclude: list[str] | None,
    min_free: int | str | None,
    max_util: float | None,
) -> Selection:
    return select(request, inventory, min_free_memory=min_free, max_utilization=max_util, exclude=exclude)


def _choose(
    request: Selection | str | int | Sequence[int | str],
    inventory: Inventory,
    wanted: tuple[GpuInfo, ...],
    exact: bool,
    free: Mapping[str, _Claim],
    min_free: int | str | None,
    max_util: float | None,
) -> Selection | None:
    """The selection to claim now, or ``None`` when what is free does not suffice."""
    if exact:
        if not all(g.key in free for g in wanted):
            return None
        return request if isinstance(request, Selection) else _select(request, inventory, None, min_free, max_util)
    assert not isinstance(request, Selection)  # a Selection is exact: claimed above
    busy = [g.key for g in inventory.gpus if g.key not in free]
    try:
        chosen = _select(request, inventory, busy or None, min_free, max_util)
    except SelectionError:
        return None
    return chosen if chosen.gpus else None


def _dir_words(directory: str, *, quote: bool = True) -> str:
    """A lock directory as messages name it: the one ``TFDEVICES_LOCK_DIR`` names by that variable, never its value.

    >>> _dir_words("/tmp/locks", quote=False)
    '/tmp/locks'
    """
    named = os.environ.get(LOCK_DIR_ENV)
    if named and os.path.normpath(directory) == os.path.normpath(named):
        return f"(the one {LOCK_DIR_ENV} names)"
    return repr(directory) if quote else directory


def _file_words(path: str) -> str:
    """A lock file as messages name it: its name, and its directory as :func:`_dir_words` names it."""
    return f"{os.path.basename(path)!r} in {_dir_words(os.path.dirname(path))}"


def _prepare(directory: str) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
        with contextlib.suppress(OSError):  # shared by every user of the machine, like /tmp
            if os.stat(directory).st_uid == os.getuid():
                os.chmod(directory, 0o1777)
    except OSError as err:
        raise ReservationError(
            f"lock directory {_dir_words(directory)} cannot be created: {err.strerror}.",
            hint=f"set {LOCK_DIR_ENV} (or lock_dir=) to a writable directory on this host.",
        ) from None
    if not os.path.isdir(directory):
        raise ReservationError(
            f"lock directory {_dir_words(directory)} is not a directory.",
            hint=f"set {LOCK_DIR_ENV} (or lock_dir=) to a directory on this host.",
        )


def _open(path: str) -> int:
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        try:
            fd = os.open(path, os.O_RDWR | flags, 0o666)
        except PermissionError:
            fd = os.open(path, os.O_RDONLY | (flags & ~os.O_CREAT))
    except OSError as err:
        why = "it is a symbolic link" if err.errno == errno.ELOOP else err.strerror
        raise ReservationError(
            f"lock file {_file_words(path)} cannot be opened: {why}.",
            hint=f"set {LOCK_DIR_ENV} (or lock_dir=) to a writable local directory.",
        ) from None
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


def _same_file(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (a cleaner may have deleted or replaced it)."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def _lock_file(path: str, *, blocking: bool) -> int | None:
    """Opens and flocks ``path``; ``None`` when another process holds it. Retries while the file is
    deleted or replaced between ``open`` and ``flock``, so the lock is on the file the path names.
    """
    for _ in range(_REOPEN_TRIES):
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise ReservationError(
                f"lock file {_file_words(path)} cannot be locked: {err.strerror}.",
                hint=f"set {LOCK_DIR_ENV} (or lock_dir=) to a local directory (some network file systems lack flock).",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            return fd
        os.close(fd)  # locked a file that was just deleted or replaced: lock the one the path names now
    raise ReservationError(
        f"lock file {_file_words(path)} keeps being replaced while it is locked.",
        hint=f"stop whatever cleans {_dir_words(os.path.dirname(path))}, or set {LOCK_DIR_ENV}.",
    )


@contextlib.contextmanager
def _directory_lock(directory: str) -> Iterator[None]:
    fd = _lock_file(os.path.join(directory, _SELECT_LOCK), blocking=True)
    if fd is None:  # a blocking flock waits rather than refuse; kept for the type checker
        raise ReservationError(f"lock directory {_dir_words(directory)}: the directory lock was refused.", hint=_HINT)
    try:
        yield
    finally:
        os.close(fd)


def _lock_name(gpu: GpuInfo) -> str:
    ident = gpu.uuid or f"index-{gpu.key}"
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", ident) + ".lock"


def _bind_name(directory: str, gpu: GpuInfo) -> int | None:
    """Binds this GPU's abstract socket name (Linux); its descriptor, or ``None`` when another process has it.

    Where abstract names do not exist (not Linux), returns ``-1``: the file lock alone decides.
    """
    if not sys.platform.startswith("linux"):
        return -1
    ident = f"{os.path.realpath(directory)}\0{_lock_name(gpu)}".encode("utf-8", "surrogateescape")
    name = b"\0tfdevices-gpu-lock:" + hashlib.sha256(ident).hexdigest()[:40].encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(name)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            return None
        return -1  # abstract names refused here (a sandbox): the file lock alone decides
    fd = sock.detach()  # a plain descriptor: never closed by the garbage collector
    fork_sockets.track(fd)
    return fd


def _probe(
    directory: str, inventory: Inventory, *, clean: bool = True
) -> tuple[dict[str, _Claim], dict[str, Holder], tuple[Holder, ...]]:
    """Claims every free GPU (the caller keeps or closes the claims); reads the holders of the others."""
    free: dict[str, _Claim] = {}
    held: dict[str, Holder] = {}
    cleaned: list[Holder] = []
    try:
        for gpu in inventory.gpus:
            path = os.path.join(directory, _lock_name(gpu))
            fd = _lock_file(path, blocking=False)
            if fd is None:
                held[gpu.key] = _read_holder_at(path, gpu.key)
                continue
            try:
                sock = _bind_name(directory, gpu)
            except BaseException:
                os.close(fd)
                raise
            if sock is None:  # the file is free but the name is bound: its holder's file was deleted
                os.close(fd)
                held[gpu.key] = Holder(gpu.key, note="its lock file was deleted while held")
                continue
            claim = _Claim(fd, None if sock == -1 else sock)
            free[gpu.key] = claim
            stale = _read_holder(fd, gpu.key)
            if clean and stale.pid is not None:
                cleaned.append(stale)
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
    except BaseException:
        for claim in free.values():
            claim.close(unlock=True)
        raise
    return free, held, tuple(cleaned)


def _read_holder_at(path: str, key: str) -> Holder:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return Holder(key)
    try:
        return _read_holder(fd, key)
    finally:
        os.close(fd)


def _read_holder(fd: int, key: str) -> Holder:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError, RecursionError):
        return Holder(key)
    if not isinstance(data, dict):
        return Holder(key)
    pid, since = data.get("pid"), data.get("since")
    return Holder(
        key,
        pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        str(data.get("host", "?"))[:80],
        str(data.get("command", ""))[:120],
        since if isinstance(since, (int, float)) and math.isfinite(since) else None,
    )


def _write_holder(fd: int, gpu: GpuInfo) -> None:
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:120]
    line = (
        json.dumps(
            {
                "gpu": gpu.key,
                "uuid": gpu.uuid,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "command": command,
                "since": time.time(),
            }
        )
        + "\n"
    )
    with contextlib.suppress(OSError):  # a read-only lock file still locks; only the note is lost
        os.ftruncate(fd, 0)
        os.pwrite(fd, line.encode("utf-8", "backslashreplace"), 0)


def _busy(
    text: str,
    inventory: Inventory,
    wanted: tuple[GpuInfo, ...],
    exact: bool,
    held: dict[str, Holder],
    directory: str,
    waited: float,
) -> ReservationError:
    now = time.time()
    considered = wanted if exact else inventory.gpus
    taken = [held[g.key] for g in considered if g.key in held]
    free = len(considered) - len(taken)
    shown = "; ".join(h.describe(now) for h in taken[:8]) or "none"
    if len(taken) > 8:
        shown += f"; and {len(taken) - 8} more"
    scope = f"GPU(s) {','.join(g.key for g in wanted)} asked for" if exact else "GPU(s)"
    return ReservationError(
        f"reserve {text!r}: {free} of {len(considered)} {scope} free in {_dir_words(directory, quote=False)} "
        f"(waited {waited:.1f} s); held: {shown}.",
        hint=_HINT,
    )
