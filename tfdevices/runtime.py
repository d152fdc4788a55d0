"""Configure: the one module that sets environment variables or calls ``tf.config``.

Order is enforced, not documented. :func:`configure` masks GPUs with
``CUDA_VISIBLE_DEVICES`` (and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so CUDA numbers
match ``nvidia-smi``) when TensorFlow is not imported yet, or with
``tf.config.set_visible_devices`` when it is; then memory growth, memory limits
and logical splits. Once TensorFlow's runtime has started, a different
configuration raises :class:`RuntimeInitializedError` naming the call that started
it (when tfdevices saw it happen); the same configuration again is a no-op.

:func:`plan_runtime` decides everything without touching TensorFlow (so the GPU
paths are tested on machines without GPUs); ``configure`` carries the plan out.

>>> from tfdevices.gpus.gpuinfo import GpuInfo
>>> a100 = GpuInfo(index=3, name="A100", uuid="GPU-3", memory_free=40 << 30, cuda_ordinal=3)
>>> plan = plan_runtime(Selection(spec="3", gpus=(a100,)), virtual_devices=2)
>>> plan.env, plan.config.gpu_map, plan.config.logical_devices
((('CUDA_VISIBLE_DEVICES', '3'), ('CUDA_DEVICE_ORDER', 'PCI_BUS_ID')), (('3', 'GPU:0'),), ('GPU:0', 'GPU:1', 'CPU:0'))
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from tfdevices.core.devices import short_name
from tfdevices.core.errors import PYTHON, EnvVarError, InputError, RuntimeInitializedError, Terms, TfDevicesError
from tfdevices.core.memory_limits import MAX_LOGICAL as _MAX_LOGICAL, MIB as _MIB, Limits, normalize_memory_limit
from tfdevices.core.tf_door import import_tf
from tfdevices.core.units import format_bytes, parse_count, short_repr
from tfdevices.gpus import cuda_check, cuda_facts
from tfdevices.gpus.discovery import discover
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import INVENTORY_ENV, Inventory
from tfdevices.gpus.selection import Selection, select
from tfdevices.jobs.env import VIRTUAL_DEVICES_ENV
from tfdevices.mends import runtime_start

__all__ = [
    "configure",
    "RuntimeConfig",
    "plan_runtime",
    "RuntimePlan",
    "current",
    "runtime_started",
    "gpu_map",
    "configure_worker",
    "use_inventory_file",
]

_SPLIT_MARGIN = 0.95  # of a GPU's free memory shared out when splitting without memory_limit
logger = logging.getLogger("tfdevices")


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """What :func:`configure` applied.

    Attributes:
        mask: the ``CUDA_VISIBLE_DEVICES`` applied (``None``: visibility unchanged).
        method: how visibility was applied: ``"environment"`` (before TensorFlow was imported),
            ``"tf.config"`` (``set_visible_devices`` after import) or ``"unchanged"``.
        gpu_map: ``(NVML key, TensorFlow name)`` for each GPU TensorFlow will use.
        memory_growth: as set on every visible GPU (``None``: TensorFlow's default).
        memory_limit: bytes per logical GPU when every one has the same (``None``: no limit, or
            limits that differ: see ``memory_limits``).
        virtual_devices: logical devices per physical device (``None``: no split).
        split: what was split: ``"GPU"``, ``"CPU"`` or ``None``.
        logical_devices: the TensorFlow devices the runtime will have (``"GPU:0"``, ``"CPU:1"`` ...).
        notes: what was not applied, and why.
        memory_limits: ``(NVML key, (bytes per logical GPU, ...))`` for each GPU given a
            logical configuration.
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
    memory_limits: tuple[tuple[str, tuple[int, ...]], ...] = ()
    _request: tuple[Any, ...] = dataclasses.field(default=(), repr=False, compare=False)

    def tf_name_for(self, index: int | str) -> str:
        """The TensorFlow name (``"GPU:0"``) of the GPU with this NVML index (or MIG key)."""
        key = str(index)
        for nvml, tf_name in self.gpu_map:
            if nvml == key:
                return tf_name
        used = ", ".join(n for n, _ in self.gpu_map) or "none"
        raise InputError(
            f"GPU {key!r} is not configured for TensorFlow; configured NVML GPUs: {used}.",
            hint="select it before configure(), e.g. configure(select('0,1')).",
        )

    def table(self) -> str:
        """What was applied, one row per setting, for people."""
        rows = [
            (
                "mask",
                f"CUDA_VISIBLE_DEVICES={self.mask} (via {self.method})"
                if self.mask
                else "unchanged"
                if self.method == "unchanged"
                else f"unchanged ({self.method})",
            ),
            ("GPUs (NVML -> TF)", ", ".join(f"{n} -> {self._names_of(n, t)}" for n, t in self.gpu_map) or "none"),
            ("memory growth", "default" if self.memory_growth is None else str(self.memory_growth)),
            ("memory limit", self._limits_text()),
            ("logical split", self._split_text()),
            ("logical devices", ", ".join(self.logical_devices)),
        ]
        rows += [("note", n) for n in self.notes]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)

    def _names_of(self, key: str, first: str) -> str:
        """``GPU:0`` or, for a GPU split into logical devices, ``GPU:0 and GPU:1``."""
        count = len(dict(self.memory_limits).get(key, ())) or 1
        start = int(first.split(":")[1])
        names = [f"GPU:{start + i}" for i in range(count)]
        return names[0] if count == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    def _split_text(self) -> str:
        if not self.split:
            return "none"
        if self.virtual_devices is not None:
            return f"{self.split} x {self.virtual_devices}"
        return ", ".join(f"GPU {key} x {len(limits)}" for key, limits in self.memory_limits)  # uneven

    def _limits_text(self) -> str:
        if self.memory_limit is not None:
            return format_bytes(self.memory_limit)
        if not self.memory_limits:
            return "none"
        derived = self._request and self._request[2] == () and self._request[3]
        return "; ".join(
            f"GPU {key}: " + " + ".join(format_bytes(b) for b in limits) for key, limits in self.memory_limits
        ) + (
            f" (not asked for: a split needs each part's memory, so {_SPLIT_MARGIN:.0%} of each GPU's free "
            f"memory is shared among its {self._request[3]} logical devices; a memory limit sets them)"
            if derived
            else ""
        )


