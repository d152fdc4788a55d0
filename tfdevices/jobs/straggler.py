"""Which rank is slow, and why: the rank every other rank waits for, named from the progress records.

A collective (the all-reduce of a step) holds every rank until the last arrives, so every rank's
step takes as long as the slowest rank's: step counts and step times name nobody. What tells the
ranks apart is where each spends its step (:mod:`tfdevices.jobs.progress` keeps it per rank):

- *between* steps: from one step's end to the next one's beginning (its input pipeline, its own
  code), less the time in ``fit``'s callbacks, counted apart (*callback*: a chief's checkpoint once an
  epoch stays out of the medians);
- *input*: inside ``fit``'s step, the input pipeline's ops (the iterator's; from a sampled step);
- *compute*: the rest of its step before and around the collectives;
- *wait*: in the collectives (from a sampled step): the ranks that arrive first wait longest.

The slow rank is the one whose own work (between + input + compute) is largest while the others
wait for it: their wait exceeds its own by more than a balanced job's noise (:class:`SlowRankPolicy`:
a fraction of the step and an absolute floor), in every poll of a window. Without a sampled step
(no profiler samples yet) a rank slow *between* steps is still seen: its between time exceeds
the others' by what they wait. Each rank's score is NVIDIA Resiliency Extension's relative
performance score: the best rank's own work per step over this rank's (1: the best; 0.5: it takes
twice as long). When every rank waits most of its step alike, the link is the bottleneck: that is
said in the job's summary, never as a slow rank. TensorFlow-free and pure, but for
:class:`SlowRankWatch`, which keeps what the polls saw.

>>> from tfdevices.jobs.progress import RankProgress
>>> fast = RankProgress(0, 10, 40, 40, "step", "", 0.0, 0.055, ((0.001, 0.0, 0.055),) * 16, 38)
>>> slow = RankProgress(1, 11, 40, 40, "between", "", 0.0, 0.005, ((0.051, 0.0, 0.005),) * 16, 38)
>>> for part in find_slow_rank(split_ranks([fast, slow])).reason().split("; "):
...     print(part)
rank 1 is the slow one: rank 0 waits 50 ms of each 55 ms step for it in the all-reduce
rank 1 spends 51 ms between steps (its input pipeline or its own code)
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence

from tfdevices.core.units import env_switch
from tfdevices.jobs.progress import RankProgress

SLOW_RANK_ENV = "TFDEVICES_SLOW_RANK"
#: What each component means, in the line that names a slow rank.
WHY = {
    "between": "its input pipeline or its own code",
    "callback": "its fit callbacks' code",
    "input": "its input pipeline, read inside fit's step",
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
        input_s: inside the step, in the input pipeline's ops (``fit``), from a sampled step; 0 without one.
        compute_s: inside the step, neither input nor wait.
        wait_s: inside the step, waiting in the collectives: measured in a sampled step, else inferred
            (how much less time than the slowest rank it spends between steps).
        sampled: ``wait_s`` and ``input_s`` come from a sampled step (the profiler's).
        score: the best rank's own work per step over this rank's (0..1; 1: the best).
    """

    rank: int
    steps: int
    between_s: float
    callback_s: float
    step_s: float
    input_s: float
    compute_s: float
    wait_s: float
    sampled: bool
    score: float = 1.0

    @property
    def work_s(self) -> float:
        """Its own work per step: between + callback + input + compute (what the others wait for)."""
        return self.between_s + self.callback_s + self.input_s + self.compute_s

    def component(self, name: str) -> float:
        """``"between"``, ``"callback"``, ``"step"``, ``"input"``, ``"compute"`` or ``"wait"``, in seconds."""
        return float(getattr(self, f"{name}_s"))


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def split_ranks(records: Sequence[RankProgress], min_steps: int = 1) -> tuple[RankSplit, ...]:
    """Each rank's step split from its record (pure); empty until every rank timed ``min_steps`` steps.

    The medians of the latest steps (robust to a once-an-epoch checkpoint's step). Where every rank
    has a sampled step, its shares of wait and input are taken from it; else the wait is inferred:
    a collective makes every rank's cycle (between + step) as long as the slowest's, so a rank that
    spends less time between steps than the slowest spends the difference waiting.
    """
    if not records or any(len(r.recent) < min(min_steps, 16) or r.timed < min_steps for r in records):
        return ()
    between = {r.rank: _median([b for b, _, _ in r.recent]) for r in records}
    callback = {r.rank: _median([c for _, c, _ in r.recent]) for r in records}
    step = {r.rank: _median([s for _, _, s in r.recent]) for r in records}
    sampled = all(r.sample is not None and r.sample[1] > 0 for r in records)
    most = max(between[r.rank] + callback[r.rank] for r in records)
    splits = []
    for r in records:
        if sampled and r.sample is not None:
            _, seconds, wait, got, _ = r.sample
            wait_s = step[r.rank] * min(1.0, wait / seconds)
            input_s = step[r.rank] * min(1.0 - wait_s / step[r.rank] if step[r.rank] else 0.0, got / seconds)
        else:
            wait_s, input_s = min(step[r.rank], most - between[r.rank] - callback[r.rank]), 0.0
        compute_s = max(0.0, step[r.rank] - wait_s - input_s)
        parts = (between[r.rank], callback[r.rank], step[r.rank])
        splits.append(RankSplit(r.rank, r.done, *parts, input_s, compute_s, wait_s, sampled))
    best = min(s.work_s for s in splits)
    return tuple(
        dataclasses.replace(s, score=round(min(1.0, best / s.work_s), 3) if s.work_s > 0 else 1.0) for s in splits
    )


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

    def reason(self) -> str:
        """One line for people: who, how long the others wait for it, where it spends the time."""
        me = next(s for s in self.splits if s.rank == self.rank)
        others = [s for s in self.splits if s.rank != self.rank]
        wait = _median([s.wait_s for s in others])
        step = _median([s.step_s for s in others])
        who = _ranks([s.rank for s in others])
        verb = "waits" if len(others) == 1 else "wait"
        head = (
            f"rank {self.rank} is the slow one: {who} {verb} {_ms(wait)} of each {_ms(step)} step "
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
            tail = f"rank {self.rank}'s step reads its input for {_ms(me.input_s)}, {whose} {_ms(theirs)}"
        else:
            tail = f"rank {self.rank}'s step takes {_ms(me.compute_s)} before the all-reduce, {whose} {_ms(theirs)}"
        return f"{head}{tail} ({WHY[self.component]})"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.1f} ms"


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


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
        and all(s.sampled for s in splits)
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
        parts = [_median([s.component(n) for s in seen]) for n in _PARTS]
        steps, sampled = max(s.steps for s in seen), all(s.sampled for s in seen)
        between, callback, step, got, compute, wait = parts
        merged.append(RankSplit(rank, steps, between, callback, step, got, compute, wait, sampled))
    best = min((s.work_s for s in merged), default=0.0)
    return tuple(
        dataclasses.replace(s, score=round(min(1.0, best / s.work_s), 3) if s.work_s > 0 else 1.0) for s in merged
    )


