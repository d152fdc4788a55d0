"""Device names.

tfdevices reads two kinds of device name, and no string can be both:

* a physical GPU by its NVML index, as ``nvidia-smi`` shows it: the int ``2`` or the
  string ``"2"`` (``"0:1"`` for MIG instance 1 of GPU 0);
* a TensorFlow logical device: ``"GPU:1"``, ``"CPU:0"``, in any of TensorFlow's
  spellings (``"/GPU:1"``, ``"/device:GPU:1"``, ``"gpu:1"``,
  ``"/job:localhost/replica:0/task:0/device:GPU:1"``).

:func:`short_name` turns TensorFlow's spellings into the short form ``"GPU:1"``
used in every report.

>>> short_name("/job:localhost/replica:0/task:0/device:GPU:1")
'GPU:1'
>>> short_name("cpu:0")
'CPU:0'
>>> is_logical_name("GPU:1"), is_logical_name("1")
(True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tfdevices.core.errors import SpecError
from tfdevices.core.lazy import LazyPattern
from tfdevices.core.tf_door import import_tf

_LOGICAL = LazyPattern(
    r"^(?:/job:(?P<job>[\w-]+)(?:/replica:\d+)?(?:/task:(?P<task>\d+))?)?"
    r"(?:/?(?:device:)?)(?P<type>[A-Za-z_]+):(?P<index>\d+)$"
)
_HINT = "name a TensorFlow device as 'GPU:0' or 'CPU:1', or a physical GPU by its nvidia-smi index ('2')."


def is_logical_name(name: object) -> bool:
    """Whether ``name`` is a TensorFlow logical device name (not an NVML index)."""
    return isinstance(name, str) and _LOGICAL.match(name.strip()) is not None


def short_name(device: str, *, what: str = "device") -> str:
    """Returns ``TYPE:N`` for any TensorFlow spelling of a device.

    Args:
        device: e.g. ``"/job:worker/replica:0/task:1/device:CPU:0"``.
        what: the input's name for error messages.

    Raises:
        SpecError: ``device`` is not a TensorFlow device name.
    """
    match = _LOGICAL.match(device.strip()) if isinstance(device, str) else None
    if match is None:
        raise SpecError(f"{what} {device!r} is not a TensorFlow device name.", hint=_HINT)
    return f"{match['type'].upper()}:{int(match['index'])}"


def task_of(device: str) -> str | None:
    """``"worker:1"`` for ``"/job:worker/replica:0/task:1/device:CPU:0"``; ``None`` when the name has no job."""
    match = _LOGICAL.match(device.strip())
    if match is None or match["job"] is None:
        return None
    return f"{match['job']}:{match['task'] or 0}"


def full_name(device: str) -> str:
    """``"/device:GPU:1"`` for any spelling: the form ``tf.device`` accepts everywhere."""
    return "/device:" + short_name(device)


def default_devices(logical: Sequence[str]) -> tuple[str, ...]:
    """Every GPU, else every CPU: what a computation uses when no device is named.

    >>> default_devices(["CPU:0", "GPU:0", "GPU:1"]), default_devices(["CPU:0", "CPU:1"])
    (('GPU:0', 'GPU:1'), ('CPU:0', 'CPU:1'))
    """
    gpus = tuple(d for d in logical if d.startswith("GPU:"))
    return gpus or tuple(d for d in logical if d.startswith("CPU:"))


def tfdevices_name(tf_name: str, gpu_map: Mapping[str, str]) -> str:
    """The NVML key of a TensorFlow GPU name when ``gpu_map`` (NVML key -> TF name) knows it, else the name.

    >>> tfdevices_name("GPU:1", {"2": "GPU:0", "5": "GPU:1"}), tfdevices_name("CPU:0", {})
    ('5', 'CPU:0')
    """
    return next((k for k, v in gpu_map.items() if v == tf_name), tf_name)


def logical_devices() -> tuple[str, ...]:
    """TensorFlow's logical devices by short name (``"CPU:0"``, ``"GPU:1"``); this starts the runtime."""
    return tuple(short_name(d.name) for d in import_tf().config.list_logical_devices())


