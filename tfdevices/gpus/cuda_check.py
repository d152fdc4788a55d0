"""Can this TensorFlow use these GPUs: one ordered diagnosis, each cause a line with its fix.

Pure: :func:`diagnose` reads a :class:`~tfdevices.gpus.cuda_facts.CudaFacts` (gathered once, without starting
TensorFlow, by :func:`~tfdevices.gpus.cuda_facts.gather`) and returns :class:`Finding` records in the order a
cause stops TensorFlow: the platform, the TensorFlow installed, the masks, the driver's device nodes, the driver's
library, its CUDA version, the CUDA wheels against the ``and-cuda`` pins, each library TensorFlow loads at start,
those it loads later, and each GPU's compute capability against the build's code. ``tfdevices doctor`` prints
every finding; ``configure()`` names the first error as its HINT when NVML sees GPUs that TensorFlow does not list.
:mod:`tfdevices.gpus.cuda_log` maps TensorFlow's own log lines (a verbose start, the last resort) to the same
causes.

A line says what was found, what it means for this TensorFlow, and the fix as a command (``HINT:``); no line holds
an environment variable's value (a mask, a folder ``LD_LIBRARY_PATH`` names): variables are named, not echoed.

>>> from tfdevices.gpus.cuda_facts import BuildInfo, CudaFacts, TfInstall
>>> tf = TfInstall((("tensorflow", "2.21.0"),), BuildInfo(True, "12.5.1", "9", ("sm_80", "compute_90")))
>>> [f.cause for f in diagnose(CudaFacts("Windows", "AMD64", tensorflow=tf))][:1]
['platform']
"""

from __future__ import annotations

import dataclasses

from tfdevices.core.errors import EnvVarError
from tfdevices.gpus.cuda_facts import CudaFacts, TfInstall
from tfdevices.gpus.cuda_libraries import START_LIBRARIES, WHEEL_FOLDER, Found
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.visibility import parse_visible_devices, resolve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


ERROR = "error"
"""TensorFlow lists no GPU, or cannot use one it lists."""
WARNING = "warning"
"""TensorFlow uses the GPU, but a start is slow or a later step fails (XLA, NCCL, the profiler)."""
NOTE = "note"
"""Worth knowing; nothing fails."""

# cuInit's codes (cuda.h) and what each means here.
_CU_INIT = {
    34: ("CUDA_ERROR_STUB_LIBRARY", "the libcuda.so.1 loaded is CUDA's stub, for linking only",
         "take the CUDA stubs folder off LD_LIBRARY_PATH (and out of the loader's configuration)"),
    35: ("CUDA_ERROR_INSUFFICIENT_DRIVER", "the driver is older than its library says",
         "install the NVIDIA driver again (one version of kernel module and libcuda), then reboot"),
    46: ("CUDA_ERROR_DEVICES_UNAVAILABLE", "every GPU is busy in exclusive-process mode, or unavailable",
         "nvidia-smi --query-gpu=index,compute_mode --format=csv; sudo nvidia-smi -c DEFAULT"),
    100: ("CUDA_ERROR_NO_DEVICE", "the driver sees no GPU this process may use (a mask, a container's devices)",
          "nvidia-smi -L; in a container: docker run --gpus all (Kubernetes: a nvidia.com/gpu limit)"),
    304: ("CUDA_ERROR_OPERATING_SYSTEM", "the system refused the driver a resource",
          "dmesg | grep -i nvrm"),
    803: ("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
          ("the kernel module and libcuda.so.1 are different driver versions (a driver updated without a reboot, "
           "or a container's own libcuda)"),
          "reboot (or reload the nvidia modules); in a container, let the NVIDIA runtime mount the host's libcuda"),
    804: ("CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
          "a CUDA forward-compatibility libcuda runs on a GPU that has none",
          "take the cuda-compat folder off LD_LIBRARY_PATH"),
    999: ("CUDA_ERROR_UNKNOWN", "the driver failed to start, most often for want of /dev/nvidia-uvm",
          "sudo nvidia-modprobe -u -c=0 (or reboot after a driver update)"),
}  # fmt: skip
# The newest compute capability each CUDA version's PTX compiler knows (XLA compiles with it).
_CUDA_KNOWS = ((11, 8, (9, 0)), (12, 0, (9, 0)), (12, 8, (12, 0)), (12, 9, (12, 1)), (13, 0, (12, 1)))
# The Linux driver each CUDA version first came with (CUDA's release notes), for the fix.
_DRIVER_FOR = {(11, 8): "520", (12, 0): "525", (12, 2): "535", (12, 4): "550", (12, 5): "555", (12, 6): "560",
               (12, 8): "570", (13, 0): "580"}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Finding:
    """One cause, in the house's error style.

    Attributes:
        cause: a short name (``"driver"``, ``"libraries"``, ``"gpu 0"``); unique in one diagnosis.
        severity: :data:`ERROR`, :data:`WARNING` or :data:`NOTE`.
        found: what was found.
        meaning: what it means for this TensorFlow.
        fix: the fix, as a command where there is one.
    """

    cause: str
    severity: str
    found: str
    meaning: str
    fix: str

    @property
    def line(self) -> str:
        """``"FOUND: MEANING. HINT: FIX"``, one line."""
        return f"{self.found}: {self.meaning}. HINT: {self.fix}"

    def to_dict(self) -> dict[str, str]:
        """The finding for ``--json``."""
        return {"cause": self.cause, "severity": self.severity, "line": self.line}


