"""The one NVML adapter: plain data about each GPU, never an exception.

Everything tfdevices knows about the hardware comes through :class:`Nvml`. It
imports ``pynvml`` (the ``nvidia-ml-py`` package) lazily, initialises NVML once
behind a lock, and returns a frozen :class:`NvmlSnapshot`. A value NVML cannot
give (not supported, no permission) is ``None``; a failure to reach NVML at all
is classified into a human :attr:`NvmlSnapshot.reason` and an empty snapshot.

Tests pass a fake module (``Nvml(module=fake)``); nothing else in tfdevices
talks to NVML.

>>> snap = Nvml(module=None, import_error="No module named 'pynvml'").snapshot()
>>> snap.failure, snap.devices
('library-missing', ())
>>> snap.reason
"nvidia-ml-py is not installed (No module named 'pynvml')"
"""

from __future__ import annotations

import threading

from tfdevices.core.records import record, replace

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the listing path
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "FAILURES",
    "CPU_SET_WORDS",
    "NODE_SET_WORDS",
    "MAX_NVLINKS",
    "NvmlMig",
    "NvmlProcess",
    "NvmlDevice",
    "NvmlSnapshot",
    "Nvml",
    "normal_bus_id",
    "snapshot",
]

# NVML return codes (nvml.h); read from the module when it defines them.
_CODES = {
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
}
FAILURES = ("library-missing", "driver-not-loaded", "no-gpu", "no-permission", "nvml-error")
# NVML constants (nvml.h), read from the module when it defines them.
_CONSTANTS = {
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_CLOCK_SM": 1,
    "NVML_CLOCK_MEM": 2,
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0,
    "NVML_AFFINITY_SCOPE_NODE": 0,
    "NVML_NVLINK_MAX_LINKS": 18,
    "NVML_NVLINK_DEVICE_TYPE_GPU": 0,
    "NVML_NVLINK_DEVICE_TYPE_SWITCH": 2,
}
CPU_SET_WORDS = 64
"""64-bit words asked of ``nvmlDeviceGetCpuAffinity``: room for 4,096 CPUs."""
NODE_SET_WORDS = 4
"""64-bit words asked of ``nvmlDeviceGetMemoryAffinity``: room for 256 NUMA nodes."""
MAX_NVLINKS = 64
"""The most NVLinks read per GPU, whatever the module's ``NVML_NVLINK_MAX_LINKS`` says."""


@record
class NvmlMig:
    """One MIG instance of a GPU.

    Attributes:
        mig_index: its slot on the parent GPU (``nvidia-smi``'s "MIG dev").
        uuid: ``"MIG-..."``.
        gpu_instance_id: NVML GPU instance id (``None`` when unknown).
        compute_instance_id: NVML compute instance id (``None`` when unknown).
    """

    mig_index: int
    uuid: str
    name: str = ""
    memory_total: int | None = None
    memory_used: int | None = None
    memory_free: int | None = None
    processes: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    process_list: tuple[NvmlProcess, ...] | None = None


@record
class NvmlProcess:
    """One process on a GPU, from NVML's compute and graphics lists.

    Attributes:
        pid: its process id (in the driver's PID namespace).
        kind: ``"C"`` (compute), ``"G"`` (graphics) or ``"C+G"``, as ``nvidia-smi`` shows it.
        used_memory: GPU memory it holds in bytes (``None`` where NVML cannot say).
    """

    pid: int
    kind: str = "C"
    used_memory: int | None = None


