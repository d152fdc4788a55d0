"""The slow rank: the rank the others wait for, named from each rank's split of its steps, with the reason;
no name for a balanced job, ranks slow together, a chief-only checkpoint, the first (compiled) steps, a
job shorter than the window, or a job bound by its link. Progress records keep each step's split and the
waits read; the watch measures waits over the steps every rank read alike."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.helpers import REPO, subprocess_env
from tfdevices.core.errors import EnvVarError
from tfdevices.jobs.progress import (
    RING,
    WARMUP_STEPS,
    ProgressWriter,
    RankProgress,
    StepTimes,
    Totals,
    Waits,
    read_records,
)
from tfdevices.jobs.stall import StallPolicy
from tfdevices.jobs.straggler import (
    RankSplit,
    SlowRankPolicy,
    WaitShare,
    find_slow_rank,
    link_bound,
    median_splits,
    policy_from_env,
    rank_table,
    ranks_text,
    split_ranks,
    wait_shares,
)
from tfdevices.jobs.watch import JobState, JobWatch

MS = 1e-3


def _rec(
    rank: int,
    between: float,
    step: float,
    *,
    steps: int = 40,
    sample: tuple | None = None,
    extra=(),
    phase="step",
    callback: float = 0.0,
    node: str = "",
) -> RankProgress:
    """A rank's record whose ring holds 16 steps of (between, callback, step) ms, then ``extra`` steps; ``sample``:
    (step ms, wait ms, input ms) of its measured steps.
    """
    recent = tuple(
        [StepTimes(between * MS, callback * MS, step * MS)] * (RING - len(extra))
        + [StepTimes(b * MS, 0.0, s * MS) for b, s in extra]
    )
    waits = None if sample is None else Waits(32, sample[0] * MS, sample[1] * MS, sample[2] * MS, 0.001)
    return RankProgress(
        rank, 1000 + rank, steps, steps, phase, "", 100.0, step * MS, recent, steps - 2, Totals(0, 0, 0), waits, node
    )


def _shares(records: list[RankProgress]) -> dict[int, WaitShare] | None:
    """Each rank's measured shares from its one reading (over its steps since the first)."""
    if not all(r.waits is not None for r in records):
        return None
    return {r.rank: WaitShare(r.waits.wait_s / r.waits.step_s, r.waits.input_s / r.waits.step_s) for r in records}


def _named(records: list[RankProgress]):
    return find_slow_rank(split_ranks(records, 8, _shares(records)))


# --------------------------------------------------------------------------- the detector (pure)


@pytest.mark.parametrize(
    "records, want",
    [
        # balanced: the same split everywhere
        ([_rec(0, 1, 10), _rec(1, 1.2, 9.8)], None),
        (
            [_rec(0, 1, 10, sample=(10, 2, 0)), _rec(1, 1, 10, sample=(10, 2.5, 0))],
            None,
        ),
        # every rank slowed together (each sleeps 40 ms between steps): no one to name
        ([_rec(0, 41, 4), _rec(1, 40, 4), _rec(2, 40.5, 4)], None),
        # a chief-only checkpoint once an epoch: the chief is in a callback (not "between"); the other's
        # step that waited for it is one step of the ring
        ([_rec(0, 1, 10), _rec(1, 1, 10, extra=[(1, 1500)])], None),
        # rank 1 slow between steps (sleeps 50 ms): named without any measured wait
        ([_rec(0, 1, 55), _rec(1, 51, 5)], (1, "between")),
        # rank 1's fit callback takes 40 ms each batch
        ([_rec(0, 1, 45), _rec(1, 1, 5, callback=40)], (1, "callback")),
        ([_rec(0, 1, 55), _rec(1, 1, 55), _rec(2, 51, 5)], (2, "between")),
        # rank 1's step computes 40 ms before the all-reduce, rank 0's 4 ms: only measured waits tell
        ([_rec(0, 1, 42), _rec(1, 1, 42)], None),
        (
            [_rec(0, 1, 42, sample=(42, 38, 0)), _rec(1, 1, 42, sample=(42, 2, 0))],
            (1, "compute"),
        ),
        # the step waits for its input inside (fit reads its batch there): rank 0's input takes 30 ms
        (
            [_rec(0, 1, 40, sample=(40, 2, 30)), _rec(1, 1, 40, sample=(40, 31, 1))],
            (0, "input"),
        ),
        # every rank waits most of its step alike: the link, not a rank
        (
            [_rec(0, 1, 40, sample=(40, 35, 0)), _rec(1, 1, 40, sample=(40, 34, 0))],
            None,
        ),
        # a 10% imbalance is inside the margin (a fifth of the step)
        ([_rec(0, 1, 11), _rec(1, 2, 10)], None),
    ],
)
def test_the_slow_rank_is_the_one_the_others_wait_for(records, want) -> None:
    slow = _named(records)
    assert (None if slow is None else (slow.rank, slow.component)) == want


