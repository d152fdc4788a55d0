"""Who am I in a multi-process job?

Pure: :func:`launch_info` reads an environment mapping it is given (``os.environ``
by default). It imports no TensorFlow and touches no GPU, so it runs inside
``tfdevices launch`` and on machines without TensorFlow.

Sources, innermost launcher first (the first one present wins; the others are
listed in :attr:`LaunchInfo.ignored`):

==============  ==============================================================  =====================
source          variables                                                       set by
==============  ==============================================================  =====================
``TF_CONFIG``   ``TF_CONFIG`` (cross-checked with ``RANK``/``WORLD_SIZE``)      ``tfdevices launch``, TF jobs
``OMPI``        ``OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE``          Open MPI ``mpirun``
``PMI``         ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID/NRANKS``          MPICH, Intel MPI, ``srun --mpi=pmi2``
``ENV``         ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``  torchrun-style launchers
``SLURM``       ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS`` ...        ``srun`` (a job step)
``kubernetes``  ``TFDEVICES_POD_CLUSTER`` with a pod's own variables and labels     a JobSet, an Indexed Job,
                (:mod:`tfdevices.jobs.kubernetes`)                              LWS or Volcano manifest
``none``        nothing                                                         a single process
==============  ==============================================================  =====================

An inner launcher runs inside an outer one (``mpirun`` or ``tfdevices launch``
inside an ``sbatch`` script inherits the batch step's ``SLURM_PROCID=0``), so the
innermost source is the one that describes this process. The GPUs the scheduler
allocated come from ``SLURM_STEP_GPUS``, ``SLURM_JOB_GPUS`` or
``GPU_DEVICE_ORDINAL`` whatever the source; in a pod, from ``NVIDIA_VISIBLE_DEVICES`` (the NVIDIA device
plugin's), numbered as the pod sees them. A pod is the outermost source: ``tfdevices launch`` in a pod gives
its workers ``TF_CONFIG``, which wins.

>>> info = launch_info({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2",
...                     "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2",
...                     "SLURM_STEP_GPUS": "2,3"})
>>> info.source, info.rank, info.local_rank, info.world_size, info.gpus
('SLURM', 1, 1, 2, (2, 3))


Which GPUs each rank takes is :mod:`tfdevices.jobs.ranks`; SLURM's formats are :mod:`tfdevices.jobs.slurm`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping

from tfdevices.core.addresses import split_address
from tfdevices.core.errors import LaunchError
from tfdevices.core.units import parse_count
from tfdevices.jobs.kubernetes import NVIDIA_VISIBLE_DEVICES, POD_CLUSTER, pod_cluster, pod_gpus, pod_kind
from tfdevices.jobs.slurm import allocated_gpus, expand_nodelist, expand_tasks_per_node, join_indices, parse_gpu_list
from tfdevices.jobs.tfconfig import TF_CONFIG, TfConfig, parse_tf_config

SOURCES = ("ray", "TF_CONFIG", "OMPI", "PMI", "ENV", "SLURM", "kubernetes", "none")
MAX_RANK = 2**31 - 1
"""The largest rank, world size or node id read from the environment."""
RANK_GPUS = "TFDEVICES_RANK_GPUS"
"""Set by ``tfdevices launch`` for each worker: the NVML indices it assigned (``""``: none)."""
VIRTUAL_DEVICES_ENV = "TFDEVICES_VIRTUAL_DEVICES"
"""Set by ``tfdevices launch`` for each worker: the logical devices to split each of its devices into."""
_NOT_A_STEP = ("batch", "extern", "interactive", "4294967294", "4294967295", "4294967293")


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
        agreeing: the variables of a source in :attr:`ignored` that were read too and say the same (those of
            ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` set beside ``TF_CONFIG``, as ``tfdevices launch`` sets both).
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
    role: str = "worker"
    role_index: int = 0
    agreeing: tuple[str, ...] = ()

    @property
    def trains(self) -> bool:
        """Whether this process is one of the training processes (a chief or a worker, not ``ps``/``evaluator``)."""
        return self.role in ("chief", "worker")

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
        if not self.trains:
            return "\n".join(
                [
                    f"source: {self.source} ({self.reason})",
                    f"role: {self.role} {self.role_index} (does not train: no rank)",
                ]
                + [f"note: {n}" for n in self.notes]
            )
        lines = [
            f"source: {self.source} ({self.reason})",
            f"rank {self.rank} of {self.world_size}, local rank {self.local_rank} of "
            f"{'?' if self.local_world_size is None else self.local_world_size}"
            + ("" if self.node_rank is None else f", node {self.node_rank}"),
        ]
        if self.nodes:  # how many: their names are the environment's, not for printing
            lines.append(f"nodes: {len(self.nodes):,}")
        if self.gpus is not None:
            lines.append(f"allocated GPUs: {join_indices(self.gpus)} (from {self.gpus_variable})")
        if self.assigned_gpus is not None:
            lines.append(f"assigned GPUs: {join_indices(self.assigned_gpus) or 'none (CPU)'} (from {RANK_GPUS})")
        if self.variables:  # their names only: an environment's values are not for printing
            lines.append("read: " + ", ".join(name for name, _ in self.variables))
        if self.agreeing:
            lines.append("also set, and saying the same: " + ", ".join(self.agreeing))
        ignored = [name for name in self.ignored if not (name == "ENV" and self.agreeing)]
        if ignored:
            lines.append("ignored: " + ", ".join(ignored))
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
    >>> launch_info({"RANK": "2", "WORLD_SIZE": "2"})  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.LaunchError: RANK is past the last one (WORLD_SIZE makes ranks 0 to 1).
    HINT: set RANK to 0..1, or fix WORLD_SIZE.
    """
    ray_info = _from_ray() if env is None else None
    env = os.environ if env is None else env
    readers = (
        ("TF_CONFIG", _from_tf_config),
        ("OMPI", _from_ompi),
        ("PMI", _from_pmi),
        ("ENV", _from_generic),
        ("SLURM", _from_slurm),
        ("kubernetes", _from_pod),
    )
    present = [name for name, _ in readers if _present(name, env)]
    info = LaunchInfo()
    for name, reader in readers:
        if name in present:
            info = reader(env)
            break
    ignored = tuple(n for n in present if n != info.source)
    agreeing: tuple[str, ...] = ()
    if "ENV" in ignored and info.source == "TF_CONFIG":
        _cross_check_generic(info, env)  # raises where they differ
        agreeing = tuple(v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if v in env)  # the names set, not "ENV"
    if ray_info is not None:  # Ray Train's worker: Ray's own context wins (its backend wrote TF_CONFIG)
        info = dataclasses.replace(ray_info, tf_config=info.tf_config)
        ignored = tuple(n for n in present if n != "TF_CONFIG")
    if info.source == "none" and not present:
        info = _unready_pod(info, env)
    return _with_gpus(dataclasses.replace(info, ignored=ignored, agreeing=agreeing), env)