_CURRENT: RuntimeConfig | None = None


def quiet_tensorflow_logs() -> None:
    """Turns TensorFlow's C++ INFO and WARNING lines off, unless ``TF_CPP_MIN_LOG_LEVEL`` is already set.

    Takes effect only before TensorFlow is imported: :func:`configure` and the entry points call it.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def use_inventory_file(path: str) -> Inventory:
    """Makes every later :func:`tfdevices.discover` in this process, and in the processes it
    starts, read this saved listing (``TFDEVICES_INVENTORY``), after checking that it reads.

    Returns:
        The inventory in the file.

    Raises:
        InventoryFileError: the file is missing or not an inventory.
    """
    inventory = Inventory.load(path)
    os.environ[INVENTORY_ENV] = path
    return inventory


def current() -> RuntimeConfig | None:
    """The configuration :func:`configure` applied in this process, if any."""
    return _CURRENT


def gpu_map(logical: Sequence[str], config: RuntimeConfig | None = None) -> dict[str, str]:
    """NVML key -> TensorFlow name of the GPUs: from ``config`` (default: what :func:`configure`
    applied in this process), else from :func:`tfdevices.discover` when ``logical`` has GPUs.
    """
    config = config if config is not None else _CURRENT
    if config is not None:
        return dict(config.gpu_map)
    if not any(d.startswith("GPU:") for d in logical):
        return {}
    return {g.key: short_name(g.tf_name) for g in discover().visible if g.tf_name}


def runtime_started() -> bool:
    """Whether TensorFlow's runtime (its eager context) has started in this process."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

    ctx = context.context_safe()
    return ctx is not None and ctx._context_handle is not None  # pylint: disable=protected-access


