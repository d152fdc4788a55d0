"""Which measured candidates the rounds cannot tell from the fastest, and which one tune names (pure).

Timings on a shared machine drift (measured here: one candidate timed in two runs, 13.6 ms a step
in one and 9.1 ms in the next), so tune times its candidates in rounds, interleaved in time: round
``i`` times one window of each candidate, one after another. Two candidates are compared by their
**paired ratios**: round by round, ``a_i / b_i``, two windows a few seconds apart, so a slow minute
of the machine weighs on both. The ratio's estimate is the median over the rounds, and its 95%
interval the sign test's (order statistics of the ratios): a shared machine's load is heavy-tailed
and not the same for every candidate (under load, a candidate with more threads gets more of the
cores), so the interval assumes nothing of its shape. It needs 6 rounds; fewer show nothing for sure.

A candidate is **tied** with the fastest unless the rounds show, at 95%, that it is slower by more
than the practical margin (``margin``: 3% by default is not worth another strategy): the lower end
of its interval is under ``1 + margin``. Fewer than 6 rounds show nothing (no interval). The fastest and the
candidates tied with it are the **contenders**: the answer depends on them alone, and further
rounds time only them. Among the tied, the winner is the one with the fewest devices, then the
simplest strategy (:data:`SIMPLER_FIRST`), then the fastest.

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

__all__ = ["DEFAULT_MARGIN", "SIMPLER_FIRST", "Comparison", "Timing", "Verdict", "judge", "paired"]

#: Strategies from the simplest: one device, a stock ``tf.distribute`` strategy, the layers
#: placed by tfdevices, several processes.
SIMPLER_FIRST = STRATEGIES
#: A difference under this share is not worth another strategy: a tie, however sure.
DEFAULT_MARGIN = 0.03


@dataclass(frozen=True)
class Timing:
    """One candidate's rounds.

    Attributes:
        name: the candidate's name (``"split:2"``).
        strategy: one of :data:`SIMPLER_FIRST`.
        devices: how many devices it runs on.
        rounds_s: each round's median step time, in seconds, in the order of the rounds (round ``i``
            of every candidate ran at about the same time; empty: it did not run).
    """

    name: str
    strategy: str
    devices: int
    rounds_s: tuple[float, ...]


@dataclass(frozen=True)
class Comparison:
    """A candidate against the fastest, by their paired rounds.

    Attributes:
        name: the candidate.
        fastest: the fastest candidate.
        ratio: ``name``'s step time over the fastest's (the median over the rounds; 1.12: 12% slower).
        low, high: the ratio's 95% interval (``None``: fewer than 6 rounds, no interval).
        rounds: the rounds both ran.
        tied: whether the rounds cannot show it slower by more than the margin.
    """

    name: str
    fastest: str
    ratio: float
    low: float | None
    high: float | None
    rounds: int
    tied: bool

    def line(self) -> str:
        """``split:2 is 12% faster than mirrored:2 (95% interval 8-16%, 9 rounds)``: how sure the ranking is."""
        gap = f"{self.ratio - 1:.0%} faster than" if self.ratio >= 1 else f"{1 - self.ratio:.0%} slower than"
        sure = f"{self.rounds} rounds: no interval"
        if self.low is not None and self.high is not None:
            sure = f"95% interval {self.low - 1:+.0%} to {self.high - 1:+.0%}, {self.rounds} rounds"
        return f"{self.fastest} is {gap} {self.name} ({sure})"


@dataclass(frozen=True)
class Verdict:
    """What the rounds say.

    Attributes:
        fastest: a candidate no other beats round by round (by median paired ratio), else the fastest
            against the candidate with the most rounds (``None``: none ran).
        tied: the fastest and every candidate tied with it, fastest first: the contenders.
        winner: the one tune names: the fastest when nothing is tied with it, else the rule's pick.
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
    middle = ratios[n // 2] if n % 2 else math.sqrt(ratios[n // 2 - 1] * ratios[n // 2])
    k = _rank(n)
    if k == 0:
        return middle, None, None, n
    return middle, ratios[k - 1], ratios[n - k], n


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


def _fastest(ran: Sequence[Timing]) -> Timing:
    """The fastest: one that no other beats round by round (its median ratio to each other one is at most 1),
    else the fastest by median ratio against the candidate with the most rounds (ties: the earlier).
    """
    reference = max(ran, key=lambda t: len(t.rounds_s))
    ordered = sorted(ran, key=lambda t: paired(t.rounds_s, reference.rounds_s)[0])
    unbeaten = (t for t in ordered if all(paired(t.rounds_s, o.rounds_s)[0] <= 1 for o in ran if o is not t))
    return next(unbeaten, ordered[0])


def judge(timings: Sequence[Timing], *, margin: float = DEFAULT_MARGIN) -> Verdict:
    """The fastest candidate, those tied with it, and the winner (see the module's rule).

    Args:
        timings: every candidate; those with no rounds did not run and are left out.
        margin: a difference under this share is a tie (``0.03``: 3%).

    Returns:
        A frozen :class:`Verdict`.
    """
    ran = [t for t in timings if t.rounds_s]
    if not ran:
        return Verdict(None, (), None, "no candidate ran")
    fastest = _fastest(ran)
    comparisons = []
    for t in ran:
        if t is not fastest:
            ratio, low, high, n = paired(t.rounds_s, fastest.rounds_s)
            comparisons.append(Comparison(t.name, fastest.name, ratio, low, high, n, low is None or low < 1 + margin))
    comparisons.sort(key=lambda c: c.ratio)
    tied = (fastest, *(t for c in comparisons if c.tied for t in ran if t.name == c.name))
    names = tuple(t.name for t in tied)
    if len(tied) == 1:
        why = "the only candidate that ran" if not comparisons else f"the fastest, sure: {comparisons[0].line()}"
        return Verdict(fastest.name, names, fastest.name, why, tuple(comparisons))
    ratios = {c.name: c.ratio for c in comparisons} | {fastest.name: 1.0}
    winner = min(tied, key=lambda t: _rule(t, ratios[t.name]))
    others = [t for t in tied if t is not winner]
    reason = (
        f"the rounds cannot tell it from {', '.join(t.name for t in others)} by more than {margin:.0%}; "
        f"picked by the rule: {_why(winner, others)}"
    )
    return Verdict(fastest.name, names, winner.name, reason, tuple(comparisons))
