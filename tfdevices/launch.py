"""Map ranks: who am I in a multi-process job, and which GPUs are mine?

Pure: :func:`launch_info` reads an environment mapping it is given (``os.environ``
by default) and :func:`gpu_for_rank` plans from explicit inputs. Neither imports
TensorFlow nor touches a GPU, so both run inside ``tfdevices launch`` and on
machines without TensorFlow.

Sources, innermost launcher first (the first one present wins; the others are
listed in :attr:`LaunchInfo.ignored`):

==============  ===========================================================  =====================
source          variables                                                    set by
==============  ===========================================================  =====================
``TF_CONFIG``   ``TF_CONFIG`` (cross-checked with ``RANK``/``WORLD_SIZE``)   ``tfdevices launch``, TF jobs
``OMPI``        ``OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE``       Open MPI ``mpirun``
``PMI``         ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID/NRANKS``       MPICH, Intel MPI, ``srun --mpi=pmi2``
``ENV``         ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``  torchrun-style launchers
``SLURM``       ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS`` ...     ``srun`` (a job step)
``none``        nothing                                                      a single process
==============  ===========================================================  =====================

An inner launcher runs inside an outer one (``mpirun`` or ``tfdevices launch``
inside an ``sbatch`` script inherits the batch step's ``SLURM_PROCID=0``), so the
innermost source is the one that describes this process. The GPUs the scheduler
allocated come from ``SLURM_STEP_GPUS``, ``SLURM_JOB_GPUS`` or
``GPU_DEVICE_ORDINAL`` whatever the source.

>>> info = launch_info({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2",
...                     "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2",
...                     "SLURM_STEP_GPUS": "2,3"})
>>> info.source, info.rank, info.local_rank, info.world_size, info.gpus
('SLURM', 1, 1, 2, (2, 3))
>>> gpu_for_rank(info).gpus
(3,)
>>> expand_nodelist("node[01-03],gpu7")
['node01', 'node02', 'node03', 'gpu7']
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

from tfdevices.errors import EnvVarError, LaunchError, SelectionError
from tfdevices.tfconfig import TF_CONFIG, TfConfig, parse_tf_config

SOURCES = ("TF_CONFIG", "OMPI", "PMI", "ENV", "SLURM", "none")
GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "GPU_DEVICE_ORDINAL")
RANK_GPUS = "TFDEVICES_RANK_GPUS"
"""Set by ``tfdevices launch`` for each worker: the NVML indices it assigned (``""``: none)."""
MAPPINGS = ("sequential", "weighted")
_NOT_A_STEP = ("batch", "extern", "interactive", "4294967294", "4294967295", "4294967293")

Speeds = Union[Mapping[int, float], Sequence[Any]]
MapFunction = Callable[[int, tuple[int, ...]], Union[int, Sequence[int]]]


@dataclasses.dataclass(frozen=True)
class LaunchInfo:
    """Who this process is in its job.

    Attributes:
        rank: global rank, 0 .. world_size - 1.
        world_size: number of training processes.
        local_rank: rank among the processes on this machine.
        local_world_size: processes on this machine (``None`` when the source does not say).
        node_rank: index of this machine in :attr:`nodes` (``None`` when unknown).
        nodes: host names of the job, in order (empty when unknown).
        gpus: NVML indices the scheduler allocated to this node or step (``None``: it said nothing).
        gpus_variable: the variable :attr:`gpus` came from.
        assigned_gpus: the GPUs ``tfdevices launch`` gave this very process (``None`` outside it).
        source: which source won (see :data:`SOURCES`).
        reason: why it won, for people.
        variables: the variables read, as ``(name, value)`` pairs.
        ignored: other sources present in the environment that lost.
        tf_config: the validated ``TF_CONFIG``, when set.
        notes: caveats worth showing.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int | None = 1
    node_rank: int | None = None
    nodes: tuple[str, ...] = ()
    gpus: tuple[int, ...] | None = None
    gpus_variable: str | None = None
    assigned_gpus: tuple[int, ...] | None = None
    source: str = "none"
    reason: str = "no launcher variables are set: a single process"
    variables: tuple[tuple[str, str], ...] = ()
    ignored: tuple[str, ...] = ()
    tf_config: TfConfig | None = None
    notes: tuple[str, ...] = ()

    @property
    def is_distributed(self) -> bool:
        """Whether there is more than one training process."""
        return self.world_size > 1

    @property
    def is_chief(self) -> bool:
        """Whether this is rank 0 (the process that writes checkpoints and summaries)."""
        return self.rank == 0

    def table(self) -> str:
        """A short report: the winner, why, the figures and the variables read."""
        lines = [f"source: {self.source} ({self.reason})",
                 f"rank {self.rank} of {self.world_size}, local rank {self.local_rank} of "
                 f"{'?' if self.local_world_size is None else self.local_world_size}"
                 + ("" if self.node_rank is None else f", node {self.node_rank}")]
        if self.nodes:
            lines.append("nodes: " + ",".join(self.nodes))
        if self.gpus is not None:
            lines.append(f"allocated GPUs: {_join(self.gpus)} (from {self.gpus_variable})")
        if self.assigned_gpus is not None:
            lines.append(f"assigned GPUs: {_join(self.assigned_gpus)} (from {RANK_GPUS})")
        lines += [f"  {name}={value}" for name, value in self.variables]
        if self.ignored:
            lines.append("ignored: " + ", ".join(self.ignored))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def launch_info(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Reads rank, world size and node layout from the launch environment.

    Args:
        env: the environment to read; ``None`` reads ``os.environ``.

    Returns:
        A frozen :class:`LaunchInfo` naming the source that won and why.

    Raises:
        LaunchError: a rank variable is malformed, out of range, incomplete
            (``RANK`` without ``WORLD_SIZE``) or contradicts another one.
        EnvVarError: a GPU list (``SLURM_STEP_GPUS`` ...) is malformed.
        TfConfigError: ``TF_CONFIG`` is set but invalid.

    >>> launch_info({}).source
    'none'
    >>> info = launch_info({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
    ...                     "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    >>> info.source, info.rank, info.local_rank, info.local_world_size
    ('OMPI', 3, 1, 2)
    >>> launch_info({"RANK": "2", "WORLD_SIZE": "2"})
    Traceback (most recent call last):
    ...
    tfdevices.errors.LaunchError: RANK=2 is out of range for WORLD_SIZE=2 (ranks 0..1). HINT: set RANK to 0..1, or fix WORLD_SIZE.
    """
    env = os.environ if env is None else env
    readers = (("TF_CONFIG", _from_tf_config), ("OMPI", _from_ompi), ("PMI", _from_pmi),
               ("ENV", _from_generic), ("SLURM", _from_slurm))
    present = [name for name, _ in readers if _present(name, env)]
    info = LaunchInfo()
    for name, reader in readers:
        if name in present:
            info = reader(env)
            break
    gpus, gpu_var, gpu_notes = _allocated_gpus(env)
    assigned = None
    if RANK_GPUS in env:
        assigned = tuple(parse_gpu_list(env[RANK_GPUS], variable=RANK_GPUS)[0])
    ignored = tuple(n for n in present if n != info.source)
    if "ENV" in ignored and info.source == "TF_CONFIG":
        _cross_check_generic(info, env)
    return dataclasses.replace(info, gpus=gpus, gpus_variable=gpu_var, assigned_gpus=assigned,
                               ignored=ignored, notes=info.notes + gpu_notes)


# ---------------------------------------------------------------- sources

def _present(name: str, env: Mapping[str, str]) -> bool:
    if name == "TF_CONFIG":
        return bool(env.get(TF_CONFIG, "").strip())
    if name == "OMPI":
        return "OMPI_COMM_WORLD_RANK" in env
    if name == "PMI":
        return "PMI_RANK" in env
    if name == "ENV":
        return any(v in env for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    return "SLURM_PROCID" in env


def _from_tf_config(env: Mapping[str, str]) -> LaunchInfo:
    cfg = parse_tf_config(env[TF_CONFIG])
    if cfg is None or cfg.rank is None:
        raise LaunchError(f"TF_CONFIG: task type {cfg and cfg.task_type!r} is not a training process, "
                          "so it has no rank.",
                          hint="launch_info describes chief and worker tasks; a ps or evaluator picks devices itself.")
    hosts = [a.rpartition(":")[0] for job in ("chief", "worker") for a in cfg.cluster.get(job, ())]
    me = hosts[cfg.rank]
    nodes = tuple(dict.fromkeys(hosts))
    local = [i for i, h in enumerate(hosts) if h == me]
    return LaunchInfo(
        rank=cfg.rank, world_size=cfg.num_workers, local_rank=local.index(cfg.rank),
        local_world_size=len(local), node_rank=nodes.index(me), nodes=nodes, source="TF_CONFIG",
        reason=f"TF_CONFIG names this process {cfg.task_type} {cfg.task_index} of a "
               f"{cfg.num_workers}-process cluster; local ranks count the tasks on host {me!r}",
        variables=((TF_CONFIG, env[TF_CONFIG]),), tf_config=cfg)


def _from_ompi(env: Mapping[str, str]) -> LaunchInfo:
    p = "OMPI_COMM_WORLD_"
    return _ranked("OMPI", env, f"{p}RANK", f"{p}SIZE", f"{p}LOCAL_RANK", f"{p}LOCAL_SIZE", None,
                   "Open MPI's mpirun set OMPI_COMM_WORLD_RANK")


def _from_pmi(env: Mapping[str, str]) -> LaunchInfo:
    return _ranked("PMI", env, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", None,
                   "a PMI launcher (MPICH, Intel MPI, srun --mpi=pmi2) set PMI_RANK")


def _from_generic(env: Mapping[str, str]) -> LaunchInfo:
    node = "GROUP_RANK" if "GROUP_RANK" in env else "NODE_RANK"
    return _ranked("ENV", env, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", node,
                   "RANK/WORLD_SIZE are set (a torchrun-style launcher)")


def _ranked(source: str, env: Mapping[str, str], rank_var: str, size_var: str, local_var: str,
            local_size_var: str, node_var: str | None, reason: str) -> LaunchInfo:
    for needed in (rank_var, size_var):
        if needed not in env:
            given = [v for v in (rank_var, size_var, local_var) if v in env]
            raise LaunchError(f"{needed} is not set, but {', '.join(f'{v}={env[v]}' for v in given)} is: "
                              f"{source} rank information is incomplete.",
                              hint=f"set both {rank_var} and {size_var}, or neither.")
    size = _int(env, size_var, minimum=1)
    rank = _int(env, rank_var)
    _check_below(rank_var, rank, size_var, size)
    local_size = _int(env, local_size_var, minimum=1) if local_size_var in env else None
    if local_size is not None and local_size > size:
        raise LaunchError(f"{local_size_var}={local_size} is larger than {size_var}={size}.",
                          hint=f"{local_size_var} counts the processes on this machine, at most {size_var}.")
    local = _int(env, local_var) if local_var in env else (rank if size == 1 or local_size == size else None)
    notes: tuple[str, ...] = ()
    if local is None:
        local, notes = 0, (f"{local_var} is not set: local rank 0 assumed; set it when several "
                           "processes share a machine.",)
    if local_size is not None:
        _check_below(local_var, local, local_size_var, local_size)
    if local > rank:
        raise LaunchError(f"{local_var}={local} is larger than {rank_var}={rank}.",
                          hint="a local rank counts processes on this machine, so it cannot exceed the global rank.")
    node = _int(env, node_var) if node_var and node_var in env else None
    names = [v for v in (rank_var, size_var, local_var, local_size_var, node_var) if v and v in env]
    return LaunchInfo(rank=rank, world_size=size, local_rank=local, local_world_size=local_size,
                      node_rank=node, source=source, reason=reason,
                      variables=tuple((v, env[v]) for v in names), notes=notes)


def _from_slurm(env: Mapping[str, str]) -> LaunchInfo:
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
    if step is None or step in _NOT_A_STEP:
        return LaunchInfo(
            source="none",
            reason="SLURM_PROCID is set but this is a SLURM batch script, not a job step "
                   f"(SLURM_STEP_ID={'unset' if step is None else step}): a single process",
            variables=tuple((v, env[v]) for v in ("SLURM_PROCID", "SLURM_STEP_ID") if v in env),
            notes=("start one process per task with 'srun python train.py'.",))
    size_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
    if size_var not in env:
        raise LaunchError("SLURM_PROCID is set but neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is.",
                          hint="run the script with srun, which sets them.")
    size = _int(env, size_var, minimum=1)
    rank = _int(env, "SLURM_PROCID")
    _check_below("SLURM_PROCID", rank, size_var, size)
    node_var = next((v for v in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") if v in env), None)
    nodes = tuple(expand_nodelist(env[node_var], variable=node_var)) if node_var else ()
    node = _int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else (0 if len(nodes) == 1 else None)
    if node is not None and nodes:
        _check_below("SLURM_NODEID", node, node_var or "", len(nodes), what=f"{len(nodes)} node(s)")
    tasks_var = next((v for v in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") if v in env), None)
    local_size = _slurm_local_size(env, tasks_var, size_var, size, nodes, node_var, node)
    local = _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else (rank if size == 1 else None)
    if local is None:
        raise LaunchError("SLURM_PROCID is set but SLURM_LOCALID is not.", hint="run the script with srun.")
    if local_size is not None:
        _check_below("SLURM_LOCALID", local, tasks_var or size_var, local_size,
                     what=f"{local_size} task(s) on node {node}")
    if local > rank:
        raise LaunchError(f"SLURM_LOCALID={local} is larger than SLURM_PROCID={rank}.",
                          hint="SLURM_LOCALID counts tasks on this node, so it cannot exceed SLURM_PROCID.")
    names = ("SLURM_PROCID", "SLURM_LOCALID", size_var, "SLURM_NODEID", node_var, tasks_var, "SLURM_STEP_ID")
    return LaunchInfo(rank=rank, world_size=size, local_rank=local, local_world_size=local_size,
                      node_rank=node, nodes=nodes, source="SLURM",
                      reason=f"srun started this process as task {rank} of job step {step}",
                      variables=tuple((v, env[v]) for v in names if v and v in env))


def _slurm_local_size(env: Mapping[str, str], tasks_var: str | None, size_var: str, size: int,
                      nodes: tuple[str, ...], node_var: str | None, node: int | None) -> int | None:
    if tasks_var is None:
        return size if len(nodes) == 1 else None
    per_node = expand_tasks_per_node(env[tasks_var], variable=tasks_var)
    if sum(per_node) != size:
        raise LaunchError(f"{tasks_var}={env[tasks_var]!r} adds up to {sum(per_node)} tasks, but "
                          f"{size_var}={size}.", hint="these come from the same srun; check the job script.")
    if nodes and len(per_node) != len(nodes):
        raise LaunchError(f"{tasks_var}={env[tasks_var]!r} describes {len(per_node)} node(s), but "
                          f"{node_var}={env[node_var or '']!r} has {len(nodes)}.",
                          hint="these come from the same srun; check the job script.")
    if node is None:
        return per_node[0] if len(per_node) == 1 else None
    _check_below("SLURM_NODEID", node, tasks_var, len(per_node), what=f"{len(per_node)} node(s)")
    return per_node[node]


def _cross_check_generic(info: LaunchInfo, env: Mapping[str, str]) -> None:
    for var, value in (("RANK", info.rank), ("WORLD_SIZE", info.world_size), ("LOCAL_RANK", info.local_rank)):
        if var in env and _int(env, var) != value:
            raise LaunchError(f"{var}={env[var]} contradicts TF_CONFIG, which makes this process "
                              f"{var.lower().replace('_', ' ')} {value}.",
                              hint=f"unset {var}, or fix TF_CONFIG; both describe the same process.")


# ---------------------------------------------------------------- parsers

def _int(env: Mapping[str, str], name: str, *, minimum: int = 0) -> int:
    value = env[name]
    text = value.strip()
    if not re.fullmatch(r"\d+", text) or int(text) < minimum:
        raise LaunchError(f"{name}={value!r} is not a whole number >= {minimum}.",
                          hint=f"set {name} to a number such as {minimum}, or unset it.")
    return int(text)


def _check_below(name: str, value: int, limit_name: str, limit: int, *, what: str | None = None) -> None:
    if value >= limit:
        described = what or f"{limit_name}={limit}"
        raise LaunchError(f"{name}={value} is out of range for {described} (ranks 0..{limit - 1}).",
                          hint=f"set {name} to 0..{limit - 1}, or fix {limit_name}.")


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _expand_ranges(body: str, variable: str, whole: str) -> list[str]:
    """``"01-03,7"`` -> ``["01", "02", "03", "7"]``, keeping zero padding."""
    out: list[str] = []
    for part in body.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise LaunchError(f"{variable}={whole!r}: {part!r} is not a number or a range 'a-b'.",
                              hint="SLURM writes node lists like 'node[01-03,07],gpu7'.")
        lo, hi = match.group(1), match.group(2) or match.group(1)
        if int(hi) < int(lo):
            raise LaunchError(f"{variable}={whole!r}: range {part!r} runs backwards.",
                              hint="write the smaller number first, e.g. '01-03'.")
        width = len(lo) if lo.startswith("0") else 0
        out += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
    return out


def expand_nodelist(text: str, *, variable: str = "SLURM_STEP_NODELIST") -> list[str]:
    """Expands a SLURM host list.

    Args:
        text: e.g. ``"node[01-03],gpu7"`` or ``"rack[1-2]-n[1,3]"``.
        variable: the variable's name, for error messages.

    Returns:
        The host names in order.

    Raises:
        LaunchError: unbalanced brackets, an empty name, a backwards range or a repeated host.

    >>> expand_nodelist("node[01-03],gpu7")
    ['node01', 'node02', 'node03', 'gpu7']
    >>> expand_nodelist("r[1-2]n[8,10]")
    ['r1n8', 'r1n10', 'r2n8', 'r2n10']
    """
    hosts: list[str] = []
    for item in _split_top_level(text, variable):
        pieces = re.split(r"(\[[^\[\]]*\])", item)
        if any(c in p for p in pieces if not p.startswith("[") for c in "[]"):
            raise LaunchError(f"{variable}={text!r}: unbalanced brackets in {item!r}.",
                              hint="SLURM writes node lists like 'node[01-03,07],gpu7'.")
        choices = [_expand_ranges(p[1:-1], variable, text) if p.startswith("[") else [p] for p in pieces]
        hosts += ["".join(parts) for parts in itertools.product(*choices)]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        raise LaunchError(f"{variable}={text!r} names {dupes} more than once.", hint="each node appears once.")
    return hosts


def _split_top_level(text: str, variable: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in text.strip():
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise LaunchError(f"{variable}={text!r}: unbalanced brackets.",
                              hint="SLURM writes node lists like 'node[01-03,07],gpu7'.")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    if depth != 0 or not all(i.strip() for i in items):
        raise LaunchError(f"{variable}={text!r}: {'unbalanced brackets' if depth else 'an empty host name'}.",
                          hint="SLURM writes node lists like 'node[01-03,07],gpu7'.")
    return [i.strip() for i in items]


def expand_tasks_per_node(text: str, *, variable: str = "SLURM_STEP_TASKS_PER_NODE") -> list[int]:
    """Expands SLURM's tasks-per-node syntax.

    Args:
        text: e.g. ``"2(x3),1"``.
        variable: the variable's name, for error messages.

    Returns:
        Tasks on each node, in node order.

    Raises:
        LaunchError: the text is malformed or a count is zero.

    >>> expand_tasks_per_node("2(x3),1")
    [2, 2, 2, 1]
    """
    out: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match or int(match.group(1)) == 0 or match.group(2) == "0":
            raise LaunchError(f"{variable}={text!r}: {part!r} is not 'N' or 'N(xM)' with N, M >= 1.",
                              hint="SLURM writes tasks per node like '2(x3),1'.")
        out += [int(match.group(1))] * int(match.group(2) or 1)
    return out


_GRES = re.compile(r"^gpu(?::(?!\d+\()[\w.-]+)?(?::(\d+))?\(IDX:([^)]*)\)$")


def parse_gpu_list(text: str, *, variable: str = "SLURM_STEP_GPUS") -> tuple[list[int], list[str]]:
    """Parses a scheduler's GPU list.

    Accepts plain lists and ranges (``"0,1"``, ``"2-3"``), SLURM's GRES detail
    format (``"gpu:2(IDX:0-1)"``, ``"gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)"``) and
    ``(null)`` entries, which SLURM writes for slots without a GPU (``"0,(null)"``).

    Args:
        text: the variable's value.
        variable: its name, for messages.

    Returns:
        ``(indices, notes)``: NVML indices in the order given, and caveats.

    Raises:
        EnvVarError: an entry is neither an index, a range, ``(null)`` nor a GRES
            entry, a GRES count disagrees with its IDX list, or an index repeats.

    >>> parse_gpu_list("gpu:2(IDX:0-1)")
    ([0, 1], [])
    >>> parse_gpu_list("0,(null)", variable="GPU_DEVICE_ORDINAL")[0]
    [0]
    """
    hint = "expected GPU indices such as '0,1', '2-3' or SLURM's 'gpu:2(IDX:0-1)'."
    if "IDX:" in text:
        indices, notes = _parse_gres(text, variable, hint)
    else:
        indices, notes = [], []
        for part in (p.strip() for p in text.split(",")) if text.strip() else ():
            if part == "(null)":
                notes.append(f"{variable}={text!r} has a '(null)' entry (a slot without a GPU); ignored.")
                continue
            match = _RANGE.match(part)
            if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
                raise EnvVarError(f"{variable}={text!r}: {part!r} is not a GPU index or range.", hint=hint)
            indices += range(int(match.group(1)), int(match.group(2) or match.group(1)) + 1)
    dupes = sorted({i for i in indices if indices.count(i) > 1})
    if dupes:
        raise EnvVarError(f"{variable}={text!r} names GPU(s) {dupes} more than once.", hint=hint)
    return indices, notes


def _parse_gres(text: str, variable: str, hint: str) -> tuple[list[int], list[str]]:
    indices: list[int] = []
    notes: list[str] = []
    for entry in re.findall(r"[^,()]+(?:\([^)]*\))?", text):
        entry = entry.strip()
        if not entry.startswith("gpu"):
            notes.append(f"{variable}: GRES entry {entry!r} is not a GPU; ignored.")
            continue
        match = _GRES.match(entry)
        if not match:
            raise EnvVarError(f"{variable}={text!r}: GRES entry {entry!r} is not 'gpu[:type]:N(IDX:list)'.",
                              hint=hint)
        if match.group(2).strip() == "N/A":
            continue
        found, _ = parse_gpu_list(match.group(2), variable=variable)
        if match.group(1) is not None and int(match.group(1)) != len(found):
            raise EnvVarError(f"{variable}={text!r}: {entry!r} counts {match.group(1)} GPU(s) but lists "
                              f"{len(found)} ({_join(tuple(found))}).", hint=hint)
        indices += found
    return indices, notes


def _allocated_gpus(env: Mapping[str, str]) -> tuple[tuple[int, ...] | None, str | None, tuple[str, ...]]:
    for var in GPU_VARIABLES:
        if var in env:
            indices, notes = parse_gpu_list(env[var], variable=var)
            return tuple(indices), var, tuple(notes)
    return None, None, ()


# ---------------------------------------------------------------- rank -> GPU

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
        return _join(self.gpus) if self.gpus else "none"

    @property
    def cuda_visible_devices(self) -> str:
        """The mask for this rank (``"-1"``: no GPU)."""
        return _join(self.gpus) if self.gpus else "-1"

    @property
    def shared(self) -> bool:
        """Whether another local rank uses one of this rank's GPUs."""
        return self.memory_fraction is not None

    def env(self) -> dict[str, str]:
        """Variables that apply this assignment in a process not yet using CUDA."""
        return {"CUDA_VISIBLE_DEVICES": self.cuda_visible_devices, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                RANK_GPUS: _join(self.gpus)}

    def table(self) -> str:
        """Every local rank's GPUs; this rank marked with ``*``."""
        lines = [f"{self.method} mapping of {len(self.plan)} local rank(s) onto GPUs "
                 f"{_join(self.candidates) or '(none)'} from {self.candidates_from}: {self.reason}"]
        for r, gpus in enumerate(self.plan):
            mark = "*" if r == self.local_rank else " "
            lines.append(f" {mark}local rank {r}: {'GPU ' + _join(gpus) if gpus else 'CPU'}")
        return "\n".join(lines)


def _join(indices: Sequence[int]) -> str:
    return ",".join(str(i) for i in indices)


def gpu_for_rank(info: LaunchInfo | None = None, gpus: object = None, *,
                 local_rank: int | None = None, local_world_size: int | None = None,
                 mapping: str | Sequence[int | Sequence[int]] | MapFunction = "sequential",
                 speeds: Speeds | None = None, share: bool = False) -> GpuAssignment:
    """Chooses the GPUs of one local rank.

    Candidates, first that applies: ``gpus`` (a list of NVML indices, a
    :class:`~tfdevices.selection.Selection`, or an :class:`~tfdevices.inventory.Inventory`,
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
                             reason=f"tfdevices launch assigned them ({RANK_GPUS}={_join(info.assigned_gpus)})")
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
    listed = getattr(gpus, "gpus", None)
    if listed is None or not all(hasattr(g, "index") for g in listed):
        raise LaunchError(f"gpus={gpus!r}: expected NVML indices, a Selection or an Inventory.",
                          hint="pass e.g. gpus=[0, 1] or tfdevices.select('all').")
    if hasattr(gpus, "spec"):  # a Selection: the caller chose these
        return tuple(g.index for g in listed), f"selection {gpus.spec!r}"
    visible = tuple(g.index for g in (gpus.visible or listed))
    if info.gpus is None:
        return visible, "the inventory's visible GPUs"
    inside = tuple(i for i in info.gpus if i in visible)
    if len(inside) == len(info.gpus):
        return inside, f"{info.gpus_variable} (all present in the inventory)"
    if len(visible) == len(info.gpus):
        return visible, (f"the inventory's visible GPUs {_join(visible)}: {info.gpus_variable}="
                         f"{_join(info.gpus)} are renumbered inside the job's device cgroup")
    raise SelectionError(f"{info.gpus_variable}={_join(info.gpus)} allocates GPUs this machine does not show; "
                         f"visible GPUs: {_join(visible) or 'none'}.",
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
        raise SelectionError(f"{size} local ranks but only {len(candidates)} GPU(s) ({_join(candidates)}).",
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
                             f"{_join(candidates)}.", hint="map ranks onto the GPUs this machine offers.")
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


def _assignment(rank: int, plan: tuple[tuple[int, ...], ...], candidates: tuple[int, ...], origin: str,
                method: str, speeds: Speeds | None) -> GpuAssignment:
    mine = plan[rank]
    users = {g: sum(g in p for p in plan) for p in plan for g in p}
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
        reason = f"local rank {rank} of {len(plan)} takes GPU(s) {_join(mine) or 'none (CPU)'}"
    unused = [c for c in candidates if not any(c in p for p in plan)]
    if unused:
        reason += f"; GPU(s) {_join(unused)} left unused"
    return GpuAssignment(rank, mine, plan, candidates, origin, method, fraction, share, reason)

