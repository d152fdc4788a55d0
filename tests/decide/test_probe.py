"""The copy probe's fit: latency and bandwidth from per-hop times (pure, exact)."""

from __future__ import annotations

import pytest

from tfdevices import InputError
from tfdevices.decide.candidates import Link
from tfdevices.decide.probe import fit_link

SIZES = [1024.0, 262_144.0, 4_194_304.0]


@pytest.mark.parametrize(
    "hop_s, latency_s, bytes_per_s",
    [
        # on a line: 5 us, then 10 GB/s
        ([5e-6 + s / 1e10 for s in SIZES], 5e-6, 1e10),
        # flat (logical CPUs hand the buffer over): the mean is the latency, no cost per byte
        ([1e-6, 1e-6, 1e-6], 1e-6, None),
        # falling with the size (noise): no cost per byte; the line's intercept is the latency
        ([3e-6, 2e-6, 1e-6], 2.5644627157e-6, None),
        # a line that crosses zero bytes below zero: no latency
        ([0.0, 1e-5, 4e-4], 0.0, 10304657712.3),
    ],
)
def test_latency_and_bandwidth_by_least_squares(hop_s, latency_s, bytes_per_s):
    link = fit_link("CPU:0", "CPU:1", SIZES, hop_s)
    assert link == Link("CPU:0", "CPU:1", pytest.approx(latency_s, abs=1e-15), pytest.approx(bytes_per_s))


def test_a_steep_line_through_zero():
    link = fit_link("GPU:0", "GPU:1", [1.0, 3.0], [1.0, 2.0])
    assert link == Link("GPU:0", "GPU:1", pytest.approx(0.5), pytest.approx(2.0))


@pytest.mark.parametrize("sizes, times", [([1.0], [1.0]), ([1.0, 2.0], [1.0]), ([], [])])
def test_too_few_points(sizes, times):
    with pytest.raises(InputError, match="fit_link got"):
        fit_link("CPU:0", "CPU:1", sizes, times)


def test_docstring_examples():
    import doctest

    from tfdevices.decide import probe

    result = doctest.testmod(probe)
    assert result.attempted > 0 and result.failed == 0