def test_nothing_is_named_before_every_rank_timed_enough_steps() -> None:
    young = RankProgress(1, 1, 5, 5, "step", "", 1.0, 0.005, (StepTimes(0.05, 0.0, 0.005),) * 3, 3)
    assert split_ranks([_rec(0, 1, 55), young], 8) == ()


@pytest.mark.parametrize(
    "records, line",
    [
        (
            [_rec(0, 1, 55), _rec(1, 51, 5)],
            (
                "rank 1 is the slow one: rank 0 waits 50 ms of each 55 ms step for it in the all-reduce; "
                "rank 1 spends 51 ms between steps (its input pipeline or its own code)"
            ),
        ),
        (
            [_rec(0, 1, 44, sample=(44, 36, 0)), _rec(1, 1, 44, sample=(44, 0, 0))],
            (
                "rank 1 is the slow one: rank 0 waits 36 ms of each 44 ms step for it in the all-reduce; "
                "rank 1's step takes 44 ms before the all-reduce, rank 0's 8.0 ms "
                "(its device is slower or busier: see `tfdevices list`)"
            ),
        ),
        (
            [
                _rec(0, 1, 40, sample=(40, 2, 30)),
                _rec(1, 1, 40, sample=(40, 31, 1)),
                _rec(2, 1, 40, sample=(40, 31, 1)),
            ],
            (
                "rank 0 is the slow one: ranks 1, 2 wait 31 ms of each 40 ms step for it in the all-reduce; "
                "rank 0's step waits 30 ms for its input, the others' 1.0 ms "
                "(its input pipeline, read inside its step)"
            ),
        ),
        (  # a job over two machines: the slow rank's node is named
            [_rec(0, 1, 55, node="gpu01"), _rec(1, 51, 5, node="gpu07")],
            (
                "rank 1 on node gpu07 is the slow one: rank 0 waits 50 ms of each 55 ms step for it in the "
                "all-reduce; rank 1 spends 51 ms between steps (its input pipeline or its own code)"
            ),
        ),
    ],
)
def test_the_reason_is_in_the_users_words_and_numbers(records, line) -> None:
    assert _named(records).reason() == line


def test_scores_are_the_best_ranks_work_over_each_ranks() -> None:
    splits = split_ranks([_rec(0, 1, 55), _rec(1, 51, 5), _rec(2, 26, 30)], 8)
    assert [(s.rank, s.score) for s in splits] == [
        (0, 1.0),
        (1, round(6 / 56, 3)),
        (2, round(6 / 31, 3)),
    ]
    assert [round(s.wait_s * 1e3) for s in splits] == [
        50,
        0,
        25,
    ]  # inferred: the slowest's between, less one's own


def test_a_link_bound_job_is_told_apart() -> None:
    bound = [_rec(0, 1, 40, sample=(40, 35, 0)), _rec(1, 1, 40, sample=(40, 34, 0))]
    free = [_rec(0, 1, 40, sample=(40, 5, 0)), _rec(1, 1, 40, sample=(40, 4, 0))]
    inferred = [_rec(0, 1, 40), _rec(1, 1, 40)]
    assert [link_bound(split_ranks(r, 8, _shares(r))) for r in (bound, free, inferred)] == [True, False, False]


def test_the_table_and_the_medians_over_the_job() -> None:
    a = split_ranks([_rec(0, 1, 55), _rec(1, 51, 5)], 8)
    b = split_ranks([_rec(0, 3, 55), _rec(1, 53, 5)], 8)
    c = split_ranks([_rec(0, 2, 55), _rec(1, 52, 5)], 8)
    merged = median_splits([a, b, c])
    assert [round(s.between_s * 1e3) for s in merged] == [2, 52]
    assert rank_table(merged)[2].split() == ["1", "52.0", "0.0", "0.0", "5.0", "0.0", "0.12", "40"]
    nodes = split_ranks([_rec(0, 1, 55, node="a"), _rec(1, 51, 5, node="b")], 8)
    assert rank_table(nodes)[0].split()[-1] == "node" and rank_table(nodes)[2].split()[-1] == "b"


