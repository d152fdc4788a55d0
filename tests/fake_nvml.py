"""A fake ``pynvml`` built from data, for testing the one NVML adapter (tfdevices.gpus.nvml).

It has the functions the adapter calls, raises ``NVMLError`` with NVML's codes
the way ``pynvml`` does, and counts ``nvmlInit`` calls. Memory is answered by both of
NVML's queries: the first (``nvmlDeviceGetMemoryInfo``: used counts the memory the
driver reserves) and the versioned one (``version=nvmlMemory_v2``: used as ``nvidia-smi``
shows it, ``reserved`` apart), as on a real H200 (:func:`h200`).

It imports nothing heavy (no ``dataclasses``, no ``typing``): ``tests/pynvml_fake``
serves it to whole processes, whose start-up the benchmarks time against the NVML floor.

>>> fake = FakeNvml([FakeGpu(name="A100", memory_total=40 * 2**30)])
>>> fake.nvmlInit(); fake.nvmlDeviceGetCount()
1
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from tfdevices.core.record_class import record, replace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["FakeGpu", "FakeMig", "FakeNvml", "NVMLError", "h200", "replace"]

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

# constants as pynvml names them (nvml.h values)
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AFFINITY_SCOPE_NODE = 0
NVML_NVLINK_MAX_LINKS = 18
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50
NVML_MEMORY_V2 = 0x02000028  # pynvml's nvmlMemory_v2: the struct's size (40) and version 2

_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like pynvml's: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"NVML error {self.value}")


@record
class FakeMig:
    uuid: str
    name: str = "A100 MIG 3g.20gb"
    memory_total: int = 20 * 2**30
    memory_used: int = 0
    slot: int = 0
    gi: int = 1
    ci: int = 0
    pids: tuple[int, ...] = ()


@record
class FakeGpu:
    """One fake GPU. ``fail`` maps an NVML function name to the error code it raises: the versioned
    memory query is ``"nvmlDeviceGetMemoryInfo_v2"`` (the C function pynvml calls for it).

    ``memory_used`` is the memory used as ``nvidia-smi`` counts it (NVML's versioned query);
    ``memory_reserved`` is what the driver reserves, which NVML's first query counts as used too.
    """

    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "00000000:01:00.0"
    memory_total: int = 40 * 2**30
    memory_used: int = 0
    memory_reserved: int = 0
    util_percent: int = 0
    cc: tuple[int, int] = (8, 0)
    compute_pids: tuple[int, ...] = ()
    graphics_pids: tuple[int, ...] = ()
    mig: tuple[FakeMig, ...] | None = None  # None: no MIG support; (): MIG on, no instance
    max_mig: int = 7
    fail: tuple[tuple[str, int], ...] = ()
    as_bytes: bool = False  # old pynvml returns bytes
    # what gpustat / nvitop show (None: NVML answers Not Supported, as for a passively cooled GPU's fan)
    temperature: int | None = 34
    fan: int | None = None
    power_mw: int | None = 61_000
    power_limit_mw: int | None = 400_000
    pstate: int | None = 0
    clock_sm: int | None = 1410
    clock_mem: int | None = 1215
    ecc: int | None = 0
    process_memory: tuple[tuple[int, int], ...] = ()  # (pid, bytes); other pids: usedGpuMemory None
    # wiring
    cpus: tuple[int, ...] | None = None  # None: nvmlDeviceGetCpuAffinity answers Not Supported
    numa: int | None = None
    nvlinks: tuple[tuple[str, int], ...] | None = None  # (remote bus id, NVML_NVLINK_DEVICE_TYPE_*); None: no NVLink


class FakeNvml:
    """A ``pynvml``-like module made of data.

    Args:
        gpus: the fake GPUs, in NVML index order.
        init_error: an NVML code ``nvmlInit`` raises (e.g. ``NVML_ERROR_DRIVER_NOT_LOADED``).
        count_error: an NVML code ``nvmlDeviceGetCount`` raises.
        driver: the driver version string.
        init_delay: seconds ``nvmlInit`` sleeps (to test the lock).
        ancestors: ``{(i, j): NVML_TOPOLOGY_*}`` for GPU pairs (either order); a pair
            not given answers Not Supported.
        old_pynvml: be an nvidia-ml-py older than the versioned memory query: no
            ``nvmlMemory_v2``, and ``nvmlDeviceGetMemoryInfo`` takes no ``version``.
        cuda_driver: the driver's CUDA version (``nvmlSystemGetCudaDriverVersion_v2``, ``13000``: 13.0);
            ``None``: Not Supported.
    """

    NVMLError = NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu] | tuple[FakeGpu, ...] = (),
        *,
        init_error: int | None = None,
        count_error: int | None = None,
        driver: str = "550.54.15",
        init_delay: float = 0.0,
        ancestors: dict[tuple[int, int], int] | None = None,
        old_pynvml: bool = False,
        cuda_driver: int | None = None,
    ) -> None:
        self.gpus = list(gpus)
        self.cuda_driver = cuda_driver
        self.old_pynvml = old_pynvml
        self.ancestors = dict(ancestors or {})
        self.calls: dict[str, int] = {}
        self.init_error = init_error
        self.count_error = count_error
        self.driver = driver
        self.init_delay = init_delay
        self.init_calls = 0
        self.shutdown_calls = 0
        self._count_lock = threading.Lock()
        for name, value in globals().items():
            if name.startswith("NVML_"):
                setattr(self, name, value)
        if not old_pynvml:
            self.nvmlMemory_v2 = NVML_MEMORY_V2

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

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        if self.cuda_driver is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self.cuda_driver

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        self._check(self.gpus[index], "nvmlDeviceGetHandleByIndex")
        return SimpleNamespace(gpu=self.gpus[index], mig=None, index=index)

    # --- per device ----------------------------------------------------------------------------
    def _check(self, gpu: FakeGpu, fn: str) -> None:
        self.calls[fn] = self.calls.get(fn, 0) + 1
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

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> Any:
        """As pynvml: ``version=nvmlMemory_v2`` asks NVML's versioned query (used as ``nvidia-smi`` counts it,
        ``reserved`` apart); without it, the first query, whose used counts the reserved memory too.
        """
        if version is not None and self.old_pynvml:
            raise TypeError("nvmlDeviceGetMemoryInfo() got an unexpected keyword argument 'version'")
        total, used = (h.mig.memory_total, h.mig.memory_used) if h.mig else (h.gpu.memory_total, h.gpu.memory_used)
        reserved = 0 if h.mig else h.gpu.memory_reserved
        free = total - used - reserved
        if not version:
            self._check(h.gpu, "nvmlDeviceGetMemoryInfo")
            return SimpleNamespace(total=total, free=free, used=used + reserved)
        self._check(h.gpu, "nvmlDeviceGetMemoryInfo_v2")
        if version != NVML_MEMORY_V2:
            raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return SimpleNamespace(version=version, total=total, reserved=reserved, free=free, used=used)

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
        return [self._proc(h, p) for p in pids]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list[Any]:
        self._check(h.gpu, "nvmlDeviceGetGraphicsRunningProcesses")
        return [] if h.mig else [self._proc(h, p) for p in h.gpu.graphics_pids]

    @staticmethod
    def _proc(h: Any, pid: int) -> Any:
        """As pynvml's nvmlFriendlyObject of c_nvmlProcessInfo_t: usedGpuMemory None when not available."""
        gi = h.mig.gi if h.mig else 0xFFFFFFFF
        return SimpleNamespace(
            pid=pid,
            usedGpuMemory=dict(h.gpu.process_memory).get(pid),
            gpuInstanceId=gi,
            computeInstanceId=h.mig.ci if h.mig else 0xFFFFFFFF,
        )

    # --- what gpustat / nvitop show -------------------------------------------------------------
    def _value(self, h: Any, fn: str, value: Any) -> Any:
        self._check(h.gpu, fn)
        if value is None or h.mig:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._value(h, "nvmlDeviceGetTemperature", h.gpu.temperature)

    def nvmlDeviceGetFanSpeed(self, h: Any) -> int:
        return self._value(h, "nvmlDeviceGetFanSpeed", h.gpu.fan)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return self._value(h, "nvmlDeviceGetPowerUsage", h.gpu.power_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        return self._value(h, "nvmlDeviceGetEnforcedPowerLimit", h.gpu.power_limit_mw)

    def nvmlDeviceGetPerformanceState(self, h: Any) -> int:
        return self._value(h, "nvmlDeviceGetPerformanceState", h.gpu.pstate)

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        clocks = {NVML_CLOCK_SM: h.gpu.clock_sm, NVML_CLOCK_MEM: h.gpu.clock_mem}
        if kind not in clocks:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._value(h, "nvmlDeviceGetClockInfo", clocks[kind])

    def nvmlDeviceGetTotalEccErrors(self, h: Any, error_type: int, counter: int) -> int:
        if (error_type, counter) != (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._value(h, "nvmlDeviceGetTotalEccErrors", h.gpu.ecc)

    # --- wiring ------------------------------------------------------------------------------------
    def nvmlDeviceGetCpuAffinity(self, h: Any, words: int) -> list[int]:
        """As pynvml: a c_ulonglong array of ``words`` 64-bit masks, CPU 0 in bit 0 of word 0."""
        return self._mask(self._value(h, "nvmlDeviceGetCpuAffinity", h.gpu.cpus), words)

    def nvmlDeviceGetMemoryAffinity(self, h: Any, words: int, scope: int) -> list[int]:
        if scope != NVML_AFFINITY_SCOPE_NODE:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        numa = None if h.gpu.numa is None else (h.gpu.numa,)
        return self._mask(self._value(h, "nvmlDeviceGetMemoryAffinity", numa), words)

    @staticmethod
    def _mask(bits: tuple[int, ...], words: int) -> list[int]:
        out = [0] * words
        for b in bits:
            if b < 64 * words:
                out[b // 64] |= 1 << (b % 64)
        return out

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: Any, h2: Any) -> int:
        self._check(h1.gpu, "nvmlDeviceGetTopologyCommonAncestor")
        level = self.ancestors.get((h1.index, h2.index), self.ancestors.get((h2.index, h1.index)))
        if level is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return level

    def _link(self, h: Any, link: int, fn: str) -> tuple[str, int]:
        links = self._value(h, fn, h.gpu.nvlinks)
        if not 0 <= link < min(len(links), NVML_NVLINK_MAX_LINKS) or link >= NVML_NVLINK_MAX_LINKS:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        self._link(h, link, "nvmlDeviceGetNvLinkState")
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: Any, link: int) -> Any:
        return SimpleNamespace(busId=self._s(h, self._link(h, link, "nvmlDeviceGetNvLinkRemotePciInfo")[0]))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: Any, link: int) -> int:
        return self._link(h, link, "nvmlDeviceGetNvLinkRemoteDeviceType")[1]

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        self._check(h.gpu, "nvmlDeviceGetMigMode")
        if h.gpu.mig is None and h.gpu.cc not in ((8, 0), (9, 0), (10, 0)):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # MIG: A100/A30, H100/H200, B200 only
        on = int(h.gpu.mig is not None)
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        return h.gpu.max_mig

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, slot: int) -> Any:
        mig = next((m for m in h.gpu.mig or () if m.slot == slot), None)
        if mig is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return SimpleNamespace(gpu=h.gpu, mig=mig, index=h.index)

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
            mig = (
                FakeMig(mig_uuid(n, 1), slot=1, gi=1, ci=0, memory_used=2**30, pids=(106,)),
                FakeMig(mig_uuid(n, 2), slot=2, gi=2, ci=0),
            )
        gpus.append(
            FakeGpu(
                name=name,
                uuid=uuid(n),
                pci_bus_id=f"00000000:{0x10 + n:02X}:00.0",
                memory_total=mem * 2**30,
                memory_used=used * 2**30,
                util_percent=util,
                cc=cc,
                compute_pids=pids,
                graphics_pids=pids[:1],
                mig=mig,
            )
        )
    return gpus


