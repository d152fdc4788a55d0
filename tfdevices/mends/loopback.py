"""Mend ``loopback``: keeps each launched worker's TensorFlow server on the address the launcher asks.

TensorFlow cannot be told where its gRPC server listens: ``GrpcServer::Init``
(``tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc``) always asks gRPC for
``"0.0.0.0:" + port``, whatever host ``TF_CONFIG`` names; no ``ServerDef`` or
``ConfigProto`` field and no environment variable changes the host (``TF_GRPC_REUSE_PORT``
and ``TF_GRPC_DEFAULT_OPTIONS`` are about ports and client channels). gRPC makes that
wildcard a dual-stack ``[::]:port`` socket: every interface of the machine. TensorFlow's
distributed runtime has no authentication, so whoever reaches that port can run any
graph in the worker.

``tfdevices launch`` tells each worker where its server may listen in ``TFDEVICES_LISTEN``
(``127.0.0.1:PORT`` for a one-machine job, the node's own address for a job over several
machines, ``all:PORT`` for ``--listen all``; :func:`parse_listen`). The way taken needs no
privileges and changes nothing else: in the worker, once ``tensorflow`` is imported, the
``bind`` entries of TensorFlow's own libraries' GOT (the table through which a shared
library calls libc) point to a wrapper that turns a wildcard bind *of that one port* into
the asked address (``::ffff:a.b.c.d`` on a dual-stack IPv6 socket, ``::1`` on an IPv6-only
one for 127.0.0.1) and passes every other bind through. It is this process's own memory;
other libraries and Python's sockets are untouched, and :meth:`Loopback.undo` writes the
saved entries back. Where it cannot apply (another platform, a TensorFlow that does not
call ``bind`` through its GOT) it says so and changes nothing; the listen check
(:mod:`tfdevices.jobs.listen_check`: the worker's own, and the launcher's from outside the worker) then
stops the job if a server listens elsewhere. No TensorFlow import here: the hook
(:func:`~tfdevices.mends.base.when_imported`) waits for the program's own.

Detected: Linux on x86-64 or AArch64, TensorFlow's libraries loaded and calling ``bind``
through their GOT. Off (``TFDEVICES_MENDS=loopback``): the server listens where TensorFlow
puts it (and a launched worker asked to stay local is stopped by its listen check).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import mmap
import os
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any

from tfdevices.core.addresses import address_problem, ipv4_problem, split_address
from tfdevices.core.errors import EnvVarError
from tfdevices.mends.base import (
    Finding,
    Mend,
    MendStatus,
    NotApplicableError,
    needed,
    not_needed,
    register,
    when_imported,
)

LOOPBACK = "127.0.0.1"
#: Where a launched worker's TensorFlow server may listen: ``ADDRESS:PORT`` (IPv4) or ``all:PORT``.
LISTEN_ENV = "TFDEVICES_LISTEN"
ALL = "all"
_LIBRARIES = ("libtensorflow_cc.so", "libtensorflow_framework.so")
_SLOT_TYPES = {62: (6, 7), 183: (1025, 1026)}  # e_machine: (GLOB_DAT, JUMP_SLOT) for x86-64, AArch64
_RTLD_DI_LINKMAP = 2
_PROT = {"r": 1, "w": 2, "x": 4}


@dataclasses.dataclass(frozen=True)
class Listen:
    """Where one worker's TensorFlow server may listen.

    Attributes:
        host: an IPv4 address, or ``None`` for every interface (``--listen all``).
        port: the worker's own server port (its ``TF_CONFIG`` address).
    """

    host: str | None
    port: int

    @property
    def everywhere(self) -> bool:
        """``--listen all``: every interface, as TensorFlow has it."""
        return self.host is None

    def value(self) -> str:
        """The ``TFDEVICES_LISTEN`` text (:func:`parse_listen` reads it back).

        >>> Listen("127.0.0.1", 8000).value(), Listen(None, 8000).value()
        ('127.0.0.1:8000', 'all:8000')
        """
        return f"{self.host or ALL}:{self.port}"


def parse_listen(value: str, *, source: str = LISTEN_ENV) -> Listen:
    """Reads ``ADDRESS:PORT`` (an IPv4 address) or ``all:PORT`` (pure).

    Args:
        value: the text, e.g. ``"127.0.0.1:41234"``.
        source: what it came from, for the message.

    Returns:
        The :class:`Listen` it names.

    Raises:
        EnvVarError: anything else.

    >>> parse_listen("127.0.0.1:41234")
    Listen(host='127.0.0.1', port=41234)
    >>> parse_listen("all:41234").everywhere
    True
    >>> parse_listen("localhost:1")
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.EnvVarError: TFDEVICES_LISTEN: not ADDRESS:PORT (an IPv4 address) or all:PORT: its host \
is neither all nor an IPv4 address other than 0.0.0.0. HINT: tfdevices launch sets it for each worker (--listen); \
unset it, or give e.g. 127.0.0.1:41234.
    """
    why = address_problem(value, show=False) if len(value) <= 64 else "it is longer than 64 characters"
    host, port = split_address(value) if why is None else ("", 0)
    if why is None and host != ALL and (ipv4_problem(host) is not None or host == "0.0.0.0"):
        why = "its host is neither all nor an IPv4 address other than 0.0.0.0"
    if why is not None:
        raise EnvVarError(
            f"{source}: not ADDRESS:PORT (an IPv4 address) or all:PORT: {why}.",
            hint="tfdevices launch sets it for each worker (--listen); unset it, or give e.g. 127.0.0.1:41234.",
        )
    return Listen(None if host == ALL else host, port)


class Loopback(Mend):
    """Points the ``bind`` GOT entries of TensorFlow's libraries at a wrapper that keeps the worker's own
    server port on the asked address.
    """

    name = "loopback"
    changes = (
        "the GOT entries for bind in libtensorflow_cc.so and libtensorflow_framework.so (this process only): "
        "a wildcard bind of the worker's own server port goes to the address tfdevices launch asked"
    )
    why = (
        "GrpcServer::Init (tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc) always binds "
        "0.0.0.0:port, and TensorFlow's distributed runtime has no authentication"
    )
    detects = "Linux, x86-64 or AArch64 ELF libraries of TensorFlow loaded, calling bind through their GOT"
    hint = (
        "the worker's listen check stops a worker whose server listens elsewhere; "
        "on a network you trust, tfdevices launch --listen all."
    )

    def __init__(self) -> None:
        super().__init__()
        self.target: Listen | None = None
        self._saved: list[tuple[int, int]] = []  # (GOT entry's address, what it held)
        self.rewritten: list[str] = []  # the binds the wrapper moved, in words

    def _check(self) -> Finding:
        if self.target is None:
            return not_needed(f"no listen address asked ({LISTEN_ENV} unset: not a worker of tfdevices launch)")
        if self.target.everywhere:
            return not_needed(f"--listen all: port {self.target.port} listens on every interface, as asked")
        return needed(f"a worker of tfdevices launch asked to listen on {self.target.host}:{self.target.port}")

    def _apply(self) -> str:
        target = self.target
        if target is None or target.host is None:  # _check says why
            raise NotApplicableError("no listen address asked")
        libraries = ", ".join(os.path.basename(p) for p in _confine(self._saved))
        return f"a wildcard bind of port {target.port} goes to {target.host} (bind in {libraries})"

    def _undo(self) -> None:
        while self._saved:
            address, value = self._saved.pop()
            _point(address, value)

    def status(self) -> MendStatus:
        """What it did, with the binds it moved so far (none until TensorFlow's server starts)."""
        status = super().status()
        if not self.rewritten:
            return status
        return dataclasses.replace(status, detail=f"{status.detail}; moved: {', '.join(self.rewritten)}")


MEND = register(Loopback())
_after_import: list[Callable[[], object]] = []
_hooked: list[bool] = []


def confine_when_imported(target: Listen, then: Callable[[], object] | None = None) -> None:
    """Once the program imports ``tensorflow``: keeps its server on ``target`` (the mend, where it is on),
    then calls ``then`` (whether the mend is on or not); at once where ``tensorflow`` was imported already.

    The wait is :func:`~tfdevices.mends.base.when_imported`'s, the one import hook every mend uses: a look-up
    of ``tensorflow`` (``importlib.util.find_spec``, as a mend's detection asks) does not take it.

    Args:
        target: where this worker's server may listen (from ``TFDEVICES_LISTEN``).
        then: called after the mend, e.g. the worker's listen check.
    """
    MEND.target = target
    if then is not None:
        _after_import.append(then)
    if not _hooked or "tensorflow" in sys.modules:  # one hook waits, however many calls before the import
        _hooked.append(True)
        when_imported("tensorflow", _tensorflow_loaded)


def _tensorflow_loaded() -> None:
    try:
        if MEND.enabled():
            MEND.apply()
    except EnvVarError as err:  # a bad TFDEVICES_MENDS must not break the program's import; what follows checks
        logging.getLogger(__name__).warning("tfdevices: %s", err)
    while _after_import:
        _after_import.pop(0)()


def _confine(saved: list[tuple[int, int]]) -> list[str]:
    """Points the ``bind`` GOT entries of the TensorFlow libraries loaded here at the wrapper (which reads the
    mend's target at each bind).

    Args:
        saved: gets each changed entry's address and what it held, for undoing.

    Returns:
        The libraries changed.

    Raises:
        NotApplicableError: why none could be (nothing is left changed).
    """
    done: list[str] = []
    reason = "TensorFlow's libraries are not loaded"
    try:
        for path in _loaded_libraries():
            slots = _bind_slots(path)
            if not slots:
                reason = f"{os.path.basename(path)} does not call bind through its GOT"
                continue
            base = _load_address(path)
            for offset in slots:
                address = base + offset
                saved.append((address, ctypes.c_void_p.from_address(address).value or 0))
                _point(address, _wrapper())
            done.append(path)
    except (OSError, ValueError, AttributeError, struct.error) as err:
        while saved:
            _point(*saved.pop())
        raise NotApplicableError(f"{type(err).__name__}: {err}") from None
    if not done:
        raise NotApplicableError(reason)
    return done


def _loaded_libraries() -> list[str]:
    found: dict[str, None] = {}
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and os.path.basename(parts[5].strip()).startswith(_LIBRARIES):
                found[parts[5].strip()] = None
    return list(found)


def _bind_slots(path: str) -> list[int]:
    """The offsets (from the load address) of ``path``'s GOT entries for libc's ``bind``."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as elf:
        if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:  # 64-bit, little-endian
            raise ValueError("not a 64-bit little-endian ELF file")
        types = _SLOT_TYPES.get(struct.unpack_from("<H", elf, 18)[0])
        if types is None:
            raise ValueError("not x86-64 or AArch64")
        (shoff,) = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
        slots = []
        for rela in (s for s in sections if s[1] == 4):  # SHT_RELA, against a symbol table
            symtab = sections[rela[6]]
            strtab = sections[symtab[6]]
            for index in _symbols_named(elf, symtab, strtab, b"bind"):
                for kind in types:
                    slots += _aligned(
                        elf, struct.pack("<Q", (index << 32) | kind), rela[4] + 8, rela[4] + rela[5], 24, back=8
                    )
        return slots


def _symbols_named(elf: Any, symtab: tuple[int, ...], strtab: tuple[int, ...], name: bytes) -> list[int]:
    """Indices of the undefined symbols called ``name`` (names may share their tails in the string table)."""
    indices, start, end = [], strtab[4], strtab[4] + strtab[5]
    at = elf.find(name + b"\0", start, end)
    while at != -1:
        for entry in _aligned(elf, struct.pack("<I", at - start), symtab[4], symtab[4] + symtab[5], 24):
            if struct.unpack_from("<H", elf, symtab[4] + entry + 6)[0] == 0:  # st_shndx: undefined
                indices.append(entry // 24)
        at = elf.find(name + b"\0", at + 1, end)
    return indices


def _aligned(elf: Any, pattern: bytes, start: int, end: int, size: int, back: int = 0) -> list[int]:
    """Where ``pattern`` begins a ``size``-byte entry (``back`` bytes into it) in ``elf[start - back:end]``;
    offsets from the table's start, or the entry's first field (r_offset) for relocations.
    """
    found, at, table = [], elf.find(pattern, start, end), start - back
    while at != -1:
        if (at - start) % size == 0:
            found.append(struct.unpack_from("<Q", elf, at - back)[0] if back else at - table)
        at = elf.find(pattern, at + 1, end)
    return found


class _LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_size_t)]


def _load_address(path: str) -> int:
    libc = ctypes.CDLL(None)
    handle = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)._handle
    link = ctypes.POINTER(_LinkMap)()
    if libc.dlinfo(ctypes.c_void_p(handle), _RTLD_DI_LINKMAP, ctypes.byref(link)) != 0:
        raise OSError(f"dlinfo failed for {os.path.basename(path)}")
    return int(link.contents.l_addr)


def _point(address: int, function: int) -> None:
    """Writes ``function`` into the GOT entry at ``address`` (a read-only page is opened and closed again)."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = address & ~(mmap.PAGESIZE - 1)
    prot = _protection(address)
    if not prot & _PROT["w"] and libc.mprotect(
        ctypes.c_void_p(page), ctypes.c_size_t(mmap.PAGESIZE), prot | _PROT["w"]
    ):
        raise OSError(ctypes.get_errno(), "mprotect")
    ctypes.c_void_p.from_address(address).value = function
    if not prot & _PROT["w"]:
        libc.mprotect(ctypes.c_void_p(page), ctypes.c_size_t(mmap.PAGESIZE), prot)


def _protection(address: int) -> int:
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            span, perms = line.split()[:2]
            low, high = (int(x, 16) for x in span.split("-"))
            if low <= address < high:
                return sum(bit for flag, bit in _PROT.items() if flag in perms)
    raise OSError(f"address {address:#x} is not mapped")


_BIND = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, use_errno=True)
_hooks: list[Any] = []  # the wrapper must live as long as the process