@pytest.mark.parametrize(
    "env, on",
    [
        ({}, True),
        ({"TFDEVICES_SLOW_RANK": "0"}, False),
        ({"TFDEVICES_SLOW_RANK": "on"}, True),
    ],
)
def test_the_switch_from_the_environment(env, on) -> None:
    assert policy_from_env(env).enabled is on


def test_a_bad_switch_is_refused() -> None:
    with pytest.raises(EnvVarError, match="^TFDEVICES_SLOW_RANK is set to something other than 1, on, 0 or off"):
        policy_from_env({"TFDEVICES_SLOW_RANK": "maybe"})


# --------------------------------------------------------------------------- many ranks: counted, not listed


@pytest.mark.parametrize(
    "ranks, text",
    [
        ([1], "rank 1"),
        ([1, 3], "ranks 1, 3"),
        (list(range(8)), "ranks 0, 1, 2, 3, 4, 5, 6, 7"),  # up to 8: listed, as on a machine of 8
        (list(range(9)), "9 ranks (0-8)"),
        (list(range(4095)), "4,095 ranks (0-4094)"),
        ([0, 1, 2, 5, 7, 8, 9, 20, 30], "9 ranks (0-2, 5, 7-9, 20 and 1 more)"),
        (list(range(0, 8192, 2)), "4,096 ranks (0, 2, 4, 6 and 4,092 more)"),
    ],
)
def test_a_long_list_of_ranks_is_counted_with_its_first_runs(ranks, text) -> None:
    assert ranks_text(ranks) == text


def test_a_list_of_ranks_stays_short_whatever_the_ranks() -> None:
    for seed in range(20):
        ranks = sorted(random.Random(seed).sample(range(100_000), 50_000))
        text = ranks_text(ranks)
        assert len(text) <= 80 and text.startswith("50,000 ranks (")


def _job_of_4096(slow_between: float = 601) -> tuple:
    """4,096 ranks on 512 nodes of 8; rank 4095 on node511 spends ``slow_between`` ms between steps."""
    records = [_rec(r, 1, 1400, node=f"node{r // 8}") for r in range(4095)]
    return split_ranks([*records, _rec(4095, slow_between, 800, node="node511")], 8)


def test_the_slow_rank_of_4096_is_named_with_its_node_and_the_others_counted() -> None:
    line = find_slow_rank(_job_of_4096()).reason()
    assert line == (
        "rank 4095 on node node511 is the slow one: the other 4,095 ranks wait 600 ms of each 1400 ms step for it "
        "in the all-reduce; rank 4095 spends 601 ms between steps (its input pipeline or its own code)"
    )


def test_a_slow_rank_among_9_lists_the_8_others_and_among_10_counts_them() -> None:
    nine = find_slow_rank(split_ranks([*(_rec(r, 1, 55) for r in range(8)), _rec(8, 51, 5)], 8)).reason()
    assert nine.startswith("rank 8 is the slow one: ranks 0, 1, 2, 3, 4, 5, 6, 7 wait 50 ms of each 55 ms step")
    ten = find_slow_rank(split_ranks([*(_rec(r, 1, 55) for r in range(9)), _rec(9, 51, 5)], 8)).reason()
    assert ten.startswith("rank 9 is the slow one: the other 9 ranks wait 50 ms of each 55 ms step")


def test_the_table_of_4096_ranks_is_cut_to_the_slowest_and_each_columns_spread() -> None:
    splits = list(_job_of_4096())
    splits[7] = dataclasses.replace(splits[7], between_s=0.3)  # the second slowest
    splits[100] = dataclasses.replace(splits[100], between_s=0.0)  # the least own work: asked for by name
    table = rank_table(splits, most=16, named=[100])
    assert len(table) == 1 + 10 + 1 + 4 + 1
    assert table[0].split() == ["rank", "between", "callback", "input", "compute", "wait", "score", "steps", "node"]
    rows = [line.split() for line in table[1:11]]
    assert [row[0] for row in rows[:2]] == ["4095", "7"] and rows[0][-1] == "node511"
    assert [row[0] for row in rows].count("100") == 1 and rows[-1][0] == "100"  # named, though the fastest
    assert table[11] == "4,086 more ranks; each column over all 4,096 (min, median, 90th percentile, max):"
    spread = {line.split()[0]: line.split() for line in table[12:16]}
    assert [spread[k][1] for k in ("min", "median", "p90", "max")] == ["0.0", "1.0", "1.0", "601.0"]
    assert [spread[k][5] for k in ("min", "median", "p90", "max")] == ["0.0", "600.0", "600.0", "600.0"]
    assert "ranks.json" in table[16] and "read_ranks(log_dir).table()" in table[16]
    assert max(len(line) for line in table) <= 120
    assert len(rank_table(splits)) == 4097  # the full table (ranks.json's)