def resolve_devices(
    devices: object, *, logical: Sequence[str], gpu_map: Mapping[str, str], unseen: Callable[[str], str] | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Translates tfdevices device names to TensorFlow's (pure).

    Args:
        devices: a device or a list of them: NVML indices (``1``, ``"1"``, ``"0:1"``)
            or TensorFlow logical names (``"CPU:1"``).
        logical: the logical devices TensorFlow has (``"CPU:0"``, ``"GPU:0"`` ...).
        gpu_map: NVML key -> TensorFlow name, for the GPUs TensorFlow sees after masking.
        unseen: the HINT for a GPU TensorFlow does not see, from its NVML key (the caller knows
            whether it exists and whether TensorFlow can still be configured).

    Returns:
        ``(tfdevices names, TensorFlow names)``, in the order given.

    Raises:
        SpecError: a name is malformed, repeated, names a GPU TensorFlow cannot see,
            or a logical device that does not exist.

    >>> resolve_devices([3, "CPU:1"], logical=["CPU:0", "CPU:1", "GPU:0"], gpu_map={"3": "GPU:0"})
    (('3', 'CPU:1'), ('GPU:0', 'CPU:1'))
    """
    items = list(devices) if isinstance(devices, (list, tuple)) else [devices]
    logical = tuple(short_name(d) for d in logical)
    names: list[str] = []
    tf_names: list[str] = []
    for item in items:
        name, tf_name = _resolve_one(item, logical, gpu_map, unseen)
        if tf_name in tf_names:
            raise SpecError(
                f"device {item!r} is named twice (as TensorFlow's {tf_name}) in {items!r}.",
                hint="name each device once.",
            )
        names.append(name)
        tf_names.append(tf_name)
    return tuple(names), tuple(tf_names)


def _resolve_one(
    item: object, logical: tuple[str, ...], gpu_map: Mapping[str, str], unseen: Callable[[str], str] | None = None
) -> tuple[str, str]:
    if isinstance(item, bool) or not isinstance(item, (int, str)):
        raise SpecError(
            f"device {item!r}: expected an NVML index (1, '1') or a TensorFlow name ('CPU:1').",
            hint="name a physical GPU by its nvidia-smi index, or a logical device as 'CPU:1'.",
        )
    key = str(item).strip()
    if isinstance(item, int) or key.replace(":", "", 1).isdigit():
        if isinstance(item, int) and item < 0:
            raise SpecError(
                f"device {item!r}: an NVML index cannot be negative.", hint="use the index nvidia-smi shows."
            )
        if key not in gpu_map:
            seen = ", ".join(f"{k} -> {v}" for k, v in gpu_map.items()) or "none"
            raise SpecError(
                f"device {item!r}: TensorFlow does not see the GPU with NVML index {key}; "
                f"GPUs it sees (NVML -> TF): {seen}.",
                hint=unseen(key)
                if unseen is not None
                else f"select it before TensorFlow starts: configure(select('{key}')) or --gpus={key}.",
            )
        tf_name = short_name(gpu_map[key])
        if tf_name not in logical:
            raise SpecError(
                f"device {item!r}: GPU {key} should be TensorFlow's {tf_name}, but TensorFlow has "
                f"{', '.join(logical)}.",
                hint="install the CUDA build of TensorFlow (pip install 'tensorflow[and-cuda]') and "
                "check the driver with nvidia-smi.",
            )
        return key, tf_name
    if not is_logical_name(key):
        raise SpecError(
            f"device {item!r} is neither an NVML index nor a TensorFlow device name.",
            hint="name a physical GPU by its nvidia-smi index ('1'), or a logical device as 'CPU:1'.",
        )
    tf_name = short_name(key)
    if tf_name not in logical:
        raise SpecError(
            f"device {item!r}: TensorFlow has no device {tf_name}; it has {', '.join(logical)}.",
            hint="pick one of those, or split the CPU with configure(virtual_devices=N).",
        )
    nvml = next((k for k, v in gpu_map.items() if short_name(v) == tf_name), None)
    return (nvml or tf_name), tf_name