_CODE_LEVELS = {
    "PIX": NVML_TOPOLOGY_SINGLE,
    "PXB": NVML_TOPOLOGY_MULTIPLE,
    "PHB": NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": NVML_TOPOLOGY_NODE,
    "SYS": NVML_TOPOLOGY_SYSTEM,
}


def switch_bus_id(n: int) -> str:
    """The PCI bus id of NVSwitch ``n`` (a DGX A100's are c4:00.0 .. c9:00.0, NVIDIA/nccl#1505)."""
    return f"00000000:{0xC4 + n:02X}:00.0"


def from_inventory(
    inv: Any,
    *,
    switches: int = 0,
    pids: dict[str, tuple[tuple[int, int], ...]] | None = None,
    driver: str | None = None,
) -> FakeNvml:
    """A fake NVML that serves an inventory fixture, its topology included, in NVML's own shapes.

    Each ``NV#`` between two GPUs becomes # active NVLinks whose remote PCI info is
    the peer GPU, or, with ``switches`` > 0 (an NVSwitch node), each GPU's links are
    spread evenly over that many NVSwitches (remote type SWITCH), as on a DGX A100
    where each A100 has 2 links to each of 6 NVSwitches. A pair's PCIe common
    ancestor is its PCIe code, or, under NVLink, NODE on one NUMA node and SYSTEM across.

    Args:
        inv: a :class:`tfdevices.gpus.inventory.Inventory` with ``topology``.
        switches: NVSwitches per node (0: direct NVLinks).
        pids: GPU key -> ((pid, GPU memory bytes), ...) running on it (compute).
        driver: the driver version (default: the inventory's).
    """
    topo, pids = inv.topology, pids or {}
    fakes = []
    for g in (g for g in inv.gpus if g.mig_index is None):
        migs = tuple(
            FakeMig(
                m.uuid,
                name=m.name,
                memory_total=m.memory_total,
                memory_used=m.memory_used,
                slot=m.mig_index,
                gi=m.mig_index + 1,
                ci=0,
                pids=tuple(p for p, _ in pids.get(m.key, ())),
            )
            for m in inv.gpus
            if m.index == g.index and m.mig_index is not None
        )
        mine = pids.get(g.key, ())
        links = None
        if topo is not None:
            peers = [
                (o, int(code[2:]))
                for o in topo.gpus
                if o != g.index and (code := topo.link(g.index, o) or "").startswith("NV")
            ]
            if switches and peers:
                total = max(n for _, n in peers)
                links = tuple((switch_bus_id(k % switches), NVML_NVLINK_DEVICE_TYPE_SWITCH) for k in range(total))
            elif peers:
                bus = {x.index: x.pci_bus_id for x in inv.gpus if x.mig_index is None}
                links = tuple((bus[o], NVML_NVLINK_DEVICE_TYPE_GPU) for o, n in peers for _ in range(n))
        fakes.append(
            FakeGpu(
                name=g.name,
                uuid=g.uuid,
                pci_bus_id=g.pci_bus_id,
                memory_total=g.memory_total,
                memory_used=g.memory_used,
                memory_reserved=g.memory_reserved or 0,
                util_percent=round((g.utilization or 0) * 100),
                cc=g.compute_capability or (8, 0),
                compute_pids=tuple(p for p, _ in mine),
                process_memory=tuple(mine) + tuple(x for m in migs for x in pids.get(f"{g.index}:{m.slot}", ())),
                mig=migs if g.mig_enabled else None,
                temperature=g.temperature,
                fan=g.fan_speed,
                power_mw=g.power_draw_mw,
                power_limit_mw=g.power_limit_mw,
                pstate=g.performance_state,
                clock_sm=g.clock_sm_mhz,
                clock_mem=g.clock_memory_mhz,
                ecc=g.ecc_errors,
                cpus=topo.cpus(g.index) or None if topo else None,
                numa=topo.numa(g.index) if topo else None,
                nvlinks=links,
            )
        )
    ancestors = {}
    if topo is not None:
        for a in topo.gpus:
            for b in topo.gpus:
                code = topo.link(a, b)
                if a < b and code:
                    ancestors[(a, b)] = _CODE_LEVELS.get(code) or (
                        NVML_TOPOLOGY_NODE if topo.numa(a) == topo.numa(b) else NVML_TOPOLOGY_SYSTEM
                    )
    return FakeNvml(fakes, driver=driver or inv.driver_version or "550.54.15", ancestors=ancestors)


