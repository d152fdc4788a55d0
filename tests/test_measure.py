"""measure_devices on the 4 logical CPUs of the tf4 fixture; peaks and weighting."""

from __future__ import annotations

import doctest
import math

import pytest

from tfdevices import measure
from tfdevices.core.errors import InputError
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory
from tfdevices.jobs.env import launch_info
from tfdevices.jobs.ranks import gpu_for_rank
from tfdevices.measure import DeviceSpeed, measure_devices, peak_for


def test_measures_every_named_device(tf4) -> None:
    speeds = measure_devices(["CPU:0", "/device:CPU:1"], size=96, matmuls=3, copy_bytes="1MiB")
    assert [s.device for s in speeds] == ["CPU:0", "CPU:1"]
    for s in speeds:
        assert math.isfinite(s.flops) and s.flops > 0 and s.copy_bytes_per_s > 0
        assert s.flops == pytest.approx(2 * 96**3 * 3 / s.matmul_seconds)
        assert s.copy_bytes_per_s == pytest.approx(s.copy_bytes / s.copy_seconds)
        assert s.copy_kind == "in-memory" and s.copy_bytes == 2 * (1 << 20)
        assert s.peak_flops is None and s.flops_efficiency is None
        assert s.row().startswith(f"{s.device}: matmul ")


def test_default_devices_are_the_cpus_without_a_gpu(tf4) -> None:
    speeds = measure_devices(size=32, matmuls=1, copy_bytes=4096)
    assert [s.device for s in speeds] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


def test_bad_arguments(tf4) -> None:
    with pytest.raises(InputError, match=r"unknown device\(s\) \['GPU:0'\]"):
        measure_devices(["GPU:0"])
    with pytest.raises(InputError, match=r"measure_devices\(size=0\)"):
        measure_devices(size=0)


def test_peaks_and_weighting_from_speeds() -> None:
    assert peak_for("NVIDIA H100 PCIe")[0] == 51e12 and peak_for("NVIDIA H100 80GB HBM3")[0] == 67e12
    gpus = (
        GpuInfo(index=2, name="NVIDIA A100-SXM4-40GB", uuid="a", tf_name="/GPU:0"),
        GpuInfo(index=5, name="Tesla T4", uuid="b", tf_name="/GPU:1"),
    )
    inv = Inventory(gpus=gpus, source="nvml")
    assert measure._gpu_for("GPU:1", inv).index == 5
    speeds = [
        DeviceSpeed("GPU:0", gpu_index=2, flops=15e12, peak_flops=19.5e12),
        DeviceSpeed("GPU:1", gpu_index=5, flops=5e12, peak_flops=8.1e12),
    ]
    plan = gpu_for_rank(
        launch_info({}), [2, 5], local_rank=0, local_world_size=4, mapping="weighted", speeds=speeds, share=True
    ).plan
    assert plan == ((2,), (2,), (2,), (5,))  # three times the speed, three times the replicas


def test_docstring_examples() -> None:
    failed, tried = doctest.testmod(measure)
    assert tried >= 4 and failed == 0