def configure(
    selection: Selection | str | None = None,
    *,
    memory_growth: bool | None = None,
    memory_limit: int | str | Sequence[int | str] | Mapping[str, int | str | Sequence[int | str]] | None = None,
    virtual_devices: int | None = None,
    inventory: Inventory | None = None,
    dry_run: bool = False,
    terms: Terms = PYTHON,
) -> RuntimeConfig:
    """Configures TensorFlow's devices, in the only order that works.

    Portable: on a machine without a GPU, ``memory_growth`` and ``memory_limit`` are
    no-ops that say so (once, and in ``notes``), and ``virtual_devices`` splits the CPU.

    Args:
        selection: a :class:`Selection`, a spec for :func:`tfdevices.select` (``"auto:2"``),
            or ``None`` to leave visibility as it is.
        memory_growth: allocate GPU memory as needed instead of all at once (set on every
            visible GPU: TensorFlow refuses mixed settings).
        memory_limit: cap per logical GPU: one size for all (``"4GiB"`` or bytes); a list of sizes, one
            logical device each, for every GPU (``["6GiB", "2GiB"]``: an uneven split); or a dict by NVML
            GPU key, each a size or a list (``{"0": "8GiB", "1": "4GiB"}``; GPUs not named keep the default).
        virtual_devices: split each visible GPU, or the CPU when there is no GPU, into N
            logical devices. A GPU split without ``memory_limit`` shares 95% of its free memory.
        inventory: used when ``selection`` is a spec, and by ``dry_run``.
        dry_run: plan only: return what would be applied (mask, split, limits, TensorFlow
            names) without touching the environment or TensorFlow, so it plans for a saved
            inventory (``TFDEVICES_INVENTORY``) on a machine without a GPU.
        terms: how messages name the settings (:data:`tfdevices.core.errors.CLI` for the command line).

    Returns:
        The :class:`RuntimeConfig` applied (or, with ``dry_run``, planned).

    Raises:
        InputError: an argument is malformed, or two settings conflict.
        RuntimeInitializedError: TensorFlow's runtime already started with another configuration.

    Two GPUs of a saved 8-GPU listing, 4 GiB each (``dry_run``: planned, not applied):

    >>> import tfdevices
    >>> node = tfdevices.Inventory.load("tests/data/node-8gpu.json")
    >>> plan = tfdevices.configure("auto:2", memory_limit="4GiB", inventory=node, dry_run=True)
    >>> plan.mask, plan.logical_devices, plan.memory_limit
    ('0,2', ('GPU:0', 'GPU:1', 'CPU:0'), 4294967296)
    """
    growth, limits, split = _validate(memory_growth, memory_limit, virtual_devices, terms)
    sel = (
        selection
        if isinstance(selection, Selection) or selection is None
        else select(selection, inventory, terms=terms)
    )
    if dry_run:
        return _dry_run(sel, growth, limits, split, inventory, terms)
    request = (None if sel is None else sel.cuda_visible_devices, growth, limits, split)
    if _CURRENT is not None and _CURRENT._request == request:
        return _CURRENT
    if runtime_started():
        raise _initialized_error(request)
    return _apply(sel, growth, limits, split)


def _dry_run(
    sel: Selection | None,
    growth: bool | None,
    limits: Limits,
    split: int | None,
    inventory: Inventory | None,
    terms: Terms,
) -> RuntimeConfig:
    """The plan for this machine's (or the saved inventory's) GPUs; nothing applied."""
    visible = None if sel is not None else (inventory if inventory is not None else discover()).visible
    plan = plan_runtime(
        sel,
        memory_growth=growth,
        memory_limit=limits or None,
        virtual_devices=split,
        tf_imported="tensorflow" in sys.modules,
        visible=visible,
        terms=terms,
    )
    env = ", ".join(f"{k}={v}" for k, v in plan.env)
    method = {
        "environment": f"dry run: nothing applied; would set {env or 'nothing'}",
        "unchanged": "dry run: nothing applied",
    }.get(plan.config.method, f"dry run: nothing applied; would use {plan.config.method}")
    return dataclasses.replace(plan.config, method=method)