def _with_gpus(info: LaunchInfo, env: Mapping[str, str]) -> LaunchInfo:
    """``info`` with the GPUs the scheduler allocated and those ``tfdevices launch`` assigned."""
    gpus, gpu_var, gpu_notes = allocated_gpus(env)
    if gpu_var is None and info.source == "kubernetes" and NVIDIA_VISIBLE_DEVICES in env:
        gpus, gpu_var = pod_gpus(env), NVIDIA_VISIBLE_DEVICES
    assigned = None
    if RANK_GPUS in env:
        assigned = tuple(parse_gpu_list(env[RANK_GPUS], variable=RANK_GPUS).indices)
    return dataclasses.replace(
        info, gpus=gpus, gpus_variable=gpu_var, assigned_gpus=assigned, notes=info.notes + gpu_notes
    )


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
    if name == "kubernetes":
        return POD_CLUSTER in env
    return "SLURM_PROCID" in env


_ROLES = {
    "evaluator": "an evaluator: it does not train, it evaluates the checkpoints the training tasks write "
    "(build_strategy('auto') gives it a one-device strategy on its own GPU)",
    "ps": "a parameter server: it does not train, it holds variables for ParameterServerStrategy, which "
    "Keras 3 does not support (tf_keras does)",
}


def _from_ray() -> LaunchInfo | None:
    """This process's place in a Ray Train run, from Ray's own context; ``None`` outside a Ray Train worker.

    Reads Ray only when the program has imported it (``import tfdevices`` never does).
    """
    if "ray.train" not in sys.modules:
        return None
    try:
        context = sys.modules["ray.train"].get_context()
        rank, world = int(context.get_world_rank()), int(context.get_world_size())
        local, local_size = int(context.get_local_rank()), int(context.get_local_world_size())
        node = int(context.get_node_rank())
    except Exception:  # noqa: BLE001 (not in a Ray Train worker, or a Ray without these calls)
        return None
    if not 0 <= rank < world or not 0 <= local < local_size:
        return None
    return LaunchInfo(
        rank=rank,
        world_size=world,
        local_rank=local,
        local_world_size=local_size,
        node_rank=node,
        source="ray",
        reason=f"Ray Train's context names this process worker {rank} of {world} "
        f"(local {local} of {local_size} on node {node})",
    )


