"""A scrape of a large job holds: over ``EVERY_RANK_UP_TO`` ranks the collector serves the min, median and max of each
per-rank measure over the job's ranks and over each node's, and per-rank series only for the ranks kept (the slow
rank, the stalled ones, the slowest few); a job of up to that many ranks serves every rank's series as before.

The watch's look is built here (``RankRow`` by ``RankRow``, as the watch makes them), not simulated.
"""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tfdevices.jobs import metrics
from tfdevices.jobs.metrics import (
    AGGREGATES,
    EVERY_NODE_UP_TO,
    EVERY_RANK_UP_TO,
    PARTS,
    SERIES,
    SLOWEST_KEPT,
    STALLED_KEPT,
    Attempt,
    GpuReading,
    JobCollector,
    kept_ranks,
    wait_ratio,
)
from tfdevices.jobs.stall import StallPolicy
from tfdevices.jobs.straggler import RankSplit
from tfdevices.jobs.watch import JobSnapshot, JobState, JobWatch, RankRow

PER_NODE = 8
SLOWEST = (100, 230, 371, 452, 517, 666, 748, 899)  # each on a node of its own, in a job of 1,000 ranks or more
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _row(rank: int, slow: int | None = None, stalled: tuple[int, ...] = ()) -> RankRow:
    """Rank ``rank`` of a large job: parts that vary over the ranks, :data:`SLOWEST` with the lowest scores
    after the slow rank's.
    """
    k = (rank * 37) % 101  # spreads the values: no two neighbours alike
    between, compute, wait = 0.001 + k * 1e-5, 0.030 + (rank % 7) * 1e-3, 0.020 - k * 1e-4
    score = 0.2 if rank == slow else 0.5 + SLOWEST.index(rank) * 0.01 if rank in SLOWEST else 0.9 + k * 1e-3
    step = 0.004 + compute + wait
    split = RankSplit(rank, 40 + rank % 3, between, 0.0, step, 0.004, compute, wait, True, score, f"n{rank // 8}")
    return RankRow(
        rank, f"n{rank // PER_NODE}", 1000 + rank, 40 + rank % 3, "step", "in step 41", 38, 38 * step, step + k * 1e-5,
        split, rank == slow, rank in stalled,
    )  # fmt: skip


def large_job_collector(ranks: int, slow: int | None = None, stalled: tuple[int, ...] = (), **how: int) -> JobCollector:
    rows = tuple(_row(r, slow, stalled) for r in range(ranks))
    watch = JobWatch(list(range(ranks)), StallPolicy())
    watch.latest = JobSnapshot(1000.0, 9, 8, rows, None, None, JobState.RUNNING, 0)
    gpus = {i: GpuReading(i, 0.5, 1 << 30, 80 << 30, 300.0, 50.0, 1.4e9) for i in range(PER_NODE)}
    collector = JobCollector("train.py", "n0", lambda: gpus, **how)
    collector.start(Attempt(watch, {r: (r,) for r in range(PER_NODE)}, lambda: dict.fromkeys(range(PER_NODE))))
    return collector