def _validate(
    growth: object, limit: object, split: object, terms: Terms = PYTHON
) -> tuple[bool | None, Limits, int | None]:
    if growth is not None and not isinstance(growth, bool):
        raise InputError(f"memory_growth={growth!r}: must be True, False or None.", hint="pass a bool.")
    if split is not None and (isinstance(split, bool) or not isinstance(split, int) or not 1 <= split <= _MAX_LOGICAL):
        raise InputError(
            f"{terms.setting('virtual_devices', split)}: must be a whole number from 1 to {_MAX_LOGICAL}.",
            hint=f"write e.g. {terms.setting('virtual_devices', 4)} to split the device into 4 logical devices.",
        )
    limits = normalize_memory_limit(limit, split, terms=terms)
    if growth and (limits or split is not None):
        other = terms.name("memory_limit") if limits else terms.name("virtual_devices")
        raise InputError(
            f"{terms.setting('memory_growth', True)} cannot be combined with {other}: "
            "TensorFlow refuses memory growth on a device with logical configurations.",
            hint=f"drop {terms.name('memory_growth')} to keep a fixed share, or {other} to grow as needed: not both.",
        )
    return growth, limits, split


@dataclasses.dataclass(frozen=True)
class RuntimePlan:
    """What :func:`configure` will do, decided before TensorFlow is touched (pure).

    Attributes:
        env: variables to set before TensorFlow is imported (the mask).
        visible_ordinals: CUDA ordinals for ``tf.config.set_visible_devices`` (TensorFlow
            already imported), or ``None``.
        gpu_count: physical GPUs TensorFlow will use.
        memory_growth: to set on every one of them.
        gpu_limits: for each physical GPU, bytes per logical device (``()``: no logical configuration).
        cpu_split: logical CPUs to make (``None``: no split).
        config: the :class:`RuntimeConfig` this plan gives.
    """

    env: tuple[tuple[str, str], ...]
    visible_ordinals: tuple[int, ...] | None
    gpu_count: int
    memory_growth: bool | None
    gpu_limits: tuple[tuple[int, ...], ...]
    cpu_split: int | None
    config: RuntimeConfig


def plan_runtime(
    sel: Selection | None,
    *,
    memory_growth: bool | None = None,
    memory_limit: int
    | str
    | Sequence[int | str]
    | Mapping[str, int | str | Sequence[int | str]]
    | tuple[tuple[str | None, tuple[int, ...]], ...]
    | None = None,
    virtual_devices: int | None = None,
    tf_imported: bool = False,
    gpu_count: int | None = None,
    visible: Sequence[GpuInfo] | None = None,
    terms: Terms = PYTHON,
) -> RuntimePlan:
    """Plans a configuration (pure: no environment, no TensorFlow).

    Args:
        sel: the selection to mask to, or ``None`` to keep visibility as it is.
        memory_growth: as in :func:`configure`.
        memory_limit: as in :func:`configure`, or already normalized (see :func:`normalize_memory_limit`).
        virtual_devices: as in :func:`configure`.
        tf_imported: whether TensorFlow is already imported (masking then uses ``tf.config.set_visible_devices``).
        gpu_count: GPUs TensorFlow lists; needed only when ``sel`` is ``None``.
        visible: the GPUs visible now when ``sel`` is ``None`` (a dry run): keys, free memory, total memory.
        terms: how messages name the settings.

    Returns:
        The :class:`RuntimePlan`.

    Raises:
        InputError: a GPU split needs a limit it cannot derive, or a limit names an unselected GPU or exceeds it.

    >>> plan_runtime(None, virtual_devices=2, gpu_count=0).config.logical_devices
    ('CPU:0', 'CPU:1')
    """
    gpus = _tf_ordered(sel, tf_imported) if sel is not None else tuple(visible or ())
    count = len(gpus) if sel is not None or visible is not None else gpu_count or 0
    keys = [g.key for g in gpus] if gpus or sel is not None else [str(i) for i in range(count)]
    limits_in = (
        memory_limit if _is_limits(memory_limit) else normalize_memory_limit(memory_limit, virtual_devices, terms=terms)
    )
    notes = _reordered(sel, gpus, keys)
    per_gpu: tuple[tuple[int, ...], ...] = ()
    if count and (limits_in or virtual_devices is not None):
        per_gpu = _gpu_limits(gpus, keys, limits_in, virtual_devices or 1, terms)
        notes += _check_limits(gpus, per_gpu, terms) if limits_in else []
    elif not count:
        notes += _not_applied(limits_in, memory_growth)
    method = "unchanged" if sel is None else "tf.config" if tf_imported else "environment"
    return RuntimePlan(
        env=tuple(sel.env().items()) if sel is not None and method == "environment" else (),
        visible_ordinals=_ordinals(sel) if sel is not None and method == "tf.config" else None,
        gpu_count=count,
        memory_growth=memory_growth,
        gpu_limits=per_gpu,
        cpu_split=virtual_devices if not count else None,
        config=_planned_config(sel, method, keys, per_gpu, limits_in, memory_growth, virtual_devices, notes),
    )