@record
class NvmlDevice:
    """One physical GPU as NVML reports it; ``None`` where NVML could not say.

    Attributes:
        index: the NVML index, as ``nvidia-smi`` shows it.
        utilization: GPU busy fraction in [0, 1].
        mig_enabled: whether MIG mode is on (``None``: the GPU has no MIG).
        mig: its MIG instances when MIG mode is on.
        temperature: GPU core temperature in degrees C.
        fan_speed: fan speed in percent of its maximum (may exceed 100 on some boards).
        power_draw_mw, power_limit_mw: power draw and its enforced cap, in milliwatts.
        performance_state: the P-state, 0 (P0, most performance) to 15.
        clock_sm_mhz, clock_memory_mhz: current SM and memory clocks.
        ecc_errors: uncorrected ECC errors since the driver loaded (volatile).
        process_list: the processes on it (``None`` where NVML lists none for us).
        cpu_affinity: the CPUs close to it (read with the topology only).
        numa_node: the NUMA node close to it (read with the topology only).
        nvlinks: its active NVLinks as (remote PCI bus id, remote kind), ``None``
            where it has no NVLink (read with the topology only).
    """

    index: int
    name: str
    uuid: str
    pci_bus_id: str = ""
    memory_total: int | None = None
    memory_used: int | None = None
    memory_free: int | None = None
    utilization: float | None = None
    compute_capability: tuple[int, int] | None = None
    processes: int | None = None
    mig_enabled: bool | None = None
    mig: tuple[NvmlMig, ...] = ()
    temperature: int | None = None
    fan_speed: int | None = None
    power_draw_mw: int | None = None
    power_limit_mw: int | None = None
    performance_state: int | None = None
    clock_sm_mhz: int | None = None
    clock_memory_mhz: int | None = None
    ecc_errors: int | None = None
    process_list: tuple[NvmlProcess, ...] | None = None
    cpu_affinity: tuple[int, ...] | None = None
    numa_node: int | None = None
    nvlinks: tuple[tuple[str, str], ...] | None = None


@record
class NvmlSnapshot:
    """What NVML said at one moment.

    Attributes:
        devices: every GPU, in NVML index order.
        driver_version: e.g. ``"550.54.15"``.
        failure: one of :data:`FAILURES` when no GPU could be listed, else ``None``.
        reason: the failure in words, for people.
        notes: per-GPU problems that did not stop the listing.
        ancestors: when the topology was read, ``ancestors[i][j]`` is NVML's
            ``nvmlDeviceGetTopologyCommonAncestor`` level (``NVML_TOPOLOGY_*``: 0, 10 ... 50)
            between ``devices[i]`` and ``devices[j]`` (``None`` on the diagonal or where
            NVML could not say); empty when not read.
    """

    devices: tuple[NvmlDevice, ...] = ()
    driver_version: str | None = None
    failure: str | None = None
    reason: str | None = None
    notes: tuple[str, ...] = ()
    ancestors: tuple[tuple[int | None, ...], ...] = ()