def diagnose(facts: CudaFacts) -> tuple[Finding, ...]:
    """Every finding, in the order its cause stops TensorFlow (the first error is what to fix first).

    Args:
        facts: what :func:`~tfdevices.gpus.cuda_facts.gather` read.

    Returns:
        The findings; ``()`` where nothing stands between this TensorFlow and these GPUs.
    """
    checks: tuple[Callable[[CudaFacts], list[Finding]], ...] = (
        _platform,
        _tensorflow,
        _masks,
        _device_nodes,
        _libcuda,
        _driver_version,
        _wheels,
        _libraries,
        _later_libraries,
        capability_findings,
    )
    out: list[Finding] = []
    for check in checks:
        out += check(facts)
    return tuple(out)


def rows(facts: CudaFacts, findings: Sequence[Finding]) -> tuple[tuple[str, str], ...]:
    """``(cause, line)`` per finding, for a report's ``cuda`` section; one ``verdict`` row where there is none."""
    if findings:
        return tuple((f.cause, f.line) for f in findings)
    tf = " ".join(facts.tensorflow.distributions[0]) if facts.tensorflow.distributions else "TensorFlow"
    gpus = f"{len(facts.gpus)} GPU(s)" if facts.gpus else "no GPU (NVML: " + (facts.nvml_reason or "none") + ")"
    return (("verdict", f"nothing found that stops {tf} from using the GPUs here; NVML sees {gpus}"),)


def first_cause(findings: Sequence[Finding]) -> Finding | None:
    """The first :data:`ERROR`: why TensorFlow lists no GPU, with its fix."""
    return next((f for f in findings if f.severity == ERROR), None)


def install_command(facts: CudaFacts) -> str:
    """The pip command that installs this TensorFlow's CUDA build and the wheels it pins.

    >>> from tfdevices.gpus.cuda_facts import TfInstall
    >>> install_command(CudaFacts("Linux", "x86_64", tensorflow=TfInstall((("tensorflow", "2.21.0"),))))
    "pip install 'tensorflow[and-cuda]==2.21.0'"
    """
    dists = dict(facts.tensorflow.distributions)
    if "tf-nightly" in dists:
        return "pip install -U 'tf-nightly[and-cuda]'"
    version = dists.get("tensorflow") or next(iter(dists.values()), None)
    pin = f"=={version}" if version and version[0].isdigit() else ""
    return f"pip install 'tensorflow[and-cuda]{pin}'"


