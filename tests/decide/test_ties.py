"""Ties between candidates, from synthetic round timings (pure, no processes): exact tables.

Round ``i`` of every candidate ran at about the same time (interleaved: A B C, B C A, ...), so two
candidates are compared round by round: a slow minute of the machine weighs on both.
"""

from __future__ import annotations

import math
import statistics

import pytest

from tfdevices import InputError
from tfdevices.decide.ties import Timing, compare, judge, paired


def t(name: str, *rounds_ms: float) -> Timing:
    strategy, _, k = name.partition(":")
    devices = 1 if strategy == "one_device" else int(k)
    return Timing(name, strategy, devices, tuple(r / 1000 for r in rounds_ms))


def load(window: float) -> float:
    """How much slower the shared machine runs everything, ``window`` windows in: a slow stretch that passes."""
    return 1.0 + 1.0 * math.exp(-window / 8)


# ----------------------------------------------------------------------------- drift


def test_drift_that_flips_a_sequential_comparison_does_not_flip_the_interleaved_one():
    # split:2 takes 10.0 ms a step, mirrored:2 11.0 ms (10% slower), on a machine whose load falls off
    fast, slow, rounds = 0.010, 0.011, 8
    # sequential (all rounds of split:2, then all of mirrored:2): split:2 meets the slow stretch
    seq_fast = [fast * load(i) for i in range(rounds)]
    seq_slow = [slow * load(rounds + i) for i in range(rounds)]
    assert statistics.median(seq_fast) > statistics.median(seq_slow)  # the drift flips it: mirrored looks faster
    # interleaved as tune runs them: round i times split:2 then mirrored:2, the next round the other way round
    inter_fast = [fast * load(2 * i + i % 2) for i in range(rounds)]
    inter_slow = [slow * load(2 * i + 1 - i % 2) for i in range(rounds)]
    v = judge([t("mirrored:2", *(1000 * s for s in inter_slow)), t("split:2", *(1000 * s for s in inter_fast))])
    assert (v.fastest, v.winner, v.tied) == ("split:2", "split:2", ("split:2",))
    (c,) = v.comparisons
    assert c.name == "mirrored:2" and 1.03 < c.low < c.ratio < c.high  # sure it is slower by more than 3%
    # and the same rounds taken one candidate after the other are read the wrong way
    assert judge(
        [t("mirrored:2", *(1000 * s for s in seq_slow)), t("split:2", *(1000 * s for s in seq_fast))]
    ).winner == ("mirrored:2")


def test_one_slow_round_weighs_on_every_candidate_alike():
    # round 3 ran while the machine was busy: every candidate's window is 3x slower, the ranking holds
    v = judge([t("split:2", 10.0, 10.1, 30.2, 9.9, 10.0, 10.2), t("mirrored:2", 12.0, 12.2, 36.1, 11.9, 12.1, 12.2)])
    assert v.winner == "split:2" and v.comparisons[0].low > 1.15


# ----------------------------------------------------------------------------- ties


@pytest.mark.parametrize(
    "timings, fastest, tied, winner",
    [
        pytest.param(
            [
                t("one_device:CPU:0", 10.0, 10.3, 9.9, 10.0, 10.1, 10.0),
                t("split:2", 9.9, 10.2, 9.8, 9.9, 10.0, 9.9),
                t("mirrored:2", 16.0, 16.4, 15.9, 16.0, 16.1, 16.0),
            ],
            "split:2",
            ("split:2", "one_device:CPU:0"),
            "one_device:CPU:0",
            id="1% apart: under the margin, the fewest devices wins",
        ),
        pytest.param(
            [
                t("split:2", 9.0, 9.1, 9.0, 9.05, 9.1, 9.0),
                t("split:3", 9.6, 9.7, 9.62, 9.66, 9.7, 9.6),
                t("mirrored:2", 15.0, 15.2, 15.1, 15.1, 15.2, 15.0),
            ],
            "split:2",
            ("split:2",),
            "split:2",
            id="6% apart, repeated closely: separated",
        ),
        pytest.param(
            [t("split:2", 9.0, 12.0, 8.0, 9.0, 9.1, 8.9), t("split:3", 9.9, 10.0, 10.1, 9.9, 10.0, 10.0)],
            "split:2",
            ("split:2", "split:3"),
            "split:2",
            id="10% apart in most rounds, but one round disagrees: not told apart",
        ),
        pytest.param(
            [t("split:3", 9.0, 9.1, 9.0, 9.0, 9.1), t("split:2", 10.0, 10.1, 10.0, 10.0, 10.1)],
            "split:3",
            ("split:3", "split:2"),
            "split:3",
            id="five rounds tell nothing for sure: tied, and the one measured 11% slower is not named",
        ),
        pytest.param(
            [t("split:3", 9.0, 9.1, 9.0, 9.0, 9.1), t("split:2", 9.1, 9.2, 9.1, 9.1, 9.2)],
            "split:3",
            ("split:3", "split:2"),
            "split:2",
            id="five rounds tell nothing for sure: tied, and the one measured 1% slower is named by the rule",
        ),
        pytest.param([t("split:2", 9.0)], "split:2", ("split:2",), "split:2", id="alone"),
    ],
)
def test_ties_and_the_winner(timings, fastest, tied, winner):
    v = judge(timings)
    assert (v.fastest, v.tied, v.winner) == (fastest, tied, winner)
    assert v.contenders == v.tied


