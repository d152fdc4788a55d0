"""tfdevices: make TensorFlow use the right devices, and prove it.

``import tfdevices`` is light: it never imports TensorFlow. Each public name is
loaded from its module on first use, and TensorFlow is imported only inside the
functions that need it (configure, build, capture ...).

The flow: ``discover -> select -> reserve -> configure -> build -> run -> verify -> log -> decide``.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing for `import tfdevices`
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.2.0"

# public name -> module that defines it (relative to this package)
_EXPORTS: dict[str, str] = {
    # errors
    "TfDevicesError": "core.errors",
    "InputError": "core.errors",
    "UsageError": "core.errors",
    "SpecError": "core.errors",
    "MemorySizeError": "core.errors",
    "EnvVarError": "core.errors",
    "InventoryFileError": "core.errors",
    "SelectionError": "core.errors",
    "TfConfigError": "core.errors",
    "LaunchError": "core.errors",
    "PlanError": "core.errors",
    "RuntimeInitializedError": "core.errors",
    "TensorFlowMissingError": "core.errors",
    "PlacementAssertionError": "core.errors",
    "PlacementChangedError": "core.errors",
    "ReservationError": "core.errors",
    "StrategyError": "core.errors",
    # discover / select / configure
    "parse_memory": "core.units",
    "format_bytes": "core.units",
    "GpuInfo": "gpus.inventory",
    "Inventory": "gpus.inventory",
    "discover": "gpus.discovery",
    "parse_spec": "gpus.spec",
    "DeviceSpec": "gpus.spec",
    "select": "gpus.selection",
    "Selection": "gpus.selection",
    "configure": "runtime",
    "RuntimeConfig": "runtime",
    # build
    "build_strategy": "strategy",
    "StrategyInfo": "strategy",
    "device_scope": "scopes",
    "assign": "scopes",
    "plan_layers": "layers.plan",
    "LayerPlan": "layers.plan",
    "place_layers": "layers.place",
    # verify
    "capture": "verify",
    "PlacementReport": "verify",
    "read_profile": "verify",
    # many processes
    "launch_info": "jobs.env",
    "LaunchInfo": "jobs.env",
    "gpu_for_rank": "jobs.ranks",
    "measure_devices": "measure",
    "DeviceSpeed": "measure",
    "reserve": "gpus.reservation",
    "Reservation": "gpus.reservation",
    "GpuAssignment": "jobs.ranks",
    "stall_timeout": "jobs.reporting",
    # decide
    "advise": "decide.advise",
    "Finding": "decide.advise",
    "tune": "decide.tune",
    "TuneResult": "decide.tune",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 (a list of _EXPORTS' names, built once)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        from importlib.util import find_spec  # noqa: PLC0415 (lazy: only when a name is missing)

        if not name.startswith("_") and find_spec(f"tfdevices.{name}") is not None:
            return importlib.import_module(f"tfdevices.{name}")  # a submodule: tfdevices.runtime
        raise AttributeError(f"module 'tfdevices' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tfdevices.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
