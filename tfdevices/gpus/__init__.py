"""GPUs, without TensorFlow: the NVML adapter, the CUDA mask, the inventory and its
discovery, the spec grammar, selection and reservation.

Nothing in this wing imports TensorFlow, and it imports only from :mod:`tfdevices.core`.
"""

from tfdevices.core.units import format_bytes, parse_memory
from tfdevices.gpus.discovery import discover
from tfdevices.gpus.inventory import GpuInfo, Inventory
from tfdevices.gpus.reservation import Holder, Reservation, holders, reserve
from tfdevices.gpus.selection import Decision, Selection, select
from tfdevices.gpus.spec import DeviceSpec, parse_spec

__all__ = [
    # discover
    "discover",
    "Inventory",
    "GpuInfo",
    # select
    "parse_spec",
    "DeviceSpec",
    "select",
    "Selection",
    "Decision",
    "parse_memory",
    "format_bytes",
    # reserve
    "reserve",
    "Reservation",
    "holders",
    "Holder",
]