def _tf_name(facts: CudaFacts) -> str:
    dists = facts.tensorflow.distributions
    return f"{dists[0][0]} {dists[0][1]}" if dists else "TensorFlow"


# -------------------------------------------------------------------------------------------------- platform, TF


def _platform(facts: CudaFacts) -> list[Finding]:
    if facts.system == "Windows":
        return [
            Finding(
                "platform",
                ERROR,
                "native Windows",
                "TensorFlow has no CUDA build for native Windows since 2.11: it runs on the CPU there",
                "run it in WSL 2: wsl --install, then pip install 'tensorflow[and-cuda]' inside it",
            )
        ]
    if facts.system == "Darwin":
        return [
            Finding(
                "platform",
                ERROR,
                "macOS",
                "no CUDA on macOS: TensorFlow lists no NVIDIA GPU there",
                "pip install tensorflow-metal (Apple's GPU plugin)",
            )
        ]
    return []  # fmt: skip


def _tensorflow(facts: CudaFacts) -> list[Finding]:
    tf = facts.tensorflow
    if not tf.distributions:
        return [Finding("tensorflow", ERROR, "TensorFlow is not installed", "nothing to run on the GPUs",
                        install_command(facts))]  # fmt: skip
    if len(tf.distributions) > 1:
        names = " and ".join(f"{n} {v}" for n, v in tf.distributions)
        drop = " ".join(n for n, _ in tf.distributions)
        return [Finding("tensorflow", ERROR, f"{names} are installed",
                        "each installs the tensorflow package: its files are whichever was installed last",
                        f"pip uninstall -y {drop} && {install_command(facts)}")]  # fmt: skip
    if tf.build is None:
        return [Finding("tensorflow", NOTE, f"{_tf_name(facts)}: its build info cannot be read",
                        "whether it is a CUDA build is not known here", "python -c 'import tensorflow as tf; "
                        "print(tf.sysconfig.get_build_info())'")]  # fmt: skip
    if not tf.build.is_cuda_build:
        arm = " (the aarch64 wheel)" if facts.machine in ("aarch64", "arm64") else ""
        name = tf.distributions[0][0]
        return [Finding("tensorflow", ERROR, f"{_tf_name(facts)} is a CPU build{arm}",
                        "its build info says is_cuda_build False: it never lists a GPU",
                        f"pip uninstall -y {name} && {install_command(facts)}")]  # fmt: skip
    return []


# -------------------------------------------------------------------------------------------------- masks, devices


def _masks(facts: CudaFacts) -> list[Finding]:
    out = []
    fix = 'unset CUDA_VISIBLE_DEVICES, or eval "$(tfdevices select auto:1)"'
    if facts.cuda_visible is not None:
        env = {"CUDA_VISIBLE_DEVICES": facts.cuda_visible, "CUDA_DEVICE_ORDER": facts.cuda_order or ""}
        try:
            tokens = parse_visible_devices(facts.cuda_visible)
            hidden = tokens == () or (facts.gpus and resolve(_whole_gpus(facts.gpus), env).hidden_reason)
            if hidden:
                out.append(Finding("mask", ERROR, "CUDA_VISIBLE_DEVICES hides every GPU (set empty, or to a negative "
                                   "index)", "CUDA shows TensorFlow no GPU", fix))  # fmt: skip
        except EnvVarError:
            out.append(Finding("mask", ERROR, "CUDA_VISIBLE_DEVICES names no GPU of this machine, or is malformed",
                               "CUDA stops at its first entry it cannot use: TensorFlow lists the GPUs before it "
                               "only", fix))  # fmt: skip
    if facts.nvidia_visible is not None and facts.nvidia_visible.strip().lower() in ("", "void", "none"):
        out.append(Finding("container mask", ERROR, "NVIDIA_VISIBLE_DEVICES asks the container runtime for no GPU",
                           "the container gets no GPU device", "docker run --gpus all ... (Kubernetes: "
                           "runtimeClassName: nvidia and a nvidia.com/gpu limit)"))  # fmt: skip
    return out