def scraped(collector: JobCollector) -> Samples:
    """What a scrape serves, read back from Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _ranks_served(got: Samples) -> set[str]:
    return {dict(labels)["rank"] for name, labels in got if name.startswith("tfdevices_rank_")}


def _stat(got: Samples, name: str, **labels: str) -> tuple[float, ...]:
    return tuple(got[(name, tuple(sorted({**labels, "stat": stat}.items())))] for stat in ("min", "median", "max"))


def test_a_large_jobs_series_do_not_grow_with_its_ranks() -> None:
    small, large = (scraped(large_job_collector(n, slow=n - 1)) for n in (1000, 2000))
    assert len(small) == len(large) < 600  # 1,000 ranks each served one by one would be over 13,000 series
    assert {k[0] for k in small} == {k[0] for k in large}
    every_rank = scraped(large_job_collector(1000, slow=999, every_rank_up_to=10**6))
    assert len(every_rank) > 13_000 and _ranks_served(every_rank) == {str(r) for r in range(1000)}


def test_the_slow_rank_and_the_slowest_keep_their_series() -> None:
    got = scraped(large_job_collector(1000, slow=999))
    assert _ranks_served(got) == {"999", *(str(r) for r in SLOWEST[: SLOWEST_KEPT - 1])}  # the slow one is slowest
    slow = {"job": "train.py", "node": "n124", "rank": "999"}
    assert got[("tfdevices_rank_slow", tuple(sorted(slow.items())))] == 1.0
    assert got[("tfdevices_rank_slow_score", tuple(sorted(slow.items())))] == 0.2
    for series in SERIES:  # every per-rank series of the slow rank, as a small job serves it
        if series.name.startswith("tfdevices_rank_"):
            assert any(name in series.served and dict(labels).get("rank") == "999" for name, labels in got), series
    rows = [_row(r) for r in range(1000)]
    rows[500] = dataclasses.replace(rows[500], slow=True)  # named over the looks, not among the slowest in this one
    assert kept_ranks(rows) == {500, *SLOWEST}
    gpu = {"job": "train.py", "node": "n0", "rank": "3", "gpu": "3"}  # node 0's own GPUs, as before
    assert got[("hw_gpu_utilization", tuple(sorted(gpu.items())))] == 0.5


def test_stalled_ranks_keep_their_series_up_to_a_bound() -> None:
    got = scraped(large_job_collector(1000, stalled=(5, 6, 7)))
    assert {"5", "6", "7"} <= _ranks_served(got)
    assert got[("tfdevices_rank_stalled", (("job", "train.py"), ("node", "n0"), ("rank", "6")))] == 1.0
    many = tuple(range(0, 1000, 2))
    assert kept_ranks([_row(r, stalled=many) for r in range(1000)]) >= set(many[:STALLED_KEPT])
    assert len(kept_ranks([_row(r, stalled=many) for r in range(1000)])) <= STALLED_KEPT + SLOWEST_KEPT


def test_the_aggregates_are_the_min_median_and_max_of_the_rows() -> None:
    rows = [_row(r, slow=999) for r in range(1000)]
    splits = [r.split for r in rows if r.split is not None]
    assert len(splits) == 1000
    got = scraped(large_job_collector(1000, slow=999))
    job = {"job": "train.py", "node": "n0"}
    want = {
        "tfdevices_job_steps": [float(r.steps) for r in rows],
        "tfdevices_job_step_seconds": [r.step_sum_s / r.timed for r in rows],
        "tfdevices_job_last_step_seconds": [r.last_step_s for r in rows],
        "tfdevices_job_wait_ratio": [wait_ratio(split) for split in splits],
        "tfdevices_job_slow_score": [split.score for split in splits],
    }
    for part in PARTS:
        values = [split.component(part) for split in splits]
        assert _stat(got, "tfdevices_job_split_seconds", part=part, **job) == pytest.approx(
            (min(values), statistics.median(values), max(values))
        ), part
    for name, values in want.items():
        assert _stat(got, name, **job) == pytest.approx((min(values), statistics.median(values), max(values))), name
    assert got[("tfdevices_job_ranks", tuple(sorted(job.items())))] == 1000.0
    scores = [split.score for split in splits if split.node == "n124"]  # the slow rank's node: ranks 992 to 999
    assert _stat(got, "tfdevices_node_slow_score", job="train.py", node="n124") == (
        min(scores),
        statistics.median(scores),
        max(scores),
    )
    assert got[("tfdevices_node_ranks", (("job", "train.py"), ("node", "n124")))] == 8.0


def test_each_nodes_aggregates_up_to_the_bound_of_nodes_then_the_kept_ranks_nodes() -> None:
    ranks = EVERY_NODE_UP_TO * PER_NODE
    nodes = {
        dict(labels)["node"] for name, labels in scraped(large_job_collector(ranks)) if name == "tfdevices_node_ranks"
    }
    assert nodes == {f"n{k}" for k in range(EVERY_NODE_UP_TO)}
    got = scraped(large_job_collector(1000, slow=999))
    nodes = {dict(labels)["node"] for name, labels in got if name == "tfdevices_node_ranks"}
    assert nodes == {"n124", *(f"n{r // PER_NODE}" for r in SLOWEST[: SLOWEST_KEPT - 1])}


@pytest.mark.parametrize("ranks", [2, EVERY_RANK_UP_TO])
def test_a_job_up_to_the_bound_serves_every_rank_and_no_aggregate(ranks: int) -> None:
    collector = large_job_collector(ranks, slow=ranks - 1)
    got = scraped(collector)
    want = set()
    for series in SERIES:  # each rank's every series, as SERIES lists them
        if series.labels[:3] != ("job", "node", "rank") or series.name == "tfdevices_worker_exit_status":
            continue
        for rank in range(ranks):
            labels = {"job": "train.py", "node": f"n{rank // PER_NODE}", "rank": str(rank)}
            for name in series.served:
                if "part" in series.labels:
                    want |= {(name, tuple(sorted({**labels, "part": part}.items()))) for part in PARTS}
                elif "gpu" not in series.labels:
                    want.add((name, tuple(sorted(labels.items()))))
    assert {key for key in got if key[0].startswith("tfdevices_rank_")} == want
    assert len(want) == 13 * ranks
    assert got == scraped(large_job_collector(ranks, slow=ranks - 1, every_rank_up_to=10**6))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert not [s.name for s in AGGREGATES if s.name in text] and "stat=" not in text  # not even their HELP lines
    assert metrics.JobCollector("j", "n").every_rank_up_to == EVERY_RANK_UP_TO == 64
    one_more = scraped(large_job_collector(ranks + 1, slow=ranks))
    assert (ranks < EVERY_RANK_UP_TO) is (
        ("tfdevices_job_ranks", (("job", "train.py"), ("node", "n0"))) not in one_more
    )
