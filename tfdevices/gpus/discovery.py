"""discover(): the machine's GPUs from a saved listing, NVML, or (on request) TensorFlow.

Order of sources:

1. ``TFDEVICES_INVENTORY=FILE`` (non-empty): the listing saved by
   ``tfdevices list --json``, with its CUDA/TensorFlow names recomputed for
   this process's ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``;
2. otherwise NVML, through :mod:`tfdevices.gpus.nvml`;
3. ``source="tensorflow"``: TensorFlow's own list (slow; no memory figures).

A machine without GPU is not an error: the inventory is empty, ``source`` is
``"none"`` and ``reason`` says why.

>>> inv = discover(env={}, nvml_module=None)
>>> inv.source == "nvml" or (inv.source, bool(inv.reason)) == ("none", True)
True
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tfdevices.core.errors import InputError, InventoryFileError
from tfdevices.core.record_class import replace
from tfdevices.core.tf_door import import_tf
from tfdevices.gpus import nvml, processes, topology as topo, visibility
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import INVENTORY_ENV, Inventory

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the listing path
if TYPE_CHECKING:
    from typing import Any


KNOWN_SOURCES = ("nvml", "tensorflow")


def discover(
    *,
    env: Mapping[str, str] | None = None,
    source: str = "nvml",
    nvml_module: Any = None,
    topology: bool = True,
    users: bool = False,
    proc: str | None = None,
    sensors: bool = True,
) -> Inventory:
    """Returns this machine's GPUs with their NVML, CUDA and TensorFlow names, without starting TensorFlow.

    Args:
        env: the environment (``TFDEVICES_INVENTORY``, ``CUDA_VISIBLE_DEVICES``,
            ``CUDA_DEVICE_ORDER``); defaults to ``os.environ``.
        source: ``"nvml"`` or ``"tensorflow"``.
        nvml_module: a ``pynvml``-like module to read instead of ``pynvml`` (tests).
        topology: read how the GPUs are wired (NVLinks, PCIe, CPU/NUMA affinity).
        users: name each GPU process's user and command from ``proc``.
        proc: the proc file system's root (default ``/proc``; tests pass a directory).
        sensors: read what gpustat shows besides memory and load (temperature, fan, power,
            P-state, clocks, ECC errors) and each GPU's processes (``tfdevices select`` and
            ``topo`` need none of them: ``None`` then).

    Returns:
        An :class:`Inventory`; empty with ``source="none"`` and a ``reason`` when
        there is no GPU.

    Raises:
        InputError: ``source`` is unknown.
        InventoryFileError: ``TFDEVICES_INVENTORY`` names a missing or invalid file.
        EnvVarError: ``CUDA_VISIBLE_DEVICES`` or ``CUDA_DEVICE_ORDER`` is malformed,
            or the mask names GPUs that do not exist.

    This machine's GPUs are ``tfdevices.discover()``; here, a saved listing stands in for them
    (``tfdevices list`` prints ``table()``):

    >>> import tfdevices
    >>> node = tfdevices.discover(env={"TFDEVICES_INVENTORY": "tests/data/node-8gpu.json"})
    >>> len(node.gpus), node.gpus[0].name, node.loaded_from
    (8, 'A100-SXM4-80GB', 'tests/data/node-8gpu.json')
    """
    if source not in KNOWN_SOURCES:
        raise InputError(
            f"discovery source {source!r} is unknown; known sources: {', '.join(repr(s) for s in KNOWN_SOURCES)}.",
            hint="use source='nvml' (fast, default) or source='tensorflow'.",
        )
    env = os.environ if env is None else env
    path = env.get(INVENTORY_ENV)
    if path:
        return from_file(path, env)
    if source == "tensorflow":
        return from_tensorflow(env)
    snap = nvml.snapshot(nvml_module, topology=topology, sensors=sensors or users)
    owners = processes.describe(_pids(snap), proc=proc) if users else None
    return from_nvml(snap, env, owners=owners)


def _pids(snap: nvml.NvmlSnapshot) -> list[int]:
    return [p.pid for d in snap.devices for g in [d.gpu, *(m.gpu for m in d.mig)] for p in g.process_list or ()]


def from_file(path: str, env: Mapping[str, str]) -> Inventory:
    """Loads a saved listing and recomputes its visibility for ``env``.

    Raises:
        InventoryFileError: the file is missing or not an inventory; the message
            names ``TFDEVICES_INVENTORY``.
        EnvVarError: the masking variables are malformed or name GPUs the listing lacks.
    """
    try:
        inventory = Inventory.load(path, shown_as=f"the file {INVENTORY_ENV} names")
    except InventoryFileError as err:
        raise InventoryFileError(
            err.message, hint=f"{err.hint} Or unset {INVENTORY_ENV} to read this machine."
        ) from None
    return visibility.apply(inventory, env)


def from_nvml(
    snap: nvml.NvmlSnapshot, env: Mapping[str, str], owners: Mapping[int, tuple[str | None, str | None]] | None = None
) -> Inventory:
    """Builds the inventory from an NVML snapshot (pure).

    Args:
        snap: what :func:`tfdevices.gpus.nvml.snapshot` returned.
        env: the masking variables.
        owners: pid -> (user, command), from :func:`tfdevices.gpus.processes.describe`.

    Returns:
        The inventory; when NVML found nothing, empty with ``source="none"``.

    Raises:
        EnvVarError: the masking variables are malformed (only their syntax is
            checked when there is no GPU) or name GPUs that do not exist.

    >>> from tfdevices.gpus.nvml import NvmlSnapshot, NvmlDevice
    >>> snap = NvmlSnapshot(devices=(NvmlDevice(GpuInfo(index=0, name="A100", uuid="GPU-8f2a")),))
    >>> from_nvml(snap, {"CUDA_VISIBLE_DEVICES": "0"}).gpus[0].tf_name
    '/GPU:0'
    """
    gpus: list[GpuInfo] = []
    mig_ids: dict[str, visibility.MigIds] = {}
    for dev in snap.devices:
        gpus.append(_with_owners(dev.gpu, owners))
        for mig in dev.mig:
            gpus.append(_with_owners(mig.gpu, owners))
            mig_ids[mig.gpu.key] = visibility.MigIds(dev.gpu.uuid, mig.gpu_instance_id, mig.compute_instance_id)
    inventory = Inventory(
        gpus=tuple(gpus),
        source="nvml" if gpus else "none",
        reason=snap.reason,
        driver_version=snap.driver_version,
        notes=snap.notes,
        topology=topo.from_nvml(snap),
    )
    return visibility.apply(inventory, env, mig_ids=mig_ids)


def _with_owners(gpu: GpuInfo, owners: Mapping[int, tuple[str | None, str | None]] | None) -> GpuInfo:
    """The GPU with each process's user and command from ``owners`` (pid -> (user, command))."""
    if not owners or not gpu.process_list:
        return gpu
    procs = tuple(
        replace(p, user=owners[p.pid][0], command=owners[p.pid][1]) if p.pid in owners else p for p in gpu.process_list
    )
    return replace(gpu, process_list=procs)


