"""Which GPUs are mine? Local ranks mapped onto GPUs. Pure: plans from explicit inputs.

>>> from tfdevices.jobs.env import launch_info
>>> info = launch_info({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2",
...                     "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2",
...                     "SLURM_STEP_GPUS": "2,3"})
>>> gpu_for_rank(info).gpus
(3,)
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, overload

from tfdevices.core.errors import LaunchError, SelectionError
from tfdevices.core.units import short_repr
from tfdevices.gpus import visibility
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.selection import Selection
from tfdevices.gpus.topology import Topology, format_cpus
from tfdevices.jobs.env import RANK_GPUS, LaunchInfo, launch_info
from tfdevices.jobs.slurm import join_indices

MAPPINGS = ("sequential", "weighted")
MAX_LOCAL_RANKS = 1_000_000
"""The most processes one machine's plan may hold."""
Speeds = Mapping[int, float] | Sequence[Any]
MapFunction = Callable[[int, tuple[int, ...]], int | Sequence[int]]


@dataclasses.dataclass(frozen=True)
class GpuAssignment:
    """The GPUs one local rank should use, and the plan for every rank on this machine.

    Attributes:
        local_rank: the rank this assignment is for.
        gpus: its GPUs as NVML indices (empty: run on the CPU).
        plan: the GPUs of every local rank, indexed by local rank.
        candidates: the GPUs this machine offered, in order.
        candidates_from: where :attr:`candidates` came from (a variable, an argument ...).
        method: ``"sequential"``, ``"explicit"``, ``"function"``, ``"weighted"`` or ``"launcher"``.
        memory_fraction: the share of GPU memory this rank should cap itself to when it
            shares its GPU (``None`` when not shared).
        work_share: this rank's share of the machine's work, by speed (equal without speeds).
        reason: why, for people.
        cpus: the CPUs close to its GPUs, where the topology is known and the machine has
            several NUMA nodes (empty otherwise): bind the rank there to keep its GPU and
            its CPU cores on one NUMA node, as torchrun's NUMA binding does.
        numa_node: the NUMA node of its GPUs (``None``: unknown, one node, or several).
    """

    local_rank: int
    gpus: tuple[int, ...]
    plan: tuple[tuple[int, ...], ...]
    candidates: tuple[int, ...]
    candidates_from: str
    method: str
    memory_fraction: float | None = None
    work_share: float | None = None
    reason: str = ""
    cpus: tuple[int, ...] = ()
    numa_node: int | None = None

    @property
    def spec(self) -> str:
        """A spec for :func:`tfdevices.select` / :func:`tfdevices.configure`: ``"2"``, ``"0,1"`` or ``"none"``."""
        return join_indices(self.gpus) if self.gpus else "none"

    @property
    def cuda_visible_devices(self) -> str:
        """The mask for this rank (``"-1"``: no GPU)."""
        return visibility.mask(self.gpus)

    @property
    def shared(self) -> bool:
        """Whether another local rank uses one of this rank's GPUs."""
        return self.memory_fraction is not None

    def env(self) -> dict[str, str]:
        """Variables that apply this assignment in a process not yet using CUDA."""
        return {**visibility.mask_env(self.gpus), RANK_GPUS: join_indices(self.gpus)}

    def table(self) -> str:
        """Every local rank's GPUs; this rank marked with ``*`` (only this rank's where its launcher chose them)."""
        if not self.plan:  # the launcher chose: this process knows its own GPUs only
            where = "GPU " + join_indices(self.gpus) if self.gpus else "CPU (no GPU)"
            lines = [f"{self.method} assignment: local rank {self.local_rank} runs on {where}: {self.reason}"]
            if self.cpus:
                lines.append(f"local rank {self.local_rank}: NUMA node {self.numa_node}, CPUs {format_cpus(self.cpus)}")
            return "\n".join(lines)
        lines = [
            (
                f"{self.method} mapping of {len(self.plan)} local rank(s) onto GPUs "
                f"{join_indices(self.candidates) or '(none)'} from {self.candidates_from}: {self.reason}"
            )
        ]
        for r, gpus in enumerate(self.plan):
            mark = "*" if r == self.local_rank else " "
            lines.append(f" {mark}local rank {r}: {'GPU ' + join_indices(gpus) if gpus else 'CPU'}")
        if self.cpus:
            lines.append(f"local rank {self.local_rank}: NUMA node {self.numa_node}, CPUs {format_cpus(self.cpus)}")
        return "\n".join(lines)


