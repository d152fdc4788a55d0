"""Device scopes and task assignment: pure plans as tables, then real ops on 4 logical CPUs."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings, strategies as st

from tfdevices.core.errors import InputError, SpecError
from tfdevices.scopes import plan_assignment

GiB = 1 << 30


@pytest.mark.parametrize(
    "tasks, devices, policy, memory, expected",
    [
        (["a"], ["CPU:0"], "round_robin", None, ["CPU:0"]),
        (
            ["a", "b", "c", "d", "e"],
            ["CPU:0", "CPU:1"],
            "round_robin",
            None,
            ["CPU:0", "CPU:1", "CPU:0", "CPU:1", "CPU:0"],
        ),
        (["a", "b"], ["2", "0", "1"], "round_robin", None, ["2", "0"]),
        (["a", "b", "c", "d"], ["0", "1"], "by_memory", {"0": 10 * GiB, "1": 30 * GiB}, ["1", "1", "0", "1"]),
        (["a", "b"], ["0", "1"], "by_memory", {"0": 10 * GiB, "1": 10 * GiB}, ["0", "1"]),
        (["a", "b", "c"], ["0", "1", "2"], "by_memory", {"0": 1, "1": 3, "2": 2}, ["1", "2", "1"]),
    ],
)
def test_plan_assignment(tasks, devices, policy, memory, expected):
    plan = plan_assignment(tasks, devices, policy, free_memory=memory)
    assert [p.device for p in plan] == expected
    assert [p.task for p in plan] == tasks
    assert all(p.reason for p in plan)


@pytest.mark.parametrize(
    "tasks, devices, policy, memory, words",
    [
        ([], ["CPU:0"], "round_robin", None, "assign: no tasks given"),
        (["a"], [], "round_robin", None, "assign: no devices given"),
        (["a", "a"], ["CPU:0"], "round_robin", None, "tasks 'a' appear more than once among the 2 given"),
        (["a"], ["CPU:0", "CPU:0"], "round_robin", None, "devices 'CPU:0' appear more than once among the 2 given"),
        (["a"], ["CPU:0"], "fastest", None, "assign policy 'fastest' is unknown"),
        (["a"], ["CPU:0"], "by_memory", None, "no free-memory figure for ['CPU:0']"),
        (["a"], ["0", "1"], "by_memory", {"0": 1}, "no free-memory figure for ['1']"),
    ],
)
def test_plan_assignment_errors(tasks, devices, policy, memory, words):
    with pytest.raises(InputError) as info:
        plan_assignment(tasks, devices, policy, free_memory=memory)
    assert words in str(info.value) and "HINT:" in str(info.value)


@pytest.mark.parametrize(
    "device, expected",
    [
        ("CPU:0", "CPU:0"),
        ("CPU:3", "CPU:3"),
        ("/device:CPU:2", "CPU:2"),
        ("cpu:1", "CPU:1"),
    ],
)
def test_device_scope_places_ops(tf4, device, expected):
    import tfdevices

    with tfdevices.device_scope(device) as name:
        x = tf4.ones([2, 2]) @ tf4.ones([2, 2])
    assert name == f"/device:{expected}"
    assert x.device.endswith(f"device:{expected}")


@pytest.mark.parametrize(
    "device, words",
    [
        ("CPU:4", "TensorFlow has no device CPU:4"),
        ("GPU:0", "TensorFlow has no device GPU:0"),
        (0, "TensorFlow does not see the GPU with NVML index 0"),
        ("1", "TensorFlow does not see the GPU with NVML index 1"),
        ("cpu", "neither an NVML index nor a TensorFlow device name"),
        (None, "expected an NVML index"),
    ],
)
def test_device_scope_rejects_what_tf_lacks(tf4, device, words):
    import tfdevices

    with pytest.raises(SpecError) as info:
        with tfdevices.device_scope(device):
            pass
    assert words in str(info.value)


def test_assign_runs_each_task_on_its_device_concurrently(tf4):
    import tfdevices

    barrier = threading.Barrier(4, timeout=60)  # every task must be running at once to pass it

    def make(i):
        def task():
            barrier.wait()
            y = tf4.random.stateless_normal([64, 64], seed=[i, 0])
            return (y @ y).device

        task.__name__ = f"task{i}"
        return task

    results = tfdevices.assign([make(i) for i in range(4)], ["CPU:0", "CPU:1", "CPU:2", "CPU:3"])
    assert [r.task for r in results] == ["task0", "task1", "task2", "task3"]
    assert [r.device for r in results] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    assert [r.result.rsplit("device:", 1)[1] for r in results] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


def test_assign_defaults_plans_names_and_raises_task_errors(tf4):
    import tfdevices

    planned = tfdevices.assign(["load", "train", "eval", "export", "serve"], run=False)
    assert [r.tf_device for r in planned] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3", "CPU:0"]
    assert all(r.result is None for r in planned)
    results = tfdevices.assign({"one": lambda: 1, "two": lambda: 2}, ["CPU:2", "CPU:3"])
    assert [(r.task, r.device, r.result) for r in results] == [("one", "CPU:2", 1), ("two", "CPU:3", 2)]

    def broken():
        raise KeyError("task failed")

    with pytest.raises(KeyError, match="task failed"):
        tfdevices.assign([broken, lambda: 1], ["CPU:0", "CPU:1"])
    with pytest.raises(InputError, match="assign policy 'by_memory': no free-memory figure"):
        tfdevices.assign(["a"], ["CPU:0"], policy="by_memory")
    with pytest.raises(InputError, match="neither a callable nor a name"):
        tfdevices.assign({"a": 3}, ["CPU:0"])


def test_assign_refuses_a_device_named_twice(tf4):
    import tfdevices

    with pytest.raises(tfdevices.SpecError, match=r"^device 'cpu:1' is named twice \(as TensorFlow's CPU:1\)"):
        tfdevices.assign([lambda: 1, lambda: 2], ["CPU:1", "cpu:1"])


def test_device_scope_soft_placement_is_set_for_the_block_and_put_back(tf4):
    import tfdevices

    before = tf4.config.get_soft_device_placement()
    with tfdevices.device_scope("CPU:1", soft_placement=not before):
        assert tf4.config.get_soft_device_placement() is (not before)
        assert "CPU:1" in tf4.constant(1.0).device
    assert tf4.config.get_soft_device_placement() is before
    with pytest.raises(ZeroDivisionError):  # put back when the block raises too
        with tfdevices.device_scope("CPU:1", soft_placement=False):
            raise ZeroDivisionError
    assert tf4.config.get_soft_device_placement() is before
    with tfdevices.device_scope("CPU:1"):  # None: TensorFlow's setting as it is
        assert tf4.config.get_soft_device_placement() is before
    with pytest.raises(tfdevices.InputError, match=r"^soft_placement='yes': must be True or False"):
        with tfdevices.device_scope("CPU:1", soft_placement="yes"):
            pass
    assert tf4.config.get_soft_device_placement() is before


def _by_memory_reference(tasks, devices, memory):
    """The plain definition: each task to the device with the most free memory per task once it is added."""
    counts = dict.fromkeys(devices, 0)
    out = []
    for _ in tasks:
        device = max(devices, key=lambda d: (memory[d] / (counts[d] + 1), -devices.index(d)))
        counts[device] += 1
        out.append(device)
    return out


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 60), memory=st.lists(st.integers(1, 64), min_size=1, max_size=6))
def test_by_memory_planning_matches_its_definition(n, memory):
    devices = [f"GPU:{i}" for i in range(len(memory))]
    free = dict(zip(devices, memory))
    tasks = [f"t{i}" for i in range(n)]
    planned = [p.device for p in plan_assignment(tasks, devices, "by_memory", free_memory=free)]
    assert planned == _by_memory_reference(tasks, devices, free)
