"""Can this TensorFlow use these GPUs: each cause planted, read back as its one line.

A planted machine is folders only: a site folder with distributions' metadata (``*.dist-info/METADATA``) and
TensorFlow's ``build_info.py``, the CUDA wheels' library folders, a root with ``/dev`` and ``/proc``, the fake
NVML serving the real H200's shapes, and a fake ``libcuda.so.1`` compiled here whose ``cuInit`` answers the
code a test plants. The probe loads them in a fresh process, as it loads the real ones.
"""

from __future__ import annotations

import _ctypes
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.fake_nvml import FakeGpu, FakeNvml, h200
from tfdevices.core.record_class import replace
from tfdevices.gpus import cuda_check, cuda_facts, cuda_libraries, cuda_log, cuda_probe
from tfdevices.gpus.cuda_check import ERROR, NOTE, WARNING, diagnose, first_cause
from tfdevices.gpus.cuda_facts import BuildInfo, CudaFacts, Driver, TfInstall, gather
from tfdevices.gpus.cuda_libraries import Found, search
from tfdevices.gpus.cuda_log import log_findings
from tfdevices.gpus.nvml import Nvml

TF_221 = (
    "build_info = collections.OrderedDict([('cuda_compute_capabilities', ['sm_60', 'sm_70', 'sm_80', 'sm_89', "
    "'compute_90']), ('cuda_version', '12.5.1'), ('cudnn_version', '9'), ('is_cuda_build', True)])\n"
)
CPU_BUILD = "build_info = collections.OrderedDict([('is_cuda_build', False), ('is_rocm_build', False)])\n"
# TensorFlow 2.21.0's and-cuda pins, as its METADATA writes them
PINS = {
    "nvidia-cublas-cu12": ("<13.0,>=12.5.3.2", "12.5.3.2"),
    "nvidia-cuda-cupti-cu12": ("<13.0,>=12.5.82", "12.5.82"),
    "nvidia-cuda-nvcc-cu12": ("<13.0,>=12.5.82", "12.5.82"),
    "nvidia-cuda-nvrtc-cu12": ("<13.0,>=12.5.82", "12.5.82"),
    "nvidia-cuda-runtime-cu12": ("<13.0,>=12.5.82", "12.5.82"),
    "nvidia-cudnn-cu12": ("<10.0,>=9.3.0.75", "9.3.0.75"),
    "nvidia-cufft-cu12": ("<12.0,>=11.2.3.61", "11.2.3.61"),
    "nvidia-curand-cu12": ("<11.0,>=10.3.6.82", "10.3.6.82"),
    "nvidia-cusolver-cu12": ("<12.0,>=11.6.3.83", "11.6.3.83"),
    "nvidia-cusparse-cu12": ("<13.0,>=12.5.1.3", "12.5.1.3"),
    "nvidia-nccl-cu12": ("<3.0,>=2.27.7", "2.27.7"),
    "nvidia-nvjitlink-cu12": ("<13.0,>=12.5.82", "12.5.82"),
}
A_REAL_LIBRARY = _ctypes.__file__  # a shared object any Python here loads: planted under CUDA's names
LIBS = {  # soname -> wheel folder
    "libcudart.so.12": "cuda_runtime",
    "libcublas.so.12": "cublas",
    "libcublasLt.so.12": "cublas",
    "libcufft.so.11": "cufft",
    "libcusolver.so.11": "cusolver",
    "libcusparse.so.12": "cusparse",
    "libcudnn.so.9": "cudnn",
    "libnccl.so.2": "nccl",
    "libnvrtc.so.12": "cuda_nvrtc",
    "libcupti.so.12": "cuda_cupti",
}
FAKE_LIBCUDA = """
int cuInit(unsigned int flags) { return CODE; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
"""


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory) -> dict[int, str]:
    """A fake ``libcuda.so.1`` per ``cuInit`` code, compiled here (a C compiler is part of the test setup)."""
    out = {}
    for code in (0, 34, 100, 803):
        folder = tmp_path_factory.mktemp(f"libcuda{code}")
        (folder / "cuda.c").write_text(FAKE_LIBCUDA)
        so = folder / "libcuda.so.1"
        subprocess.run(
            ["cc", "-shared", "-fPIC", f"-DCODE={code}", "-o", str(so), str(folder / "cuda.c")], check=True, timeout=60
        )
        out[code] = str(so)
    return out


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory) -> str:
    """A ``libcudnn.so.9`` that calls a function no library loaded before it has: a wheel of another release."""
    folder = tmp_path_factory.mktemp("mismatched")
    (folder / "cudnn.c").write_text(
        "void cudnnGetLibConfig(void);\nint cudnnCreate(void) { cudnnGetLibConfig(); return 0; }\n"
    )
    so = folder / "libcudnn.so.9"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(folder / "cudnn.c")], check=True, timeout=60)
    return str(so)


