"""Measure: how fast each device really is, for weighting ranks by speed.

:func:`measure_devices` runs a short float32 matmul chain and a copy on every
visible TensorFlow device and returns achieved FLOP/s and bytes/s, next to the
device's peak where it is known (:data:`PEAKS`). The figures feed
:func:`tfdevices.gpu_for_rank` (``mapping="weighted"``).

Only :func:`measure_devices` imports TensorFlow; :func:`peak_for` and the
dataclass are pure.

>>> peak_for("NVIDIA A100-SXM4-80GB")
(19500000000000.0, 32000000000.0)
>>> DeviceSpeed("GPU:0", flops=9.75e12, peak_flops=19.5e12).flops_efficiency
0.5
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

from tfdevices.core.devices import default_devices, logical_devices, short_name
from tfdevices.core.errors import InputError
from tfdevices.core.units import format_bytes, parse_memory
from tfdevices.gpus.inventory import Inventory
from tfdevices.mends.tf_import import import_tf

__all__ = ["measure_devices", "DeviceSpeed"]

# name fragment -> (FP32 peak FLOP/s without tensor cores, host link bytes/s (PCIe, one direction)).
# From the vendors' data sheets. TensorFlow runs float32 matmuls as TF32 on Ampere and later,
# so a measured figure can pass the FP32 peak there.
PEAKS: tuple[tuple[str, float, float], ...] = (
    ("H200", 67e12, 64e9),
    ("H100 PCIe", 51e12, 64e9),
    ("H100", 67e12, 64e9),
    ("L40S", 91.6e12, 32e9),
    ("RTX 4090", 82.6e12, 32e9),
    ("RTX 3090", 35.6e12, 32e9),
    ("A100", 19.5e12, 32e9),
    ("A10", 31.2e12, 32e9),
    ("L4", 30.3e12, 32e9),
    ("V100", 15.7e12, 16e9),
    ("T4", 8.1e12, 16e9),
)


def peak_for(name: str) -> tuple[float, float] | None:
    """The (FP32 FLOP/s, host link bytes/s) peak of a GPU by its NVML name, or ``None``.

    >>> peak_for("Tesla T4")
    (8100000000000.0, 16000000000.0)
    >>> peak_for("Intel Xeon") is None
    True
    """
    for fragment, flops, link in PEAKS:
        if fragment.lower() in name.lower():
            return flops, link
    return None


@dataclasses.dataclass(frozen=True)
class DeviceSpeed:
    """Measured speed of one TensorFlow device.

    Attributes:
        device: the TensorFlow name (``"GPU:0"``, ``"CPU:1"``).
        gpu_index: the GPU's NVML index, when an inventory maps it.
        name: the GPU's name, when known.
        flops: achieved float32 matmul FLOP/s.
        copy_bytes_per_s: achieved copy bytes/s: host -> device for a GPU, an in-memory
            copy (read + write) for a CPU.
        copy_kind: ``"host->device"`` or ``"in-memory"``.
        matmul_size: N of the N x N matmuls.
        matmuls: how many were chained.
        matmul_seconds: their wall time.
        copy_bytes: bytes moved by the copy.
        copy_seconds: its wall time.
        peak_flops: the device's FP32 peak, when known.
        peak_copy_bytes_per_s: its host link's peak, when known.
    """

    device: str
    gpu_index: int | None = None
    name: str = ""
    flops: float = 0.0
    copy_bytes_per_s: float = 0.0
    copy_kind: str = ""
    matmul_size: int = 0
    matmuls: int = 0
    matmul_seconds: float = 0.0
    copy_bytes: int = 0
    copy_seconds: float = 0.0
    peak_flops: float | None = None
    peak_copy_bytes_per_s: float | None = None

    @property
    def flops_efficiency(self) -> float | None:
        """Achieved / peak FLOP/s (``None`` when the peak is unknown)."""
        return None if not self.peak_flops else self.flops / self.peak_flops

    @property
    def copy_efficiency(self) -> float | None:
        """Achieved / peak copy bytes/s (``None`` when the peak is unknown)."""
        return None if not self.peak_copy_bytes_per_s else self.copy_bytes_per_s / self.peak_copy_bytes_per_s

    def row(self) -> str:
        """One line: device, GFLOP/s (and % of peak), copy rate (and % of peak)."""
        flops = f"{self.flops / 1e9:,.1f} GFLOP/s"
        if self.flops_efficiency is not None:
            flops += f" ({self.flops_efficiency:.0%} of {(self.peak_flops or 0) / 1e12:g} TFLOP/s FP32)"
        copy = f"{format_bytes(int(self.copy_bytes_per_s))}/s {self.copy_kind}"
        if self.copy_efficiency is not None:
            copy += f" ({self.copy_efficiency:.0%} of {(self.peak_copy_bytes_per_s or 0) / 1e9:g} GB/s)"
        who = self.device + ("" if self.gpu_index is None else f" (NVML {self.gpu_index}, {self.name})")
        return f"{who}: matmul {flops}; copy {copy}"


def measure_devices(
    devices: Sequence[str] | None = None,
    *,
    size: int = 1024,
    matmuls: int = 8,
    copy_bytes: int | str = "64MiB",
    inventory: Inventory | None = None,
) -> tuple[DeviceSpeed, ...]:
    """Measures matmul FLOP/s and copy bytes/s on each device.

    Each figure is the best of three timed runs after one warm-up, so a first
    call's compilation and allocation do not count.

    Args:
        devices: TensorFlow device names; ``None``: every logical GPU, or every logical
            CPU when there is no GPU.
        size: N of the N x N float32 matmuls.
        matmuls: how many chained matmuls one timed run does.
        copy_bytes: bytes to copy (``"64MiB"`` or an int).
        inventory: maps ``GPU:n`` to NVML indices and names (for peaks and weighting).

    Returns:
        One :class:`DeviceSpeed` per device, in the order given.

    Raises:
        InputError: a size or count is not a positive whole number, or a device is unknown.
        TensorFlowMissingError: TensorFlow is not installed.
    """
    for what, value in (("size", size), ("matmuls", matmuls)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(
                f"measure_devices({what}={value!r}): expected a whole number >= 1.", hint="e.g. size=1024, matmuls=8."
            )
    nbytes = parse_memory(copy_bytes, what="copy_bytes")
    tf = import_tf()
    logical = list(logical_devices())
    if devices is None:
        devices = list(default_devices(logical))
    names = [short_name(d, what="device") for d in devices]
    unknown = [d for d in names if d not in logical]
    if unknown:
        raise InputError(
            f"measure_devices: unknown device(s) {unknown}; TensorFlow has {logical}.",
            hint="name devices as TensorFlow lists them, e.g. 'GPU:0'.",
        )
    return tuple(_measure_one(tf, d, size, matmuls, nbytes, inventory) for d in names)


def _best_of(runs: int, fn: Any) -> float:
    fn()  # warm-up: tracing, allocation
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _measure_one(
    tf: Any, device: str, size: int, matmuls: int, nbytes: int, inventory: Inventory | None
) -> DeviceSpeed:
    with tf.device(device):
        a = tf.random.normal((size, size), dtype=tf.float32)
        b = tf.random.normal((size, size), dtype=tf.float32) / math.sqrt(size)

    @tf.function
    def chain(x: Any, y: Any) -> Any:
        with tf.device(device):
            for _ in range(matmuls):
                x = tf.matmul(x, y)
            return tf.reduce_sum(x[:1, :1])

    matmul_s = _best_of(3, lambda: chain(a, b).numpy())
    elements = max(1, nbytes // 4)
    is_gpu = device.startswith("GPU:")
    with tf.device("CPU:0"):
        host = tf.ones((elements,), dtype=tf.float32)

    def copy() -> None:
        with tf.device(device):
            moved = tf.identity(host) if is_gpu else host * 1.0  # H2D copy, or read + write in memory
            tf.reduce_sum(moved[:1]).numpy()

    copy_s = _best_of(3, copy)
    moved_bytes = elements * 4 * (1 if is_gpu else 2)
    gpu = _gpu_for(device, inventory)
    peak = peak_for(gpu.name) if gpu is not None else None
    return DeviceSpeed(
        device=device,
        gpu_index=None if gpu is None else gpu.index,
        name="" if gpu is None else gpu.name,
        flops=2.0 * size**3 * matmuls / matmul_s,
        copy_bytes_per_s=moved_bytes / copy_s,
        copy_kind="host->device" if is_gpu else "in-memory",
        matmul_size=size,
        matmuls=matmuls,
        matmul_seconds=matmul_s,
        copy_bytes=moved_bytes,
        copy_seconds=copy_s,
        peak_flops=None if peak is None else peak[0],
        peak_copy_bytes_per_s=None if peak is None else peak[1],
    )


def _gpu_for(device: str, inventory: Inventory | None) -> Any:
    if inventory is None or not device.startswith("GPU:"):
        return None
    return next((g for g in inventory.gpus if g.tf_name and short_name(g.tf_name) == device), None)
