"""What tune's parent and its candidates' processes say to each other: typed, frozen messages (pure).

A candidate's process (:mod:`~tfdevices.decide.child`) reads its :class:`ChildSpec` from a file,
builds the candidate and answers :class:`Ready` (or :class:`Failed`); then it waits for commands
on a pipe, one JSON line each: :class:`TimeWindow` (it times one window of steps and answers
:class:`Window`), :class:`Capture` (one captured step: :class:`Captured`) or :class:`Stop`. Every
failure is a :class:`Failed` with a status and a line a user can act on. Nothing travels through
the environment.

>>> decode(encode(Window(step_s=0.01, q1_s=0.009, q3_s=0.011)))
Window(step_s=0.01, q1_s=0.009, q3_s=0.011)
>>> decode('{"kind": "Stop"}')
Stop()
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from tfdevices.decide.candidates import Link, Profile

#: A message line longer than this is not one of tune's (a captured step's shares are a few kB).
MAX_LINE = 1 << 20
#: The statuses a candidate ends with (``ok``: it ran).
STATUSES = ("ok", "out_of_memory", "failed", "timeout", "skipped")


@dataclass(frozen=True)
class ChildSpec:
    """One candidate's process: what to build and how (the parent writes it to a file for the child).

    Attributes:
        target: ``MODULE:FUNCTION`` returning ``(compiled model, dataset)``.
        strategy: ``"one_device"``, ``"mirrored"`` or ``"split"``.
        devices: TensorFlow devices, best first.
        gpus: whether the devices are GPUs (else the CPU is split into ``virtual_devices``).
        virtual_devices: logical CPUs to split the CPU into (no GPUs).
        warmup: steps before the first window (tracing, first allocations).
        steps: steps in each timed window.
        memory_limit: each GPU's memory cap (``configure(memory_limit=...)``), or ``None``.
        sys_path: the parent's ``sys.path`` (where the target's module is found).
    """

    target: str
    strategy: str
    devices: tuple[str, ...]
    gpus: bool
    virtual_devices: int
    warmup: int
    steps: int
    memory_limit: Any = None
    sys_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class TimeWindow:
    """Parent to child: time one window of ``steps`` steps."""

    steps: int


@dataclass(frozen=True)
class Capture:
    """Parent to child: capture one step (and, for the one-device run, profile it and probe copies).

    Attributes:
        profile: measure what predictions need (weights, activations, the device's busy time).
        probe: devices whose pairwise copy cost to probe (empty: none); the links found go in the
            captured profile (so it is asked for with ``profile=True``).
        logdir: a TensorBoard run for the captured step (``None``: a scratch directory).
    """

    profile: bool = False
    probe: tuple[str, ...] = ()
    logdir: str | None = None


@dataclass(frozen=True)
class Stop:
    """Parent to child: exit."""


@dataclass(frozen=True)
class Ready:
    """Child to parent: built, warmed up and settled.

    Attributes:
        batch: the global batch (examples a step).
        startup_s: from the process' start to ready.
        windows: windows it ran until its step time settled.
        step_s: the settled window's median step time.
    """

    batch: int
    startup_s: float
    windows: int
    step_s: float


@dataclass(frozen=True)
class Window:
    """Child to parent: one timed window: its median step time and quartiles, in seconds."""

    step_s: float
    q1_s: float
    q3_s: float


@dataclass(frozen=True)
class Captured:
    """Child to parent: what one captured step showed.

    Attributes:
        peak_memory: peak bytes per device (``"host"`` for logical CPUs).
        shares: ``{"step_us", "copies", "all_reduce", "idle": {device: share}}``.
        logdir: its TensorBoard run, if one was asked for.
        profile: what predictions start from (``profile=True`` only), the copy probe's links in it.
        probe_s: the probe's time; probe_detail: why it failed (empty: it did not).
    """

    peak_memory: dict[str, int] = field(default_factory=dict)
    shares: dict[str, Any] = field(default_factory=dict)
    logdir: str | None = None
    profile: Profile | None = None
    probe_s: float | None = None
    probe_detail: str = ""


@dataclass(frozen=True)
class Failed:
    """Child (or the parent, for a child that could not answer) to parent: the candidate stopped.

    Attributes:
        status: ``"out_of_memory"``, ``"failed"`` or ``"timeout"``.
        detail: what happened and what to do, in a line.
    """

    status: str
    detail: str


Command = TimeWindow | Capture | Stop
Reply = Ready | Window | Captured | Failed
Message = Command | Reply
_KINDS: dict[str, type] = {
    cls.__name__: cls for cls in (TimeWindow, Capture, Stop, Ready, Window, Captured, Failed, ChildSpec)
}


def encode(message: Message | ChildSpec) -> str:
    """One JSON line: the message's fields and its ``kind``."""
    return json.dumps({"kind": type(message).__name__, **dataclasses.asdict(message)})


def decode(line: str) -> Message | ChildSpec:
    """The message a line of :func:`encode` holds.

    Raises:
        ValueError: not one of tune's messages (too long, not JSON, an unknown kind or fields).
    """
    if len(line) > MAX_LINE:
        raise ValueError(f"a message of {len(line)} characters: more than tune's {MAX_LINE}")
    data = json.loads(line)
    if not isinstance(data, dict) or data.get("kind") not in _KINDS:
        raise ValueError(f"not a tune message: {line[:80]!r}")
    cls = _KINDS[data.pop("kind")]
    names = {f.name: f for f in dataclasses.fields(cls)}
    if not set(data) <= set(names):
        raise ValueError(f"{cls.__name__} has no field {sorted(set(data) - set(names))}")
    for name in ("devices", "sys_path", "probe"):
        if isinstance(data.get(name), list):
            data[name] = tuple(data[name])
    if isinstance(data.get("profile"), dict):
        data["profile"] = _profile(data["profile"])
    return cls(**data)


def _profile(data: dict[str, Any]) -> Profile:
    """A :class:`~tfdevices.decide.candidates.Profile` from its JSON fields (its links, each a ``Link``'s)."""
    names = {f.name for f in dataclasses.fields(Profile)}
    if not set(data) <= names:
        raise ValueError(f"Profile has no field {sorted(set(data) - names)}")
    links, fields = data.get("links", []), {f.name for f in dataclasses.fields(Link)}
    if not isinstance(links, list) or not all(isinstance(link, dict) and set(link) == fields for link in links):
        raise ValueError(f"a profile's links: {str(links)[:80]!r}, not a list of {sorted(fields)} objects")
    return Profile(**{**data, "links": tuple(Link(**link) for link in links)})