def test_a_library_built_against_another_release_says_its_missing_symbol(tmp_path, libcuda, mismatched) -> None:
    facts = plant(tmp_path, libcuda, libs={"libcudnn.so.9": mismatched})
    line = lines(facts)["library cudnn"]
    assert line.startswith(
        "nvidia/cudnn/lib/libcudnn.so.9 (from TensorFlow's run path) does not load (nvidia/cudnn/lib/libcudnn.so.9: "
        "undefined symbol: cudnnGetLibConfig): its wheels do not match each other"
    ), line
    assert line.endswith("HINT: pip install --force-reinstall 'tensorflow[and-cuda]==2.21.0'")


def dist(site: pathlib.Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    (info / "METADATA").write_text("\n".join(lines + [f"Requires-Dist: {r}" for r in requires]) + "\n")


def tensorflow(site: pathlib.Path, name: str = "tensorflow", version: str = "2.21.0", build: str = TF_221) -> None:
    requires = tuple(f'{wheel}{spec}; extra == "and-cuda"' for wheel, (spec, _) in PINS.items())
    dist(site, name, version, ("numpy>=1.26.0", *requires))
    platform_dir = site / "tensorflow" / "python" / "platform"
    platform_dir.mkdir(parents=True, exist_ok=True)
    (platform_dir / "build_info.py").write_text('"""Auto-generated."""\nimport collections\n\n' + build)


def plant(
    tmp_path: pathlib.Path,
    libcuda: dict[int, str],
    *,
    tf: tuple[tuple[str, str, str], ...] = (("tensorflow", "2.21.0", TF_221),),
    wheels: dict[str, str] | None = None,
    libs: dict[str, str | None] | None = None,
    nodes: tuple[str, ...] = ("nvidia0", "nvidiactl", "nvidia-uvm"),
    proc: bool = True,
    cu_init: int | None = 0,
    nvml: FakeNvml | None = None,
    env: dict[str, str] | None = None,
    system: tuple[str, str] = ("Linux", "x86_64"),
    extra: dict[str, str] | None = None,
    probe: bool = True,
) -> CudaFacts:
    """A machine where TensorFlow 2.21 can use an A100, less what a test changes.

    Args:
        wheels: name -> version of the nvidia wheels installed (default: each pin's lowest).
        libs: soname -> None (absent) or a file's text (not a library) in its wheel folder; others: a real library.
        extra: path under the planted tree -> "lib" (a real library) or text: a file planted anywhere.
    """
    site, root = tmp_path / "site", tmp_path / "root"
    site.mkdir(exist_ok=True)
    for name, version, build in tf:
        tensorflow(site, name, version, build)
    for name, version in (wheels if wheels is not None else {n: v for n, (_, v) in PINS.items()}).items():
        dist(site, name, version)
    for soname, folder in LIBS.items():
        text = (libs or {}).get(soname, "lib")
        if text is None:
            continue
        where = site / "nvidia" / folder / "lib"
        where.mkdir(parents=True, exist_ok=True)
        _put(where / soname, text)
    (root / "dev").mkdir(parents=True)
    for node in nodes:
        (root / "dev" / node).write_text("")
    if proc:
        (root / "proc" / "driver" / "nvidia").mkdir(parents=True)
        (root / "proc" / "driver" / "nvidia" / "version").write_text(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04\n"
        )
    if cu_init is not None:
        system_lib = root / "usr" / "lib" / "x86_64-linux-gnu"
        system_lib.mkdir(parents=True)
        shutil.copy(libcuda[cu_init], system_lib / "libcuda.so.1")
    for path, text in (extra or {}).items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        _put(target, libcuda[0] if text == "libcuda" else text)
    snapshot = Nvml(module=nvml or FakeNvml([FakeGpu()], cuda_driver=13000)).snapshot(sensors=False)
    planted_env = {k: v.replace("TMP", str(tmp_path)) for k, v in (env or {}).items()}
    return gather(
        env={"PATH": os.environ.get("PATH", ""), **planted_env},
        root=str(root),
        paths=[str(site)],
        snapshot=snapshot,
        loader_cache={},
        system=system,
        probe=probe,
    )


def _put(path: pathlib.Path, text: str) -> None:
    if text == "lib":
        shutil.copy(A_REAL_LIBRARY, path)
    elif os.path.isfile(text):
        shutil.copy(text, path)
    else:
        path.write_text(text)


def lines(facts: CudaFacts) -> dict[str, str]:
    return {f.cause: f.line for f in diagnose(facts)}


def test_the_planted_good_machine_has_nothing_to_say(tmp_path, libcuda) -> None:
    facts = plant(tmp_path, libcuda)
    assert facts.driver is not None and facts.driver.cu_init == 0 and facts.driver.version == 13000
    assert [f.error for f in facts.libraries] == [None] * 7 and all(f.real for f in facts.libraries + facts.later)
    assert facts.libraries[6].shown == "nvidia/cudnn/lib/libcudnn.so.9"
    assert facts.libraries[6].source == "TensorFlow's run path"
    assert diagnose(facts) == ()


H200_ONLY_CU13 = {
    "nvidia-cublas-cu13": "13.0.0.19",
    "nvidia-cuda-runtime-cu13": "13.0.48",
    "nvidia-cudnn-cu13": "9.13.0.50",
}
NO_LIBS = dict.fromkeys(LIBS)


@pytest.mark.parametrize(
    "planted, cause, severity, words",
    [
        # platform
        pytest.param(
            {"system": ("Windows", "AMD64")},
            "platform",
            ERROR,
            "native Windows: TensorFlow has no CUDA build for native "
            "Windows since 2.11: it runs on the CPU there. HINT: run it in WSL 2",
        ),
        pytest.param({"system": ("Darwin", "arm64")}, "platform", ERROR, "macOS: no CUDA on macOS"),
        # the TensorFlow installed
        pytest.param(
            {"tf": ()},
            "tensorflow",
            ERROR,
            "TensorFlow is not installed: nothing to run on the GPUs. HINT: pip install 'tensorflow[and-cuda]'",
        ),
        pytest.param(
            {"tf": (("tensorflow", "2.21.0", TF_221), ("tensorflow-cpu", "2.21.0", CPU_BUILD))},
            "tensorflow",
            ERROR,
            "tensorflow 2.21.0 and tensorflow-cpu 2.21.0 are installed: each installs the tensorflow package: its "
            "files "
            "are whichever was installed last. HINT: pip uninstall -y tensorflow tensorflow-cpu && pip install "
            "'tensorflow[and-cuda]==2.21.0'",
        ),
        pytest.param(
            {"tf": (("tensorflow-cpu", "2.21.0", CPU_BUILD),)},
            "tensorflow",
            ERROR,
            "tensorflow-cpu 2.21.0 is a CPU "
            "build: its build info says is_cuda_build False: it never lists a GPU. HINT: pip uninstall -y "
            "tensorflow-cpu",
        ),
        pytest.param(
            {"tf": (("tensorflow", "2.21.0", CPU_BUILD),), "system": ("Linux", "aarch64")},
            "tensorflow",
            ERROR,
            "tensorflow 2.21.0 is a CPU build (the aarch64 wheel)",
        ),
        pytest.param(
            {"tf": (("tf-nightly", "2.23.0.dev20261026", TF_221),), "wheels": {}},
            "cuda wheels",
            NOTE,
            "12 of the 12 CUDA wheels tf-nightly 2.23.0.dev20261026 pins are not installed",
        ),
        # masks
        pytest.param(
            {"env": {"CUDA_VISIBLE_DEVICES": ""}},
            "mask",
            ERROR,
            "CUDA_VISIBLE_DEVICES hides every GPU (set empty, or "
            "to a negative index): CUDA shows TensorFlow no GPU. HINT: unset CUDA_VISIBLE_DEVICES",
        ),
        pytest.param({"env": {"CUDA_VISIBLE_DEVICES": "-1"}}, "mask", ERROR, "CUDA_VISIBLE_DEVICES hides every GPU"),
        pytest.param(
            {"env": {"CUDA_VISIBLE_DEVICES": "3"}}, "mask", ERROR, "CUDA_VISIBLE_DEVICES names no GPU of this machine"
        ),
        pytest.param(
            {"env": {"NVIDIA_VISIBLE_DEVICES": "void"}},
            "container mask",
            ERROR,
            "NVIDIA_VISIBLE_DEVICES asks the "
            "container runtime for no GPU: the container gets no GPU device. HINT: docker run --gpus all",
        ),
        # device nodes
        pytest.param(
            {"nodes": (), "proc": False},
            "driver",
            ERROR,
            "no NVIDIA driver: no /dev/nvidia* and no "
            "/proc/driver/nvidia/version: CUDA cannot start, so TensorFlow lists no GPU. HINT: install the NVIDIA "
            "driver",
        ),
        pytest.param(
            {"nodes": (), "proc": False, "env": {"NVIDIA_VISIBLE_DEVICES": "all"}},
            "driver",
            ERROR,
            "HINT: start the "
            "container with the NVIDIA runtime: docker run --gpus all (Kubernetes: runtimeClassName: nvidia)",
        ),
        pytest.param({"nodes": ("nvidiactl",)}, "driver", ERROR, "the NVIDIA driver is loaded but /dev has no nvidia0"),
        pytest.param(
            {"nodes": ("nvidia0", "nvidiactl")},
            "driver",
            ERROR,
            "no /dev/nvidia-uvm: CUDA cannot start without the "
            "unified memory device (cuInit answers CUDA_ERROR_UNKNOWN). HINT: sudo nvidia-modprobe -u -c=0",
        ),
        pytest.param(
            {"nodes": (), "extra": {"root/usr/lib/wsl/lib/libcuda.so.1": "libcuda"}},
            "driver",
            ERROR,
            "WSL 2 without /dev/dxg",
        ),
        pytest.param(
            {
                "nodes": (),
                "proc": False,
                "cu_init": None,
                "extra": {
                    "root/usr/lib/wsl/lib/x": "",
                    "root/dev/dxg": "",
                    "root/usr/lib/x86_64-linux-gnu/libcuda.so.1": "libcuda",
                },
            },
            "libcuda",
            ERROR,
            "WSL 2, but /usr/lib/x86_64-linux-gnu/libcuda.so.1 (from a system folder): only WSL's own",
        ),
        # the driver's library and cuInit
        pytest.param(
            {"cu_init": None}, "libcuda", ERROR, "libcuda.so.1 (the driver's library) is found nowhere the loader looks"
        ),
        pytest.param(
            {"extra": {"cuda/lib64/stubs/libcuda.so.1": "libcuda"}, "env": {"LD_LIBRARY_PATH": "TMP/cuda/lib64/stubs"}},
            "libcuda",
            ERROR,
            "libcuda.so.1 from LD_LIBRARY_PATH's entry 1 is CUDA's stub: a library for linking, not "
            "running: cuInit fails and TensorFlow lists no GPU. HINT: remove LD_LIBRARY_PATH's entry 1 (the stubs "
            "folder), or unset LD_LIBRARY_PATH",
        ),
        pytest.param({"cu_init": 34}, "libcuda", ERROR, "is CUDA's stub"),
        pytest.param(
            {"cu_init": 803},
            "cuInit",
            ERROR,
            "cuInit answered 803 (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH): the kernel "
            "module and libcuda.so.1 are different driver versions",
        ),
        pytest.param({"cu_init": 100}, "cuInit", ERROR, "cuInit answered 100 (CUDA_ERROR_NO_DEVICE)"),
        # the driver's CUDA version
        pytest.param(
            {"nvml": FakeNvml([FakeGpu()], cuda_driver=11080)},
            "driver version",
            ERROR,
            "the driver runs CUDA 11.8; "
            "tensorflow 2.21.0 is built with CUDA 12.5: a CUDA 12 build needs a CUDA 12 driver. HINT: install the "
            "NVIDIA "
            "driver 555 or newer",
        ),
        pytest.param(
            {"nvml": FakeNvml([replace(FakeGpu(), cc=(9, 0))], cuda_driver=12020)},
            "driver version",
            ERROR,
            "the driver cannot compile CUDA 12.5's PTX, the only code this TensorFlow has for GPU 0",
        ),
        pytest.param(
            {"nvml": FakeNvml([FakeGpu()], cuda_driver=12020)}, "driver version", NOTE, "minor-version compatibility"
        ),
        # the CUDA wheels against the and-cuda pins
        pytest.param(
            {"wheels": H200_ONLY_CU13, "libs": NO_LIBS},
            "cuda wheels",
            ERROR,
            "only CUDA 13 wheels are installed "
            "(nvidia-cublas-cu13, nvidia-cuda-runtime-cu13, nvidia-cudnn-cu13; JAX's or PyTorch's): tensorflow 2.21.0 "
            "is "
            "a CUDA 12.5.1 build: it loads CUDA 12 libraries (libcublas.so.12 ...), which CUDA 13's are not. HINT: pip "
            "install 'tensorflow[and-cuda]==2.21.0' (the cu12 wheels install beside the cu13 ones)",
        ),
        pytest.param(
            {"wheels": {"nvidia-cudnn-cu12": "8.9.7.29"}},
            "wheel nvidia-cudnn-cu12",
            ERROR,
            "nvidia-cudnn-cu12 8.9.7.29 is older than tensorflow 2.21.0 pins (<10.0,>=9.3.0.75)",
        ),
        pytest.param({"wheels": {"nvidia-cudnn-cu12": "10.1.0"}}, "wheel nvidia-cudnn-cu12", ERROR, "is newer than"),
        pytest.param(
            {"wheels": {}, "libs": NO_LIBS},
            "cuda wheels",
            ERROR,
            "12 of the 12 CUDA wheels tensorflow 2.21.0 pins are "
            "not installed (nvidia-cublas-cu12, nvidia-cuda-cupti-cu12, nvidia-cuda-nvcc-cu12 ...): TensorFlow finds "
            "no "
            "CUDA libraries of its own. HINT: pip install 'tensorflow[and-cuda]==2.21.0'",
        ),
        # each library TensorFlow loads at start
        pytest.param(
            {"libs": {"libcudnn.so.9": None, "libcudart.so.12": None}},
            "libraries",
            ERROR,
            "2 of the 7 libraries "
            "TensorFlow loads at start are found nowhere the loader looks: libcudart.so.12, libcudnn.so.9: TensorFlow "
            "prints only 'Cannot dlopen some GPU libraries' and lists no GPU (for libcudart TensorFlow says 'Could not "
            "find cuda drivers on your machine'). HINT: pip install 'tensorflow[and-cuda]==2.21.0'",
        ),
        pytest.param(
            {"libs": {"libcudnn.so.9": "not a library"}},
            "library cudnn",
            ERROR,
            "nvidia/cudnn/lib/libcudnn.so.9 (from TensorFlow's run path) does not load "
            "(nvidia/cudnn/lib/libcudnn.so.9: ",
        ),
        pytest.param(
            {
                "extra": {"cuda-11/lib64/libcublas.so.12": "lib"},
                "env": {"LD_LIBRARY_PATH": "TMP/none:TMP/cuda-11/lib64"},
            },
            "library cublas",
            WARNING,
            "libcublas.so.12 from LD_LIBRARY_PATH's entry 2 comes ahead of the wheel's copy: "
            "TensorFlow runs that copy, not the one its pins chose. HINT: remove LD_LIBRARY_PATH's entry 2",
        ),
        pytest.param(
            {"extra": {"cuda-11/lib64/libcublas.so.12": "bad"}, "env": {"LD_LIBRARY_PATH": "TMP/cuda-11/lib64"}},
            "library cublas",
            ERROR,
            "libcublas.so.12 from LD_LIBRARY_PATH's entry 1 does not load (libcublas.so.12: ",
        ),
        # the libraries loaded later
        pytest.param(
            {"libs": {"libnccl.so.2": None}},
            "library nccl",
            WARNING,
            "libnccl.so.2 is found nowhere the loader looks: "
            "MirroredStrategy and MultiWorkerMirroredStrategy on GPUs cannot all-reduce with NCCL. HINT: pip install "
            "'nvidia-nccl-cu12<3.0,>=2.27.7'",
        ),
        pytest.param(
            {"libs": {"libcupti.so.12": None}}, "library cupti", WARNING, "tfdevices' placement capture, see no GPU"
        ),
        pytest.param({"libs": {"libnvrtc.so.12": None}}, "library nvrtc", WARNING, "libnvrtc.so.12 is found nowhere"),
        # each GPU's compute capability against the build's code
        pytest.param(
            {"nvml": h200()},
            "gpu 9.0",
            WARNING,
            "GPU 0 (NVIDIA H200, compute capability 9.0): tensorflow 2.21.0 holds "
            "no sm_90 code, only PTX (sm_60, sm_70, sm_80, sm_89, compute_90): the driver compiles TensorFlow's "
            "kernels "
            "at the first start (TensorFlow: 'could take 30 minutes or longer') and keeps them in its cache "
            "(~/.nv/ComputeCache, or where CUDA_CACHE_PATH says). HINT: export CUDA_CACHE_MAXSIZE=4294967296",
        ),
        pytest.param(
            {"nvml": h200(), "env": {"CUDA_CACHE_DISABLE": "1"}},
            "gpu 9.0",
            WARNING,
            "which CUDA_CACHE_DISABLE turns off: every start compiles them again. HINT: unset CUDA_CACHE_DISABLE",
        ),
        pytest.param(
            {"nvml": FakeNvml([replace(FakeGpu(), name="NVIDIA RTX PRO 6000 Blackwell", cc=(12, 0))])},
            "gpu 12.0",
            WARNING,
            "GPU 0 (NVIDIA RTX PRO 6000 Blackwell, compute capability 12.0): tensorflow 2.21.0 holds no code for "
            "it (sm_60, sm_70, sm_80, sm_89, compute_90) and its CUDA 12.5.1 knows no newer GPU than 9.0: its kernels "
            "run only from PTX the driver compiles at the first start, and XLA cannot compile for sm_120",
        ),
        pytest.param(
            {"nvml": FakeNvml([replace(FakeGpu(), name="Tesla M60", cc=(5, 2))])},
            "gpu 5.2",
            ERROR,
            "GPU 0 (Tesla M60, "
            "compute capability 5.2) is older than tensorflow 2.21.0's oldest code (sm_60, sm_70, sm_80, sm_89, "
            "compute_90): TensorFlow ignores it ('Ignoring visible gpu device')",
        ),
    ],
)
def test_each_planted_cause_is_read_back_as_its_line(tmp_path, libcuda, planted, cause, severity, words) -> None:
    findings = {f.cause: f for f in diagnose(plant(tmp_path, libcuda, **planted))}
    assert cause in findings, sorted(findings)
    assert findings[cause].severity == severity and words in findings[cause].line, findings[cause].line
    assert "\n" not in findings[cause].line and str(tmp_path) not in findings[cause].line


def test_the_first_cause_is_the_earliest_error_in_the_checks_order(tmp_path, libcuda) -> None:
    facts = plant(tmp_path, libcuda, nodes=(), proc=False, cu_init=None, wheels={}, libs=NO_LIBS, nvml=h200())
    found = diagnose(facts)
    assert [f.cause for f in found] == ["driver", "libcuda", "cuda wheels", "libraries", "library nccl",
                                        "library nvrtc", "library cupti", "gpu 9.0"]  # fmt: skip
    first = first_cause(found)
    assert first is not None and first.cause == "driver"


def test_no_line_holds_an_environment_value(tmp_path, libcuda) -> None:
    env = {
        "CUDA_VISIBLE_DEVICES": "GPU-5ec2e7",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "LD_LIBRARY_PATH": "TMP/folder-5ec2e7",
        "CUDA_CACHE_MAXSIZE": "75319",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    extra = {"folder-5ec2e7/libcudnn.so.9": "not a library", "folder-5ec2e7/libcudart.so.12": "lib"}
    found = diagnose(plant(tmp_path, libcuda, env=env, extra=extra, nvml=h200()))
    assert {"mask", "container mask", "library cudnn", "library cudart", "gpu 9.0"} <= {f.cause for f in found}
    text = "\n".join(f.line for f in found)
    for value in ("5ec2e7", "75319", str(tmp_path)):
        assert value not in text, value


def test_planted_facts_read_as_their_lines_where_no_file_can_plant_them() -> None:
    tf = TfInstall((("tensorflow", "2.21.0"),), BuildInfo(True, "12.5.1", "9", ("sm_80", "compute_90")), site="/s")
    wheel = Found("cudnn", "libcudnn.so.9", "/s/nvidia/cudnn/lib/libcudnn.so.9", "TensorFlow's run path",
                  "nvidia/cudnn/lib/libcudnn.so.9", error="nvidia/cudnn/lib/libcudnn.so.9: "
                  "undefined symbol: cudnnGetLibConfig, version libcudnn_graph.so.9")  # fmt: skip
    facts = CudaFacts("Linux", "x86_64", tensorflow=tf, device_nodes=("nvidia0", "nvidia-uvm"), proc_driver="NVRM",
                      driver=Driver(Found("cuda", "libcuda.so.1", "/usr/lib/libcuda.so.1", "a system folder",
                                          "/usr/lib/libcuda.so.1"), cu_init=999), libraries=(wheel,))  # fmt: skip
    got = lines(facts)
    assert got["cuInit"].startswith("cuInit answered 999 (CUDA_ERROR_UNKNOWN): the driver failed to start")
    assert got["library cudnn"].startswith(
        "nvidia/cudnn/lib/libcudnn.so.9 (from TensorFlow's run path) does not load ("
    )
    assert "its wheels do not match each other" in got["library cudnn"]
    assert got["library cudnn"].endswith("HINT: pip install --force-reinstall 'tensorflow[and-cuda]==2.21.0'")


def test_the_real_tensorflow_here_is_a_cuda_build_without_a_driver_first() -> None:
    """The TensorFlow in this venv read as it is: a CUDA build, no CUDA wheels, no driver: the driver comes first."""
    facts = gather(snapshot=Nvml(module=h200()).snapshot(sensors=False))
    tf = dict(facts.tensorflow.distributions)
    assert "tensorflow" in tf and facts.tensorflow.build is not None and facts.tensorflow.build.is_cuda_build
    assert any(p.endswith("nvidia/cudnn/lib") for p in facts.tensorflow.runpath)  # read from its ELF run path
    assert len(cuda_check._pins(facts.tensorflow.requires)) >= 10
    found = diagnose(facts)
    first = first_cause(found)
    assert first is not None and first.cause == "driver", [f.line for f in found]
    assert first.line.startswith("no NVIDIA driver: no /dev/nvidia* and no /proc/driver/nvidia/version")
    assert {"libcuda", "libraries", "gpu 9.0"} <= {f.cause for f in found}


def test_search_follows_the_loaders_order() -> None:
    order = [("/ld", "LD_LIBRARY_PATH's entry 1"), ("/site/nvidia/cublas/lib", "TensorFlow's run path (x)"),
             ("/usr/lib", "a system folder")]  # fmt: skip
    found = search("libcublas.so.12", order, site="/site", exists=lambda p: not p.startswith("/ld"))
    assert (found.source, found.shown, found.shadows) == (
        "TensorFlow's run path (x)",
        "nvidia/cublas/lib/libcublas.so.12",
        ("a system folder",),
    )
    first = search("libcublas.so.12", order, exists=lambda p: True)
    assert (first.source, first.shown) == ("LD_LIBRARY_PATH's entry 1", "libcublas.so.12")  # the folder never shown
    assert search("libcublas.so.12", order, exists=lambda p: False).real is None


@pytest.mark.parametrize(
    "log, cause, words",
    [
        pytest.param(
            "I dso_loader.cc:144] Could not load dynamic library 'libcuda.so.1'; dlerror: libcuda.so.1: cannot open "
            "shared object file: No such file or directory; LD_LIBRARY_PATH: /secret/lib",
            "log driver",
            "libcuda.so.1 did not load (libcuda.so.1: cannot open shared object file: No such file or directory)",
        ),
        pytest.param(
            "W dso_loader.cc:1] Could not load dynamic library 'libcudnn.so.9'; dlerror: x",
            "log libcudnn.so.9",
            "libcudnn.so.9 did not load (x): TensorFlow lists no GPU",
        ),
        pytest.param(
            "I cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
            "log cudart",
            "libcudart (the CUDA runtime, not the driver) did not load",
        ),
        pytest.param(
            "E cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: UNKNOWN ERROR (303)",
            "log cuInit",
            "cuInit failed (INTERNAL: CUDA error: UNKNOWN ERROR (303))",
        ),
        pytest.param(
            "W gpu_device.cc:1] Cannot dlopen some GPU libraries. Please make sure ...",
            "log dlopen",
            "'Cannot dlopen some GPU libraries'",
        ),
        pytest.param(
            "W gpu_device.cc:2] TensorFlow was not built with CUDA kernel binaries compatible with compute capability "
            "9.0. CUDA kernels will be jit-compiled from PTX, which could take 30 minutes or longer.",
            "log ptx",
            "kernels are jit-compiled from PTX",
        ),
        pytest.param(
            "I gpu_device.cc:3] Ignoring visible gpu device (device: 0, name: Tesla K80) with Cuda compute capability "
            "3.7. The minimum required Cuda capability is 6.0.",
            "log ignored",
            "visible gpu device (device: 0",
        ),
        pytest.param(
            "I cuda_diagnostics.cc:145] kernel driver does not appear to be running on this host (vm)",
            "log kernel driver",
            "the kernel driver does not appear to be running",
        ),
    ],
)
def test_tensorflows_log_lines_map_to_the_same_causes(log, cause, words) -> None:
    (finding,) = log_findings("I0000 noise\n" + log + "\nI0000 more noise")
    assert finding.cause == cause and words in finding.line, finding.line
    assert "secret" not in finding.line


def test_the_probe_runs_in_a_fresh_process_and_says_the_loaders_error(tmp_path) -> None:
    bad = tmp_path / "libcudart.so.12"
    bad.write_text("not a library")
    found = Found("cudart", "libcudart.so.12", str(bad), "a system folder", "/x/libcudart.so.12")
    facts = CudaFacts("Linux", "x86_64", driver=Driver(Found("cuda", "libcuda.so.1")), libraries=(found,))
    probed = cuda_facts._probed(facts, {"PATH": os.environ.get("PATH", "")})
    error = probed.libraries[0].error
    assert error is not None and error.startswith("/x/libcudart.so.12: ") and str(tmp_path) not in error
    assert probed.driver is not None and probed.driver.cu_init is None  # no libcuda: nothing asked of it


def test_build_info_and_pins_parse_within_bounds() -> None:
    assert cuda_facts.parse_build_info("build_info = {'is_cuda_build': True, 'cuda_version': '12.5.1'}") == BuildInfo(
        True, "12.5.1"
    )
    assert cuda_facts.parse_build_info("build_info = [") is None  # not Python
    assert cuda_facts.parse_build_info("build_info = open('x')") is None  # never run
    assert cuda_facts.parse_build_info("x = 1\n" * 20_000) is None  # read at most 64 KiB, no build_info there
    assert cuda_check._pins(['nvidia-cudnn-cu12<10.0,>=9.3.0.75; extra == "and-cuda"', "numpy>=1.26"]) == [
        ("nvidia-cudnn-cu12", [("<", (10, 0)), (">=", (9, 3, 0, 75))])
    ]
    assert cuda_check._version("2.27.7.post1") == (2, 27, 7) and cuda_check._version("x") == ()


@pytest.mark.parametrize("module", [cuda_check, cuda_facts, cuda_libraries, cuda_log, cuda_probe])
def test_docstring_examples(module) -> None:
    import doctest

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


GPU_CHECK = pathlib.Path(__file__).parents[2] / "benchmarks" / "gpu_check"


def test_the_kept_copy_of_tensorflow_2_21_is_what_its_wheel_says() -> None:
    """The GPU check script's copy of TensorFlow 2.21.0 (build info, and-cuda pins, run paths) against its wheel."""
    import json

    copy = json.loads((GPU_CHECK / "tensorflow-2.21.0.json").read_text())
    here = cuda_facts.read_tensorflow()
    assert copy["distribution"] == ["tensorflow", "2.21.0"]
    assert copy["build_info"]["cuda_compute_capabilities"] == ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]
    assert len(cuda_check._pins(copy["requires"])) == 12 and "nvidia/cusolver/lib" in copy["runpath"]
    if dict(here.distributions).get("tensorflow") == "2.21.0":  # the leg with TensorFlow 2.21.0: the copy is exact
        assert here.build == BuildInfo(True, "12.5.1", "9", tuple(copy["build_info"]["cuda_compute_capabilities"]))
        assert [r for r in here.requires if "and-cuda" in r] == copy["requires"]
        assert [os.path.relpath(p, here.site) for p in here.runpath if p.startswith(here.site)] == copy["runpath"]


def test_the_gpu_check_script_runs_the_diagnosis_for_the_kept_tensorflow() -> None:
    """Here: no driver, NVML answering as the real H200; TensorFlow read from the copy, not from the venv."""
    fake = str(pathlib.Path(__file__).parents[1] / "pynvml_fake")
    env = {**os.environ, "PYTHONPATH": fake, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, str(GPU_CHECK / "check_cuda.py")], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "TensorFlow (from the copy): tensorflow 2.21.0, CUDA 12.5.1" in out
    assert "driver: 580.159.04 (NVML), CUDA 13.0" in out and "GPU 0: NVIDIA H200, compute capability 9.0" in out
    assert "  error: no NVIDIA driver: no /dev/nvidia*" in out
