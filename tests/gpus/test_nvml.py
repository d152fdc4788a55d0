"""The NVML adapter against a fake pynvml, and against the real one on this machine."""

from __future__ import annotations

import ctypes.util
import threading

import pytest

from tests import fake_nvml as fk
from tfdevices.gpus import nvml
from tfdevices.gpus.processes import GpuProcess

GPUS = fk.eight_gpus()


@pytest.fixture(scope="module")
def snap() -> nvml.NvmlSnapshot:
    return nvml.Nvml(fk.FakeNvml(GPUS)).snapshot()


@pytest.mark.parametrize("n", range(len(GPUS)))
def test_each_gpu_is_read_as_plain_data(snap: nvml.NvmlSnapshot, n: int) -> None:
    gpu, dev = GPUS[n], snap.devices[n].gpu
    assert (dev.index, dev.name, dev.uuid, dev.pci_bus_id) == (n, gpu.name, gpu.uuid, gpu.pci_bus_id)
    assert (dev.memory_total, dev.memory_used, dev.memory_free) == (
        gpu.memory_total,
        gpu.memory_used,
        gpu.memory_total - gpu.memory_used,
    )
    assert dev.utilization == pytest.approx(gpu.util_percent / 100)
    assert dev.compute_capability == gpu.cc
    assert dev.processes == len(set(gpu.compute_pids) | set(gpu.graphics_pids))
    assert dev.mig_enabled == (None if gpu.mig is None and gpu.cc < (8, 0) else gpu.mig is not None)
    assert [
        (m.gpu.mig_index, m.gpu.uuid, m.gpu.memory_total, m.gpu.memory_used, m.gpu_instance_id, m.compute_instance_id)
        + (m.gpu.processes,)
        for m in snap.devices[n].mig
    ] == [(m.slot, m.uuid, m.memory_total, m.memory_used, m.gi, m.ci, len(m.pids)) for m in gpu.mig or ()]


def test_snapshot_has_driver_and_no_failure(snap: nvml.NvmlSnapshot) -> None:
    assert (snap.failure, snap.reason, snap.driver_version, len(snap.devices)) == (
        None,
        None,
        fk.FakeNvml().driver,
        len(GPUS),
    )


def test_old_pynvml_bytes_are_decoded() -> None:
    gpus = [fk.replace(g, as_bytes=True) for g in GPUS[:2]]
    devs = [d.gpu for d in nvml.Nvml(fk.FakeNvml(gpus)).snapshot().devices]
    assert [(d.name, d.uuid, d.pci_bus_id) for d in devs] == [(g.name, g.uuid, g.pci_bus_id) for g in gpus]


_BOTH_MEMORY_QUERIES = ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2")


@pytest.mark.parametrize(
    "fns, field, unknown",
    [
        (("nvmlDeviceGetUtilizationRates",), "utilization", None),
        (_BOTH_MEMORY_QUERIES, "memory_total", 0),  # GpuInfo's memory is 0 where NVML cannot say
        (_BOTH_MEMORY_QUERIES, "memory_free", 0),
        (_BOTH_MEMORY_QUERIES, "memory_reserved", None),
        (("nvmlDeviceGetCudaComputeCapability",), "compute_capability", None),
        (("nvmlDeviceGetMigMode",), "mig_enabled", None),
    ],
)
@pytest.mark.parametrize("code", [fk.NVML_ERROR_NOT_SUPPORTED, fk.NVML_ERROR_NO_PERMISSION, fk.NVML_ERROR_UNKNOWN])
def test_unavailable_value_is_none_not_an_exception(
    fns: tuple[str, ...], field: str, unknown: object, code: int
) -> None:
    gpu = fk.replace(GPUS[0], fail=tuple((fn, code) for fn in fns))
    dev = nvml.Nvml(fk.FakeNvml([gpu, GPUS[1]])).snapshot().devices[0].gpu
    assert getattr(dev, field) == unknown
    assert dev.uuid == gpu.uuid


