"""A fake ``pynvml`` built from data, for testing the one NVML adapter (tfdevices.gpus.nvml).

It has the functions the adapter calls, raises ``NVMLError`` with NVML's codes
the way ``pynvml`` does, and counts ``nvmlInit`` calls.

>>> fake = FakeNvml([FakeGpu(name="A100", memory_total=40 * 2**30)])
>>> fake.nvmlInit(); fake.nvmlDeviceGetCount()
1
"""

from __future__ import annotations

import dataclasses
import threading
import time
from types import SimpleNamespace
from typing import Any

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

_TEXT = {NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_NOT_SUPPORTED: "Not Supported",
         NVML_ERROR_NO_PERMISSION: "Insufficient Permissions", NVML_ERROR_NOT_FOUND: "Not Found",
         NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
         NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
         NVML_ERROR_GPU_IS_LOST: "GPU is lost", NVML_ERROR_UNKNOWN: "Unknown Error"}


class NVMLError(Exception):
    """Like pynvml's: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"NVML error {self.value}")


@dataclasses.dataclass(frozen=True)
class FakeMig:
    uuid: str
    name: str = "A100 MIG 3g.20gb"
    memory_total: int = 20 * 2**30
    memory_used: int = 0
    slot: int = 0
    gi: int = 1
    ci: int = 0
    pids: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class FakeGpu:
    """One fake GPU. ``fail`` maps an NVML function name to the error code it raises."""

    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "00000000:01:00.0"
    memory_total: int = 40 * 2**30
    memory_used: int = 0
    util_percent: int = 0
    cc: tuple[int, int] = (8, 0)
    compute_pids: tuple[int, ...] = ()
    graphics_pids: tuple[int, ...] = ()
    mig: tuple[FakeMig, ...] | None = None  # None: no MIG support; (): MIG on, no instance
    max_mig: int = 7
    fail: tuple[tuple[str, int], ...] = ()
    as_bytes: bool = False  # old pynvml returns bytes


class FakeNvml:
    """A ``pynvml``-like module made of data.

    Args:
        gpus: the fake GPUs, in NVML index order.
        init_error: an NVML code ``nvmlInit`` raises (e.g. ``NVML_ERROR_DRIVER_NOT_LOADED``).
        count_error: an NVML code ``nvmlDeviceGetCount`` raises.
        driver: the driver version string.
        init_delay: seconds ``nvmlInit`` sleeps (to test the lock).
    """

    NVMLError = NVMLError

    def __init__(self, gpus: list[FakeGpu] | tuple[FakeGpu, ...] = (), *, init_error: int | None = None,
                 count_error: int | None = None, driver: str = "550.54.15", init_delay: float = 0.0) -> None:
        self.gpus = list(gpus)
        self.init_error = init_error
        self.count_error = count_error
        self.driver = driver
        self.init_delay = init_delay
        self.init_calls = 0
        self.shutdown_calls = 0
        self._count_lock = threading.Lock()
        for name, value in globals().items():
            if name.startswith("NVML_ERROR_"):
                setattr(self, name, value)

    # --- library ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        with self._count_lock:
            self.init_calls += 1
        time.sleep(self.init_delay)
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        self._check(self.gpus[index], "nvmlDeviceGetHandleByIndex")
        return SimpleNamespace(gpu=self.gpus[index], mig=None)

    # --- per device ----------------------------------------------------------------------------
    @staticmethod
    def _check(gpu: FakeGpu, fn: str) -> None:
        code = dict(gpu.fail).get(fn)
        if code is not None:
            raise NVMLError(code)

    def _s(self, h: Any, value: str) -> str | bytes:
        return value.encode() if h.gpu.as_bytes else value

    def nvmlDeviceGetName(self, h: Any) -> str | bytes:
        self._check(h.gpu, "nvmlDeviceGetName")
        return self._s(h, h.mig.name if h.mig else h.gpu.name)

    def nvmlDeviceGetUUID(self, h: Any) -> str | bytes:
        self._check(h.gpu, "nvmlDeviceGetUUID")
        return self._s(h, h.mig.uuid if h.mig else h.gpu.uuid)

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        self._check(h.gpu, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=self._s(h, h.gpu.pci_bus_id))

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        self._check(h.gpu, "nvmlDeviceGetMemoryInfo")
        total, used = (h.mig.memory_total, h.mig.memory_used) if h.mig else (h.gpu.memory_total, h.gpu.memory_used)
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        if h.mig:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self._check(h.gpu, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=h.gpu.util_percent, memory=0)

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        self._check(h.gpu, "nvmlDeviceGetCudaComputeCapability")
        return h.gpu.cc

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        self._check(h.gpu, "nvmlDeviceGetComputeRunningProcesses")
        pids = h.mig.pids if h.mig else h.gpu.compute_pids
        return [SimpleNamespace(pid=p, usedGpuMemory=None) for p in pids]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list[Any]:
        self._check(h.gpu, "nvmlDeviceGetGraphicsRunningProcesses")
        return [] if h.mig else [SimpleNamespace(pid=p, usedGpuMemory=None) for p in h.gpu.graphics_pids]

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        self._check(h.gpu, "nvmlDeviceGetMigMode")
        if h.gpu.mig is None and h.gpu.cc < (8, 0):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # no MIG before Ampere
        on = int(h.gpu.mig is not None)
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        return h.gpu.max_mig

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, slot: int) -> Any:
        mig = next((m for m in h.gpu.mig or () if m.slot == slot), None)
        if mig is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return SimpleNamespace(gpu=h.gpu, mig=mig)

    def nvmlDeviceGetGpuInstanceId(self, h: Any) -> int:
        return h.mig.gi

    def nvmlDeviceGetComputeInstanceId(self, h: Any) -> int:
        return h.mig.ci


def uuid(n: int) -> str:
    """A distinct, realistic GPU uuid for fake GPU ``n``: ``GPU-<n as 8 hex digits>-...``."""
    return f"GPU-{n:08x}-1111-2222-3333-{n:012x}"


def mig_uuid(n: int, slot: int) -> str:
    return f"MIG-{n:04x}{slot:04x}-aaaa-bbbb-cccc-{n:06x}{slot:06x}"


def eight_gpus() -> list[FakeGpu]:
    """8 GPUs of mixed memory, use and kind: an A100 with 2 MIG instances (GPU 5), V100s, T4s."""
    specs = [  # name, memory GiB, used GiB, util %, cc, compute pids
        ("NVIDIA A100-SXM4-80GB", 80, 10, 35, (8, 0), (101,)),
        ("NVIDIA A100-SXM4-80GB", 80, 0, 0, (8, 0), ()),
        ("Tesla V100-SXM2-32GB", 32, 30, 97, (7, 0), (102, 103)),
        ("Tesla V100-SXM2-32GB", 32, 1, 5, (7, 0), ()),
        ("Tesla T4", 16, 15, 100, (7, 5), (104,)),
        ("NVIDIA A100-SXM4-40GB", 40, 0, 0, (8, 0), ()),
        ("Tesla T4", 16, 0, 0, (7, 5), ()),
        ("NVIDIA H100 80GB HBM3", 80, 40, 50, (9, 0), (105,)),
    ]
    gpus = []
    for n, (name, mem, used, util, cc, pids) in enumerate(specs):
        mig = None
        if n == 5:
            mig = (FakeMig(mig_uuid(n, 1), slot=1, gi=1, ci=0, memory_used=2**30, pids=(106,)),
                   FakeMig(mig_uuid(n, 2), slot=2, gi=2, ci=0))
        gpus.append(FakeGpu(name=name, uuid=uuid(n), pci_bus_id=f"00000000:{0x10 + n:02X}:00.0",
                            memory_total=mem * 2**30, memory_used=used * 2**30, util_percent=util, cc=cc,
                            compute_pids=pids, graphics_pids=pids[:1], mig=mig))
    return gpus
