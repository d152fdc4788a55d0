"""The job's one watcher: each look reads every rank's record once into one frozen snapshot that every view renders.

:class:`JobWatch` is handed the records of every rank of the job (its own machine's, read from the progress
directory, and those the other machines sent) about once a second; :meth:`JobWatch.poll` turns them into a
:class:`JobSnapshot`: each rank's place and split of its step (:class:`RankRow`), the slow rank it named
(:mod:`tfdevices.jobs.straggler`), the stall it sees (:mod:`tfdevices.jobs.stall`), the job's state
(:class:`JobState`), and the lines this look has to say. The console prints those lines, Prometheus
(:mod:`tfdevices.jobs.metrics`) and the workers' TensorBoard scalars (the ``job.json`` the watcher writes
beside the records: :func:`write_snapshot`) render :attr:`JobWatch.latest`, and the end of the job renders
:meth:`JobWatch.summary` (the table, ``ranks.json``, the pictures, a TensorBoard run per rank:
:mod:`tfdevices.jobs.end_files`). Nothing else computes a split, a slow rank or a stall. The watch's state is
its own thread's; other threads only read the snapshot it last published (one reference, replaced whole).
TensorFlow-free.

>>> from tfdevices.jobs.progress import RankProgress
>>> watch = JobWatch([0, 1], StallPolicy(window_s=60), clock=lambda: 200.0)
>>> snapshot = watch.poll([RankProgress(0, 10, 5, 4, "step", "", 100.0, 0.1),
...                        RankProgress(1, 11, 4, 4, "between", "", 99.0, 0.1)])
>>> snapshot.state, snapshot.said[0]
(<JobState.STALLED: 'stalled'>, 'tfdevices: stall: rank 1 did not arrive at step 5: rank 0 has waited in it for 100 s; \
rank 1 is after step 4')
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from tfdevices.jobs.progress import RankProgress, Waits
from tfdevices.jobs.stall import STALE_S, Stall, StallPolicy, detect_stall
from tfdevices.jobs.straggler import (
    WHY,
    RankSplit,
    SlowRank,
    find_slow_rank,
    link_bound,
    median_splits,
    rank_table,
    split_ranks,
    wait_shares,
)

#: The file beside the records that holds the latest snapshot's rows, for the workers' TensorBoard scalars.
SNAPSHOT_FILE = "job.json"
#: Readings of each rank's waits kept (by the step read after).
_READINGS = 64
#: The timeline's entries kept: past it, the timeline keeps every other step of each rank's (then every 4th, ...).
TIMELINE_ENTRIES = 100_000
#: Every rank's splits kept over the looks, in all: past it, every other look is kept (then every 4th, ...).
HISTORY_SPLITS = 1 << 17
#: The stuck ranks whose frames a stall report shows (the others' are counted).
_FRAMED_RANKS = 16


class JobState(enum.Enum):
    """What a look saw the job doing."""

    STARTING = "starting"  # no rank has finished a step yet
    RUNNING = "running"
    SLOW_RANK = "slow_rank"  # a slow rank is named: the others wait for it
    SLOW_PHASE = "slow_phase"  # some ranks are in a callback (a chief's checkpoint) while the others wait
    STALLED = "stalled"  # a rank did not arrive at the step the others wait in


@dataclasses.dataclass(frozen=True)
class RankRow:
    """One rank as a look saw it.

    Attributes:
        rank: the rank.
        node: the machine it runs on (``""``: the watcher's).
        pid: its process on that machine.
        steps: steps finished.
        phase: its phase (:data:`~tfdevices.jobs.progress.PHASES`).
        where: where it is, for people (``"in step 5"``).
        timed: steps timed (past its first 2).
        step_sum_s: their wall time in all.
        last_step_s: the last step's wall time.
        split: where it spends a step (``None`` until every rank timed enough steps).
        slow: it is the rank named slow.
        stalled: it is a rank the others wait for in a stall.
    """

    rank: int
    node: str
    pid: int
    steps: int
    phase: str
    where: str
    timed: int
    step_sum_s: float
    last_step_s: float
    split: RankSplit | None = None
    slow: bool = False
    stalled: bool = False


@dataclasses.dataclass(frozen=True)
class JobSnapshot:
    """One look at the whole job.

    Attributes:
        at: when (``time.time()``).
        number: this look's number (the first is 1).
        looks: looks so far that saw every rank's split (what the job's medians are taken over).
        rows: every rank, by rank.
        slow: the slow rank named (it persisted over :attr:`SlowRankPolicy.polls` looks), or ``None``.
        stall: the stall seen, or ``None``.
        state: what the job is doing.
        stalls: stalls seen so far.
        said: the lines this look says (a slow rank named or gone, a stall report with its frames).
        stop: why the job must stop now (a stall past the timeout), or ``None``.
    """

    at: float
    number: int
    looks: int
    rows: tuple[RankRow, ...]
    slow: SlowRank | None
    stall: Stall | None
    state: JobState
    stalls: int
    said: tuple[str, ...] = ()
    stop: str | None = None


@dataclasses.dataclass(frozen=True)
class JobSummary:
    """The job over all its looks: what its end renders (the table, ``ranks.json``, the pictures, TensorBoard).

    Attributes:
        splits: each rank's split, the medians over the looks (measured looks only, where there are some).
        slow: the slow rank over the job (one named while it ran), or ``None``.
        seen: a rank the medians show slow that was never named while the job ran, or ``None``.
        link_bound: every rank waited in the collectives most of its step: the link, not a rank.
        looks: the looks the medians are taken over.
        said: the slow-rank lines said while the job ran.
        history: each look's time and every rank's split then (of the looks counted, one in ``every``).
        polls: the looks in a row a slow rank must persist in to be named.
        every: one look in how many is in :attr:`history` (a long or large job's history is thinned to
            :data:`HISTORY_SPLITS` splits, evenly over the job).
    """

    splits: tuple[RankSplit, ...]
    slow: SlowRank | None
    seen: SlowRank | None
    link_bound: bool
    looks: int
    said: tuple[str, ...]
    history: tuple[tuple[float, tuple[RankSplit, ...]], ...]
    polls: int
    every: int = 1

    def lines(self) -> list[str]:
        """The job's summary for the console: the table, the slow rank or the link, and what would help."""
        if not self.splits:
            return []
        how = "waits measured" if all(s.measured for s in self.splits) else "no waits measured: wait inferred"
        looks = f"{self.looks:,} look" + ("" if self.looks == 1 else "s")
        if self.every > 1:
            looks += f", one in {self.every:,} of the job's kept"
        lines = [
            f"each rank's step, ms (median of {looks}; {how}):",
            *rank_table(self.splits, most=16, named=[s.rank for s in (self.slow, self.seen) if s is not None]),
        ]
        if self.slow is not None:
            lines.append("over the job, " + self.slow.reason())
            if self.slow.component == "compute":
                lines.append(
                    "  a slower device: `tfdevices.measure_devices()` measures each; weighting each rank's share of "
                    "the batch by its speed (the rank weights) would let the others stop waiting"
                )
        elif self.link_bound:
            lines.append("every rank waits in the all-reduce most of its step: the link is the bottleneck, not a rank")
        elif self.seen is not None:
            lines.append(
                f"no slow rank named: rank {self.seen.rank} looks slow over the job's steps "
                f"({WHY[self.seen.component]}), but was not in {self.polls} looks in a row while it ran: too few "
                "looks to tell"
            )
        else:
            lines.append("no slow rank: the ranks wait alike")
        return lines