@pytest.mark.parametrize(
    "failing",
    [
        ("nvmlDeviceGetComputeRunningProcesses",),
        ("nvmlDeviceGetGraphicsRunningProcesses",),
        ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"),
    ],
)
def test_processes_count_what_can_be_read(failing: tuple[str, ...]) -> None:
    gpu = fk.replace(GPUS[2], fail=tuple((f, fk.NVML_ERROR_NO_PERMISSION) for f in failing))
    dev = nvml.Nvml(fk.FakeNvml([gpu])).snapshot().devices[0].gpu
    readable = [
        p
        for f, p in (
            ("nvmlDeviceGetComputeRunningProcesses", gpu.compute_pids),
            ("nvmlDeviceGetGraphicsRunningProcesses", gpu.graphics_pids),
        )
        if f not in failing
    ]
    assert dev.processes == (None if not readable else len(set().union(*readable)))


@pytest.mark.parametrize(
    "kwargs, failure, words",
    [
        (dict(init_error=fk.NVML_ERROR_LIBRARY_NOT_FOUND), "library-missing", "no NVIDIA driver"),
        (dict(init_error=fk.NVML_ERROR_DRIVER_NOT_LOADED), "driver-not-loaded", "driver is not loaded"),
        (dict(init_error=fk.NVML_ERROR_NO_PERMISSION), "no-permission", "insufficient permissions"),
        (dict(init_error=fk.NVML_ERROR_UNKNOWN), "nvml-error", "NVML error: Unknown Error"),
        (dict(count_error=fk.NVML_ERROR_NO_PERMISSION), "no-permission", "insufficient permissions"),
        (dict(count_error=fk.NVML_ERROR_GPU_IS_LOST), "nvml-error", "GPU is lost"),
        (dict(), "no-gpu", "NVML reports no GPU"),
    ],
)
def test_failures_are_classified_never_raised(kwargs: dict, failure: str, words: str) -> None:
    snap = nvml.Nvml(fk.FakeNvml([], **kwargs)).snapshot()
    assert (snap.devices, snap.failure) == ((), failure)
    assert words in snap.reason
    assert snap.failure in nvml.FAILURES


def test_missing_pynvml_is_library_missing() -> None:
    snap = nvml.Nvml(None, import_error="No module named 'pynvml'").snapshot()
    assert (snap.failure, snap.reason) == (
        "library-missing",
        "nvidia-ml-py is not installed (No module named 'pynvml')",
    )


def test_a_gpu_nvml_cannot_open_is_left_out_with_a_note() -> None:
    gpus = [
        GPUS[0],
        fk.replace(GPUS[1], fail=(("nvmlDeviceGetHandleByIndex", fk.NVML_ERROR_GPU_IS_LOST),)),
        GPUS[2],
    ]
    snap = nvml.Nvml(fk.FakeNvml(gpus)).snapshot()
    assert [d.gpu.index for d in snap.devices] == [0, 2]
    assert snap.notes and snap.notes[0].startswith("GPU 1 left out") and "GPU is lost" in snap.notes[0]