def _reordered(sel: Selection | None, gpus: tuple[GpuInfo, ...], keys: Sequence[str]) -> list[str]:
    """A note where TensorFlow was imported first and sees the selected GPUs in CUDA's order, not the selection's."""
    if sel is None or gpus == sel.gpus:
        return []
    note = (
        f"GPUs in CUDA's order {', '.join(keys)}, not as selected ({sel.spec}): TensorFlow was "
        "imported before configure(), and set_visible_devices cannot reorder them"
    )
    return [note]


def _not_applied(limits: Limits, memory_growth: bool | None) -> list[str]:
    """Notes for the settings asked for that apply to GPUs, where no GPU is visible."""
    notes = ["memory_limit not applied: no GPU is visible"] if limits else []
    if memory_growth is not None:
        notes.append(f"memory_growth={memory_growth} not applied: no GPU is visible")
    return notes


def _planned_config(
    sel: Selection | None,
    method: str,
    keys: Sequence[str],
    per_gpu: tuple[tuple[int, ...], ...],
    limits_in: Limits,
    memory_growth: bool | None,
    virtual_devices: int | None,
    notes: list[str],
) -> RuntimeConfig:
    """The configuration a plan applies: the mask, each GPU's TensorFlow name, the logical devices it makes.

    ``keys`` are the GPUs' NVML keys in TensorFlow's order, ``per_gpu`` the memory limit of each logical
    device made on each (empty: not split), ``limits_in`` the limits asked for.
    """
    count = len(keys)
    sizes = [len(p) or 1 for p in per_gpu] or [1] * count
    firsts = [sum(sizes[:i]) for i in range(count)]
    split = "GPU" if count and virtual_devices else "CPU" if virtual_devices else None
    flat = {b for p in per_gpu for b in p}
    uniform = len(flat) == 1 and all(per_gpu)
    cpu_split = virtual_devices if not count else None
    return RuntimeConfig(
        mask=None if sel is None else sel.cuda_visible_devices,
        method=method,
        gpu_map=tuple((k, f"GPU:{first}") for k, first in zip(keys, firsts)),
        memory_growth=memory_growth,
        memory_limit=next(iter(flat)) if uniform and limits_in else None,
        virtual_devices=virtual_devices if virtual_devices is not None else _even_split(sizes),
        split=split or ("GPU" if any(n > 1 for n in sizes) else None),
        logical_devices=tuple(f"GPU:{i}" for i in range(sum(sizes) if count else 0))
        + tuple(f"CPU:{i}" for i in range(cpu_split or 1)),
        notes=tuple(notes),
        memory_limits=tuple((k, p) for k, p in zip(keys, per_gpu) if p),
        _request=(None if sel is None else sel.cuda_visible_devices, memory_growth, limits_in, virtual_devices),
    )


def _even_split(sizes: Sequence[int]) -> int | None:
    """Logical devices per GPU when a list of limits split every GPU alike (``None``: no split, or uneven)."""
    return sizes[0] if sizes and len(set(sizes)) == 1 and sizes[0] > 1 else None


def _is_limits(value: object) -> TypeGuard[Limits]:
    """Whether ``value`` is already normalized (:data:`Limits`)."""
    return (
        isinstance(value, tuple)
        and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], tuple) for p in value)
        and bool(value)
    )


def _tf_ordered(sel: Selection, tf_imported: bool) -> tuple[GpuInfo, ...]:
    """The selected GPUs in TensorFlow's order: the mask's (as selected) before import; after it,
    ``set_visible_devices`` can only keep CUDA's order.
    """
    if not tf_imported or any(g.cuda_ordinal is None for g in sel.gpus):
        return sel.gpus
    return tuple(sorted(sel.gpus, key=lambda g: g.cuda_ordinal or 0))


