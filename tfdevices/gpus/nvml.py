"""The one NVML adapter: plain data about each GPU, never an exception.

Everything tfdevices knows about the hardware comes through :class:`Nvml`. It
imports ``pynvml`` (the ``nvidia-ml-py`` package) lazily, initialises NVML once
behind a lock, and returns a frozen :class:`NvmlSnapshot`: each GPU read straight
into the inventory's record, :class:`~tfdevices.gpus.gpuinfo.GpuInfo`, beside what only
NVML's wiring knows (:class:`NvmlDevice`). A value NVML cannot give (not supported, no
permission) is ``None`` (memory: 0); a failure to reach NVML at all is classified into
a human :attr:`NvmlSnapshot.reason` and an empty snapshot.

Memory is read as ``nvidia-smi`` reads it: with NVML's versioned query, the memory the
driver reserves apart from used; with the first query (which counts it as used) only
where the driver or ``nvidia-ml-py`` lacks the versioned one, and the snapshot's notes say so.

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

from tfdevices.core.record_class import record, replace
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.processes import GpuProcess

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the listing path
if TYPE_CHECKING:
    from typing import Any


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
_OLD_PYNVML = "this nvidia-ml-py has no versioned one; pip install -U nvidia-ml-py"


@record
class NvmlMig:
    """One MIG instance of a GPU: what the inventory lists, and the ids CUDA names it by.

    Attributes:
        gpu: the instance as the inventory lists it (``mig_index``: its slot on the parent GPU,
            ``nvidia-smi``'s "MIG dev"; ``uuid``: ``"MIG-..."``; the parent's sensors).
        gpu_instance_id: NVML GPU instance id (``None`` when unknown).
        compute_instance_id: NVML compute instance id (``None`` when unknown).
    """

    gpu: GpuInfo
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@record
class NvmlDevice:
    """One physical GPU as NVML reports it: the inventory's record, and what only NVML's wiring knows.

    Attributes:
        gpu: the GPU as the inventory lists it (:class:`~tfdevices.gpus.gpuinfo.GpuInfo`; not yet
            named for CUDA: ``cuda_ordinal`` and ``tf_name`` are set by the masking).
        mig: its MIG instances when MIG mode is on.
        cpu_affinity: the CPUs close to it (read with the topology only).
        numa_node: the NUMA node close to it (read with the topology only).
        nvlinks: its active NVLinks as (remote PCI bus id, remote kind), ``None``
            where it has no NVLink (read with the topology only).
    """

    gpu: GpuInfo
    mig: tuple[NvmlMig, ...] = ()
    cpu_affinity: tuple[int, ...] | None = None
    numa_node: int | None = None
    nvlinks: tuple[tuple[str, str], ...] | None = None


@record
class NvmlSnapshot:
    """What NVML said at one moment.

    Attributes:
        devices: every GPU, in NVML index order.
        driver_version: e.g. ``"550.54.15"``.
        cuda_driver_version: the newest CUDA the driver runs, as CUDA writes it (``13000``: 13.0), from
            ``nvmlSystemGetCudaDriverVersion_v2``; ``None`` where NVML cannot say.
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
    cuda_driver_version: int | None = None


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
        self._memory_v2: str | None = None  # why the versioned memory query is not asked (None: it is)

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
            self._memory_v2 = None

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

    def snapshot(self, *, topology: bool = False, sensors: bool = True) -> NvmlSnapshot:
        """Reads every GPU now.

        Args:
            topology: also read how the GPUs are wired: each GPU's NVLinks and CPU/NUMA
                affinity, and the PCIe common ancestor of every pair (n^2/2 NVML calls).
            sensors: read what gpustat shows besides memory and load (temperature, fan, power,
                P-state, clocks, ECC errors) and each GPU's processes; without them those
                fields are ``None`` (choosing GPUs and showing their wiring needs none).

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
        cuda = _whole(self._get("nvmlSystemGetCudaDriverVersion_v2"))
        if count == 0:
            return NvmlSnapshot(
                driver_version=driver,
                cuda_driver_version=cuda,
                failure="no-gpu",
                reason="NVML reports no GPU (the NVIDIA driver is loaded but lists no device)",
            )
        reader = _GpuReader(self)
        devices: list[NvmlDevice] = []
        handles: list[Any] = []
        notes: list[str] = []
        first_query: dict[str, str] = {}
        for index in range(count):
            try:
                handle = m.nvmlDeviceGetHandleByIndex(index)
            except m.NVMLError as err:
                notes.append(f"GPU {index} left out: NVML cannot open it ({err}).")
                continue
            device = reader.device(index, handle, first_query, sensors)
            if topology:
                device = replace(device, **reader.wiring(handle))
            devices.append(device)
            handles.append(handle)
        notes += _first_query_note(first_query)
        ancestors = reader.ancestors(handles) if topology else ()
        return NvmlSnapshot(
            devices=tuple(devices),
            driver_version=driver,
            notes=tuple(notes),
            ancestors=ancestors,
            cuda_driver_version=cuda,
        )


class _GpuReader:
    """Reads each GPU's fields through a started :class:`Nvml`'s calls: memory, load, sensors,
    processes, MIG instances and wiring.

    One is made per :meth:`Nvml.snapshot`; what the versioned memory query answered stays on the
    adapter (until its :meth:`Nvml.shutdown`), so a driver without it is not asked again.

    Args:
        nvml: the adapter, started (its module imported and NVML initialised).
    """

    def __init__(self, nvml: Nvml) -> None:
        self._nvml = nvml
        self._module = nvml._module
        self._get = nvml._get
        self._const = nvml._const
        self._code = nvml._code

    def ancestors(self, handles: list[Any]) -> tuple[tuple[int | None, ...], ...]:
        """The NVML topology level of every pair of GPUs (symmetric; ``None`` on the diagonal)."""
        n = len(handles)
        levels: list[list[int | None]] = [[None] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                level = _whole(self._get("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j]))
                levels[i][j] = levels[j][i] = level
        return tuple(tuple(row) for row in levels)

    def wiring(self, handle: Any) -> dict[str, Any]:
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

    def _memory(self, handle: Any) -> tuple[dict[str, Any], str | None]:
        """Memory as ``nvidia-smi`` counts it: GpuInfo's memory fields, and why the versioned query
        could not be used (``None``: it was).

        NVML's versioned query (``nvmlDeviceGetMemoryInfo_v2``, nvidia-ml-py's ``version=nvmlMemory_v2``)
        shows the memory the driver reserves apart; where the driver or nvidia-ml-py lacks it, or it
        fails for this GPU (not supported, a version mismatch ...), the first query is read: its
        ``used`` counts the reserved memory too, and ``memory_reserved`` is ``None``.
        """
        why = self._nvml._memory_v2
        query, version = (getattr(self._module, n, None) for n in ("nvmlDeviceGetMemoryInfo", "nvmlMemory_v2"))
        if why is None and (query is None or version is None):
            why = self._nvml._memory_v2 = _OLD_PYNVML
        if why is None and query is not None:
            try:
                mem = query(handle, version=version)
                return _memory_fields(mem, reserved=_whole(mem.reserved)), None
            except TypeError:  # an nvidia-ml-py whose nvmlDeviceGetMemoryInfo takes no version
                why = self._nvml._memory_v2 = _OLD_PYNVML
            except self._module.NVMLError as err:
                why = f"NVML's versioned memory query answered {str(err) or type(err).__name__!r}"
                if getattr(err, "value", None) == self._code("NVML_ERROR_FUNCTION_NOT_FOUND"):
                    self._nvml._memory_v2 = why  # the driver has none: not asked again
        mem = self._get("nvmlDeviceGetMemoryInfo", handle)
        return _memory_fields(mem, reserved=None), None if mem is None else why

    def _process_list(self, handle: Any) -> tuple[GpuProcess, ...] | None:
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
        found: dict[int, GpuProcess] = {}
        for kind, lst in lists:
            for p in lst or ():
                pid, used = _whole(getattr(p, "pid", None)), _whole(getattr(p, "usedGpuMemory", None))
                if pid is None:
                    continue
                seen = found.get(pid)
                if seen is None:
                    found[pid] = GpuProcess(pid, kind, used)
                elif seen.kind != kind:
                    held = (
                        seen.gpu_memory
                        if used is None
                        else used
                        if seen.gpu_memory is None
                        else max(used, seen.gpu_memory)
                    )
                    found[pid] = GpuProcess(pid, "C+G", held)
        return tuple(found.values())

    def _sensors(self, handle: Any) -> dict[str, Any]:  # int | None each, passed as GpuInfo(**...)
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

    def device(self, index: int, handle: Any, first_query: dict[str, str], sensors: bool = True) -> NvmlDevice:
        """One GPU and its MIG instances; ``first_query`` gets each GPU key whose memory came from NVML's
        first memory query, with why.
        """
        memory, why = self._memory(handle)
        if why:
            first_query[str(index)] = why
        util = self._get("nvmlDeviceGetUtilizationRates", handle)
        cc = self._get("nvmlDeviceGetCudaComputeCapability", handle)
        pci = self._get("nvmlDeviceGetPciInfo", handle)
        mode = self._get("nvmlDeviceGetMigMode", handle)
        mig_enabled = None if mode is None else bool(mode[0])
        procs = self._process_list(handle) if sensors else None
        gpu = GpuInfo(
            index=index,
            name=_text(self._get("nvmlDeviceGetName", handle)) or "",
            uuid=_text(self._get("nvmlDeviceGetUUID", handle)) or "",
            pci_bus_id=(_text(pci.busId) or "") if pci is not None else "",
            utilization=None if util is None else min(max(util.gpu / 100.0, 0.0), 1.0),
            compute_capability=None if cc is None else (int(cc[0]), int(cc[1])),
            processes=None if procs is None else len(procs),
            mig_enabled=mig_enabled,
            process_list=procs,
            **memory,
            **(self._sensors(handle) if sensors else {}),
        )
        return NvmlDevice(gpu=gpu, mig=self._migs(gpu, handle, first_query, sensors) if mig_enabled else ())

    def _migs(self, parent: GpuInfo, handle: Any, first_query: dict[str, str], sensors: bool) -> tuple[NvmlMig, ...]:
        """The parent's MIG instances: each its own name, uuid, memory and processes, the parent's sensors."""
        slots = self._get("nvmlDeviceGetMaxMigDeviceCount", handle) or 0
        migs = []
        for slot in range(slots):
            mig = self._get("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if mig is None:  # an empty slot answers NVML_ERROR_NOT_FOUND
                continue
            memory, why = self._memory(mig)
            if why:
                first_query[f"{parent.index}:{slot}"] = why
            procs = self._process_list(mig) if sensors else None
            gpu = replace(
                parent,
                uuid=_text(self._get("nvmlDeviceGetUUID", mig)) or "",
                name=_text(self._get("nvmlDeviceGetName", mig)) or f"{parent.name} MIG",
                mig_index=slot,
                utilization=None,
                processes=None if procs is None else len(procs),
                process_list=procs,
                **memory,
            )
            gi, ci = self._get("nvmlDeviceGetGpuInstanceId", mig), self._get("nvmlDeviceGetComputeInstanceId", mig)
            migs.append(NvmlMig(gpu, gi, ci))
        return tuple(migs)


def _memory_fields(mem: Any, *, reserved: int | None) -> dict[str, Any]:
    """GpuInfo's memory fields from an NVML memory struct (0 each where there is none)."""
    if mem is None:
        return {"memory_total": 0, "memory_used": 0, "memory_free": 0, "memory_reserved": None}
    return {
        "memory_total": _whole(mem.total) or 0,
        "memory_used": _whole(mem.used) or 0,
        "memory_free": _whole(mem.free) or 0,
        "memory_reserved": reserved,
    }


def _first_query_note(first_query: dict[str, str]) -> list[str]:
    """One note per reason the versioned memory query was not used, naming the GPUs it touched."""
    by_why: dict[str, list[str]] = {}
    for key, why in first_query.items():
        by_why.setdefault(why, []).append(key)
    return [
        f"GPU {', '.join(keys)}: memory used counts what the driver reserves, so it reads higher than "
        f"nvidia-smi's (NVML's first memory query: {why})."
        for why, keys in by_why.items()
    ]


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


def snapshot(module: Any = None, *, topology: bool = False, sensors: bool = True) -> NvmlSnapshot:
    """Reads NVML: through ``module`` when given, else through the process-wide adapter.

    Args:
        module: a ``pynvml``-like module (tests pass a fake); ``None`` uses ``pynvml``.
        topology: also read the wiring (see :meth:`Nvml.snapshot`).
        sensors: also read the sensors and processes (see :meth:`Nvml.snapshot`).

    Returns:
        An :class:`NvmlSnapshot` (empty with a reason where there is no GPU).

    >>> snapshot().failure in (None,) + FAILURES
    True
    """
    return (_DEFAULT if module is None else Nvml(module)).snapshot(topology=topology, sensors=sensors)