def gpu_for_rank(
    info: LaunchInfo | None = None,
    gpus: object = None,
    *,
    local_rank: int | None = None,
    local_world_size: int | None = None,
    mapping: str | Sequence[int | Sequence[int]] | MapFunction = "sequential",
    speeds: Speeds | None = None,
    share: bool = False,
    topology: Topology | None = None,
) -> GpuAssignment:
    """Chooses the GPUs of one local rank.

    Candidates, first that applies: ``gpus`` (a list of NVML indices, a :class:`~tfdevices.gpus.selection.Selection`,
    or an :class:`~tfdevices.gpus.inventory.Inventory`, whose visible GPUs are intersected with the scheduler's
    allocation), else the allocation in ``info.gpus`` (``SLURM_STEP_GPUS`` ...). Under ``tfdevices launch`` the
    launcher's own assignment (``info.assigned_gpus``) is returned unless ``mapping`` or an explicit list or
    Selection in ``gpus`` says otherwise (an Inventory does not: inside a worker it shows only the GPUs the
    launcher left visible).

    Args:
        info: from :func:`launch_info`; ``None`` reads ``os.environ``.
        gpus: the candidates (see above).
        local_rank: overrides ``info.local_rank``.
        local_world_size: overrides ``info.local_world_size``.
        mapping: ``"sequential"`` (rank r takes the r-th block of candidates), ``"weighted"``
            (by ``speeds``: the fastest GPUs first, and more ranks on faster GPUs when
            sharing), an explicit list indexed by local rank (``[2, 3]`` or
            ``[[0, 1], [2, 3]]``), or a function ``(local_rank, candidates) -> index(es)``.
        speeds: for ``"weighted"``: NVML index -> relative speed, or
            :class:`~tfdevices.measure.DeviceSpeed` results with ``gpu_index`` set.
        share: allow more local ranks than GPUs (ranks then share GPUs).
        topology: how the GPUs are wired (default: ``gpus.topology`` when ``gpus`` is an Inventory). On a
            machine with several NUMA nodes, sequential blocks of several GPUs are drawn within one node where
            they can be, and each assignment carries the CPUs of its GPUs' node (:attr:`GpuAssignment.cpus`).

    Returns:
        A frozen :class:`GpuAssignment`.

    Raises:
        LaunchError: the local rank or world size is unknown or inconsistent, or a mapping is malformed.
        SelectionError: more ranks than GPUs without ``share``, an explicit or returned GPU is not a
            candidate, or no candidate has a speed.

    >>> a = gpu_for_rank(local_rank=1, local_world_size=2, gpus=[2, 3])
    >>> a.gpus, a.plan, a.cuda_visible_devices
    ((3,), ((2,), (3,)), '3')
    >>> gpu_for_rank(local_rank=2, local_world_size=4, gpus=[0, 1], share=True).memory_fraction
    0.5
    >>> gpu_for_rank(local_rank=0, local_world_size=3, gpus=[0, 1], mapping="weighted",
    ...              speeds={0: 2.0, 1: 1.0}, share=True).plan
    ((0,), (0,), (1,))
    """
    info = launch_info() if info is None else info
    size = _local_size(info, local_world_size)
    rank = _local_rank(info.local_rank if local_rank is None else local_rank, size)
    if info.assigned_gpus is not None and mapping == "sequential" and (gpus is None or isinstance(gpus, Inventory)):
        return _launchers_assignment(rank, info.assigned_gpus)
    return _planned(info, gpus, size, mapping, speeds, share, topology).assignment(rank)