class Nvml:
    """Reads NVML through ``pynvml`` (or a fake with the same functions).

    NVML is initialised on the first :meth:`snapshot`, once per adapter, under a
    lock; a failed initialisation is remembered and answered as a snapshot with
    a reason.

    Args:
        module: a ``pynvml``-like module; by default ``pynvml`` is imported on
            first use.
        import_error: pretend the import failed with this text (for tests and
            doctests); only used when ``module`` is ``None``.

    >>> Nvml(module=None, import_error="gone").snapshot().failure
    'library-missing'
    """

    def __init__(self, module: Any = None, *, import_error: str | None = None) -> None:
        self._module = module
        self._import_error = import_error
        self._lock = threading.Lock()
        self._ready = False
        self._failure: tuple[str, str] | None = None

    def _code(self, name: str) -> int:
        return int(getattr(self._module, name, _CODES[name]))

    def _const(self, name: str) -> int:
        value = getattr(self._module, name, None)
        return _CONSTANTS[name] if isinstance(value, bool) or not isinstance(value, int) else value

    def _classify(self, err: BaseException) -> tuple[str, str]:
        """Turns an NVML error raised at start-up into (failure, reason)."""
        value = getattr(err, "value", None)
        text = str(err) or type(err).__name__
        if value == self._code("NVML_ERROR_LIBRARY_NOT_FOUND"):
            return "library-missing", f"no NVIDIA driver: the NVML library (libnvidia-ml) is not installed ({text})"
        if value == self._code("NVML_ERROR_DRIVER_NOT_LOADED"):
            return "driver-not-loaded", f"the NVIDIA driver is not loaded ({text})"
        if value == self._code("NVML_ERROR_NO_PERMISSION"):
            return "no-permission", f"insufficient permissions to query NVML ({text})"
        return "nvml-error", f"NVML error: {text}"

    def _start(self) -> tuple[str, str] | None:
        """Imports the module and initialises NVML once; returns the failure, if any."""
        with self._lock:
            if self._ready or self._failure is not None:
                return self._failure
            if self._module is None:
                if self._import_error is None:
                    try:
                        import pynvml  # noqa: PLC0415 (lazy NVML: at first use, under the lock)

                        self._module = pynvml
                    except ImportError as err:
                        self._import_error = str(err)
                if self._module is None:
                    self._failure = ("library-missing", f"nvidia-ml-py is not installed ({self._import_error})")
                    return self._failure
            try:
                self._module.nvmlInit()
            except self._module.NVMLError as err:
                self._failure = self._classify(err)
                return self._failure
            except OSError as err:  # a broken libnvidia-ml
                self._failure = ("library-missing", f"the NVML library cannot be loaded ({err})")
                return self._failure
            self._ready = True
            return None

    def shutdown(self) -> None:
        """Releases NVML; the next :meth:`snapshot` initialises it again."""
        with self._lock:
            if self._ready:
                try:
                    self._module.nvmlShutdown()
                except self._module.NVMLError:
                    pass
            self._ready = False
            self._failure = None

    def _get(self, name: str, *args: Any) -> Any:
        """Calls an NVML function by name; ``None`` on any NVML error (not supported,
        no permission ...) or when this ``pynvml`` lacks the function.
        """
        fn = getattr(self._module, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._module.NVMLError:
            return None

    def snapshot(self, *, topology: bool = False) -> NvmlSnapshot:
        """Reads every GPU now.

        Args:
            topology: also read how the GPUs are wired: each GPU's NVLinks and CPU/NUMA
                affinity, and the PCIe common ancestor of every pair (n^2/2 NVML calls).

        Returns:
            An :class:`NvmlSnapshot`; empty with ``failure``/``reason`` set when
            NVML is missing, the driver is not loaded, permissions are lacking,
            NVML fails, or there is no GPU. It never raises for those.
        """
        failure = self._start()
        if failure is not None:
            return NvmlSnapshot(failure=failure[0], reason=failure[1])
        m = self._module
        try:
            count = m.nvmlDeviceGetCount()
        except m.NVMLError as err:
            kind, reason = self._classify(err)
            return NvmlSnapshot(failure=kind, reason=reason)
        driver = _text(self._get("nvmlSystemGetDriverVersion"))
        if count == 0:
            return NvmlSnapshot(
                driver_version=driver,
                failure="no-gpu",
                reason="NVML reports no GPU (the NVIDIA driver is loaded but lists no device)",
            )
        devices: list[NvmlDevice] = []
        handles: list[Any] = []
        notes: list[str] = []
        for index in range(count):
            try:
                handle = m.nvmlDeviceGetHandleByIndex(index)
            except m.NVMLError as err:
                notes.append(f"GPU {index} left out: NVML cannot open it ({err}).")
                continue
            device = self._device(index, handle)
            if topology:
                device = replace(device, **self._wiring(handle))
            devices.append(device)
            handles.append(handle)
        ancestors = self._ancestors(handles) if topology else ()
        return NvmlSnapshot(devices=tuple(devices), driver_version=driver, notes=tuple(notes), ancestors=ancestors)

    def _ancestors(self, handles: list[Any]) -> tuple[tuple[int | None, ...], ...]:
        """The NVML topology level of every pair of GPUs (symmetric; ``None`` on the diagonal)."""
        n = len(handles)
        levels: list[list[int | None]] = [[None] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                level = _whole(self._get("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j]))
                levels[i][j] = levels[j][i] = level
        return tuple(tuple(row) for row in levels)

    def _wiring(self, handle: Any) -> dict[str, Any]:
        """A GPU's CPU affinity, NUMA node and active NVLinks (remote PCI bus id, remote kind)."""
        cpus = _bits(self._get("nvmlDeviceGetCpuAffinity", handle, CPU_SET_WORDS))
        nodes = _bits(
            self._get("nvmlDeviceGetMemoryAffinity", handle, NODE_SET_WORDS, self._const("NVML_AFFINITY_SCOPE_NODE"))
        )
        return {
            "cpu_affinity": cpus or None,
            "numa_node": nodes[0] if nodes else None,
            "nvlinks": self._nvlinks(handle),
        }

    def _nvlinks(self, handle: Any) -> tuple[tuple[str, str], ...] | None:
        """Each active NVLink as (remote PCI bus id, ``"gpu"``/``"switch"``/``"unknown"``); ``None``: no NVLink.

        Links are read from 0 up; the first link NVML refuses (not supported, or past the
        GPU's last link) ends the scan.
        """
        kinds = {
            self._const("NVML_NVLINK_DEVICE_TYPE_GPU"): "gpu",
            self._const("NVML_NVLINK_DEVICE_TYPE_SWITCH"): "switch",
        }
        links: list[tuple[str, str]] = []
        for link in range(min(self._const("NVML_NVLINK_MAX_LINKS"), MAX_NVLINKS)):
            state = self._get("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                if link == 0:
                    return None
                break
            if not state:
                continue
            pci = self._get("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            bus = normal_bus_id(_text(getattr(pci, "busId", None)) or "")
            kind = kinds.get(self._get("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link), "unknown")
            links.append((bus, kind))
        return tuple(links)

    def _memory(self, handle: Any) -> tuple[int | None, int | None, int | None]:
        mem = self._get("nvmlDeviceGetMemoryInfo", handle)
        if mem is None:
            return None, None, None
        return int(mem.total), int(mem.used), int(mem.free)

    def _process_list(self, handle: Any) -> tuple[NvmlProcess, ...] | None:
        """NVML's compute and graphics process lists merged by pid (``None``: neither could be read)."""
        lists = [
            (kind, self._get(fn, handle))
            for kind, fn in (
                ("C", "nvmlDeviceGetComputeRunningProcesses"),
                ("G", "nvmlDeviceGetGraphicsRunningProcesses"),
            )
        ]
        if all(lst is None for _, lst in lists):
            return None
        found: dict[int, NvmlProcess] = {}
        for kind, lst in lists:
            for p in lst or ():
                pid, used = _whole(getattr(p, "pid", None)), _whole(getattr(p, "usedGpuMemory", None))
                if pid is None:
                    continue
                seen = found.get(pid)
                if seen is None:
                    found[pid] = NvmlProcess(pid, kind, used)
                elif seen.kind != kind:
                    found[pid] = NvmlProcess(
                        pid,
                        "C+G",
                        seen.used_memory
                        if used is None
                        else used
                        if seen.used_memory is None
                        else max(used, seen.used_memory),
                    )
        return tuple(found.values())

    def _sensors(self, handle: Any) -> dict[str, Any]:  # int | None each, passed as NvmlDevice(**...)
        """What gpustat and nvitop show: temperature, fan, power, performance state, clocks, ECC errors."""
        state = _whole(self._get("nvmlDeviceGetPerformanceState", handle))
        return {
            "temperature": _whole(self._get("nvmlDeviceGetTemperature", handle, self._const("NVML_TEMPERATURE_GPU"))),
            "fan_speed": _whole(self._get("nvmlDeviceGetFanSpeed", handle)),
            "power_draw_mw": _whole(self._get("nvmlDeviceGetPowerUsage", handle)),
            "power_limit_mw": _whole(self._get("nvmlDeviceGetEnforcedPowerLimit", handle)),
            "performance_state": state if state is not None and state <= 15 else None,  # 32: unknown
            "clock_sm_mhz": _whole(self._get("nvmlDeviceGetClockInfo", handle, self._const("NVML_CLOCK_SM"))),
            "clock_memory_mhz": _whole(self._get("nvmlDeviceGetClockInfo", handle, self._const("NVML_CLOCK_MEM"))),
            "ecc_errors": _whole(
                self._get(
                    "nvmlDeviceGetTotalEccErrors",
                    handle,
                    self._const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
                    self._const("NVML_VOLATILE_ECC"),
                )
            ),
        }

    def _device(self, index: int, handle: Any) -> NvmlDevice:
        total, used, free = self._memory(handle)
        util = self._get("nvmlDeviceGetUtilizationRates", handle)
        cc = self._get("nvmlDeviceGetCudaComputeCapability", handle)
        pci = self._get("nvmlDeviceGetPciInfo", handle)
        mode = self._get("nvmlDeviceGetMigMode", handle)
        mig_enabled = None if mode is None else bool(mode[0])
        procs = self._process_list(handle)
        return NvmlDevice(
            index=index,
            name=_text(self._get("nvmlDeviceGetName", handle)) or "",
            uuid=_text(self._get("nvmlDeviceGetUUID", handle)) or "",
            pci_bus_id=(_text(pci.busId) or "") if pci is not None else "",
            memory_total=total,
            memory_used=used,
            memory_free=free,
            utilization=None if util is None else min(max(util.gpu / 100.0, 0.0), 1.0),
            compute_capability=None if cc is None else (int(cc[0]), int(cc[1])),
            processes=None if procs is None else len(procs),
            mig_enabled=mig_enabled,
            mig=self._migs(handle) if mig_enabled else (),
            process_list=procs,
            **self._sensors(handle),
        )

    def _migs(self, handle: Any) -> tuple[NvmlMig, ...]:
        slots = self._get("nvmlDeviceGetMaxMigDeviceCount", handle) or 0
        migs = []
        for slot in range(slots):
            mig = self._get("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if mig is None:  # an empty slot answers NVML_ERROR_NOT_FOUND
                continue
            total, used, free = self._memory(mig)
            procs = self._process_list(mig)
            migs.append(
                NvmlMig(
                    mig_index=slot,
                    uuid=_text(self._get("nvmlDeviceGetUUID", mig)) or "",
                    name=_text(self._get("nvmlDeviceGetName", mig)) or "",
                    memory_total=total,
                    memory_used=used,
                    memory_free=free,
                    processes=None if procs is None else len(procs),
                    process_list=procs,
                    gpu_instance_id=self._get("nvmlDeviceGetGpuInstanceId", mig),
                    compute_instance_id=self._get("nvmlDeviceGetComputeInstanceId", mig),
                )
            )
        return tuple(migs)


def _whole(value: Any) -> int | None:
    """An NVML number as a non-negative int; ``None`` for anything else (an unavailable value, a sentinel)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= 1 << 63:
        return None
    return int(value)


def _bits(words: Any) -> tuple[int, ...]:
    """The set bits of NVML's affinity words (64 bits each, word 0 first): ``[0b101]`` -> ``(0, 2)``.

    >>> _bits([5, 1])
    (0, 2, 64)
    """
    if words is None:
        return ()
    found = []
    for w, word in enumerate(words):
        word = int(word)
        while word > 0:
            low = word & -word
            found.append(w * 64 + low.bit_length() - 1)
            word ^= low
    return tuple(found)


def normal_bus_id(bus_id: str) -> str:
    """A PCI bus id in one spelling, so two readings compare equal: lower case, 8-digit domain.

    >>> normal_bus_id("0000:07:00.0"), normal_bus_id("00000000:C7:00.0")
    ('00000000:07:00.0', '00000000:c7:00.0')
    """
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not rest:
        return text
    return f"{domain[-8:]:0>8}:{rest}"


def _text(value: Any) -> str | None:
    """NVML strings come as ``bytes`` from old ``pynvml`` and ``str`` from new; either way the result is
    printable text (a lone surrogate, from bytes a driver got wrong, becomes ``\\udc..``), at most 256 characters.
    """
    if value is None:
        return None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:256]


_DEFAULT = Nvml()


def snapshot(module: Any = None, *, topology: bool = False) -> NvmlSnapshot:
    """Reads NVML: through ``module`` when given, else through the process-wide adapter.

    Args:
        module: a ``pynvml``-like module (tests pass a fake); ``None`` uses ``pynvml``.
        topology: also read the wiring (see :meth:`Nvml.snapshot`).

    Returns:
        An :class:`NvmlSnapshot` (empty with a reason where there is no GPU).

    >>> snapshot().failure in (None,) + FAILURES
    True
    """
    return (_DEFAULT if module is None else Nvml(module)).snapshot(topology=topology)
