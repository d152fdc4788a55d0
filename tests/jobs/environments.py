"""Launcher environments the jobs tests build: what srun and TF_CONFIG set for a process."""

from __future__ import annotations

from tfdevices.jobs.tfconfig import make_tf_config

STEP = {"SLURM_STEP_ID": "0"}  # srun sets it: the process is a job step, not the batch script


def slurm(procid: int, localid: int, ntasks: int, **extra: str) -> dict[str, str]:
    env = {"SLURM_PROCID": str(procid), "SLURM_LOCALID": str(localid), "SLURM_NTASKS": str(ntasks), **STEP}
    env.update(extra)
    return env


def tfc(workers: list[str], index: int, task_type: str = "worker") -> dict[str, str]:
    return {"TF_CONFIG": make_tf_config(workers, index, task_type)}