def _check_limits(gpus: Sequence[GpuInfo], per_gpu: Sequence[tuple[int, ...]], terms: Terms) -> list[str]:
    """A limit past a GPU's memory is an error; past what is free now, a note."""
    notes = []
    over = [(g, sum(p)) for g, p in zip(gpus, per_gpu) if p and g.memory_total and sum(p) > g.memory_total]
    if over:
        smallest = min(g.memory_total for g, _ in over)
        fits = max(1, int(smallest * 0.9) >> 30)
        raise InputError(
            f"{terms.name('memory_limit')} asks for more memory than a GPU has: "
            + "; ".join(
                f"GPU {g.key} ({g.name}) has {format_bytes(g.memory_total)} in all, {format_bytes(asked)} asked"
                for g, asked in over
            )
            + ".",
            hint=f"keep each GPU's limits within its memory, e.g. {terms.setting('memory_limit', f'{fits}GiB')}.",
        )
    for g, shares in zip(gpus, per_gpu):
        if shares and g.memory_total and sum(shares) > g.memory_free:
            notes.append(
                f"memory limit {format_bytes(sum(shares))} on GPU {g.key} is more than its "
                f"{format_bytes(g.memory_free)} free now: other processes hold the rest"
            )
    return notes


def _ordinals(sel: Selection) -> tuple[int, ...]:
    missing = [g.key for g in sel.gpus if g.cuda_ordinal is None]
    if missing:
        raise InputError(
            f"GPU {', '.join(missing)} selected, but hidden from CUDA in this process "
            "(by its CUDA_VISIBLE_DEVICES) and TensorFlow is already imported, so the mask can no longer change.",
            hint="call tfdevices.configure() before importing TensorFlow, or select among the visible GPUs.",
        )
    return tuple(sorted(g.cuda_ordinal for g in sel.gpus if g.cuda_ordinal is not None))


def _gpu_limits(
    gpus: Sequence[GpuInfo], keys: Sequence[str], limits: Limits, split: int, terms: Terms = PYTHON
) -> tuple[tuple[int, ...], ...]:
    """Bytes per logical device for each physical GPU (``()``: leave it unconfigured)."""
    if limits and limits[0][0] is None:
        return (limits[0][1],) * len(keys)
    if limits:
        named = dict(limits)
        unknown = [str(k) for k in named if k not in keys]
        if unknown:
            raise InputError(
                f"{terms.name('memory_limit')} names GPU {', '.join(unknown)}, which is not selected; "
                f"selected: {', '.join(keys) or 'none'}.",
                hint="key the limits by the NVML index of a selected GPU.",
            )
        return tuple(named.get(k, ()) for k in keys)
    free = [g.memory_free for g in gpus]
    if len(free) != len(keys) or not all(free):
        raise InputError(
            f"{terms.setting('virtual_devices', split)}: splitting a GPU needs each part's memory, "
            "and the free memory of the visible GPUs is unknown.",
            hint=f"give the memory of each logical GPU, e.g. {terms.setting('memory_limit', '4GiB')}.",
        )
    return tuple((int(f * _SPLIT_MARGIN) // split,) * split for f in free)


def _apply(sel: Selection | None, growth: bool | None, limit: Limits, split: int | None) -> RuntimeConfig:
    """Carries out the plan: the only place that sets the environment or calls tf.config."""
    global _CURRENT
    tf_imported = "tensorflow" in sys.modules
    quiet_tensorflow_logs()
    count = None if sel is not None else len(import_tf().config.list_physical_devices("GPU"))
    plan = plan_runtime(
        sel,
        memory_growth=growth,
        memory_limit=limit or None,
        virtual_devices=split,
        tf_imported=tf_imported,
        gpu_count=count,
    )
    _say_once(plan.config.notes)
    if sel is not None and sel.gpus:
        _say_once([f.line for f in cuda_check.slow_start(cuda_facts.read_tensorflow(), sel.gpus, os.environ)])
    os.environ.update(dict(plan.env))
    tf = import_tf()
    trace_runtime_start()
    gpus = tf.config.list_physical_devices("GPU")
    if plan.visible_ordinals is not None:
        gpus = _set_visible(tf, plan.visible_ordinals, gpus)
    if len(gpus) != plan.gpu_count:
        raise _unused_gpus_error(sel, plan.gpu_count, len(gpus), dict(plan.env))
    for gpu in gpus if plan.memory_growth is not None else ():
        tf.config.experimental.set_memory_growth(gpu, plan.memory_growth)
    for gpu, shares in zip(gpus, plan.gpu_limits):
        if shares:
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=share // _MIB) for share in shares]
            )
    if plan.cpu_split:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * plan.cpu_split)
    _CURRENT = plan.config
    return plan.config