# One real NVIDIA H200 (driver 580.159.04), from tests/data: h200-list-idle.json and h200-list-busy.json are
# what tfdevices 0.2.0 listed (NVML's first memory query), h200-nvidia-smi.txt what nvidia-smi said (the
# versioned query). tests/gpus/test_h200.py holds these figures to those files.
H200_TOTAL = 150_754_820_096  # 143,771 MiB: both queries and nvidia-smi agree
H200_RESERVED = 644_939_776  # 615.06 MiB: the idle listing's used (first query), where nvidia-smi said 0 MiB used
H200_BUSY_USED = 106_648_436_736 - H200_RESERVED  # the busy listing's used, less the reserved memory: 101,092.8 MiB
H200_BUSY_PID = (628, 105_994_256_384)  # torch, holding 101,084 MiB (nvidia-smi --query-compute-apps agrees)


def h200(*, busy: bool = False, **changes: Any) -> FakeNvml:
    """The fake NVML serving the real H200: idle, or with torch holding 70% of its memory at 100% use.

    Args:
        busy: the card under load (``h200-list-busy.json``) rather than idle (``h200-list-idle.json``).
        changes: FakeGpu fields to change (e.g. ``fail=...``); ``old_pynvml`` goes to FakeNvml.
    """
    old = bool(changes.pop("old_pynvml", False))
    gpu = FakeGpu(
        name="NVIDIA H200",
        uuid="GPU-1be11b0e-d9c7-f695-cfb6-fb82f383fb21",
        pci_bus_id="00000000:00:06.0",
        memory_total=H200_TOTAL,
        memory_used=H200_BUSY_USED if busy else 0,
        memory_reserved=H200_RESERVED,
        util_percent=100 if busy else 0,
        cc=(9, 0),
        compute_pids=(H200_BUSY_PID[0],) if busy else (),
        process_memory=(H200_BUSY_PID,) if busy else (),
        temperature=64 if busy else 41,
        fan=None,
        power_mw=691_562 if busy else 78_559,
        power_limit_mw=700_000,
        pstate=0,
        clock_sm=1440 if busy else 345,
        clock_mem=3201,
        ecc=0,
        cpus=tuple(range(16)),
        numa=0,
    )
    return FakeNvml([replace(gpu, **changes)], driver="580.159.04", old_pynvml=old, cuda_driver=13000)
