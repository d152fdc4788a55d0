"""A sampled step, read: its collective kernels' time from start to completion (the wait) and its input ops'
time, from the host plane of the profile in the shapes TensorFlow's profiler writes (tests/xspaces.py);
samples spaced to cost a hundredth of the steps, on the same steps on every rank."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from tests.xspaces import Space, host_call
from tfdevices.core.errors import EnvVarError
from tfdevices.mends.step_sampling import SAMPLING_ENV, StepSampler, read_waits, sample_every, sampling_from_env


def _async(host, line: str, at: float, duration: float, kernel: str, key: int, done_at: float) -> None:
    start = host.event(line, "ExecutorState::ProcessAsync::Start", at, duration)
    for stat, value in (("name", kernel.lower()), ("kernel_type", kernel), ("_p", key)):
        host._stat(start, stat, value)  # "name" is event()'s own argument
    host.event("rpc", "ExecutorState::ProcessAsync::Done", done_at, 2, _c=key)


@pytest.mark.parametrize("refs", [True, False])
def test_the_wait_is_the_collectives_span_from_start_to_completion(refs: bool) -> None:
    space = Space()
    host_call(space, "step", 0, 5000, 7, [("a", "MatMul", 10, 800), ("it", "IteratorGetNext", 900, 300)])
    host = space.plane("/host:CPU", refs=refs)
    _async(host, "tf_Compute/7", 1300, 5, "CollectiveReduceV2", 1, done_at=4300)  # 3 ms until it completes
    _async(host, "tf_Compute/7", 2000, 5, "CollectiveReduceV2", 2, done_at=4500)  # overlaps: 0.2 ms more
    _async(host, "tf_Compute/7", 4600, 5, "_Recv", 3, done_at=4700)  # not a collective
    host.event("rpc", "ExecutorState::ProcessAsync::Done", 4800, 1, _c=99)  # a completion whose start was lost
    space.plane("/device:GPU:0").event("stream", "CollectiveReduceV2", 0, 4000)  # only the host plane is read
    wait, got = read_waits(space.space)
    assert (round(wait * 1e6), round(got * 1e6)) == (3200, 300)


def test_a_collective_whose_completion_was_lost_completes_when_its_step_next_runs_a_node() -> None:
    space = Space()
    host = space.plane("/host:CPU")
    host.event("tf_Compute/7", "ExecutorState::Process", 100, 50, _c=7)
    start = host.event("tf_Compute/7", "ExecutorState::ProcessAsync::Start", 120, 5)
    for stat, value in (("name", "allreduce"), ("kernel_type", "CollectiveReduceV2"), ("_p", 1)):
        host._stat(start, stat, value)
    host.event("tf_Compute/8", "ExecutorState::Process", 140, 5, _c=7)  # ran while the first node ran: not it
    host.event("tf_Compute/8", "ExecutorState::Process", 9000, 40, _c=7)  # the node its output freed
    host.event("tf_Compute/8", "ExecutorState::Process", 9500, 40, _c=7)
    assert round(read_waits(space.space)[0] * 1e6) == 9000 - 120


def test_a_step_with_no_collective_waits_nothing() -> None:
    space = Space()
    host_call(space, "step", 0, 100, 7, [("a", "MatMul", 10, 80)])
    assert read_waits(space.space) == (0.0, 0.0)


@pytest.mark.parametrize(
    "cost, step, every", [(0.003, 0.003, 128), (0.003, 0.05, 16), (0.0, 0.01, 16), (1.0, 0.001, 1 << 17)]
)
def test_samples_are_spaced_to_cost_a_hundredth_of_the_steps(cost, step, every) -> None:
    got = sample_every(cost, step)
    assert got == every and (got & (got - 1)) == 0  # a power of two: ranks meet on the larger's multiples
    if cost:
        assert cost / (got * step) <= 0.01 or got == 16


def test_the_steps_due_are_multiples_past_the_compiled_first_steps() -> None:
    sampler = StepSampler(enabled=True)
    assert [n for n in range(1, 70) if sampler.due(n)] == [16, 32, 48, 64]
    sampler.every = 64
    assert [n for n in range(1, 200) if sampler.due(n)] == [64, 128, 192]
    sampler.stopped = "the profiler cannot start"
    assert not sampler.due(128)


@pytest.mark.parametrize(
    "value, sampled", [(None, False), ("", False), ("0", False), ("off", False), ("1", True), (" ON ", True)]
)
def test_sampling_is_off_unless_the_environment_turns_it_on(monkeypatch, value, sampled) -> None:
    # off by default: TensorFlow's profiler stop aborted a rank of a real job (see the module's note)
    if value is None:
        monkeypatch.delenv(SAMPLING_ENV, raising=False)
    else:
        monkeypatch.setenv(SAMPLING_ENV, value)
    sampler = StepSampler()
    assert [n for n in range(1, 40) if sampler.due(n)] == ([16, 32] if sampled else [])


def test_a_bad_sampling_value_says_so_once_and_the_steps_go_on_unsampled(monkeypatch, capsys) -> None:
    monkeypatch.setenv(SAMPLING_ENV, "yes-please")
    sampler = StepSampler()
    assert not any(sampler.due(n) for n in range(1, 40))
    err = capsys.readouterr().err
    assert err.count("TFDEVICES_STEP_SAMPLING='yes-please' is not one of 1, on, 0, off.") == 1, err
    assert "HINT: TFDEVICES_STEP_SAMPLING=1 samples steps" in err
    with pytest.raises(EnvVarError, match="is not one of 1, on, 0, off"):
        sampling_from_env({SAMPLING_ENV: "2"})


@given(st.text(max_size=300))
def test_any_sampling_value_is_on_off_or_an_error_that_names_the_variable(text) -> None:
    try:
        assert sampling_from_env({SAMPLING_ENV: text}) is (text.strip().lower() in ("1", "on"))
    except EnvVarError as err:
        assert str(err).startswith(f"{SAMPLING_ENV}=") and "HINT: " in str(err)
