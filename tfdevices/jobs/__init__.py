"""Jobs of many processes, without TensorFlow: who am I (TF_CONFIG, SLURM, MPI,
RANK), which GPUs are mine, and the local launcher.

Imports only from :mod:`tfdevices.core` and :mod:`tfdevices.gpus`.
"""

from tfdevices.jobs.env import RANK_GPUS, LaunchInfo, launch_info
from tfdevices.jobs.ranks import GpuAssignment, gpu_for_rank
from tfdevices.jobs.reporting import stall_timeout
from tfdevices.jobs.slurm import step_cluster

__all__ = ["launch_info", "LaunchInfo", "gpu_for_rank", "GpuAssignment", "RANK_GPUS", "step_cluster", "stall_timeout"]
