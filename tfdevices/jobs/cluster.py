"""How many training processes the launch environment says there are, for TensorFlow's runtime.

:func:`cluster_from_env` reads :func:`tfdevices.launch_info` (``TF_CONFIG``, a SLURM
job step, Ray Train) and answers what :func:`tfdevices.build_strategy` needs to
choose between one process and a multi-worker strategy: the number of workers, this
process's place, and each task's address. Pure: only the mapping it is given is read.
This module imports no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tfdevices.core.errors import LaunchError, StrategyError
from tfdevices.jobs.env import launch_info
from tfdevices.jobs.kubernetes import pod_cluster
from tfdevices.jobs.slurm import expand_tasks_per_node, step_cluster
from tfdevices.jobs.tfconfig import TfConfig


@dataclasses.dataclass(frozen=True)
class ClusterEnv:
    """How many training processes the launch environment says there are.

    Attributes:
        num_workers: training processes in the job (1: a single process).
        source: ``"TF_CONFIG"``, ``"SLURM"``, ``"kubernetes"`` (a pod's job, :mod:`tfdevices.jobs.kubernetes`) or
            ``"none"``.
        reason: what was read, for people.
        tf_config: the validated ``TF_CONFIG``, when that was the source.
    """

    num_workers: int
    source: str
    reason: str
    tf_config: TfConfig | None = None
    addresses: tuple[str, ...] = ()  # a SLURM step's tasks or a job's pods, in rank order (what TF_CONFIG would list)
    task_index: int = 0
    wait_s: float = 0.0  # how long the addresses' names may take to resolve (a pod's peers: their Service)


def cluster_from_env(env: Mapping[str, str]) -> ClusterEnv:
    """The job layout TensorFlow's runtime can use, from :func:`tfdevices.launch_info` (pure: only ``env``).

    ``TF_CONFIG`` wins when set, because TensorFlow reads it; otherwise a SLURM job step (``srun``) with more than one
    task, or a pod's job (:mod:`tfdevices.jobs.kubernetes`). Other launchers (``mpirun``, ``RANK``/``WORLD_SIZE``) give
    TensorFlow no cluster by themselves: use ``tfdevices launch`` or set ``TF_CONFIG``.

    Args:
        env: the environment to read, e.g. ``os.environ``.

    Returns:
        A :class:`ClusterEnv`.

    Raises:
        TfConfigError: ``TF_CONFIG`` is set but invalid.
        LaunchError: a launcher variable is malformed or contradicts another.

    >>> cluster_from_env({"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4",
    ...                   "SLURM_STEP_NODELIST": "gpu[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}).reason
    'SLURM step with 4 tasks on 2 node(s)'
    >>> cluster_from_env({}).source
    'none'
    """
    info = launch_info(env)
    if info.role == "ps":
        raise StrategyError(
            f"TF_CONFIG names this process ps {info.role_index}, a parameter server: it serves "
            "ParameterServerStrategy, which Keras 3 does not support, and trains no replica of its own.",
            hint="run parameter-server training with tf_keras (TF_USE_LEGACY_KERAS=1 and "
            "tf.distribute.experimental.ParameterServerStrategy), or drop the ps tasks and train the "
            "chief and workers with build_strategy('multi_worker').",
        )
    if info.role == "evaluator":
        return ClusterEnv(
            1,
            "TF_CONFIG",
            f"TF_CONFIG names this process evaluator {info.role_index}: it does not train, so one device of its own",
            info.tf_config,
        )
    if info.source in ("TF_CONFIG", "ray") and info.tf_config is not None:
        tf_config = info.tf_config
        jobs = ", ".join(f"{len(a)} {job}" for job, a in tf_config.cluster.items())
        return ClusterEnv(
            tf_config.num_workers,
            "TF_CONFIG",
            f"TF_CONFIG lists {jobs}; this is {tf_config.task_type} {tf_config.task_index}",
            tf_config,
        )
    if info.source == "SLURM" and info.world_size > 1:
        nodes = f" on {len(info.nodes)} node(s)" if info.nodes else ""
        return ClusterEnv(
            info.world_size,
            "SLURM",
            f"SLURM step with {info.world_size} tasks{nodes}",
            addresses=_slurm_addresses(env, info),
            task_index=info.rank,
        )
    if info.source == "kubernetes" and info.world_size > 1 and info.tf_config is not None:
        return _pods(env, info)
    return ClusterEnv(1, "none", f"no TF_CONFIG and no multi-task SLURM step: a single process ({info.reason})")


def _pods(env: Mapping[str, str], info: Any) -> ClusterEnv:
    """A pod's job (:mod:`tfdevices.jobs.kubernetes`): every pod's ``host:port``, and how long their names may take."""
    pod = pod_cluster(env)
    return ClusterEnv(
        info.world_size,
        "kubernetes",
        info.reason,
        info.tf_config,
        addresses=info.tf_config.cluster["worker"],
        task_index=info.rank,
        wait_s=pod.wait_s if pod is not None else 0.0,
    )


def _slurm_addresses(env: Mapping[str, str], info: Any) -> tuple[str, ...]:
    """Each task's ``host:port`` in this SLURM step, ports from the job and step ids (see :func:`step_cluster`)."""
    tasks_var = next((v for v in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") if v in env), None)
    per_node = expand_tasks_per_node(env[tasks_var], variable=tasks_var) if tasks_var else [info.world_size]
    nodes = info.nodes or ("localhost",)
    ids = []
    for name in ("SLURM_JOB_ID", "SLURM_STEP_ID"):
        value = env.get(name, env.get(name.replace("_ID", "ID"), "0"))
        if not (value.isascii() and value.isdigit() and len(value) <= 18):
            raise LaunchError(f"{name} is not a whole number.", hint="run the script with srun.")
        ids.append(int(value))
    return tuple(step_cluster(nodes, per_node, ids[0], ids[1]))
