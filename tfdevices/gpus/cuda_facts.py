"""What decides whether this TensorFlow can use this machine's GPUs, read without starting TensorFlow.

:func:`gather` is the one effectful step: it reads the platform, the installed TensorFlow distributions and
their build info (``tensorflow/python/platform/build_info.py``, read as a file, never imported), the CUDA wheels,
the masks, the device nodes under ``root`` (``/dev/nvidia*``, ``/dev/dxg``, ``/proc/driver/nvidia/version``),
NVML, and where each library TensorFlow loads would come from; then loads the driver and those libraries in a
fresh process (:mod:`tfdevices.gpus.cuda_probe`). It returns a frozen :class:`CudaFacts`, which
:mod:`tfdevices.gpus.cuda_check` reads into findings; tests build the record (or plant a root, a site
folder, a fake NVML) to plant each cause.

Libraries are looked for as the dynamic loader looks for them when TensorFlow asks
(:mod:`tfdevices.gpus.cuda_libraries`). Every read is bounded. The record holds the masks' values to judge
them; nothing made from it prints one.

>>> parse_build_info("build_info = {'is_cuda_build': True, 'cuda_version': '12.5.1'}").cuda_version
'12.5.1'
"""

from __future__ import annotations

import dataclasses
import os
import sys

from tfdevices.gpus import cuda_libraries as libs, nvml
from tfdevices.gpus.cuda_libraries import Found
from tfdevices.gpus.gpuinfo import GpuInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any


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
# TensorFlow's libraries that load CUDA's: libtensorflow_cc's run path names cusolver's wheel, the framework's the rest
_LOADERS = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2")
_MAX_TEXT = 1 << 16  # build_info.py, METADATA lines, /proc files: the most read of each
_MAX_NODES = 256


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
class TfInstall:
    """The installed TensorFlow, from its distributions' metadata and files.

    Attributes:
        distributions: ``(name, version)`` of each distribution that installs ``tensorflow``.
        build: its build info; ``None`` where it cannot be read.
        requires: the ``tensorflow`` distribution's ``Requires-Dist`` lines.
        runpath: the folders the run paths of ``libtensorflow_framework.so.2`` and ``libtensorflow_cc.so.2`` name
            (``$ORIGIN`` resolved), in that order.
        site: the folder the distribution is installed in (``site-packages``).
    """

    distributions: tuple[tuple[str, str], ...] = ()
    build: BuildInfo | None = None
    requires: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    site: str | None = None


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
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
        libraries: each of :data:`~tfdevices.gpus.cuda_libraries.START_LIBRARIES`.
        later: each of :data:`~tfdevices.gpus.cuda_libraries.LATER_LIBRARIES`.
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
    cache = (libs.loader_cache(machine) if root == "/" else {}) if loader_cache is None else loader_cache
    facts = CudaFacts(
        system=name,
        machine=machine,
        tensorflow=tf,
        wheels=_wheels(paths),
        cu13_folder=any(os.path.isdir(os.path.join(p, "nvidia", "cu13", "lib")) for p in _paths(paths)),
        nvml_driver=snap.driver_version,
        nvml_cuda=snap.cuda_driver_version,
        nvml_reason=snap.reason,
        gpus=tuple(d.gpu for d in snap.devices) if gpus is None else tuple(gpus),
        **_machine(root),
        **_environment(env),
        **_libraries(libs.loader_order(env, tf.runpath, tf.site, cache, root, machine), tf, root),
    )
    return _probed(facts, env) if probe else facts


def _paths(paths: Sequence[str] | None) -> list[str]:
    return list(sys.path if paths is None else paths)


def _machine(root: str) -> dict[str, Any]:
    """The facts ``root``'s ``/dev`` and ``/proc`` hold."""
    return {
        "wsl": _wsl(root),
        "device_nodes": _nodes(root),
        "dxg": os.path.exists(os.path.join(root, "dev", "dxg")),
        "proc_driver": _first_line(os.path.join(root, "proc", "driver", "nvidia", "version")),
    }


def _environment(env: Mapping[str, str]) -> dict[str, Any]:
    """The variables judged (their values stay in the record, never in a line)."""
    return {
        "cuda_visible": env.get("CUDA_VISIBLE_DEVICES"),
        "cuda_order": env.get("CUDA_DEVICE_ORDER"),
        "nvidia_visible": env.get("NVIDIA_VISIBLE_DEVICES"),
        "cache_disabled": env.get("CUDA_CACHE_DISABLE", "").strip() == "1",
        "cache_maxsize": _whole(env.get("CUDA_CACHE_MAXSIZE")),
    }


