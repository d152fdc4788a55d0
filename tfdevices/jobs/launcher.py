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
:data:`~tfdevices.jobs.workers.GRACE_S` seconds later, or at a second signal, are killed. Workers never outlive the
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

import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from tfdevices.core.addresses import ipv4_problem, is_loopback, split_address
from tfdevices.core.errors import LaunchError
from tfdevices.core.units import short_repr
from tfdevices.gpus.topology import format_cpus
from tfdevices.jobs.console import Console, on_console
from tfdevices.jobs.end_files import write_job_files
from tfdevices.jobs.handshake import Stopped
from tfdevices.jobs.launch_config import LaunchConfig, config_from_call
from tfdevices.jobs.listen_check import LISTEN_STATUS
from tfdevices.jobs.metrics import Attempt, JobMetrics, MetricsAddress, gpu_reader, job_name
from tfdevices.jobs.node_exchange import MachineLink
from tfdevices.jobs.orphan_guard import OrphanGuard
from tfdevices.jobs.progress import PROGRESS_DIR_ENV
from tfdevices.jobs.rank_hooks import LAUNCHER_WATCHES_ENV
from tfdevices.jobs.ranks import cpu_binding
from tfdevices.jobs.rendezvous import Nodes, free_ports, rendezvous
from tfdevices.jobs.stall import STACKS_DIR_ENV
from tfdevices.jobs.watch import JobSummary, JobWatch
from tfdevices.jobs.watch_loop import WatchLoop, WatchPlace
from tfdevices.jobs.worker_plan import RESTART_ENV, WorkerPlan, plan_workers
from tfdevices.jobs.worker_sitecustomize import worker_site
from tfdevices.jobs.workers import GRACE_S, SignalForwarding, Workers
from tfdevices.mends.loopback import ALL, LOOPBACK

SIGPIPE_STATUS = 128 + 13


# --------------------------------------------------------------------------- the job