def _local_rank(rank: int, size: int) -> int:
    """``rank``, checked to be a local rank of ``size`` processes."""
    _check_whole("local_rank", rank, 0)
    if rank >= size:
        raise LaunchError(
            f"local_rank={rank} is out of range for local_world_size={size}.", hint=f"local ranks run 0..{size - 1}."
        )
    return rank


def _launchers_assignment(rank: int, gpus: tuple[int, ...]) -> GpuAssignment:
    """The GPUs ``tfdevices launch`` assigned this rank (it knows its own, not the other ranks')."""
    return GpuAssignment(
        rank, gpus, (), gpus, RANK_GPUS, "launcher", reason=f"tfdevices launch assigned this rank's GPUs ({RANK_GPUS})"
    )


def _planned(
    info: LaunchInfo,
    gpus: object,
    size: int,
    mapping: str | Sequence[int | Sequence[int]] | MapFunction,
    speeds: Speeds | None,
    share: bool,
    topology: Topology | None,
) -> _Planned:
    """The plan of every local rank: the candidates, grouped by NUMA node where that helps, then mapped."""
    candidates, origin = _candidates(info, gpus)
    topology = _topology(gpus, topology)
    method, plan = _plan(size, _numa_grouped(candidates, topology, size, mapping), mapping, speeds, share)
    return _Planned(plan, candidates, origin, method, speeds, topology)


def plan_ranks(
    info: LaunchInfo | None = None,
    gpus: object = None,
    *,
    local_world_size: int | None = None,
    mapping: str | Sequence[int | Sequence[int]] | MapFunction = "sequential",
    speeds: Speeds | None = None,
    share: bool = False,
    topology: Topology | None = None,
) -> RankPlan:
    """Every local rank's assignment from one plan: linear in the number of ranks.

    Same arguments and checks as :func:`gpu_for_rank` (without ``local_rank``); a
    launcher that starts N processes calls this once instead of ``gpu_for_rank`` N times.

    Returns:
        A :class:`RankPlan`: a sequence of one :class:`GpuAssignment` per local rank,
        each built when it is read.

    >>> [a.gpus for a in plan_ranks(local_world_size=4, gpus=[0, 1], share=True)]
    [(0,), (1,), (0,), (1,)]
    """
    info = launch_info() if info is None else info
    return RankPlan(_planned(info, gpus, _local_size(info, local_world_size), mapping, speeds, share, topology))


def _topology(gpus: object, topology: Topology | None) -> Topology | None:
    """The topology given, else an Inventory's; kept only where the GPUs span several NUMA nodes."""
    if topology is None and isinstance(gpus, Inventory):
        topology = gpus.topology
    return topology if topology is not None and len(topology.numa_nodes) > 1 else None


def _numa_grouped(
    candidates: tuple[int, ...], topology: Topology | None, size: int, mapping: object
) -> tuple[int, ...]:
    """For sequential blocks of several GPUs per rank: the candidates grouped by NUMA node (nodes in order of
    first appearance, GPUs in their order within a node), so a block stays on one node where it can.

    >>> topo = Topology(gpus=(0, 1, 2, 3), links=(("X",) * 4,) * 4, numa_affinity=(0, 1, 0, 1))
    >>> _numa_grouped((0, 1, 2, 3), topo, 2, "sequential")
    (0, 2, 1, 3)
    """
    if topology is None or mapping != "sequential" or size >= len(candidates):
        return candidates
    nodes = {n: k for k, n in enumerate(dict.fromkeys(topology.numa(c) for c in candidates))}
    return tuple(sorted(candidates, key=lambda c: nodes[topology.numa(c)]))