_WIDTHS = (4, 7, 8, 6, 7, 6, 5, 5)
#: Sampled steps (the latest every rank sampled) whose median shares of wait and input a poll uses.
SAMPLES = 5


def rank_table(splits: Sequence[RankSplit]) -> list[str]:
    """The per-rank table the job's summary prints: ms per step in each part, the score, the steps.

    >>> for line in rank_table([RankSplit(0, 300, 0.001, 0.0, 0.055, 0.0, 0.005, 0.05, False, 1.0),
    ...                         RankSplit(1, 300, 0.051, 0.0, 0.005, 0.0, 0.005, 0.0, False, 0.107)]):
    ...     print(line)
    rank  between  callback   input  compute    wait  score  steps
       0      1.0       0.0     0.0      5.0    50.0   1.00    300
       1     51.0       0.0     0.0      5.0     0.0   0.11    300
    """
    head = ("rank", "between", "callback", "input", "compute", "wait", "score", "steps")
    lines = ["  ".join(f"{h:>{w}}" for h, w in zip(head, _WIDTHS))]
    for s in splits:
        parts = [s.between_s, s.callback_s, s.input_s, s.compute_s, s.wait_s]
        cells = [str(s.rank), *(f"{p * 1e3:.1f}" for p in parts), f"{s.score:.2f}", str(s.steps)]
        lines.append("  ".join(f"{c:>{w}}" for c, w in zip(cells, _WIDTHS)))
    return lines


