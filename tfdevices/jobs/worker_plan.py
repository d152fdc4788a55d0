"""What each worker of a launched job gets: its rank, address, GPUs and environment (:func:`plan_workers`).

Pure: it starts nothing. :mod:`tfdevices.jobs.launcher` starts the workers it plans.
This module imports no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tfdevices.core.addresses import split_address
from tfdevices.core.errors import LaunchError
from tfdevices.core.units import short_repr
from tfdevices.jobs.env import VIRTUAL_DEVICES_ENV, LaunchInfo
from tfdevices.jobs.launch_config import check_listen, check_worker_count
from tfdevices.jobs.ranks import plan_ranks
from tfdevices.jobs.rendezvous import NodeJob
from tfdevices.jobs.tfconfig import make_tf_config
from tfdevices.mends.loopback import ALL, LISTEN_ENV, Listen

RESTART_ENV = "TFDEVICES_RESTART"


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
    """What one worker gets.

    Attributes:
        rank: its rank in the whole job.
        address: its ``host:port`` in the cluster.
        gpus: its GPUs as NVML indices (empty: CPU).
        env: the variables set for it (on top of the launcher's own environment).
        local_rank: its rank on this machine.
    """

    rank: int
    address: str
    gpus: tuple[int, ...]
    env: Mapping[str, str]
    local_rank: int = 0


def plan_workers(
    n: int,
    ports: Sequence[int],
    gpus: object = (),
    *,
    share: bool = False,
    virtual_devices: int | None = None,
    restart: int = 0,
    host: str = "127.0.0.1",
    job: NodeJob | None = None,
    listen: str | None = None,
) -> tuple[WorkerPlan, ...]:
    """Plans this machine's N workers (pure; linear in N).

    Args:
        n: number of workers on this machine.
        ports: one port per worker.
        gpus: the candidate GPUs (NVML indices, a Selection or an Inventory); empty: CPU.
        share: allow more workers than GPUs.
        virtual_devices: logical devices per worker, passed as ``TFDEVICES_VIRTUAL_DEVICES``.
        restart: the restart count, passed as ``TFDEVICES_RESTART``.
        host: the address workers listen on (one machine).
        job: the whole job over several machines (``None``: this machine's N workers are the job).
        listen: where each worker's TensorFlow server may listen, passed as ``TFDEVICES_LISTEN`` with
            its port: an IPv4 address or ``"all"`` (``None``: ``host``).

    Returns:
        One :class:`WorkerPlan` per local rank.

    Raises:
        LaunchError: ``n`` < 1, the ports do not match, or ``listen`` (``host``) is no IPv4 address.
        SelectionError: more workers than GPUs without ``share``.

    >>> plans = plan_workers(2, [5000, 5001], [2, 3])
    >>> [(p.rank, p.address, p.gpus, p.env["CUDA_VISIBLE_DEVICES"]) for p in plans]
    [(0, '127.0.0.1:5000', (2,), '2'), (1, '127.0.0.1:5001', (3,), '3')]
    >>> [p.env["TFDEVICES_LISTEN"] for p in plans]
    ['127.0.0.1:5000', '127.0.0.1:5001']
    """
    where = _checked_plan(n, ports, listen or host)
    if job is None:
        job = NodeJob(tuple(f"{host}:{p}" for p in ports), 0)
    world = len(job.addresses)
    text = make_tf_config(job.addresses, job.first_rank)  # validates the cluster once; each rank's
    head = text[: text.rindex('"index": ') + len('"index": ')]  # TF_CONFIG is then this prefix + its index
    info = LaunchInfo(world_size=world, local_world_size=n, source="launcher", reason="tfdevices launch")
    assignments = _assignments(info, gpus, n, share)
    plans = []
    for local in range(n):
        rank = job.first_rank + local
        listens = Listen(None if where == ALL else where, split_address(job.addresses[rank])[1]).value()
        env = _worker_variables(rank, local, world, n, restart, assignments[local].env(), virtual_devices, listens)
        plans.append(WorkerPlan(rank, job.addresses[rank], assignments[local].gpus, _WorkerEnv(env, head, rank), local))
    return tuple(plans)


def _worker_variables(
    rank: int,
    local: int,
    world: int,
    n: int,
    restart: int,
    gpus: Mapping[str, str],
    virtual_devices: int | None,
    listen: str,
) -> dict[str, str]:
    """One worker's variables but its ``TF_CONFIG``: its ranks, the job's sizes, its GPUs, where it listens."""
    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(local),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(n),
        RESTART_ENV: str(restart),
        "PYTHONUNBUFFERED": "1",
        **gpus,
    }
    if virtual_devices is not None:
        env[VIRTUAL_DEVICES_ENV] = str(virtual_devices)
    env[LISTEN_ENV] = listen
    return env


def _checked_plan(n: int, ports: Sequence[int], where: str) -> str:
    """``where`` the workers listen, once the worker count, the ports and ``where`` itself are checked."""
    check_worker_count(n, cpus=None)  # the launch record's own checks: one validator
    where = check_listen(where) or where
    if len(ports) != n or len(set(ports)) != n:
        raise LaunchError(
            f"{n} workers need {n} distinct ports, got {short_repr(list(ports))}.", hint="use free_ports(n)."
        )
    return where


class _WorkerEnv(Mapping[str, str]):
    """A worker's variables; its ``TF_CONFIG`` (every worker's address: N x N text for N workers) is
    written when read, at the worker's start, so planning stays linear in N.
    """

    def __init__(self, env: dict[str, str], head: str, rank: int) -> None:
        self._env, self._head, self._rank = env, head, rank

    def __getitem__(self, name: str) -> str:
        if name == "TF_CONFIG":
            return f"{self._head}{self._rank}}}}}"
        return self._env[name]

    def __iter__(self) -> Any:
        yield "TF_CONFIG"
        yield from self._env

    def __len__(self) -> int:
        return len(self._env) + 1

    def __repr__(self) -> str:
        return f"<worker {self._rank} environment: TF_CONFIG and {', '.join(self._env)}>"


def _assignments(info: LaunchInfo, gpus: object, n: int, share: bool) -> tuple[Any, ...]:
    """Each local rank's GPU assignment, planned once for all of them."""
    return tuple(plan_ranks(info, gpus, local_world_size=n, share=share))
