"""Configure: the one module that sets environment variables or calls ``tf.config``.

Order is enforced, not documented. :func:`configure` masks GPUs with
``CUDA_VISIBLE_DEVICES`` (and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so CUDA numbers
match ``nvidia-smi``) when TensorFlow is not imported yet, or with
``tf.config.set_visible_devices`` when it is; then memory growth, memory limits
and logical splits. Once TensorFlow's runtime has started, a different
configuration raises :class:`RuntimeInitializedError` naming the call that started
it (when tfdevices saw it happen); the same configuration again is a no-op.

>>> cfg = configure(virtual_devices=2)            # doctest: +SKIP
>>> cfg.logical_devices                            # on a machine without GPUs
('CPU:0', 'CPU:1')
"""

from __future__ import annotations

import dataclasses
import os
import sys
import traceback
from typing import Any

from tfdevices.errors import InputError, RuntimeInitializedError
from tfdevices.inventory import Inventory
from tfdevices.selection import Selection, select
from tfdevices.units import format_bytes, parse_memory

_MIB = 1024 * 1024
_SPLIT_MARGIN = 0.95  # of a GPU's free memory shared out when splitting without memory_limit


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """What :func:`configure` applied.

    Attributes:
        mask: the ``CUDA_VISIBLE_DEVICES`` applied (``None``: visibility unchanged).
        method: how visibility was applied: ``"environment"`` (before TensorFlow was imported),
            ``"tf.config"`` (``set_visible_devices`` after import) or ``"unchanged"``.
        gpu_map: ``(NVML key, TensorFlow name)`` for each GPU TensorFlow will use.
        memory_growth: as set on every visible GPU (``None``: TensorFlow's default).
        memory_limit: bytes per logical GPU (``None``: no limit).
        virtual_devices: logical devices per physical device (``None``: no split).
        split: what was split: ``"GPU"``, ``"CPU"`` or ``None``.
        logical_devices: the TensorFlow devices the runtime will have (``"GPU:0"``, ``"CPU:1"`` ...).
        notes: what was not applied, and why.
    """

    mask: str | None
    method: str
    gpu_map: tuple[tuple[str, str], ...]
    memory_growth: bool | None
    memory_limit: int | None
    virtual_devices: int | None
    split: str | None
    logical_devices: tuple[str, ...]
    notes: tuple[str, ...] = ()
    _request: tuple[Any, ...] = dataclasses.field(default=(), repr=False, compare=False)

    def tf_name_for(self, index: int | str) -> str:
        """The TensorFlow name (``"GPU:0"``) of the GPU with this NVML index (or MIG key)."""
        key = str(index)
        for nvml, tf_name in self.gpu_map:
            if nvml == key:
                return tf_name
        used = ", ".join(n for n, _ in self.gpu_map) or "none"
        raise InputError(f"GPU {key!r} is not configured for TensorFlow; configured NVML GPUs: {used}.",
                         hint="select it before configure(), e.g. configure(select('0,1')).")

    def table(self) -> str:
        rows = [("mask", f"CUDA_VISIBLE_DEVICES={self.mask} (via {self.method})" if self.mask else "unchanged"),
                ("GPUs (NVML -> TF)", ", ".join(f"{n} -> {t}" for n, t in self.gpu_map) or "none"),
                ("memory growth", "default" if self.memory_growth is None else str(self.memory_growth)),
                ("memory limit", "none" if self.memory_limit is None else format_bytes(self.memory_limit)),
                ("logical split", f"{self.split} x {self.virtual_devices}" if self.split else "none"),
                ("logical devices", ", ".join(self.logical_devices))]
        rows += [("note", n) for n in self.notes]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


_CURRENT: RuntimeConfig | None = None
_STARTED_BY: str | None = None


def current() -> RuntimeConfig | None:
    """The configuration :func:`configure` applied in this process, if any."""
    return _CURRENT


