"""Which devices and ops a report query means: TensorFlow device names and op-name globs, checked.

>>> device_matcher("CPU:*")("CPU:1"), device_matcher("worker:1/GPU:0")("worker:1/GPU:0")
(True, True)
>>> name_matcher("dense_2/*")("model/dense_2/MatMul"), name_matcher("/model/*")("tape/model/x")
(True, False)
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable

from tfdevices.core.errors import InputError, SpecError

_DEVICE_PATTERN = re.compile(
    r"^(?:/job:(?P<job>[\w*-]+)(?:/replica:\d+)?(?:/task:(?P<task>\d+|\*))?)?"
    r"(?:/?(?:device:)?)(?P<type>[A-Za-z_*]+):(?P<index>\d+|\*)$"
)
_REPORT_TASK = re.compile(r"^([\w*-]+):(\d+|\*)/")
_DEVICE_HINT = "name a TensorFlow device: 'GPU:1', '/device:CPU:1', 'worker:1/GPU:0', or a pattern such as 'CPU:*'."


def device_matcher(device: object, *, what: str = "device") -> Callable[[str], bool]:
    """A predicate on report device names for a TF logical name or pattern ("CPU:*").

    Raises:
        SpecError: ``device`` is a physical GPU index or not a device name.
    """
    if isinstance(device, (bool, int)) or (isinstance(device, str) and device.strip().isdigit()):
        raise SpecError(
            f"{what} {device!r} is a physical GPU index (nvidia-smi numbering), but placement reports "
            "name TensorFlow's logical devices.",
            hint=f"write the TensorFlow name, e.g. 'GPU:{str(device).strip()}' (masking renumbers GPUs: "
            "tfdevices.select shows which logical name an NVML index gets).",
        )
    if isinstance(device, str):  # a report's own name for another task's device: "worker:1/GPU:0"
        device = _REPORT_TASK.sub(r"/job:\1/task:\2/", device.strip())
    match = _DEVICE_PATTERN.match(device) if isinstance(device, str) else None
    if match is None:
        raise SpecError(f"{what} {device!r} is not a TensorFlow device name or pattern.", hint=_DEVICE_HINT)
    short = f"{match['type'].upper()}:{match['index']}"
    if match["job"] is None or match["job"] == "localhost":
        return lambda name: fnmatch.fnmatchcase(name.rsplit("/", 1)[-1], short)
    task = f"{match['job']}:{match['task'] or 0}"
    return lambda name: fnmatch.fnmatchcase(name, f"{task}/{short}")


def name_matcher(pattern: str | Iterable[str]) -> Callable[[str], bool]:
    """Matches op names by glob at any scope boundary: "dense_2/*" matches "model/dense_2/MatMul".

    A pattern that starts with "/" matches from the start of the name only:
    "/model/*" matches "model/dense_2/MatMul" but not "gradient_tape/model/dense_2/MatMul".
    """
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    if not patterns or not all(isinstance(p, str) and p.strip("/") for p in patterns):
        raise InputError(
            f"ops={pattern!r}: expected a glob pattern or a list of them.",
            hint="e.g. ops='dense_2/*' or ops=['*MatMul*', '*BiasAdd*'].",
        )
    anchored = [p[1:] for p in patterns if p.startswith("/")]
    anywhere = [p for p in patterns if not p.startswith("/")]

    def matches(name: str) -> bool:
        if any(fnmatch.fnmatchcase(name, p) for p in anchored):
            return True
        parts = name.split("/")
        suffixes = ["/".join(parts[i:]) for i in range(len(parts))]
        return any(fnmatch.fnmatchcase(s, p) for p in anywhere for s in suffixes)

    return matches
