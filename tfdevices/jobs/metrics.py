"""A job's metrics for Prometheus: each rank's steps and their split, each rank's GPUs, the job's workers.

``tfdevices launch --metrics [HOST:]PORT`` serves them (Prometheus' text format, through
``prometheus-client``) from the launcher while the job runs, on 127.0.0.1 unless another address is
named; the port closes when the job ends. Under ``srun`` and Ray Train, where no launcher watches,
rank 0's watch thread serves them (:mod:`tfdevices.jobs.rank_hooks`) when ``TFDEVICES_METRICS`` is set
or :func:`serve_metrics` was called.

Nothing is counted in the workers for this, and nothing is computed again: each scrape renders the
latest look of the job's watch (:attr:`~tfdevices.jobs.watch.JobWatch.latest`: each rank's steps, split,
slow-rank and stall marks) and reads NVML (the GPU inventory), in the serving thread (:class:`JobCollector`,
a collector of the job's own registry).

Every series has the labels ``job`` and ``node``; per rank ``rank``; per GPU ``rank`` and ``gpu`` (the
NVML index). A rank's ``node`` is the machine it runs on: node 0's launcher of a job over several machines
serves every rank of the job, each other node's launcher its own ranks. The GPU series follow OpenTelemetry's
``hw.gpu.*`` conventions where they have a name (``hw.gpu.utilization``, ``hw.gpu.memory.usage``,
``hw.gpu.memory.limit``) and the same pattern where they have none yet (power, temperature, SM clock).
:data:`SERIES` lists them all.

A job of up to :data:`EVERY_RANK_UP_TO` ranks serves every rank's series. A larger one serves them for the ranks
kept (:func:`kept_ranks`: the slow rank, the stalled ones, the slowest few) and, for each per-rank measure, its
min, median and max over the ranks (a ``stat`` label): over the job's (``tfdevices_job_*``) and over each node's
(``tfdevices_node_*``; every node's up to :data:`EVERY_NODE_UP_TO` nodes, else the kept ranks' nodes' only).
:data:`AGGREGATES` lists those series. A scrape over Prometheus' ``sample_limit`` fails whole: a job of 4,096
ranks served 53,299 series (``benchmarks/bench_job_scale.py``), it serves a few hundred now, however many ranks
past 64 nodes (about 2,000 at 64 nodes, most of them each node's aggregates).

This module imports no TensorFlow.

>>> parse_address("9100")
MetricsAddress(host='127.0.0.1', port=9100)
>>> parse_address("0.0.0.0:9100").everywhere
True
"""

from __future__ import annotations

import dataclasses
import errno
import heapq
import os
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any

from tfdevices.core.addresses import ipv4_problem, parse_host_port
from tfdevices.core.errors import EnvVarError, LaunchError, TfDevicesError
from tfdevices.core.units import short_repr
from tfdevices.gpus.discovery import discover
from tfdevices.jobs.console import say
from tfdevices.jobs.env import RANK_GPUS
from tfdevices.jobs.straggler import RankSplit
from tfdevices.jobs.watch import JobWatch, RankRow

#: ``[HOST:]PORT`` for rank 0's watch to serve on, where no launcher watches (``srun``, Ray Train).
METRICS_ENV = "TFDEVICES_METRICS"
DEFAULT_HOST = "127.0.0.1"
#: The parts of a rank's step (:class:`~tfdevices.jobs.straggler.RankSplit`), as ``part`` labels.
PARTS = ("between", "callback", "input", "compute", "wait")
#: Up to this many ranks a scrape serves every rank's series; above, :data:`AGGREGATES` and the ranks kept.
EVERY_RANK_UP_TO = 64
#: A larger job's ranks served one by one besides the slow and stalled ones: the slowest (lowest slow score).
SLOWEST_KEPT = 8
#: A larger job's stalled ranks served one by one, at most (the lowest ranks; the console names them all).
STALLED_KEPT = 64
#: A larger job's per-node aggregates cover every node up to this many nodes, else the kept ranks' nodes only.
EVERY_NODE_UP_TO = 64
#: The ``stat`` label of an aggregate over the ranks.
STATS = ("min", "median", "max")


