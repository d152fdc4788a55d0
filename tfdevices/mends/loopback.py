"""Mend ``loopback``: keeps the TensorFlow servers of a one-machine job's workers on 127.0.0.1.

TensorFlow cannot be told where its gRPC server listens: ``GrpcServer::Init``
(``tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc``) always asks gRPC for
``"0.0.0.0:" + port``, whatever host ``TF_CONFIG`` names; no ``ServerDef`` or
``ConfigProto`` field and no environment variable changes the host (``TF_GRPC_REUSE_PORT``
and ``TF_GRPC_DEFAULT_OPTIONS`` are about ports and client channels). gRPC makes that
wildcard a dual-stack ``[::]:port`` socket: every interface of the machine. TensorFlow's
distributed runtime has no authentication, so whoever reaches that port can run any
graph in the worker.

The way taken needs no privileges and changes nothing else: in the worker, once
``tensorflow`` is imported, the ``bind`` entries of TensorFlow's own libraries' GOT
(the table through which a shared library calls libc) point to a wrapper that turns a
wildcard address into 127.0.0.1 (``::ffff:127.0.0.1`` on a dual-stack IPv6 socket, ``::1``
on an IPv6-only one) and passes every other address through. It is this process's own
memory; other libraries and Python's sockets are untouched. The launcher's workers run
it from their ``sitecustomize`` (Linux, x86-64 and AArch64). Where it cannot (another
platform, a TensorFlow that does not call ``bind`` through its GOT) it warns once, plainly,
and changes nothing. No TensorFlow import here: the hook waits for the program's own.

Detected: Linux on x86-64 or AArch64, TensorFlow's libraries loaded and calling ``bind``
through their GOT. Off (``TFDEVICES_MENDS=loopback``): the server listens where TensorFlow puts it.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import mmap
import os
import socket
import struct
import sys
from typing import Any

from tfdevices.mends.base import Mend, NotApplicableError, register

LOOPBACK = "127.0.0.1"
_LIBRARIES = ("libtensorflow_cc.so", "libtensorflow_framework.so")
_SLOT_TYPES = {62: (6, 7), 183: (1025, 1026)}  # e_machine: (GLOB_DAT, JUMP_SLOT) for x86-64, AArch64
_RTLD_DI_LINKMAP = 2
_PROT = {"r": 1, "w": 2, "x": 4}

_hooks: list[Any] = []  # the wrapper must live as long as the process
_warned = False


class Loopback(Mend):
    """Points the ``bind`` GOT entries of TensorFlow's libraries at a wrapper that keeps wildcard binds local."""

    name = "loopback"
    changes = "the GOT entries for bind in libtensorflow_cc.so and libtensorflow_framework.so (this process only)"
    why = (
        "GrpcServer::Init (tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc) always binds "
        "0.0.0.0:port, and TensorFlow's distributed runtime has no authentication"
    )
    detects = "Linux, x86-64 or AArch64 ELF libraries of TensorFlow loaded, calling bind through their GOT"

    def _apply(self) -> str:
        done = confine()
        if not done:
            raise NotApplicableError("no TensorFlow library could be changed: its server listens on every interface")
        return f"wildcard binds made {LOOPBACK} in {', '.join(os.path.basename(p) for p in done)}"


MEND = register(Loopback())


def confine_when_imported() -> None:
    """Confines TensorFlow's servers (:func:`confine`) as soon as the program imports ``tensorflow``."""
    if not MEND.enabled():
        return
    if "tensorflow" in sys.modules:
        MEND.apply()
    elif not any(isinstance(f, _TensorFlowImported) for f in sys.meta_path):
        sys.meta_path.insert(0, _TensorFlowImported())


class _TensorFlowImported(importlib.abc.MetaPathFinder):
    """Finds nothing itself: runs :func:`confine` once ``tensorflow``'s package has loaded its libraries."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            MEND.apply()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def confine() -> list[str]:
    """Makes the TensorFlow libraries loaded in this process listen on 127.0.0.1 instead of every interface.

    Returns:
        The libraries changed; empty (after one plain warning on stderr) when none could be.
    """
    done, reason = [], "TensorFlow's libraries are not loaded"
    try:
        for path in _loaded_libraries():
            slots = _bind_slots(path)
            if not slots:
                reason = f"{os.path.basename(path)} does not call bind through its GOT"
                continue
            base = _load_address(path)
            for offset in slots:
                _point(base + offset, _wrapper())
            done.append(path)
    except (OSError, ValueError, AttributeError, struct.error) as err:
        done, reason = [], f"{type(err).__name__}: {err}"
    if not done:
        _warn(reason)
    return done


def _warn(reason: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(
            f"tfdevices: cannot keep this worker's TensorFlow server on {LOOPBACK} ({reason}): it listens on "
            "every interface, and whoever reaches this machine's port can run graphs in this worker. "
            "HINT: keep the machine behind a firewall.",
            file=sys.stderr,
            flush=True,
        )


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


def _wrapper() -> int:
    """The address of the ``bind`` wrapper (made once)."""
    if not _hooks:
        libc = ctypes.CDLL(None, use_errno=True)
        real = _BIND(("bind", libc))
        getsockopt = libc.getsockopt

        def bind(fd: int, address: int, length: int) -> int:
            try:
                raw = loopback_address(ctypes.string_at(address, length), lambda: _v6only(getsockopt, fd))
            except Exception:  # noqa: BLE001 (never break a bind: pass it through unchanged)
                raw = None
            if raw is None:
                return int(real(fd, address, length))
            return int(real(fd, ctypes.cast(ctypes.create_string_buffer(raw, length), ctypes.c_void_p), length))

        _hooks.extend([real, _BIND(bind)])
    return int(ctypes.cast(_hooks[1], ctypes.c_void_p).value or 0)


def loopback_address(raw: bytes, v6only: Any = lambda: False) -> bytes | None:
    """A ``sockaddr`` with its wildcard host made the loopback one; ``None`` when it names a host already.

    >>> a = loopback_address(struct.pack("=HH4s8x", socket.AF_INET, 0x1234, bytes(4)))
    >>> socket.inet_ntoa(a[4:8])
    '127.0.0.1'
    >>> loopback_address(struct.pack("=HH4s8x", socket.AF_INET, 0x1234, socket.inet_aton("10.0.0.5"))) is None
    True
    """
    (family,) = struct.unpack_from("=H", raw)
    if family == socket.AF_INET and len(raw) >= 8 and raw[4:8] == bytes(4):
        return raw[:4] + socket.inet_aton(LOOPBACK) + raw[8:]
    if family == socket.AF_INET6 and len(raw) >= 24 and raw[8:24] == bytes(16):
        host = "::1" if v6only() else f"::ffff:{LOOPBACK}"
        return raw[:8] + socket.inet_pton(socket.AF_INET6, host) + raw[24:]
    return None


def _v6only(getsockopt: Any, fd: int) -> bool:
    value, size = ctypes.c_int(0), ctypes.c_uint32(ctypes.sizeof(ctypes.c_int))
    getsockopt(fd, socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, ctypes.byref(value), ctypes.byref(size))
    return bool(value.value)


__all__ = ["LOOPBACK", "MEND", "Loopback", "confine", "confine_when_imported", "loopback_address"]
