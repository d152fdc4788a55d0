"""``tfdevices launch``: N workers with TF_CONFIG, one GPU mapping each, like ``torchrun`` for TensorFlow.

::

    tfdevices launch -n 2 [--gpus SPEC] [--share] [--max-restarts K] [--virtual-devices N] \\
        [--log-dir DIR [--tee]] [--all-ranks] [--tf-logs] [--listen {loopback,all,ADDRESS}] \\
        -- python train.py --epochs 3

    # two machines, no scheduler: the same command on each, --node-rank 0 and 1
    tfdevices launch -n 4 --nnodes 2 --node-rank 0 --master-addr host0 -- python train.py

Starts N copies of the command on this machine. Each worker gets

* ``TF_CONFIG`` naming every worker of the job (on free ports; ``127.0.0.1`` for a
  one-machine job), with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``
  agreeing with it;
* its own GPUs from :func:`tfdevices.gpu_for_rank` over the GPUs ``--gpus`` selects
  (``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, ``TFDEVICES_RANK_GPUS``),
  or no GPU (``CUDA_VISIBLE_DEVICES=-1``) when there is none;
* ``TFDEVICES_VIRTUAL_DEVICES`` when ``--virtual-devices N`` is given (apply it with
  :func:`tfdevices.runtime.configure_worker`), and ``TFDEVICES_RESTART``: how many times the job restarted.

Output (see :mod:`tfdevices.jobs.console`): each line is prefixed with its rank
(``[1] ...``); a progress bar (``\\r``) is shown as progress, rank 0's only unless
``--all-ranks``; a line every rank prints the same (a warning) is shown once;
TensorFlow's C++ start-up log lines are hidden unless ``--tf-logs``. ``--log-dir DIR``
keeps every line of rank R in ``DIR/rank{R}.log`` and shows only rank 0 on the console
(``--tee``: every rank, as without ``--log-dir``); a failed rank's last lines are shown.
When the console goes away (``| head``) the job is stopped, quietly.

Signals: SIGINT, SIGTERM and SIGHUP are forwarded to every worker; workers still running
:data:`GRACE_S` seconds later, or at a second signal, are killed. Workers never outlive the
launcher: an orphan guard (a process) kills their process groups when the launcher dies,
even by SIGKILL (:mod:`tfdevices.jobs.orphan_guard`). When a worker fails, the others are
stopped (a synchronous job cannot go on without it); with ``--max-restarts K`` the whole job
is started again, up to K times, on fresh ports, so a script that restores from a checkpoint
(``BackupAndRestore``) resumes. The exit status is the first non-zero one (``128 + N`` for a
worker killed by signal N); ``128 + N`` when the launcher got signal N, in every phase (a
launcher waiting for the other machines stops at once).

From Python: ``launch(command, LaunchConfig(2, gpus=(0, 1)))``; every option is a field of the
one record (:class:`~tfdevices.jobs.launch_config.LaunchConfig`), checked when it is made. The
command line (its options, checked, turned into that record) is :mod:`tfdevices.jobs.launch_command`.

Many machines (``--nnodes``): the launcher of ``--node-rank 0`` listens on
``--master-addr:--master-port``; the others connect to it and say where their workers
listen; every launcher then starts its workers with the whole cluster in ``TF_CONFIG``
(global ranks in node order; :mod:`tfdevices.jobs.rendezvous`). Only launchers of the same job join
(``--rdzv-id``, and the secret of ``--rdzv-token-file`` or ``TFDEVICES_RDZV_TOKEN`` when set:
:mod:`tfdevices.jobs.handshake`); other connections are dropped and counted. The connections stay
open: when one machine's job fails or its launcher dies, the others stop theirs, and over them each
node's ranks reach node 0's launcher (:mod:`tfdevices.jobs.node_exchange`).

While the job runs the launcher watches every rank's progress record (:mod:`tfdevices.jobs.watch`): it names
a slow rank, a stuck one with its frames (and stops the job when ``--stall-timeout`` is given), serves
``--metrics`` for Prometheus (:mod:`tfdevices.jobs.metrics`), and with ``--log-dir`` writes the job's report
at its end (:mod:`tfdevices.jobs.end_files`).

Where the workers' TensorFlow servers listen (``--listen``): on 127.0.0.1 for a one-machine job, on the
node's own address for a job over several machines, or, with ``--listen all``, on every interface (TensorFlow's
own choice). Each worker gets ``TFDEVICES_LISTEN`` (its address and port); its ``sitecustomize``
(:mod:`tfdevices.jobs.worker_sitecustomize`) keeps the server there (:mod:`tfdevices.mends.loopback`). Whether it
listens nowhere else is checked twice (:mod:`tfdevices.jobs.listen_check`): by the worker itself, and by the
launcher, which reads each worker's sockets from ``/proc`` from outside it (whatever the worker imported,
mended or undid); a worker found listening on more is stopped, the job ends with
:data:`~tfdevices.jobs.listen_check.LISTEN_STATUS`, and the console says why.

The same script runs unchanged under SLURM (``srun python train.py``):
:func:`tfdevices.launch_info` reads either environment.

This module imports no TensorFlow.
"""

