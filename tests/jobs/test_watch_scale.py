"""What keeps the watch bounded as a job grows: its history and timeline thinned evenly over the job, ``job.json``
holding only this machine's ranks, the picture of a large job drawing its slowest ranks and the others' spread.
TensorFlow-free and without processes.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tfdevices.jobs import watch as watch_module
from tfdevices.jobs.end_files import DRAWN_RANKS, SLOWEST, _drawn, draw_ranks, ranks_data, write_steps
from tfdevices.jobs.progress import RING, RankProgress, StepTimes, Totals
from tfdevices.jobs.stall import StallPolicy
from tfdevices.jobs.watch import JobWatch, read_snapshot_row, write_snapshot
from tfdevices.jobs.watch_loop import WatchLoop, WatchPlace

MS = 1e-3


def _record(rank: int, steps: int, at: float, between_ms: float = 1.0, phase: str = "step") -> RankProgress:
    recent = (StepTimes(between_ms * MS, 0.0, 10 * MS),) * RING
    return RankProgress(rank, 1000 + rank, steps, steps - 1, phase, "", at, 10 * MS, recent, steps, Totals(0, 0, 0))


def _run(watch: JobWatch, ranks: int, looks: int, slow: int | None = None) -> None:
    """``looks`` looks a second apart, each rank a step further at each (rank ``slow`` 40 ms between steps)."""
    for look in range(1, looks + 1):
        records = [_record(r, 20 + look, 100.0 + look, 41.0 if r == slow else 1.0) for r in range(ranks)]
        watch.poll(records)


def _watch(ranks: int, now: list[float]) -> JobWatch:
    return JobWatch(range(ranks), StallPolicy(window_s=60), clock=lambda: now[0])


def test_the_history_is_thinned_evenly_over_the_job_and_its_medians_still_name_the_slow_rank(monkeypatch):
    monkeypatch.setattr(watch_module, "HISTORY_SPLITS", 64 * 16)  # 16 looks of 64 ranks
    now = [100.0]
    watch = _watch(64, now)
    for look in range(1, 201):
        now[0] = 100.0 + look
        watch.poll([_record(r, 20 + look, now[0], 41.0 if r == 63 else 1.0) for r in range(64)])
    summary = watch.summary()
    times = [when for when, _ in summary.history]
    assert len(summary.history) * 64 <= 64 * 16 and summary.every > 1
    assert times[0] == 101.0 and times[-1] >= 200.0 - summary.every  # from the first look to near the last
    assert len({round(b - a, 6) for a, b in zip(times, times[1:])}) == 1  # evenly spaced
    assert watch.latest.looks == 200  # the looks counted, not those kept
    assert summary.slow is not None and summary.slow.rank == 63
    assert f"one in {summary.every:,} of the job's kept" in summary.lines()[0]


def test_a_short_small_job_keeps_every_look():
    now = [100.0]
    watch = _watch(4, now)
    for look in range(1, 31):
        now[0] = 100.0 + look
        watch.poll([_record(r, 20 + look, now[0]) for r in range(4)])
    summary = watch.summary()
    assert (len(summary.history), summary.every, watch.latest.looks) == (30, 1, 30)
    assert "kept" not in summary.lines()[0]


def test_the_timeline_is_thinned_over_the_whole_job_and_steps_json_says_which_steps_it_kept(monkeypatch, tmp_path):
    monkeypatch.setattr(watch_module, "TIMELINE_ENTRIES", 1000)
    now = [100.0]
    watch = _watch(32, now)
    for look in range(1, 201):
        now[0] = 100.0 + look
        watch.poll([_record(r, look, now[0], phase="step" if look < 200 else "done") for r in range(32)])
    every = watch.timeline_every
    assert len(watch.timeline) <= 1000 and every > 1
    begun = {(rank, steps) for _, rank, steps, _ in watch.timeline}
    assert all((rank, every) in begun and (rank, 200) in begun for rank in range(32))  # the start and the end
    assert all(steps % every == 0 or phase == "done" for _, _, steps, phase in watch.timeline)
    data = json.loads(open(write_steps(watch.timeline, str(tmp_path), 200, every=every)).read())
    assert data["steps_kept_every"] == every and set(data["ranks"]) == {str(r) for r in range(32)}


def test_job_json_holds_only_the_ranks_asked_for(tmp_path):
    now = [100.0]
    watch = _watch(16, now)
    _run(watch, 16, 3)
    write_snapshot(watch.latest, str(tmp_path), frozenset({0, 1, 2}))
    data = json.loads((tmp_path / "job.json").read_text())
    assert [row["rank"] for row in data["ranks"]] == [0, 1, 2]
    row = read_snapshot_row(str(tmp_path), 2)
    assert row == watch.latest.rows[2]  # read back whole, its split too
    assert read_snapshot_row(str(tmp_path), 3) is None


class _OtherMachines:
    """The records' channel as the watch loop uses it: the other machines' ranks 8 to 15."""

    ranks = frozenset(range(8, 16))

    def records(self, local):
        return [_record(r, 30, time.time()) for r in range(8, 16)]

    def unheard(self, local):
        return []


def test_the_watch_loop_leaves_only_this_machines_ranks_in_job_json(tmp_path):
    from tfdevices.jobs.progress import ProgressWriter

    writers = [ProgressWriter(str(tmp_path), rank) for rank in range(8)]
    for writer in writers:
        writer.begin_step()
    loop = WatchLoop(WatchPlace(str(tmp_path), str(tmp_path)), StallPolicy(window_s=60), range(16), _OtherMachines())
    loop.look(speak=False)
    data = json.loads((tmp_path / "job.json").read_text())
    assert len(loop.watch.latest.rows) == 16  # the watch saw every rank
    assert sorted(row["rank"] for row in data["ranks"]) == list(range(8))


def _ranks_json(ranks: int, slow: int, looks: int = 3) -> dict:
    now = [100.0]
    watch = _watch(ranks, now)
    for look in range(1, looks + 1):
        now[0] = 100.0 + look
        watch.poll([_record(r, 20 + look, now[0], 41.0 if r == slow else 1.0 + r % 7) for r in range(ranks)])
    return ranks_data(watch.summary())


def test_a_large_jobs_picture_draws_its_slowest_ranks_and_the_others_median_and_range():
    data = _ranks_json(200, slow=150)
    bars, lines = _drawn(data)
    drawn = [b["rank"] for b in bars]
    assert len(drawn) == SLOWEST + 1 and 150 in drawn and drawn[-1] == f"the other {200 - SLOWEST:,}"
    others = [r for r in data["ranks"] if r["rank"] not in drawn[:-1]]
    totals = sorted(sum(r[f"{p}_ms"] for p in ("between", "callback", "input", "compute", "wait")) for r in others)
    assert bars[-1]["range"] == (totals[0], totals[-1])
    between = sorted(r["between_ms"] for r in others)
    assert bars[-1]["between_ms"] == pytest.approx((between[94] + between[95]) / 2)  # the others' median
    assert "median" in lines and len(lines) <= 4


def test_a_small_jobs_picture_draws_every_rank():
    data = _ranks_json(DRAWN_RANKS, slow=3)
    bars, lines = _drawn(data)
    assert [b["rank"] for b in bars] == list(range(DRAWN_RANKS)) and set(lines) == set(data["over_time"])


def test_a_large_jobs_picture_is_drawn(tmp_path):
    path = draw_ranks(_ranks_json(300, slow=7), str(tmp_path / "steps.png"))
    assert path is not None and os.path.getsize(path) > 0


def test_a_stall_of_many_ranks_shows_the_frames_of_16_and_counts_the_others():
    from tfdevices.jobs.watch import _frame_lines

    class _Stall:
        def __init__(self) -> None:
            self.records = [_record(r, 21, 100.0) for r in range(40)]
            self.missing = tuple(range(40))

    lines = _frame_lines(_Stall(), {r: [f"frame of {r}"] for r in range(40)}, "")
    assert sum("'s stack" in line for line in lines) == 16 and "frame of 15" in lines[-2]
    assert lines[-1] == "  and 24 more stuck ranks' stacks, not shown"


def test_a_large_jobs_summary_prints_its_slowest_ranks_and_the_spread_not_a_row_per_rank():
    now = [100.0]
    watch = _watch(100, now)
    for look in range(1, 6):
        now[0] = 100.0 + look
        watch.poll([_record(r, 20 + look, now[0], 41.0 if r == 57 else 1.0) for r in range(100)])
    lines = watch.summary().lines()
    spread = next(i for i, line in enumerate(lines) if line.startswith("90 more ranks; each column over all 100"))
    rows = [line.split()[0] for line in lines[2:spread]]
    assert len(lines) < 30 and len(rows) == 10 and rows[0] == "57"  # the slowest first
    assert [line.split()[0] for line in lines[spread + 1 : spread + 5]] == ["min", "median", "p90", "max"]
