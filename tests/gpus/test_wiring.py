"""The best-linked set search against brute force: tables, every fixture, and random graphs (hypothesis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from tfdevices.core.errors import InputError
from tfdevices.gpus.wiring import MAX_CANDIDATES, best_linked_set, key


def brute(n: int, count: int, link, prefer) -> tuple[int, ...]:
    return max(itertools.combinations(range(n), count), key=lambda s: key(s, link, prefer))


def table(matrix):
    return lambda a, b: matrix[a][b]


NV4, SYS, PIX, NODE = 104, 10, 50, 20
PCIE_BOX = [[0, NV4, SYS, SYS], [NV4, 0, SYS, SYS], [SYS, SYS, 0, NV4], [SYS, SYS, NV4, 0]]


@pytest.mark.parametrize(
    "count, prefer, want",
    [
        (2, [46, 30, 46, 20], (0, 1)),  # the NVLink pair beats the two emptiest GPUs on different sockets
        (2, [10, 30, 46, 20], (2, 3)),  # of two NVLink pairs, the one with more free memory
        (2, [46, 46, 46, 46], (0, 1)),  # all equal: lowest indices
        (3, [46, 30, 46, 20], (0, 1, 2)),  # no 3 GPUs are all NVLinked: most links in all, then memory
        (4, [1, 1, 1, 1], (0, 1, 2, 3)),
        (1, [1, 5, 5, 2], (1,)),
    ],
)
def test_pcie_box(count, prefer, want):
    best = best_linked_set(4, count, table(PCIE_BOX), prefer)
    assert best.members == want == brute(4, count, table(PCIE_BOX), prefer)


def test_weakest_link_comes_before_the_sum_of_links():
    # {0,1,2}: NV4, NV4, SYS (sum 218, weakest SYS); {2,3,4}: all PIX (sum 150, weakest PIX): PIX wins
    m = [[0] * 5 for _ in range(5)]
    for a, b in itertools.combinations(range(5), 2):
        m[a][b] = m[b][a] = PIX if {a, b} <= {2, 3, 4} else NV4 if {a, b} in ({0, 1}, {0, 2}) else SYS
    best = best_linked_set(5, 3, table(m), [9, 9, 9, 0, 0])
    assert best.members == (2, 3, 4) == brute(5, 3, table(m), [9, 9, 9, 0, 0]) and best.weakest == PIX


@pytest.mark.parametrize(
    "n, count, prefer",
    [
        (0, 1, []),
        (3, 0, [1, 1, 1]),
        (3, 4, [1, 1, 1]),
        (3, 2, [1, 1]),
        (MAX_CANDIDATES + 1, 2, [1] * (MAX_CANDIDATES + 1)),
    ],
)
def test_bounds_are_checked(n, count, prefer):
    with pytest.raises(InputError, match=r"^best_linked_set\(n="):
        best_linked_set(n, count, lambda a, b: 1, prefer)


def test_sixteen_gpus_all_alike_is_exhaustive_and_bounded():
    best = best_linked_set(16, 8, lambda a, b: 112, list(range(16)))
    assert best.members == tuple(range(8, 16)) and best.considered == 12870


RANKS = st.sampled_from([0, 10, 20, 30, 40, 50, 101, 102, 104, 112])


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 9))
    m = [[0] * n for _ in range(n)]
    for a, b in itertools.combinations(range(n), 2):
        m[a][b] = m[b][a] = draw(RANKS)
    count = draw(st.integers(1, n))
    prefer = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # few values: many ties
    return n, count, m, prefer


@settings(max_examples=400, deadline=None)
@given(graphs())
def test_equals_brute_force_on_random_graphs(case):
    n, count, m, prefer = case
    best = best_linked_set(n, count, table(m), prefer)
    want = brute(n, count, table(m), prefer)
    assert best.members == want
    pairs = [m[a][b] for a, b in itertools.combinations(want, 2)]
    assert best.weakest == (min(pairs) if pairs else None) and best.total == sum(pairs)
