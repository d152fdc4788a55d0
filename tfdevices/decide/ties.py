"""Which measured candidates the rounds cannot tell from the fastest, and which one tune names (pure).

Timings on a shared machine drift (measured here: one candidate timed in two runs, 13.6 ms a step
in one and 9.1 ms in the next), so tune times its candidates in rounds, interleaved in time: round
``i`` times one window of each candidate, one after another. Two candidates are compared by their
**paired ratios**: round by round, ``a_i / b_i``, two windows a few seconds apart, so a slow minute
of the machine weighs on both. The ratio's estimate is the median over the rounds, and its 95%
interval the sign test's (order statistics of the ratios): a shared machine's load is heavy-tailed
and not the same for every candidate (under load, a candidate with more threads gets more of the
cores), so the interval assumes nothing of its shape. It needs 6 rounds; fewer show nothing for sure.

A process also has a speed of its own: the same candidate in two processes, timed in the same rounds,
differed by up to 12% here (and the halves of one process's rounds agreed), so one process per
candidate ranks two processes, not two candidates, and the next run's processes may rank them the
other way round. tune runs each candidate in several processes (one :class:`Timing` each, the same
name) and compares every process of one with every process of the other, each pair by its own paired
rounds: the ratio is the median over all those rounds, and the interval spans every pair's interval.

A candidate is **tied** with the fastest unless every pair of processes shows, at 95%, that it is
slower by more than the practical margin (``margin``: 3% by default is not worth another strategy):
the lowest end of their intervals is under ``1 + margin``. Fewer than 6 rounds show nothing (no
interval). The fastest and the candidates tied with it are the **contenders**: the answer depends on
them alone, and further rounds time only them.

The winner is the one with the fewest devices, then the simplest strategy (:data:`SIMPLER_FIRST`),
then the fastest, among the fastest and the tied candidates the rounds measure within the margin of
it (their median ratio under ``1 + margin``). A tied candidate measured further off stays in the tie
set (the rounds cannot show it slower for sure) but is not named: the rounds point away from it, and
naming the simplest candidate at the far edge of the tie set would name a different one in each run
(measured: ``benchmarks/RESULTS.md``).

>>> v = judge([Timing("split:2", "split", 2, (0.0100, 0.0103, 0.0098, 0.0101, 0.0100, 0.0102)),
...            Timing("mirrored:2", "mirrored", 2, (0.0110, 0.0117, 0.0111, 0.0113, 0.0114, 0.0112))])
>>> v.winner, v.tied
('split:2', ('split:2',))
>>> v.comparisons[0].line()
'split:2 is 13% faster than mirrored:2 (95% interval +10% to +14%, 6 rounds)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tfdevices.core.errors import InputError
from tfdevices.decide.candidates import STRATEGIES

#: Strategies from the simplest: one device, a stock ``tf.distribute`` strategy, the layers
#: placed by tfdevices, several processes.
SIMPLER_FIRST = STRATEGIES
#: A difference under this share is not worth another strategy: a tie, however sure.
DEFAULT_MARGIN = 0.03


@dataclass(frozen=True)
class Timing:
    """One process's rounds, of one candidate (a candidate in several processes: one Timing each).

    Attributes:
        name: the candidate's name (``"split:2"``).
        strategy: one of :data:`SIMPLER_FIRST`.
        devices: how many devices it runs on.
        rounds_s: each round's median step time, in seconds, in the order of the rounds (round ``i``
            of every candidate ran at about the same time; empty: it did not run).
        process: which of the candidate's processes (0, 1, ...).
    """

    name: str
    strategy: str
    devices: int
    rounds_s: tuple[float, ...]
    process: int = 0


@dataclass(frozen=True)
class Comparison:
    """A candidate against the fastest, by their paired rounds.

    Attributes:
        name: the candidate.
        fastest: the fastest candidate.
        ratio: ``name``'s step time over the fastest's (the median over the rounds; 1.12: 12% slower).
        low, high: the ratio's 95% interval (``None``: fewer than 6 rounds, no interval).
        rounds: the rounds both ran (the fewest of any pair of their processes).
        tied: whether the rounds cannot show it slower by more than the margin.
        pairs: the pairs of processes compared (1: one process each).
    """

    name: str
    fastest: str
    ratio: float
    low: float | None
    high: float | None
    rounds: int
    tied: bool
    pairs: int = 1

    def line(self) -> str:
        """``split:2 is 12% faster than mirrored:2 (95% interval 8-16%, 9 rounds)``: how sure the ranking is."""
        gap = f"{self.ratio - 1:.0%} faster than" if self.ratio >= 1 else f"{1 - self.ratio:.0%} slower than"
        timed = f"{self.rounds} rounds" + (f" x {self.pairs} pairs of processes" if self.pairs > 1 else "")
        sure = f"{timed}: no interval"
        if self.low is not None and self.high is not None:
            sure = f"95% interval {self.low - 1:+.0%} to {self.high - 1:+.0%}, {timed}"
        return f"{self.fastest} is {gap} {self.name} ({sure})"


@dataclass(frozen=True)
class Verdict:
    """What the rounds say.

    Attributes:
        fastest: a candidate no other beats round by round (by median paired ratio), else the fastest
            against the candidate with the most rounds (``None``: none ran).
        tied: the fastest and every candidate tied with it, fastest first: the contenders.
        winner: the one tune names: the rule's pick among the fastest and the tied candidates measured
            within the margin of it (the fastest, when none is).
        reason: why, in words (the table's winner line).
        comparisons: every other candidate against the fastest, fastest-ranked first.
    """

    fastest: str | None
    tied: tuple[str, ...]
    winner: str | None
    reason: str
    comparisons: tuple[Comparison, ...] = ()

    @property
    def contenders(self) -> tuple[str, ...]:
        """The candidates the answer depends on (the ones further rounds time)."""
        return self.tied


def _rank(n: int) -> int:
    """The rank ``k`` of the order statistics ``(x_k, x_{n-k+1})`` that bound the median at 95% (0: no interval).

    The sign test's interval: the median lies outside it only if ``k`` or fewer of ``n`` rounds fall on one
    side, at most 2.5% likely for each side (binomial, p = 1/2).

    >>> [_rank(n) for n in (5, 6, 9, 20)]
    [0, 1, 2, 6]
    """
    k, below = 0, 0.0
    while True:
        below += math.comb(n, k) / 2**n
        if below > 0.025:
            return k
        k += 1


def paired(a: Sequence[float], b: Sequence[float]) -> tuple[float, float | None, float | None, int]:
    """``a`` over ``b`` by their paired rounds: (median ratio, 95% low, 95% high, rounds).

    Rounds are paired by position (round ``i`` of each); the longer one's extra rounds are left out.
    The interval is the sign test's (:func:`_rank`): it assumes nothing of how a shared machine's
    load is spread (one busy round moves it by one rank, not by its size), and needs 6 rounds; fewer
    have no interval (``None``): they show nothing for sure.

    Raises:
        InputError: no round in common, or a time that is not positive.

    >>> ratio, low, high, n = paired([0.011, 0.022, 0.0105, 0.011, 0.0108, 0.0111], [0.010, 0.020, 0.0100] * 2)
    >>> round(ratio, 3), round(low, 3), round(high, 3), n
    (1.1, 0.54, 1.11, 6)
    """
    n = min(len(a), len(b))
    if n == 0 or any(not (x > 0) for x in (*a[:n], *b[:n])):
        raise InputError("paired rounds: each candidate needs one positive round time.", hint="pass rounds' medians.")
    ratios = sorted(x / y for x, y in zip(a[:n], b[:n]))
    middle = _middle(ratios)
    k = _rank(n)
    if k == 0:
        return middle, None, None, n
    return middle, ratios[k - 1], ratios[n - k], n


def compare(
    a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]
) -> tuple[float, float | None, float | None, int, int]:
    """Candidate ``a`` over ``b``, each given as its processes' rounds: (ratio, 95% low, 95% high, rounds, pairs).

    Every process of ``a`` is paired with every process of ``b`` (:func:`paired`, round by round):
    the ratio is the median over all those rounds' ratios, the interval spans every pair's interval
    (``None`` when any pair has fewer than 6 rounds), and ``rounds`` is the fewest any pair shares.
    One process each is :func:`paired` itself.

    >>> ratio, low, high, n, pairs = compare([[0.011] * 6, [0.012] * 6], [[0.010] * 6])
    >>> round(ratio, 3), round(low, 3), round(high, 3), n, pairs
    (1.149, 1.1, 1.2, 6, 2)
    """
    each = [paired(x, y) for x in a for y in b]
    n = min(r[3] for r in each)
    if len(each) == 1:
        return (*each[0], 1)
    ratios = sorted(x / y for xs in a for ys in b for x, y in zip(xs, ys))
    middle = _middle(ratios)
    if any(r[1] is None for r in each):
        return middle, None, None, n, len(each)
    return middle, min(r[1] for r in each), max(r[2] for r in each), n, len(each)  # type: ignore[type-var]


def _middle(ordered: Sequence[float]) -> float:
    """The median of sorted ratios (an even count: the geometric mean of the middle two)."""
    n = len(ordered)
    return ordered[n // 2] if n % 2 else math.sqrt(ordered[n // 2 - 1] * ordered[n // 2])


def _rule(t: Timing, ratio: float) -> tuple[int, int, float]:
    order = SIMPLER_FIRST.index(t.strategy) if t.strategy in SIMPLER_FIRST else len(SIMPLER_FIRST)
    return t.devices, order, ratio


def _why(winner: Timing, others: Sequence[Timing]) -> str:
    """Which key of the rule decided, in words."""
    key = _rule(winner, 0.0)
    if all(_rule(o, 0.0)[0] > key[0] for o in others):
        return f"the fewest devices ({winner.devices})"
    if all(_rule(o, 0.0)[:2] > key[:2] for o in others):
        return f"the fewest devices ({winner.devices}), then the simplest strategy ({winner.strategy})"
    return f"the fewest devices ({winner.devices}) and the simplest strategy ({winner.strategy}), then the fastest"


def _grouped(timings: Sequence[Timing]) -> dict[str, list[Timing]]:
    """The processes that ran, by candidate (first seen first), each candidate's in process order."""
    groups: dict[str, list[Timing]] = {}
    for t in timings:
        if t.rounds_s:
            groups.setdefault(t.name, []).append(t)
    return {name: sorted(group, key=lambda t: t.process) for name, group in groups.items()}


def _rounds(group: Sequence[Timing]) -> list[tuple[float, ...]]:
    return [t.rounds_s for t in group]


def _fastest(groups: dict[str, list[Timing]]) -> str:
    """The fastest: one that no other beats round by round (its median ratio to each other one is at most 1),
    else the fastest by median ratio against the candidate with the most rounds (ties: the earlier).
    """
    rounds = {name: _rounds(group) for name, group in groups.items()}
    reference = max(rounds, key=lambda name: sum(map(len, rounds[name])))
    ordered = sorted(rounds, key=lambda name: compare(rounds[name], rounds[reference])[0])
    unbeaten = (a for a in ordered if all(compare(rounds[a], rounds[b])[0] <= 1 for b in rounds if b != a))
    return next(unbeaten, ordered[0])


def judge(timings: Sequence[Timing], *, margin: float = DEFAULT_MARGIN) -> Verdict:
    """The fastest candidate, those tied with it, and the winner (see the module's rule).

    Args:
        timings: every candidate's processes (one :class:`Timing` each); those with no rounds did not
            run and are left out.
        margin: a difference under this share is a tie (``0.03``: 3%).

    Returns:
        A frozen :class:`Verdict`.
    """
    groups = _grouped(timings)
    if not groups:
        return Verdict(None, (), None, "no candidate ran")
    fastest = _fastest(groups)
    comparisons = []
    for name, group in groups.items():
        if name != fastest:
            ratio, low, high, n, pairs = compare(_rounds(group), _rounds(groups[fastest]))
            close = low is None or low < 1 + margin
            comparisons.append(Comparison(name, fastest, ratio, low, high, n, close, pairs))
    comparisons.sort(key=lambda c: c.ratio)
    tied = [groups[fastest][0], *(groups[c.name][0] for c in comparisons if c.tied)]
    names = tuple(t.name for t in tied)
    if len(tied) == 1:
        why = "the only candidate that ran" if not comparisons else f"the fastest, sure: {comparisons[0].line()}"
        return Verdict(fastest, names, fastest, why, tuple(comparisons))
    ratios = {c.name: c.ratio for c in comparisons} | {fastest: 1.0}
    near = [t for t in tied if ratios[t.name] < 1 + margin]
    off = ", ".join(f"{t.name} ({ratios[t.name] - 1:+.0%})" for t in tied if t not in near)
    off = f"; tied but measured more than {margin:.0%} slower, so not named: {off}" if off else ""
    if len(near) == 1:
        return Verdict(fastest, names, fastest, f"the fastest{off}", tuple(comparisons))
    winner = min(near, key=lambda t: _rule(t, ratios[t.name]))
    others = [t for t in near if t is not winner]
    reason = (
        f"the rounds cannot tell it from {', '.join(t.name for t in others)} by more than {margin:.0%}; "
        f"picked by the rule: {_why(winner, others)}{off}"
    )
    return Verdict(fastest, names, winner.name, reason, tuple(comparisons))