from __future__ import annotations

import collections
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from tfdevices.core.errors import LaunchError
from tfdevices.core.units import short_repr
from tfdevices.gpus.topology import format_cpus
from tfdevices.jobs.console import PROGRESS, Console, Record, Splitter, on_console
from tfdevices.jobs.end_files import write_job_files
from tfdevices.jobs.handshake import Stopped
from tfdevices.jobs.launch_config import LaunchConfig, config_from_call
from tfdevices.jobs.listen_check import LISTEN_MARK, LISTEN_STATUS, OutsideCheck
from tfdevices.jobs.metrics import Attempt, JobMetrics, MetricsAddress, gpu_reader, job_name
from tfdevices.jobs.node_exchange import RemoteRecords, frames_line, parse_want, record_line
from tfdevices.jobs.orphan_guard import OrphanGuard
from tfdevices.jobs.progress import PROGRESS_DIR_ENV, RankProgress, read_records, record_bytes, record_paths
from tfdevices.jobs.rank_hooks import LAUNCHER_WATCHES_ENV, STALL_STATUS
from tfdevices.jobs.ranks import cpu_binding, pinned
from tfdevices.jobs.rendezvous import Nodes, free_ports, rendezvous
from tfdevices.jobs.stacks import ask_stacks
from tfdevices.jobs.stall import STACKS_DIR_ENV, Stall
from tfdevices.jobs.watch import JobWatch, write_snapshot
from tfdevices.jobs.worker_plan import RESTART_ENV, WorkerPlan, plan_workers
from tfdevices.jobs.worker_sitecustomize import worker_site
from tfdevices.mends.loopback import ALL, LISTEN_ENV, LOOPBACK, parse_listen

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 10.0
TAIL_LINES = 20
SIGPIPE_STATUS = 128 + 13


# --------------------------------------------------------------------------- the job


