"""The ways to run a model that tune measures, and what each is predicted to cost (pure).

>>> [c.name for c in plan_candidates(["CPU:0", "CPU:1", "CPU:2"])]
['one_device:CPU:0', 'mirrored:2', 'mirrored:3', 'split:2', 'split:3']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tfdevices.core.devices import short_name
from tfdevices.core.errors import InputError

STRATEGIES = ("one_device", "mirrored", "split", "multi_worker")
_TARGET = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Candidate:
    """One way to run the model.

    Attributes:
        name: ``"one_device:GPU:0"``, ``"mirrored:2"``, ``"split:2"``, ``"multi_worker:2"``.
        strategy: one of :data:`STRATEGIES` (``"split"``: the layers split over the devices by
            ``plan_layers(balance_by="time", every_device=True)``: each device holds a layer).
        devices: TensorFlow logical devices, best first.
    """

    name: str
    strategy: str
    devices: tuple[str, ...]


def _kind(device: str) -> str:
    return device.partition(":")[0]


def plan_candidates(devices: Sequence[str]) -> tuple[Candidate, ...]:
    """Every candidate for these devices (best first within each kind).

    One device of each kind (the first, the best); mirrored and split over the k first
    devices of the main kind (GPUs when there are any) for each k >= 2; multi-worker
    (one worker per GPU) where there are several GPUs.

    Raises:
        SpecError: a name is not a TensorFlow device name.

    >>> [c.name for c in plan_candidates(["GPU:0", "GPU:1", "CPU:0"])]
    ['one_device:GPU:0', 'one_device:CPU:0', 'mirrored:2', 'split:2', 'multi_worker:2']
    """
    names = tuple(dict.fromkeys(short_name(d, what="tune device") for d in devices))
    if not names:
        raise InputError("tune got no devices.", hint="pass devices=['CPU:0', ...] or leave devices=None.")
    out = [
        Candidate(f"one_device:{d}", "one_device", (d,))
        for d in (next(n for n in names if _kind(n) == k) for k in dict.fromkeys(map(_kind, names)))
    ]
    main = "GPU" if any(_kind(n) == "GPU" for n in names) else _kind(names[0])
    pool = tuple(n for n in names if _kind(n) == main)
    for strategy in ("mirrored", "split"):
        out += [Candidate(f"{strategy}:{k}", strategy, pool[:k]) for k in range(2, len(pool) + 1)]
    if main == "GPU" and len(pool) > 1:
        out.append(Candidate(f"multi_worker:{len(pool)}", "multi_worker", pool))
    return tuple(out)


def choose(planned: Sequence[Candidate], wanted: str | Iterable[str]) -> tuple[Candidate, ...]:
    """The candidates named in ``wanted`` (``"auto"``: all), in the planned order.

    Raises:
        InputError: ``wanted`` names a candidate not planned for these devices.
    """
    if wanted == "auto":
        return tuple(planned)
    names = [wanted] if isinstance(wanted, str) else list(wanted)
    known = {c.name: c for c in planned}
    unknown = [n for n in names if n not in known]
    if not names or unknown or not all(isinstance(n, str) for n in names):
        raise InputError(
            f"candidates={wanted!r}: {unknown or 'nothing'} is not among this machine's candidates {sorted(known)}.",
            hint="pass 'auto' or a list of those names.",
        )
    return tuple(c for c in planned if c.name in names)


def check_target(target: object) -> str:
    """A ``MODULE:FUNCTION`` spec, checked.

    Raises:
        InputError: ``target`` is not ``package.module:function``.

    >>> check_target("tfdevices.decide.examples:tiny_mlp")
    'tfdevices.decide.examples:tiny_mlp'
    """
    if not isinstance(target, str) or not _TARGET.match(target.strip()):
        raise InputError(
            f"model function {target!r} is not MODULE:FUNCTION.",
            hint="e.g. 'mypackage.models:build' for a function build() in mypackage/models.py "
            "that returns (compiled model, dataset).",
        )
    return target.strip()


# ----------------------------------------------------------------------------- prediction


@dataclass(frozen=True)
class Link:
    """What one copy between two devices costs, probed on this machine (either direction).

    Attributes:
        a, b: the two devices (TensorFlow short names, ``"CPU:1"``).
        latency_s: a copy's fixed cost (of a small tensor).
        bytes_per_s: bandwidth; ``None`` when the probe saw no cost that grows with the bytes
            (logical CPUs of one host hand a buffer over without copying it).
    """

    a: str
    b: str
    latency_s: float
    bytes_per_s: float | None


@dataclass(frozen=True)
class Profile:
    """What the one-device run measured, the input of every prediction.

    A tune child measures its captured step (:class:`~tfdevices.decide.messages.Captured` carries it);
    the parent adds its step time (the settled window it timed) and whether the devices share one
    processor.

    Attributes:
        compute_s: the device's busy time in its captured step (the kernels' union); ``None`` when the
            capture showed the device no busy time (then there is no prediction).
        grad_bytes: bytes of the trainable weights (what an all-reduce moves).
        variables: number of trainable weights (one all-reduce each).
        activation_bytes: the bytes of one layer's output for one batch, median over the layers
            (what a stage boundary copies forward, and its gradient back).
        copy_latency_s: one copy of a small tensor between two devices.
        copy_bytes_per_s: copy bandwidth between two devices.
        links: copy costs probed between pairs of devices (:mod:`~tfdevices.decide.probe`); a pair
            not among them costs ``copy_latency_s`` and ``copy_bytes_per_s``.
        step_s: its median step time (0 in a child's answer).
        shared_compute: whether the devices share one processor (logical CPUs split from one host:
            their kernels share its cores, so k replicas do not compute k times faster).
    """

    compute_s: float | None = None
    grad_bytes: int = 0
    variables: int = 0
    activation_bytes: int = 0
    copy_latency_s: float = 0.0
    copy_bytes_per_s: float = 1e12
    links: tuple[Link, ...] = ()
    step_s: float = 0.0
    shared_compute: bool = True


def _copy_s(profile: Profile, a: str, b: str, nbytes: float, copies: int) -> float:
    """``copies`` copies of ``nbytes`` bytes in all between ``a`` and ``b``."""
    latency, rate = profile.copy_latency_s, profile.copy_bytes_per_s
    for link in profile.links:
        if {link.a, link.b} == {a, b}:
            latency, rate = link.latency_s, link.bytes_per_s or float("inf")
            break
    return copies * latency + nbytes / rate


def predict_step_s(candidate: Candidate, profile: Profile) -> float | None:
    """The step time predicted for ``candidate`` from the one-device profile (``None``: no basis).

    * one device: the measured step (for the device measured; ``None`` for another kind);
    * mirrored over k: the host's fixed cost, the compute divided over k devices (not divided on
      devices that share one processor), and an all-reduce that copies every gradient to the first
      device and back: two copies of each between the first device and each other one;
    * split over k: the same compute (stages run one after another), and two activation copies
      (forward, and the gradient back) between each stage's device and the next's;
    * multi-worker: as mirrored, with no basis for the cross-process cost (``None``).

    Each copy costs what ``profile.links`` says for its pair of devices, else the profile's one
    ``copy_latency_s`` and ``copy_bytes_per_s`` (``replace(profile, links=())``: the uncalibrated prediction).

    >>> p = Profile(step_s=0.010, compute_s=0.008, grad_bytes=1_000_000, variables=4, activation_bytes=10_000,
    ...             copy_latency_s=0.0001, copy_bytes_per_s=1e9, shared_compute=False)
    >>> round(predict_step_s(Candidate("mirrored:2", "mirrored", ("GPU:0", "GPU:1")), p), 6)
    0.0088
    >>> round(predict_step_s(Candidate("split:2", "split", ("GPU:0", "GPU:1")), p), 6)
    0.01022
    >>> from dataclasses import replace
    >>> free = replace(p, links=(Link("GPU:1", "GPU:0", latency_s=0.0, bytes_per_s=None),))
    >>> round(predict_step_s(Candidate("split:2", "split", ("GPU:0", "GPU:1")), free), 6)
    0.01
    """
    if profile.compute_s is None:
        return None
    fixed = max(profile.step_s - profile.compute_s, 0.0)
    k = len(candidate.devices)
    if candidate.strategy == "one_device":
        return profile.step_s if k == 1 else None
    first, devices = candidate.devices[0], candidate.devices
    if candidate.strategy == "mirrored":
        compute = profile.compute_s if profile.shared_compute else profile.compute_s / k
        reduce = sum(_copy_s(profile, first, d, 2 * profile.grad_bytes, 2 * profile.variables) for d in devices[1:])
        return fixed + compute + reduce
    if candidate.strategy == "split":
        hops = zip(devices, devices[1:])
        return profile.step_s + sum(_copy_s(profile, a, b, 2 * profile.activation_bytes, 2) for a, b in hops)
    return None


def prune(
    order: Sequence[tuple[Candidate, float | None]], budget_s: float | None, *, startup_s: float, steps: int
) -> tuple[tuple[Candidate, ...], tuple[tuple[Candidate, str], ...]]:
    """Which candidates fit in the budget: the fastest predicted first, each costing
    ``startup_s + steps * predicted step`` (a candidate without a prediction costs the dearest one's).

    Returns:
        ``(kept, pruned)``; pruned as ``(candidate, reason)``.

    >>> a = Candidate("mirrored:2", "mirrored", ("CPU:0", "CPU:1"))
    >>> b = Candidate("split:2", "split", ("CPU:0", "CPU:1"))
    >>> kept, pruned = prune([(b, 0.5), (a, 0.1)], 12.0, startup_s=5.0, steps=10)
    >>> [c.name for c in kept], pruned[0][1]
    (['mirrored:2'], 'pruned by the budget: predicted 500.0 ms/step, about 10.0 s to run, 6.0 s left')
    """
    if budget_s is None:
        return tuple(c for c, _ in order), ()
    known = [p for _, p in order if p is not None]
    dearest = max(known) if known else 0.0
    left, kept, pruned = budget_s, [], []
    for candidate, predicted in sorted(order, key=lambda cp: (cp[1] is None, cp[1] or 0.0)):
        cost = startup_s + steps * (dearest if predicted is None else predicted)
        if cost <= left:
            kept.append(candidate)
            left -= cost
        else:
            shown = "none" if predicted is None else f"{1000 * predicted:.1f} ms/step"
            pruned.append(
                (candidate, (f"pruned by the budget: predicted {shown}, about {cost:.1f} s to run, {left:.1f} s left"))
            )
    return tuple(c for c, _ in order if c in kept), tuple(pruned)