def _wrapper() -> int:
    """The address of the ``bind`` wrapper (made once; it reads the mend's target at each call)."""
    if not _hooks:
        libc = ctypes.CDLL(None, use_errno=True)
        real = _BIND(("bind", libc))
        getsockopt = libc.getsockopt

        def bind(fd: int, address: int, length: int) -> int:
            try:
                target = MEND.target
                raw = ctypes.string_at(address, length)
                moved = None if target is None else confined_address(raw, target, lambda: _v6only(getsockopt, fd))
            except Exception:  # noqa: BLE001 (never break a bind: pass it through unchanged)
                moved = None
            if moved is None:
                return int(real(fd, address, length))
            MEND.rewritten.append(f"{_shown_address(raw)} -> {_shown_address(moved)}")
            return int(real(fd, ctypes.cast(ctypes.create_string_buffer(moved, length), ctypes.c_void_p), length))

        _hooks.extend([real, _BIND(bind)])
    return int(ctypes.cast(_hooks[1], ctypes.c_void_p).value or 0)


def confined_address(raw: bytes, target: Listen, v6only: Callable[[], bool] = lambda: False) -> bytes | None:
    """A ``sockaddr`` binding the wildcard on ``target``'s port, moved to ``target``'s host; ``None`` when
    it binds another port, names a host already, or cannot be moved (an IPv6-only socket, a host other
    than 127.0.0.1) (pure).

    Args:
        raw: the ``sockaddr_in`` or ``sockaddr_in6`` passed to ``bind``.
        target: where the worker's server may listen.
        v6only: whether the socket is IPv6-only (asked only for an IPv6 wildcard).

    >>> wild = struct.pack("=HH4s8x", socket.AF_INET, socket.htons(8000), bytes(4))
    >>> socket.inet_ntoa(confined_address(wild, Listen("127.0.0.1", 8000))[4:8])
    '127.0.0.1'
    >>> confined_address(wild, Listen("127.0.0.1", 8001)) is None  # another port
    True
    """
    if target.host is None or len(raw) < 8:
        return None
    (family,) = struct.unpack_from("=H", raw)
    (port,) = struct.unpack_from("!H", raw, 2)
    if port != target.port:
        return None
    if family == socket.AF_INET and raw[4:8] == bytes(4):
        return raw[:4] + socket.inet_aton(target.host) + raw[8:]
    if family == socket.AF_INET6 and len(raw) >= 24 and raw[8:24] == bytes(16):
        if not v6only():
            host = f"::ffff:{target.host}"
        elif target.host == LOOPBACK:
            host = "::1"
        else:
            return None  # an IPv6-only socket cannot hold an IPv4 address: the listen check sees it
        return raw[:8] + socket.inet_pton(socket.AF_INET6, host) + raw[24:]
    return None


def _shown_address(raw: bytes) -> str:
    (family,) = struct.unpack_from("=H", raw)
    (port,) = struct.unpack_from("!H", raw, 2)
    if family == socket.AF_INET:
        return f"{socket.inet_ntoa(raw[4:8])}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, raw[8:24])}]:{port}"


def _v6only(getsockopt: Any, fd: int) -> bool:
    value, size = ctypes.c_int(0), ctypes.c_uint32(ctypes.sizeof(ctypes.c_int))
    getsockopt(fd, socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, ctypes.byref(value), ctypes.byref(size))
    return bool(value.value)