def _from_tf_config(env: Mapping[str, str]) -> LaunchInfo:
    cfg = parse_tf_config(env[TF_CONFIG])
    if cfg is not None and cfg.task_type in _ROLES:
        return LaunchInfo(
            world_size=1,
            local_world_size=1,
            source="TF_CONFIG",
            role=cfg.task_type,
            role_index=cfg.task_index,
            reason=f"TF_CONFIG names this process {cfg.task_type} {cfg.task_index}: {_ROLES[cfg.task_type]}",
            variables=((TF_CONFIG, env[TF_CONFIG]),),
            tf_config=cfg,
        )
    if cfg is None or cfg.rank is None:
        raise LaunchError(
            f"TF_CONFIG: task type {cfg and cfg.task_type!r} is not a training process, so it has no rank.",
            hint="launch_info describes chief, worker, evaluator and ps tasks.",
        )
    hosts = [split_address(a)[0] for job in ("chief", "worker") for a in cfg.cluster.get(job, ())]
    me = hosts[cfg.rank]
    nodes = tuple(dict.fromkeys(hosts))
    local = [i for i, h in enumerate(hosts) if h == me]
    return LaunchInfo(
        rank=cfg.rank,
        world_size=cfg.num_workers,
        local_rank=local.index(cfg.rank),
        local_world_size=len(local),
        node_rank=nodes.index(me),
        nodes=nodes,
        source="TF_CONFIG",
        role=cfg.task_type,
        role_index=cfg.task_index,
        reason=f"TF_CONFIG names this process {cfg.task_type} {cfg.task_index} of a "
        f"{cfg.num_workers}-process cluster; local ranks count the tasks on its host",
        variables=((TF_CONFIG, env[TF_CONFIG]),),
        tf_config=cfg,
    )


def _from_ompi(env: Mapping[str, str]) -> LaunchInfo:
    p = "OMPI_COMM_WORLD_"
    return _ranked(
        "OMPI",
        env,
        f"{p}RANK",
        f"{p}SIZE",
        f"{p}LOCAL_RANK",
        f"{p}LOCAL_SIZE",
        None,
        "Open MPI's mpirun set OMPI_COMM_WORLD_RANK",
    )


def _from_pmi(env: Mapping[str, str]) -> LaunchInfo:
    return _ranked(
        "PMI",
        env,
        "PMI_RANK",
        "PMI_SIZE",
        "MPI_LOCALRANKID",
        "MPI_LOCALNRANKS",
        None,
        "a PMI launcher (MPICH, Intel MPI, srun --mpi=pmi2) set PMI_RANK",
    )


def _from_generic(env: Mapping[str, str]) -> LaunchInfo:
    node = "GROUP_RANK" if "GROUP_RANK" in env else "NODE_RANK"
    return _ranked(
        "ENV",
        env,
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        node,
        "RANK/WORLD_SIZE are set (a torchrun-style launcher)",
    )


