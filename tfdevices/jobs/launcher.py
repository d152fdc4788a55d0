"""``tfdevices launch``: N local workers with TF_CONFIG, one GPU mapping each.

::

    tfdevices launch -n 2 [--gpus SPEC] [--share] [--max-restarts K] [--virtual-devices N] \\
        -- python train.py --epochs 3

Starts N copies of the command on this machine. Each worker gets

* ``TF_CONFIG`` naming all N workers on free loopback ports (``127.0.0.1``),
  with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` agreeing with it;
* its own GPUs from :func:`tfdevices.gpu_for_rank` over the GPUs ``--gpus`` selects
  (``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, ``TFDEVICES_RANK_GPUS``),
  or no GPU (``CUDA_VISIBLE_DEVICES=-1``) when there is none;
* ``TFDEVICES_VIRTUAL_DEVICES`` when ``--virtual-devices N`` is given (apply it with
  :func:`configure_worker`), and ``TFDEVICES_RESTART``: how many times the job restarted.

Each output line is prefixed with the worker's rank (``[1] ...``). SIGINT,
SIGTERM and SIGHUP are forwarded to every worker. When a worker fails, the others
are stopped (a synchronous job cannot go on without it); with ``--max-restarts K``
the whole job is started again, up to K times, on fresh ports, so a training script
that restores from a checkpoint (``BackupAndRestore``) resumes. The exit status is
the first non-zero one (``128 + N`` for a worker killed by signal N).

The same script runs unchanged under SLURM (``srun python train.py``):
:func:`tfdevices.launch_info` reads either environment.

This module imports no TensorFlow.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from tfdevices.core.errors import LaunchError
from tfdevices.gpus.selection import select
from tfdevices.jobs.env import RANK_GPUS, VIRTUAL_DEVICES_ENV, LaunchInfo
from tfdevices.jobs.ranks import gpu_for_rank
from tfdevices.jobs.tfconfig import make_tf_config

RESTART_ENV = "TFDEVICES_RESTART"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 10.0


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
    """What one worker gets.

    Attributes:
        rank: its rank (= local rank: every worker is on this machine).
        address: its ``host:port`` in the cluster.
        gpus: its GPUs as NVML indices (empty: CPU).
        env: the variables set for it (on top of the launcher's own environment).
    """

    rank: int
    address: str
    gpus: tuple[int, ...]
    env: Mapping[str, str]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports free on ``host`` right now (bound together, then released)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def plan_workers(n: int, ports: Sequence[int], gpus: object = (), *, share: bool = False,
                 virtual_devices: int | None = None, restart: int = 0, host: str = "127.0.0.1"
                 ) -> tuple[WorkerPlan, ...]:
    """Plans N local workers (pure).

    Args:
        n: number of workers.
        ports: one port per worker.
        gpus: the candidate GPUs (NVML indices, a Selection or an Inventory); empty: CPU.
        share: allow more workers than GPUs.
        virtual_devices: logical devices per worker, passed as ``TFDEVICES_VIRTUAL_DEVICES``.
        restart: the restart count, passed as ``TFDEVICES_RESTART``.
        host: the address workers listen on.

    Returns:
        One :class:`WorkerPlan` per rank.

    Raises:
        LaunchError: ``n`` < 1 or the ports do not match.
        SelectionError: more workers than GPUs without ``share``.

    >>> plans = plan_workers(2, [5000, 5001], [2, 3])
    >>> [(p.rank, p.address, p.gpus, p.env["CUDA_VISIBLE_DEVICES"]) for p in plans]
    [(0, '127.0.0.1:5000', (2,), '2'), (1, '127.0.0.1:5001', (3,), '3')]
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise LaunchError(f"-n {n!r}: the number of workers must be a whole number >= 1.", hint="e.g. -n 2.")
    if len(ports) != n or len(set(ports)) != n:
        raise LaunchError(f"{n} workers need {n} distinct ports, got {list(ports)}.", hint="use free_ports(n).")
    addresses = [f"{host}:{p}" for p in ports]
    info = LaunchInfo(world_size=n, local_world_size=n, source="launcher", reason="tfdevices launch")
    plans = []
    for rank in range(n):
        assignment = gpu_for_rank(info, gpus, local_rank=rank, share=share)
        env = {"TF_CONFIG": make_tf_config(addresses, rank), "RANK": str(rank), "LOCAL_RANK": str(rank),
               "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n), RESTART_ENV: str(restart),
               "PYTHONUNBUFFERED": "1", **assignment.env()}
        if virtual_devices is not None:
            env[VIRTUAL_DEVICES_ENV] = str(virtual_devices)
        plans.append(WorkerPlan(rank, addresses[rank], assignment.gpus, env))
    return tuple(plans)


USAGE = "tfdevices launch -n N [--gpus SPEC] [--max-restarts K] -- python train.py ..."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the options of ``tfdevices launch`` to ``parser`` (the CLI's ``launch`` subcommand)."""
    parser.add_argument("-n", "--num-workers", type=int, required=True, help="number of worker processes")
    parser.add_argument("--gpus", default="all",
                        help="GPUs to spread over the workers: 'all' (default), 'none', 'auto:N', '0,2'")
    parser.add_argument("--share", action="store_true", help="allow more workers than GPUs (they share GPUs)")
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="restart the whole job up to K times after a failure")
    parser.add_argument("--virtual-devices", type=int, default=None,
                        help="logical devices per worker (sets TFDEVICES_VIRTUAL_DEVICES; "
                             "see tfdevices.runtime.configure_worker)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command each worker runs, after '--'")


def run(args: argparse.Namespace) -> int:
    """Runs ``tfdevices launch`` from parsed arguments (see :func:`add_arguments`).

    Returns:
        0 when every worker succeeded, else the first non-zero exit status.

    Raises:
        LaunchError: bad arguments (the CLI prints it as one line, status 2).
        SpecError, SelectionError: ``--gpus`` is malformed or cannot be met.
    """
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise LaunchError("no command to run.",
                          hint="put the command after '--': tfdevices launch -n 2 -- python train.py.")
    for name, value, minimum in (("-n", args.num_workers, 1), ("--max-restarts", args.max_restarts, 0),
                                 ("--virtual-devices", args.virtual_devices, 1)):
        if value is not None and value < minimum:
            raise LaunchError(f"{name} {value} must be >= {minimum}.", hint=f"e.g. {name} 2.")
    gpus = _candidate_gpus(args.gpus)
    plan_workers(args.num_workers, list(range(1, args.num_workers + 1)), gpus, share=args.share)  # fail early
    return launch(command, args.num_workers, gpus=gpus, share=args.share, max_restarts=args.max_restarts,
                  virtual_devices=args.virtual_devices)


def _candidate_gpus(spec: str) -> tuple[int, ...]:
    if spec in ("none", "cpu"):
        return ()
    return tuple(g.index for g in select(spec).gpus)


def launch(command: Sequence[str], n: int, *, gpus: object = (), share: bool = False, max_restarts: int = 0,
           virtual_devices: int | None = None, out: IO[str] | None = None,
           env: Mapping[str, str] | None = None) -> int:
    """Runs N workers of ``command`` until they finish, restarting the job up to ``max_restarts`` times.

    Args:
        command: the program and its arguments.
        n: number of workers.
        gpus: candidate GPUs (see :func:`plan_workers`).
        share: allow more workers than GPUs.
        max_restarts: restarts of the whole job after a failed attempt.
        virtual_devices: passed to each worker as ``TFDEVICES_VIRTUAL_DEVICES``.
        out: where prefixed output goes (default ``sys.stdout``).
        env: the base environment (default ``os.environ``).

    Returns:
        0, or the first non-zero exit status of the last attempt.
    """
    out = out or sys.stdout
    base = dict(os.environ if env is None else env)
    job = _Job(out)
    with job.forwarding_signals():
        for attempt in range(max_restarts + 1):
            plans = plan_workers(n, free_ports(n), gpus, share=share, virtual_devices=virtual_devices,
                                 restart=attempt)
            code = job.run(command, plans, base)
            if job.stopped_by is not None:  # interrupted: report it even if the workers exited cleanly
                return code or 128 + job.stopped_by
            if code == 0:
                return 0
            if attempt < max_restarts:
                job.say(f"restarting all {n} workers (restart {attempt + 1} of {max_restarts})")
        return code


class _Job:
    """One attempt's worker processes, their output pumps and the signal forwarding."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stopped_by: int | None = None

    def say(self, text: str, rank: int | str = "launcher") -> None:
        with self.lock:
            self.out.write(f"[{rank}] {text}\n")
            self.out.flush()

    def forwarding_signals(self) -> Any:
        job = self

        class _Forward:
            def __enter__(self) -> None:
                self.saved = {}
                if threading.current_thread() is threading.main_thread():
                    self.saved = {s: signal.signal(s, job._forward) for s in FORWARDED}

            def __exit__(self, *exc: object) -> None:
                for s, handler in self.saved.items():
                    signal.signal(s, handler)

        return _Forward()

    def _forward(self, signum: int, frame: object) -> None:
        self.stopped_by = signum
        for p in self.procs:
            if p.poll() is None:
                _signal_group(p, signum)

    def run(self, command: Sequence[str], plans: Sequence[WorkerPlan], base: Mapping[str, str]) -> int:
        self.procs, pumps = [], []
        try:
            for plan in plans:
                proc = subprocess.Popen(list(command), env={**base, **plan.env}, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
                self.procs.append(proc)
                gpus = ",".join(map(str, plan.gpus)) or "none (CPU)"
                self.say(f"worker {plan.rank}: pid {proc.pid}, {plan.address}, GPUs {gpus}")
                pump = threading.Thread(target=self._pump, args=(proc, plan.rank), daemon=True)
                pump.start()
                pumps.append(pump)
            return self._wait()
        except OSError as err:
            raise LaunchError(f"cannot start {command[0]!r}: {err.strerror}.",
                              hint="check the command after '--'.") from None
        finally:
            self._stop_all()
            for pump in pumps:
                pump.join(timeout=5)

    def _pump(self, proc: subprocess.Popen[bytes], rank: int) -> None:
        if proc.stdout is None:
            return
        for raw in iter(proc.stdout.readline, b""):
            self.say(raw.decode("utf-8", "replace").rstrip("\n"), rank)
        proc.stdout.close()

    def _wait(self) -> int:
        while True:
            codes = [p.poll() for p in self.procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                status = _exit_status(code)
                self.say(f"worker {rank} exited with status {status}"
                         + (f" (signal {-code})" if code < 0 else "") + "; stopping the others")
                return status
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.05)

    def _stop_all(self) -> None:
        alive = [p for p in self.procs if p.poll() is None]
        for p in alive:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for p in alive:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait(timeout=30)
        for p in self.procs:  # the worker's own children too: its process group
            _signal_group(p, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code


__all__ = ["RANK_GPUS", "USAGE", "WorkerPlan", "add_arguments", "free_ports", "launch", "plan_workers", "run"]