def launch(
    command: Sequence[str],
    config: LaunchConfig | int,
    *,
    out: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
    **options: Any,
) -> int:
    """Runs ``config.num_workers`` workers of ``command`` until they finish, restarting the job up to
    ``config.max_restarts`` times.

    Args:
        command: the program and its arguments.
        config: what to launch (:class:`~tfdevices.jobs.launch_config.LaunchConfig`). Deprecated: the
            number of workers, with the record's fields as keyword ``options`` (and ``mend=False`` for
            ``mends_off={"keras_fit"}``); a ``DeprecationWarning`` says so.
        out: the console (default ``sys.stdout``).
        env: the base environment (default ``os.environ``).
        options: deprecated, see ``config``.

    Keras 3 ``model.fit`` is mended in the workers for ``MultiWorkerMirroredStrategy``
    (keras-team/keras#20585) unless ``config.mends_off`` names ``keras_fit``: a ``sitecustomize`` put first
    on the workers' ``PYTHONPATH`` (chaining any other) installs the mends when what they change is imported.
    Each worker's Python stack on a stall goes to ``log_dir/stacks`` (else a ``tfdevices-stacks-*``
    temporary directory). A one-machine job's ``TF_CONFIG`` names ``config.listen`` (127.0.0.1 for
    ``"all"``); a worker found listening on more is stopped, and so is the job.

    Returns:
        0, or the first non-zero exit status of the last attempt.

    Raises:
        LaunchError: a bad ``config`` (see :class:`~tfdevices.jobs.launch_config.LaunchConfig`), or a
            command that cannot start.
        TypeError: keyword ``options`` with a :class:`~tfdevices.jobs.launch_config.LaunchConfig`.
    """
    config = config_from_call(config, options)
    out = out or sys.stdout
    base = dict(os.environ if env is None else env)
    site = worker_site(base, mends_off=config.mends_off)
    console = _console(config, out)
    metrics: JobMetrics | None = None
    try:
        with on_console(console):  # what tfdevices.jobs.console.say says goes to this job's console
            metrics = _serve_metrics(config, command, base)  # a bad port fails here, before any worker
            with OrphanGuard() as orphan_guard:
                job = _Job(command, config, console, base, orphan_guard)
                job.metrics = metrics
                with job.forwarding_signals():
                    return _on_one_machine(job) if config.nodes is None else _over_machines(job, config.nodes)
    finally:
        if metrics is not None:  # the port closes when the job ends
            metrics.close()
        if site is not None:
            shutil.rmtree(site, ignore_errors=True)
        _report_hidden(console)
        if console.closed:
            _silence(out)


def _console(config: LaunchConfig, out: IO[str]) -> Console:
    """The job's console on ``out``: rank 0's lines alone where the others go to log files (and
    ``config.tee`` is off), and rank 0's progress alone unless ``config.all_ranks``.
    """
    return Console(
        out,
        tty=_isatty(out),
        ranks=(0,) if config.log_dir and not config.tee else None,
        progress_ranks=None if config.all_ranks else (0,),
        dedupe=not config.all_ranks,
        tf_logs=config.tf_logs,
    )


def _serve_metrics(config: LaunchConfig, command: Sequence[str], base: Mapping[str, str]) -> JobMetrics | None:
    """The job's metrics, served from now on (``config.metrics``); ``None`` when not asked for."""
    if not isinstance(config.metrics, MetricsAddress):
        return None
    asked = config.terms.name("metrics")
    return JobMetrics(config.metrics, job_name(command), gpu_reader(base), asked)


def _on_one_machine(job: _Job) -> int:
    """A job on this machine alone: on free ports, restarted up to ``max_restarts`` times."""
    config = job.config
    where = config.listen or LOOPBACK
    host = LOOPBACK if where == ALL else where
    job.console.say(_listening_line(where, host))
    code = 0
    for attempt in range(config.max_restarts + 1):
        plans = plan_workers(
            config.num_workers,
            free_ports(config.num_workers, "0.0.0.0" if where == ALL else host),
            config.gpus,
            share=config.share,
            virtual_devices=config.virtual_devices,
            restart=attempt,
            host=host,
            listen=where,
        )
        code = job.run(plans)
        if job.stopped_by is not None or job.console.closed or code == 0 or job.listen_failed:
            return _final(job, code)  # a worker found listening beyond --listen would again: no restart
        if attempt < config.max_restarts:
            job.console.say(
                f"restarting all {config.num_workers} workers (restart {attempt + 1} of {config.max_restarts})"
            )
    return code


