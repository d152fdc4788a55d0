"""Jobs of many processes, without TensorFlow: who am I (TF_CONFIG, SLURM, MPI,
RANK), which GPUs are mine, the launcher (``tfdevices launch``, on one machine or
several; from Python ``launch`` and ``LaunchConfig``), and the job's watch (each rank's
progress, the slow or stuck rank, the metrics for Prometheus, the report at the job's end).

Imports from :mod:`tfdevices.core`, :mod:`tfdevices.gpus` and :mod:`tfdevices.mends`
(the mends each worker installs to fill its progress record, and what the launcher
passes on to them: the mends turned off, the address to listen on); never TensorFlow.
"""

# Each name is loaded from its module on first use: a worker that reads its rank (env) imports no more.
from __future__ import annotations

from tfdevices.core.lazy import lazy_names

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from tfdevices.jobs.end_files import JobRanks, read_ranks
    from tfdevices.jobs.env import RANK_GPUS, LaunchInfo, launch_info
    from tfdevices.jobs.launch_config import LaunchConfig
    from tfdevices.jobs.launcher import launch
    from tfdevices.jobs.metrics import MetricsAddress, serve_metrics
    from tfdevices.jobs.rank_hooks import slow_rank_report, stall_timeout
    from tfdevices.jobs.ranks import GpuAssignment, gpu_for_rank
    from tfdevices.jobs.rendezvous import Nodes
    from tfdevices.jobs.slurm import step_cluster
    from tfdevices.jobs.stall import StallPolicy
    from tfdevices.jobs.straggler import SlowRankPolicy

# public name -> the module that defines it
_EXPORTS = {
    "launch_info": "tfdevices.jobs.env",
    "LaunchInfo": "tfdevices.jobs.env",
    "RANK_GPUS": "tfdevices.jobs.env",
    "gpu_for_rank": "tfdevices.jobs.ranks",
    "GpuAssignment": "tfdevices.jobs.ranks",
    "step_cluster": "tfdevices.jobs.slurm",
    "stall_timeout": "tfdevices.jobs.rank_hooks",
    "slow_rank_report": "tfdevices.jobs.rank_hooks",
    "read_ranks": "tfdevices.jobs.end_files",
    "JobRanks": "tfdevices.jobs.end_files",
    "serve_metrics": "tfdevices.jobs.metrics",
    "launch": "tfdevices.jobs.launcher",
    "LaunchConfig": "tfdevices.jobs.launch_config",
    "StallPolicy": "tfdevices.jobs.stall",
    "SlowRankPolicy": "tfdevices.jobs.straggler",
    "MetricsAddress": "tfdevices.jobs.metrics",
    "Nodes": "tfdevices.jobs.rendezvous",
}

__all__ = [
    "launch_info",
    "LaunchInfo",
    "gpu_for_rank",
    "GpuAssignment",
    "RANK_GPUS",
    "step_cluster",
    "stall_timeout",
    "slow_rank_report",
    "read_ranks",
    "JobRanks",
    "serve_metrics",
    "launch",
    "LaunchConfig",
    "StallPolicy",
    "SlowRankPolicy",
    "MetricsAddress",
    "Nodes",
]


__getattr__, __dir__ = lazy_names(globals(), _EXPORTS)