@dataclasses.dataclass(frozen=True)
class Series:
    """One series served.

    Attributes:
        name: its name in Prometheus' text format (a counter's without ``_total``).
        kind: ``"gauge"``, ``"counter"`` or ``"summary"``.
        labels: its labels.
        help: what it measures.
    """

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str

    @property
    def served(self) -> tuple[str, ...]:
        """The names a scrape shows: ``X_total`` for a counter, ``X_count`` and ``X_sum`` for a summary."""
        if self.kind == "counter":
            return (f"{self.name}_total",)
        if self.kind == "summary":
            return (f"{self.name}_count", f"{self.name}_sum")
        return (self.name,)


_RANK = ("job", "node", "rank")
_GPU = ("job", "node", "rank", "gpu")
_JOB = ("job", "node")
#: Every series the exporter serves (and the TensorBoard scalars carry, but the job's).
SERIES = (
    Series("tfdevices_rank_steps", "counter", _RANK, "Steps the rank finished."),
    Series("tfdevices_rank_step_seconds", "summary", _RANK, "The rank's steps' wall time (past its first 2)."),
    Series("tfdevices_rank_last_step_seconds", "gauge", _RANK, "The rank's last step's wall time."),
    Series(
        "tfdevices_rank_split_seconds",
        "gauge",
        (*_RANK, "part"),
        "Where the rank spends a step (median of its latest): between steps, in fit's callbacks, in its input, "
        "computing, waiting in the collectives.",
    ),
    Series("tfdevices_rank_wait_ratio", "gauge", _RANK, "The share of its step the rank waits in the collectives."),
    Series("tfdevices_rank_slow_score", "gauge", _RANK, "The best rank's work per step over this rank's (1: best)."),
    Series("tfdevices_rank_slow", "gauge", _RANK, "1 for the rank the others wait for (the slow rank named)."),
    Series("tfdevices_rank_stalled", "gauge", _RANK, "1 for a rank the others wait for in a stall."),
    Series("hw_gpu_utilization", "gauge", _GPU, "GPU busy fraction (NVML), 0 to 1."),
    Series("hw_gpu_memory_usage_bytes", "gauge", _GPU, "GPU memory used (NVML)."),
    Series("hw_gpu_memory_limit_bytes", "gauge", _GPU, "GPU memory in all (NVML)."),
    Series("hw_gpu_power_watts", "gauge", _GPU, "GPU power draw (NVML)."),
    Series("hw_gpu_temperature_celsius", "gauge", _GPU, "GPU core temperature (NVML)."),
    Series("hw_gpu_clock_sm_hertz", "gauge", _GPU, "GPU SM clock (NVML)."),
    Series("tfdevices_job_workers_up", "gauge", _JOB, "Workers running."),
    Series("tfdevices_job_restarts", "counter", _JOB, "Restarts of the whole job (--max-restarts)."),
    Series("tfdevices_job_stalls", "counter", _JOB, "Stalls seen in this attempt."),
    Series("tfdevices_worker_exit_status", "gauge", _RANK, "A worker's exit status, once it exited."),
)

#: Each per-rank measure a larger job aggregates: the aggregate's name after its scope, what it measures.
_MEASURES = (
    ("steps", "steps finished"),
    ("step_seconds", "mean step wall time (past its first 2)"),
    ("last_step_seconds", "last step's wall time"),
    ("split_seconds", "time in one part of its step (part)"),
    ("wait_ratio", "share of its step waited in the collectives"),
    ("slow_score", "slow-rank score (1: best)"),
)


def _aggregates(scope: str, over: str) -> tuple[Series, ...]:
    ranks = Series(
        f"tfdevices_{scope}_ranks", "gauge", _JOB, f"The ranks the tfdevices_{scope}_* series are over: {over}."
    )
    return ranks, *(
        Series(
            f"tfdevices_{scope}_{name}",
            "gauge",
            (*_JOB, "part", "stat") if name == "split_seconds" else (*_JOB, "stat"),
            f"Each rank's {what}: its min, median and max (stat) over {over} (a job over {EVERY_RANK_UP_TO} ranks).",
        )
        for name, what in _MEASURES
    )