def _from_pod(env: Mapping[str, str]) -> LaunchInfo:
    """A pod of a JobSet, an Indexed Job, a LeaderWorkerSet or a Volcano job (:mod:`tfdevices.jobs.kubernetes`):
    one process a pod, the pods as the nodes.
    """
    pod = pod_cluster(env)
    if pod is None:  # not present: POD_CLUSTER is unset
        return LaunchInfo()
    return LaunchInfo(
        rank=pod.index,
        world_size=len(pod.hosts),
        local_rank=0,
        local_world_size=1,
        node_rank=pod.index,
        nodes=pod.names,
        source="kubernetes",
        reason=pod.reason,
        variables=tuple((v, env[v]) for v in pod.variables if v in env),
        tf_config=pod.tf_config(),
    )


def _unready_pod(info: LaunchInfo, env: Mapping[str, str]) -> LaunchInfo:
    """A single process, said so where it runs in a pod that could be one of a job's (its manifest lacks
    :data:`~tfdevices.jobs.kubernetes.POD_CLUSTER`).
    """
    kind = pod_kind(env)
    if kind is None:
        return info
    return dataclasses.replace(
        info,
        reason=f"{'an' if kind[0] in 'AEIOU' else 'a'} {kind} pod without {POD_CLUSTER}: a single process",
        notes=(
            *info.notes,
            (
                f"to train over the {kind}'s pods, set {POD_CLUSTER} in the container's env "
                '(e.g. "port=2222,pods=1"; the kubernetes guide).'
            ),
        ),
    )


def _ranked(
    source: str,
    env: Mapping[str, str],
    rank_var: str,
    size_var: str,
    local_var: str,
    local_size_var: str,
    node_var: str | None,
    reason: str,
) -> LaunchInfo:
    for needed in (rank_var, size_var):
        if needed not in env:
            given = [v for v in (rank_var, size_var, local_var) if v in env]
            raise LaunchError(
                f"{needed} is not set, but {', '.join(given)} {'is' if len(given) == 1 else 'are'}: "
                f"{source} rank information is incomplete.",
                hint=f"set both {rank_var} and {size_var}, or neither.",
            )
    size = _int(env, size_var, minimum=1)
    rank = _int(env, rank_var)
    _check_below(rank_var, rank, size_var, size)
    local_size = _int(env, local_size_var, minimum=1) if local_size_var in env else None
    if local_size is not None and local_size > size:
        raise LaunchError(
            f"{local_size_var} is larger than {size_var}.",
            hint=f"{local_size_var} counts the processes on this machine, at most {size_var}.",
        )
    local = _int(env, local_var) if local_var in env else (rank if size == 1 or local_size == size else None)
    notes: tuple[str, ...] = ()
    if local is None:
        local, notes = (
            0,
            ((f"{local_var} is not set: local rank 0 assumed; set it when several processes share a machine."),),
        )
    if local_size is not None:
        _check_below(local_var, local, local_size_var, local_size)
    if local > rank:
        raise LaunchError(
            f"{local_var} is larger than {rank_var}.",
            hint="a local rank counts processes on this machine, so it cannot exceed the global rank.",
        )
    node = _int(env, node_var) if node_var and node_var in env else None
    names = [v for v in (rank_var, size_var, local_var, local_size_var, node_var) if v and v in env]
    return LaunchInfo(
        rank=rank,
        world_size=size,
        local_rank=local,
        local_world_size=local_size,
        node_rank=node,
        source=source,
        reason=reason,
        variables=tuple((v, env[v]) for v in names),
        notes=notes,
    )