class SlowRankWatch:
    """Keeps what the polls saw; names the slow rank once it persists, and again when it changes or ends.

    Args:
        policy: when a rank counts as slow.
        say: prints a line for people.
    """

    def __init__(self, policy: SlowRankPolicy, say: Callable[[str], None]) -> None:
        self.policy = policy
        self.say = say
        self.history: list[tuple[float, tuple[RankSplit, ...]]] = []  # (time, every rank's split) per poll
        self.named: SlowRank | None = None
        self.said: list[str] = []
        self._candidate: tuple[int, str] | None = None
        self._streak = 0
        self._done: dict[int, int] = {}
        self._samples: dict[int, dict[int, tuple[int, float, float, float, float]]] = {}  # rank -> step -> sample
        self.ever: set[tuple[int, str]] = set()  # (rank, component) named while the job ran

    def poll(self, records: Sequence[RankProgress], now: float) -> None:
        """One poll's records: counted when every rank finished steps since the last counted poll."""
        if not self.policy.enabled or len(records) < 2:
            return
        if any(r.done <= self._done.get(r.rank, -1) for r in records):
            return  # no new steps everywhere (a stall, a chief's checkpoint): nothing to add
        self._done = {r.rank: r.done for r in records}
        splits = split_ranks(self._with_common_samples(records), self.policy.min_steps)
        if not splits:
            return
        if len(self.history) < 100_000:
            self.history.append((now, splits))
        slow = find_slow_rank(splits, self.policy)
        key = (slow.rank, slow.component) if slow else None
        self._streak = self._streak + 1 if key == self._candidate else 1
        self._candidate = key
        if self._streak < self.policy.polls:
            return
        named = (self.named.rank, self.named.component) if self.named else None
        if key != named:
            if slow is None and self.named is not None:
                self._tell(f"tfdevices: rank {self.named.rank} is no longer the slow one: the ranks wait alike")
            elif slow is not None:
                self.ever.add((slow.rank, slow.component))
                self._tell("tfdevices: " + slow.reason())
        self.named = slow

    def _tell(self, line: str) -> None:
        self.said.append(line)
        self.say(line)

    def _with_common_samples(self, records: Sequence[RankProgress]) -> list[RankProgress]:
        """The records with each rank's sample taken over the latest steps every rank sampled (up to
        :data:`SAMPLES`; the median share of wait and input): ranks that spaced their samples apart
        meet on the multiples of the larger spacing; without a common step, no sample.
        """
        for r in records:
            if r.sample is not None:
                kept = self._samples.setdefault(r.rank, {})
                kept[r.sample[0]] = r.sample
                while len(kept) > 4 * SAMPLES:
                    del kept[min(kept)]
        common = set.intersection(*(set(self._samples.get(r.rank, ())) for r in records))
        steps = sorted(common)[-SAMPLES:]
        out = []
        for r in records:
            sample = None
            if steps:
                seen = [self._samples[r.rank][n] for n in steps]
                wait = _median([w / t for _, t, w, _, _ in seen if t > 0])
                got = _median([i / t for _, t, _, i, _ in seen if t > 0])
                sample = (steps[-1], 1.0, wait, got, _median([c for *_, c in seen]))
            out.append(dataclasses.replace(r, sample=sample))
        return out

    def lines(self) -> list[str]:
        """The job's summary for the console: the table, the slow rank or the link, and what would help."""
        if not self.policy.enabled or not self.history:
            return []
        splits, slow, link = self.summary()
        how = "sampled steps" if all(s.sampled for s in splits) else "no sampled step: wait inferred"
        lines = [
            f"each rank's step, ms (median of {len(self.history)} looks; {how}):",
            *rank_table(splits),
        ]
        if slow is not None:
            lines.append("over the job, " + slow.reason())
            if slow.component == "compute":
                lines.append(
                    "  a slower device: `tfdevices.measure_devices()` measures each; weighting each rank's share of "
                    "the batch by its speed (the rank weights) would let the others stop waiting"
                )
        elif link:
            lines.append("every rank waits in the all-reduce most of its step: the link is the bottleneck, not a rank")
        else:
            seen = find_slow_rank(splits, self.policy)  # over the job's medians, never in looks in a row
            if seen is None:
                lines.append("no slow rank: the ranks wait alike")
            else:
                lines.append(
                    f"no slow rank named: rank {seen.rank} looks slow over the job's steps ({WHY[seen.component]}), "
                    f"but was not in {self.policy.polls} looks in a row while it ran: too few looks to tell"
                )
        return lines

    def summary(self) -> tuple[tuple[RankSplit, ...], SlowRank | None, bool]:
        """Every rank's split over the job (medians of the polls), the slow rank it shows (one named while
        the job ran), and whether the link is the bottleneck.
        """
        polls = [s for _, s in self.history]
        measured = [s for s in polls if all(r.sampled for r in s)]
        splits = median_splits(measured or polls)  # where samples came, the polls before them are left out
        slow = find_slow_rank(splits, self.policy)
        if slow is not None and (slow.rank, slow.component) not in self.ever:
            slow = None  # never persistent while the job ran: not named over it either
        return splits, slow, link_bound(splits)


__all__ = [
    "SLOW_RANK_ENV",
    "WHY",
    "RankSplit",
    "SlowRank",
    "SlowRankPolicy",
    "SlowRankWatch",
    "find_slow_rank",
    "link_bound",
    "median_splits",
    "policy_from_env",
    "rank_table",
    "split_ranks",
]
