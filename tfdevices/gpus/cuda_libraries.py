"""Where the dynamic loader finds each library TensorFlow loads, read without loading any.

TensorFlow's ``libtensorflow_framework.so.2`` asks for its CUDA libraries by name (``libcudnn.so.9``); its
``DT_RUNPATH`` leads to the ``nvidia-*-cu12`` wheels. The loader then looks in ``LD_LIBRARY_PATH`` first, that run
path, its cache (``ldconfig -p``), then the system folders (``man ld.so``): :func:`loader_order` lists them and
:func:`search` finds a name in them. A folder ``LD_LIBRARY_PATH`` names is never printed: a :class:`Found` says
``"LD_LIBRARY_PATH's entry 2"``. Every read is bounded.

>>> search("libcuda.so.1", [("/a", "LD_LIBRARY_PATH's entry 1"), ("/b", "the loader's cache")],
...        exists=lambda path: path.startswith("/b/")).real
'/b/libcuda.so.1'
"""

from __future__ import annotations

import dataclasses
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


START_LIBRARIES = ("cudart", "cublas", "cublasLt", "cufft", "cusolver", "cusparse", "cudnn")
"""What TensorFlow loads when it starts on a GPU, in its order (one missing: "Cannot dlopen some GPU libraries")."""
LATER_LIBRARIES = ("nccl", "nvrtc", "cupti")
"""Loaded later: NCCL by multi-GPU strategies, nvrtc by XLA, CUPTI by the profiler (placement capture)."""

# Each library's soname version for a CUDA major version (TensorFlow's dso_loader: lib<name>.so.<version>).
_SONAME = {
    11: {"cudart": "11.0", "cublas": "11", "cublasLt": "11", "cufft": "10", "cusolver": "11", "cusparse": "11",
         "nvrtc": "11.2", "cupti": "11.8"},
    12: {"cudart": "12", "cublas": "12", "cublasLt": "12", "cufft": "11", "cusolver": "11", "cusparse": "12",
         "nvrtc": "12", "cupti": "12"},
    13: {"cudart": "13", "cublas": "13", "cublasLt": "13", "cufft": "12", "cusolver": "12", "cusparse": "12",
         "nvrtc": "13", "cupti": "13"},
}  # fmt: skip
# The wheel folder (site-packages/nvidia/<folder>/lib) each library comes in.
WHEEL_FOLDER = {
    "cudart": "cuda_runtime",
    "cublas": "cublas",
    "cublasLt": "cublas",
    "cufft": "cufft",
    "cusolver": "cusolver",
    "cusparse": "cusparse",
    "cudnn": "cudnn",
    "nccl": "nccl",
    "nvrtc": "cuda_nvrtc",
    "cupti": "cuda_cupti",
}
_RUNPATH_FOLDERS = ("cublas", "cuda_cupti", "cuda_nvcc", "cuda_nvrtc", "cuda_runtime", "cudnn", "cufft", "curand",
                    "cusolver", "cusparse", "nccl", "nvjitlink")  # fmt: skip
_SYSTEM_FOLDERS = {
    "x86_64": ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"),
    "aarch64": ("/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"),
}
_CACHE_ARCH = {"x86_64": "x86-64", "aarch64": "AArch64"}


@dataclasses.dataclass(frozen=True)
class Found:
    """Where one library would be loaded from, and what loading it said.

    Attributes:
        name: ``"cudnn"``.
        soname: ``"libcudnn.so.9"``.
        real: the file the loader would open (``None``: found nowhere); never printed as is.
        source: where it was found, in words that hold no environment value (``"LD_LIBRARY_PATH's entry 1"``,
            ``"TensorFlow's run path"``, ``"the loader's cache"``, ``"a system folder"``).
        shown: the file as printed: a system path, a path in the wheels' folder, or the soname.
        shadows: the sources of the copies found after the one loaded (a system copy ahead of the wheel's).
        error: the loader's error (its paths replaced by :attr:`shown`); ``None``: it loaded, or was not tried.
    """

    name: str
    soname: str
    real: str | None = None
    source: str | None = None
    shown: str | None = None
    shadows: tuple[str, ...] = ()
    error: str | None = None


def sonames(cuda_major: int, cudnn_major: int) -> dict[str, str]:
    """Each library's file name as TensorFlow's loader asks for it.

    >>> sonames(12, 9)["cufft"], sonames(12, 9)["cudnn"], sonames(12, 9)["nccl"]
    ('libcufft.so.11', 'libcudnn.so.9', 'libnccl.so.2')
    """
    versions = _SONAME.get(cuda_major, _SONAME[12])
    out = {lib: f"lib{lib}.so.{versions[lib]}" for lib in versions}
    out.update(cudnn=f"libcudnn.so.{cudnn_major}", nccl="libnccl.so.2")
    return {lib: out[lib] for lib in START_LIBRARIES + LATER_LIBRARIES}


def search(
    soname: str,
    folders: Sequence[tuple[str, str]],
    *,
    name: str = "",
    site: str | None = None,
    root: str = "/",
    exists: Callable[[str], bool] = os.path.isfile,
) -> Found:
    """Where the loader finds ``soname``: the first of ``folders`` (``(folder, source)``, in the loader's order)
    that holds it, and the sources of the later copies it shadows.
    """
    hits = [
        (os.path.join(folder, soname), source) for folder, source in folders if exists(os.path.join(folder, soname))
    ]
    if not hits:
        return Found(name, soname)
    real, source = hits[0]
    later = tuple(dict.fromkeys(s for _, s in hits[1:] if s != source))
    return Found(name, soname, real, source, _shown(real, source, soname, site, root), later)


