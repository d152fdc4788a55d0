"""Mend collective_wait: a step's collectives get two timestamps in their own chain and add their span to a local
variable; nothing is added outside a step; the sums are read every few steps into the rank's record, spaced by
what a read costs; undone, the launcher's methods are TensorFlow's again. Real collectives: a group of one
(TensorFlow's own CollectiveReduceV2, no peer to wait for); the two-worker jobs are in tests/jobs/test_straggler.py.
"""

from __future__ import annotations

import doctest

import pytest

from tfdevices.jobs.progress import ProgressWriter, read_records
from tfdevices.mends import collective_wait
from tfdevices.mends.base import NOT_REACHED
from tfdevices.mends.collective_wait import READ_EVERY_MIN, read_every


@pytest.mark.parametrize(
    "cost_s, step_s, every",
    [
        (0.00005, 0.05, 16),  # a 50 us read of 50 ms steps: the least spacing
        (0.00005, 0.001, 32),  # of 1 ms steps: at least 25 steps apart
        (0.001, 0.001, 512),  # a slow read: 500 steps apart at the least
        (0.0, 0.01, 16),
        (float("inf"), 0.01, 16),
        (1.0, 1e-9, 1 << 20),  # bounded
        (0.005, 0.014, 128),  # a read slowed to 5 ms: still read about once a second (128 steps of 14 ms)
    ],
)
def test_reads_are_spaced_by_their_cost_in_powers_of_two(cost_s: float, step_s: float, every: int) -> None:
    assert read_every(cost_s, step_s) == every


def test_docstring_examples() -> None:
    result = doctest.testmod(collective_wait)
    assert result.attempted > 0 and result.failed == 0


class _Writer:
    """A rank's record as the mend sees it: its phase decides whether a traced collective is timed."""

    def __init__(self, phase: str) -> None:
        self.phase = phase


@pytest.fixture
def mend(tf4, monkeypatch):
    """The mend applied, with a writer the test sets; undone after."""
    monkeypatch.setattr(collective_wait.MEND, "writer", _Writer("step"))
    monkeypatch.setattr(collective_wait.MEND, "_total", None)
    assert collective_wait.MEND.apply().state == "applied"
    yield collective_wait.MEND
    collective_wait.MEND.undo()
    collective_wait.MEND._set(NOT_REACHED, "reset by the test")


def _launcher(tf):
    """A real CollectiveReplicaLauncher of a group of one on this process's CPU.

    Its group keys start far from 1: a strategy built later in the same test process (test_verify's
    MirroredStrategy over 2 CPUs) numbers its groups from 1, and TensorFlow refuses a key reused for a
    group of another size ("joining a group with size2, but that group has size 1").
    """
    from tensorflow.python.distribute import collective_util, cross_device_utils

    keys = cross_device_utils.CollectiveKeys(group_key_start=1_000_000)
    device = "/job:localhost/replica:0/task:0/device:CPU:0"
    return cross_device_utils.CollectiveReplicaLauncher(
        keys.get_group_key([device]), 1, keys, device, collective_util.Options()
    )


def _ops(tf, fn, *specs) -> list[str]:
    graph = fn.get_concrete_function(*specs).graph
    return [op.type for op in graph.get_operations() if op.type in ("Timestamp", "CollectiveReduceV2")]


def _after(op, earlier) -> bool:
    """Whether ``op`` runs after ``earlier`` in its graph: ``earlier`` is among its inputs' or control inputs' ops,
    or theirs."""
    seen, queue = set(), [op]
    while queue:
        each = queue.pop()
        for before in [t.op for t in each.inputs] + list(each.control_inputs):
            if before is earlier:
                return True
            if before.name not in seen:
                seen.add(before.name)
                queue.append(before)
    return False


def test_a_steps_collective_is_timed_in_its_own_chain(mend) -> None:
    import tensorflow as tf

    launcher = _launcher(tf)
    step = tf.function(lambda x: launcher.all_reduce(x) * 2.0)
    spec = tf.TensorSpec([3])
    assert step(tf.ones(3)).numpy().tolist() == [2.0, 2.0, 2.0]  # the collective's result, unchanged
    graph = step.get_concrete_function(spec).graph
    (collective,) = [op for op in graph.get_operations() if op.type == "CollectiveReduceV2"]
    stamps = [op for op in graph.get_operations() if op.type == "Timestamp"]
    assert len(stamps) == 2
    # one chain: the first timestamp, the collective, the second timestamp, the add, what reads the output
    (mul,) = [op for op in graph.get_operations() if op.type == "Mul"]
    (add,) = [op for op in graph.get_operations() if op.type == "AssignAddVariableOp"]
    assert _after(collective, stamps[0]) and not _after(stamps[0], collective)
    assert _after(stamps[1], collective) and not _after(collective, stamps[1])
    assert _after(add, stamps[1]) and _after(mul, add)
    for _ in range(20):
        step(tf.ones(3))
    wait, input_s = (float(v.numpy()) for v in mend._total)
    assert wait > 0.0 and input_s == 0.0


def test_a_collective_outside_a_step_is_left_alone(mend) -> None:
    import tensorflow as tf

    mend.writer = _Writer("between")  # traced outside a step: an evaluation's, a callback's
    launcher = _launcher(tf)
    plain = tf.function(lambda x: launcher.all_reduce(x))
    assert _ops(tf, plain, tf.TensorSpec([3])) == ["CollectiveReduceV2"]
    mend.writer = None  # no job to report to: the same
    other = tf.function(lambda x: launcher.all_reduce(x) + 0.0)
    assert _ops(tf, other, tf.TensorSpec([3])) == ["CollectiveReduceV2"]


def test_the_sums_are_read_into_the_record_every_few_steps(mend, tmp_path) -> None:
    import tensorflow as tf

    launcher = _launcher(tf)
    step = tf.function(lambda x: launcher.all_reduce(x))
    writer = ProgressWriter(str(tmp_path), 0)
    mend.writer = writer
    for n in range(1, 3 * READ_EVERY_MIN + 1):
        writer.begin_step()
        step(tf.ones(3))
        writer.end_step()
        mend.after_step(writer, n)
        if n == READ_EVERY_MIN - 1:
            assert read_records(str(tmp_path))[0].waits is None  # not before the first spacing
    waits = read_records(str(tmp_path))[0].waits
    assert waits is not None and waits.step % READ_EVERY_MIN == 0 and waits.step >= READ_EVERY_MIN
    assert 0.0 < waits.wait_s < waits.step_s and waits.cost_s > 0.0
    assert mend.reads >= 1 and mend.every >= READ_EVERY_MIN


def test_undone_the_launcher_is_tensorflows_again(mend) -> None:
    from tensorflow.python.distribute import cross_device_utils

    launcher = cross_device_utils.CollectiveReplicaLauncher
    assert hasattr(launcher.all_reduce, "__wrapped__") and hasattr(launcher._all_gather, "__wrapped__")
    mend.undo()
    assert not hasattr(launcher.all_reduce, "__wrapped__") and not hasattr(launcher._all_gather, "__wrapped__")