def _whole_gpus(gpus: Sequence[GpuInfo]) -> list[GpuInfo]:
    return [g for g in gpus if g.mig_index is None]


def _container_fix(facts: CudaFacts) -> str:
    run = "docker run --gpus all (Kubernetes: runtimeClassName: nvidia)"
    if facts.nvidia_visible is not None:
        return f"start the container with the NVIDIA runtime: {run}"
    return f"install the NVIDIA driver (nvidia-smi lists the GPUs), or in a container: {run}"


def _device_nodes(facts: CudaFacts) -> list[Finding]:
    if facts.system != "Linux":
        return []
    if facts.wsl:
        if facts.dxg:
            return []
        return [Finding("driver", ERROR, "WSL 2 without /dev/dxg", "the Windows driver shares no GPU with Linux here",
                        "update the NVIDIA driver on Windows, then wsl --update and wsl --shutdown")]  # fmt: skip
    gpus = [n for n in facts.device_nodes if n[len("nvidia") :].isdigit()]
    if not facts.device_nodes and facts.proc_driver is None:
        return [Finding("driver", ERROR, "no NVIDIA driver: no /dev/nvidia* and no /proc/driver/nvidia/version",
                        "CUDA cannot start, so TensorFlow lists no GPU", _container_fix(facts))]  # fmt: skip
    if not gpus:
        return [Finding("driver", ERROR, "the NVIDIA driver is loaded but /dev has no nvidia0, nvidia1 ...",
                        "no GPU device reaches this process (a container started without them)",
                        _container_fix(facts))]  # fmt: skip
    if "nvidia-uvm" not in facts.device_nodes:
        return [Finding("driver", ERROR, "no /dev/nvidia-uvm", "CUDA cannot start without the unified memory device "
                        "(cuInit answers CUDA_ERROR_UNKNOWN)", "sudo nvidia-modprobe -u -c=0")]  # fmt: skip
    return []


# -------------------------------------------------------------------------------------------------- the driver


def _libcuda(facts: CudaFacts) -> list[Finding]:
    if facts.system != "Linux" or facts.driver is None:
        return []
    found = facts.driver.found
    if found.real is None:
        return [Finding("libcuda", ERROR, "libcuda.so.1 (the driver's library) is found nowhere the loader looks",
                        "CUDA cannot start: TensorFlow lists no GPU", _container_fix(facts))]  # fmt: skip
    where = _where(found)
    if "/stubs/" in found.real or facts.driver.cu_init == 34:
        return [Finding("libcuda", ERROR, f"{where} is CUDA's stub", "a library for linking, not running: cuInit "
                        "fails and TensorFlow lists no GPU", _drop(found, "the stubs folder"))]  # fmt: skip
    if facts.wsl and not (found.shown or "").startswith("/usr/lib/wsl/lib/"):
        return [
            Finding(
                "libcuda",
                ERROR,
                f"WSL 2, but {where}",
                "only WSL's own /usr/lib/wsl/lib/libcuda.so.1 reaches the GPU",
                "uninstall the Linux NVIDIA driver inside WSL (keep the Windows one)",
            )
        ]
    if found.error:
        return [Finding("libcuda", ERROR, f"{where} does not load ({found.error})", "CUDA cannot start",
                        _container_fix(facts))]  # fmt: skip
    code = facts.driver.cu_init
    if code:
        name, meaning, fix = _CU_INIT.get(code, (f"CUDA error {code}", "the driver did not start", "nvidia-smi"))
        return [Finding("cuInit", ERROR, f"cuInit answered {code} ({name})", meaning, fix)]
    return []


