"""tfdevices: make TensorFlow use the right devices, and prove it.

``import tfdevices`` is light: it never imports TensorFlow. Each public name is
loaded from its module on first use, and TensorFlow is imported only inside the
functions that need it (configure, build, capture ...).

The flow: ``discover -> select -> reserve -> configure -> build -> run -> verify -> log``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it (relative to this package)
_EXPORTS: dict[str, str] = {
    # errors
    "TfDevicesError": "errors", "InputError": "errors", "SpecError": "errors",
    "MemorySizeError": "errors", "EnvVarError": "errors", "InventoryFileError": "errors",
    "SelectionError": "errors", "TfConfigError": "errors", "LaunchError": "errors",
    "PlanError": "errors", "RuntimeInitializedError": "errors",
    "TensorFlowMissingError": "errors", "PlacementAssertionError": "errors",
    "ReservationError": "errors", "StrategyError": "errors",
    # discover / select / configure
    "parse_memory": "units", "format_bytes": "units",
    "GpuInfo": "inventory", "Inventory": "inventory", "discover": "inventory",
    "parse_spec": "spec", "DeviceSpec": "spec",
    "select": "selection", "Selection": "selection",
    "configure": "runtime", "RuntimeConfig": "runtime",
    # build
    "build_strategy": "strategy", "StrategyInfo": "strategy",
    "device_scope": "scopes", "assign": "scopes",
    "plan_layers": "partition", "LayerPlan": "partition",
    "place_layers": "keras_placement",
    # verify
    "capture": "placement", "PlacementReport": "placement",
    # many processes
    "launch_info": "launch", "LaunchInfo": "launch", "gpu_for_rank": "ranks",
    "measure_devices": "measure", "DeviceSpeed": "measure",
    "reserve": "reservation", "Reservation": "reservation",
    "GpuAssignment": "ranks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        if not name.startswith("_") and importlib.util.find_spec(f"tfdevices.{name}") is not None:
            return importlib.import_module(f"tfdevices.{name}")  # a submodule: tfdevices.runtime
        raise AttributeError(f"module 'tfdevices' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tfdevices.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