def _over_machines(job: _Job, nodes: Nodes) -> int:
    """One machine's part of a job over several: meet the others' launchers, run, finish together."""
    n, say = job.config.num_workers, job.console.say
    say(
        f"node {nodes.node_rank} of {nodes.nnodes}: meeting the other machines' launchers at "
        f"{nodes.master[0]}:{nodes.master[1]} (for up to {nodes.timeout:g} s)"
    )
    try:
        cluster, peers = rendezvous(nodes, n, stopped=job.signalled)
    except Stopped:
        say(f"signal {job.stopped_by} while the machines met: stopping")
        return _final(job, 1)
    try:
        say(
            f"node {nodes.node_rank} of {nodes.nnodes}: ranks {cluster.first_rank}.."
            f"{cluster.first_rank + n - 1} of {len(cluster.addresses)}"
        )
        host = cluster.addresses[cluster.first_rank].rsplit(":", 1)[0]
        where = job.config.listen or own_address(host)
        say(_listening_line(where, host))
        job.link(peers)
        peers.watch(job.stop_remote)
        plans = plan_workers(
            n,
            [int(a.rsplit(":", 1)[1]) for a in cluster.addresses[cluster.first_rank : cluster.first_rank + n]],
            job.config.gpus,
            share=job.config.share,
            virtual_devices=job.config.virtual_devices,
            host=host,
            job=cluster,
            listen=where,
        )
        code = job.run(plans)
        return _final(job, peers.finish(code, stopped=job.signalled))
    finally:
        peers.close()


def own_address(host: str) -> str:
    """The IPv4 address ``host`` (this machine's address in a job over several machines) names: where its
    workers listen.

    Raises:
        LaunchError: ``host`` names no IPv4 address, or it is a name that resolves here to a loopback
            address (as Debian's ``/etc/hosts`` does for the machine's own name): the other machines,
            which resolve it otherwise, could not reach the workers.

    >>> own_address("127.0.0.2")
    '127.0.0.2'
    """
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        address = str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except (OSError, UnicodeError, IndexError) as err:
        raise LaunchError(
            f"this machine's address in the job, {short_repr(host)}, names no IPv4 address "
            f"({getattr(err, 'strerror', None) or err}): its workers' servers cannot listen on it.",
            hint="give --node-addr as an IPv4 address of this machine, or --listen all.",
        ) from None
    if ipaddress.IPv4Address(address).is_loopback:
        raise LaunchError(
            f"this machine's address in the job, {short_repr(host)}, resolves here to {address}, a loopback address: "
            "its workers would listen where the other machines cannot reach them.",
            hint="give --node-addr as this machine's IPv4 address on the network the machines share, or --listen all.",
        )
    return address


def _listening_line(where: str, host: str) -> str:
    """The console's one line on where the workers' TensorFlow servers listen."""
    if where == ALL:
        return (
            "--listen all: the workers' TensorFlow servers listen on every interface of this machine "
            "(they have no authentication: keep their ports behind a firewall)"
        )
    named = "" if host == where else f" ({host})"
    return (
        f"the workers' TensorFlow servers listen on {where}{named} only; a worker found listening on more stops the job"
    )


def _final(job: _Job, code: int) -> int:
    if job.console.closed:
        return code or SIGPIPE_STATUS
    if job.stopped_by is not None:  # interrupted: the status says so, however the workers ended
        return 128 + job.stopped_by
    return code


def _report_hidden(console: Console) -> None:
    console.finish()
    if console.hidden_tf_logs:
        console.say(f"{console.hidden_tf_logs} TensorFlow start-up log line(s) not shown (--tf-logs shows them)")


def _isatty(out: IO[str]) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):
        return False


