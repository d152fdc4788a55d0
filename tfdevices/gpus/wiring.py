"""The best-linked set of N GPUs: exact, bounded, pure.

Among candidates ``0 .. n-1`` with a link rank for every pair (higher is better,
see :func:`tfdevices.gpus.topology.rank`), :func:`best_linked_set` returns the set
of ``count`` candidates that is best by, in turn:

1. its weakest link (all NVLink beats one PCIe hop; same PCIe switch beats a
   host bridge; one socket beats crossing the SMP link; more bonded NVLinks beat fewer);
2. the sum of its links' ranks (more NVLinks in all);
3. the sum of the candidates' ``prefer`` values (e.g. free memory);
4. the lowest positions (a deterministic tie-break).

How: the largest weakest link ``w*`` is the highest rank at which the graph of
links ``>= w*`` has a clique of ``count`` nodes; every such clique has weakest
link ``w*`` exactly, so the answer is the best clique of that graph by 2-4, found
by enumerating its cliques (bit sets, pruned by the nodes left). At most
:data:`MAX_CANDIDATES` candidates are searched, so the work is at most
C(16, 8) = 12,870 sets.

>>> ranks = {(0, 1): 104, (2, 3): 104}  # two NVLink bridges (NV4); every other pair across sockets (SYS: 10)
>>> best = best_linked_set(4, 2, lambda a, b: ranks.get((a, b), 10), prefer=[46, 30, 46, 20])
>>> best.members, best.weakest, best.considered
((0, 1), 104, 6)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

from tfdevices.core.errors import InputError
from tfdevices.core.record_class import record

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the listing path
if TYPE_CHECKING:
    from typing import Any


MAX_CANDIDATES = 16
"""The most candidates searched exactly (C(16, 8) = 12,870 sets at most)."""


@record
class LinkedSet:
    """A set of candidates and how well they are linked.

    Attributes:
        members: the chosen candidates' positions, ascending.
        weakest: the rank of the weakest link among them (``None`` for a single candidate).
        total: the sum of the ranks of all their links.
        considered: how many sets of ``count`` candidates there were (C(n, count)).
    """

    members: tuple[int, ...]
    weakest: int | None
    total: int
    considered: int


def key(members: Sequence[int], link: Callable[[int, int], int], prefer: Sequence[float]) -> tuple[Any, ...]:
    """The order :func:`best_linked_set` maximises, for one set (used by tests' brute force too).

    >>> key((0, 1), lambda a, b: 104, [1.0, 2.0])
    (104, 104, 3.0, (0, -1))
    """
    pairs = [link(a, b) for a, b in itertools.combinations(members, 2)]
    return (min(pairs) if pairs else 0, sum(pairs), sum(prefer[m] for m in members), tuple(-m for m in members))


def best_linked_set(n: int, count: int, link: Callable[[int, int], int], prefer: Sequence[float]) -> LinkedSet:
    """The best-linked set of ``count`` of ``n`` candidates (see the module's order).

    Args:
        n: the number of candidates (positions ``0 .. n-1``), at most :data:`MAX_CANDIDATES`.
        count: how many to choose, 1 .. n.
        link: the rank of the link between two positions (symmetric).
        prefer: a value per position; more is better among equally linked sets.

    Returns:
        A frozen :class:`LinkedSet`.

    Raises:
        InputError: ``n`` is past :data:`MAX_CANDIDATES`, ``count`` is not in 1..n,
            or ``prefer`` has not ``n`` values.
    """
    if not 0 < n <= MAX_CANDIDATES or not 0 < count <= n or len(prefer) != n:
        raise InputError(
            f"best_linked_set(n={n}, count={count}, {len(prefer)} preferences): needs "
            f"1 <= count <= n <= {MAX_CANDIDATES} and one preference per candidate.",
            hint="choose among at most 16 candidates.",
        )
    considered = math.comb(n, count)
    if count == 1:
        only = max(range(n), key=lambda i: (prefer[i], -i))
        return LinkedSet((only,), None, 0, considered)
    ranks = [[link(a, b) if a != b else 0 for b in range(n)] for a in range(n)]
    for level in sorted({ranks[a][b] for a in range(n) for b in range(a + 1, n)}, reverse=True):
        adjacent = [sum(1 << b for b in range(n) if b != a and ranks[a][b] >= level) for a in range(n)]
        best = _best_clique(n, count, adjacent, ranks, prefer)
        if best is not None:
            return LinkedSet(best, level, sum(ranks[a][b] for a, b in itertools.combinations(best, 2)), considered)
    raise AssertionError("unreachable: at the lowest level every set is a clique")  # pragma: no cover


def _best_clique(
    n: int, count: int, adjacent: list[int], ranks: list[list[int]], prefer: Sequence[float]
) -> tuple[int, ...] | None:
    """The best clique of ``count`` nodes by (sum of ranks, sum of prefer, lowest positions); ``None``: none."""
    best: list[Any] = [None, None]  # [key, members]

    def grow(members: tuple[int, ...], allowed: int, total: int, value: float) -> None:
        if len(members) == count:
            k = (total, value, tuple(-m for m in members))
            if best[0] is None or k > best[0]:
                best[0], best[1] = k, members
            return
        rest = allowed
        while rest:
            low = rest & -rest
            nxt = low.bit_length() - 1
            rest ^= low
            if bin(rest).count("1") + 1 < count - len(members):  # too few nodes left after this one
                return
            grow(
                members + (nxt,), rest & adjacent[nxt], total + sum(ranks[nxt][m] for m in members), value + prefer[nxt]
            )

    grow((), (1 << n) - 1, 0, 0)
    members: tuple[int, ...] | None = best[1]
    return members