def _from_slurm(env: Mapping[str, str]) -> LaunchInfo:
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
    if step is None or step in _NOT_A_STEP:
        return LaunchInfo(
            source="none",
            reason="SLURM_PROCID is set but this is a SLURM batch script, not a job step "
            f"(SLURM_STEP_ID {'unset' if step is None else 'names no step'}): a single process",
            variables=tuple((v, env[v]) for v in ("SLURM_PROCID", "SLURM_STEP_ID") if v in env),
            notes=("start one process per task with 'srun python train.py'.",),
        )
    size_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
    if size_var not in env:
        raise LaunchError(
            "SLURM_PROCID is set but neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is.",
            hint="run the script with srun, which sets them.",
        )
    size = _int(env, size_var, minimum=1)
    rank = _int(env, "SLURM_PROCID")
    _check_below("SLURM_PROCID", rank, size_var, size)
    node_var = next((v for v in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") if v in env), None)
    nodes = tuple(expand_nodelist(env[node_var], variable=node_var)) if node_var else ()
    node = _int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else (0 if len(nodes) == 1 else None)
    if node is not None and nodes:
        _check_below("SLURM_NODEID", node, node_var or "", len(nodes), what=f"{node_var} lists nodes")
    tasks_var = next((v for v in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") if v in env), None)
    local_size = _slurm_local_size(env, tasks_var, size_var, size, nodes, node_var, node)
    local = _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else (rank if size == 1 else None)
    if local is None:
        raise LaunchError("SLURM_PROCID is set but SLURM_LOCALID is not.", hint="run the script with srun.")
    if local_size is not None:
        _check_below(
            "SLURM_LOCALID",
            local,
            tasks_var or size_var,
            local_size,
            what=f"{tasks_var or size_var} gives this node tasks",
        )
    if local > rank:
        raise LaunchError(
            "SLURM_LOCALID is larger than SLURM_PROCID.",
            hint="SLURM_LOCALID counts tasks on this node, so it cannot exceed SLURM_PROCID.",
        )
    names = ("SLURM_PROCID", "SLURM_LOCALID", size_var, "SLURM_NODEID", node_var, tasks_var, "SLURM_STEP_ID")
    return LaunchInfo(
        rank=rank,
        world_size=size,
        local_rank=local,
        local_world_size=local_size,
        node_rank=node,
        nodes=nodes,
        source="SLURM",
        reason=f"srun started this process as task {rank} of its job step",
        variables=tuple((v, env[v]) for v in names if v and v in env),
    )


def _slurm_local_size(
    env: Mapping[str, str],
    tasks_var: str | None,
    size_var: str,
    size: int,
    nodes: tuple[str, ...],
    node_var: str | None,
    node: int | None,
) -> int | None:
    if tasks_var is None:
        return size if len(nodes) == 1 else None
    per_node = expand_tasks_per_node(env[tasks_var], variable=tasks_var)
    if sum(per_node) != size:
        raise LaunchError(
            f"{tasks_var} adds up to a different number of tasks than {size_var} says.",
            hint="these come from the same srun; check the job script.",
        )
    if nodes and len(per_node) != len(nodes):
        raise LaunchError(
            f"{tasks_var} describes {len(per_node)} node(s), but {node_var} lists {len(nodes)}.",
            hint="these come from the same srun; check the job script.",
        )
    if node is None:
        return per_node[0] if len(per_node) == 1 else None
    _check_below("SLURM_NODEID", node, tasks_var, len(per_node), what=f"{tasks_var} describes nodes")
    return per_node[node]


def _cross_check_generic(info: LaunchInfo, env: Mapping[str, str]) -> None:
    for var, value in (("RANK", info.rank), ("WORLD_SIZE", info.world_size), ("LOCAL_RANK", info.local_rank)):
        if var in env and _int(env, var) != value:
            raise LaunchError(
                f"{var} contradicts TF_CONFIG, which makes this process {var.lower().replace('_', ' ')} {value}.",
                hint=f"unset {var}, or fix TF_CONFIG; both describe the same process.",
            )


# ---------------------------------------------------------------- parsers


def _int(env: Mapping[str, str], name: str, *, minimum: int = 0) -> int:
    value = env[name]
    number = parse_count(value.strip(), limit=MAX_RANK)
    if number is None or number < minimum:
        raise LaunchError(
            f"{name} is not a whole number >= {minimum} (ASCII digits, at most {MAX_RANK:,}).",
            hint=f"set {name} to a number such as {minimum}, or unset it.",
        )
    return number


def _check_below(name: str, value: int, limit_name: str, limit: int, *, what: str | None = None) -> None:
    if value >= limit:
        raise LaunchError(
            f"{name} is past the last one ({what or limit_name + ' makes ranks'} 0 to {limit - 1}).",
            hint=f"set {name} to 0..{limit - 1}, or fix {limit_name}.",
        )
