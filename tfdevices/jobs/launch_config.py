"""What one ``tfdevices launch`` is asked to do: one frozen record, checked once (torchrun's ``LaunchConfig``).

:func:`tfdevices.jobs.launcher.launch` takes a :class:`LaunchConfig`; the command line
(:mod:`tfdevices.jobs.launch_command`) builds one from its options. Every default is
here, and so is every check that needs nothing but the values: what needs this machine
(its CPU count, a directory to create, an address to bind) stays with the command line.

This module imports no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tfdevices.core.addresses import check_host, check_port, ipv4_problem
from tfdevices.core.errors import PYTHON, LaunchError, Terms
from tfdevices.core.units import short_repr
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.selection import Selection
from tfdevices.gpus.topology import Topology
from tfdevices.jobs.env import LaunchInfo
from tfdevices.jobs.metrics import MetricsAddress, parse_address
from tfdevices.jobs.ranks import plan_ranks
from tfdevices.jobs.rendezvous import MAX_WORKERS, Nodes
from tfdevices.jobs.stall import StallPolicy
from tfdevices.mends.base import names as mend_names
from tfdevices.mends.loopback import ALL, LOOPBACK

WORKERS_PER_CORE = 4  # beyond this many TensorFlow processes per CPU core, -n is most likely a mistake
MAX_NODES = 4096
MAX_RESTARTS = 1000
MAX_VIRTUAL_DEVICES = 1024
MAX_STALL_S = 7 * 86400.0
MAX_RDZV_S = 86400.0  # the longest wait for every launcher to join (a longer one is cut to this)
MAX_RDZV_ID = 256

#: The stall policy by default: stalls are reported, never stop the job.
REPORT_STALLS = StallPolicy()

#: How the command line names the record's settings in messages (``-n 0``, ``--stall-timeout 5``).
CLI_TERMS = Terms(
    "cli",
    (
        ("num_workers", "-n"),
        ("nodes", "--nnodes > 1"),
        ("nodes.nnodes", "--nnodes"),
        ("nodes.node_rank", "--node-rank"),
        ("nodes.master_addr", "--master-addr"),
        ("nodes.master_port", "--master-port"),
        ("nodes.node_addr", "--node-addr"),
        ("nodes.timeout", "--rdzv-timeout"),
        ("nodes.rdzv_id", "--rdzv-id"),
        ("stall.window_s", "--stall-window"),
        ("stall.timeout_s", "--stall-timeout"),
    ),
)


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """One launch: how many workers, on which GPUs, what the console shows, what happens on a failure.

    Attributes:
        num_workers: worker processes on this machine.
        gpus: candidate GPUs: NVML indices, a ``Selection`` or an ``Inventory`` (empty: CPU).
        share: allow more workers than GPUs.
        max_restarts: restarts of the whole job after a failed attempt (one machine only).
        virtual_devices: logical devices per worker, passed as ``TFDEVICES_VIRTUAL_DEVICES``.
        log_dir: keep rank R's output in ``log_dir/rank{R}.log``; the console shows rank 0.
        tee: with ``log_dir``, show every rank on the console too.
        all_ranks: show every rank's progress and repeated lines.
        tf_logs: show TensorFlow's C++ log lines.
        nodes: this launcher's place in a job over several machines (``None``: one machine).
        topology: the GPUs' :class:`~tfdevices.gpus.topology.Topology`: each worker is bound to
            the CPUs of its GPUs' NUMA node (``None``: CPUs left alone).
        mends_off: mends turned off in the workers (:mod:`tfdevices.mends`; ``keras_fit`` leaves
            Keras 3 ``model.fit`` unmended), besides those ``TFDEVICES_MENDS`` turns off.
        stall: when ranks that disagree about the next step count as stalled, and when a stall
            stops the job (:mod:`tfdevices.jobs.stall`; default: reported, never stopped).
        listen: where the workers' TensorFlow servers may listen: an IPv4 address of this machine,
            or ``"all"``; ``None``: 127.0.0.1 for a one-machine job, the node's own address over
            several machines.
        metrics: serve the job's metrics for Prometheus while it runs (:mod:`tfdevices.jobs.metrics`):
            ``"[HOST:]PORT"`` or a :class:`~tfdevices.jobs.metrics.MetricsAddress` (127.0.0.1 unless another
            address is named); ``None``: not served.
        terms: how messages name the settings (the API's keywords, or the command line's options).

    Raises:
        LaunchError: a value out of its range, or two that contradict each other.
        SelectionError: more workers than GPUs without ``share``.

    >>> LaunchConfig(2, gpus=[0, 1]).gpus
    (0, 1)
    >>> LaunchConfig(2, max_restarts=-1)
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.LaunchError: max_restarts=-1 must be between 0 and 1000. HINT: e.g. max_restarts=1.
    """

    num_workers: int
    gpus: Sequence[int] | Selection | Inventory = ()
    share: bool = False
    max_restarts: int = 0
    virtual_devices: int | None = None
    log_dir: str | None = None
    tee: bool = False
    all_ranks: bool = False
    tf_logs: bool = False
    nodes: Nodes | None = None
    topology: Topology | None = None
    mends_off: frozenset[str] = frozenset()
    stall: StallPolicy = REPORT_STALLS
    listen: str | None = None
    metrics: MetricsAddress | str | None = None
    terms: Terms = dataclasses.field(default=PYTHON, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_worker_count(self.num_workers, cpus=None, terms=self.terms)
        self._check_flags()
        self._check_ranges()
        self._check_output()
        self._check_stall()
        object.__setattr__(self, "listen", check_listen(self.listen, self.terms))
        if self.nodes is not None:
            object.__setattr__(self, "nodes", check_nodes(self.nodes, self.terms))
        if self.nodes is not None and self.max_restarts:
            raise LaunchError(
                f"{self.terms.name('max_restarts')} with {self.terms.name('nodes')}: restarting a job over several "
                "machines needs every launcher to agree, which this launcher does not do.",
                hint=f"leave {self.terms.name('max_restarts')} out, or restart the launchers together "
                "from a scheduler.",
            )
        self._check_metrics()
        object.__setattr__(self, "mends_off", self._known_mends())
        if isinstance(self.gpus, (list, tuple, range)):
            object.__setattr__(self, "gpus", tuple(self.gpus))
        self._check_gpus()

    def _asked(self, param: str, value: object) -> str:
        """The setting as the user wrote it: ``max_restarts=-1`` or ``--max-restarts -1``."""
        return _asked(self.terms, param, value)

    def _check_flags(self) -> None:
        for param in ("share", "tee", "all_ranks", "tf_logs"):
            value = getattr(self, param)
            if not isinstance(value, bool):
                raise LaunchError(
                    f"{self._asked(param, value)}: not True or False.",
                    hint=f"pass {param}=True.",
                )

    def _check_ranges(self) -> None:
        for param, value, low, high in (
            ("max_restarts", self.max_restarts, 0, MAX_RESTARTS),
            ("virtual_devices", self.virtual_devices, 1, MAX_VIRTUAL_DEVICES),
        ):
            if value is None and param == "virtual_devices":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise LaunchError(
                    f"{self._asked(param, value)} must be between {low} and {high}.",
                    hint=f"e.g. {self._asked(param, low + 1)}.",
                )

    def _check_output(self) -> None:
        if self.log_dir is not None and (not isinstance(self.log_dir, str) or not self.log_dir):
            raise LaunchError(
                f"{self._asked('log_dir', self.log_dir)}: not a directory's path.",
                hint="name one.",
            )
        if self.tee and not self.log_dir:
            raise LaunchError(
                f"{self.terms.name('tee')} without {self.terms.name('log_dir')}: there is no log to tee.",
                hint=f"add {self._asked('log_dir', 'DIR')}.",
            )

    def _check_stall(self) -> None:
        if not isinstance(self.stall, StallPolicy):
            raise LaunchError(
                f"{self._asked('stall', self.stall)}: not a StallPolicy.",
                hint="pass StallPolicy(...).",
            )
        for param, value in (
            ("stall.timeout_s", self.stall.timeout_s),
            ("stall.window_s", self.stall.window_s),
        ):
            if value is not None and not (isinstance(value, (int, float)) and 0 < value <= MAX_STALL_S):
                raise LaunchError(
                    f"{self._asked(param, value)} must be a number of seconds in (0, {MAX_STALL_S:g}].",
                    hint=f"e.g. {self._asked(param, 120)}.",
                )

    def _check_metrics(self) -> None:
        if self.metrics is None or isinstance(self.metrics, MetricsAddress):
            return
        name = self.terms.name("metrics")
        object.__setattr__(
            self, "metrics", parse_address(self.metrics, name if self.terms.style == "cli" else name + "=")
        )

    def _known_mends(self) -> frozenset[str]:
        given: object = self.mends_off
        if isinstance(given, str) or not isinstance(given, Iterable):
            raise LaunchError(
                f"{self._asked('mends_off', given)}: not a set of mend names.",
                hint="e.g. frozenset({'keras_fit'}).",
            )
        wanted = frozenset(given)
        unknown = sorted(wanted - set(mend_names()), key=str)
        if unknown:
            raise LaunchError(
                f"{self._asked('mends_off', sorted(wanted, key=str))}: no mend is called "
                f"{', '.join(map(short_repr, unknown))}; the mends are {', '.join(mend_names())}.",
                hint="`tfdevices doctor` lists them.",
            )
        return wanted

    def _check_gpus(self) -> None:
        """More workers than GPUs without ``share`` fails here, before any worker starts (pure; linear in N)."""
        n = self.num_workers
        info = LaunchInfo(
            world_size=n,
            local_world_size=n,
            source="launcher",
            reason="tfdevices launch",
        )
        plan_ranks(info, self.gpus, local_world_size=n, share=self.share)


def check_listen(value: object, terms: Terms = PYTHON) -> str | None:
    """Where the workers' servers may listen, checked (pure): ``None`` (the default), ``"all"``, ``"loopback"``
    (returned as 127.0.0.1) or an IPv4 address other than 0.0.0.0 (say ``"all"`` for every interface).

    Args:
        value: what was asked.
        terms: how the message names it (``listen=``, or the command line's ``--listen``).

    Returns:
        ``value``, with ``"loopback"`` as its address.

    Raises:
        LaunchError: anything else (a host name is resolved first: ``own_address``).

    >>> check_listen("loopback"), check_listen("10.0.0.5"), check_listen(None)
    ('127.0.0.1', '10.0.0.5', None)
    >>> check_listen("node7", CLI_TERMS)
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.LaunchError: --listen 'node7': not loopback, all or an IPv4 address. HINT: give --listen \
loopback, all, or an IPv4 address of this machine (e.g. --listen 10.0.0.5); a name is resolved with own_address.
    """
    if value is None or value == ALL:
        return value
    if value == "loopback":
        return LOOPBACK
    cli = terms.style == "cli"
    hint = (
        f"give {terms.name('listen')} loopback, all, or an IPv4 address of this machine (e.g. --listen 10.0.0.5)"
        if cli
        else f"give {terms.setting('listen', '127.0.0.1')}, 'loopback' or 'all', or leave it out for the default"
    )
    if ipv4_problem(value) is not None:
        what = "not loopback, all or an IPv4 address" if cli else "the workers' servers listen on an IPv4 address"
        raise LaunchError(
            f"{_asked(terms, 'listen', value)}: {what}{'' if cli else ', loopback or all; this is none of them'}.",
            hint=f"{hint}; a name is resolved with own_address.",
        )
    if value == "0.0.0.0":
        raise LaunchError(
            f"{terms.setting('listen', value)}: that is every interface; say it as {terms.setting('listen', ALL)}.",
            hint=f"{hint}.",
        )
    return str(value)


def check_nodes(nodes: object, terms: Terms = PYTHON) -> Nodes:
    """A job over several machines (:class:`~tfdevices.jobs.rendezvous.Nodes`), checked (pure): the node count
    and rank, node 0's address and port, this node's address, the wait and the job's id.

    Returns:
        ``nodes``, its wait cut to :data:`MAX_RDZV_S`.

    Raises:
        LaunchError: a value out of range or malformed, named as ``terms`` name it.

    >>> check_nodes(Nodes(2, 2, ("node0", 29400)), CLI_TERMS)
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.LaunchError: --node-rank 2 is out of range for --nnodes 2. HINT: node ranks run 0..1.
    """
    if not isinstance(nodes, Nodes):
        raise LaunchError(
            f"{terms.setting('nodes', nodes)}: not a Nodes record.", hint="build it with rendezvous.Nodes(...)."
        )
    count, rank = nodes.nnodes, nodes.node_rank
    for param, value, low, high in (("nodes.nnodes", count, 1, MAX_NODES), ("nodes.node_rank", rank, 0, None)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            raise LaunchError(
                f"{_asked(terms, param, value)} must be a whole number between {low} and {high or 'nnodes - 1'}.",
                hint=f"e.g. {_asked(terms, param, low + 1)}.",
            )
    if rank >= count:
        raise LaunchError(
            f"{_asked(terms, 'nodes.node_rank', rank)} is out of range for {_asked(terms, 'nodes.nnodes', count)}.",
            hint=f"node ranks run 0..{count - 1}.",
        )
    _check_master(nodes, terms)
    if nodes.node_addr is not None:
        check_host(
            nodes.node_addr,
            _asked(terms, "nodes.node_addr", nodes.node_addr),
            hint="name this machine as the others reach it: an IPv4 address or a host name.",
        )
    _check_rdzv_id(nodes, terms)
    timeout = nodes.timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise LaunchError(
            f"{_asked(terms, 'nodes.timeout', timeout)} must be a number of seconds > 0.",
            hint=f"e.g. {_asked(terms, 'nodes.timeout', 300)}.",
        )
    return dataclasses.replace(nodes, timeout=min(float(timeout), MAX_RDZV_S)) if timeout > MAX_RDZV_S else nodes


def _asked(terms: Terms, param: str, value: object) -> str:
    """The setting as the user wrote it: ``nodes.node_rank=2`` or ``--node-rank 2``."""
    return f"{terms.name(param)}{' ' if terms.style == 'cli' else '='}{short_repr(value)}"


def _check_master(nodes: Nodes, terms: Terms) -> None:
    """Node 0's ``(host, port)``: where every launcher meets."""
    master = nodes.master
    host, port = master if isinstance(master, tuple) and len(master) == 2 else (None, None)
    if not host:
        raise LaunchError(
            f"{_asked(terms, 'nodes.nnodes', nodes.nnodes)} needs {terms.name('nodes.master_addr')}, the address of "
            f"the {_asked(terms, 'nodes.node_rank', 0)} machine.",
            hint=f"e.g. {_asked(terms, 'nodes.master_addr', 'host0').replace(chr(39), '')} on every machine.",
        )
    check_host(
        host, _asked(terms, "nodes.master_addr", host), hint="name the node-0 machine: its IPv4 address or host name."
    )
    check_port(
        port, _asked(terms, "nodes.master_port", port), hint=f"e.g. {_asked(terms, 'nodes.master_port', 29400)}."
    )


def _check_rdzv_id(nodes: Nodes, terms: Terms) -> None:
    """The job's id: at most :data:`MAX_RDZV_ID` characters; one given by the user (``--rdzv-id``) not empty."""
    given = nodes.id_source == "--rdzv-id"
    value = nodes.rdzv_id
    if not isinstance(value, str) or len(value) > MAX_RDZV_ID or (given and not value):
        raise LaunchError(
            f"{_asked(terms, 'nodes.rdzv_id', value)} must be 1 to {MAX_RDZV_ID} characters.",
            hint=f"e.g. {_asked(terms, 'nodes.rdzv_id', 'exp7')}.",
        )


def check_worker_count(
    n: object,
    *,
    cpus: int | None,
    oversubscribe: bool = False,
    terms: Terms = CLI_TERMS,
) -> int:
    """Validates ``-n`` against this machine (pure).

    Each worker is a TensorFlow process with thread pools of its own; more than
    :data:`WORKERS_PER_CORE` per CPU core is taken for a mistake unless ``oversubscribe``.

    Args:
        n: the number of workers asked for.
        cpus: this machine's CPU cores (``os.cpu_count()``; ``None``: unknown, no machine bound).
        oversubscribe: allow more (never more than :data:`MAX_WORKERS`).
        terms: how the message names ``n`` (default: the command line's ``-n``).

    Returns:
        ``n``.

    Raises:
        LaunchError: not a whole number >= 1, more than the cores without ``oversubscribe``,
            or more than :data:`MAX_WORKERS`.

    >>> check_worker_count(2, cpus=8)
    2
    >>> check_worker_count(40, cpus=8)
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.LaunchError: -n 40: this machine has 8 CPU cores, and each worker is a TensorFlow \
process of its own. HINT: use at most -n 32 (4 per core), or pass --oversubscribe to start more anyway.
    """
    name, sep = terms.name("num_workers"), " " if terms.style == "cli" else "="
    asked = f"{name}{sep}{short_repr(n)}"
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise LaunchError(
            f"{asked}: the number of workers must be a whole number >= 1.",
            hint=f"e.g. {name}{sep}2.",
        )
    if n > MAX_WORKERS:
        raise LaunchError(
            f"{asked}: at most {MAX_WORKERS} workers per machine.",
            hint="spread a bigger job over machines with --nnodes, or under SLURM.",
        )
    if cpus is not None and n > WORKERS_PER_CORE * cpus and not oversubscribe:
        raise LaunchError(
            f"{asked}: this machine has {cpus} CPU cores, and each worker is a TensorFlow process of its own.",
            hint=f"use at most -n {WORKERS_PER_CORE * cpus} ({WORKERS_PER_CORE} per "
            "core), or pass --oversubscribe to start more anyway.",
        )
    return n


def config_from_call(config: object, options: Mapping[str, Any]) -> LaunchConfig:
    """What ``launch(command, config, **options)`` was given, as the record: ``config`` itself, with no keywords.

    Raises:
        TypeError: not a :class:`LaunchConfig` (the keywords of before, ``launch(command, n, log_dir=...)``,
            were removed in 0.4.0), or a record and keywords both.
    """
    if not isinstance(config, LaunchConfig):
        n = config if isinstance(config, int) and not isinstance(config, bool) else "n"
        raise TypeError(
            f"launch() takes a LaunchConfig: launch(command, LaunchConfig({n}, ...)); got {short_repr(config)}"
            f"{' and ' + ', '.join(sorted(options)) if options else ''} (the keywords of before 0.4.0 are gone: "
            "each is a field of LaunchConfig, and mend=False is mends_off={'keras_fit'})."
        )
    if options:
        raise TypeError(f"launch() takes a LaunchConfig alone, no keywords: got {', '.join(sorted(options))} too.")
    return config
