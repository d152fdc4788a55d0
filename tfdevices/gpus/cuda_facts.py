"""What decides whether this TensorFlow can use this machine's GPUs, read without starting TensorFlow.

:func:`gather` is the one effectful step: it reads the platform, the installed TensorFlow distributions and
their build info (``tensorflow/python/platform/build_info.py``, read as a file, never imported), the CUDA wheels,
the masks, the device nodes under ``root`` (``/dev/nvidia*``, ``/dev/dxg``, ``/proc/driver/nvidia/version``),
NVML, and where each library TensorFlow loads would come from; then loads the driver and those libraries in a
fresh process (:mod:`tfdevices.gpus.cuda_probe`). It returns a frozen :class:`CudaFacts`, which
:mod:`tfdevices.gpus.cuda_check` reads into findings; tests build the record (or plant a root, a site
folder, a fake NVML) to plant each cause.

Libraries are looked for as the dynamic loader looks for them when TensorFlow's ``libtensorflow_framework.so.2``
(whose ``DT_RUNPATH`` leads to the ``nvidia-*-cu12`` wheels) asks for them: ``LD_LIBRARY_PATH`` first, then that
run path, the loader's cache (``ldconfig -p``), then the system folders (``man ld.so``). Every read is bounded.

The record holds the masks' values to judge them; nothing made from it prints one.

>>> search("libcuda.so.1", [("/a", "LD_LIBRARY_PATH's entry 1"), ("/b", "the loader's cache")],
...        exists=lambda path: path.startswith("/b/")).real
'/b/libcuda.so.1'
"""

from __future__ import annotations

import os
import sys

from tfdevices.core.records import record, replace
from tfdevices.gpus import nvml
from tfdevices.gpus.gpuinfo import GpuInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "TF_DISTRIBUTIONS",
    "START_LIBRARIES",
    "LATER_LIBRARIES",
    "BuildInfo",
    "TfInstall",
    "Found",
    "Driver",
    "CudaFacts",
    "gather",
    "read_tensorflow",
    "parse_build_info",
    "sonames",
    "search",
    "elf_runpath",
    "wheel_runpath",
]

TF_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tensorflow-macos",
    "tensorflow-aarch64",
    "intel-tensorflow",
    "tf-nightly",
    "tf-nightly-cpu",
)
"""The distributions that install the ``tensorflow`` package (several at once overwrite each other's files)."""
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
_MAX_TEXT = 1 << 16  # build_info.py, METADATA lines, /proc files: the most read of each
_MAX_NODES = 256


@record
class BuildInfo:
    """What TensorFlow's ``build_info.py`` says (``tf.sysconfig.get_build_info()``, without importing TensorFlow).

    Attributes:
        is_cuda_build: a CUDA build.
        cuda_version: ``"12.5.1"``; ``None`` in a CPU build.
        cudnn_version: ``"9"``.
        capabilities: ``("sm_60", ..., "compute_90")``: the GPU code it holds (``sm_``) and its PTX (``compute_``).
    """

    is_cuda_build: bool
    cuda_version: str | None = None
    cudnn_version: str | None = None
    capabilities: tuple[str, ...] = ()


@record
class TfInstall:
    """The installed TensorFlow, from its distributions' metadata and files.

    Attributes:
        distributions: ``(name, version)`` of each distribution that installs ``tensorflow``.
        build: its build info; ``None`` where it cannot be read.
        requires: the ``tensorflow`` distribution's ``Requires-Dist`` lines.
        runpath: the folders ``libtensorflow_framework.so.2``'s run path names (``$ORIGIN`` resolved).
        site: the folder the distribution is installed in (``site-packages``).
    """

    distributions: tuple[tuple[str, str], ...] = ()
    build: BuildInfo | None = None
    requires: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    site: str | None = None