def test_the_table_of_a_small_job_is_whole_whatever_the_cut() -> None:
    splits = split_ranks([_rec(r, 1, 55, node=f"n{r}") for r in range(15)] + [_rec(15, 51, 5, node="n15")], 8)
    assert rank_table(splits, most=16, named=[15]) == rank_table(splits)
    assert len(rank_table(splits)) == 17


# --------------------------------------------------------------------------- waits over the steps every rank read


def _waits(step: int, step_ms: float, wait_ms: float) -> Waits:
    return Waits(step, step * step_ms * MS, step * wait_ms * MS, 0.0, 0.0)


def test_waits_are_measured_over_the_latest_steps_every_rank_read_after() -> None:
    # rank 0 reads after every 16 steps, rank 1 after every 32: steps 32 and 64 are both's
    fast = {n: _waits(n, 42, 38) for n in (16, 32, 48, 64, 80)}
    slow = {n: _waits(n, 42, 2) for n in (32, 64)}
    shares = wait_shares({0: fast, 1: slow})
    assert {r: round(s.wait, 3) for r, s in shares.items()} == {0: round(38 / 42, 3), 1: round(2 / 42, 3)}
    assert wait_shares({0: fast, 1: {32: slow[32]}}) == {}  # one reading in common: no window yet
    assert wait_shares({}) == {}


def test_the_window_is_the_latest_readings_16_steps_apart() -> None:
    # the waits change at step 64: the window (48 to 64 at the least 16 steps) sees the new ones only
    before = {n: _waits(n, 40, 2) for n in range(8, 65, 8)}
    after = {**before, 72: Waits(72, before[64].step_s + 8 * 0.04, before[64].wait_s + 8 * 0.03, 0.0, 0.0)}
    (share,) = wait_shares({0: after}).values()
    assert share.wait == pytest.approx((16 * 0.002 / 2 + 8 * 0.03) / (16 * 0.04), rel=1e-6)


# --------------------------------------------------------------------------- the watch: once, on change, at the end


def _looks(watch: JobWatch, boards: list[list[RankProgress]], start: int = 0) -> list[str]:
    """Each board a look later, every rank a step further; returns the lines said."""
    said = []
    for n, board in enumerate(boards, start):
        moved = [dataclasses.replace(r, done=r.done + n, started=r.started + n) for r in board]
        said += watch.poll(moved).said
    return said


def _watch(policy: SlowRankPolicy | None = None) -> JobWatch:
    return JobWatch([0, 1], StallPolicy(slow_rank=policy or SlowRankPolicy()), clock=lambda: 100.0)


def test_the_watch_names_a_persistent_slow_rank_once_and_says_when_it_ends() -> None:
    watch = _watch()
    slow, even = [_rec(0, 1, 55), _rec(1, 51, 5)], [_rec(0, 1, 10), _rec(1, 1, 10)]
    assert _looks(watch, [slow] * 2) == []  # fewer looks than the window
    said = _looks(watch, [slow] * 5 + [even] * 4, start=2)
    assert [line.split(":")[1].strip() for line in said] == [
        "rank 1 is the slow one",
        "rank 1 is no longer the slow one",
    ]
    assert said[0].startswith("tfdevices: rank 1 is the slow one: rank 0 waits 50 ms")
    assert watch.latest is not None and watch.latest.state is JobState.RUNNING and watch.latest.looks == 11


