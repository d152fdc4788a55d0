"""Names of the placement report renamed in 0.3.0 that still answer, with a ``DeprecationWarning``, until 0.4.0.

``report.copies`` is ``report.transfers``; ``report.transfers(src, dst)``, 0.2's filter, is
``report.transfers_between(src, dst)``. The call form can be told apart from the attribute: ``report.transfers``
is a tuple of the transfers that can also be called, and only the call warns.

>>> from tfdevices.verify import PlacementReport, Transfer
>>> report = PlacementReport((), (Transfer("CPU:0", "CPU:1", "x:0"),))
>>> report.transfers == (Transfer("CPU:0", "CPU:1", "x:0"),)
True
"""

from __future__ import annotations

import warnings
from typing import Any


def _renamed(old: str, new: str) -> None:
    message = f"{old} is {new} since tfdevices 0.3.0; the old name goes in 0.4.0."
    warnings.warn(message, DeprecationWarning, stacklevel=3)


class Transfers(tuple):  # type: ignore[type-arg]
    """A report's transfers; called as 0.2's ``report.transfers(src, dst)``, it filters them as
    ``transfers_between`` does, and warns.
    """

    report_class: Any  # the report's class, whose transfers_between the call uses

    def __new__(cls, items: Any = (), report_class: Any = None) -> Transfers:  # noqa: D102
        made = super().__new__(cls, items)
        made.report_class = report_class
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return (Transfers, (tuple(self), self.report_class))

    def __call__(self, src: str | None = None, dst: str | None = None) -> tuple[Any, ...]:  # noqa: D102
        _renamed("PlacementReport.transfers(src, dst)", "PlacementReport.transfers_between(src, dst)")
        return tuple(self.report_class((), self).transfers_between(src, dst))


class Renamed:
    """The base of :class:`~tfdevices.verify.PlacementReport` that keeps its 0.2 names answering."""

    transfers: tuple[Any, ...]

    def __post_init__(self) -> None:
        if type(self.transfers) is not Transfers:
            object.__setattr__(self, "transfers", Transfers(self.transfers, type(self)))

    @property
    def copies(self) -> tuple[Any, ...]:
        """Deprecated: :attr:`transfers` (renamed in 0.3.0; this alias goes in 0.4.0)."""
        _renamed("PlacementReport.copies", "PlacementReport.transfers")
        return self.transfers