Frames = Callable[[Stall], Mapping[int, Sequence[str]]]


class JobWatch:
    """The job's watcher: its looks, what they saw, and what is said.

    Args:
        expected: the ranks that should report (a rank with no record has not begun).
        policy: the stall windows and timeout, and the slow-rank policy; or a function that returns them at
            each look (settings a program may change while the job runs, published whole).
        frames: gives the top frames of the stuck ranks of a stall (:func:`~tfdevices.jobs.stacks.ask_stacks`
            on this machine, and the other machines' launchers); ``None``: no frames.
        stacks_where: where every rank's stack is written, said with the frames.
        clock: ``time.time``-like (tests).
    """

    def __init__(
        self,
        expected: Sequence[int],
        policy: StallPolicy | Callable[[], StallPolicy],
        *,
        frames: Frames | None = None,
        stacks_where: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.expected = tuple(expected)
        self._policy = policy if callable(policy) else (lambda: policy)
        self._frames = frames
        self._stacks_where = stacks_where
        self._clock = clock
        self._since = clock() - STALE_S
        self._steps: deque[float] = deque(maxlen=1000)
        self._done: dict[int, int] = {}
        self._last: dict[int, tuple[int, str]] = {}
        self.timeline: list[tuple[float, int, int, str]] = []  # (time, rank, steps begun, phase) at each change
        self.timeline_every = 1  # the timeline keeps the changes of each rank's every N-th step (and its end)
        self._slow = _SlowTracker()
        self._stall = _StallTracker()
        self.latest: JobSnapshot | None = None
        self.looks_every_rank = 0  # looks that read a record past its first step of every rank expected

    @property
    def policy(self) -> StallPolicy:
        """The settings now."""
        return self._policy()

    def median_step_s(self) -> float | None:
        """The median step seen so far (``None`` before the first)."""
        return statistics.median(self._steps) if self._steps else None

    def poll(self, records: Sequence[RankProgress]) -> JobSnapshot:
        """One look at every rank's record: the snapshot it makes (published as :attr:`latest`)."""
        now = self._clock()
        policy = self._policy()
        records = tuple(sorted((r for r in records if r.changed_at >= self._since), key=lambda r: r.rank))
        self._note_steps(records)
        begun = {r.rank for r in records if r.done >= 1}
        self.looks_every_rank += bool(self.expected) and begun >= set(self.expected)
        said: list[str] = []
        splits = self._slow.look(records, now, policy, said)
        stall = detect_stall(
            records, now=now, policy=policy, median_step_s=self.median_step_s(), expected=self.expected
        )
        stop = self._stall.look(stall, policy, said, self._frames, self._stacks_where)
        snapshot = JobSnapshot(
            now,
            (self.latest.number if self.latest is not None else 0) + 1,
            self._slow.counted,
            _rows(records, splits, self._slow.named, stall),
            self._slow.named,
            stall,
            _state(records, self._slow.named, stall),
            self._stall.count,
            tuple(said),
            stop,
        )
        self.latest = snapshot
        return snapshot

    def _note_steps(self, records: Sequence[RankProgress]) -> None:
        for record in records:
            if record.done > self._done.get(record.rank, 0) and record.last_step_s > 0:
                self._steps.append(record.last_step_s)
            self._done[record.rank] = record.done
            if self._last.get(record.rank) != (record.started, record.phase):
                self._last[record.rank] = (record.started, record.phase)
                if _kept(record.started, record.phase, self.timeline_every):
                    self.timeline.append((record.changed_at, record.rank, record.started, record.phase))
        while len(self.timeline) > TIMELINE_ENTRIES:  # thinned: the whole job at half the detail
            self.timeline_every *= 2
            self.timeline = [e for e in self.timeline if _kept(e[2], e[3], self.timeline_every)]

    def summary(self) -> JobSummary:
        """The job over its looks, for its end: computed here, once, and rendered by every end-of-job view (each
        rank's steps as the last look saw them).
        """
        steps = {row.rank: row.steps for row in self.latest.rows} if self.latest is not None else {}
        return self._slow.summary(self._policy(), steps)


def _kept(begun: int, phase: str, every: int) -> bool:
    """Whether the timeline keeps a change: of a step it keeps (one in ``every``), or a rank's end."""
    return begun % every == 0 or phase == "done"


def _rows(
    records: Sequence[RankProgress], splits: Sequence[RankSplit], slow: SlowRank | None, stall: Stall | None
) -> tuple[RankRow, ...]:
    by_rank = {s.rank: s for s in splits}
    stalled = stall.missing if stall is not None and not stall.phase_only else ()
    return tuple(
        RankRow(
            r.rank,
            r.node,
            r.pid,
            r.done,
            r.phase,
            r.where(),
            r.timed,
            r.totals.step_s,
            r.last_step_s,
            by_rank.get(r.rank),
            slow is not None and slow.rank == r.rank,
            r.rank in stalled,
        )
        for r in records
    )


def _state(records: Sequence[RankProgress], slow: SlowRank | None, stall: Stall | None) -> JobState:
    if stall is not None:
        return JobState.SLOW_PHASE if stall.phase_only else JobState.STALLED
    if slow is not None:
        return JobState.SLOW_RANK
    if not records or not all(r.done >= 1 for r in records):
        return JobState.STARTING
    return JobState.RUNNING


class _SlowTracker:
    """The slow-rank part of the watch: each rank's wait readings, the looks' splits, the rank named."""

    def __init__(self) -> None:
        self.history: list[tuple[float, tuple[RankSplit, ...]]] = []  # (time, every rank's split), 1 look in every
        self.every = 1
        self.counted = 0
        self.named: SlowRank | None = None
        self.said: list[str] = []
        self.ever: set[tuple[int, str]] = set()  # (rank, component) named while the job ran
        self._candidate: tuple[int, str] | None = None
        self._streak = 0
        self._done: dict[int, int] = {}
        self._readings: dict[int, dict[int, Waits]] = {}
        self._splits: tuple[RankSplit, ...] = ()

    def look(
        self, records: Sequence[RankProgress], now: float, policy: StallPolicy, said: list[str]
    ) -> tuple[RankSplit, ...]:
        """Counts a look when every rank finished steps since the last one counted; returns the splits seen."""
        slow_policy = policy.slow_rank
        self._keep_readings(records)
        if not slow_policy.enabled or len(records) < 2:
            return ()
        if any(r.done <= self._done.get(r.rank, -1) for r in records):
            return self._splits  # no new steps everywhere (a stall, a chief's checkpoint): nothing to add
        self._done = {r.rank: r.done for r in records}
        shares = wait_shares({r.rank: self._readings.get(r.rank, {}) for r in records})
        self._splits = split_ranks(records, slow_policy.min_steps, shares)
        if not self._splits:
            return ()
        self._keep(now)
        self._name(find_slow_rank(self._splits, slow_policy), slow_policy.polls, said)
        return self._splits

    def _keep(self, now: float) -> None:
        """Keeps this look's splits in the history, thinned to :data:`HISTORY_SPLITS` splits evenly over the job."""
        if self.counted % self.every == 0:
            self.history.append((now, self._splits))
        self.counted += 1
        while len(self.history) > 1 and len(self.history) * len(self._splits) > HISTORY_SPLITS:
            self.every *= 2
            self.history = self.history[::2]

    def _keep_readings(self, records: Sequence[RankProgress]) -> None:
        for r in records:
            if r.waits is not None:
                kept = self._readings.setdefault(r.rank, {})
                kept[r.waits.step] = r.waits
                while len(kept) > _READINGS:
                    del kept[min(kept)]

    def _name(self, slow: SlowRank | None, polls: int, said: list[str]) -> None:
        key = (slow.rank, slow.component) if slow else None
        self._streak = self._streak + 1 if key == self._candidate else 1
        self._candidate = key
        if self._streak < polls:
            return
        named = (self.named.rank, self.named.component) if self.named else None
        if key != named:
            if slow is None and self.named is not None:
                line = f"tfdevices: rank {self.named.rank} is no longer the slow one: the ranks wait alike"
                self.said.append(line)
                said.append(line)
            elif slow is not None:
                self.ever.add((slow.rank, slow.component))
                self.said.append("tfdevices: " + slow.reason())
                said.append(self.said[-1])
        self.named = slow

    def summary(self, policy: StallPolicy, steps: Mapping[int, int]) -> JobSummary:
        polls = [s for _, s in self.history]
        measured = [s for s in polls if all(r.measured for r in s)]
        splits = median_splits(measured or polls)  # where waits were measured, the looks before them are left out
        splits = tuple(dataclasses.replace(s, steps=max(s.steps, steps.get(s.rank, 0))) for s in splits)
        found = find_slow_rank(splits, policy.slow_rank)
        named = found is not None and (found.rank, found.component) in self.ever
        return JobSummary(
            splits,
            found if named else None,
            None if named else found,
            link_bound(splits),
            len(measured or polls),
            tuple(self.said),
            tuple(self.history),
            policy.slow_rank.polls,
            self.every,
        )


class _StallTracker:
    """The stall part of the watch: each stall said once, then at growing intervals; the timeout."""

    def __init__(self) -> None:
        self.count = 0
        self._reported: tuple[int, tuple[int, ...]] | None = None
        self._next = 0.0

    def look(
        self, stall: Stall | None, policy: StallPolicy, said: list[str], frames: Frames | None, where: str
    ) -> str | None:
        """Says the stall when due; returns why the job must stop, or ``None``."""
        if stall is None:
            self._reported = None
            return None
        key = (stall.step, stall.missing)
        if key != self._reported:
            self._reported, self._next = key, stall.quiet_s
            self.count += 1
        if stall.quiet_s >= self._next:
            self._next = max(stall.quiet_s * 2, stall.quiet_s + stall.window_s)
            said += stall.text().splitlines()
            if frames is not None:
                said += _frame_lines(stall, frames(stall), where)
        if policy.timeout_s is not None and stall.quiet_s >= stall.window_s + policy.timeout_s:
            return f"stopping the job: {stall.reason()} (past the stall timeout, {policy.timeout_s:g} s)"
        return None


def _frame_lines(stall: Stall, frames: Mapping[int, Sequence[str]], where: str) -> list[str]:
    lines = [f"  every rank's Python stack: {where}"] if where else []
    nodes = {r.rank: r.node for r in stall.records}
    shown = [rank for rank in stall.missing if frames.get(rank)]
    for rank in shown[:_FRAMED_RANKS]:
        node = f" (node {nodes[rank]})" if nodes.get(rank) else ""
        lines.append(f"  rank {rank}'s stack{node}, innermost first:")
        lines += [f"    {frame}" for frame in frames[rank]]
    if len(shown) > _FRAMED_RANKS:
        lines.append(f"  and {len(shown) - _FRAMED_RANKS:,} more stuck ranks' stacks, not shown")
    return lines


_ROW_FIELDS = tuple(f.name for f in dataclasses.fields(RankRow) if f.name != "split")
_SPLIT_FIELDS = tuple(f.name for f in dataclasses.fields(RankSplit) if f.name not in ("rank", "node"))


def snapshot_data(snapshot: JobSnapshot, ranks: Collection[int] | None = None) -> dict[str, Any]:
    """A snapshot's rows as plain JSON types (what ``job.json`` holds): those of ``ranks`` (``None``: every rank)."""
    rows = []
    for row in snapshot.rows:
        if ranks is None or row.rank in ranks:
            data = {name: getattr(row, name) for name in _ROW_FIELDS}
            if row.split is not None:
                data["split"] = {name: getattr(row.split, name) for name in _SPLIT_FIELDS}
            rows.append(data)
    return {"version": 1, "at": snapshot.at, "state": snapshot.state.value, "looks": snapshot.looks, "ranks": rows}


def write_snapshot(snapshot: JobSnapshot, directory: str, ranks: Collection[int] | None = None) -> None:
    """Writes the rows of ``ranks`` (this machine's: only its workers read them; ``None``: every rank) to
    ``job.json`` in ``directory``, replaced whole; a failure is left unsaid: the workers' TensorBoard scalars then
    miss one look.
    """
    path = os.path.join(directory, SNAPSHOT_FILE)
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(snapshot_data(snapshot, ranks), f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def read_snapshot_row(directory: str, rank: int) -> RankRow | None:
    """Rank ``rank``'s row of the latest snapshot in ``directory``; ``None`` without one.

    Reads ``job.json`` (at most 16 MiB); a file that is not one the watch wrote reads as none.
    """
    path = os.path.join(directory, SNAPSHOT_FILE)
    try:
        if os.path.getsize(path) > 16 << 20:
            return None
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for row in data["ranks"]:
            if row["rank"] == rank:
                split = row.pop("split", None)
                return RankRow(**row, split=None if split is None else RankSplit(rank=rank, **split))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None
