"""Which rank is slow, and why: the rank every other rank waits for, named from the progress records.

A collective (the all-reduce of a step) holds every rank until the last arrives, so every rank's
step takes as long as the slowest rank's: step counts and step times name nobody. What tells the
ranks apart is where each spends its step (:mod:`tfdevices.jobs.progress` keeps it per rank):

- *between* steps: from one step's end to the next one's beginning (its input pipeline, its own
  code), less the time in ``fit``'s callbacks, counted apart (*callback*: a chief's checkpoint once an
  epoch stays out of the medians);
- *input*: inside the step, waiting for its batch (``fit`` reads it there), as measured;
- *compute*: the rest of its step before and around the collectives;
- *wait*: in the collectives, as measured: the ranks that arrive first wait longest.

The waits are measured inside every step by the ``collective_wait`` mend (:mod:`tfdevices.mends.collective_wait`)
and read every few steps into each rank's record (:class:`~tfdevices.jobs.progress.Waits`): the share of its
steps' time each rank waited over the latest steps every rank read alike (:func:`wait_shares`).

The slow rank is the one whose own work (between + input + compute) is largest while the others
wait for it: their wait exceeds its own by more than a balanced job's noise (:class:`SlowRankPolicy`:
a fraction of the step and an absolute floor), in every poll of a window. Before the waits are read (a
job's first steps, or where the mend cannot apply) a rank slow *between* steps is still seen: its
between time exceeds the others' by what they wait. Each rank's score is NVIDIA Resiliency Extension's relative
performance score: the best rank's own work per step over this rank's (1: the best; 0.5: it takes
twice as long). When every rank waits most of its step alike, the link is the bottleneck: that is
said in the job's summary, never as a slow rank. TensorFlow-free and pure: the watch
(:mod:`tfdevices.jobs.watch`) keeps what the polls saw.

>>> from tfdevices.jobs.progress import RankProgress, StepTimes
>>> fast = RankProgress(0, 10, 40, 40, "step", "", 0.0, 0.055, (StepTimes(0.001, 0.0, 0.055),) * 16, 38)
>>> slow = RankProgress(1, 11, 40, 40, "between", "", 0.0, 0.005, (StepTimes(0.051, 0.0, 0.005),) * 16, 38)
>>> for part in find_slow_rank(split_ranks([fast, slow])).reason().split("; "):
...     print(part)
rank 1 is the slow one: rank 0 waits 50 ms of each 55 ms step for it in the all-reduce
rank 1 spends 51 ms between steps (its input pipeline or its own code)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from tfdevices.core.units import env_switch
from tfdevices.jobs.progress import RankProgress, Waits

SLOW_RANK_ENV = "TFDEVICES_SLOW_RANK"
#: What each component means, in the line that names a slow rank.
WHY = {
    "between": "its input pipeline or its own code",
    "callback": "its fit callbacks' code",
    "input": "its input pipeline, read inside its step",
    "compute": "its device is slower or busier: see `tfdevices list`",
}


@dataclasses.dataclass(frozen=True)
class SlowRankPolicy:
    """When a rank counts as the slow one.

    Attributes:
        enabled: look for a slow rank at all (``tfdevices launch --no-slow-rank``, ``TFDEVICES_SLOW_RANK=0``).
        fraction: the others must wait this share of the step more than the slow rank does ...
        floor_s: ... and at least this many seconds (a balanced job's noise: see benchmarks/RESULTS.md).
        polls: in this many polls in a row (about a second apart) that saw new steps, before it is named.
        min_steps: steps each rank must have timed (past its first, compiled, steps).
    """

    enabled: bool = True
    fraction: float = 0.2
    floor_s: float = 0.002
    polls: int = 3
    min_steps: int = 8

    def margin(self, step_s: float) -> float:
        """How much longer the others must wait than the slow rank, for a step of ``step_s``."""
        return max(self.floor_s, self.fraction * step_s)


def policy_from_env(env: Mapping[str, str]) -> SlowRankPolicy:
    """``TFDEVICES_SLOW_RANK`` (``1``/``on``, ``0``/``off``; unset: on) as a :class:`SlowRankPolicy`.

    Raises:
        EnvVarError: it is set to anything else.

    >>> policy_from_env({"TFDEVICES_SLOW_RANK": "off"}).enabled
    False
    """
    hint = f"{SLOW_RANK_ENV}=0 turns the slow-rank report off; unset it for the default (on)."
    return SlowRankPolicy(enabled=env_switch(env, SLOW_RANK_ENV, default=True, hint=hint))


@dataclasses.dataclass(frozen=True)
class RankSplit:
    """Where one rank spends a step (seconds, the median of its latest steps).

    Attributes:
        rank: the rank.
        steps: steps it has finished.
        between_s: time between steps, outside ``fit``'s callbacks.
        callback_s: time between steps in ``fit``'s callbacks.
        step_s: its step's wall time (input + compute + wait).
        input_s: inside the step, waiting for its input, as measured; 0 before the waits are read.
        compute_s: inside the step, neither input nor wait.
        wait_s: inside the step, waiting in the collectives: measured, else inferred (how much less time than
            the slowest rank it spends between steps).
        measured: ``wait_s`` and ``input_s`` are measured (every rank's waits were read over the same steps).
        score: the best rank's own work per step over this rank's (0..1; 1: the best).
        node: the machine it runs on (``""``: the watcher's).
    """

    rank: int
    steps: int
    between_s: float
    callback_s: float
    step_s: float
    input_s: float
    compute_s: float
    wait_s: float
    measured: bool
    score: float = 1.0
    node: str = ""

    @property
    def work_s(self) -> float:
        """Its own work per step: between + callback + input + compute (what the others wait for)."""
        return self.between_s + self.callback_s + self.input_s + self.compute_s

    def component(self, name: str) -> float:
        """``"between"``, ``"callback"``, ``"step"``, ``"input"``, ``"compute"`` or ``"wait"``, in seconds."""
        return float(getattr(self, f"{name}_s"))


class WaitShare(NamedTuple):
    """The share of its steps' time a rank waited in the collectives (``wait``) and for its input (``input``)."""

    wait: float
    input: float


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


#: Steps a measured window spans at the least, where the readings allow (the latest common reading, and the
#: latest one this many steps before it).
WINDOW_STEPS = 16


def wait_shares(readings: Mapping[int, Mapping[int, Waits]]) -> dict[int, WaitShare]:
    """Each rank's share of its steps' time spent waiting, over the latest steps every rank's waits were read
    after (pure): rank -> (step read after -> reading). Empty unless every rank has two readings in common.

    >>> a = {16: Waits(16, 0.8, 0.1, 0.0, 0.0), 32: Waits(32, 1.6, 0.74, 0.0, 0.0)}
    >>> b = {16: Waits(16, 0.8, 0.0, 0.0, 0.0), 32: Waits(32, 1.6, 0.01, 0.0, 0.0)}
    >>> {rank: round(share.wait, 2) for rank, share in wait_shares({0: a, 1: b}).items()}
    {0: 0.8, 1: 0.01}
    """
    if not readings:
        return {}
    common = sorted(set.intersection(*(set(kept) for kept in readings.values())))
    if len(common) < 2:
        return {}
    last = common[-1]
    first = max([n for n in common if n <= last - WINDOW_STEPS], default=common[0])
    shares = {}
    for rank, kept in readings.items():
        a, b = kept[first], kept[last]
        seconds = b.step_s - a.step_s
        if seconds <= 0:
            return {}
        wait = min(1.0, max(0.0, (b.wait_s - a.wait_s) / seconds))
        shares[rank] = WaitShare(wait, min(1.0 - wait, max(0.0, (b.input_s - a.input_s) / seconds)))
    return shares


def split_ranks(
    records: Sequence[RankProgress], min_steps: int = 1, shares: Mapping[int, WaitShare] | None = None
) -> tuple[RankSplit, ...]:
    """Each rank's step split from its record (pure); empty until every rank timed ``min_steps`` steps.

    The medians of the latest steps (robust to a once-an-epoch checkpoint's step). Where ``shares`` has every
    rank (:func:`wait_shares`), its shares of wait and input are measured; else the wait is inferred: a
    collective makes every rank's cycle (between + step) as long as the slowest's, so a rank that spends
    less time between steps than the slowest spends the difference waiting.
    """
    if not records or any(len(r.recent) < min(min_steps, 16) or r.timed < min_steps for r in records):
        return ()
    between = {r.rank: _median([t.between_s for t in r.recent]) for r in records}
    callback = {r.rank: _median([t.callback_s for t in r.recent]) for r in records}
    step = {r.rank: _median([t.step_s for t in r.recent]) for r in records}
    measured = shares is not None and all(r.rank in shares for r in records)
    most = max(between[r.rank] + callback[r.rank] for r in records)
    splits = []
    for r in records:
        if measured and shares is not None:
            wait_s, input_s = step[r.rank] * shares[r.rank].wait, step[r.rank] * shares[r.rank].input
        else:
            wait_s, input_s = min(step[r.rank], most - between[r.rank] - callback[r.rank]), 0.0
        compute_s = max(0.0, step[r.rank] - wait_s - input_s)
        parts = (between[r.rank], callback[r.rank], step[r.rank])
        splits.append(RankSplit(r.rank, r.done, *parts, input_s, compute_s, wait_s, measured, node=r.node))
    return _scored(splits)


def _scored(splits: Sequence[RankSplit]) -> tuple[RankSplit, ...]:
    """The splits, each with its score: the best rank's own work over its own."""
    best = min((s.work_s for s in splits), default=0.0)
    return tuple(
        dataclasses.replace(s, score=round(min(1.0, best / s.work_s), 3) if s.work_s > 0 else 1.0) for s in splits
    )


def on_node(rank: int, node: str) -> str:
    """``"rank 5"``, or ``"rank 5 on node gpu07"`` where the node is named (a job over several machines)."""
    return f"rank {rank} on node {node}" if node else f"rank {rank}"


@dataclasses.dataclass(frozen=True)
class SlowRank:
    """The rank the others wait for, and why.

    Attributes:
        rank: the slow rank.
        component: where it spends more than the others: ``"between"``, ``"callback"``, ``"input"`` or
            ``"compute"``.
        splits: every rank's split.
        margin_s: the margin its wait gap passed.
    """

    rank: int
    component: str
    splits: tuple[RankSplit, ...]
    margin_s: float

    @property
    def node(self) -> str:
        """The machine it runs on, as the splits name it (``""`` on a job of one machine)."""
        return next(s.node for s in self.splits if s.rank == self.rank)

    def reason(self) -> str:
        """One line for people: who, how long the others wait for it, where it spends the time."""
        me = next(s for s in self.splits if s.rank == self.rank)
        others = [s for s in self.splits if s.rank != self.rank]
        wait = _median([s.wait_s for s in others])
        step = _median([s.step_s for s in others])
        who = ranks_text([s.rank for s in others]) if len(others) <= LISTED else f"the other {len(others):,} ranks"
        verb = "waits" if len(others) == 1 else "wait"
        head = (
            f"{on_node(self.rank, me.node)} is the slow one: {who} {verb} {_ms(wait)} of each {_ms(step)} step "
            f"for it in the all-reduce; "
        )
        theirs = _median([s.component(self.component) for s in others])
        whose = f"{who}'s" if len(others) == 1 else "the others'"
        if self.component == "between":
            tail = f"rank {self.rank} spends {_ms(me.between_s)} between steps"
        elif self.component == "callback":
            tail = (
                f"rank {self.rank} spends {_ms(me.callback_s)} between steps in fit's callbacks, {whose} {_ms(theirs)}"
            )
        elif self.component == "input":
            tail = f"rank {self.rank}'s step waits {_ms(me.input_s)} for its input, {whose} {_ms(theirs)}"
        else:
            tail = f"rank {self.rank}'s step takes {_ms(me.compute_s)} before the all-reduce, {whose} {_ms(theirs)}"
        return f"{head}{tail} ({WHY[self.component]})"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.1f} ms"


#: The most ranks a line lists one by one (:func:`ranks_text`); more are counted.
LISTED = 8
#: The most runs of ranks a counted list gives as ranges (``0-4094``) before "and N more".
RUNS = 4


def ranks_text(ranks: Sequence[int]) -> str:
    """``"rank 1"``, ``"ranks 1, 3"``: ranks as the job's messages name them; over :data:`LISTED` ranks,
    counted, with their first :data:`RUNS` runs as ranges (a line's length stays bounded).

    >>> ranks_text([1, 3])
    'ranks 1, 3'
    >>> ranks_text(range(4095))
    '4,095 ranks (0-4094)'
    >>> ranks_text([*range(0, 10, 2), *range(100, 3000)])
    '2,905 ranks (0, 2, 4, 6 and 2,901 more)'
    """
    if len(ranks) <= LISTED:
        return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
    runs = _runs(sorted(set(ranks)))
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:RUNS])
    rest = sum(b - a + 1 for a, b in runs[RUNS:])
    more = f" and {rest:,} more" if rest else ""
    return f"{len(set(ranks)):,} ranks ({text}{more})"


