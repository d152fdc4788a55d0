"""What one ``tfdevices launch`` is asked to do: one frozen record, checked once (torchrun's ``LaunchConfig``).

:func:`tfdevices.jobs.launcher.launch` takes a :class:`LaunchConfig`; the command line
(:mod:`tfdevices.jobs.launch_command`) builds one from its options. Every default is
here, and so is every check that needs nothing but the values: what needs this machine
(its CPU count, a directory to create, an address to bind) stays with the command line.

This module imports no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
from tfdevices.mends.loopback import ALL

WORKERS_PER_CORE = 4  # beyond this many TensorFlow processes per CPU core, -n is most likely a mistake
MAX_NODES = 4096
MAX_RESTARTS = 1000
MAX_VIRTUAL_DEVICES = 1024
MAX_STALL_S = 7 * 86400.0

#: The stall policy by default: stalls are reported, never stop the job.
REPORT_STALLS = StallPolicy()

#: How the command line names the record's settings in messages (``-n 0``, ``--stall-timeout 5``).
CLI_TERMS = Terms(
    "cli",
    (
        ("num_workers", "-n"),
        ("nodes", "--nnodes > 1"),
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
        if self.nodes is not None and not isinstance(self.nodes, Nodes):
            raise LaunchError(
                f"{self._asked('nodes', self.nodes)}: not a Nodes record.",
                hint="build it with rendezvous.Nodes(...).",
            )
        if self.nodes is not None and self.max_restarts:
            raise LaunchError(
                f"{self.terms.name('max_restarts')} with {self.terms.name('nodes')}: restarting a job over several "
                "machines needs every launcher to agree, which this launcher does not do.",
                hint=f"leave {self.terms.name('max_restarts')} out, or restart the launchers together "
                "from a scheduler.",
            )
        self._check_listen()
        self._check_metrics()
        object.__setattr__(self, "mends_off", self._known_mends())
        if isinstance(self.gpus, (list, tuple, range)):
            object.__setattr__(self, "gpus", tuple(self.gpus))
        self._check_gpus()

    def _asked(self, param: str, value: object) -> str:
        """The setting as the user wrote it: ``max_restarts=-1`` or ``--max-restarts -1``."""
        return f"{self.terms.name(param)}{' ' if self.terms.style == 'cli' else '='}{short_repr(value)}"

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

    def _check_listen(self) -> None:
        if self.listen is None or self.listen == ALL:
            return
        try:
            ipaddress.IPv4Address(self.listen)
        except ValueError:
            raise LaunchError(
                f"{self._asked('listen', self.listen)}: not 'all' or an IPv4 address.",
                hint=f"e.g. {self._asked('listen', '127.0.0.1')}, or leave it out for the default.",
            ) from None

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


def config_from_call(config: LaunchConfig | int, options: Mapping[str, Any]) -> LaunchConfig:
    """What ``launch(command, config, **options)`` was given, as the record: ``config`` itself, or, for the
    keywords of before (``launch(command, n, log_dir=...)``, deprecated until 0.4.0), the record they make.

    Raises:
        TypeError: a record and keywords both, or a keyword ``launch`` never took.
    """
    if isinstance(config, LaunchConfig):
        if options:
            raise TypeError(
                f"launch() takes a LaunchConfig or keywords, not both: got {', '.join(sorted(options))} too."
            )
        return config
    warnings.warn(
        "launch(command, n, **options) is deprecated: pass launch(command, LaunchConfig(n, ...)).",
        DeprecationWarning,
        stacklevel=3,
    )
    fields = dict(options)
    unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(LaunchConfig)} - {"mend"})
    if unknown:
        raise TypeError(f"launch() got unexpected keyword argument(s): {', '.join(unknown)}.")
    if not fields.pop("mend", True):
        fields["mends_off"] = frozenset(fields.get("mends_off", ())) | {"keras_fit"}
    if fields.get("stall") is None:
        fields.pop("stall", None)
    return LaunchConfig(config, **fields)  # an int, checked by LaunchConfig
