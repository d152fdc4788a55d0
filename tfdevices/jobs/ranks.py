"""Which GPUs are mine? Local ranks mapped onto GPUs. Pure: plans from explicit inputs.

>>> from tfdevices.jobs.env import launch_info
>>> info = launch_info({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2",
...                     "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2",
...                     "SLURM_STEP_GPUS": "2,3"})
>>> gpu_for_rank(info).gpus
(3,)
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

from tfdevices.core.errors import LaunchError, SelectionError
from tfdevices.gpus.inventory import Inventory
from tfdevices.jobs.env import RANK_GPUS, LaunchInfo, launch_info
from tfdevices.gpus.selection import Selection
from tfdevices.jobs.slurm import join_indices

MAPPINGS = ("sequential", "weighted")
Speeds = Union[Mapping[int, float], Sequence[Any]]
MapFunction = Callable[[int, tuple[int, ...]], Union[int, Sequence[int]]]


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

    @property
    def spec(self) -> str:
        """A spec for :func:`tfdevices.select` / :func:`tfdevices.configure`: ``"2"``, ``"0,1"`` or ``"none"``."""
        return join_indices(self.gpus) if self.gpus else "none"

    @property
    def cuda_visible_devices(self) -> str:
        """The mask for this rank (``"-1"``: no GPU)."""
        return join_indices(self.gpus) if self.gpus else "-1"

    @property
    def shared(self) -> bool:
        """Whether another local rank uses one of this rank's GPUs."""
        return self.memory_fraction is not None

    def env(self) -> dict[str, str]:
        """Variables that apply this assignment in a process not yet using CUDA."""
        return {"CUDA_VISIBLE_DEVICES": self.cuda_visible_devices, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                RANK_GPUS: join_indices(self.gpus)}

    def table(self) -> str:
        """Every local rank's GPUs; this rank marked with ``*``."""
        lines = [f"{self.method} mapping of {len(self.plan)} local rank(s) onto GPUs "
                 f"{join_indices(self.candidates) or '(none)'} from {self.candidates_from}: {self.reason}"]
        for r, gpus in enumerate(self.plan):
            mark = "*" if r == self.local_rank else " "
            lines.append(f" {mark}local rank {r}: {'GPU ' + join_indices(gpus) if gpus else 'CPU'}")
        return "\n".join(lines)


