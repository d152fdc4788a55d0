"""Ties between candidates, from synthetic round timings: exact tables."""

from __future__ import annotations

import pytest

from tfdevices import InputError
from tfdevices.decide.ties import Timing, Verdict, judge, spread


def t(name: str, *rounds_ms: float) -> Timing:
    strategy, _, k = name.partition(":")
    devices = 1 if strategy == "one_device" else int(k)
    return Timing(name, strategy, devices, tuple(r / 1000 for r in rounds_ms))


@pytest.mark.parametrize(
    "rounds, expected",
    [([0.012], (0.012, 0.012)), ([0.012, 0.010], (0.010, 0.012)), ([0.012, 0.010, 0.011, 0.030], (0.010, 0.011))],
)
def test_the_spread_runs_from_the_fastest_round_to_the_second_fastest(rounds, expected):
    assert spread(rounds) == expected


def test_no_rounds_have_no_spread():
    with pytest.raises(InputError, match="spread of no rounds"):
        spread([])


@pytest.mark.parametrize(
    "timings, expected",
    [
        pytest.param(
            # issue 20's wide_mlp: three splits within 4% and rounds that overlap; the rule picks the fewest devices
            [
                t("one_device:CPU:0", 10.37, 10.60),
                t("mirrored:4", 16.40, 16.90),
                t("split:2", 9.76, 9.90),
                t("split:3", 9.40, 9.80),
                t("split:4", 9.34, 9.90),
            ],
            Verdict(
                "split:4",
                ("split:4", "split:3", "split:2"),
                "split:2",
                "tied within the noise with split:4, split:3; picked by the rule: the fewest devices (2)",
            ),
            id="overlapping: tied, fewest devices",
        ),
        pytest.param(
            # the same step times, each repeated closely: separated, the fastest wins
            [t("split:2", 9.76, 9.80), t("split:3", 9.40, 9.42), t("split:4", 9.34, 9.36)],
            Verdict("split:4", ("split:4",), "split:4", "the fastest, clear of the noise: split:3 is 0.6% slower"),
            id="separated: the fastest",
        ),
        pytest.param(
            # one device reaches the fastest's spread: it wins, fewest devices
            [t("one_device:CPU:0", 1.31, 1.36), t("split:2", 1.30, 1.40), t("mirrored:2", 1.81, 1.86)],
            Verdict(
                "split:2",
                ("split:2", "one_device:CPU:0"),
                "one_device:CPU:0",
                "tied within the noise with split:2; picked by the rule: the fewest devices (1)",
            ),
            id="one device tied with a split",
        ),
        pytest.param(
            [t("mirrored:2", 4.37, 4.50), t("split:2", 4.14, 4.40), t("split:4", 3.64, 3.90)],
            Verdict("split:4", ("split:4",), "split:4", "the fastest, clear of the noise: split:2 is 13.7% slower"),
            id="separated by a wide gap",
        ),
        pytest.param(
            # same devices: the simplest strategy (mirrored, a stock strategy, before the layer split)
            [t("split:2", 4.14, 4.60), t("mirrored:2", 4.37, 4.50)],
            Verdict(
                "split:2",
                ("split:2", "mirrored:2"),
                "mirrored:2",
                "tied within the noise with split:2; picked by the rule: the fewest devices (2), "
                "then the simplest strategy (mirrored)",
            ),
            id="same devices: the simplest strategy",
        ),
        pytest.param(
            [t("split:2", 4.10, 4.60), t("split:3", 4.20, 4.30), t("mirrored:2", 4.30)],
            Verdict(
                "split:2",
                ("split:2", "split:3", "mirrored:2"),
                "mirrored:2",
                "tied within the noise with split:2, split:3; picked by the rule: the fewest devices (2), "
                "then the simplest strategy (mirrored)",
            ),
            id="a one-round candidate is a point inside the spread",
        ),
        pytest.param(
            [t("one_device:GPU:0", 4.20, 4.25), t("one_device:CPU:0", 4.10, 4.60)],
            Verdict(
                "one_device:CPU:0",
                ("one_device:CPU:0", "one_device:GPU:0"),
                "one_device:CPU:0",
                "tied within the noise with one_device:GPU:0; picked by the rule: the fewest devices (1) "
                "and the simplest strategy (one_device), then the fastest",
            ),
            id="same devices and strategy: the fastest",
        ),
        pytest.param(
            # one round each: points, never tied unless equal
            [t("split:2", 4.10), t("mirrored:2", 4.11)],
            Verdict("split:2", ("split:2",), "split:2", "the fastest, clear of the noise: mirrored:2 is 0.2% slower"),
            id="one round each: no spread",
        ),
        pytest.param(
            [t("split:2", 4.10, 4.60), t("mirrored:2")],
            Verdict("split:2", ("split:2",), "split:2", "the only candidate that ran"),
            id="the only one that ran",
        ),
        pytest.param([t("split:2")], Verdict(None, (), None, "no candidate ran"), id="none ran"),
    ],
)
def test_ties_and_the_rule(timings, expected):
    assert judge(timings) == expected


def test_a_round_that_repeats_the_fastest_separates_candidates_tied_before():
    before = [t("split:2", 9.40, 9.90), t("split:3", 9.60, 9.70)]
    assert judge(before).tied == ("split:2", "split:3")
    after = [t("split:2", 9.40, 9.90, 9.45), t("split:3", 9.60, 9.70, 9.65)]
    assert judge(after).tied == ("split:2",) and judge(after).winner == "split:2"


def test_docstring_examples():
    import doctest

    from tfdevices.decide import ties

    result = doctest.testmod(ties)
    assert result.attempted > 0 and result.failed == 0