def launch(
    command: Sequence[str],
    config: LaunchConfig,
    *,
    out: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
    **options: Any,
) -> int:
    """Runs ``config.num_workers`` workers of ``command`` until they finish, restarting the job up to
    ``config.max_restarts`` times.

    Args:
        command: the program and its arguments.
        config: what to launch (:class:`~tfdevices.jobs.launch_config.LaunchConfig`).
        out: the console (default ``sys.stdout``).
        env: the base environment (default ``os.environ``).
        options: none is taken: the call of before 0.4.0 (``launch(command, n, log_dir=...)``) is a
            ``TypeError`` that names the call to make.

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
        TypeError: ``config`` is not a :class:`~tfdevices.jobs.launch_config.LaunchConfig`, or keyword
            ``options`` were given.
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
                with job.signals.forwarding():
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
        host = split_address(cluster.addresses[cluster.first_rank])[0]
        where = job.config.listen or own_address(host)
        say(_listening_line(where, host))
        job.join(peers)
        peers.watch(job.stop_remote)
        plans = plan_workers(
            n,
            [split_address(a)[1] for a in cluster.addresses[cluster.first_rank : cluster.first_rank + n]],
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
    if ipv4_problem(host) is None:
        return host
    try:
        address = str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except (OSError, UnicodeError, IndexError) as err:
        raise LaunchError(
            f"this machine's address in the job, {short_repr(host)}, names no IPv4 address "
            f"({getattr(err, 'strerror', None) or err}): its workers' servers cannot listen on it.",
            hint="give --node-addr as an IPv4 address of this machine, or --listen all.",
        ) from None
    if is_loopback(address):
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
    """One launch: its attempts, one after another, each with its workers
    (:class:`~tfdevices.jobs.workers.Workers`), its watch (:class:`~tfdevices.jobs.watch_loop.WatchLoop`) and, over
    several machines, its part in their exchange (:class:`~tfdevices.jobs.node_exchange.MachineLink`); the signals
    (:class:`~tfdevices.jobs.workers.SignalForwarding`) and the end report.
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
        self.signals = SignalForwarding()
        self.workers = Workers(command, console, config.log_dir, orphan_guard)
        self.remote_code: int | None = None
        self.metrics: JobMetrics | None = None
        self.link: MachineLink | None = None  # a job over several machines: this launcher's part in the exchange
        self.loop = WatchLoop(WatchPlace("", ""), config.stall)

    @property
    def stopped_by(self) -> int | None:
        """The first signal the launcher got, or ``None``."""
        return self.signals.stopped_by

    def signalled(self) -> bool:
        """The launcher got SIGINT, SIGTERM or SIGHUP: every wait ends at once."""
        return self.signals.signalled()

    @property
    def listen_failed(self) -> bool:
        """A listen check (the launcher's, or a worker's own) stopped a worker of the last attempt."""
        return self.workers.listen_breach is not None or bool(self.workers.listen_failed)

    def join(self, peers: Any) -> None:
        """A job over several machines: node 0 watches every node's ranks; another node sends it its own."""
        self.link = MachineLink(peers, self.console.say)

    def stop_remote(self, code: int) -> None:
        """Another machine's job failed or its launcher died: stop ours."""
        if self.remote_code is None:
            self.remote_code = code or 1

    def run(self, plans: Sequence[WorkerPlan]) -> int:
        """Starts one attempt's workers and waits for them: 0, or the first non-zero status."""
        workers = Workers(self.command, self.console, self.config.log_dir, self.orphan_guard)
        self.workers = self.signals.workers = workers
        bound = self._binding(plans)
        progress = tempfile.mkdtemp(prefix="tfdevices-progress-")
        log_dir = self.config.log_dir
        stacks = os.path.join(log_dir, "stacks") if log_dir else tempfile.mkdtemp(prefix="tfdevices-stacks-")
        base = {**self.base, PROGRESS_DIR_ENV: progress, STACKS_DIR_ENV: stacks, LAUNCHER_WATCHES_ENV: "1"}
        self.loop = self._watch_loop(plans, progress, stacks)
        if self.metrics is not None:  # rendered when scraped: this attempt's latest look, its GPUs and workers
            restarts = int(plans[0].env.get(RESTART_ENV, "0")) if plans else 0
            owned = {p.rank: p.gpus for p in plans}
            self.metrics.collector.start(Attempt(self.loop.watch, owned, self.workers.statuses, restarts))
        check = None
        try:
            for plan in plans:
                self.workers.start(plan, {**base, **plan.env}, bound.get(plan.local_rank))
            check = self.workers.check_listen(plans)
            return self._wait([p.rank for p in plans])
        except OSError as err:
            raise LaunchError(
                f"cannot start {short_repr(self.command[0])}: {err.strerror}.", hint="check the command after '--'."
            ) from None
        finally:
            if check is not None:
                check.close()
            self.workers.stop_all(self.signals.grace_s())
            self.workers.close()
            self._end_report()
            shutil.rmtree(progress, ignore_errors=True)
            _remove_if_empty(stacks)

    def _watch_loop(self, plans: Sequence[WorkerPlan], progress: str, stacks: str) -> WatchLoop:
        """This attempt's watch: this machine's records and, on node 0 of a job over several, the other nodes'."""
        link = self.link
        channel = link.channel if link is not None else None
        where = os.path.join(stacks, "rank<R>.txt")
        if channel is not None:
            where += " (this machine's ranks; another node's, in its launcher's stacks directory)"
        if link is not None:
            link.progress, link.stacks = progress, stacks
        expected = sorted({p.rank for p in plans} | set(channel.ranks if channel is not None else ()))
        node = link.node_name if link is not None else ""
        place = WatchPlace(progress, stacks, node, stacks_where=where)
        return WatchLoop(place, self.config.stall, expected, channel, self.console.say)

    def _look(self) -> int | None:
        """One look of the watch: a status to stop with, or None. On another node whose ranks node 0 watches, the
        records go to node 0 and nothing is said here.
        """
        if self.link is not None and self.link.reports_to_node_0:
            self.loop.look(speak=False)
            self.link.send_records()
            return None
        return self.loop.look()

    def _end_report(self) -> None:
        """The job's end: where each rank spent its step, the slow rank; with --log-dir, the files. On another node
        whose ranks node 0 watched, nothing: the job's summary is node 0's.
        """
        if self.link is not None and self.link.reports_to_node_0:
            self.link.send_records()  # the ranks' last records: node 0's summary counts their last steps
            return
        remote = self.loop.channel is not None  # the other nodes' last records come once their ranks end
        summary = self.loop.end(last_look=remote, wait_s=3.0 if remote else 0.0)
        if self.config.log_dir:
            _write_end_files(self.loop.watch, summary, self.config.log_dir, self.console.say)

    def _binding(self, plans: Sequence[WorkerPlan]) -> dict[int, tuple[int, ...]]:
        """Each local rank's CPUs (its GPUs' NUMA node), said on the console; empty without a topology."""
        topology = self.config.topology  # bind each worker to its GPUs' NUMA node
        if topology is None or not hasattr(os, "sched_getaffinity"):
            return {}
        bound, notes = cpu_binding([p.gpus for p in plans], topology, os.sched_getaffinity(0))
        for note in notes:
            self.console.say(note)
        for plan in plans:
            if plan.local_rank in bound:
                cpus = bound[plan.local_rank]
                self.console.say(f"worker {plan.rank}: CPUs {format_cpus(cpus)} (its GPUs' NUMA node)")
        return bound

    def _wait(self, ranks: Sequence[int]) -> int:
        """Waits for this attempt's workers, looking about once a second: 0, or the status to stop with."""
        next_watch = time.monotonic() + 1.0
        while True:
            status = self._stopping(ranks)
            if status is not None:
                return status
            if time.monotonic() >= next_watch:
                next_watch = time.monotonic() + 1.0
                stopped = self._look()
                if stopped is not None:
                    return stopped
            if self.signals.kill_due():
                self.console.say(f"workers still running {GRACE_S:g} s after the signal: killing them")
                self.workers.signal_all(signal.SIGKILL)
            time.sleep(0.05)

    def _stopping(self, ranks: Sequence[int]) -> int | None:
        """What ends the attempt now, said: its status (0: every worker ended well), or ``None`` to go on."""
        while self.signals.notices:
            self.console.say(self.signals.notices.pop(0))
        if self.workers.listen_breach is not None:
            rank, line = self.workers.listen_breach
            self.console.say(line)
            self.console.say(
                f"worker {rank} stopped: the launcher's listen check found its TensorFlow server listening on "
                "more than --listen asked; stopping the others"
            )
            return LISTEN_STATUS
        codes = self.workers.codes()
        failed = [(r, c) for r, c in zip(ranks, codes) if c not in (None, 0)]
        if failed:
            return self.workers.failure(*failed[0])
        if all(c == 0 for c in codes):
            return 0
        if self.console.closed:
            return SIGPIPE_STATUS
        if self.remote_code is not None:
            self.console.say("another machine's job stopped; stopping this one")
            return self.remote_code
        return None


def _write_end_files(watch: JobWatch, summary: JobSummary, log_dir: str, say: Callable[[str], None]) -> None:
    """The job's end files in --log-dir (:mod:`tfdevices.jobs.end_files`), each said; a failure to write, said."""
    latest = watch.latest
    end, looks = (latest.at, latest.number) if latest is not None else (None, 0)
    try:
        every = watch.looks_every_rank
        kept = watch.timeline_every
        files = write_job_files(
            summary, watch.timeline, log_dir, end, looks, looks_every_rank=every, timeline_every=kept
        )
        for path in files:
            say(f"each rank's steps: {path}")
    except OSError as err:
        say(f"cannot write the steps' timeline in --log-dir ({err.strerror})")


def _remove_if_empty(directory: str) -> None:
    """Removes a stack directory no rank wrote a stack to (empty files only)."""
    try:
        if all(entry.is_file() and entry.stat().st_size == 0 for entry in os.scandir(directory)):
            shutil.rmtree(directory, ignore_errors=True)
    except OSError:
        pass