def gpu_for_rank(info: LaunchInfo | None = None, gpus: object = None, *,
                 local_rank: int | None = None, local_world_size: int | None = None,
                 mapping: str | Sequence[int | Sequence[int]] | MapFunction = "sequential",
                 speeds: Speeds | None = None, share: bool = False) -> GpuAssignment:
    """Chooses the GPUs of one local rank.

    Candidates, first that applies: ``gpus`` (a list of NVML indices, a
    :class:`~tfdevices.gpus.selection.Selection`, or an :class:`~tfdevices.gpus.inventory.Inventory`,
    whose visible GPUs are intersected with the scheduler's allocation), else the
    allocation in ``info.gpus`` (``SLURM_STEP_GPUS`` ...). Under ``tfdevices launch``
    the launcher's own assignment (``info.assigned_gpus``) is returned unless
    ``mapping`` or an explicit list or Selection in ``gpus`` says otherwise (an
    Inventory does not: inside a worker it shows only the GPUs the launcher left visible).

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

    Returns:
        A frozen :class:`GpuAssignment`.

    Raises:
        LaunchError: the local rank or world size is unknown or inconsistent, or a
            mapping is malformed.
        SelectionError: more ranks than GPUs without ``share``, an explicit or returned
            GPU is not a candidate, or no candidate has a speed.

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
    rank = info.local_rank if local_rank is None else local_rank
    size = info.local_world_size if local_world_size is None else local_world_size
    if size is None:
        raise LaunchError(f"the number of processes on this machine is unknown (source {info.source}).",
                          hint="pass local_world_size=, or set LOCAL_WORLD_SIZE / SLURM_STEP_TASKS_PER_NODE.")
    for name, value, minimum in (("local_rank", rank, 0), ("local_world_size", size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise LaunchError(f"{name}={value!r} must be a whole number >= {minimum}.",
                              hint=f"pass {name} as an int.")
    if rank >= size:
        raise LaunchError(f"local_rank={rank} is out of range for local_world_size={size}.",
                          hint=f"local ranks run 0..{size - 1}.")
    from_env = gpus is None or (hasattr(gpus, "gpus") and not hasattr(gpus, "spec"))  # nothing or an Inventory
    if info.assigned_gpus is not None and from_env and mapping == "sequential":
        return GpuAssignment(rank, info.assigned_gpus, (), info.assigned_gpus, RANK_GPUS, "launcher",
                             reason=f"tfdevices launch assigned them ({RANK_GPUS}={join_indices(info.assigned_gpus)})")
    candidates, origin = _candidates(info, gpus)
    method, plan = _plan(size, candidates, mapping, speeds, share)
    return _assignment(rank, plan, candidates, origin, method, speeds)


def _candidates(info: LaunchInfo, gpus: object) -> tuple[tuple[int, ...], str]:
    if gpus is None:
        if info.gpus is None:
            return (), "nothing (no GPU list given and the launch environment names none)"
        return info.gpus, str(info.gpus_variable)
    if isinstance(gpus, (list, tuple)) and all(isinstance(g, int) and not isinstance(g, bool) and g >= 0
                                               for g in gpus):
        return tuple(gpus), "the gpus argument"
    if isinstance(gpus, Selection):  # the caller chose these
        return tuple(g.index for g in gpus.gpus), f"selection {gpus.spec!r}"
    if not isinstance(gpus, Inventory):
        raise LaunchError(f"gpus={gpus!r}: expected NVML indices, a Selection or an Inventory.",
                          hint="pass e.g. gpus=[0, 1] or tfdevices.select('all').")
    visible = tuple(g.index for g in (gpus.visible or gpus.gpus))
    if info.gpus is None:
        return visible, "the inventory's visible GPUs"
    inside = tuple(i for i in info.gpus if i in visible)
    if len(inside) == len(info.gpus):
        return inside, f"{info.gpus_variable} (all present in the inventory)"
    if len(visible) == len(info.gpus):
        return visible, (f"the inventory's visible GPUs {join_indices(visible)}: {info.gpus_variable}="
                         f"{join_indices(info.gpus)} are renumbered inside the job's device cgroup")
    raise SelectionError(f"{info.gpus_variable}={join_indices(info.gpus)} allocates GPUs this machine does not show; "
                         f"visible GPUs: {join_indices(visible) or 'none'}.",
                         hint="check CUDA_VISIBLE_DEVICES and the job's GPU request (--gpus / --gres).")


def _plan(size: int, candidates: tuple[int, ...], mapping: object, speeds: Speeds | None,
          share: bool) -> tuple[str, tuple[tuple[int, ...], ...]]:
    if callable(mapping):
        plan = tuple(_checked(mapping(r, candidates), candidates, f"mapping function for local rank {r}")
                     for r in range(size))
        return "function", plan
    if isinstance(mapping, (list, tuple)):
        if len(mapping) < size:
            raise LaunchError(f"mapping={list(mapping)!r} has {len(mapping)} entr(ies) for {size} local ranks.",
                              hint="give one GPU (or list of GPUs) per local rank.")
        return "explicit", tuple(_checked(m, candidates, f"mapping[{r}]") for r, m in enumerate(mapping[:size]))
    if mapping not in MAPPINGS:
        raise LaunchError(f"mapping={mapping!r}: unknown mapping; known: {', '.join(MAPPINGS)}, a list or a function.",
                          hint="use 'sequential', 'weighted', [gpu per rank] or a function.")
    if not candidates:
        return str(mapping), ((),) * size
    if size > len(candidates) and not share:
        raise SelectionError(f"{size} local ranks but only {len(candidates)} GPU(s) ({join_indices(candidates)}).",
                             hint="start at most one process per GPU, or pass share=True (--share) to put "
                                  "several ranks on a GPU.")
    if mapping == "weighted":
        return "weighted", _weighted(size, candidates, _speed_table(speeds, candidates))
    if size > len(candidates):
        return "sequential", tuple((candidates[r % len(candidates)],) for r in range(size))
    per = len(candidates) // size
    return "sequential", tuple(candidates[r * per:(r + 1) * per] for r in range(size))


def _checked(value: object, candidates: tuple[int, ...], what: str) -> tuple[int, ...]:
    items = [value] if isinstance(value, int) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                       for i in items):
        raise LaunchError(f"{what} gave {value!r}: expected an NVML index or a list of them.",
                          hint="return e.g. 2 or [0, 1].")
    outside = [i for i in items if i not in candidates]
    if candidates and outside:
        raise SelectionError(f"{what} gave GPU(s) {outside}, which are not among the candidates "
                             f"{join_indices(candidates)}.", hint="map ranks onto the GPUs this machine offers.")
    return tuple(items)


def _speed_table(speeds: Speeds | None, candidates: tuple[int, ...]) -> dict[int, float]:
    if speeds is None:
        raise LaunchError("mapping='weighted' needs speeds=.",
                          hint="pass speeds={gpu index: relative speed} or tfdevices.measure_devices().")
    if isinstance(speeds, Mapping):
        table = dict(speeds)
    else:
        table = {s.gpu_index: s.flops for s in speeds if getattr(s, "gpu_index", None) is not None}
    bad = {k: v for k, v in table.items() if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0}
    if bad:
        raise LaunchError(f"speeds {bad} must be positive numbers.", hint="pass measured FLOP/s or relative speeds.")
    missing = [c for c in candidates if c not in table]
    if missing:
        raise SelectionError(f"no speed for GPU(s) {missing}; speeds are known for {sorted(table) or 'none'}.",
                             hint="measure every candidate GPU (tfdevices.measure_devices()).")
    return {c: float(table[c]) for c in candidates}


def _weighted(size: int, candidates: tuple[int, ...], speed: dict[int, float]) -> tuple[tuple[int, ...], ...]:
    if size <= len(candidates):
        fastest = sorted(candidates, key=lambda c: (-speed[c], candidates.index(c)))[:size]
        return tuple((c,) for c in candidates if c in fastest)
    counts = {c: 1 for c in candidates}
    for _ in range(size - len(candidates)):  # D'Hondt: the next rank goes where it is worth most
        best = max(candidates, key=lambda c: (speed[c] / (counts[c] + 1), -candidates.index(c)))
        counts[best] += 1
    return tuple((c,) for c in candidates for _ in range(counts[c]))


def gpu_plan(info: LaunchInfo, gpus: object, *, share: bool = False) -> tuple[GpuAssignment, ...]:
    """Every local rank's :func:`gpu_for_rank` (sequential mapping) at once: linear in the number of ranks.

    The launcher plans its N workers with it: the candidates, the plan and the GPUs'
    users are found once, not once per rank.

    >>> [a.gpus for a in gpu_plan(LaunchInfo(world_size=3, local_world_size=3), [4, 5], share=True)]
    [(4,), (5,), (4,)]
    """
    size = info.local_world_size
    if size is None or size < 1:
        raise LaunchError(f"local_world_size={size!r} must be a whole number >= 1.", hint="set local_world_size.")
    candidates, origin = _candidates(info, gpus)
    method, plan = _plan(size, candidates, "sequential", None, share)
    users = _users(plan)
    return tuple(_assignment(r, plan, candidates, origin, method, None, users) for r in range(size))


def _users(plan: tuple[tuple[int, ...], ...]) -> dict[int, int]:
    """How many ranks use each GPU."""
    users: dict[int, int] = {}
    for p in plan:
        for g in set(p):
            users[g] = users.get(g, 0) + 1
    return users


def _assignment(rank: int, plan: tuple[tuple[int, ...], ...], candidates: tuple[int, ...], origin: str,
                method: str, speeds: Speeds | None, users: dict[int, int] | None = None) -> GpuAssignment:
    mine = plan[rank]
    users = _users(plan) if users is None else users
    fraction = (1.0 / max(users[g] for g in mine)) if mine and max(users[g] for g in mine) > 1 else None
    share = None
    if method == "weighted" and mine:
        speed = _speed_table(speeds, candidates)
        total = sum(speed[g] for g in set(itertools.chain(*plan)))
        share = sum(speed[g] / users[g] for g in mine) / total
    elif plan:
        share = 1.0 / len(plan)
    if not candidates and method in MAPPINGS:
        reason = "no GPU to map: every rank runs on the CPU"
    elif fraction is not None:
        reason = f"{users[mine[0]]} ranks share GPU {mine[0]}: cap each at {fraction:.0%} of its memory"
    else:
        reason = f"local rank {rank} of {len(plan)} takes GPU(s) {join_indices(mine) or 'none (CPU)'}"
    unused = [c for c in candidates if c not in users]
    if unused:
        reason += f"; GPU(s) {join_indices(unused)} left unused"
    return GpuAssignment(rank, mine, plan, candidates, origin, method, fraction, share, reason)