def runtime_started() -> bool:
    """Whether TensorFlow's runtime (its eager context) has started in this process."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    ctx = context.context_safe()
    return ctx is not None and ctx._context_handle is not None  # pylint: disable=protected-access


def configure(selection: Selection | object = None, *, memory_growth: bool | None = None,
              memory_limit: int | str | None = None, virtual_devices: int | None = None,
              inventory: Inventory | None = None) -> RuntimeConfig:
    """Configures TensorFlow's devices, in the only order that works.

    Args:
        selection: a :class:`Selection`, a spec for :func:`tfdevices.select` (``"auto:2"``),
            or ``None`` to leave visibility as it is.
        memory_growth: allocate GPU memory as needed instead of all at once (set on every
            visible GPU: TensorFlow refuses mixed settings).
        memory_limit: cap per logical GPU (``"4GiB"`` or bytes).
        virtual_devices: split each visible GPU, or the CPU when there is no GPU, into N
            logical devices. A GPU split without ``memory_limit`` shares 95% of its free memory.
        inventory: used when ``selection`` is a spec.

    Returns:
        The :class:`RuntimeConfig` applied.

    Raises:
        InputError: an argument is malformed, or two settings conflict.
        RuntimeInitializedError: TensorFlow's runtime already started with another configuration.
    """
    growth, limit, split = _validate(memory_growth, memory_limit, virtual_devices)
    sel = selection if isinstance(selection, Selection) or selection is None else select(selection, inventory)
    request = (None if sel is None else sel.cuda_visible_devices, growth, limit, split)
    if _CURRENT is not None and _CURRENT._request == request:
        return _CURRENT
    if runtime_started():
        raise _initialized_error(request)
    return _apply(sel, growth, limit, split, request)


def _validate(growth: object, limit: object, split: object) -> tuple[bool | None, int | None, int | None]:
    if growth is not None and not isinstance(growth, bool):
        raise InputError(f"memory_growth={growth!r}: must be True, False or None.", hint="pass a bool.")
    limit_bytes = None if limit is None else parse_memory(limit, what="memory_limit")
    if limit_bytes is not None and limit_bytes < _MIB:
        raise InputError(f"memory_limit={limit!r}: below 1 MiB, TensorFlow's unit for limits.",
                         hint="write e.g. '2GiB'.")
    if split is not None and (isinstance(split, bool) or not isinstance(split, int) or split < 1):
        raise InputError(f"virtual_devices={split!r}: must be a whole number >= 1.",
                         hint="write e.g. 4 to split the device into 4 logical devices.")
    if growth and (limit_bytes is not None or split is not None):
        raise InputError("memory_growth=True cannot be combined with memory_limit or virtual_devices: "
                         "TensorFlow refuses memory growth on a device with logical configurations.",
                         hint="use memory_limit (fixed share) or memory_growth (grow as needed), not both.")
    return growth, limit_bytes, split


def _apply(sel: Selection | None, growth: bool | None, limit: int | None, split: int | None,
           request: tuple[Any, ...]) -> RuntimeConfig:
    global _CURRENT
    method = "unchanged"
    tf_imported = "tensorflow" in sys.modules
    if sel is not None and not tf_imported:
        os.environ.update(sel.env())
        method = "environment"
    from tfdevices._tf import import_tf

    tf = import_tf()
    _trace_runtime_start()
    gpus = tf.config.list_physical_devices("GPU")
    keys = [g.key for g in sel.gpus] if sel is not None else [str(i) for i in range(len(gpus))]
    if sel is not None and tf_imported:
        gpus = _set_visible(tf, sel, gpus)
        method = "tf.config"
    notes: list[str] = []
    if growth is not None:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, growth)
    split_of = None
    if gpus and (limit is not None or split is not None):
        shares = _gpu_limits(sel, gpus, limit, split or 1)
        for gpu, share in zip(gpus, shares):
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=share // _MIB)] * (split or 1))
        if len(set(shares)) == 1:
            limit = shares[0]
        split_of = "GPU" if split else None
    elif split is not None:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * split)
        split_of = "CPU"
    if not gpus and limit is not None:
        notes.append("memory_limit not applied: no GPU is visible")
        limit = None
    per_gpu = split if split_of == "GPU" else 1
    gpu_names = tuple(f"GPU:{i}" for i in range(len(gpus) * per_gpu))
    cpus = tuple(f"CPU:{i}" for i in range(split if split_of == "CPU" else 1))
    config = RuntimeConfig(
        mask=None if sel is None else sel.cuda_visible_devices, method=method,
        gpu_map=tuple((k, f"GPU:{i * per_gpu}") for i, k in enumerate(keys[:len(gpus)])),
        memory_growth=growth, memory_limit=limit, virtual_devices=split if split_of else None,
        split=split_of, logical_devices=gpu_names + cpus, notes=tuple(notes), _request=request)
    _CURRENT = config
    return config


def _set_visible(tf: Any, sel: Selection, gpus: list[Any]) -> list[Any]:
    """``tf.config.set_visible_devices`` for the selected GPUs (TensorFlow already imported)."""
    wanted = []
    for gpu in sel.gpus:
        if gpu.cuda_ordinal is None or gpu.cuda_ordinal >= len(gpus):
            raise InputError(
                f"GPU {gpu.key} was selected but TensorFlow (already imported) sees {len(gpus)} GPU(s) "
                f"under CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}.",
                hint="call tfdevices.configure() before importing TensorFlow, or select among the visible GPUs.")
        wanted.append(gpus[gpu.cuda_ordinal])
    wanted.sort(key=gpus.index)
    tf.config.set_visible_devices(wanted, "GPU")
    return wanted


def _gpu_limits(sel: Selection | None, gpus: list[Any], limit: int | None, split: int) -> list[int]:
    if limit is not None:
        return [limit] * len(gpus)
    free = [g.memory_free for g in sel.gpus] if sel is not None else []
    if len(free) != len(gpus) or not all(free):
        raise InputError(f"virtual_devices={split}: splitting a GPU needs each part's memory, and the free "
                         "memory of the visible GPUs is unknown.",
                         hint="pass memory_limit (per logical GPU), e.g. memory_limit='4GiB'.")
    return [int(f * _SPLIT_MARGIN) // split for f in free]


def _trace_runtime_start() -> None:
    """Records where TensorFlow's runtime starts, so a late configure() can say which call did it."""
    from tensorflow.python.eager import context

    original = context.Context.ensure_initialized
    if getattr(original, "_tfdevices_traced", False):
        return

    def ensure_initialized(self: Any) -> Any:
        global _STARTED_BY
        if _STARTED_BY is None and self._context_handle is None:  # pylint: disable=protected-access
            _STARTED_BY = _user_frame()
        return original(self)

    ensure_initialized._tfdevices_traced = True  # type: ignore[attr-defined]
    context.Context.ensure_initialized = ensure_initialized


