"""What tune is asked to do: one frozen record, validated once, its defaults in one place (pure).

>>> TuneConfig(steps=10, budget_s=120).rounds
6
>>> TuneConfig(candidates=["split:2"]).candidates
('split:2',)
>>> TuneConfig(steps=1)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
tfdevices.core.errors.InputError: steps=1: expected a whole number >= 2. HINT: e.g. steps=10.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tfdevices.core.errors import InputError

#: Processes per candidate, at most (each holds a copy of the model).
MAX_PROCESSES = 8


def _count(name: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"from {low} to {high}"
        example = max(low, 10) if high is None else low + 1
        raise InputError(f"{name}={value!r}: expected a whole number {span}.", hint=f"e.g. {name}={example}.")
    return value


def _seconds(name: str, value: object, *, optional: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
        raise InputError(
            f"{name}={value!r}: expected a number of seconds > 0" + (" or None." if optional else "."),
            hint=f"e.g. {name}=300.",
        )
    return float(value)


def _share(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise InputError(f"{name}={value!r}: expected a share in [0, 1).", hint=f"e.g. {name}=0.03 (3%).")
    return float(value)


@dataclass(frozen=True)
class TuneConfig:
    """How :func:`~tfdevices.decide.tune.tune` measures (every field checked when the record is made).

    Attributes:
        devices: TensorFlow devices, best first; ``None``: the GPUs NVML sees (and ``CPU:0``),
            else ``virtual_devices`` logical CPUs.
        candidates: ``"auto"`` (all) or names from :func:`~tfdevices.decide.candidates.plan_candidates`
            (``"mirrored:2"``); the one-device run on the main kind always runs (predictions start from it).
        steps: steps in each timed window.
        warmup: steps before the first window (tracing, first allocations).
        rounds: rounds every candidate runs: each round times one window of each candidate, one
            after another (A B C, then B C A, ...), so a slow minute of the machine falls on all alike
            (6 rounds are the fewest that can show a difference at 95%: :func:`~tfdevices.decide.ties.paired`).
        max_rounds: rounds, at most, for the candidates the answer depends on (the fastest and those
            the rounds cannot yet tell from it); default ``4 * rounds``.
        budget_s: bound on the whole run: candidates are kept, fastest predicted first, while they
            fit, and further rounds run while they fit.
        timeout_s: bound on each candidate's start (build and warm-up) and on each of its answers.
        virtual_devices: logical CPUs to split the CPU into, without GPUs.
        processes: processes per candidate, started side by side (1 to 8). A process has a speed of its
            own (the same candidate in two processes, timed in the same rounds, differed by up to 12% on a
            shared CPU), so candidates are compared every process against every process, and only what
            every pair shows counts (:mod:`~tfdevices.decide.ties`). Each process holds its own copy of
            the model: 1 on a GPU whose memory holds one copy (a process that does not start is left out).
        memory_limit: each GPU's memory cap in the children (``configure(memory_limit=...)``).
        logdir: a TensorBoard run per candidate under it (``LOGDIR/<candidate>``) with its captured step.
        margin: a difference under this share is a tie however sure it is (``0.03``: 3% is not
            worth another strategy).
    """

    devices: tuple[str, ...] | None = None
    candidates: str | tuple[str, ...] = "auto"
    steps: int = 20
    warmup: int = 3
    rounds: int = 6
    max_rounds: int | None = None
    budget_s: float | None = None
    timeout_s: float = 300.0
    virtual_devices: int = 4
    processes: int = 2
    memory_limit: Any = None
    logdir: str | None = None
    margin: float = 0.03

    def __post_init__(self) -> None:
        rounds = _count("rounds", self.rounds, 1)
        most = _count("max_rounds", 4 * rounds if self.max_rounds is None else self.max_rounds, rounds)
        fix: dict[str, Any] = {
            "max_rounds": most,
            "steps": _count("steps", self.steps, 2),
            "warmup": _count("warmup", self.warmup, 0),
            "rounds": rounds,
            "timeout_s": _seconds("timeout_s", self.timeout_s, optional=False),
            "virtual_devices": _count("virtual_devices", self.virtual_devices, 1),
            "processes": _count("processes", self.processes, 1, MAX_PROCESSES),
            "margin": _share("margin", self.margin),
            "devices": _names(self.devices),
            "candidates": self.candidates if self.candidates == "auto" else _names(self.candidates),
            "logdir": None if self.logdir is None else os.fspath(self.logdir),
        }
        if self.budget_s is not None:
            fix["budget_s"] = _seconds("budget_s", self.budget_s, optional=True)
        for name, value in fix.items():
            object.__setattr__(self, name, value)

    def replace(self, **changes: Any) -> TuneConfig:
        """This record with ``changes`` (checked again).

        Raises:
            InputError: a field that is not one of tune's, or a bad value.
        """
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise InputError(
                f"tune got {', '.join(unknown)}: not an option of tune.",
                hint=f"the options are {', '.join(f.name for f in dataclasses.fields(self))}.",
            )
        return dataclasses.replace(self, **changes)


def _names(value: object) -> tuple[str, ...] | None:
    """Device or candidate names as a tuple (one name alone, too); ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Iterable):
        raise InputError(f"{value!r}: expected names (strings).", hint="e.g. ['CPU:0', 'CPU:1'].")
    return tuple(value)
