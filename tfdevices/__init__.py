"""tfdevices: make TensorFlow use the right devices, and prove it.

``import tfdevices`` is light: it never imports TensorFlow. Each public name is
loaded from its module on first use, and TensorFlow is imported only inside the
functions that need it (configure, build, capture ...).

The flow: ``discover -> select -> reserve -> configure -> build -> run -> verify -> log -> decide``.

Public: the names in ``__all__`` of this package and of the modules in :data:`PUBLIC_MODULES`, one
group per stage (``tfdevices.gpus`` ... ``tfdevices.decide``) and ``tfdevices.errors``. Every other
module is internal and may change.
"""

from __future__ import annotations

import importlib

from tfdevices.core.lazy import lazy_names

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing for `import tfdevices`
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.4.0"

#: The public modules, by stage of the flow. The public surface is ``__all__`` of this package (what most
#: programs call, and the errors they catch most) and of each of these; every other module is internal.
PUBLIC_MODULES: tuple[str, ...] = (
    "tfdevices.gpus",  # discover, select, reserve
    "tfdevices.runtime",  # configure
    "tfdevices.strategy",  # build
    "tfdevices.scopes",
    "tfdevices.layers",
    "tfdevices.jobs",  # run
    "tfdevices.training",
    "tfdevices.mends",
    "tfdevices.flags",
    "tfdevices.verify",  # verify
    "tfdevices.tensorboard",  # log
    "tfdevices.tensorboard.views",
    "tfdevices.decide",  # decide
    "tfdevices.decide.examples",
    "tfdevices.measure",
    "tfdevices.errors",  # every error tfdevices raises
)

# public name -> public module that has it (relative to this package); each is in that module's __all__ too
_EXPORTS: dict[str, str] = {
    # errors: those programs catch most (every error: tfdevices.errors)
    "TfDevicesError": "errors",
    "InputError": "errors",
    "SpecError": "errors",
    "SelectionError": "errors",
    "RuntimeInitializedError": "errors",
    "PlacementAssertionError": "errors",
    "PlacementChangedError": "errors",
    # discover / select / reserve
    "discover": "gpus",
    "Inventory": "gpus",
    "GpuInfo": "gpus",
    "parse_spec": "gpus",
    "DeviceSpec": "gpus",
    "select": "gpus",
    "Selection": "gpus",
    "parse_memory": "gpus",
    "format_bytes": "gpus",
    "reserve": "gpus",
    "Reservation": "gpus",
    # configure
    "configure": "runtime",
    "RuntimeConfig": "runtime",
    # build
    "build_strategy": "strategy",
    "StrategyInfo": "strategy",
    "device_scope": "scopes",
    "assign": "scopes",
    "plan_layers": "layers",
    "LayerPlan": "layers",
    "place_layers": "layers",
    # run: many processes
    "launch_info": "jobs",
    "LaunchInfo": "jobs",
    "gpu_for_rank": "jobs",
    "GpuAssignment": "jobs",
    "stall_timeout": "jobs",
    "slow_rank_report": "jobs",
    "read_ranks": "jobs",
    "JobRanks": "jobs",
    "launch": "jobs",
    "LaunchConfig": "jobs",
    # verify
    "capture": "verify",
    "PlacementReport": "verify",
    "read_profile": "verify",
    # decide
    "measure_devices": "measure",
    "DeviceSpeed": "measure",
    "advise": "decide",
    "Finding": "decide",
    "tune": "decide",
    "TuneConfig": "decide",
    "TuneResult": "decide",
}
# still reachable as tfdevices.NAME for programs written before tfdevices.errors, but not public here
_FORMER: dict[str, str] = dict.fromkeys(
    (
        "UsageError",
        "MemorySizeError",
        "EnvVarError",
        "InventoryFileError",
        "TfConfigError",
        "LaunchError",
        "PlanError",
        "TensorFlowMissingError",
        "ReservationError",
        "StrategyError",
    ),
    "errors",
)

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 (a list of _EXPORTS' names, built once)


def _not_exported(name: str) -> Any:
    """A former name (kept in :mod:`tfdevices.errors` now) or a submodule (``tfdevices.runtime``)."""
    former = _FORMER.get(name)
    if former is not None:
        return getattr(importlib.import_module(f"tfdevices.{former}"), name)
    from importlib.util import find_spec  # noqa: PLC0415 (lazy: only when a name is missing)

    if not name.startswith("_") and find_spec(f"tfdevices.{name}") is not None:
        return importlib.import_module(f"tfdevices.{name}")
    raise AttributeError(f"module 'tfdevices' has no attribute {name!r}")


__getattr__, __dir__ = lazy_names(globals(), {n: f"tfdevices.{m}" for n, m in _EXPORTS.items()}, _not_exported)