def from_tensorflow(env: Mapping[str, str]) -> Inventory:
    """Lists GPUs through TensorFlow (imports it: seconds and hundreds of MiB).

    TensorFlow sees only what ``CUDA_VISIBLE_DEVICES`` leaves, so each GPU's
    ``index`` is its TensorFlow number, not its NVML index, and its memory is
    unknown (0).

    Raises:
        TensorFlowMissingError: TensorFlow is not installed.
        EnvVarError: the masking variables are malformed.
    """
    visibility.parse_device_order(env.get(visibility.ORDER_ENV))
    visibility.parse_visible_devices(env.get(visibility.VISIBLE_ENV))
    tf = import_tf()
    gpus = []
    for n, device in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(device)
        cc = details.get("compute_capability")
        gpus.append(
            GpuInfo(
                index=n,
                name=str(details.get("device_name", device.name)),
                uuid="",
                compute_capability=None if cc is None else (int(cc[0]), int(cc[1])),
                cuda_ordinal=n,
                tf_name=f"/GPU:{n}",
            )
        )
    common: dict[str, Any] = dict(
        cuda_visible_devices=env.get(visibility.VISIBLE_ENV), cuda_device_order=env.get(visibility.ORDER_ENV)
    )
    if not gpus:
        cuda = tf.test.is_built_with_cuda()
        why = "" if cuda else "; this TensorFlow build has no CUDA support"
        masked = "" if visibility.VISIBLE_ENV not in env else f"; {visibility.VISIBLE_ENV} is set"
        return Inventory(source="none", reason=f"TensorFlow {tf.__version__} lists no GPU{why}{masked}", **common)
    notes = (
        (
            "TensorFlow reports no memory figures (shown as 0) and no NVML index: "
            "indices are TensorFlow's own, after masking; use source='nvml' for both."
        ),
    )
    return Inventory(gpus=tuple(gpus), source="tensorflow", notes=notes, **common)
