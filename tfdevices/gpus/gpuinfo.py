"""GpuInfo: one GPU or MIG instance, the one record from NVML to the inventory.

The NVML adapter (:mod:`tfdevices.gpus.nvml`) reads each GPU into a :class:`GpuInfo`;
the inventory (:mod:`tfdevices.gpus.inventory`) holds them, named for this process's
``CUDA_VISIBLE_DEVICES``; a saved listing is read back into them (:meth:`GpuInfo.from_dict`,
every field checked).

>>> g = GpuInfo(index=0, name="NVIDIA H200", uuid="GPU-1be1", memory_total=143771 << 20, memory_free=143156 << 20,
...             memory_reserved=615 << 20)
>>> g.key, g.to_dict()["memory_used"], GpuInfo.from_dict(g.to_dict()) == g
('0', 0, True)
"""

from __future__ import annotations

from tfdevices.core.errors import InventoryFileError
from tfdevices.core.json_records import Check, Rules, load
from tfdevices.core.record_class import asdict, record
from tfdevices.core.units import is_digits, short_repr
from tfdevices.gpus.processes import GpuProcess

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the listing path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


MAX_GPUS = 4096
"""The most entries (GPUs and MIG instances) an inventory may hold."""
MAX_TEXT = 4096
"""The longest string field an inventory may hold, in characters."""
_LIMITS = {
    "index": 1023,
    "mig_index": 1023,
    "cuda_ordinal": MAX_GPUS - 1,
    "processes": 10**7,
    "memory_total": 1 << 64,
    "memory_used": 1 << 64,
    "memory_free": 1 << 64,
    "memory_reserved": 1 << 64,
    "temperature": 1000,
    "fan_speed": 1000,
    "power_draw_mw": 10**8,
    "power_limit_mw": 10**8,
    "performance_state": 15,
    "clock_sm_mhz": 10**6,
    "clock_memory_mhz": 10**6,
    "ecc_errors": 1 << 64,
}
MAX_PROCESSES = 4096
"""The most processes listed per GPU in an inventory file."""
_HINT = "fix or regenerate the file with 'tfdevices list --json'."


def _parse_cc(value: Any, what: str, values: object = None) -> tuple[int, int]:
    """``"8.0"`` (or ``[8, 0]``) as ``(8, 0)``: ASCII digits, at most three each."""
    text = value if isinstance(value, str) else None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        text = f"{value[0]}.{value[1]}"
    parts = text.split(".") if text else []
    if len(parts) != 2 or not all(is_digits(p) and len(p) <= 3 for p in parts):
        raise InventoryFileError(
            f"{what}={short_repr(value)} is not of the form '8.0' (ASCII digits).",
            hint="write it as 'major.minor', e.g. '8.6'.",
        )
    return int(parts[0]), int(parts[1])


@record
class GpuInfo:
    """One GPU (or one MIG instance of a GPU) as NVML reports it: the one record from NVML to the inventory.

    The NVML adapter (:mod:`tfdevices.gpus.nvml`) reads it; the inventory names it for this
    process (``cuda_ordinal``, ``tf_name``, from ``CUDA_VISIBLE_DEVICES``) and adds who runs
    on it (``process_list``'s users and commands).

    Memory is in bytes (0 where NVML could not say), as ``nvidia-smi`` counts it: read with
    NVML's versioned query, ``memory_used`` leaves out what the driver reserves, shown apart as
    ``memory_reserved`` (``total = used + free + reserved``). ``memory_reserved`` is ``None``
    where the versioned query could not be used (an old driver or ``nvidia-ml-py``): then
    ``memory_used`` is NVML's first query's, which counts the reserved memory as used, and the
    inventory's notes say so. ``utilization`` is a fraction in [0, 1]; other fields NVML
    could not answer are ``None``. What ``gpustat`` and ``nvitop`` show comes too:
    ``temperature`` (C), ``fan_speed`` (%), ``power_draw_mw`` / ``power_limit_mw``
    (milliwatts), ``performance_state`` (0 for P0), ``clock_sm_mhz`` /
    ``clock_memory_mhz``, ``ecc_errors`` (uncorrected, since the driver loaded),
    ``mig_enabled``, and ``process_list`` (``None`` where not read).
    """

    index: int
    name: str
    uuid: str
    pci_bus_id: str = ""
    memory_total: int = 0
    memory_used: int = 0
    memory_free: int = 0
    memory_reserved: int | None = None
    utilization: float | None = None
    compute_capability: tuple[int, int] | None = None
    processes: int | None = None
    mig_index: int | None = None
    cuda_ordinal: int | None = None
    tf_name: str | None = None
    temperature: int | None = None
    fan_speed: int | None = None
    power_draw_mw: int | None = None
    power_limit_mw: int | None = None
    performance_state: int | None = None
    clock_sm_mhz: int | None = None
    clock_memory_mhz: int | None = None
    ecc_errors: int | None = None
    mig_enabled: bool | None = None
    process_list: tuple[GpuProcess, ...] | None = None

    @property
    def key(self) -> str:
        """The name a spec uses: ``"3"`` for GPU 3, ``"0:1"`` for MIG instance 1 of GPU 0."""
        return str(self.index) if self.mig_index is None else f"{self.index}:{self.mig_index}"

    @property
    def visible(self) -> bool:
        """Whether CUDA sees this GPU under the current masking."""
        return self.cuda_ordinal is not None

    def to_dict(self) -> dict[str, Any]:
        """This GPU as plain JSON values (compute capability as ``"8.0"``)."""
        data = asdict(self)
        if self.compute_capability is not None:
            data["compute_capability"] = f"{self.compute_capability[0]}.{self.compute_capability[1]}"
        data["process_list"] = None if self.process_list is None else [p.to_dict() for p in self.process_list]
        return data

    json_rules = Rules(
        entry="a GPU entry",
        hint=_HINT,
        prefix="GPU field ",
        error=InventoryFileError,
        checks={
            **{name: Check(low=0, high=limit) for name, limit in _LIMITS.items()},
            **{name: Check(max_text=MAX_TEXT) for name in ("name", "uuid", "pci_bus_id", "tf_name")},
            "utilization": Check(low=0, high=1),
            "compute_capability": Check(parse=_parse_cc),
            "process_list": Check(max_items=MAX_PROCESSES, noun="process"),
        },
    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "inventory") -> GpuInfo:
        """Builds a GpuInfo from :meth:`to_dict` output, validating every field.

        Each field is read against its annotation and ``json_rules``
        (:func:`tfdevices.core.json_records.load`): ranges, text that can be printed, at most
        :data:`MAX_PROCESSES` processes.

        Raises:
            InventoryFileError: a field is missing, unknown, out of range or of the wrong type.
        """
        loaded: GpuInfo = load(cls, data, where=where)
        return loaded