def _user_frame() -> str:
    """The innermost caller outside TensorFlow, Keras and tfdevices: the line that started the runtime."""
    skip = (os.sep + "tensorflow" + os.sep, os.sep + "keras" + os.sep, os.sep + "tf_keras" + os.sep,
            os.path.dirname(os.path.abspath(__file__)) + os.sep, "<frozen ")
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not any(s in frame.filename for s in skip):
            return f"{frame.filename}:{frame.lineno} ({(frame.line or frame.name).strip()})"
    return "inside TensorFlow"


def _initialized_error(request: tuple[Any, ...]) -> RuntimeInitializedError:
    where = f"it was started by {_STARTED_BY}" if _STARTED_BY else (
        "something in this process started it (creating a tensor, listing logical devices or building a model)")
    applied = f" The configuration in force: mask={_CURRENT.mask}, growth={_CURRENT.memory_growth}, " \
              f"limit={_CURRENT.memory_limit}, split={_CURRENT.virtual_devices}." if _CURRENT else ""
    return RuntimeInitializedError(
        f"cannot configure devices (mask={request[0]}, memory_growth={request[1]}, memory_limit={request[2]}, "
        f"virtual_devices={request[3]}): TensorFlow's runtime has already started; {where}.{applied}",
        hint="call tfdevices.configure() first thing, before any TensorFlow op, model or device listing "
             "(or set CUDA_VISIBLE_DEVICES before starting Python).")
