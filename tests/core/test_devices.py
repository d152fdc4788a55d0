"""Device names (pure): TensorFlow's spellings, NVML indices, and resolving one to the other."""

from __future__ import annotations

import pytest

from tfdevices.core.devices import (
    default_devices,
    full_name,
    is_logical_name,
    resolve_devices,
    short_name,
    task_of,
    tfdevices_name,
)
from tfdevices.core.errors import SpecError


@pytest.mark.parametrize(
    "spelling, short",
    [
        ("GPU:1", "GPU:1"),
        ("/GPU:1", "GPU:1"),
        ("/device:GPU:1", "GPU:1"),
        ("gpu:1", "GPU:1"),
        ("/job:localhost/replica:0/task:0/device:GPU:1", "GPU:1"),
        ("/job:worker/task:3/device:CPU:0", "CPU:0"),
        ("  cpu:02 ", "CPU:2"),
        ("/device:XLA_CPU:0", "XLA_CPU:0"),
    ],
)
def test_short_name_reads_every_tensorflow_spelling(spelling, short):
    assert short_name(spelling) == short
    assert is_logical_name(spelling)
    assert full_name(spelling) == "/device:" + short


@pytest.mark.parametrize("bad", ["1", "0:1", "GPU", "GPU:", ":1", "GPU:-1", "GPU:1x", "", 3, None])
def test_what_is_not_a_tensorflow_name(bad):
    assert not is_logical_name(bad)
    with pytest.raises(SpecError, match=r"^device .* is not a TensorFlow device name\. HINT: "):
        short_name(bad)


def test_task_of_names_the_job_and_task():
    assert task_of("/job:worker/replica:0/task:1/device:CPU:0") == "worker:1"
    assert task_of("/job:chief/device:CPU:0") == "chief:0"
    assert task_of("CPU:0") is None


@pytest.mark.parametrize(
    "logical, default",
    [
        (["CPU:0", "GPU:0", "GPU:1"], ("GPU:0", "GPU:1")),
        (["CPU:0", "CPU:1"], ("CPU:0", "CPU:1")),
        ([], ()),
    ],
)
def test_default_devices_are_every_gpu_else_every_cpu(logical, default):
    assert default_devices(logical) == default


def test_tfdevices_name_prefers_the_nvml_index():
    assert tfdevices_name("GPU:0", {"4": "GPU:0"}) == "4"
    assert tfdevices_name("GPU:1", {"4": "GPU:0"}) == "GPU:1"


LOGICAL = ["CPU:0", "CPU:1", "GPU:0", "GPU:1"]
MAP = {"3": "GPU:0", "5": "/GPU:1"}


@pytest.mark.parametrize(
    "devices, names, tf_names",
    [
        ([3], ("3",), ("GPU:0",)),
        (["5", 3], ("5", "3"), ("GPU:1", "GPU:0")),
        ("CPU:1", ("CPU:1",), ("CPU:1",)),
        (["/device:CPU:0", "cpu:1"], ("CPU:0", "CPU:1"), ("CPU:0", "CPU:1")),
        (["GPU:1"], ("5",), ("GPU:1",)),  # a TF name of a known GPU is shown by its NVML index
    ],
)
def test_resolve_devices(devices, names, tf_names):
    assert resolve_devices(devices, logical=LOGICAL, gpu_map=MAP) == (names, tf_names)


@pytest.mark.parametrize(
    "devices, gpu_map, words",
    [
        ([0], MAP, "TensorFlow does not see the GPU with NVML index 0; GPUs it sees (NVML -> TF): 3 -> GPU:0"),
        (["7"], {}, "GPUs it sees (NVML -> TF): none"),
        ([-1], MAP, "cannot be negative"),
        (["CPU:4"], MAP, "TensorFlow has no device CPU:4"),
        (["GPU:2"], MAP, "TensorFlow has no device GPU:2"),
        (["gpu0"], MAP, "neither an NVML index nor a TensorFlow device name"),
        ([True], MAP, "expected an NVML index"),
        ([1.0], MAP, "expected an NVML index"),
        ([3, "GPU:0"], MAP, "named twice"),
        (["CPU:1", "/cpu:1"], MAP, "named twice"),
        ([2], {"2": "GPU:3"}, "GPU 2 should be TensorFlow's GPU:3"),
    ],
)
def test_resolve_devices_errors(devices, gpu_map, words):
    with pytest.raises(SpecError) as info:
        resolve_devices(devices, logical=LOGICAL, gpu_map=gpu_map)
    assert words in str(info.value) and "HINT:" in str(info.value)