def _silence(out: IO[str]) -> None:
    """The console's reader went away: point the stream at /dev/null so exiting does not fail on it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


class _Job:
    """One launch's worker processes (one attempt's at a time), their output pumps, the signal forwarding
    and the stops.
    """

    def __init__(
        self,
        command: Sequence[str],
        config: LaunchConfig,
        console: Console,
        base: Mapping[str, str],
        orphan_guard: OrphanGuard | None,
    ) -> None:
        self.command = list(command)
        self.config = config
        self.console = console
        self.base = base
        self.orphan_guard = orphan_guard
        self.log_dir = config.log_dir
        self.topology = config.topology  # bind each worker to its GPUs' NUMA node
        self.stall = config.stall
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stopped_by: int | None = None
        self.remote_code: int | None = None
        self._signals = 0
        self._kill_at: float | None = None
        self._tails: dict[int, collections.deque[str]] = {}
        self._notices: list[str] = []
        self._listen_failed: set[int] = set()  # ranks whose own listen check stopped them
        self.listen_breach: tuple[int, str] | None = None  # the rank the launcher's listen check stopped, and why
        self.metrics: JobMetrics | None = None
        self._ranks: list[int] = []
        self.progress = self.stacks = ""
        self.watch = JobWatch((), self.stall)
        self.peers: Any = None  # the other machines' launchers (a job over several machines)
        self.remote: RemoteRecords | None = None  # on node 0: the other nodes' ranks
        self.node_name = ""  # on node 0 of a job over several machines: how its lines name this machine
        self._remote_ranks: tuple[int, ...] = ()

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
        self._signals += 1
        self.stopped_by = self.stopped_by or signum
        if self._signals == 1:  # forward it; kill what still runs after the grace period
            self._kill_at = time.monotonic() + GRACE_S
            self._notices.append(
                f"signal {signum} passed to the workers; those still running in {GRACE_S:g} s, "
                "or at a second signal, are killed"
            )
            self._signal_all(signum)
        else:  # a second signal: no more waiting (printed by _wait: a handler must not take the console's lock)
            self._kill_at = None
            self._notices.append("a second signal: killing the workers")
            self._signal_all(signal.SIGKILL)

    def signalled(self) -> bool:
        """The launcher got SIGINT, SIGTERM or SIGHUP: every wait ends at once."""
        return self.stopped_by is not None

    def stop_remote(self, code: int) -> None:
        """Another machine's job failed or its launcher died: stop ours."""
        if self.remote_code is None:
            self.remote_code = code or 1

    def _signal_all(self, signum: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                _signal_group(p, signum)

    def run(self, plans: Sequence[WorkerPlan]) -> int:
        """Starts one attempt's workers and waits for them: 0, or the first non-zero status."""
        self.procs, pumps, logs = [], [], []
        self.listen_breach, self._listen_failed = None, set()
        bound = self._binding(plans)
        self.progress = tempfile.mkdtemp(prefix="tfdevices-progress-")
        stacks = os.path.join(self.log_dir, "stacks") if self.log_dir else tempfile.mkdtemp(prefix="tfdevices-stacks-")
        self.stacks = stacks
        base = {**self.base, PROGRESS_DIR_ENV: self.progress, STACKS_DIR_ENV: stacks, LAUNCHER_WATCHES_ENV: "1"}
        where = os.path.join(stacks, "rank<R>.txt")
        if self.remote is not None:
            where += " (this machine's ranks; another node's, in its launcher's stacks directory)"
        expected = sorted({p.rank for p in plans} | set(self._remote_ranks))
        self.watch = JobWatch(expected, self.stall, frames=self._frames, stacks_where=where)
        self._ranks = [p.rank for p in plans]
        if self.metrics is not None:  # rendered when scraped: this attempt's latest look, its GPUs and workers
            restarts = int(plans[0].env.get(RESTART_ENV, "0")) if plans else 0
            owned = {p.rank: p.gpus for p in plans}
            self.metrics.collector.start(Attempt(self.watch, owned, self._statuses, restarts))
        check = None
        try:
            for plan in plans:
                logs.append(self._open_log(plan.rank))
                pumps.append(self._start(plan, base, bound, logs[-1]))
            check = self._check_listen(plans)
            return self._wait([p.rank for p in plans])
        except OSError as err:
            raise LaunchError(
                f"cannot start {short_repr(self.command[0])}: {err.strerror}.", hint="check the command after '--'."
            ) from None
        finally:
            if check is not None:
                check.close()
            self._stop_all()
            for pump in pumps:
                pump.join(timeout=5)
            for log in logs:
                if log is not None:
                    log.close()
            self._end_report()
            shutil.rmtree(self.progress, ignore_errors=True)
            _remove_if_empty(stacks)

    def _start(
        self, plan: WorkerPlan, base: Mapping[str, str], bound: Mapping[int, tuple[int, ...]], log: IO[str] | None
    ) -> threading.Thread:
        """Starts one worker and the thread that pumps its output."""
        with pinned(bound.get(plan.local_rank)):
            proc = subprocess.Popen(
                list(self.command),
                env={**base, **plan.env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs.append(proc)
        if self.orphan_guard is not None:
            self.orphan_guard.guard(proc.pid)
        gpus = ",".join(map(str, plan.gpus)) or "none (CPU)"
        self.console.say(f"worker {plan.rank}: pid {proc.pid}, {plan.address}, GPUs {gpus}")
        pump = threading.Thread(target=self._pump, args=(proc, plan.rank, log), daemon=True)
        pump.start()
        return pump

    @property
    def listen_failed(self) -> bool:
        """A listen check (the launcher's, or a worker's own) stopped a worker of the last attempt."""
        return self.listen_breach is not None or bool(self._listen_failed)

    def _check_listen(self, plans: Sequence[WorkerPlan]) -> OutsideCheck:
        """The launcher's own listen check of this attempt's workers, read from outside them (started)."""
        workers = [(plan.rank, proc.pid, parse_listen(plan.env[LISTEN_ENV])) for plan, proc in zip(plans, self.procs)]
        return OutsideCheck(workers, self._listen_stop).start()

    def _listen_stop(self, rank: int, line: str) -> None:
        """The launcher's listen check found ``rank`` listening beyond --listen: that worker is killed at once
        (no clean-up may keep its port open longer); the job's loop stops the others and says why.
        """
        self.listen_breach = (rank, line)
        for plan_rank, proc in zip(self._ranks, self.procs):
            if plan_rank == rank and proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)

    def link(self, peers: Any) -> None:
        """A job over several machines: node 0 watches every node's ranks; another node sends it its own."""
        self.peers = peers
        if peers.is_master:
            others = [n for n in peers.nodes if n.node_rank != 0]
            self.remote = RemoteRecords(others)
            self.node_name = next(n.name for n in peers.nodes if n.node_rank == 0)
            self._remote_ranks = tuple(r for n in others if n.reports for r in n.ranks)
            peers.handlers = {"record": self.remote.take, "frames": self.remote.take}
        elif peers.reports:
            peers.handlers = {"want": self._send_frames}
            self.console.say(
                "this node's ranks report to node 0's launcher: the slow or stuck rank is named on its console"
            )

    @property
    def reports_to_node_0(self) -> bool:
        """This launcher is another node's, and node 0 watches its ranks."""
        return self.peers is not None and not self.peers.is_master and self.peers.reports

    def records(self) -> tuple[RankProgress, ...]:
        """Every rank's record this launcher sees: its own machine's, and on node 0 the other nodes'."""
        local = read_records(self.progress, self.node_name)
        return local if self.remote is None else (*local, *self.remote.records())

    def _frames(self, stall: Stall) -> dict[int, list[str]]:
        """The stuck ranks' top frames: this machine's ranks are asked for their stacks, other nodes' launchers for
        theirs.
        """
        remote = [r for r in stall.missing if r in self._remote_ranks]
        found: dict[int, list[str]] = {}
        ask = None
        if self.remote is not None and remote:
            others = self.remote
            ask = threading.Thread(target=lambda: found.update(others.frames(self._ask_frames, remote)))
            ask.start()
        local = [r for r in stall.records if r.rank not in self._remote_ranks]
        found.update(ask_stacks(local, self.stacks, [r for r in stall.missing if r not in remote]))
        if ask is not None:
            ask.join()
        return found

    def _ask_frames(self, node_rank: int, ranks: list[int]) -> None:
        self.peers.send(self.peers.node_ranks.index(node_rank), "want " + ",".join(map(str, ranks)))

    def _send_frames(self, node_rank: int, word: str, value: str) -> None:
        """Node 0 asked for the frames of ranks of this machine: their stacks asked for, the top frames sent."""
        frames = ask_stacks(read_records(self.progress), self.stacks, parse_want(value))
        for rank, lines in frames.items():
            self.peers.send(0, frames_line(rank, lines))

    def _send_records(self) -> None:
        """This machine's ranks' records, as they are, to node 0's launcher."""
        for path in record_paths(self.progress):
            raw = record_bytes(path)
            if raw is not None:
                self.peers.send(0, record_line(raw))

    def _look(self) -> int | None:
        """One look of the watch: its lines said, its snapshot left for the workers; a status to stop with, or None.
        On another node whose ranks node 0 watches, the records go to node 0 and nothing is said here.
        """
        snapshot = self.watch.poll(self.records())
        write_snapshot(snapshot, self.progress)
        if self.reports_to_node_0:
            self._send_records()
            return None
        for line in [*snapshot.said, *(self.remote.unheard() if self.remote is not None else ())]:
            self.console.say(line)
        if snapshot.stop is None:
            return None
        self.console.say(snapshot.stop)
        return STALL_STATUS

    def _end_report(self) -> None:
        """The job's end: where each rank spent its step, the slow rank; with --log-dir, the files. On another node
        whose ranks node 0 watched, nothing: the job's summary is node 0's.
        """
        if self.reports_to_node_0:
            self._send_records()  # the ranks' last records: node 0's summary counts their last steps
            return
        if self.remote is not None:  # the other nodes' last records come once their ranks end
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline and not all(r.phase == "done" for r in self.remote.records()):
                time.sleep(0.1)
            self.watch.poll(self.records())
        summary = self.watch.summary()
        for line in summary.lines():
            self.console.say(line)
        if not self.log_dir:
            return
        latest = self.watch.latest
        end, looks = (latest.at, latest.number) if latest is not None else (None, 0)
        try:
            every = self.watch.looks_every_rank
            for path in write_job_files(summary, self.watch.timeline, self.log_dir, end, looks, looks_every_rank=every):
                self.console.say(f"each rank's steps: {path}")
        except OSError as err:
            self.console.say(f"cannot write the steps' timeline in --log-dir ({err.strerror})")

    def _statuses(self) -> dict[int, int | None]:
        """Each started worker's exit status (``None`` while it runs), for the metrics."""
        return {rank: None if (c := p.poll()) is None else _exit_status(c) for rank, p in zip(self._ranks, self.procs)}

    def _binding(self, plans: Sequence[WorkerPlan]) -> dict[int, tuple[int, ...]]:
        """Each local rank's CPUs (its GPUs' NUMA node), said on the console; empty without a topology."""
        if self.topology is None or not hasattr(os, "sched_getaffinity"):
            return {}
        bound, notes = cpu_binding([p.gpus for p in plans], self.topology, os.sched_getaffinity(0))
        for note in notes:
            self.console.say(note)
        for plan in plans:
            if plan.local_rank in bound:
                cpus = bound[plan.local_rank]
                self.console.say(f"worker {plan.rank}: CPUs {format_cpus(cpus)} (its GPUs' NUMA node)")
        return bound

    def _open_log(self, rank: int) -> IO[str] | None:
        if not self.log_dir:
            return None
        path = os.path.join(self.log_dir, f"rank{rank}.log")
        try:
            return open(path, "a", encoding="utf-8", errors="replace")
        except OSError as err:
            raise LaunchError(
                f"--log-dir: cannot write {short_repr(path)} ({err.strerror}).",
                hint="name a directory you can write to.",
            ) from None

    def _pump(self, proc: subprocess.Popen[bytes], rank: int, log: IO[str] | None) -> None:
        stream = proc.stdout
        if stream is None:
            return
        splitter = Splitter()
        tail = self._tails.setdefault(rank, collections.deque(maxlen=TAIL_LINES))
        tail.clear()
        while True:
            data = stream.read1(1 << 16)  # type: ignore[attr-defined]  # a BufferedReader, typed IO[bytes] by Popen
            if not data:
                break
            for record in splitter.feed(data):
                self._record(rank, record, log, tail)
        for record in splitter.close():
            self._record(rank, record, log, tail)
        stream.close()

    def _record(self, rank: int, record: Record, log: IO[str] | None, tail: collections.deque[str]) -> None:
        if record.text.startswith(LISTEN_MARK):
            self._listen_failed.add(rank)
        if record.kind != PROGRESS:
            tail.append(record.text)
            if log is not None:
                try:
                    log.write(record.text + "\n")
                    log.flush()
                except OSError:  # a full disk must not stop the job's output pump
                    pass
        self.console.show(rank, record)

    def _wait(self, ranks: Sequence[int]) -> int:
        next_watch = time.monotonic() + 1.0
        while True:
            while self._notices:
                self.console.say(self._notices.pop(0))
            if self.listen_breach is not None:
                rank, line = self.listen_breach
                self.console.say(line)
                self.console.say(
                    f"worker {rank} stopped: the launcher's listen check found its TensorFlow server listening on "
                    "more than --listen asked; stopping the others"
                )
                return LISTEN_STATUS
            codes = [p.poll() for p in self.procs]
            failed = [(r, c) for r, c in zip(ranks, codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                status = _exit_status(code)
                if status == LISTEN_STATUS:
                    time.sleep(0.2)  # let its pump read its last line
                self.console.say(
                    f"worker {rank} exited with status {status}"
                    + (f" (signal {-code})" if code < 0 else "")
                    + (
                        ": its listen check found its TensorFlow server listening on more than --listen asked"
                        if status == LISTEN_STATUS and rank in self._listen_failed
                        else ""
                    )
                    + "; stopping the others"
                )
                self._show_tail(rank)
                return status
            if all(c == 0 for c in codes):
                return 0
            if self.console.closed:
                return SIGPIPE_STATUS
            if self.remote_code is not None:
                self.console.say("another machine's job stopped; stopping this one")
                return self.remote_code
            if time.monotonic() >= next_watch:
                next_watch = time.monotonic() + 1.0
                stopped = self._look()
                if stopped is not None:
                    return stopped
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                self._kill_at = None
                self.console.say(f"workers still running {GRACE_S:g} s after the signal: killing them")
                self._signal_all(signal.SIGKILL)
            time.sleep(0.05)

    def _show_tail(self, rank: int) -> None:
        """A failed rank whose lines the console did not show: its last lines."""
        if self.console.ranks is None or rank in self.console.ranks:
            return
        time.sleep(0.2)  # let its pump read what it wrote last
        lines = list(self._tails.get(rank, ()))
        if lines:
            self.console.say(
                f"the last {len(lines)} line(s) of rank {rank} ({os.path.join(self.log_dir or '', f'rank{rank}.log')}):"
            )
            for line in lines:
                self.console.echo(f"[{rank}] {line}")

    def _stop_all(self) -> None:
        alive = [p for p in self.procs if p.poll() is None]
        for p in alive:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + (0 if self._signals > 1 else GRACE_S)
        for p in alive:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait(timeout=30)
        for p in self.procs:  # the worker's own children too: its process group
            _signal_group(p, signal.SIGKILL)
            if self.orphan_guard is not None:
                self.orphan_guard.release(p.pid)


def _remove_if_empty(directory: str) -> None:
    """Removes a stack directory no rank wrote a stack to (empty files only)."""
    try:
        if all(entry.is_file() and entry.stat().st_size == 0 for entry in os.scandir(directory)):
            shutil.rmtree(directory, ignore_errors=True)
    except OSError:
        pass


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code