def _drop(found: Found, what: str) -> str:
    if found.source and found.source.startswith("LD_LIBRARY_PATH"):
        return f"remove {found.source} ({what}), or unset LD_LIBRARY_PATH"
    return f"take {what} out of the loader's search (ldconfig's /etc/ld.so.conf.d), then sudo ldconfig"


def _cuda(version: int | None) -> tuple[int, int] | None:
    return None if not version or version < 1000 else (version // 1000, version % 1000 // 10)


def _build_cuda(facts: CudaFacts) -> tuple[int, int] | None:
    b = facts.tensorflow.build
    parts = (b.cuda_version or "").split(".") if b else []
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


def _driver_version(facts: CudaFacts) -> list[Finding]:
    driver = _cuda(facts.nvml_cuda) or _cuda(facts.driver.version if facts.driver else None)
    build = _build_cuda(facts)
    if driver is None or build is None or not (facts.tensorflow.build and facts.tensorflow.build.is_cuda_build):
        return []
    said = f"the driver runs CUDA {driver[0]}.{driver[1]}; {_tf_name(facts)} is built with CUDA {build[0]}.{build[1]}"
    branch = _DRIVER_FOR.get(build) or _DRIVER_FOR.get((build[0], 0), "a newer")
    if driver[0] < build[0]:
        return [Finding("driver version", ERROR, said, f"a CUDA {build[0]} build needs a CUDA {build[0]} driver",
                        f"install the NVIDIA driver {branch} or newer (nvidia-smi's CUDA Version >= "
                        f"{build[0]}.{build[1]})")]  # fmt: skip
    if driver < build:
        ptx = [g for g in facts.gpus if _code_for(facts, g) == "ptx"]
        if ptx:
            return [Finding("driver version", ERROR, said, f"the driver cannot compile CUDA {build[0]}.{build[1]}'s "
                            f"PTX, the only code this TensorFlow has for GPU {ptx[0].key}",
                            f"install the NVIDIA driver {branch} or newer")]  # fmt: skip
        return [Finding("driver version", NOTE, said, "it runs by CUDA's minor-version compatibility (PTX newer than "
                        "the driver would not compile)", f"nothing; the NVIDIA driver {branch} or newer removes the "
                        "limit")]  # fmt: skip
    return []


# -------------------------------------------------------------------------------------------------- wheels, libraries


def _pins(requires: Sequence[str]) -> list[tuple[str, list[tuple[str, tuple[int, ...]]]]]:
    """The ``and-cuda`` extra's ``(wheel, [(operator, version), ...])``."""
    out = []
    for line in requires[:256]:
        spec, _, marker = line.partition(";")
        if "and-cuda" not in marker:
            continue
        head = spec.strip()
        name = head.split("<")[0].split(">")[0].split("=")[0].split("!")[0].split("~")[0].split("[")[0].strip()
        ops = []
        for part in head[len(name) :].strip(" ()").split(","):
            part = part.strip()
            op = next((o for o in ("===", "==", ">=", "<=", "!=", "~=", ">", "<") if part.startswith(o)), None)
            if op:
                ops.append((op, _version(part[len(op) :])))
        out.append((name.lower().replace("_", "-"), ops))
    return out


def _version(text: str) -> tuple[int, ...]:
    """``"12.5.3.2"`` -> ``(12, 5, 3, 2)``; each part's leading digits (``"9.3.0.75"``, ``"2.27.7.post1"``)."""
    parts = []
    for piece in text.strip().split(".")[:8]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits or len(digits) > 9:
            break
        parts.append(int(digits))
    return tuple(parts)


def _fails(version: tuple[int, ...], ops: Sequence[tuple[str, tuple[int, ...]]]) -> str | None:
    """``"older"``, ``"newer"`` or ``"other"`` where ``version`` misses a pin; ``None`` where it meets them."""
    for op, want in ops:
        ok = {
            ">=": version >= want, ">": version > want, "~=": version >= want, "<=": version <= want,
            "<": version < want, "==": version[: len(want)] == want, "===": version == want, "!=": version != want,
        }[op]  # fmt: skip
        if not ok:
            return "older" if op in (">=", ">", "~=") or (op in ("==", "===") and version < want) else "newer"
    return None


def _wheels(facts: CudaFacts) -> list[Finding]:
    build = facts.tensorflow.build
    pins = _pins(facts.tensorflow.requires)
    if not pins or not (build and build.is_cuda_build):
        return []
    have = dict(facts.wheels)
    cu13 = [n for n in have if n.endswith("-cu13")]
    missing = [n for n, _ in pins if n not in have]
    off = [(n, have[n], _fails(_version(have[n]), ops), ops) for n, ops in pins if n in have]
    off = [o for o in off if o[2]]
    if len(missing) == len(pins) and (cu13 or facts.cu13_folder):
        shown = ", ".join(cu13[:3]) + (" ..." if len(cu13) > 3 else "") if cu13 else "nvidia/cu13/lib"
        return [Finding("cuda wheels", ERROR, f"only CUDA 13 wheels are installed ({shown}; JAX's or PyTorch's)",
                        f"{_tf_name(facts)} is a CUDA {build.cuda_version} build: it loads CUDA 12 libraries "
                        f"(libcublas.so.12 ...), which CUDA 13's are not", install_command(facts) +
                        " (the cu12 wheels install beside the cu13 ones)")]  # fmt: skip
    out = []
    if missing:
        libs_missing = any(f.real is None for f in facts.libraries)
        out.append(Finding("cuda wheels", ERROR if libs_missing else NOTE,
                           f"{len(missing)} of the {len(pins)} CUDA wheels {_tf_name(facts)} pins are not installed "
                           f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''})",
                           "its CUDA libraries must come from elsewhere" if not libs_missing else
                           "TensorFlow finds no CUDA libraries of its own", install_command(facts)))  # fmt: skip
    for name, version, how, ops in off[:8]:
        wanted = ",".join(op + ".".join(map(str, v)) for op, v in ops)
        out.append(Finding(f"wheel {name}", ERROR, f"{name} {version} is {how} than {_tf_name(facts)} pins "
                           f"({wanted})", "its libraries may not load, or miss symbols TensorFlow calls",
                           f"pip install '{name}{wanted}'"))  # fmt: skip
    return out


