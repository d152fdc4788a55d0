"""On a GPU machine without TensorFlow: could TensorFlow 2.21 use these GPUs, and if not, why.

The lent GPU machines carry no TensorFlow (too large to bring there) but do carry a driver, NVML and the CUDA wheels
JAX and PyTorch install. This script runs the same diagnosis as ``tfdevices doctor --cuda`` for TensorFlow 2.21.0's
CUDA 12 build, read from a copy of its build info, ``and-cuda`` pins and run paths kept beside it
(``tensorflow-2.21.0.json``), as though that wheel were installed in this Python's site-packages: the driver and
NVML as they are, the CUDA wheels found here, where the loader would find each library TensorFlow loads, what
loading each says in a fresh process, and one line per cause with its fix.

Run from the repository root (or with the package on ``PYTHONPATH``), with ``nvidia-ml-py`` installed::

    python3 benchmarks/gpu_check/check_cuda.py [--tensorflow benchmarks/gpu_check/tensorflow-2.21.0.json] [--json]

It prints the facts it read (no environment value: variables are named, not echoed), then the findings. It needs
no GPU to run: on a machine without one it says so, as ``tfdevices doctor --cuda`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from tfdevices.gpus import cuda_check, cuda_facts  # noqa: E402  (the repository first on the path)

HERE = os.path.dirname(os.path.abspath(__file__))


def tensorflow_from(path: str, site: str) -> cuda_facts.TfInstall:
    """The TensorFlow the copy describes, as if installed in ``site``."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    info = data["build_info"]
    build = cuda_facts.BuildInfo(
        is_cuda_build=bool(info["is_cuda_build"]),
        cuda_version=info.get("cuda_version"),
        cudnn_version=info.get("cudnn_version"),
        capabilities=tuple(info.get("cuda_compute_capabilities", ())),
    )
    name, version = data["distribution"]
    return cuda_facts.TfInstall(
        distributions=((name, version),),
        build=build,
        requires=tuple(data["requires"]),
        runpath=tuple(os.path.join(site, p) for p in data["runpath"]),
        site=site,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensorflow", default=os.path.join(HERE, "tensorflow-2.21.0.json"))
    parser.add_argument("--json", action="store_true", help="the findings as JSON")
    args = parser.parse_args(argv)
    site = sysconfig.get_paths()["purelib"]
    facts = cuda_facts.gather(tensorflow=tensorflow_from(args.tensorflow, site))
    findings = cuda_check.diagnose(facts)
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2))
        return 0
    tf = facts.tensorflow
    build = tf.build
    print(f"TensorFlow (from the copy): {' '.join(tf.distributions[0])}, CUDA {build.cuda_version if build else '?'}")
    print(f"  code for: {', '.join(build.capabilities) if build else '?'}")
    cuda = facts.nvml_cuda or (facts.driver.version if facts.driver else None)
    shown = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else "unknown"
    print(
        f"driver: {facts.nvml_driver or 'none'} (NVML), CUDA {shown}; {facts.proc_driver or 'no /proc/driver/nvidia'}"
    )
    print(f"device nodes: {', '.join(facts.device_nodes) or 'none'}")
    for gpu in facts.gpus:
        cc = gpu.compute_capability
        print(f"GPU {gpu.key}: {gpu.name}, compute capability {cc[0]}.{cc[1]}" if cc else f"GPU {gpu.key}: {gpu.name}")
    if not facts.gpus:
        print(f"no GPU: {facts.nvml_reason or 'NVML lists none'}")
    print(f"CUDA wheels here: {', '.join(f'{n} {v}' for n, v in facts.wheels) or 'none'}"
          + (" (and nvidia/cu13/lib)" if facts.cu13_folder else ""))  # fmt: skip
    driver = facts.driver
    if driver is not None:
        where = f"{driver.found.source}: {driver.found.shown}" if driver.found.real else "not found"
        print(f"libcuda.so.1: {where}; cuInit {driver.cu_init}, cuDriverGetVersion {driver.version}, "
              f"{driver.count} device(s)")  # fmt: skip
    for lib in facts.libraries + facts.later:
        where = f"{lib.source}: {lib.shown}" if lib.real else "found nowhere the loader looks"
        print(f"{lib.soname}: {where}" + (f"; does not load ({lib.error})" if lib.error else ""))
    print(f"\nfindings ({len(findings)}):")
    for f in findings:
        print(f"  {f.severity}: {f.line}")
    if not findings:
        print("  none: nothing stands between this TensorFlow and these GPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
