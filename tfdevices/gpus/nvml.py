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

from tfdevices.core.records import record

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


@record
class NvmlDevice:
    """One physical GPU as NVML reports it; ``None`` where NVML could not say.

    Attributes:
        index: the NVML index, as ``nvidia-smi`` shows it.
        utilization: GPU busy fraction in [0, 1].
        mig_enabled: whether MIG mode is on (``None``: the GPU has no MIG).
        mig: its MIG instances when MIG mode is on.
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


@record
class NvmlSnapshot:
    """What NVML said at one moment.

    Attributes:
        devices: every GPU, in NVML index order.
        driver_version: e.g. ``"550.54.15"``.
        failure: one of :data:`FAILURES` when no GPU could be listed, else ``None``.
        reason: the failure in words, for people.
        notes: per-GPU problems that did not stop the listing.
    """

    devices: tuple[NvmlDevice, ...] = ()
    driver_version: str | None = None
    failure: str | None = None
    reason: str | None = None
    notes: tuple[str, ...] = ()


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
                        import pynvml
                        self._module = pynvml
                    except ImportError as err:
                        self._import_error = str(err)
                if self._module is None:
                    self._failure = ("library-missing",
                                     f"nvidia-ml-py is not installed ({self._import_error})")
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
        no permission ...) or when this ``pynvml`` lacks the function."""
        fn = getattr(self._module, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._module.NVMLError:
            return None

    def snapshot(self) -> NvmlSnapshot:
        """Reads every GPU now.

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
            return NvmlSnapshot(driver_version=driver, failure="no-gpu",
                                reason="NVML reports no GPU (the NVIDIA driver is loaded but lists no device)")
        devices: list[NvmlDevice] = []
        notes: list[str] = []
        for index in range(count):
            try:
                handle = m.nvmlDeviceGetHandleByIndex(index)
            except m.NVMLError as err:
                notes.append(f"GPU {index} left out: NVML cannot open it ({err}).")
                continue
            devices.append(self._device(index, handle))
        return NvmlSnapshot(devices=tuple(devices), driver_version=driver, notes=tuple(notes))

    def _memory(self, handle: Any) -> tuple[int | None, int | None, int | None]:
        mem = self._get("nvmlDeviceGetMemoryInfo", handle)
        if mem is None:
            return None, None, None
        return int(mem.total), int(mem.used), int(mem.free)

    def _processes(self, handle: Any) -> int | None:
        lists = [self._get("nvmlDeviceGetComputeRunningProcesses", handle),
                 self._get("nvmlDeviceGetGraphicsRunningProcesses", handle)]
        if all(lst is None for lst in lists):
            return None
        return len({p.pid for lst in lists if lst is not None for p in lst})

    def _device(self, index: int, handle: Any) -> NvmlDevice:
        total, used, free = self._memory(handle)
        util = self._get("nvmlDeviceGetUtilizationRates", handle)
        cc = self._get("nvmlDeviceGetCudaComputeCapability", handle)
        pci = self._get("nvmlDeviceGetPciInfo", handle)
        mode = self._get("nvmlDeviceGetMigMode", handle)
        mig_enabled = None if mode is None else bool(mode[0])
        return NvmlDevice(
            index=index,
            name=_text(self._get("nvmlDeviceGetName", handle)) or "",
            uuid=_text(self._get("nvmlDeviceGetUUID", handle)) or "",
            pci_bus_id=(_text(pci.busId) or "") if pci is not None else "",
            memory_total=total, memory_used=used, memory_free=free,
            utilization=None if util is None else min(max(util.gpu / 100.0, 0.0), 1.0),
            compute_capability=None if cc is None else (int(cc[0]), int(cc[1])),
            processes=self._processes(handle),
            mig_enabled=mig_enabled,
            mig=self._migs(handle) if mig_enabled else (),
        )

    def _migs(self, handle: Any) -> tuple[NvmlMig, ...]:
        slots = self._get("nvmlDeviceGetMaxMigDeviceCount", handle) or 0
        migs = []
        for slot in range(slots):
            mig = self._get("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if mig is None:  # an empty slot answers NVML_ERROR_NOT_FOUND
                continue
            total, used, free = self._memory(mig)
            migs.append(NvmlMig(
                mig_index=slot,
                uuid=_text(self._get("nvmlDeviceGetUUID", mig)) or "",
                name=_text(self._get("nvmlDeviceGetName", mig)) or "",
                memory_total=total, memory_used=used, memory_free=free,
                processes=self._processes(mig),
                gpu_instance_id=self._get("nvmlDeviceGetGpuInstanceId", mig),
                compute_instance_id=self._get("nvmlDeviceGetComputeInstanceId", mig),
            ))
        return tuple(migs)


def _text(value: Any) -> str | None:
    """NVML strings come as ``bytes`` from old ``pynvml`` and ``str`` from new; either way the result is
    printable text (a lone surrogate, from bytes a driver got wrong, becomes ``\\udc..``), at most 256 characters."""
    if value is None:
        return None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:256]


_DEFAULT = Nvml()


def snapshot(module: Any = None) -> NvmlSnapshot:
    """Reads NVML: through ``module`` when given, else through the process-wide adapter.

    Args:
        module: a ``pynvml``-like module (tests pass a fake); ``None`` uses ``pynvml``.

    Returns:
        An :class:`NvmlSnapshot` (empty with a reason where there is no GPU).

    >>> snapshot().failure in (None,) + FAILURES
    True
    """
    return _DEFAULT.snapshot() if module is None else Nvml(module).snapshot()
