"""TensorFlow's own log of a GPU start, read as the causes :mod:`tfdevices.gpus.cuda_check` names.

The last resort, where the checks without TensorFlow find nothing: ``tfdevices doctor`` starts TensorFlow in a
fresh process, verbose (``TF_CPP_MIN_LOG_LEVEL=0``, its loader at VLOG 1), and :func:`log_findings` reads the
lines it knows. TensorFlow prints ``LD_LIBRARY_PATH``'s value on its loader's lines: that part is never kept.
"""

from __future__ import annotations

from tfdevices.gpus.cuda_check import ERROR, WARNING, Finding

_MAX_LOG = 1 << 20


def log_findings(text: str) -> tuple[Finding, ...]:
    """TensorFlow's own log of a verbose start (``TF_CPP_MIN_LOG_LEVEL=0``, dso_loader at VLOG 1) as findings.

    Lines it maps: "Could not load dynamic library 'NAME'; dlerror: ...", "Could not find cuda drivers",
    "failed call to cuInit", "Ignoring visible gpu device", "jit-compiled from PTX" and "Cannot dlopen some GPU
    libraries". The text after ``LD_LIBRARY_PATH`` on a line (TensorFlow prints the variable) is never kept.

    >>> [f.cause for f in log_findings("W dso_loader.cc:1] Could not load dynamic library 'libcudnn.so.9'; "
    ...                                "dlerror: libcudnn.so.9: cannot open shared object file; LD_LIBRARY_PATH: /x")]
    ['log libcudnn.so.9']
    """
    out: dict[str, Finding] = {}
    for raw in text[-_MAX_LOG:].splitlines()[-20_000:]:
        line = raw.split("LD_LIBRARY_PATH", 1)[0].rstrip("; ")[:2000]
        finding = _log_line(line)
        if finding and finding.cause not in out:
            out[finding.cause] = finding
    return tuple(out.values())


def _log_line(line: str) -> Finding | None:
    said = "TensorFlow's log"
    if "Could not load dynamic library '" in line:
        name = line.split("Could not load dynamic library '", 1)[1].split("'", 1)[0][:64]
        error = line.split("dlerror:", 1)[1].strip() if "dlerror:" in line else "no reason given"
        if name.startswith("libcuda.so"):
            return Finding("log driver", ERROR, f"{said}: {name} did not load ({error})", "the driver's library is "
                           "missing: CUDA cannot start", "install the NVIDIA driver, or in a container: docker run "
                           "--gpus all")  # fmt: skip
        return Finding(f"log {name}", ERROR, f"{said}: {name} did not load ({error})", "TensorFlow lists no GPU",
                       "pip install 'tensorflow[and-cuda]' (the version installed)")  # fmt: skip
    if "Could not find cuda drivers" in line:
        return Finding(
            "log cudart",
            ERROR,
            f"{said}: 'Could not find cuda drivers on your machine'",
            "libcudart (the CUDA runtime, not the driver) did not load",
            "pip install 'tensorflow[and-cuda]'",
        )
    if "failed call to cuInit" in line:
        code = line.split("failed call to cuInit:", 1)[-1].strip()[:120]
        return Finding("log cuInit", ERROR, f"{said}: cuInit failed ({code})", "CUDA did not start",
                       "tfdevices doctor (the driver section of its cuda lines)")  # fmt: skip
    if "kernel driver does not appear to be running" in line:
        return Finding(
            "log kernel driver",
            ERROR,
            f"{said}: the kernel driver does not appear to be running",
            "CUDA cannot start",
            "install the NVIDIA driver, or in a container: docker run --gpus all",
        )
    if "Ignoring visible gpu device" in line:
        return Finding(
            "log ignored",
            ERROR,
            f"{said}: {line.split('Ignoring', 1)[1][:200].strip()}",
            "TensorFlow ignores a GPU older than its oldest code",
            "a TensorFlow built for this GPU",
        )
    if "jit-compiled from PTX" in line:
        return Finding("log ptx", WARNING, f"{said}: kernels are jit-compiled from PTX", "the first start is slow",
                       "export CUDA_CACHE_MAXSIZE=4294967296")  # fmt: skip
    if "Cannot dlopen some GPU libraries" in line:
        return Finding(
            "log dlopen",
            ERROR,
            f"{said}: 'Cannot dlopen some GPU libraries'",
            "a CUDA library did not load: TensorFlow lists no GPU",
            "tfdevices doctor (its library lines name which)",
        )
    return None