def _where(f: Found) -> str:
    """``"nvidia/cudnn/lib/libcudnn.so.9 (from TensorFlow's run path)"``; one LD_LIBRARY_PATH gave: by its name."""
    return f"{f.shown} (from {f.source})" if f.shown != f.soname else f"{f.soname} from {f.source}"


def _libraries(facts: CudaFacts) -> list[Finding]:
    build = facts.tensorflow.build
    if facts.system != "Linux" or not (build and build.is_cuda_build) or not facts.libraries:
        return []
    out = []
    missing = [f for f in facts.libraries if f.real is None]
    if missing:
        names = ", ".join(f.soname for f in missing)
        cudart = " (for libcudart TensorFlow says 'Could not find cuda drivers on your machine')" if any(
            f.name == "cudart" for f in missing) else ""  # fmt: skip
        out.append(Finding("libraries", ERROR, f"{len(missing)} of the {len(START_LIBRARIES)} libraries TensorFlow "
                           f"loads at start are found nowhere the loader looks: {names}",
                           f"TensorFlow prints only 'Cannot dlopen some GPU libraries' and lists no GPU{cudart}",
                           install_command(facts)))  # fmt: skip
    for f in facts.libraries:
        if f.real and f.error:
            symbol = "undefined symbol" in f.error
            fix = (_drop(f, "that folder") if f.source and f.source.startswith("LD_LIBRARY_PATH") else
                   f"pip install --force-reinstall {install_command(facts)[12:]}")  # fmt: skip
            meaning = ("its wheels do not match each other (a symbol one needs, the other lacks): "
                       if symbol else "") + "TensorFlow lists no GPU"  # fmt: skip
            out.append(Finding(f"library {f.name}", ERROR, f"{_where(f)} does not load ({f.error})", meaning, fix))
        elif f.real and any(s.startswith("TensorFlow's run path") for s in f.shadows):
            out.append(Finding(f"library {f.name}", WARNING, f"{_where(f)} comes ahead of the wheel's copy",
                               "TensorFlow runs that copy, not the one its pins chose",
                               _drop(f, "that folder")))  # fmt: skip
    return out


