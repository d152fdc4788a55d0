"""Layer plans: which device holds which layer (pure; no TensorFlow).

:func:`plan_layers` splits a model's layers, in topological order, into
contiguous stages, one per device, so that the slowest stage is as fast as
possible (the *bottleneck*), while each device's share of the weights stays
under its ``max_memory`` cap. Devices are used in the order given; a device may
be left empty. It works on a built Keras model (Sequential or functional) or on
a plain list of layer costs, and it also checks a manual map
(``{"dense_1": "GPU:0", "block2_*": "GPU:1"}``).

The planner is exact: a stage's cost is the correctly rounded sum of its
layers' costs (``math.fsum``) divided by its device's speed, and the plan's
bottleneck is the smallest value any contiguous partition can reach, found by
a binary search over the float bit patterns whose every step is a greedy fill
(take on each device, in order, the longest run of layers that stays under the
bound and the cap). The greedy fill is optimal for a fixed bound because stage
costs and memory only grow when a stage grows, so reaching further never
hurts. Cost: about 64 fills of ``O(devices * log(layers))`` each.

With ``every_device=True`` each device holds at least one layer. Reaching
further can then hurt (a later device may be left only a layer that is slow on
it), so each step of the search keeps every stage end the devices so far can
reach, not only the furthest: ``O(devices * layers)`` per step.

>>> plan = plan_layers([3.0, 1.0, 2.0, 2.0], ["GPU:0", "GPU:1"])
>>> plan.stages[0].layers, plan.stages[1].layers
(('layer_0', 'layer_1'), ('layer_2', 'layer_3'))
>>> plan.bottleneck, plan.transfers
(4.0, 1)
>>> faster = plan_layers([3.0, 1.0, 2.0, 2.0], ["GPU:0", "GPU:1"], speeds=[1.0, 2.0])
>>> faster.assignment
{'layer_0': 'GPU:0', 'layer_1': 'GPU:1', 'layer_2': 'GPU:1', 'layer_3': 'GPU:1'}
>>> faster.bottleneck
3.0
"""

from __future__ import annotations

import fnmatch
import math
import re
import struct
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfdevices.core.devices import short_name
from tfdevices.core.errors import InputError, PlanError
from tfdevices.core.units import format_bytes, parse_memory, short_repr
from tfdevices.layers.model import LayerCosts, measure_layer_times, read_model

BALANCE_BY = ("params", "flops", "memory", "time")
_PATTERN_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Stage:
    """A run of consecutive layers on one device.

    Attributes:
        device: the TensorFlow logical device, ``"GPU:1"``.
        layers: the layer names, in order.
        cost: the stage's cost on its device (summed layer costs / device speed).
        memory: bytes of the stage's variables.
    """

    device: str
    layers: tuple[str, ...]
    cost: float
    memory: int