@pytest.mark.parametrize("init_error", [None, fk.NVML_ERROR_DRIVER_NOT_LOADED])
def test_nvml_is_initialised_once_across_threads(init_error: int | None) -> None:
    fake = fk.FakeNvml(GPUS[:2], init_error=init_error, init_delay=0.05)
    adapter = nvml.Nvml(fake)
    results: list[nvml.NvmlSnapshot] = []
    threads = [threading.Thread(target=lambda: results.append(adapter.snapshot())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.init_calls == 1
    assert len(set(results)) == 1 and len(results) == 8


def test_shutdown_then_snapshot_initialises_again() -> None:
    fake = fk.FakeNvml(GPUS[:1])
    adapter = nvml.Nvml(fake)
    first = adapter.snapshot()
    adapter.shutdown()
    second = adapter.snapshot()
    assert (fake.init_calls, fake.shutdown_calls, first) == (2, 1, second)


def test_real_pynvml_on_this_machine() -> None:
    """The real adapter: without libnvidia-ml it gives an empty snapshot with a reason."""
    snap = nvml.snapshot()
    has_library = ctypes.util.find_library("nvidia-ml") is not None
    if has_library:
        assert snap.failure in (None,) + nvml.FAILURES
        assert bool(snap.devices) == (snap.failure is None)
    else:
        assert (snap.devices, snap.failure) == ((), "library-missing")
        assert "NVML" in snap.reason


def test_names_that_are_not_text_become_printable() -> None:
    gpus = [
        fk.replace(GPUS[0], name="A100\ud800"),
        fk.replace(GPUS[1], name="x" * 5000),
        fk.replace(GPUS[2], name="T4 \xff\xfe", as_bytes=False),
    ]
    devs = [d.gpu for d in nvml.Nvml(fk.FakeNvml(gpus)).snapshot().devices]
    assert devs[0].name == "A100\\ud800" and len(devs[1].name) == 256
    for d in devs:
        d.name.encode("utf-8")  # printable, writable, JSON-safe


def test_what_gpustat_shows_is_read(snap: nvml.NvmlSnapshot) -> None:
    gpu, dev = GPUS[0], snap.devices[0].gpu
    assert (
        dev.temperature,
        dev.fan_speed,
        dev.power_draw_mw,
        dev.power_limit_mw,
        dev.performance_state,
        dev.clock_sm_mhz,
        dev.clock_memory_mhz,
        dev.ecc_errors,
    ) == (gpu.temperature, None, gpu.power_mw, gpu.power_limit_mw, gpu.pstate, gpu.clock_sm, gpu.clock_mem, gpu.ecc)


@pytest.mark.parametrize(
    "fn, field",
    [
        ("nvmlDeviceGetTemperature", "temperature"),
        ("nvmlDeviceGetFanSpeed", "fan_speed"),
        ("nvmlDeviceGetPowerUsage", "power_draw_mw"),
        ("nvmlDeviceGetEnforcedPowerLimit", "power_limit_mw"),
        ("nvmlDeviceGetPerformanceState", "performance_state"),
        ("nvmlDeviceGetClockInfo", "clock_sm_mhz"),
        ("nvmlDeviceGetTotalEccErrors", "ecc_errors"),
    ],
)
def test_an_unreadable_sensor_is_none(fn: str, field: str) -> None:
    gpu = fk.replace(GPUS[0], fan=40, fail=((fn, fk.NVML_ERROR_NOT_SUPPORTED),))
    assert getattr(nvml.Nvml(fk.FakeNvml([gpu])).snapshot().devices[0].gpu, field) is None


def test_unknown_performance_state_32_is_none() -> None:
    gpu = fk.replace(GPUS[0], pstate=32)  # NVML_PSTATE_UNKNOWN
    assert nvml.Nvml(fk.FakeNvml([gpu])).snapshot().devices[0].gpu.performance_state is None


def test_process_list_merges_compute_and_graphics_with_memory() -> None:
    gpu = fk.replace(
        GPUS[2], compute_pids=(102, 103), graphics_pids=(103, 107), process_memory=((102, 3 << 30), (103, 1 << 30))
    )
    procs = nvml.Nvml(fk.FakeNvml([gpu])).snapshot().devices[0].gpu.process_list
    assert procs == (
        GpuProcess(102, "C", 3 << 30),
        GpuProcess(103, "C+G", 1 << 30),
        GpuProcess(107, "G", None),
    )


def test_mig_instances_list_their_own_processes(snap: nvml.NvmlSnapshot) -> None:
    mig = snap.devices[5].mig[0].gpu
    assert [p.pid for p in mig.process_list] == list(GPUS[5].mig[0].pids)


_SENSOR_CALLS = {
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
}


@pytest.mark.parametrize("sensors", [True, False])
def test_sensors_and_processes_are_read_only_when_asked(sensors: bool) -> None:
    fake = fk.FakeNvml(GPUS)
    snap = nvml.Nvml(fake).snapshot(sensors=sensors)
    assert _SENSOR_CALLS & set(fake.calls) == (_SENSOR_CALLS if sensors else set())
    gpu, mig = snap.devices[0].gpu, snap.devices[5].mig[0].gpu
    assert (gpu.memory_used, gpu.utilization, gpu.compute_capability) == (10 << 30, 0.35, (8, 0))  # always read
    assert (gpu.temperature is None, gpu.process_list is None, mig.process_list is None) == (not sensors,) * 3