def numa_cpus(gpus: Sequence[int], topology: Topology | None) -> tuple[tuple[int, ...], int | None]:
    """The CPUs close to ``gpus`` and their NUMA node: ``((), None)`` where unknown or on one node.

    GPUs on one node give that node's CPUs; GPUs on several give the union of their CPUs
    and no node.

    >>> topo = Topology(gpus=(0, 1), links=(("X", "SYS"), ("SYS", "X")), cpu_affinity=("0-3", "4-7"),
    ...                 numa_affinity=(0, 1))
    >>> numa_cpus([1], topo)
    ((4, 5, 6, 7), 1)
    """
    if topology is None or not gpus or len(topology.numa_nodes) < 2:
        return (), None
    nodes = {topology.numa(g) for g in gpus}
    cpus = sorted({c for g in gpus for c in topology.cpus(g)})
    return tuple(cpus), (nodes.pop() if len(nodes) == 1 else None)


class RankPlan(Sequence[GpuAssignment]):
    """The assignments of every local rank (see :func:`plan_ranks`); ``plan[r]`` is local rank r's.

    Attributes:
        plan: the GPUs of every local rank, indexed by local rank.
        candidates: the GPUs offered, in order.
        method: how ranks were mapped.
    """

    def __init__(self, planned: _Planned) -> None:
        self._planned = planned
        self.plan, self.candidates, self.method = planned.plan, planned.candidates, planned.method

    def __len__(self) -> int:
        return len(self.plan)

    @overload
    def __getitem__(self, rank: int) -> GpuAssignment: ...
    @overload
    def __getitem__(self, rank: slice) -> tuple[GpuAssignment, ...]: ...
    def __getitem__(self, rank: int | slice) -> GpuAssignment | tuple[GpuAssignment, ...]:
        if isinstance(rank, slice):
            return tuple(self._planned.assignment(r) for r in range(len(self.plan))[rank])
        if not -len(self.plan) <= rank < len(self.plan):
            raise IndexError(f"local rank {rank} is out of range 0..{len(self.plan) - 1}")
        return self._planned.assignment(rank % len(self.plan))

    def __repr__(self) -> str:
        return f"RankPlan({len(self.plan)} local ranks, {self.method}, GPUs {_listed(self.candidates)})"


def _listed(indices: Sequence[int]) -> str:
    """``"0,1,2"``, shortened past 16 GPUs: ``"0,1,...,15,... (16,000 in all)"``."""
    return (
        join_indices(indices) if len(indices) <= 16 else f"{join_indices(indices[:16])},... ({len(indices):,} in all)"
    )


def _check_whole(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LaunchError(
            f"{name}={short_repr(value)} must be a whole number >= {minimum}.", hint=f"pass {name} as an int."
        )


def _local_size(info: LaunchInfo, local_world_size: int | None) -> int:
    size = info.local_world_size if local_world_size is None else local_world_size
    if size is None:
        raise LaunchError(
            f"the number of processes on this machine is unknown (source {info.source}).",
            hint="pass local_world_size=, or set LOCAL_WORLD_SIZE / SLURM_STEP_TASKS_PER_NODE.",
        )
    _check_whole("local_world_size", size, 1)
    if size > MAX_LOCAL_RANKS:
        raise LaunchError(
            f"local_world_size={size:,}: more than {MAX_LOCAL_RANKS:,} processes on one machine.",
            hint="check the number of processes; each needs its own CPU time and memory.",
        )
    return size


def _candidates(info: LaunchInfo, gpus: object) -> tuple[tuple[int, ...], str]:
    if gpus is None:
        if info.gpus is None:
            return (), "nothing (no GPU list given and the launch environment names none)"
        return info.gpus, str(info.gpus_variable)
    if isinstance(gpus, (list, tuple)) and all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus):
        return _distinct(tuple(gpus), "gpus", gpus), "the gpus argument"
    if isinstance(gpus, Selection):  # the caller chose these
        return _distinct(
            tuple(g.index for g in gpus.gpus), f"selection {gpus.spec!r}", gpus.spec
        ), f"selection {gpus.spec!r}"
    if not isinstance(gpus, Inventory):
        raise LaunchError(
            f"gpus={short_repr(gpus)}: expected NVML indices, a Selection or an Inventory.",
            hint="pass e.g. gpus=[0, 1] or tfdevices.select('all').",
        )
    visible = tuple(dict.fromkeys(g.index for g in (gpus.visible or gpus.gpus)))  # MIG instances: their GPU once
    if info.gpus is None:
        return visible, "the inventory's visible GPUs"
    shown_gpus = set(visible)
    inside = tuple(i for i in info.gpus if i in shown_gpus)
    if len(inside) == len(info.gpus):
        return inside, f"{info.gpus_variable} (all present in the inventory)"
    if len(visible) == len(info.gpus):
        return visible, (
            f"the inventory's visible GPUs {join_indices(visible)}: {info.gpus_variable}="
            f"{join_indices(info.gpus)} are renumbered inside the job's device cgroup"
        )
    raise SelectionError(
        f"{info.gpus_variable}={join_indices(info.gpus)} allocates GPUs this machine does not show; "
        f"visible GPUs: {join_indices(visible) or 'none'}.",
        hint="check CUDA_VISIBLE_DEVICES and the job's GPU request (--gpus / --gres).",
    )