def test_a_snapshot_holds_every_view_of_one_look() -> None:
    watch = _watch()
    _looks(watch, [[_rec(0, 1, 55), _rec(1, 51, 5)]] * 3)
    snapshot = watch.latest
    assert snapshot.state is JobState.SLOW_RANK and snapshot.slow.rank == 1 and snapshot.stall is None
    assert [(row.rank, row.slow, row.stalled, row.split.rank) for row in snapshot.rows] == [
        (0, False, False, 0),
        (1, True, False, 1),
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.state = JobState.RUNNING  # type: ignore[misc]


def test_a_short_job_or_a_watch_turned_off_says_nothing() -> None:
    off = _watch(SlowRankPolicy(enabled=False))
    assert _looks(off, [[_rec(0, 1, 55), _rec(1, 51, 5)]] * 10) == [] and off.summary().lines() == []
    short = _watch()
    assert _looks(short, [[_rec(0, 1, 55), _rec(1, 51, 5)]] * 2) == []
    # never named while it ran: its end says what the medians show, and why it named nobody
    assert short.summary().lines()[0] == "each rank's step, ms (median of 2 looks; no waits measured: wait inferred):"
    assert short.summary().lines()[-1] == (
        "no slow rank named: rank 1 looks slow over the job's steps (its input pipeline or its own code), "
        "but was not in 3 looks in a row while it ran: too few looks to tell"
    )
    one = _watch()
    _looks(one, [[_rec(0, 1, 10), _rec(1, 1, 10)]])
    assert one.summary().lines()[0].startswith("each rank's step, ms (median of 1 look;")


def test_the_watch_measures_waits_once_every_rank_read_them_over_the_same_steps() -> None:
    """Rank 0 reads every 16 steps, rank 1 every 32: from their second common reading the wait is measured."""
    watch = _watch()
    said = []
    for n, last in enumerate(range(16, 113, 16)):
        board = [
            dataclasses.replace(_rec(0, 1, 42, steps=40 + n), waits=_waits(last, 42, 38)),
            dataclasses.replace(
                _rec(1, 1, 42, steps=40 + n), waits=_waits(last - last % 32, 42, 2) if last >= 32 else None
            ),
        ]
        said += watch.poll(board).said
    assert [all(s.measured for s in splits) for _, splits in watch._slow.history] == [False] * 3 + [True] * 4
    assert len(said) == 1 and "rank 1's step takes 40 ms before the all-reduce, rank 0's 4.0 ms" in said[0]
    assert watch.summary().lines()[-2].startswith("over the job, rank 1 is the slow one: rank 0 waits 38 ms")


def test_looks_without_new_steps_do_not_count() -> None:
    watch = _watch()
    board = [_rec(0, 1, 55), _rec(1, 51, 5)]
    said = []
    for _ in range(6):
        said += watch.poll(board).said  # the same steps: nobody moved
    assert said == [] and watch.latest.looks == 1


def test_the_settings_are_read_at_each_look() -> None:
    asked = [StallPolicy()]
    watch = JobWatch([0, 1], lambda: asked[0], clock=lambda: 100.0)
    _looks(watch, [[_rec(0, 1, 55), _rec(1, 51, 5)]] * 2)
    asked[0] = StallPolicy(slow_rank=SlowRankPolicy(enabled=False))  # a program turns the report off
    assert _looks(watch, [[_rec(0, 1, 55), _rec(1, 51, 5)]] * 3, start=2) == []


# --------------------------------------------------------------------------- the record keeps each step's split


def test_the_record_keeps_the_latest_steps_split_and_leaves_callbacks_and_compilation_out(
    tmp_path,
) -> None:
    now = [0.0]
    writer = ProgressWriter(str(tmp_path), 1, clock=lambda: now[0])

    def step(between: float, seconds: float, callback: float = 0.0) -> None:
        now[0] += between
        if callback:
            writer.enter("callback", "ModelCheckpoint.on_epoch_end")
            now[0] += callback
            writer.enter("between")
        writer.begin_step()
        now[0] += seconds
        writer.end_step()

    step(0.0, 5.0)  # the first step compiles: not timed
    for n in range(RING + 3):
        step(0.01 * (n + 1), 0.1)
    step(0.02, 0.1, callback=2.0)  # a named callback's time is not "between"
    (record,) = read_records(str(tmp_path))
    assert record.timed == RING + 4 - (WARMUP_STEPS - 1)
    assert len(record.recent) == RING and record.recent[-1] == pytest.approx((0.02, 2.0, 0.1))
    assert record.recent[-2] == pytest.approx((0.01 * (RING + 3), 0.0, 0.1))  # oldest first, the ring wrapped
    assert record.totals.callback_s == pytest.approx(2.0) and record.waits is None
    assert writer.steps_s == pytest.approx(5.0 + (RING + 4) * 0.1)
    writer.record_waits(32, 3.2, 0.06, 0.01, 0.002)
    assert read_records(str(tmp_path))[0].waits == pytest.approx((32, 3.2, 0.06, 0.01, 0.002))


def test_a_step_ended_late_is_not_timed_as_between(tmp_path) -> None:
    now = [0.0]
    writer = ProgressWriter(str(tmp_path), 0, clock=lambda: now[0])
    for _ in range(4):
        writer.begin_step()
        now[0] += 1.0
        writer.end_step()
    writer.begin_step()
    now[0] += 1.0
    writer.begin_step()  # Keras 3 ran the batch's end on another thread: step 5 ends after 6 began
    writer.end_step(step=5)
    now[0] += 1.0
    writer.end_step()
    assert read_records(str(tmp_path))[0].recent[-1] == (0.0, 0.0, 1.0)


def test_a_split_knows_its_parts() -> None:
    split = RankSplit(0, 10, 0.01, 0.005, 0.05, 0.02, 0.01, 0.02, True)
    assert (split.work_s, split.component("wait")) == (pytest.approx(0.045), 0.02)


# --------------------------------------------------------------------------- real jobs under tfdevices launch

SCRIPT = os.path.join(REPO, "tests", "scripts", "slow_rank.py")
LIVE = "[launcher] tfdevices: rank 1 is the slow one: rank 0 waits "


#: Seconds a job that must be named while it runs lasts at least: the launcher's 3 looks in a row (about a
#: second apart) after the first timed steps and waits read, on a machine whose steps are fast as on a slow one.
LIVE_MIN_S = 10


def _launch(
    mode: str,
    kind: str,
    ranks: str,
    steps: int,
    *args: str,
    env: dict[str, str] | None = None,
    min_s: float = 0,
) -> str:
    sync = tempfile.mkdtemp(prefix="slow-rank-")  # where rank 0 names the last step (min_s)
    length = {"SLOW_RANK_MIN_S": str(min_s), "SLOW_RANK_SYNC": sync} if min_s else {}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tfdevices", "launch", "-n", "2", *args, "--", sys.executable, SCRIPT, mode, kind]
            + [ranks, str(steps)],
            env=subprocess_env({**(env or {}), **length}),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(sync, ignore_errors=True)
    out = proc.stdout + proc.stderr  # the launcher writes nothing to its stderr of its own
    assert proc.returncode == 0 and "[0] rank 0 done" in out and "[1] rank 1 done" in out, out[-3000:]
    return out


def _live_line(out: str) -> str:
    """The slow-rank line said while the job ran: before either rank ended."""
    lines = out.splitlines()
    named = [n for n, line in enumerate(lines) if line.startswith(LIVE)]
    assert named, out[-3000:]
    ends = [n for n, line in enumerate(lines) if line in ("[0] rank 0 done", "[1] rank 1 done")]
    assert named[0] < min(ends), out[-3000:]
    assert len(named) == 1, out[-3000:]  # said once: it did not change
    return lines[named[0]]


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
@pytest.mark.parametrize(
    "mode, reason",
    [
        ("loop", r"rank 1 spends \d+ ms between steps \(its input pipeline or its own code\)$"),
        (
            "fit",
            r"rank 1 spends \d+ ms between steps in fit's callbacks, rank 0's [\d.]+ ms \(its fit callbacks' code\)$",
        ),
        (  # tf_keras' fit (Ray Train's workers set TF_USE_LEGACY_KERAS=1)
            "fit-tf_keras",
            r"rank 1 spends \d+ ms between steps in fit's callbacks, rank 0's [\d.]+ ms \(its fit callbacks' code\)$",
        ),
    ],
)
def test_a_rank_slow_between_steps_is_named_while_the_job_runs(mode: str, reason: str) -> None:
    legacy = {"TF_USE_LEGACY_KERAS": "1"} if mode.endswith("tf_keras") else None
    out = _launch(mode.split("-")[0], "between", "1", 120, env=legacy, min_s=LIVE_MIN_S)
    line = _live_line(out)
    assert re.search(r"rank 0 waits (\d+) ms of each (\d+) ms step for it in the all-reduce; " + reason, line), line
    waits = int(re.search(r"waits (\d+) ms", line).group(1))
    assert waits >= 30, line  # rank 1 sleeps 40 ms each step: rank 0 waits about that
    table = out[out.index("each rank's step, ms") :].splitlines()
    assert table[1].split()[1:] == ["rank", "between", "callback", "input", "compute", "wait", "score", "steps"]
    scores = {int(row.split()[1]): float(row.split()[-2]) for row in table[2:4]}
    assert scores[0] == 1.0 and scores[1] < 0.5, table


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
@pytest.mark.parametrize("mode", ["loop", "fit"])
def test_a_rank_slow_inside_its_step_is_named_with_default_settings(mode: str, tmp_path) -> None:
    # rank 1's step: 40 more matmuls before the all-reduce; no variable set: the waits are measured by default
    out = _launch(mode, "compute", "1", 300, "--log-dir", str(tmp_path), "--tee", min_s=LIVE_MIN_S)
    # the launcher wrote the job's files, a TensorBoard run per rank among them, without importing TensorFlow: no
    # line of its own but its [launcher] lines (TensorFlow's C++ start-up lines would come unprefixed)
    assert all(line.startswith("[") for line in out.splitlines() if line), out[-3000:]
    assert all((tmp_path / name).exists() for name in ("ranks.json", "steps.png", "ranks/rank0", "ranks/rank1"))
    line = _live_line(out)
    reason = (
        r"rank 0 waits [\d.]+ ms of each [\d.]+ ms step for it in the all-reduce; rank 1's step takes ([\d.]+) ms "
        r"before the all-reduce, rank 0's ([\d.]+) ms \(its device is slower or busier: see `tfdevices list`\)$"
    )
    assert re.search(reason, line), line
    assert "each rank's step, ms (median of" in out and "waits measured):" in out, out[-3000:]
    assert "weighting each rank's share of the batch by its speed" in out, out[-3000:]


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
@pytest.mark.parametrize(
    "mode, kind, ranks",
    [
        ("loop", "balanced", ""),
        ("loop", "between", "0,1"),  # every rank sleeps 40 ms between steps: slow together
        ("fit", "checkpoint", "0"),  # the chief alone sleeps 1.5 s in a callback every 30 steps, mid-job
    ],
)
def test_no_slow_rank_is_named_for_work_done_alike_or_a_chiefs_checkpoint(
    mode: str, kind: str, ranks: str, tmp_path
) -> None:
    out = _launch(mode, kind, ranks, 120, "--log-dir", str(tmp_path), "--tee", min_s=LIVE_MIN_S)
    assert "is the slow one" not in out, out[-3000:]
    looks = _looks_with_every_split(out)
    assert looks >= 3, out[-3000:]  # it looked, every rank's split seen, 3 times or more
    if kind == "checkpoint":  # the watch saw the chief in its checkpoint while the job still ran, more than once
        steps = json.loads((tmp_path / "steps.json").read_text())["ranks"]["0"]
        last = max(begun for _, begun, _ in steps)
        mid = sorted({begun for _, begun, phase in steps if phase == "callback" and begun < last})
        assert len(mid) >= 2, steps


def _looks_with_every_split(out: str) -> int:
    """The looks the end's summary counts: those that read every rank's split of its steps."""
    looks = re.search(r"each rank's step, ms \(median of (\d+) looks?;", out)  # the summary at the end
    assert looks, out[-3000:]
    return int(looks.group(1))


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
def test_no_slow_rank_turns_it_off(tmp_path) -> None:
    # the same job that names rank 1 with the watch on; off, nobody is named over a job the watch looked at
    # three times or more (steps.json counts its looks)
    out = _launch("loop", "between", "1", 60, "--no-slow-rank", "--log-dir", str(tmp_path), "--tee", min_s=LIVE_MIN_S)
    assert "slow one" not in out and "each rank's step, ms" not in out, out[-3000:]
    assert json.loads((tmp_path / "steps.json").read_text())["looks"] >= 3, out[-3000:]


def test_slow_rank_report_from_python_beats_the_environment(monkeypatch) -> None:
    from tfdevices.core.errors import InputError
    from tfdevices.jobs import rank_hooks

    monkeypatch.setattr(rank_hooks.THIS_RANK, "asked", rank_hooks.Asked())
    rank_hooks.slow_rank_report(False)
    assert rank_hooks.asked_policy(StallPolicy(slow_rank=SlowRankPolicy(enabled=True))).slow_rank.enabled is False
    rank_hooks.stall_timeout(30)
    assert rank_hooks.asked_policy(StallPolicy(timeout_s=600)).timeout_s == 30
    with pytest.raises(InputError, match="slow_rank_report\\('no'\\): not True or False"):
        rank_hooks.slow_rank_report("no")


# --------------------------------------------------------------------------- srun: rank 0 watches


def _read(path: pathlib.Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


#: rank 0's watch starts with its strategy, later than a launcher's: a longer floor than under launch
SRUN_MIN_S = 14


@pytest.mark.slow
@pytest.mark.xdist_group("engines")
def test_under_srun_rank_0_names_the_slow_rank_while_the_job_runs(tmp_path) -> None:
    """Jobs in one real one-node SLURM: a custom loop with rank 1 slow inside its step, Keras fit with rank 1
    slow between steps (each mode with each kind runs under tfdevices launch above; here, who watches differs).
    """
    from tests.engines import slurm_cluster

    # rank 0's watch starts with its strategy, later than a launcher's: longer jobs than under launch (in steps,
    # and SRUN_MIN_S at least) give it its 3 looks in a row before the job ends, under load too
    inside = r"rank 1's step takes [\d.]+ ms before the all-reduce, rank 0's [\d.]+ ms"
    with slurm_cluster(str(tmp_path / "slurm")) as slurm:
        for mode, kind, steps, reason in (
            ("loop", "compute", 600, inside),
            ("fit", "between", 240, r"rank 1 spends \d+ ms between steps in fit's callbacks, rank 0's [\d.]+ ms"),
        ):
            logs = tmp_path / f"{mode}-{kind}"
            logs.mkdir()
            length = {"SLOW_RANK_MIN_S": str(SRUN_MIN_S), "SLOW_RANK_SYNC": str(logs)}
            proc = subprocess.run(
                ["srun", "-n", "2", "--kill-on-bad-exit=1", f"--output={logs}/rank%t.out", f"--error={logs}/rank%t.err"]
                + [sys.executable, SCRIPT, mode, kind, "1", str(steps)],
                env=subprocess_env({**slurm, **length}),
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=300,
            )
            ranks = {r: {k: _read(logs / f"rank{r}.{k}") for k in ("out", "err")} for r in (0, 1)}
            out = proc.stdout + proc.stderr + "".join(text for rank in ranks.values() for text in rank.values())
            # each rank's own log, on failure: which one ended first, and how
            seen = "\n".join(f"rank {r} {k}: ...{log[-1500:]}" for r, rank in ranks.items() for k, log in rank.items())
            seen = f"srun exit {proc.returncode}: {proc.stderr[-500:]}\n{seen}"
            assert proc.returncode == 0 and "rank 0 done" in out and "rank 1 done" in out, seen
            said = ranks[0]["err"].splitlines()  # rank 0's watch thread says on its stderr
            live = [n for n, line in enumerate(said) if line.startswith("tfdevices: rank 1 is the slow one: ")]
            summary = [n for n, line in enumerate(said) if line.startswith("tfdevices: over the job, ")]
            assert live and summary and live[0] < summary[0], seen  # said before rank 0's exit summary
            assert re.search(
                r"rank 0 waits [\d.]+ ms of each [\d.]+ ms step for it in the all-reduce; " + reason, said[live[0]]
            ), (mode, kind, said[live[0]])


@pytest.mark.slow
@pytest.mark.xdist_group("engines")
def test_under_ray_train_rank_0_names_the_slow_rank(tmp_path) -> None:
    """Ray Train writes TF_CONFIG in each worker: rank 0's watch reads both ranks' records and names rank 1."""
    try:
        import ray.train.tensorflow  # noqa: F401
    except ImportError as err:
        pytest.fail(f"Ray Train is not installed ({err}; pip install 'ray[train]', the test extra)")
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "scripts", "ray_slow.py"), str(tmp_path), "150"],
        env=subprocess_env({"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ray slow done" in out, out[-3000:]
    live = re.search(r"tfdevices: rank 1 is the slow one: rank 0 waits \d+ ms of each \d+ ms step for it", out)
    assert live and "rank 1 spends" in out[live.start() : live.start() + 300], out[-3000:]
    # no summary table here: Ray ends its workers without their exit hooks (rank 0's table is printed at exit)
