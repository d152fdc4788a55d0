"""GPUs, without TensorFlow: the NVML adapter, the CUDA mask, the inventory and its
discovery, the spec grammar, selection and reservation.

Nothing in this wing imports TensorFlow, and it imports only from :mod:`tfdevices.core`.
"""

# Each name is loaded from its module on first use: `tfdevices list` (discovery) stays clear of selection,
# reservation and what they import.
from __future__ import annotations

from tfdevices.core.lazy import lazy_names

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from tfdevices.core.units import format_bytes, parse_memory
    from tfdevices.gpus.discovery import discover
    from tfdevices.gpus.gpuinfo import GpuInfo
    from tfdevices.gpus.inventory import Inventory
    from tfdevices.gpus.reservation import Holder, Reservation, holders, reserve
    from tfdevices.gpus.selection import Decision, Selection, select
    from tfdevices.gpus.spec import DeviceSpec, parse_spec

# public name -> the module that defines it
_EXPORTS = {
    "discover": "tfdevices.gpus.discovery",
    "Inventory": "tfdevices.gpus.inventory",
    "GpuInfo": "tfdevices.gpus.inventory",
    "parse_spec": "tfdevices.gpus.spec",
    "DeviceSpec": "tfdevices.gpus.spec",
    "select": "tfdevices.gpus.selection",
    "Selection": "tfdevices.gpus.selection",
    "Decision": "tfdevices.gpus.selection",
    "parse_memory": "tfdevices.core.units",
    "format_bytes": "tfdevices.core.units",
    "reserve": "tfdevices.gpus.reservation",
    "Reservation": "tfdevices.gpus.reservation",
    "holders": "tfdevices.gpus.reservation",
    "Holder": "tfdevices.gpus.reservation",
}

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


__getattr__, __dir__ = lazy_names(globals(), _EXPORTS)