def _distinct(indices: tuple[int, ...], what: str, given: object) -> tuple[int, ...]:
    """Refuses a list of GPUs that names one GPU twice (one GPU is one GPU; sharing is ``share=True``)."""
    if len(set(indices)) == len(indices):
        return indices
    seen: set[int] = set()
    twice = sorted({i for i in indices if i in seen or seen.add(i)})  # type: ignore[func-returns-value]
    raise LaunchError(
        f"{what} {short_repr(given)} names GPU {join_indices(twice[:8])} more than once "
        "(MIG instances of one GPU map to its NVML index); one GPU is one GPU.",
        hint="list each GPU once; to run several ranks on one GPU pass share=True (--share).",
    )


def _plan(
    size: int, candidates: tuple[int, ...], mapping: object, speeds: Speeds | None, share: bool
) -> tuple[str, tuple[tuple[int, ...], ...]]:
    if callable(mapping) or isinstance(mapping, (list, tuple)):
        method, plan = _given_plan(size, candidates, mapping)
        _refuse_unshared(plan, share, method)
        return method, plan
    if mapping not in MAPPINGS:
        raise LaunchError(
            f"mapping={mapping!r}: unknown mapping; known: {', '.join(MAPPINGS)}, a list or a function.",
            hint="use 'sequential', 'weighted', [gpu per rank] or a function.",
        )
    if not candidates:
        return str(mapping), ((),) * size
    if size > len(candidates) and not share:
        raise SelectionError(
            f"{size} local ranks but only {len(candidates)} GPU(s) ({_listed(candidates)}).",
            hint="start at most one process per GPU, or pass share=True (--share) to put several ranks on a GPU.",
        )
    if mapping == "weighted":
        return "weighted", _weighted(size, candidates, _speed_table(speeds, candidates))
    if size > len(candidates):
        return "sequential", tuple((candidates[r % len(candidates)],) for r in range(size))
    per = len(candidates) // size
    return "sequential", tuple(candidates[r * per : (r + 1) * per] for r in range(size))


def _given_plan(size: int, candidates: tuple[int, ...], mapping: object) -> tuple[str, tuple[tuple[int, ...], ...]]:
    allowed = frozenset(candidates)
    if callable(mapping):
        return "function", tuple(
            _checked(mapping(r, candidates), candidates, allowed, f"mapping function for local rank {r}")
            for r in range(size)
        )
    if not isinstance(mapping, (list, tuple)):
        raise LaunchError(f"mapping={short_repr(mapping)}: expected a list or a function.", hint="e.g. mapping=[2, 3].")
    if len(mapping) < size:
        raise LaunchError(
            f"mapping={short_repr(list(mapping))} has {len(mapping)} entr(ies) for {size} local ranks.",
            hint="give one GPU (or list of GPUs) per local rank.",
        )
    return "explicit", tuple(_checked(m, candidates, allowed, f"mapping[{r}]") for r, m in enumerate(mapping[:size]))