@dataclass(frozen=True)
class LayerPlan:
    """Which device holds each layer, and what that costs.

    Attributes:
        layers: layer names in topological order (``InputLayer`` left out).
        devices: the device of each layer, aligned with ``layers``.
        costs: each layer's cost on its own device (already divided by its speed).
        memory: bytes of each layer's variables.
        stages: maximal runs of consecutive layers on one device.
        bottleneck: the largest total cost on one device: the slowest stage.
        transfers: activation tensors that cross devices in one forward pass
            (one per tensor and receiving device; ``len(stages) - 1`` for a chain).
        balance_by: what the costs measure: ``"params"``, ``"flops"``,
            ``"memory"``, ``"time"`` (seconds per batch), or ``"cost"`` (given).
        manual: whether the plan came from a manual map rather than the optimiser.
    """

    layers: tuple[str, ...]
    devices: tuple[str, ...]
    costs: tuple[float, ...]
    memory: tuple[int, ...]
    stages: tuple[Stage, ...]
    bottleneck: float
    transfers: int
    balance_by: str
    manual: bool = False

    @property
    def assignment(self) -> dict[str, str]:
        """``{layer name: device}``, in layer order."""
        return dict(zip(self.layers, self.devices))

    def device_of(self, layer: str) -> str:
        """The device planned for ``layer``.

        Raises:
            PlanError: the plan has no layer of that name.
        """
        try:
            return self.devices[self.layers.index(layer)]
        except ValueError:
            raise PlanError(
                f"layer {layer!r} is not in this plan; it has {_names(self.layers)}.",
                hint="plan the model you place (plan_layers(model, ...)).",
            ) from None

    def loads(self) -> dict[str, tuple[float, int]]:
        """``{device: (total cost, bytes)}`` over the devices that hold layers, in stage order."""
        out: dict[str, tuple[float, int]] = {}
        for stage in self.stages:
            cost, mem = out.get(stage.device, (0.0, 0))
            out[stage.device] = (cost + stage.cost, mem + stage.memory)
        return out

    def table(self) -> str:
        """The plan as a printable table, one row per stage.

        >>> print(plan_layers([3.0, 1.0, 2.0, 2.0], ["CPU:0", "CPU:1"], speeds=[1, 2]).table())
        stage  device  layers                         cost  share  memory
        0      CPU:0   layer_0                           3    55%     0 B
        1      CPU:1   layer_1 .. layer_3 (3)          2.5    45%     0 B
        bottleneck 3 (cost), 1 activation transfer per step, optimal plan
        """
        total = sum(s.cost for s in self.stages) or 1.0
        rows = [f"{'stage':<6} {'device':<7} {'layers':<28} {'cost':>6} {'share':>6} {'memory':>7}"]
        for i, s in enumerate(self.stages):
            span = s.layers[0] if len(s.layers) == 1 else f"{s.layers[0]} .. {s.layers[-1]} ({len(s.layers)})"
            rows.append(
                f"{i:<6} {s.device:<7} {span:<28} {s.cost:>6.4g} {s.cost / total:>6.0%} {format_bytes(s.memory):>7}"
            )
        kind = "manual plan" if self.manual else "optimal plan"
        plural = "" if self.transfers == 1 else "s"
        rows.append(
            f"bottleneck {self.bottleneck:.4g} ({self.balance_by}), "
            f"{self.transfers} activation transfer{plural} per step, {kind}"
        )
        return "\n".join(rows)


# ----------------------------------------------------------------------------- the optimiser


