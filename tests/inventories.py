"""Inventories made of data, for selection tests (no hardware)."""

from __future__ import annotations

from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory

GiB = 1 << 30
_CC = {"V100": (7, 0), "T4": (7, 5)}

# (name, total GiB, free GiB, utilization): a shared 8-GPU box of mixed cards and loads
EIGHT = [
    ("A100-SXM4-80GB", 80, 78, 0.00),
    ("A100-SXM4-80GB", 80, 10, 0.95),
    ("A100-SXM4-40GB", 40, 39, 0.05),
    ("A100-SXM4-40GB", 40, 20, 0.50),
    ("V100-SXM2-32GB", 32, 31, 0.00),
    ("V100-SXM2-32GB", 32, 2, 1.00),
    ("T4", 16, 15, 0.10),
    ("T4", 16, 15, None),
]


def gpu(
    index: int,
    name: str,
    total: int,
    free: int,
    util: float | None,
    *,
    ordinal: int | None = None,
    mig_index: int | None = None,
    uuid: str | None = None,
) -> GpuInfo:
    ordinal = index if ordinal is None else ordinal
    return GpuInfo(
        index=index,
        name=name,
        uuid=uuid or f"GPU-{index:02d}aa{index:02d}-0000",
        pci_bus_id=f"00000000:{index + 10:02X}:00.0",
        memory_total=total * GiB,
        memory_used=(total - free) * GiB,
        memory_free=free * GiB,
        utilization=util,
        compute_capability=_CC.get(name.split("-")[0], (8, 0)),
        processes=0,
        mig_index=mig_index,
        cuda_ordinal=ordinal if ordinal >= 0 else None,
        tf_name=f"/GPU:{ordinal}" if ordinal >= 0 else None,
    )


def eight(visible: list[int] | None = None) -> Inventory:
    """8 GPUs; ``visible`` lists the NVML indices CUDA sees (default: all), in mask order."""
    order = list(range(8)) if visible is None else visible
    gpus = tuple(gpu(i, *spec, ordinal=order.index(i) if i in order else -1) for i, spec in enumerate(EIGHT))
    mask = None if visible is None else ",".join(map(str, visible))
    return Inventory(gpus=gpus, source="nvml", cuda_visible_devices=mask)


def mig() -> Inventory:
    """GPU 0 split into two MIG instances, GPU 1 whole."""
    gpus = (
        gpu(0, "A100 MIG 3g.20gb", 20, 19, None, ordinal=0, mig_index=0, uuid="MIG-aaaa-0000"),
        gpu(0, "A100 MIG 3g.20gb", 20, 5, None, ordinal=1, mig_index=1, uuid="MIG-bbbb-1111"),
        gpu(1, "A100-SXM4-40GB", 40, 30, 0.2, ordinal=2),
    )
    return Inventory(gpus=gpus, source="nvml")


def empty() -> Inventory:
    return Inventory(source="none", reason="NVML library not found (no NVIDIA driver)")