def _shown(real: str, source: str, soname: str, site: str | None, root: str) -> str:
    """A found file as printed: no path an environment variable gave (``LD_LIBRARY_PATH``'s: the soname only)."""
    if source.startswith("LD_LIBRARY_PATH"):
        return soname
    if site and real.startswith(site.rstrip("/") + "/"):
        return os.path.relpath(real, site)
    return "/" + os.path.relpath(real, root) if root != "/" else real


def loader_order(
    env: Mapping[str, str], runpath: Sequence[str], site: str | None, cache: Mapping[str, str], root: str, machine: str
) -> list[tuple[str, str]]:
    """``(folder, source)`` in the loader's order for a library asked for by an object whose run path is ``runpath``.

    Args:
        env: reads ``LD_LIBRARY_PATH`` (its folders are named by position, never shown).
        runpath: the asking library's run path (TensorFlow's, to the wheels in ``site``).
        site: the folder the wheels are in, to name a run path folder by its place there.
        cache: the loader's cache (:func:`loader_cache`).
        root: where the system folders are.
        machine: ``"x86_64"`` or ``"aarch64"`` (the system folders' names).
    """
    entries = [e for e in env.get("LD_LIBRARY_PATH", "").split(":")[:64] if e]
    folders = [(e, f"LD_LIBRARY_PATH's entry {n}") for n, e in enumerate(entries, 1)]
    folders += [(folder, "TensorFlow's run path") for folder in runpath]
    folders += [(folder, "the loader's cache") for folder in dict.fromkeys(os.path.dirname(p) for p in cache.values())]
    system = _SYSTEM_FOLDERS.get(machine, _SYSTEM_FOLDERS["x86_64"])
    folders += [(os.path.join(root, f.lstrip("/")), "a system folder") for f in system]
    if site:  # a wheel folder no run path names: last (TensorFlow meets those through the libraries it loaded first)
        named = set(runpath)
        folders += [
            (f, f"the wheels' folder ({os.path.relpath(f, site)})") for f in wheel_runpath(site) if f not in named
        ]
    return folders


def scrub(error: str, found: Found) -> str:
    """The loader's error with the library's own path as printed (an ``LD_LIBRARY_PATH`` folder never shows)."""
    text = str(error)[:1000]
    if found.real and found.shown:
        text = text.replace(found.real, found.shown)
    return " ".join(text.split())


def wheel_runpath(site: str) -> tuple[str, ...]:
    """The CUDA wheels' library folders in ``site`` (``site/nvidia/cudnn/lib`` ...), as TensorFlow's run path has them.

    >>> wheel_runpath("/site")[:2]
    ('/site/nvidia/cublas/lib', '/site/nvidia/cuda_cupti/lib')
    """
    return tuple(os.path.join(site, "nvidia", folder, "lib") for folder in _RUNPATH_FOLDERS)


def loader_cache(machine: str) -> dict[str, str]:
    """The loader's cache, soname -> path, from ``ldconfig -p`` (this machine's architecture; empty without one)."""
    import subprocess  # noqa: PLC0415 (stdlib, at use)

    tool = next((t for t in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(t)), None)
    if tool is None:
        return {}
    try:
        out = subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=10, errors="replace").stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    arch = _CACHE_ARCH.get(machine, "")
    cache: dict[str, str] = {}
    for line in out[: 1 << 22].splitlines()[:100_000]:
        name, _, rest = line.strip().partition(" (")
        kind, _, path = rest.partition(") => ")
        if path and (not arch or arch in kind) and name not in cache:
            cache[name] = path
    return cache


def elf_runpath(path: str) -> tuple[str, ...]:
    """The ``DT_RUNPATH`` (else ``DT_RPATH``) folders of a 64-bit little-endian ELF file; ``()`` for anything else.

    >>> elf_runpath("/nonexistent"), elf_runpath(__file__)
    ((), ())
    """
    import struct  # noqa: PLC0415 (stdlib, at use)

    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return ()
            phoff, phentsize, phnum = struct.unpack_from("<Q", head, 32)[0], *struct.unpack_from("<HH", head, 54)
            if phentsize < 56 or phnum > 128:
                return ()
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            loads, dynamic = [], None
            for i in range(phnum):
                kind, _, offset, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
                if kind == 1:
                    loads.append((vaddr, offset, filesz))
                elif kind == 2:
                    dynamic = (offset, min(filesz, 1 << 16))
            if dynamic is None:
                return ()
            f.seek(dynamic[0])
            data = f.read(dynamic[1])
            tags: dict[int, int] = {}
            for i in range(len(data) // 16):
                tag, value = struct.unpack_from("<qQ", data, i * 16)
                if tag == 0:
                    break
                tags.setdefault(tag, value)
            strtab, at = tags.get(5), tags.get(29, tags.get(15))
            if strtab is None or at is None:
                return ()
            base = next((off + strtab - va for va, off, size in loads if va <= strtab < va + size), None)
            if base is None:
                return ()
            f.seek(base + at)
            text = f.read(8192).split(b"\0", 1)[0].decode("utf-8", "replace")
    except (OSError, struct.error, ValueError, OverflowError):
        return ()
    return tuple(p for p in text.split(":")[:128] if p)