_LATER = {
    "nccl": "MirroredStrategy and MultiWorkerMirroredStrategy on GPUs cannot all-reduce with NCCL",
    "nvrtc": "XLA and cuDNN's runtime-compiled kernels fail",
    "cupti": "the profiler, and tfdevices' placement capture, see no GPU kernel",
}


def _later_libraries(facts: CudaFacts) -> list[Finding]:
    build = facts.tensorflow.build
    if facts.system != "Linux" or not (build and build.is_cuda_build):
        return []
    out = []
    pins = dict(_pins(facts.tensorflow.requires))
    for f in facts.later:
        if f.real is None or f.error:
            wheel = next((n for n in pins if WHEEL_FOLDER[f.name].replace("_", "-") in n), None)
            loads = f"{_where(f)} does not load ({f.error})"
            said = f"{f.soname} is found nowhere the loader looks" if f.real is None else loads
            spec = ",".join(op + ".".join(map(str, v)) for op, v in pins.get(wheel or "", ()))
            out.append(Finding(f"library {f.name}", WARNING, said, _LATER[f.name],
                               f"pip install '{wheel}{spec}'" if wheel else install_command(facts)))  # fmt: skip
    return out


# -------------------------------------------------------------------------------------------------- compute capability


def _code_for(facts: CudaFacts, gpu: GpuInfo) -> str:
    """``"sm"`` (code for it), ``"ptx"`` (compiled at start), ``"old"`` (below the oldest), ``"none"``, ``"?"``."""
    build = facts.tensorflow.build
    cc = gpu.compute_capability
    if cc is None or build is None or not build.capabilities:
        return "?"
    sm: list[tuple[int, int]] = []
    ptx: list[tuple[int, int]] = []
    for cap in build.capabilities:
        kind, _, digits = cap.partition("_")
        if digits.isdigit() and len(digits) >= 2:
            (sm if kind == "sm" else ptx).append((int(digits[:-1]), int(digits[-1])))
    every = sm + ptx
    if every and cc < min(every):
        return "old"
    if any(major == cc[0] and minor <= cc[1] for major, minor in sm):
        return "sm"
    return "ptx" if any(p <= cc for p in ptx) else "none"


def _knows(build_cuda: tuple[int, int] | None) -> tuple[int, int]:
    known = (8, 6)
    for major, minor, cc in _CUDA_KNOWS:
        if build_cuda and build_cuda >= (major, minor):
            known = cc
    return known


def capability_findings(facts: CudaFacts) -> list[Finding]:
    """Each GPU's compute capability against the build's code: ignored, compiled from PTX at start, or none.

    A GPU newer than the build's CUDA knows (Blackwell, ``sm_100`` and ``sm_120``, with TensorFlow 2.21's CUDA 12.5)
    runs TensorFlow's kernels from PTX only, and XLA cannot compile for it.
    """
    build = facts.tensorflow.build
    if not (build and build.is_cuda_build):
        return []
    out, seen = [], set()
    for gpu in facts.gpus:
        kind, cc = _code_for(facts, gpu), gpu.compute_capability
        if cc is None or kind in ("sm", "?") or (cc, kind) in seen:
            continue
        seen.add((cc, kind))
        same = [g.key for g in facts.gpus if g.compute_capability == cc]
        who = f"GPU {', '.join(same)} ({gpu.name}, compute capability {cc[0]}.{cc[1]})"
        caps = ", ".join(build.capabilities)
        out.append(_capability(facts, kind, who, cc, caps))
    return out


