"""Every error tfdevices raises: one hierarchy rooted at :class:`TfDevicesError`.

A message says what was asked, what exists, and ends with a ``HINT:`` telling
the user what to do, all on one line (the command line prints it as it is).
Errors about bad input (:class:`InputError` and its subclasses) are also a
``ValueError``: code that catches ``ValueError`` catches them too.

``import tfdevices`` gives the ones most often caught (``tfdevices.TfDevicesError``,
``tfdevices.SelectionError`` ...); this module has them all.

>>> from tfdevices.errors import InputError, SpecError, TfDevicesError
>>> issubclass(SpecError, InputError) and issubclass(InputError, ValueError)
True
>>> try:
...     raise SpecError("GPU spec '9': no GPU 9; this machine has 0, 1.", hint="pick 0 or 1.")
... except TfDevicesError as err:
...     print(err)
GPU spec '9': no GPU 9; this machine has 0, 1. HINT: pick 0 or 1.
"""

from __future__ import annotations

from tfdevices.core.errors import (
    EnvVarError,
    InputError,
    InventoryFileError,
    LaunchError,
    MemorySizeError,
    PlacementAssertionError,
    PlacementChangedError,
    PlanError,
    ReservationError,
    RuntimeInitializedError,
    SelectionError,
    SpecError,
    StrategyError,
    TensorFlowMissingError,
    TfConfigError,
    TfDevicesError,
    UsageError,
)

__all__ = [
    "TfDevicesError",
    # bad input (also ValueError)
    "InputError",
    "UsageError",
    "SpecError",
    "MemorySizeError",
    "EnvVarError",
    "InventoryFileError",
    "TfConfigError",
    "LaunchError",
    "PlanError",
    "StrategyError",
    # what was asked cannot be had
    "SelectionError",
    "ReservationError",
    "RuntimeInitializedError",
    "TensorFlowMissingError",
    # what ran is not what was asked
    "PlacementAssertionError",
    "PlacementChangedError",
]