#: What a job over :data:`EVERY_RANK_UP_TO` ranks serves besides :data:`SERIES` (those of the ranks kept only):
#: over every rank the scrape holds (``node``: the serving machine's) and over each node's ranks.
AGGREGATES = (*_aggregates("job", "every rank served"), *_aggregates("node", "the node's ranks"))


# --------------------------------------------------------------------------- where to serve


@dataclasses.dataclass(frozen=True)
class MetricsAddress:
    """Where the metrics are served.

    Attributes:
        host: an IPv4 address or a host name (``127.0.0.1`` by default).
        port: the TCP port (0: any free one, said on the console).
    """

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def everywhere(self) -> bool:
        """Served on every interface (``0.0.0.0``)."""
        return self.host == "0.0.0.0"


def parse_address(text: object, asked: str = "--metrics", *, show: bool = True) -> MetricsAddress:
    """``[HOST:]PORT`` as a :class:`MetricsAddress` (pure; bounded; :func:`tfdevices.core.addresses.parse_host_port`).

    Args:
        text: ``"9100"``, ``"127.0.0.1:9100"``, ``"node7:9100"``, ``"0.0.0.0:9100"`` (every interface).
        asked: how the message names the setting (``--metrics``, ``metrics=``, ``TFDEVICES_METRICS=``).
        show: the message quotes ``text`` (``False`` for a value from the environment).

    Raises:
        LaunchError: not ``[HOST:]PORT`` with a port in 0..65535, and why.

    >>> parse_address("node7:0")
    MetricsAddress(host='node7', port=0)
    >>> parse_address("9100x")
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.LaunchError: --metrics '9100x': not [HOST:]PORT: its port '9100x' is not 1 to 5 digits. \
HINT: e.g. --metrics 9100 (on 127.0.0.1), or --metrics 10.0.0.5:9100 to serve on another of this machine's addresses.
    """
    sep = "" if asked.endswith("=") else " "
    hint = (
        f"e.g. {asked}{sep}9100 (on {DEFAULT_HOST}), or {asked}{sep}10.0.0.5:9100 to serve on another of this "
        "machine's addresses."
    )
    shown = f"{asked}{sep}{short_repr(text)}" if show else asked.removesuffix("=")
    address = parse_host_port(text, shown, default_host=DEFAULT_HOST, low=0, hint=hint, show=show)
    return MetricsAddress(address.host, address.port)


class MetricsServer:
    """The job's registry served over HTTP on a thread; :meth:`close` closes the port.

    Args:
        address: where to serve.
        registry: the job's registry (not the process-wide one).
        asked: how messages name the setting.

    Raises:
        LaunchError: the port is in use, the host is not an address of this machine or names none,
            or the port is not this user's to open.
    """

    def __init__(self, address: MetricsAddress, registry: Any, asked: str = "--metrics") -> None:
        start_http_server = _client().start_http_server
        self.address = address
        host = _resolve(address, asked)
        try:
            self._httpd, thread = start_http_server(address.port, host, registry)
        except OSError as err:
            raise _bind_error(address, host, err, asked) from None
        self._thread: threading.Thread | None = thread
        self.port = int(self._httpd.server_port)
        self.host = host

    def close(self) -> None:
        """Stops serving and closes the port; idempotent."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._thread = None

    def url(self) -> str:
        """``http://HOST:PORT/metrics``."""
        return f"http://{self.host}:{self.port}/metrics"


def _client() -> Any:
    """``prometheus_client``, or a clear error where it is not installed."""
    try:
        import prometheus_client  # noqa: PLC0415 (only a job that serves needs it)
    except ImportError:
        raise LaunchError(
            "serving metrics needs the prometheus-client package, which is not installed.",
            hint="in the tfdevices clone, pip install -e '.[metrics]' (or pip install prometheus-client).",
        ) from None
    return prometheus_client