def _libraries(folders: Sequence[tuple[str, str]], tf: TfInstall, root: str) -> dict[str, Any]:
    """Where the loader finds the driver and each library, for this TensorFlow's CUDA and cuDNN."""
    cuda_major = _major(tf.build.cuda_version if tf.build else None) or 12
    cudnn_major = _major(tf.build.cudnn_version if tf.build else None) or 9
    names = libs.sonames(cuda_major, cudnn_major)
    found = {lib: libs.search(names[lib], folders, name=lib, site=tf.site, root=root) for lib in names}
    return {
        "driver": Driver(libs.search("libcuda.so.1", folders, name="cuda", site=tf.site, root=root)),
        "libraries": tuple(found[lib] for lib in libs.START_LIBRARIES),
        "later": tuple(found[lib] for lib in libs.LATER_LIBRARIES),
    }


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
        return dataclasses.replace(facts, driver=Driver(dataclasses.replace(found, error=error)))
    said = dict(answer.get("libraries", ()))

    def loaded(f: Found) -> Found:
        error = said.get(f.name)
        return f if not error else dataclasses.replace(f, error=libs.scrub(error, f))

    d = answer.get("driver") or {}
    driver = Driver(
        dataclasses.replace(found, error=libs.scrub(d["error"], found) if d.get("error") else None),
        _whole(d.get("cu_init")),
        _whole(d.get("version")),
        _whole(d.get("count")),
    )
    return dataclasses.replace(
        facts,
        driver=driver,
        libraries=tuple(loaded(f) for f in facts.libraries),
        later=tuple(loaded(f) for f in facts.later),
    )


def read_tensorflow(paths: Sequence[str] | None = None) -> TfInstall:
    """The TensorFlow distributions installed on ``paths`` (default ``sys.path``), read from their metadata folders.

    Names and versions come from the folders' names (``tensorflow-2.21.0.dist-info``), the ``Requires-Dist`` lines
    from the ``tensorflow`` distribution's ``METADATA``, the build info from ``tensorflow/python/platform/
    build_info.py``: all read as text, at most 64 KiB each; TensorFlow is not imported.
    """
    installed = _installed(paths)
    dists = [(name, installed[name]) for name in TF_DISTRIBUTIONS if name in installed]
    if not dists:
        return TfInstall()
    _, folder = dict(dists).get("tensorflow") or dists[0][1]
    site = os.path.dirname(folder)
    build = _read_build_info(os.path.join(site, "tensorflow", "python", "platform", "build_info.py"))
    runpath = tuple(
        os.path.normpath(p.replace("${ORIGIN}", "$ORIGIN").replace("$ORIGIN", os.path.dirname(lib)))
        for lib in (os.path.join(site, "tensorflow", name) for name in _LOADERS)
        for p in libs.elf_runpath(lib)
    )
    if not runpath:  # its libraries unreadable (or not there): the wheel folders TensorFlow 2.21's run paths name
        runpath = libs.wheel_runpath(site)
    metadata = _head(os.path.join(folder, "METADATA")) or _head(os.path.join(folder, "PKG-INFO")) or ""
    requires = [
        line[len("Requires-Dist:") :].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    return TfInstall(
        distributions=tuple((name, v) for name, (v, _) in dists),
        build=build,
        requires=tuple(requires[:256]),
        runpath=tuple(dict.fromkeys(runpath)),
        site=site,
    )


def _installed(paths: Sequence[str] | None) -> dict[str, tuple[str, str]]:
    """Each distribution on ``paths``: its normalized name -> (version, metadata folder), the first found of a name
    (as an import finds the first), read from the folders' names alone (no ``METADATA`` parsed: 300 of them cost
    about 0.2 s here).
    """
    found: dict[str, tuple[str, str]] = {}
    for path in _paths(paths)[:256]:
        try:
            entries = os.listdir(path or ".")
        except OSError:
            continue
        for entry in sorted(entries)[:10_000]:
            stem = entry[: -len(".dist-info")] if entry.endswith(".dist-info") else None
            if stem is None and entry.endswith(".egg-info"):
                stem = entry[: -len(".egg-info")]
            if not stem:
                continue
            name, _, version = stem.partition("-")
            key = _norm(name)
            if key not in found and len(found) < 10_000:
                found[key] = ((version.split("-")[0] or "?")[:64], os.path.join(path or ".", entry))
    return found


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
    """``(name, version)`` of each ``nvidia-*`` distribution but ``nvidia-ml-py`` (at most 128)."""
    found = _installed(paths)
    wheels = sorted((n, v) for n, (v, _) in found.items() if n.startswith("nvidia-") and n != "nvidia-ml-py")
    return tuple(wheels[:128])


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