def test_the_margin_decides_what_is_worth_another_strategy():
    rounds = [t("one_device:CPU:0", 10.2, 10.25, 10.2, 10.2, 10.3, 10.2), t("split:2", 10.0, 10.1, 10, 10.0, 10, 10)]
    assert judge(rounds, margin=0.03).winner == "one_device:CPU:0"  # 2% faster: not worth another strategy
    assert judge(rounds, margin=0.01).winner == "split:2"  # sure it is more than 1% faster
    # 4% faster, but one round only 2%: not sure of 3%: tied, yet measured more than 3% off: not named
    rounds = [t("one_device:CPU:0", 10.2, 10.5, 10.35, 10.4, 10.45, 10.4), t("split:2", 10.0, 10.1, 10, 10.05, 10, 10)]
    v = judge(rounds, margin=0.03)
    assert (v.tied, v.winner) == (("split:2", "one_device:CPU:0"), "split:2")
    assert v.reason == "the fastest; tied but measured more than 3% slower, so not named: one_device:CPU:0 (+4%)"
    assert judge(rounds, margin=0.05).winner == "one_device:CPU:0"


def test_the_reason_and_each_ranking_say_how_sure_they_are():
    v = judge([t("split:2", 10.0, 10.3, 9.8, 10.1, 10.0, 10.2), t("mirrored:2", 11.0, 11.7, 11.1, 11.3, 11.4, 11.2)])
    assert v.reason == "the fastest, sure: split:2 is 13% faster than mirrored:2 (95% interval +10% to +14%, 6 rounds)"
    assert v.comparisons[0].line() in v.reason
    tied = judge([t("split:3", 9.0, 9.1), t("split:2", 9.05, 9.2)])
    assert tied.comparisons[0].line() == "split:3 is 1% faster than split:2 (2 rounds: no interval)"
    assert tied.reason == (
        "the rounds cannot tell it from split:3 by more than 3%; picked by the rule: the fewest devices (2)"
    )
    assert judge([]).reason == "no candidate ran" and judge([]).winner is None


def test_rounds_pair_by_position_and_a_candidate_with_fewer_rounds_pairs_on_those():
    ratio, low, high, n = paired([0.011] * 6, [0.010] * 6 + [0.030])
    assert (round(ratio, 6), n) == (1.1, 6) and low == pytest.approx(1.1) and high == pytest.approx(1.1)
    assert paired([0.011] * 5, [0.010] * 6)[1:] == (None, None, 5)  # five rounds: no interval


@pytest.mark.parametrize("a, b", [([], [0.01]), ([0.0], [0.01]), ([-1.0], [0.01])])
def test_paired_rounds_need_positive_times(a, b):
    with pytest.raises(InputError, match="paired rounds"):
        paired(a, b)


def test_the_fastest_is_one_no_other_beats_round_by_round():
    # against one_device (the most rounds) split:2's median ratio is lower (0.7 < 0.9), but mirrored:2 beats
    # split:2 in two rounds of three: mirrored:2 is the one no other beats
    rounds = [t("one_device:CPU:0", 10, 10, 10), t("split:2", 11, 6, 7), t("mirrored:2", 9, 11, 6)]
    assert judge(rounds).fastest == "mirrored:2"
    assert all(c.ratio >= 1 for c in judge(rounds).comparisons)


# ----------------------------------------------------------------------------- processes


def p(name: str, process: int, *rounds_ms: float) -> Timing:
    return Timing(**{**t(name, *rounds_ms).__dict__, "process": process})


def test_every_process_is_compared_with_every_process_and_only_what_all_pairs_show_counts():
    # split:2 in two processes, 10% and 5% faster than one device's two (which differ by 2%): every pair is sure
    sure = [
        p("one_device:CPU:0", 0, *[10.0] * 6), p("one_device:CPU:0", 1, *[10.2] * 6),
        p("split:2", 0, *[9.0] * 6), p("split:2", 1, *[9.5] * 6),
    ]  # fmt: skip
    v = judge(sure)
    assert (v.fastest, v.tied, v.winner) == ("split:2", ("split:2",), "split:2")
    (c,) = v.comparisons
    assert (c.pairs, c.rounds) == (4, 6)
    assert (round(c.low, 4), round(c.high, 4)) == (round(10.0 / 9.5, 4), round(10.2 / 9.0, 4))  # spans the pairs
    assert c.line().endswith("(95% interval +5% to +13%, 6 rounds x 4 pairs of processes)")
    # split:2's second process as slow as one device: one pair of four cannot show a difference: a tie
    # (one device measured 6% slower over all four pairs: tied, not named)
    v = judge([*sure[:3], p("split:2", 1, *[10.1] * 6)])
    assert (v.fastest, v.tied, v.winner) == ("split:2", ("split:2", "one_device:CPU:0"), "split:2")
    assert v.reason.endswith("so not named: one_device:CPU:0 (+6%)")
    # the same rounds, one process each: sure, and wrong for the next run's processes
    assert judge([sure[0], sure[2]]).tied == ("split:2",)


def test_processes_pair_by_position_and_the_order_they_are_given_in_does_not_matter():
    rounds = [p("split:2", 1, 9.5, 9.6, 9.4), p("split:2", 0, 9.0, 9.1, 9.2), p("mirrored:2", 0, 12, 12, 12)]
    ratio, low, high, n, pairs = compare([[0.0120] * 3], [[0.0090, 0.0091, 0.0092], [0.0095, 0.0096, 0.0094]])
    (c,) = judge(rounds).comparisons
    assert (c.ratio, c.low, c.high, c.rounds, c.pairs) == (ratio, low, high, n, pairs) == (ratio, None, None, 3, 2)
    assert judge(list(reversed(rounds))).comparisons == judge(rounds).comparisons