def _runs(ranks: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted ranks as runs of consecutive ranks: ``[0, 1, 2, 5]`` -> ``[(0, 2), (5, 5)]``."""
    runs: list[tuple[int, int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    return runs


def find_slow_rank(splits: Sequence[RankSplit], policy: SlowRankPolicy | None = None) -> SlowRank | None:
    """The rank every other rank waits for, beyond the policy's margin; ``None`` when there is none (pure)."""
    policy = policy or SlowRankPolicy()
    if len(splits) < 2:
        return None
    slow = max(splits, key=lambda s: s.work_s)
    others = [s for s in splits if s.rank != slow.rank]
    cycle = _median([s.between_s + s.step_s for s in splits])
    margin = policy.margin(cycle)
    if min(s.wait_s for s in others) - slow.wait_s < margin:
        return None  # the others do not wait for it (balanced, or slow together)
    if min(slow.work_s - s.work_s for s in others) < margin:
        return None  # another rank is nearly as slow: no one rank to name
    excess = {
        name: slow.component(name) - _median([s.component(name) for s in others])
        for name in ("between", "callback", "input", "compute")
    }
    component = max(excess, key=lambda k: excess[k])
    return SlowRank(slow.rank, component, tuple(splits), margin)


def link_bound(splits: Sequence[RankSplit], share: float = 0.5) -> bool:
    """Every rank waits in the collectives for at least ``share`` of its whole step (from the previous step's
    end to its own), measured (not inferred): the link, not a rank.
    """
    return (
        len(splits) >= 2
        and all(s.measured for s in splits)
        and all(s.step_s > 0 and s.wait_s >= share * (s.between_s + s.callback_s + s.step_s) for s in splits)
    )


_PARTS = ("between", "callback", "step", "input", "compute", "wait")


def median_splits(history: Sequence[tuple[RankSplit, ...]]) -> tuple[RankSplit, ...]:
    """Each rank's split over many polls: the median of each component, scores taken again (pure)."""
    by_rank: dict[int, list[RankSplit]] = {}
    for splits in history:
        for s in splits:
            by_rank.setdefault(s.rank, []).append(s)
    merged = []
    for rank, seen in sorted(by_rank.items()):
        between, callback, step, got, compute, wait = (_median([s.component(n) for s in seen]) for n in _PARTS)
        steps, measured = max(s.steps for s in seen), all(s.measured for s in seen)
        merged.append(RankSplit(rank, steps, between, callback, step, got, compute, wait, measured, node=seen[-1].node))
    return _scored(merged)


_WIDTHS = (4, 7, 8, 6, 7, 6, 5, 5)
_HEAD = ("rank", "between", "callback", "input", "compute", "wait", "score", "steps")
#: The ranks a cut table shows (:func:`rank_table` with ``most``): the slowest, by their own work.
SLOWEST = 10
#: The rows of a cut table's spread of each part over every rank: the label and the quantile.
_SPREAD = (("min", 0.0), ("median", 0.5), ("p90", 0.9), ("max", 1.0))


def rank_table(splits: Sequence[RankSplit], most: int | None = None, named: Collection[int] = ()) -> list[str]:
    """The per-rank table the job's summary prints: ms per step in each part, the score, the steps; and each
    rank's node where a rank names one.

    Over ``most`` ranks (``None``: never) the table is cut: the :data:`SLOWEST` ranks by their own work (the
    ranks in ``named`` always among them), then each column's spread over every rank (min, median, 90th
    percentile, max), then where every rank's row is (``ranks.json``).

    >>> for line in rank_table([RankSplit(0, 300, 0.001, 0.0, 0.055, 0.0, 0.005, 0.05, False, 1.0),
    ...                         RankSplit(1, 300, 0.051, 0.0, 0.005, 0.0, 0.005, 0.0, False, 0.107)]):
    ...     print(line)
    rank  between  callback   input  compute    wait  score  steps
       0      1.0       0.0     0.0      5.0    50.0   1.00    300
       1     51.0       0.0     0.0      5.0     0.0   0.11    300
    """
    nodes = any(s.node for s in splits)
    if most is None or len(splits) <= most:
        return [_table_line(_HEAD, _WIDTHS, "node" if nodes else None), *(_row(s, nodes, _WIDTHS) for s in splits)]
    return _cut_table(splits, set(named), nodes)


def _table_line(cells: Sequence[str], widths: Sequence[int], node: str | None) -> str:
    return "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths)) + ("" if node is None else f"  {node}")


def _row(s: RankSplit, nodes: bool, widths: Sequence[int]) -> str:
    parts = [s.between_s, s.callback_s, s.input_s, s.compute_s, s.wait_s]
    cells = [str(s.rank), *(f"{p * 1e3:.1f}" for p in parts), f"{s.score:.2f}", str(s.steps)]
    return _table_line(cells, widths, s.node if nodes else None)


def _cut_table(splits: Sequence[RankSplit], named: Collection[int], nodes: bool) -> list[str]:
    """The table of many ranks: the slowest, each column's spread over all of them, where the rest is."""
    widths = (6, *_WIDTHS[1:])  # the rank column holds "median"
    by_work = sorted(splits, key=lambda s: (-s.work_s, s.rank))
    shown = [s for s in by_work if s.rank in named][:SLOWEST]
    shown += [s for s in by_work if s.rank not in named][: SLOWEST - len(shown)]
    shown.sort(key=lambda s: (-s.work_s, s.rank))
    lines = [_table_line(_HEAD, widths, "node" if nodes else None), *(_row(s, nodes, widths) for s in shown)]
    count = len(splits)
    lines.append(
        f"{count - len(shown):,} more ranks; each column over all {count:,} (min, median, 90th percentile, max):"
    )
    columns = [
        sorted(s.component(p) * 1e3 for s in splits) for p in ("between", "callback", "input", "compute", "wait")
    ]
    scores, steps = sorted(s.score for s in splits), sorted(float(s.steps) for s in splits)
    for label, q in _SPREAD:
        cells = [label, *(f"{_quantile(c, q):.1f}" for c in columns), f"{_quantile(scores, q):.2f}"]
        lines.append(_table_line([*cells, f"{_quantile(steps, q):.0f}"], widths, None))
    lines.append(
        "every rank's row is in ranks.json with --log-dir: `tfdevices.read_ranks(log_dir).table()` prints them"
    )
    return lines


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values: the median at 0.5, else the nearest rank (0: the least, 1: the most)."""
    if q == 0.5:
        return float(statistics.median(ordered))
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