def _refuse_unshared(plan: tuple[tuple[int, ...], ...], share: bool, method: str) -> None:
    if share:
        return
    users = collections.Counter(g for gpus in plan for g in gpus)
    crowded = sorted(g for g, n in users.items() if n > 1)
    if crowded:
        raise SelectionError(
            f"the {method} mapping puts {users[crowded[0]]} local ranks on GPU {crowded[0]}"
            + (f" (and shares GPU(s) {join_indices(crowded[1:8])})" if len(crowded) > 1 else "")
            + "; one GPU is one GPU unless sharing is asked for.",
            hint="map each rank to its own GPU, or pass share=True (--share).",
        )


def _checked(value: object, candidates: tuple[int, ...], allowed: frozenset[int], what: str) -> tuple[int, ...]:
    items = [value] if isinstance(value, int) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        raise LaunchError(
            f"{what} gave {short_repr(value)}: expected an NVML index or a list of them.",
            hint="return e.g. 2 or [0, 1].",
        )
    outside = [i for i in items if i not in allowed]
    if candidates and outside:
        raise SelectionError(
            f"{what} gave GPU(s) {outside[:8]}, which are not among the candidates {_listed(candidates)}.",
            hint="map ranks onto the GPUs this machine offers.",
        )
    return _distinct(tuple(items), what, value)


def _speed_table(speeds: Speeds | None, candidates: tuple[int, ...]) -> dict[int, float]:
    if speeds is None:
        raise LaunchError(
            "mapping='weighted' needs speeds=.",
            hint="pass speeds={gpu index: relative speed} or tfdevices.measure_devices().",
        )
    if isinstance(speeds, Mapping):
        table = dict(speeds)
    else:
        table = {s.gpu_index: s.flops for s in speeds if getattr(s, "gpu_index", None) is not None}
    bad = {k: v for k, v in table.items() if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0}
    if bad:
        raise LaunchError(f"speeds {bad} must be positive numbers.", hint="pass measured FLOP/s or relative speeds.")
    missing = [c for c in candidates if c not in table]
    if missing:
        raise SelectionError(
            f"no speed for GPU(s) {missing}; speeds are known for {sorted(table) or 'none'}.",
            hint="measure every candidate GPU (tfdevices.measure_devices()).",
        )
    return {c: float(table[c]) for c in candidates}


def _weighted(size: int, candidates: tuple[int, ...], speed: dict[int, float]) -> tuple[tuple[int, ...], ...]:
    position = {c: i for i, c in enumerate(candidates)}
    if size <= len(candidates):
        fastest = set(sorted(candidates, key=lambda c: (-speed[c], position[c]))[:size])
        return tuple((c,) for c in candidates if c in fastest)
    counts = dict.fromkeys(candidates, 1)
    # D'Hondt: the next rank goes where it is worth most (ties: the earlier candidate); a heap keeps it n log c
    heap = [(-speed[c] / 2, position[c], c) for c in candidates]
    heapq.heapify(heap)
    for _ in range(size - len(candidates)):
        _, pos, best = heapq.heappop(heap)
        counts[best] += 1
        heapq.heappush(heap, (-speed[best] / (counts[best] + 1), pos, best))
    return tuple((c,) for c in candidates for _ in range(counts[c]))


