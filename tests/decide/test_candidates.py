"""Candidates, predictions and the budget: pure, exact tables."""

from __future__ import annotations

import pytest

from tfdevices import InputError, SpecError
from tfdevices.decide.candidates import (
    Candidate,
    Link,
    Profile,
    check_target,
    choose,
    plan_candidates,
    predict_step_s,
    prune,
)

CPUS = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


@pytest.mark.parametrize(
    "devices, names",
    [
        (["CPU:0"], ["one_device:CPU:0"]),
        (CPUS, ["one_device:CPU:0", "mirrored:2", "mirrored:3", "mirrored:4", "split:2", "split:3", "split:4"]),
        (
            ["GPU:1", "GPU:0", "CPU:0"],
            ["one_device:GPU:1", "one_device:CPU:0", "mirrored:2", "split:2", "multi_worker:2"],
        ),
        (["/device:GPU:0", "CPU:0"], ["one_device:GPU:0", "one_device:CPU:0"]),
    ],
)
def test_candidates_for_devices(devices, names):
    assert [c.name for c in plan_candidates(devices)] == names


def test_mirrored_takes_the_k_best_devices_of_the_main_kind():
    by_name = {c.name: c for c in plan_candidates(["GPU:1", "GPU:0", "GPU:2", "CPU:0"])}
    assert by_name["mirrored:2"] == Candidate("mirrored:2", "mirrored", ("GPU:1", "GPU:0"))
    assert by_name["split:3"].devices == ("GPU:1", "GPU:0", "GPU:2")
    assert by_name["multi_worker:3"].devices == ("GPU:1", "GPU:0", "GPU:2")


@pytest.mark.parametrize("devices, error", [([], InputError), (["2"], SpecError), (["TPUX"], SpecError)])
def test_bad_devices(devices, error):
    with pytest.raises(error):
        plan_candidates(devices)


def test_choose_keeps_plan_order_and_refuses_unknown_names():
    planned = plan_candidates(CPUS)
    assert [c.name for c in choose(planned, ["split:2", "mirrored:2"])] == ["mirrored:2", "split:2"]
    assert choose(planned, "auto") == planned
    for bad in (["mirrored:9"], [], "nope"):
        with pytest.raises(InputError, match="candidates="):
            choose(planned, bad)


@pytest.mark.parametrize("target", ["a.b:c", "mod:fn", "pkg.sub_1.mod:build_2"])
def test_good_targets(target):
    assert check_target(target) == target


@pytest.mark.parametrize("target", ["", "mod", "mod:", ":fn", "a b:c", "mod:fn:x", "mod.fn", 3, None, "1mod:fn"])
def test_bad_targets(target):
    with pytest.raises(InputError, match="model function .* is not MODULE:FUNCTION"):
        check_target(target)


GPU_PROFILE = Profile(
    step_s=0.010,
    compute_s=0.008,
    grad_bytes=1_000_000,
    variables=4,
    activation_bytes=10_000,
    copy_latency_s=0.0001,
    copy_bytes_per_s=1e9,
    shared_compute=False,
)


@pytest.mark.parametrize(
    "candidate, predicted",
    [
        (Candidate("one_device:GPU:0", "one_device", ("GPU:0",)), 0.010),
        (Candidate("mirrored:2", "mirrored", ("GPU:0", "GPU:1")), 0.002 + 0.004 + 8 * 0.0001 + 0.002),
        (
            Candidate("mirrored:4", "mirrored", ("GPU:0", "GPU:1", "GPU:2", "GPU:3")),
            0.002 + 0.002 + 24 * 0.0001 + 0.006,
        ),
        (Candidate("split:2", "split", ("GPU:0", "GPU:1")), 0.010 + 2 * 0.0001 + 20_000 / 1e9),
        (Candidate("split:3", "split", ("GPU:0", "GPU:1", "GPU:2")), 0.010 + 4 * 0.0001 + 40_000 / 1e9),
        (Candidate("multi_worker:2", "multi_worker", ("GPU:0", "GPU:1")), None),
    ],
)
def test_predictions(candidate, predicted):
    got = predict_step_s(candidate, GPU_PROFILE)
    assert got == (None if predicted is None else pytest.approx(predicted))


def test_logical_cpus_share_their_compute():
    from dataclasses import replace

    shared = replace(GPU_PROFILE, shared_compute=True)
    mirrored = Candidate("mirrored:2", "mirrored", ("CPU:0", "CPU:1"))
    assert predict_step_s(mirrored, shared) == pytest.approx(0.002 + 0.008 + 0.0008 + 0.002)


def test_the_budget_keeps_the_fastest_predicted_that_fit():
    a, b, c = (Candidate(n, "mirrored", ("CPU:0", "CPU:1")) for n in ("a", "b", "c"))
    kept, pruned = prune([(a, 0.3), (b, 0.1), (c, None)], 10.0, startup_s=2.0, steps=10)
    # b (3 s) then a (5 s) fit; c costs the dearest (5 s): 2 s left. Kept in the order given
    assert [k.name for k in kept] == ["a", "b"]
    assert pruned == ((c, "pruned by the budget: predicted none, about 5.0 s to run, 2.0 s left"),)
    assert prune([(a, 0.3)], None, startup_s=2.0, steps=10) == ((a,), ())


CPU_PAIRS = (
    Link("CPU:0", "CPU:1", 0.00001, None),
    Link("CPU:2", "CPU:0", 0.00002, 2e9),
    Link("CPU:1", "CPU:2", 0.00003, 1e9),
)


@pytest.mark.parametrize(
    "candidate, predicted",
    [
        # the first device and each other one: 2 copies of each of 4 weights, 2 MB each way
        (Candidate("mirrored:2", "mirrored", ("CPU:0", "CPU:1")), 0.002 + 0.008 + 8 * 0.00001),
        (
            Candidate("mirrored:3", "mirrored", ("CPU:0", "CPU:1", "CPU:2")),
            0.002 + 0.008 + 8 * 0.00001 + 8 * 0.00002 + 2_000_000 / 2e9,
        ),
        # each stage to the next: 2 activation copies of 10 kB
        (Candidate("split:2", "split", ("CPU:0", "CPU:1")), 0.010 + 2 * 0.00001),
        (Candidate("split:3", "split", ("CPU:0", "CPU:1", "CPU:2")), 0.010 + 2 * 0.00001 + 2 * 0.00003 + 20_000 / 1e9),
        # a pair the probe did not measure: the profile's one copy cost
        (Candidate("split:2", "split", ("CPU:0", "CPU:3")), 0.010 + 2 * 0.0001 + 20_000 / 1e9),
    ],
)
def test_predictions_use_each_pairs_probed_copy_cost(candidate, predicted):
    from dataclasses import replace

    calibrated = replace(GPU_PROFILE, shared_compute=True, links=CPU_PAIRS)
    assert predict_step_s(candidate, calibrated) == pytest.approx(predicted)


def test_docstring_examples():
    import doctest

    from tfdevices.decide import candidates

    result = doctest.testmod(candidates)
    assert result.attempted > 0 and result.failed == 0