def _capability(facts: CudaFacts, kind: str, who: str, cc: tuple[int, int], caps: str) -> Finding:
    name = _tf_name(facts)
    if kind == "old":
        return Finding(
            f"gpu {cc[0]}.{cc[1]}",
            ERROR,
            f"{who} is older than {name}'s oldest code ({caps})",
            "TensorFlow ignores it ('Ignoring visible gpu device')",
            "use a newer GPU, or an older "
            "TensorFlow built for it (tf.sysconfig.get_build_info()['cuda_compute_capabilities'])",
        )
    if kind == "none":
        return Finding(f"gpu {cc[0]}.{cc[1]}", ERROR, f"{who}: {name} holds no code for it ({caps})",
                       "its kernels cannot run there", "a TensorFlow built for this GPU")  # fmt: skip
    knows = _knows(_build_cuda(facts))
    if cc > knows:
        return Finding(f"gpu {cc[0]}.{cc[1]}", WARNING, f"{who}: {name} holds no code for it ({caps}) and its CUDA "
                       f"{facts.tensorflow.build.cuda_version if facts.tensorflow.build else '?'} knows no newer GPU "
                       f"than {knows[0]}.{knows[1]}", "its kernels run only from PTX the driver compiles at the "
                       f"first start, and XLA cannot compile for sm_{cc[0]}{cc[1]} ('PTX version ... does not support "
                       "target', tensorflow#111958; Keras' fit uses XLA on GPUs)", "a TensorFlow built with CUDA "
                       "12.8 or newer; until then model.compile(..., jit_compile=False)")  # fmt: skip
    return Finding(
        f"gpu {cc[0]}.{cc[1]}",
        WARNING,
        f"{who}: {name} holds no sm_{cc[0]}{cc[1]} code, only PTX ({caps})",
        "the driver compiles TensorFlow's kernels at the first start (TensorFlow: 'could "
        "take 30 minutes or longer') and keeps them in its cache" + _cache(facts),
        _cache_fix(facts),
    )


def slow_start(tensorflow: TfInstall, gpus: Sequence[GpuInfo], env: Mapping[str, str]) -> tuple[Finding, ...]:
    """The warnings of :func:`capability_findings` alone, for ``configure()`` before TensorFlow starts.

    Args:
        tensorflow: the installed TensorFlow (:func:`~tfdevices.gpus.cuda_facts.read_tensorflow`).
        gpus: the GPUs selected.
        env: reads ``CUDA_CACHE_DISABLE`` and ``CUDA_CACHE_MAXSIZE`` (their values are never printed).
    """
    maxsize = env.get("CUDA_CACHE_MAXSIZE", "").strip()
    facts = CudaFacts(
        "Linux",
        "",
        tensorflow=tensorflow,
        gpus=tuple(gpus),
        cache_disabled=env.get("CUDA_CACHE_DISABLE", "").strip() == "1",
        cache_maxsize=int(maxsize) if maxsize.isdigit() and len(maxsize) < 19 else None,
    )
    return tuple(f for f in capability_findings(facts) if f.severity == WARNING)


def _cache(facts: CudaFacts) -> str:
    if facts.cache_disabled:
        return ", which CUDA_CACHE_DISABLE turns off: every start compiles them again"
    return " (~/.nv/ComputeCache, or where CUDA_CACHE_PATH says)"


def _cache_fix(facts: CudaFacts) -> str:
    if facts.cache_disabled:
        return "unset CUDA_CACHE_DISABLE; export CUDA_CACHE_MAXSIZE=4294967296"
    if facts.cache_maxsize is not None and facts.cache_maxsize >= 1 << 32:
        return "keep the cache between runs (in a container: a volume on ~/.nv)"
    return "export CUDA_CACHE_MAXSIZE=4294967296 (the cache's largest) and keep ~/.nv between runs (a volume)"