def _unused_gpus_error(sel: Selection | None, selected: int, listed: int, set_env: Mapping[str, str]) -> TfDevicesError:
    """GPUs NVML sees that TensorFlow does not list: the first cause the CUDA checks find, its fix as the HINT.

    The checks read the environment as it was before ``configure`` set its own mask (``set_env``): the mask that
    shows the selected GPUs is not a cause.
    """
    said = f"{selected} GPU(s) selected but TensorFlow lists {listed}: CUDA could not use them"
    env = {k: v for k, v in os.environ.items() if k not in set_env}
    cause = cuda_check.first_cause(cuda_check.diagnose(cuda_facts.gather(env=env, gpus=sel.gpus if sel else None)))
    if cause is None:
        return TfDevicesError(
            f"{said}; the checks without TensorFlow found no cause.",
            hint="tfdevices doctor (it starts TensorFlow verbose and reads its log); "
            "tf.sysconfig.get_build_info() shows what TensorFlow expects.",
        )
    return TfDevicesError(
        f"{said}: {cause.found}: {cause.meaning}.", hint=f"{cause.fix} (every cause: tfdevices doctor --cuda)."
    )


def _limits_words(limits: Limits) -> str:
    if not limits:
        return "None"
    return "; ".join(
        f"{'every GPU' if key is None else 'GPU ' + key}: " + " + ".join(format_bytes(b) for b in sizes)
        for key, sizes in limits
    )


_SAID: set[str] = set()


def _say_once(notes: Sequence[str]) -> None:
    """Logs each note (a setting that does not apply here) once per process."""
    for note in notes:
        if note not in _SAID:
            _SAID.add(note)
            logger.warning("tfdevices: %s", note)


def set_soft_placement(enabled: bool) -> bool:
    """Sets TensorFlow's soft device placement (process-wide); returns the previous setting.

    Soft placement lets an op with no kernel on the requested device run elsewhere
    (usually the CPU) without a word; off, such an op raises instead.
    :func:`tfdevices.device_scope` uses it for ``soft_placement=``.
    """
    if not isinstance(enabled, bool):
        raise InputError(f"soft_placement={short_repr(enabled)}: must be True or False.", hint="pass a bool.")
    tf = import_tf()
    previous = bool(tf.config.get_soft_device_placement())
    tf.config.set_soft_device_placement(enabled)
    return previous


def _set_visible(tf: Any, ordinals: tuple[int, ...], gpus: list[Any]) -> list[Any]:
    """``tf.config.set_visible_devices`` for these CUDA ordinals (TensorFlow already imported)."""
    if ordinals and ordinals[-1] >= len(gpus):
        raise InputError(
            f"CUDA ordinals {list(ordinals)} selected, but TensorFlow sees {len(gpus)} GPU(s).",
            hint="call tfdevices.configure() before importing TensorFlow.",
        )
    wanted = [gpus[i] for i in ordinals]
    tf.config.set_visible_devices(wanted, "GPU")
    return wanted


_RUN_METADATA = {"holders": 0}
_RUN_METADATA_LOCK = threading.Lock()


def hold_run_metadata() -> bool:
    """Turns TensorFlow's run metadata on for one more holder (a process-wide setting); returns whether this
    call turned it on.

    With it on, each new instantiation of a ``tf.function`` records its placed partition graphs
    (:class:`tfdevices.verify.PlacementWatch` reads them). Counted: the last
    :func:`release_run_metadata` turns it off. TensorFlow cannot say whether something else turned it
    on: a program that did so itself finds it off after the last holder lets go.
    """
    import_tf()
    from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

    with _RUN_METADATA_LOCK:
        first = _RUN_METADATA["holders"] == 0
        if first:
            context.enable_run_metadata()
        _RUN_METADATA["holders"] += 1
    return first