class _Prefix:
    """Exact prefix sums of non-negative floats: ``sum(a, b) == math.fsum(values[a:b])``."""

    def __init__(self, values: Sequence[float]) -> None:
        ratios = [float(v).as_integer_ratio() for v in values]
        self.denom = max((d for _, d in ratios), default=1)  # powers of two: the max is the lcm
        self.prefix = [0]
        for num, den in ratios:
            self.prefix.append(self.prefix[-1] + num * (self.denom // den))

    def sum(self, a: int, b: int) -> float:
        return (self.prefix[b] - self.prefix[a]) / self.denom  # int / int is correctly rounded


@dataclass(frozen=True)
class _Problem:
    """Layers ``0..n-1`` onto devices ``0..m-1`` in order; ``rows[d]`` holds the costs on device ``d``."""

    rows: tuple[_Prefix, ...]
    speeds: tuple[float, ...]
    mem: tuple[int, ...]  # prefix sums of bytes
    caps: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.mem) - 1

    def cost(self, a: int, b: int, d: int) -> float:
        return self.rows[d].sum(a, b) / self.speeds[d]

    def reach(self, a: int, d: int, limit: float) -> int:
        """The largest ``b >= a`` with layers ``a..b-1`` on device ``d`` within ``limit`` and the cap."""
        lo, hi = a, self.n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.cost(a, mid, d) <= limit and self.mem[mid] - self.mem[a] <= self.caps[d]:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def fill(self, limit: float) -> list[int]:
        """Stage ends of the greedy fill under ``limit``; the last one is ``n`` when everything fits."""
        ends, a = [], 0
        for d in range(len(self.caps)):
            a = self.reach(a, d, limit)
            ends.append(a)
        return ends

    def fill_every(self, limit: float) -> list[int] | None:
        """Stage ends with every device holding at least one layer under ``limit``; ``None`` if none exist.

        Every end each device can reach (from any end the previous devices reach), with the start that
        reached it; a start reaches a run of ends, and a later start never reaches less (costs only shrink
        when a stage starts later), so one pointer walks each device's ends once.
        """
        m, n = len(self.caps), self.n
        starts = [0]
        came: list[dict[int, int]] = []
        for d in range(m):
            last = n - (m - 1 - d)  # leave a layer for each later device
            found: dict[int, int] = {}
            b = 0
            for a in starts:
                b = max(b, a)
                while b < last and self.cost(a, b + 1, d) <= limit and self.mem[b + 1] - self.mem[a] <= self.caps[d]:
                    b += 1
                    found.setdefault(b, a)
            came.append(found)
            starts = sorted(found)
            if not starts:
                return None
        if n not in came[-1]:
            return None
        ends, b = [], n
        for d in range(m - 1, -1, -1):
            ends.append(b)
            b = came[d][b]
        return ends[::-1]

    def min_bottleneck(self, every: bool = False) -> float:
        """The smallest ``limit`` under which everything fits (assumes it fits under +inf); with ``every``,
        with a layer on every device.
        """
        lo, hi = 0, _bits(max(self.cost(0, self.n, d) for d in range(len(self.caps))))
        while lo < hi:  # the smallest float (as bits) with a feasible fill
            mid = (lo + hi) // 2
            if (self.fill_every(_float(mid)) is not None) if every else (self.fill(_float(mid))[-1] == self.n):
                hi = mid
            else:
                lo = mid + 1
        return _float(lo)


def _bits(x: float) -> int:
    return int(struct.unpack("<q", struct.pack("<d", x))[0])


def _float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<q", bits))[0])


def _optimal_devices(problem: _Problem, names: Sequence[str], devices: Sequence[str], every: bool) -> list[str]:
    ends = problem.fill(math.inf)
    if ends[-1] < problem.n:
        raise _no_fit(problem, names, devices, ends)
    if every:
        if problem.n < len(devices):
            raise PlanError(
                f"every_device=True: {problem.n} layers cannot give each of {len(devices)} devices one.",
                hint="list fewer devices, or leave every_device off (a device may then be left empty).",
            )
        if problem.fill_every(math.inf) is None:
            raise PlanError(
                f"every_device=True: no plan gives each of {list(devices)} a layer within its max_memory cap.",
                hint="raise the caps, list fewer devices, or leave every_device off.",
            )
        found = problem.fill_every(problem.min_bottleneck(every=True))
        assert found is not None  # the search ends on a limit some plan meets
        ends = found
    else:
        ends = problem.fill(problem.min_bottleneck())
    out, start = [], 0
    for d, end in enumerate(ends):
        out.extend([devices[d]] * (end - start))
        start = end
    return out


def _no_fit(problem: _Problem, names: Sequence[str], devices: Sequence[str], ends: list[int]) -> PlanError:
    stuck = ends[-1]
    need = problem.mem[stuck + 1] - problem.mem[stuck]
    used, start = [], 0
    for d, end in enumerate(ends):
        cap = "no cap" if math.isinf(problem.caps[d]) else f"cap {format_bytes(int(problem.caps[d]))}"
        used.append(
            f"{devices[d]} holds {end - start} layers, {format_bytes(problem.mem[end] - problem.mem[start])} of {cap}"
        )
        start = end
    return PlanError(
        f"layer {names[stuck]!r} ({format_bytes(need)}) does not fit: filling devices in order, {'; '.join(used)}.",
        hint="raise max_memory for a device, add a device, or give the layers in another order of devices.",
    )


# ----------------------------------------------------------------------------- inputs


def plan_layers(
    model: Any,
    devices: Sequence[str] | Mapping[str, str],
    *,
    balance_by: str | None = None,
    max_memory: Mapping[str, int | str] | None = None,
    speeds: Sequence[float] | Mapping[str, float] | None = None,
    layer_bytes: Sequence[int] | None = None,
    sample: Any = None,
    every_device: bool = False,
) -> LayerPlan:
    """Plans which device holds each layer, minimising the slowest stage.

    Args:
        model: a built Keras model (Sequential or functional; its layers are taken in topological order,
            ``InputLayer`` left out), or a list of non-negative layer costs (layers named ``layer_0``, ...).
        devices: TensorFlow logical devices in stage order (``["GPU:0", "GPU:1"]``, any TF spelling), or a
            manual map ``{layer name or fnmatch pattern: device}``; exact names win over patterns, and among
            patterns the first that matches a layer wins.
        balance_by: for a model, what a layer costs: ``"params"`` (default), ``"flops"`` (per sample,
            estimated from weights and output shapes), ``"memory"`` (bytes of variables) or ``"time"``
            (seconds per call of the layer on each device, measured with ``sample``). Not for a list.
        max_memory: ``{device: cap}`` on the bytes of variables per device (an int or ``"8GiB"``); devices
            left out have no cap.
        speeds: relative speed of each device (a list aligned with ``devices``, or ``{device: speed}``;
            default 1): a stage's cost is divided by it.
        layer_bytes: for a list of costs, the bytes of each layer (needed with ``max_memory``).
        sample: an input batch for ``balance_by="time"``.
        every_device: give each listed device at least one layer (the best such plan; a split over all of
            them, as ``tfdevices.tune``'s ``split:k``), even where an empty one is faster. Not for a manual map.

    Returns:
        A frozen :class:`LayerPlan`.

    Raises:
        PlanError: bad devices, costs, speeds or caps; an unbuilt model; a manual map naming unknown
            layers or leaving layers out; a cap no plan fits.

    >>> plan_layers([1.0, 1.0, 1.0], {"layer_0": "GPU:1", "*": "/device:GPU:0"}).devices
    ('GPU:1', 'GPU:0', 'GPU:0')
    >>> plan_layers([1.0], ["GPU:0", "GPU:0"])  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.PlanError: devices ['GPU:0', 'GPU:0'] name GPU:0 twice.
    HINT: list each device once, in stage order.
    """
    layers, kind = _read_layers(model, balance_by, layer_bytes)
    order = _stage_devices(devices, layers.names, every_device)
    device_set = list(dict.fromkeys(order))
    speed = _speeds(speeds, device_set)
    caps = _caps(max_memory, device_set)
    rows = _cost_rows(layers, kind, device_set, sample, speeds)
    _check_finite(rows, speed)
    if isinstance(devices, Mapping):
        _check_caps(layers, order, caps)
        return _make_plan(layers, order, rows, speed, kind, True)
    problem = _problem(layers, rows, speed, caps, device_set)
    return _make_plan(
        layers, _optimal_devices(problem, layers.names, device_set, every_device), rows, speed, kind, False
    )


def _stage_devices(devices: Sequence[str] | Mapping[str, str], names: Sequence[str], every_device: bool) -> list[str]:
    """The device of each layer for a manual map, else the devices in stage order (checked either way)."""
    if not isinstance(every_device, bool):
        raise PlanError(
            f"every_device={short_repr(every_device)}: not True or False.", hint="every_device=True or False."
        )
    if not isinstance(devices, Mapping):
        return _device_list(devices)
    if every_device:
        raise PlanError(
            "every_device=True plans over a list of devices; a manual map already says which device holds each layer.",
            hint="drop every_device=, or give a list of devices.",
        )
    return _manual_devices(devices, names)


def _problem(
    layers: LayerCosts,
    rows: Mapping[str, Sequence[float]],
    speed: Mapping[str, float],
    caps: Mapping[str, float],
    devices: Sequence[str],
) -> _Problem:
    """The automatic plan's problem: each device's prefix sums of costs, its speed and cap, in stage order."""
    return _Problem(
        rows=tuple(_Prefix(rows[d]) for d in devices),
        speeds=tuple(speed[d] for d in devices),
        mem=tuple(_prefix_ints(layers.memory)),
        caps=tuple(caps[d] for d in devices),
    )


def _make_plan(
    layers: LayerCosts,
    assigned: Sequence[str],
    rows: Mapping[str, Sequence[float]],
    speed: Mapping[str, float],
    kind: str,
    manual: bool,
) -> LayerPlan:
    stages: list[Stage] = []
    start = 0
    for i in range(1, len(assigned) + 1):
        if i == len(assigned) or assigned[i] != assigned[start]:
            d = assigned[start]
            stages.append(
                Stage(
                    device=d,
                    layers=layers.names[start:i],
                    cost=math.fsum(rows[d][start:i]) / speed[d],
                    memory=sum(layers.memory[start:i]),
                )
            )
            start = i
    bottleneck = max(math.fsum(rows[d][i] for i, a in enumerate(assigned) if a == d) / speed[d] for d in set(assigned))
    return LayerPlan(
        layers=layers.names,
        devices=tuple(assigned),
        costs=tuple(rows[d][i] / speed[d] for i, d in enumerate(assigned)),
        memory=layers.memory,
        stages=tuple(stages),
        bottleneck=bottleneck,
        transfers=_transfers(layers.edges, assigned),
        balance_by=kind,
        manual=manual,
    )


def _transfers(edges: Sequence[tuple[int, int, int]], assigned: Sequence[str]) -> int:
    crossing = {(p, k, assigned[c]) for p, k, c in edges if p >= 0 and assigned[p] != assigned[c]}
    return len(crossing)


def _prefix_ints(values: Sequence[int]) -> list[int]:
    out = [0]
    for v in values:
        out.append(out[-1] + v)
    return out


def _device_list(devices: object) -> list[str]:
    if isinstance(devices, str) or not isinstance(devices, Sequence) or not devices:
        raise PlanError(
            f"devices {devices!r}: expected a non-empty list of device names or a {{layer: device}} map.",
            hint="e.g. plan_layers(model, ['GPU:0', 'GPU:1']).",
        )
    names = [_device(d, f"devices[{i}]") for i, d in enumerate(devices)]
    for d in names:
        if names.count(d) > 1:
            raise PlanError(f"devices {names!r} name {d} twice.", hint="list each device once, in stage order.")
    return names


def _device(name: object, what: str) -> str:
    try:
        return short_name(name, what=what)  # type: ignore[arg-type]  # it checks the type: SpecError
    except InputError as err:
        raise PlanError(err.message, hint=err.hint) from None


def _manual_devices(mapping: Mapping[str, str], names: Sequence[str]) -> list[str]:
    patterns = [k for k in mapping if k not in names]
    for pattern in patterns:
        if not isinstance(pattern, str) or not _PATTERN_CHARS.search(pattern):
            raise PlanError(
                f"manual map names layer {pattern!r}, which the model does not have; it has {_names(names)}.",
                hint="use the model's layer names or a pattern like 'dense_*'.",
            )
    won: dict[str, int] = dict.fromkeys(patterns, 0)
    out: list[str] = []
    missing: list[str] = []
    for name in names:
        key = name if name in mapping else next((p for p in patterns if fnmatch.fnmatchcase(name, p)), None)
        if key is None:
            missing.append(name)
            continue
        won[key] = won.get(key, 0) + 1
        out.append(_device(mapping[key], f"manual map[{key!r}]"))
    if missing:
        raise PlanError(
            f"manual map leaves layers {missing!r} without a device; the map has {list(mapping)!r}.",
            hint="name them, or end the map with a catch-all pattern '*': 'GPU:0'.",
        )
    for key, count in won.items():
        if count == 0:
            raise PlanError(
                f"manual map pattern {key!r} places no layer: it matches none of {_names(names)}, "
                "or earlier entries took them.",
                hint="fix the pattern, or move it before broader ones.",
            )
    return out


def _check_finite(rows: Mapping[str, Sequence[float]], speed: Mapping[str, float]) -> None:
    """Refuses costs whose sum on a device, divided by its speed, overflows a float (no plan could compare them)."""
    for device, costs in rows.items():
        try:
            total = math.fsum(costs) / speed[device]
        except OverflowError:
            total = math.inf
        if not math.isfinite(total):
            raise PlanError(
                f"layer costs on {device} add up to more than the largest float "
                f"({sys.float_info.max:.3g}) once divided by its speed {speed[device]:g}.",
                hint="scale the costs down (e.g. divide every cost by 1e6) or the speeds up.",
            )


def _speeds(speeds: Sequence[float] | Mapping[str, float] | None, devices: Sequence[str]) -> dict[str, float]:
    if speeds is None:
        return dict.fromkeys(devices, 1.0)
    if isinstance(speeds, Mapping):
        given = {_device(k, f"speeds key {k!r}"): v for k, v in speeds.items()}
        _known_keys("speeds", given, devices)
    elif isinstance(speeds, Sequence) and not isinstance(speeds, str) and len(speeds) == len(devices):
        given = dict(zip(devices, speeds))
    else:
        raise PlanError(
            f"speeds {speeds!r}: expected {len(devices)} numbers aligned with devices {list(devices)!r} "
            "or a {device: speed} map.",
            hint="e.g. speeds=[1.0, 2.0] when the second device is twice as fast.",
        )
    for d, v in given.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
            raise PlanError(
                f"speeds[{d!r}] = {v!r}: a speed must be a positive finite number.",
                hint="give relative speeds, e.g. 1.0 and 2.0.",
            )
    return {d: float(given.get(d, 1.0)) for d in devices}


def _caps(max_memory: Mapping[str, int | str] | None, devices: Sequence[str]) -> dict[str, float]:
    if max_memory is None:
        return dict.fromkeys(devices, math.inf)
    if not isinstance(max_memory, Mapping):
        raise PlanError(
            f"max_memory {max_memory!r}: expected a {{device: size}} map.", hint="e.g. max_memory={'GPU:0': '10GiB'}."
        )
    caps: dict[str, float] = {}
    for key, value in max_memory.items():
        d = _device(key, f"max_memory key {key!r}")
        try:
            caps[d] = parse_memory(value, what=f"max_memory[{key!r}]")
        except InputError as err:
            raise PlanError(err.message, hint=err.hint) from None
    _known_keys("max_memory", caps, devices)
    return {d: caps.get(d, math.inf) for d in devices}


def _known_keys(what: str, given: Mapping[str, object], devices: Sequence[str]) -> None:
    unknown = [d for d in given if d not in devices]
    if unknown:
        raise PlanError(
            f"{what} names devices {unknown!r} that the plan does not use; it uses {list(devices)!r}.",
            hint=f"key {what} by the planned devices.",
        )


def _check_caps(layers: LayerCosts, assigned: Sequence[str], caps: Mapping[str, float]) -> None:
    for d, cap in caps.items():
        held = [i for i, a in enumerate(assigned) if a == d]
        used = sum(layers.memory[i] for i in held)
        if used > cap:
            raise PlanError(
                f"manual map puts {format_bytes(used)} of variables on {d} "
                f"({_names([layers.names[i] for i in held])}), over its cap {format_bytes(int(cap))}.",
                hint="move layers to another device or raise max_memory.",
            )


def _cost_rows(
    layers: LayerCosts, kind: str, devices: Sequence[str], sample: Any, speeds: object
) -> dict[str, tuple[float, ...]]:
    if kind != "time":
        values = {
            "cost": layers.params,
            "params": layers.params,
            "flops": layers.flops,
            "memory": tuple(float(m) for m in layers.memory),
        }[kind]
        return dict.fromkeys(devices, values)
    if sample is None:
        raise PlanError(
            "balance_by='time' measures each layer on each device and needs sample=, an input batch.",
            hint="plan_layers(model, devices, balance_by='time', sample=x[:32]).",
        )
    if speeds is not None:
        raise PlanError(
            "balance_by='time' measures each device, so speeds= would count twice.",
            hint="drop speeds=, or balance by params/flops/memory with speeds.",
        )
    times = measure_layer_times(layers.model, sample, devices)
    return {d: tuple(times[d]) for d in devices}


def _read_layers(model: Any, balance_by: str | None, layer_bytes: Sequence[int] | None) -> tuple[LayerCosts, str]:
    if hasattr(model, "layers"):
        kind = "params" if balance_by is None else balance_by
        if kind not in BALANCE_BY:
            raise PlanError(
                f"balance_by {balance_by!r}: expected one of {list(BALANCE_BY)!r}.",
                hint="balance_by='params' balances weights; 'time' measures each layer.",
            )
        if layer_bytes is not None:
            raise PlanError(
                "layer_bytes is for a list of costs; a model's bytes come from its variables.",
                hint="drop layer_bytes=.",
            )
        return read_model(model), kind
    if balance_by is not None:
        raise PlanError(
            f"balance_by={balance_by!r} applies to a Keras model; a list already gives the costs.",
            hint="drop balance_by=, or pass the model.",
        )
    return _list_layers(model, layer_bytes), "cost"


def _list_layers(costs: object, layer_bytes: Sequence[int] | None) -> LayerCosts:
    if isinstance(costs, (str, bytes)) or not isinstance(costs, Sequence) or not costs:
        raise PlanError(
            f"model {costs!r}: expected a built Keras model or a non-empty list of layer costs.",
            hint="e.g. plan_layers([3.0, 1.0, 2.0], ['GPU:0', 'GPU:1']).",
        )
    for i, c in enumerate(costs):
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not (0 <= c <= sys.float_info.max):
            raise PlanError(
                f"cost of layer {i} is {short_repr(c)}: costs must be finite numbers >= 0.",
                hint="give each layer's cost (params, FLOPs, seconds) as a number.",
            )
    n = len(costs)
    if layer_bytes is None:
        memory = (0,) * n
    elif len(layer_bytes) != n or any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in layer_bytes):
        raise PlanError(
            f"layer_bytes {list(layer_bytes)!r}: expected {n} non-negative ints, one per cost.",
            hint="give the bytes of each layer's variables.",
        )
    else:
        memory = tuple(layer_bytes)
    return LayerCosts(
        names=tuple(f"layer_{i}" for i in range(n)),
        params=tuple(float(c) for c in costs),
        flops=tuple(float(c) for c in costs),
        memory=memory,
        edges=tuple((i, 0, i + 1) for i in range(n - 1)),
    )


def _names(names: Sequence[str], limit: int = 8) -> str:
    listed = ", ".join(repr(n) for n in names[:limit])
    return f"[{listed}{', ...' if len(names) > limit else ''}] ({len(names)} layers)"