class _Planned:
    """A plan and what every rank's assignment shares (counted once, so each assignment costs O(its GPUs))."""

    def __init__(
        self,
        plan: tuple[tuple[int, ...], ...],
        candidates: tuple[int, ...],
        origin: str,
        method: str,
        speeds: Speeds | None,
        topology: Topology | None = None,
    ) -> None:
        self.plan, self.candidates, self.origin, self.method = plan, candidates, origin, method
        self.topology = topology
        self.users = collections.Counter(g for gpus in plan for g in gpus)
        self.speed = _speed_table(speeds, candidates) if method == "weighted" and candidates else {}
        self.total = sum(self.speed[g] for g in self.users if g in self.speed)
        unused = [c for c in candidates if c not in self.users]
        self.unused = f"; GPU(s) {_listed(unused)} left unused" if unused else ""
        self._facts: dict[tuple[int, ...], tuple[float | None, float | None, str | None]] = {}

    def assignment(self, rank: int) -> GpuAssignment:
        mine = self.plan[rank]
        fraction, share, reason = self._shared_facts(mine)
        if reason is None:
            reason = f"local rank {rank} of {len(self.plan)} takes GPU(s) {join_indices(mine) or 'none (CPU)'}"
        cpus, node = numa_cpus(mine, self.topology)
        return GpuAssignment(
            rank,
            mine,
            self.plan,
            self.candidates,
            self.origin,
            self.method,
            fraction,
            share,
            reason + self.unused,
            cpus,
            node,
        )

    def _shared_facts(self, mine: tuple[int, ...]) -> tuple[float | None, float | None, str | None]:
        """Memory fraction, work share and (unless it names the rank) the reason: the same for every rank
        with these GPUs, so computed once per distinct GPU set.
        """
        facts = self._facts.get(mine)
        if facts is None:
            most = max((self.users[g] for g in mine), default=0)
            fraction = 1.0 / most if most > 1 else None
            share = None
            if self.method == "weighted" and mine:
                share = sum(self.speed[g] / self.users[g] for g in mine) / self.total
            elif self.plan:
                share = 1.0 / len(self.plan)
            reason = None
            if not self.candidates and self.method in MAPPINGS:
                reason = "no GPU to map: every rank runs on the CPU"
            elif fraction is not None:
                reason = f"{self.users[mine[0]]} ranks share GPU {mine[0]}: cap each at {fraction:.0%} of its memory"
            facts = self._facts[mine] = (fraction, share, reason)
        return facts


def cpu_binding(
    gpus_per_rank: Sequence[Sequence[int]], topology: Topology | None, available: Iterable[int]
) -> tuple[dict[int, tuple[int, ...]], tuple[str, ...]]:
    """Which CPUs each local rank should be bound to, so its GPU and its CPU cores share a NUMA node (pure).

    Args:
        gpus_per_rank: each local rank's GPUs (NVML indices).
        topology: the machine's wiring; ``None`` or a single NUMA node binds nothing.
        available: the CPUs this process may use (``os.sched_getaffinity(0)``).

    Returns:
        ``({local rank: CPUs}, notes)``: ranks whose close CPUs are not available to this
        process (a cgroup, taskset, or a listing from another machine) are left unbound,
        with a note.

    >>> topo = Topology(gpus=(0, 1), links=(("X", "SYS"), ("SYS", "X")), cpu_affinity=("0-3", "4-7"),
    ...                 numa_affinity=(0, 1))
    >>> cpu_binding([(0,), (1,)], topo, range(6))
    ({0: (0, 1, 2, 3), 1: (4, 5)}, ())
    """
    free = frozenset(available)
    bound: dict[int, tuple[int, ...]] = {}
    notes: list[str] = []
    for rank, gpus in enumerate(gpus_per_rank):
        cpus, node = numa_cpus(tuple(gpus), topology)
        usable = tuple(c for c in cpus if c in free)
        if usable:
            bound[rank] = usable
        elif cpus:
            where = f"NUMA node {node}" if node is not None else "its GPUs' NUMA nodes"
            notes.append(
                f"local rank {rank} left unbound: the CPUs of {where} ({format_cpus(cpus)}) are not "
                f"available to this process (it may use {format_cpus(sorted(free)) or 'none'})."
            )
    return bound, tuple(notes)


class pinned:  # noqa: N801 (read as a function: `with pinned(cpus):`)
    """Runs its block with this thread bound to ``cpus``: a child started there inherits the binding
    (Linux binds per thread, so the launcher's other threads are untouched); restored after.
    """

    def __init__(self, cpus: Sequence[int] | None) -> None:
        self.cpus = cpus
        self.before: set[int] | None = None

    def __enter__(self) -> None:
        if self.cpus:
            self.before = os.sched_getaffinity(0)
            os.sched_setaffinity(0, self.cpus)

    def __exit__(self, *exc: object) -> None:
        if self.before is not None:
            os.sched_setaffinity(0, self.before)