def _resolve(address: MetricsAddress, asked: str) -> str:
    if ipv4_problem(address.host) is None:
        return address.host
    try:
        return str(socket.getaddrinfo(address.host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except (OSError, UnicodeError, IndexError):
        raise LaunchError(
            f"{asked} {address}: {short_repr(address.host)} names no IPv4 address here.",
            hint=f"name an address of this machine, e.g. {asked} {DEFAULT_HOST}:{address.port}.",
        ) from None


def _bind_error(address: MetricsAddress, host: str, err: OSError, asked: str) -> LaunchError:
    if err.errno == errno.EADDRINUSE:
        return LaunchError(
            f"{asked} {address}: port {address.port} is in use on {host}.",
            hint=f"pick another port, or {asked} {address.host}:0 for any free one (said on the console).",
        )
    if err.errno == errno.EADDRNOTAVAIL:
        return LaunchError(
            f"{asked} {address}: {host} is not an address of this machine.",
            hint=f"name one of its addresses ({DEFAULT_HOST}, the default, or its network's), or 0.0.0.0 for every "
            "interface.",
        )
    return LaunchError(
        f"{asked} {address}: cannot serve there ({err.strerror}).",
        hint="pick a port above 1023 that is free, on an address of this machine.",
    )


# --------------------------------------------------------------------------- what a scrape reads


@dataclasses.dataclass(frozen=True)
class GpuReading:
    """One GPU's sensors at one moment (NVML; ``None`` where it could not say).

    Attributes:
        index: the NVML index.
        utilization: busy fraction, 0 to 1.
        memory_used, memory_total: bytes.
        power_w: watts.
        temperature_c: degrees C.
        clock_sm_hz: hertz.
    """

    index: int
    utilization: float | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    clock_sm_hz: float | None = None

    def values(self) -> dict[str, float]:
        """Series name -> value, for the sensors NVML answered."""
        pairs = (
            ("hw_gpu_utilization", self.utilization),
            ("hw_gpu_memory_usage_bytes", self.memory_used),
            ("hw_gpu_memory_limit_bytes", self.memory_total),
            ("hw_gpu_power_watts", self.power_w),
            ("hw_gpu_temperature_celsius", self.temperature_c),
            ("hw_gpu_clock_sm_hertz", self.clock_sm_hz),
        )
        return {name: float(v) for name, v in pairs if v is not None}


def gpu_reader(env: Mapping[str, str] | None = None, nvml_module: Any = None) -> Callable[[], dict[int, GpuReading]]:
    """A function that reads every whole GPU of this machine (the inventory: NVML, or ``TFDEVICES_INVENTORY``),
    by NVML index; empty where there is none or the listing fails.
    """
    masked = {k: v for k, v in (os.environ if env is None else env).items() if not k.startswith("CUDA_")}

    def read() -> dict[int, GpuReading]:
        try:
            inventory = discover(env=masked, nvml_module=nvml_module, topology=False)
        except TfDevicesError:
            return {}
        return {
            g.index: GpuReading(
                g.index,
                g.utilization,
                g.memory_used,
                g.memory_total,
                None if g.power_draw_mw is None else g.power_draw_mw / 1000.0,
                g.temperature,
                None if g.clock_sm_mhz is None else g.clock_sm_mhz * 1e6,
            )
            for g in inventory
            if g.mig_index is None
        }

    return read


def rank_values(row: RankRow) -> dict[str, float]:
    """A rank's series from its row of the watch's look: series name (``tfdevices_rank_split_seconds/wait`` for a
    part) -> value.
    """
    out = {
        "tfdevices_rank_steps": float(row.steps),
        "tfdevices_rank_last_step_seconds": row.last_step_s,
        "tfdevices_rank_slow": float(row.slow),
        "tfdevices_rank_stalled": float(row.stalled),
    }
    if row.split is not None:
        for part in PARTS:
            out[f"tfdevices_rank_split_seconds/{part}"] = row.split.component(part)
        out["tfdevices_rank_wait_ratio"] = wait_ratio(row.split)
        out["tfdevices_rank_slow_score"] = row.split.score
    return out


def wait_ratio(split: RankSplit) -> float:
    """The share of its step a rank waits in the collectives (0 for a step of no time).

    >>> wait_ratio(RankSplit(0, 300, 0.001, 0.0, 0.055, 0.0, 0.005, 0.05, False, 1.0))
    0.909
    """
    return round(min(1.0, split.wait_s / split.step_s), 3) if split.step_s > 0 else 0.0


@dataclasses.dataclass
class Attempt:
    """What the collector reads for one attempt of the job (the launcher sets it at each start).

    Attributes:
        watch: the attempt's watch: its latest look is what a scrape serves.
        gpus: each rank's GPUs (NVML indices).
        workers: each rank's exit status (``None`` while it runs); ``None`` where the watcher is no parent
            (rank 0's watch under ``srun``: workers up are the ranks whose record is not done).
        restarts: restarts of the job so far.
    """

    watch: JobWatch
    gpus: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    workers: Callable[[], Mapping[int, int | None]] | None = None
    restarts: int = 0


class JobCollector:
    """A ``prometheus-client`` collector that renders the watch's latest look when scraped (no cost in the workers).

    Args:
        job: the ``job`` label.
        node: the ``node`` label of this machine (of ranks whose row names no other).
        read_gpus: reads the GPUs by NVML index (:func:`gpu_reader`); ``None``: no GPU series.
        every_rank_up_to: up to this many ranks every rank's series; above, :data:`AGGREGATES` and the ranks kept.
    """

    def __init__(
        self,
        job: str,
        node: str,
        read_gpus: Callable[[], Mapping[int, GpuReading]] | None = None,
        *,
        every_rank_up_to: int = EVERY_RANK_UP_TO,
    ) -> None:
        self.job = job
        self.node = node
        self.read_gpus = read_gpus
        self.every_rank_up_to = every_rank_up_to
        self.attempt: Attempt | None = None
        self._lock = threading.Lock()

    def start(self, attempt: Attempt) -> None:
        """A new attempt of the job (its first, or a restart)."""
        self.attempt = attempt

    def rows(self) -> tuple[RankRow, ...]:
        """Each rank's row of the watch's latest look (none before its first)."""
        attempt = self.attempt
        latest = attempt.watch.latest if attempt is not None else None
        return latest.rows if latest is not None else ()

    def collect(self) -> Iterator[Any]:
        """The families of :data:`SERIES` (and :data:`AGGREGATES` for a large job), rendered now (called by the
        registry at each scrape).
        """
        with self._lock:  # scrapes one at a time: each reads NVML
            rows = self.rows()
            large = len(rows) > self.every_rank_up_to
            families = _families((*SERIES, *AGGREGATES) if large else SERIES)
            attempt = self.attempt
            gpus = self.read_gpus() if self.read_gpus is not None and attempt is not None and attempt.gpus else {}
            if large:
                kept = kept_ranks(rows)
                self._add_ranks(families, [row for row in rows if row.rank in kept])
                self._add_aggregates(families, rows, kept)
            else:
                self._add_ranks(families, rows)
            self._add_gpus(families, gpus)
            self._add_job(families, rows)
        return iter(list(families.values()))

    def _add_ranks(self, families: dict[str, Any], rows: Sequence[RankRow]) -> None:
        for row in rows:
            labels = [self.job, row.node or self.node, str(row.rank)]
            families["tfdevices_rank_step_seconds"].add_metric(labels, row.timed, row.step_sum_s)
            for name, value in rank_values(row).items():
                if "/" in name:
                    name, part = name.split("/")
                    families[name].add_metric([*labels, part], value)
                else:
                    families[name].add_metric(labels, value)

    def _add_aggregates(self, families: dict[str, Any], rows: Sequence[RankRow], kept: set[int]) -> None:
        """The min, median and max of each measure over the job's ranks, and over each node's (every node's up to
        :data:`EVERY_NODE_UP_TO` nodes, else only the kept ranks' nodes').
        """
        _add_over(families, "job", [self.job, self.node], rows)
        by_node: dict[str, list[RankRow]] = {}
        for row in rows:
            by_node.setdefault(row.node or self.node, []).append(row)
        if len(by_node) > EVERY_NODE_UP_TO:
            wanted = {row.node or self.node for row in rows if row.rank in kept}
            by_node = {node: group for node, group in by_node.items() if node in wanted}
        for node, group in by_node.items():
            _add_over(families, "node", [self.job, node], group)

    def _add_gpus(self, families: dict[str, Any], gpus: Mapping[int, GpuReading]) -> None:
        attempt = self.attempt
        if attempt is None:
            return
        for rank, indices in sorted(attempt.gpus.items()):
            for index in indices:
                reading = gpus.get(index)
                if reading is None:
                    continue
                for name, value in reading.values().items():
                    families[name].add_metric([self.job, self.node, str(rank), str(index)], value)

    def _add_job(self, families: dict[str, Any], rows: Sequence[RankRow]) -> None:
        attempt = self.attempt
        if attempt is None:
            return
        labels = [self.job, self.node]
        latest = attempt.watch.latest
        families["tfdevices_job_restarts"].add_metric(labels, attempt.restarts)
        families["tfdevices_job_stalls"].add_metric(labels, latest.stalls if latest is not None else 0)
        if attempt.workers is None:
            families["tfdevices_job_workers_up"].add_metric(labels, sum(1 for r in rows if r.phase != "done"))
            return
        statuses = attempt.workers()
        families["tfdevices_job_workers_up"].add_metric(labels, sum(1 for s in statuses.values() if s is None))
        for rank, status in sorted(statuses.items()):
            if status is not None:
                families["tfdevices_worker_exit_status"].add_metric([*labels, str(rank)], status)


def _families(series: Sequence[Series]) -> dict[str, Any]:
    from prometheus_client.core import (  # noqa: PLC0415 (only a job that serves needs it)
        CounterMetricFamily,
        GaugeMetricFamily,
        SummaryMetricFamily,
    )

    kinds = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily, "summary": SummaryMetricFamily}
    return {s.name: kinds[s.kind](s.name, s.help, labels=list(s.labels)) for s in series}


def kept_ranks(rows: Sequence[RankRow], slowest: int = SLOWEST_KEPT, stalled: int = STALLED_KEPT) -> set[int]:
    """The ranks a job over :data:`EVERY_RANK_UP_TO` ranks serves one by one: the slow rank named, the stalled
    ones (the lowest ``stalled`` of them) and the ``slowest`` ranks (lowest slow score; before the splits, the
    fewest steps, then the longest last step).

    >>> from tfdevices.jobs.straggler import RankSplit
    >>> def row(rank, score, **marks):
    ...     split = RankSplit(rank, 40, 0.001, 0.0, 0.05, 0.0, 0.01, 0.04, True, score)
    ...     return RankRow(rank, "", 0, 40, "step", "in step 41", 38, 1.9, 0.05, split, **marks)
    >>> sorted(kept_ranks([row(0, 1.0), row(1, 0.5), row(2, 0.9), row(3, 1.0, stalled=True)], slowest=2))
    [1, 2, 3]
    """
    named = [row.rank for row in rows if row.slow]
    named += [row.rank for row in rows if row.stalled][:stalled]
    return {*named, *(row.rank for row in heapq.nsmallest(slowest, rows, key=_slowness))}


def _slowness(row: RankRow) -> tuple[float, int, float, int]:
    return (row.split.score if row.split is not None else 1.0, row.steps, -row.last_step_s, row.rank)


def rank_columns(rows: Sequence[RankRow]) -> dict[str, list[float]]:
    """The values a larger job aggregates, one list per measure over ``rows`` (the values :func:`rank_values`
    serves per rank, and each rank's mean step): the aggregate's name after its scope (``split_seconds/wait`` for
    a part) -> values; a measure no rank has yet is left out.
    """
    splits = [row.split for row in rows if row.split is not None]
    out = {
        "steps": [float(row.steps) for row in rows],
        "step_seconds": [row.step_sum_s / row.timed for row in rows if row.timed > 0],
        "last_step_seconds": [row.last_step_s for row in rows],
        **{f"split_seconds/{part}": list(map(attrgetter(f"{part}_s"), splits)) for part in PARTS},
        "wait_ratio": [wait_ratio(split) for split in splits],
        "slow_score": [split.score for split in splits],
    }
    return {name: values for name, values in out.items() if values}


def _add_over(families: dict[str, Any], scope: str, labels: list[str], rows: Sequence[RankRow]) -> None:
    """The ranks counted and each measure's min, median and max over ``rows``, as the ``tfdevices_{scope}_*``
    series of :data:`AGGREGATES`.
    """
    families[f"tfdevices_{scope}_ranks"].add_metric(labels, len(rows))
    for name, values in rank_columns(rows).items():
        measure, _, part = name.partition("/")
        family = families[f"tfdevices_{scope}_{measure}"]
        for stat, value in zip(STATS, min_median_max(values)):
            family.add_metric([*labels, part, stat] if part else [*labels, stat], value)


def min_median_max(values: Sequence[float]) -> tuple[float, float, float]:
    """The least, the median (of an even count, the mean of the middle two) and the greatest (pure).

    >>> min_median_max([3.0, 1.0, 4.0, 1.5])
    (1.0, 2.25, 4.0)
    """
    ordered = sorted(values)
    n = len(ordered)
    middle = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return ordered[0], middle, ordered[-1]


def job_name(command: Sequence[str]) -> str:
    """The ``job`` label for a command: its script or module, without the interpreter (pure).

    >>> job_name(["python3", "-u", "train.py", "--epochs", "3"])
    'train.py'
    >>> job_name(["python", "-m", "mypackage.train"])
    'mypackage.train'
    >>> job_name(["python", "-c", "print(1)"])
    'python-c'
    >>> job_name(["/opt/bin/trainer"])
    'trainer'
    """
    words = list(command)[:64]
    if words and os.path.basename(words[0]).startswith("python"):
        rest = words[1:]
        for n, word in enumerate(rest):
            if word == "-c":
                return "python-c"
            if word == "-m" and n + 1 < len(rest):
                return rest[n + 1][:128]
            if not word.startswith("-"):
                return os.path.basename(word)[:128] or "job"
    return (os.path.basename(words[0]) if words else "")[:128] or "job"


@dataclasses.dataclass
class JobMetrics:
    """A job's registry, its collector and its server: what ``launch --metrics`` holds while the job runs.

    Args:
        address: where to serve.
        job: the ``job`` label.
        read_gpus: reads the GPUs (:func:`gpu_reader`).
        asked: how messages name the setting.

    Raises:
        LaunchError: see :class:`MetricsServer`.
    """

    address: MetricsAddress
    job: str
    read_gpus: Callable[[], Mapping[int, GpuReading]] | None = None
    asked: str = "--metrics"

    def __post_init__(self) -> None:
        self.registry = _client().CollectorRegistry(auto_describe=False)
        self.collector = JobCollector(self.job, socket.gethostname()[:128], self.read_gpus)
        self.registry.register(self.collector)
        self.server = MetricsServer(self.address, self.registry, self.asked)
        where = f"{self.server.url()}"
        if self.address.everywhere:
            say(f"metrics for Prometheus: {where} on every interface of this machine (no authentication)")
        elif self.server.host != DEFAULT_HOST:
            say(f"metrics for Prometheus: {where} (on {self.server.host}, as {self.asked} asked)")
        else:
            say(f"metrics for Prometheus: {where}")

    def close(self) -> None:
        """Closes the port."""
        self.server.close()


# --------------------------------------------------------------------------- rank 0's watch (srun, Ray Train)

_ASKED: dict[str, Any] = {"address": None, "watch": None, "metrics": None}


def serve_metrics(address: str) -> None:
    """Serves the job's metrics from rank 0's watch, where no launcher watches (``srun``, Ray Train); from Python.

    An explicit call beats ``TFDEVICES_METRICS``; call it before the strategy is built (every rank may call
    it: only rank 0's watch serves). Under ``tfdevices launch`` use ``--metrics`` instead.

    Args:
        address: ``[HOST:]PORT`` (127.0.0.1 unless another address is named).

    Raises:
        LaunchError: a bad ``[HOST:]PORT``; where rank 0's watch already runs, a port in use or an address
            that is not this machine's.

    >>> serve_metrics("no port")
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.LaunchError: serve_metrics('no port'): not [HOST:]PORT: its port 'no port' is not 1 to 5 \
digits. \
HINT: e.g. serve_metrics('9100'), or serve_metrics('10.0.0.5:9100') to serve on another of this machine's addresses.
    """
    _ASKED["address"] = _parse_call(address)
    if _ASKED["watch"] is not None and _ASKED["metrics"] is None:
        _serve_watch(_ASKED["watch"], _ASKED["address"], "serve_metrics")


def _parse_call(address: object) -> MetricsAddress:
    found = parse_host_port(
        address,
        f"serve_metrics({short_repr(address)})",
        default_host=DEFAULT_HOST,
        low=0,
        hint="e.g. serve_metrics('9100'), or serve_metrics('10.0.0.5:9100') to serve on another of this "
        "machine's addresses.",
    )
    return MetricsAddress(found.host, found.port)


def metrics_from_env(env: Mapping[str, str]) -> MetricsAddress | None:
    """``TFDEVICES_METRICS`` (``[HOST:]PORT``) as a :class:`MetricsAddress`; ``None`` when unset.

    Raises:
        EnvVarError: it is set to anything else.

    >>> metrics_from_env({"TFDEVICES_METRICS": "127.0.0.1:9100"})
    MetricsAddress(host='127.0.0.1', port=9100)
    """
    text = env.get(METRICS_ENV)
    if text is None or not text.strip():
        return None
    try:
        return parse_address(text, asked=METRICS_ENV, show=False)  # the message never shows the value
    except LaunchError as err:
        raise EnvVarError(err.message, hint=f"e.g. {METRICS_ENV}=9100; unset it to serve no metrics.") from None


def watch_metrics(watch: JobWatch, env: Mapping[str, str]) -> JobMetrics | None:
    """Serves the job's metrics from rank 0's watch (:mod:`tfdevices.jobs.rank_hooks` calls it) when
    :func:`serve_metrics` or ``TFDEVICES_METRICS`` asks; a failure is said, never raised (the job goes on).
    """
    _ASKED["watch"] = watch
    try:
        address = _ASKED["address"] or metrics_from_env(env)
    except EnvVarError as err:
        say(f"tfdevices: no metrics served: {err}")
        return None
    if address is None:
        return None
    return _serve_watch(watch, address, METRICS_ENV, env)


def _serve_watch(
    watch: JobWatch,
    address: MetricsAddress,
    asked: str,
    env: Mapping[str, str] | None = None,
) -> JobMetrics | None:
    env = os.environ if env is None else env
    try:
        metrics = JobMetrics(address, _env_job(env), gpu_reader(env), asked)
    except LaunchError as err:
        if asked == "serve_metrics":
            raise
        say(f"tfdevices: no metrics served: {err}")
        return None
    gpus = own_gpus(env)
    metrics.collector.start(Attempt(watch, {0: gpus} if gpus else {}))
    _ASKED["metrics"] = metrics
    return metrics


def _env_job(env: Mapping[str, str]) -> str:
    job = env.get("SLURM_JOB_ID", "")
    return f"slurm-{job}"[:128] if job.isascii() and job.isdigit() else "job"


def own_gpus(env: Mapping[str, str]) -> tuple[int, ...]:
    """This process's GPUs by NVML index (``TFDEVICES_RANK_GPUS``, else its ``CUDA_VISIBLE_DEVICES`` of whole
    indices); empty where they are not known.
    """
    for name in (RANK_GPUS, "CUDA_VISIBLE_DEVICES"):
        text = env.get(name, "")
        parts = [p.strip() for p in text.split(",")[:1024] if p.strip()]
        if parts and all(p.isascii() and p.isdigit() and len(p) < 6 for p in parts):
            return tuple(int(p) for p in parts)
    return ()