@record
class Found:
    """Where one library would be loaded from, and what loading it said.

    Attributes:
        name: ``"cudnn"``.
        soname: ``"libcudnn.so.9"``.
        real: the file the loader would open (``None``: found nowhere); never printed as is.
        source: where it was found, in words that hold no environment value (``"LD_LIBRARY_PATH's entry 1"``,
            ``"TensorFlow's run path (nvidia/cudnn/lib)"``, ``"the loader's cache"``, ``"a system folder"``).
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


@record
class Driver:
    """``libcuda.so.1`` as the probe found it.

    Attributes:
        found: where it is (:class:`Found`; ``error`` set where it would not load).
        cu_init: ``cuInit(0)``'s code (0: started; 100: no device; 803: driver and library disagree ...).
        version: ``cuDriverGetVersion``: the driver's CUDA version as CUDA writes it (``13000``).
        count: ``cuDeviceGetCount`` after a good ``cuInit``.
    """

    found: Found
    cu_init: int | None = None
    version: int | None = None
    count: int | None = None


@record
class CudaFacts:
    """Everything :mod:`tfdevices.gpus.cuda_check` judges; gathered once by :func:`gather`.

    Attributes:
        system: ``platform.system()`` (``"Linux"``, ``"Windows"``, ``"Darwin"``).
        machine: ``"x86_64"``, ``"aarch64"``.
        wsl: Linux under WSL 2.
        tensorflow: the installed TensorFlow.
        wheels: ``(name, version)`` of each installed ``nvidia-*`` distribution (``nvidia-ml-py`` left out).
        cu13_folder: the CUDA 13 wheels' shared folder (``nvidia/cu13/lib``) exists.
        cuda_visible: ``CUDA_VISIBLE_DEVICES``'s value (``None``: unset); judged, never printed.
        cuda_order: ``CUDA_DEVICE_ORDER``'s value; judged, never printed.
        nvidia_visible: ``NVIDIA_VISIBLE_DEVICES``'s value (a container's); judged, never printed.
        device_nodes: the ``nvidia*`` names in ``/dev`` (``nvidia0``, ``nvidiactl``, ``nvidia-uvm`` ...).
        dxg: ``/dev/dxg`` exists (WSL 2's GPU).
        proc_driver: the first line of ``/proc/driver/nvidia/version`` (``None``: no such file).
        nvml_driver: NVML's driver version.
        nvml_cuda: NVML's CUDA version of the driver (``13000``).
        nvml_reason: why NVML listed no GPU.
        gpus: the GPUs to judge (NVML's, or those selected).
        driver: ``libcuda.so.1``; ``None`` where not probed.
        libraries: each of :data:`START_LIBRARIES`.
        later: each of :data:`LATER_LIBRARIES`.
        cache_disabled: ``CUDA_CACHE_DISABLE=1``: the driver keeps no PTX it compiled.
        cache_maxsize: ``CUDA_CACHE_MAXSIZE`` in bytes (``None``: unset or not a number).
    """

    system: str
    machine: str
    wsl: bool = False
    tensorflow: TfInstall = TfInstall()
    wheels: tuple[tuple[str, str], ...] = ()
    cu13_folder: bool = False
    cuda_visible: str | None = None
    cuda_order: str | None = None
    nvidia_visible: str | None = None
    device_nodes: tuple[str, ...] = ()
    dxg: bool = False
    proc_driver: str | None = None
    nvml_driver: str | None = None
    nvml_cuda: int | None = None
    nvml_reason: str | None = None
    gpus: tuple[GpuInfo, ...] = ()
    driver: Driver | None = None
    libraries: tuple[Found, ...] = ()
    later: tuple[Found, ...] = ()
    cache_disabled: bool = False
    cache_maxsize: int | None = None


def gather(
    *,
    env: Mapping[str, str] | None = None,
    root: str = "/",
    paths: Sequence[str] | None = None,
    snapshot: nvml.NvmlSnapshot | None = None,
    gpus: Sequence[GpuInfo] | None = None,
    tensorflow: TfInstall | None = None,
    loader_cache: Mapping[str, str] | None = None,
    system: tuple[str, str] | None = None,
    probe: bool = True,
) -> CudaFacts:
    """Reads every fact :mod:`tfdevices.gpus.cuda_check` judges; TensorFlow is neither imported nor started.

    Args:
        env: the environment (default ``os.environ``); the probe runs with it.
        root: where ``/dev``, ``/proc`` and the system library folders are (tests plant a fake one).
        paths: where distributions are looked for (default ``sys.path``).
        snapshot: NVML's answer (default: read now, without sensors).
        gpus: the GPUs to judge (default: the snapshot's).
        tensorflow: the TensorFlow to judge (default: read from ``paths``); the GPU check script passes
            TensorFlow 2.21's, kept in the repository, on a machine without it.
        loader_cache: soname -> path, the loader's cache (default: ``ldconfig -p`` where ``root`` is ``/``).
        system: ``(platform.system(), platform.machine())`` (default: this machine's).
        probe: load the driver and the libraries in a fresh process (``False``: where they are only).

    Returns:
        A :class:`CudaFacts`.
    """
    import platform  # noqa: PLC0415 (stdlib, at use: `import tfdevices` stays light)

    env = os.environ if env is None else env
    name, machine = system or (platform.system(), platform.machine())
    tf = read_tensorflow(paths) if tensorflow is None else tensorflow
    snap = nvml.snapshot(sensors=False) if snapshot is None else snapshot
    chosen = tuple(d.gpu for d in snap.devices) if gpus is None else tuple(gpus)
    wheels = _wheels(paths)
    cache = (_loader_cache(machine) if root == "/" else {}) if loader_cache is None else loader_cache
    folders = _search_folders(env, tf, cache, root, machine)
    cuda_major = _major(tf.build.cuda_version if tf.build else None) or 12
    cudnn_major = _major(tf.build.cudnn_version if tf.build else None) or 9
    names = sonames(cuda_major, cudnn_major)
    found = {lib: search(names[lib], folders, name=lib, site=tf.site, root=root) for lib in names}
    driver = search("libcuda.so.1", folders, name="cuda", site=tf.site, root=root)
    facts = CudaFacts(
        system=name,
        machine=machine,
        wsl=_wsl(root),
        tensorflow=tf,
        wheels=wheels,
        cu13_folder=any(
            os.path.isdir(os.path.join(p, "nvidia", "cu13", "lib")) for p in (sys.path if paths is None else paths)
        ),
        cuda_visible=env.get("CUDA_VISIBLE_DEVICES"),
        cuda_order=env.get("CUDA_DEVICE_ORDER"),
        nvidia_visible=env.get("NVIDIA_VISIBLE_DEVICES"),
        device_nodes=_nodes(root),
        dxg=os.path.exists(os.path.join(root, "dev", "dxg")),
        proc_driver=_first_line(os.path.join(root, "proc", "driver", "nvidia", "version")),
        nvml_driver=snap.driver_version,
        nvml_cuda=snap.cuda_driver_version,
        nvml_reason=snap.reason,
        gpus=chosen,
        driver=Driver(driver),
        libraries=tuple(found[lib] for lib in START_LIBRARIES),
        later=tuple(found[lib] for lib in LATER_LIBRARIES),
        cache_disabled=env.get("CUDA_CACHE_DISABLE", "").strip() == "1",
        cache_maxsize=_whole(env.get("CUDA_CACHE_MAXSIZE")),
    )
    return _probed(facts, env) if probe else facts


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


def _search_folders(
    env: Mapping[str, str], tf: TfInstall, cache: Mapping[str, str], root: str, machine: str
) -> list[tuple[str, str]]:
    """``(folder, source)`` in the loader's order for a library that TensorFlow's run path is on."""
    entries = [e for e in env.get("LD_LIBRARY_PATH", "").split(":")[:64] if e]
    folders = [(e, f"LD_LIBRARY_PATH's entry {n}") for n, e in enumerate(entries, 1)]
    site = tf.site or ""
    for folder in tf.runpath:
        inside = os.path.relpath(folder, site) if site and folder.startswith(site) else "its own folder"
        folders.append((folder, f"TensorFlow's run path ({inside})"))
    folders += [(os.path.dirname(path), "the loader's cache") for path in dict.fromkeys(cache.values())]
    system = _SYSTEM_FOLDERS.get(machine, _SYSTEM_FOLDERS["x86_64"])
    folders += [(os.path.join(root, f.lstrip("/")), "a system folder") for f in system]
    return folders


def _probed(facts: CudaFacts, env: Mapping[str, str]) -> CudaFacts:
    """The facts with what loading the driver and each found library said, in a fresh process."""
    import json  # noqa: PLC0415 (stdlib, at use)
    import subprocess  # noqa: PLC0415

    found = facts.driver.found if facts.driver else Found("cuda", "libcuda.so.1")
    libraries = [f for f in facts.libraries + facts.later if f.real]
    request = {
        "driver": found.real,
        "libraries": [[f.name, f.real] for f in libraries],
    }
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_probe.py")
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-S", script],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=dict(env),
            timeout=120,
        )
        answer = json.loads(proc.stdout.strip().splitlines()[-1][: 1 << 20]) if proc.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        answer = None
    if answer is None:
        error = "the probe process did not answer (it crashed loading these libraries)"
        return replace(facts, driver=Driver(replace(found, error=error)))
    said = dict(answer.get("libraries", ()))

    def loaded(f: Found) -> Found:
        error = said.get(f.name)
        return f if not error else replace(f, error=_scrub(error, f))

    d = answer.get("driver") or {}
    driver = Driver(
        replace(found, error=_scrub(d["error"], found) if d.get("error") else None),
        _whole(d.get("cu_init")),
        _whole(d.get("version")),
        _whole(d.get("count")),
    )
    return replace(
        facts,
        driver=driver,
        libraries=tuple(loaded(f) for f in facts.libraries),
        later=tuple(loaded(f) for f in facts.later),
    )


def _scrub(error: str, found: Found) -> str:
    """The loader's error with the library's own path as printed (an ``LD_LIBRARY_PATH`` folder never shows)."""
    text = str(error)[:1000]
    if found.real and found.shown:
        text = text.replace(found.real, found.shown)
    return " ".join(text.split())


def read_tensorflow(paths: Sequence[str] | None = None) -> TfInstall:
    """The TensorFlow distributions installed on ``paths`` (default ``sys.path``), read from their metadata.

    The build info is read from ``tensorflow/python/platform/build_info.py`` as text; TensorFlow is not imported.
    """
    import importlib.metadata  # noqa: PLC0415 (stdlib, at use)

    dists: list[tuple[tuple[str, str], importlib.metadata.Distribution]] = []
    for dist in importlib.metadata.distributions(path=list(sys.path if paths is None else paths)):
        name = _norm(dist.name or "")
        if name in TF_DISTRIBUTIONS and all(name != d[0] for d, _ in dists):
            dists.append(((name, dist.version or "?"), dist))
    if not dists:
        return TfInstall()
    main = next((d for (n, _), d in dists if n == "tensorflow"), dists[0][1])
    site = str(main.locate_file(""))
    build = _read_build_info(os.path.join(site, "tensorflow", "python", "platform", "build_info.py"))
    framework = os.path.join(site, "tensorflow", "libtensorflow_framework.so.2")
    runpath = tuple(
        os.path.normpath(
            p.replace("$ORIGIN", os.path.dirname(framework)).replace("${ORIGIN}", os.path.dirname(framework))
        )
        for p in elf_runpath(framework)
    )
    if not runpath:  # the library unreadable (or not there): the wheel folders TensorFlow 2.21's run path names
        runpath = wheel_runpath(site)
    return TfInstall(
        distributions=tuple(d for d, _ in dists),
        build=build,
        requires=tuple((main.requires or ())[:256]),
        runpath=tuple(dict.fromkeys(runpath)),
        site=site,
    )


def wheel_runpath(site: str) -> tuple[str, ...]:
    """The CUDA wheels' library folders in ``site`` (``site/nvidia/cudnn/lib`` ...), as TensorFlow's run path has them.

    >>> wheel_runpath("/site")[:2]
    ('/site/nvidia/cublas/lib', '/site/nvidia/cuda_cupti/lib')
    """
    return tuple(os.path.join(site, "nvidia", folder, "lib") for folder in _RUNPATH_FOLDERS)


def _read_build_info(path: str) -> BuildInfo | None:
    text = _head(path)
    return None if text is None else parse_build_info(text)


def parse_build_info(text: str) -> BuildInfo | None:
    """Reads ``build_info.py``'s ``build_info = OrderedDict([...])`` (or ``{...}``) without running it.

    >>> parse_build_info("build_info = collections.OrderedDict([('cuda_version', '12.5.1'), "
    ...                  "('cuda_compute_capabilities', ['sm_80', 'compute_90']), ('is_cuda_build', True)])")
    BuildInfo(is_cuda_build=True, cuda_version='12.5.1', cudnn_version=None, capabilities=('sm_80', 'compute_90'))
    >>> parse_build_info("build_info = collections.OrderedDict([('is_cuda_build', False)])").is_cuda_build
    False
    """
    import ast  # noqa: PLC0415 (stdlib, at use)

    try:
        tree = ast.parse(text[:_MAX_TEXT])
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "build_info" for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and value.args:  # OrderedDict([...])
                value = value.args[0]
            try:
                raw = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
            try:
                info = dict(raw) if isinstance(raw, (list, dict)) else None
            except (TypeError, ValueError):
                info = None
            if info is None:
                return None
            caps = info.get("cuda_compute_capabilities") or ()
            return BuildInfo(
                is_cuda_build=info.get("is_cuda_build") is True,
                cuda_version=_text(info.get("cuda_version")),
                cudnn_version=_text(info.get("cudnn_version")),
                capabilities=tuple(str(c)[:16] for c in list(caps)[:32]) if isinstance(caps, (list, tuple)) else (),
            )
    return None


def _wheels(paths: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    import importlib.metadata  # noqa: PLC0415 (stdlib, at use)

    seen: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=list(sys.path if paths is None else paths)):
        name = _norm(dist.name or "")
        if name.startswith("nvidia-") and name != "nvidia-ml-py" and name not in seen and len(seen) < 128:
            seen[name] = (dist.version or "?")[:64]
    return tuple(sorted(seen.items()))


def _loader_cache(machine: str) -> dict[str, str]:
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


def _nodes(root: str) -> tuple[str, ...]:
    try:
        names = sorted(n for n in os.listdir(os.path.join(root, "dev")) if n.startswith("nvidia"))
    except OSError:
        return ()
    return tuple(names[:_MAX_NODES])


def _wsl(root: str) -> bool:
    line = _first_line(os.path.join(root, "proc", "version")) or ""
    return "microsoft" in line.lower() or os.path.isdir(os.path.join(root, "usr", "lib", "wsl", "lib"))


def _head(path: str, limit: int = _MAX_TEXT) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _first_line(path: str) -> str | None:
    text = _head(path, 4096)
    return None if text is None else (text.splitlines() or [""])[0][:256]


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


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")[:128]


def _major(version: str | None) -> int | None:
    head = (version or "").split(".")[0]
    return int(head) if head.isdigit() and len(head) < 4 else None


def _whole(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) < 1 << 62 else None
    text = str(value).strip() if isinstance(value, str) else ""
    return int(text) if text.isdigit() and len(text) < 19 else None


def _text(value: object) -> str | None:
    return None if value is None else str(value)[:64]