def run_metadata_held() -> bool:
    """Whether a tfdevices holder (:func:`hold_run_metadata`) has TensorFlow's run metadata on now."""
    with _RUN_METADATA_LOCK:
        return _RUN_METADATA["holders"] > 0


def release_run_metadata() -> None:
    """One holder of :func:`hold_run_metadata` lets go; the last turns TensorFlow's run metadata off."""
    from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

    with _RUN_METADATA_LOCK:
        _RUN_METADATA["holders"] = max(0, _RUN_METADATA["holders"] - 1)
        if _RUN_METADATA["holders"] == 0:
            context.disable_run_metadata()


def trace_runtime_start() -> None:
    """Records where TensorFlow's runtime starts, so a late configure() can say which call did it.

    :func:`configure` calls it, and so does every tfdevices call that may start the runtime
    (``build_strategy``, ``device_scope`` ...): then the line named is the user's call of it.
    The change to TensorFlow is the mend ``runtime_start`` (:mod:`tfdevices.mends.runtime_start`).
    """
    runtime_start.MEND.apply()


def unseen_gpu_hint(key: str) -> str:
    """The fix for a GPU named by NVML index that TensorFlow does not see, by why: it does not
    exist, TensorFlow started without it, or it can still be selected.
    """
    inventory = discover()
    if inventory.get(key) is None:
        has = ", ".join(g.key for g in inventory.gpus[:16]) or f"no GPU ({inventory.reason or 'none found'})"
        return (
            f"there is no GPU {key} here (GPUs: {has}); name devices TensorFlow has, e.g. "
            "devices=['CPU:0', 'CPU:1'] (configure(virtual_devices=2) splits the CPU), or devices=None for "
            "every visible device."
        )
    if runtime_started():
        return (
            f"TensorFlow's runtime started without GPU {key}; in a new process, call "
            f"tfdevices.configure(tfdevices.select('{key}')) before any TensorFlow op (or start with --gpus={key})."
        )
    return f"select it before TensorFlow starts: configure(select('{key}')) or --gpus={key}."


def _initialized_error(request: tuple[Any, ...]) -> RuntimeInitializedError:
    where = (
        f"it was started by {runtime_start.started_by()}"
        if runtime_start.started_by()
        else ("something in this process started it (creating a tensor, listing logical devices or building a model)")
    )
    applied = (
        (
            f" The configuration in force: mask={_CURRENT.mask}, growth={_CURRENT.memory_growth}, "
            f"limit={_CURRENT._limits_text()}, split={_CURRENT.virtual_devices}."
        )
        if _CURRENT
        else ""
    )
    return RuntimeInitializedError(
        f"cannot configure devices (mask={request[0]}, memory_growth={request[1]}, "
        f"memory_limit={_limits_words(request[2])}, virtual_devices={request[3]}): "
        f"TensorFlow's runtime has already started; {where}.{applied}",
        hint="call tfdevices.configure() first thing, before any TensorFlow op, model or device listing "
        "(or set CUDA_VISIBLE_DEVICES before starting Python).",
    )


def configure_worker(env: Mapping[str, str] | None = None) -> Any:
    """Applies what ``tfdevices launch`` passed to this worker, before TensorFlow starts.

    Splits the CPU (or each GPU) into ``TFDEVICES_VIRTUAL_DEVICES`` logical devices
    when set. GPU visibility needs nothing: the launcher set ``CUDA_VISIBLE_DEVICES``.

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        The :class:`~tfdevices.runtime.RuntimeConfig` applied, or ``None`` when there was nothing to do.

    Raises:
        EnvVarError: ``TFDEVICES_VIRTUAL_DEVICES`` is not a whole number >= 1.
    """
    value = (os.environ if env is None else env).get(VIRTUAL_DEVICES_ENV)
    if value is None:
        return None
    count = parse_count(value.strip(), limit=1024)
    if not count:
        raise EnvVarError(
            f"{VIRTUAL_DEVICES_ENV} is not a whole number >= 1 (ASCII digits, at most 1024).",
            hint="tfdevices launch --virtual-devices N sets it; unset it otherwise.",
        )
    return configure(virtual_devices=count)
