"""Which measured candidates are tied with the fastest, and which one tune names (pure).

Timings on a shared machine move from one process to the next (measured here: one candidate
timed twice, 6% apart), so the fastest median alone is not a winner. Each candidate's rounds
(each its own fresh process) give a **spread**: the interval from its fastest round's median to
its second-fastest round's median, that is, how closely its best measurement repeated. A
candidate with one round has no spread (a point). A candidate whose spread reaches the
fastest's (its fastest round is not slower than the fastest candidate's second-fastest round)
is **tied** with it. Among the tied, the winner is the one with the fewest devices, then the
simplest strategy (:data:`SIMPLER_FIRST`), then the fastest.

More rounds can separate candidates: a candidate's second-fastest round only gets faster as
rounds are added, so the fastest's spread narrows when it repeats.

>>> v = judge([Timing("split:2", "split", 2, (0.0094, 0.0097)), Timing("split:4", "split", 4, (0.0093, 0.0099)),
...            Timing("mirrored:4", "mirrored", 4, (0.0160, 0.0164))])
>>> v.fastest, v.tied, v.winner
('split:4', ('split:4', 'split:2'), 'split:2')
>>> v.reason
'tied within the noise with split:4; picked by the rule: the fewest devices (2)'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfdevices.core.errors import InputError
from tfdevices.decide.candidates import STRATEGIES

__all__ = ["SIMPLER_FIRST", "Timing", "Verdict", "judge", "spread"]

#: Strategies from the simplest: one device, a stock ``tf.distribute`` strategy, the layers
#: placed by tfdevices, several processes.
SIMPLER_FIRST = STRATEGIES


@dataclass(frozen=True)
class Timing:
    """One candidate's timed rounds.

    Attributes:
        name: the candidate's name (``"split:2"``).
        strategy: one of :data:`SIMPLER_FIRST`.
        devices: how many devices it runs on.
        rounds_s: each ok round's median step time, in seconds (any order; empty: it did not run).
    """

    name: str
    strategy: str
    devices: int
    rounds_s: tuple[float, ...]


@dataclass(frozen=True)
class Verdict:
    """What the rounds say.

    Attributes:
        fastest: the candidate with the fastest round (``None``: none ran).
        tied: the fastest and every candidate tied with it, fastest first (``()``: none ran).
        winner: the one tune names: the fastest when nothing is tied with it, else the rule's pick.
        reason: why, in words (the table's winner line).
    """

    fastest: str | None
    tied: tuple[str, ...]
    winner: str | None
    reason: str


def spread(rounds_s: Sequence[float]) -> tuple[float, float]:
    """``(fastest, second fastest)`` of a candidate's round medians; one round: ``(m, m)``.

    Raises:
        InputError: no rounds.

    >>> spread([0.012, 0.010, 0.011])
    (0.01, 0.011)
    """
    ordered = sorted(rounds_s)
    if not ordered:
        raise InputError("spread of no rounds: a candidate needs one timed round.", hint="pass its rounds' medians.")
    return ordered[0], ordered[min(1, len(ordered) - 1)]


def _rule(t: Timing) -> tuple[int, int, float]:
    order = SIMPLER_FIRST.index(t.strategy) if t.strategy in SIMPLER_FIRST else len(SIMPLER_FIRST)
    return t.devices, order, spread(t.rounds_s)[0]


def _why(winner: Timing, others: Sequence[Timing]) -> str:
    """Which key of the rule decided, in words."""
    key = _rule(winner)
    if all(_rule(o)[0] > key[0] for o in others):
        return f"the fewest devices ({winner.devices})"
    if all(_rule(o)[:2] > key[:2] for o in others):
        return f"the fewest devices ({winner.devices}), then the simplest strategy ({winner.strategy})"
    return f"the fewest devices ({winner.devices}) and the simplest strategy ({winner.strategy}), then the fastest"


def judge(timings: Sequence[Timing]) -> Verdict:
    """The fastest candidate, those tied with it, and the winner (see the module's rule).

    Args:
        timings: every candidate; those with no rounds did not run and are left out.

    Returns:
        A frozen :class:`Verdict`; ties on the fastest round go to the earlier candidate.
    """
    ran = [t for t in timings if t.rounds_s]
    if not ran:
        return Verdict(None, (), None, "no candidate ran")
    fastest = min(ran, key=lambda t: spread(t.rounds_s)[0])
    reach = spread(fastest.rounds_s)[1]
    tied = sorted((t for t in ran if spread(t.rounds_s)[0] <= reach), key=lambda t: spread(t.rounds_s)[0])
    tied.remove(fastest)
    tied.insert(0, fastest)
    names = tuple(t.name for t in tied)
    if len(tied) == 1:
        rest = sorted((t for t in ran if t is not fastest), key=lambda t: spread(t.rounds_s)[0])
        if not rest:
            return Verdict(fastest.name, names, fastest.name, "the only candidate that ran")
        gap = spread(rest[0].rounds_s)[0] / spread(fastest.rounds_s)[0] - 1
        return Verdict(
            fastest.name, names, fastest.name, f"the fastest, clear of the noise: {rest[0].name} is {gap:.1%} slower"
        )
    winner = min(tied, key=_rule)
    others = [t for t in tied if t is not winner]
    return Verdict(
        fastest.name,
        names,
        winner.name,
        f"tied within the noise with {', '.join(t.name for t in others)}; picked by the rule: {_why(winner, others)}",
    )
