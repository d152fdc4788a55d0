"""The processes on each GPU: pid, kind and GPU memory from NVML; user and command from ``/proc``.

:class:`GpuProcess` is a frozen record; :func:`describe` is the one place that
reads ``/proc``. It reads a process's ``status`` (its real user id) and
``cmdline`` (its command), never its ``environ``: a command is printed, an
environment never is. A process this user may not inspect (another PID
namespace, ``hidepid``, or gone since NVML listed it) keeps what NVML said, with
``user`` and ``command`` ``None``.

>>> p = GpuProcess(pid=4242, kind="C", gpu_memory=2 << 30, user="ana", command="python train.py")
>>> GpuProcess.from_dict(p.to_dict()) == p
True
>>> command_text(b"python\\0train.py\\0--lr\\x001e-3\\0")
'python train.py --lr 1e-3'
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tfdevices.core.errors import InventoryFileError
from tfdevices.core.json_records import Check, Rules, load
from tfdevices.core.record_class import asdict, record

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the listing path
if TYPE_CHECKING:
    from typing import Any


KINDS = ("C", "G", "C+G")
MAX_COMMAND = 1024
"""The most characters of a command kept (``ps`` shows as much)."""
PROC_ROOT = "/proc"
"""Where :func:`describe` reads by default (tests point it at a directory made of files)."""
_READ = 4096
_HINT = "regenerate it with 'tfdevices list --json'."


@record
class GpuProcess:
    """One process on a GPU.

    Attributes:
        pid: its process id.
        kind: ``"C"`` (compute), ``"G"`` (graphics) or ``"C+G"``, as ``nvidia-smi`` shows it.
        gpu_memory: the GPU memory it holds, in bytes (``None`` where NVML cannot say).
        user: its owner's name (``None`` where ``/proc`` does not show it).
        command: its command line (``None`` where ``/proc`` does not show it).
    """

    pid: int
    kind: str = "C"
    gpu_memory: int | None = None
    user: str | None = None
    command: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The process as plain JSON values."""
        return asdict(self)

    json_rules = Rules(
        entry="a process",
        hint=_HINT,
        error=InventoryFileError,
        checks={
            "pid": Check(low=0, high=1 << 32),
            "gpu_memory": Check(low=0, high=1 << 64),
            "kind": Check(choices=KINDS, noun="kinds"),
            "user": Check(max_text=MAX_COMMAND),
            "command": Check(max_text=MAX_COMMAND),
        },
    )

    @classmethod
    def from_dict(cls, data: object, *, where: str = "process") -> GpuProcess:
        """Reads :meth:`to_dict` output, checking every field (:func:`tfdevices.core.json_records.load`).

        Raises:
            InventoryFileError: a field is missing, unknown or of the wrong type.
        """
        loaded: GpuProcess = load(cls, data, where=where)
        return loaded


def command_text(raw: bytes) -> str | None:
    """A ``/proc/PID/cmdline`` as one printable line: arguments joined by spaces, control
    characters escaped, at most :data:`MAX_COMMAND` characters (``None`` when empty).

    >>> command_text(b"sh\\0-c\\0echo\\x1b[2J\\0")
    'sh -c echo\\\\x1b[2J'
    """
    args = [a for a in raw.split(b"\0") if a]
    if not args:
        return None
    text = " ".join(a.decode("utf-8", "backslashreplace") for a in args)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= MAX_COMMAND else text[: MAX_COMMAND - 3] + "..."


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read(_READ)
    except OSError:
        return None


def _uid(status: bytes | None) -> int | None:
    for line in (status or b"").splitlines():
        if line.startswith(b"Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


def user_name(uid: int, names: dict[int, str | None] | None = None) -> str:
    """The login name of ``uid``, or the number where the password database has none."""
    if names is not None and uid in names:
        return names[uid] or str(uid)
    try:
        import pwd  # noqa: PLC0415 (lazy: only to name a user)

        name = pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        name = str(uid)
    if names is not None:
        names[uid] = name
    return name


def describe(pids: Iterable[int], *, proc: str | None = None) -> dict[int, tuple[str | None, str | None]]:
    """Each pid's (user, command) from ``proc``; ``(None, None)`` for a process it cannot see.

    Args:
        pids: the processes.
        proc: the proc file system's root (default :data:`PROC_ROOT`).

    Returns:
        pid -> (user name, command line). The command is ``cmdline``, or ``[comm]``
        for a process with an empty one (a kernel thread or a zombie); its environment
        is never read.
    """
    proc = PROC_ROOT if proc is None else proc
    names: dict[int, str | None] = {}
    found: dict[int, tuple[str | None, str | None]] = {}
    for pid in dict.fromkeys(pids):
        base = os.path.join(proc, str(int(pid)))
        uid = _uid(_read(os.path.join(base, "status")))
        command = command_text(_read(os.path.join(base, "cmdline")) or b"")
        if command is None:
            comm = command_text((_read(os.path.join(base, "comm")) or b"").strip())
            command = f"[{comm}]" if comm else None
        found[pid] = (None if uid is None else user_name(uid, names), command)
    return found
