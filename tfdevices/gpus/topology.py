"""How the GPUs are wired: ``nvidia-smi topo -m``'s link matrix, and each GPU's CPU and NUMA affinity.

A link between two GPUs is named as ``nvidia-smi topo -m`` names it, best first:

========  ===========================================================================
``NV#``   a bonded set of # NVLinks (directly, or through NVSwitches)
``PIX``   at most one PCIe bridge (the same PCIe switch)
``PXB``   several PCIe bridges, below one host bridge
``PHB``   a PCIe host bridge (typically the CPU)
``NODE``  host bridges within one NUMA node
``SYS``   the SMP interconnect between NUMA nodes (across CPU sockets: QPI/UPI)
========  ===========================================================================

:func:`from_nvml` builds a :class:`Topology` from an NVML snapshot read with
``topology=True``; a topology round-trips through JSON inside an inventory. Pure:
nothing here touches NVML.

>>> topo = Topology(gpus=(0, 1, 2), links=(("X", "NV4", "SYS"), ("NV4", "X", "SYS"), ("SYS", "SYS", "X")),
...                 cpu_affinity=("0-15", "0-15", "16-31"), numa_affinity=(0, 0, 1))
>>> topo.link(0, 1), topo.link(1, 2), describe(topo.link(1, 2))
('NV4', 'SYS', 'across CPU sockets')
>>> print(topo.table())
      GPU0  GPU1  GPU2  CPU Affinity  NUMA Affinity
GPU0   X    NV4   SYS   0-15          0
GPU1  NV4    X    SYS   0-15          0
GPU2  SYS   SYS    X    16-31         1
"""

from __future__ import annotations

from collections.abc import Sequence

from tfdevices.core.errors import InventoryFileError
from tfdevices.core.json_records import Check, Rules, load
from tfdevices.core.record_class import record
from tfdevices.core.units import short_repr
from tfdevices.gpus.nvml import NvmlSnapshot, normal_bus_id

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the listing path
if TYPE_CHECKING:
    from typing import Any


PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS")
"""The PCIe link codes, best first."""
MAX_NVLINKS = 99
"""The largest ``NV#`` accepted (an H100 has 18 links; a GB200 NVL72 GPU 18)."""
MAX_CPU = 65535
"""The largest CPU or NUMA node number accepted in an affinity."""
_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}  # NVML_TOPOLOGY_* -> code
_RANKS = {"PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10}
SAME_GPU = 1000
"""The rank of a GPU's link to itself (two MIG instances of one GPU)."""
_WORDS = {
    "PIX": "same PCIe switch",
    "PXB": "PCIe switches below one host bridge",
    "PHB": "same PCIe host bridge",
    "NODE": "same NUMA node, across host bridges",
    "SYS": "across CPU sockets",
}
LEGEND = """Legend:
  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""
_HINT = "regenerate it with 'tfdevices list --json' (or 'tfdevices topo --json')."


def nvlinks(code: str | None) -> int:
    """The number of bonded NVLinks a code names (0 for a PCIe code or ``None``).

    >>> nvlinks("NV12"), nvlinks("SYS")
    (12, 0)
    """
    if code and code.startswith("NV") and code[2:].isdigit() and code[2:].isascii():
        return int(code[2:])
    return 0


def rank(code: str | None) -> int:
    """How good a link is, as a number to compare: NVLink (100 + links) > PIX > PXB > PHB > NODE > SYS > unknown (0).

    >>> [rank(c) for c in ("NV2", "NV1", "PIX", "SYS", None, "X")]
    [102, 101, 50, 10, 0, 1000]
    """
    if code == "X":
        return SAME_GPU
    links = nvlinks(code)
    return 100 + links if links else _RANKS.get(code or "", 0)


def describe(code: str | None) -> str:
    """A link in words.

    >>> describe("NV2"), describe("PIX"), describe(None)
    ('2 bonded NVLinks', 'same PCIe switch', 'unknown')
    """
    links = nvlinks(code)
    if links:
        return f"{links} bonded NVLink{'s' if links > 1 else ''}"
    if code == "X":
        return "same GPU"
    return _WORDS.get(code or "", "unknown")


def check_code(value: object, what: str) -> str | None:
    """A link code as read from a file: ``"X"``, ``"NV#"``, a PCIe code or ``None`` (unknown).

    Raises:
        InventoryFileError: anything else.
    """
    if (
        value is None
        or value in _RANKS
        or value == "X"
        or (isinstance(value, str) and 1 <= nvlinks(value) <= MAX_NVLINKS and value == f"NV{nvlinks(value)}")
    ):
        return value
    raise InventoryFileError(
        f"{what}={short_repr(value)} is not a link code; known codes: X, NV1..NV{MAX_NVLINKS}, "
        f"{', '.join(PCIE_CODES)} (null: unknown).",
        hint=_HINT,
    )


def format_cpus(cpus: Sequence[int]) -> str:
    """A CPU list in ``nvidia-smi``'s (and Linux's ``cpulist``) spelling.

    >>> format_cpus([0, 1, 2, 3, 40, 41, 7])
    '0-3,7,40-41'
    """
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in [*ordered, None]:
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


def parse_cpus(text: object, what: str = "cpu list") -> tuple[int, ...]:
    """Reads a CPU list like ``"0-19,40-59"`` (bounded: CPUs 0..65535).

    Raises:
        InventoryFileError: malformed, reversed or out of bounds.

    >>> parse_cpus("0-2,8")
    (0, 1, 2, 8)
    >>> parse_cpus("3-1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.InventoryFileError: cpu list '3-1': '3-1' is not a range low-high of CPUs 0..65535. HINT: ...
    """
    if not isinstance(text, str) or len(text) > 4096:
        raise InventoryFileError(f"{what}={short_repr(text)} must be a CPU list such as '0-19,40-59'.", hint=_HINT)
    cpus: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        ends = (low, high) if dash else (low, low)
        if not all(e.isascii() and e.isdigit() and len(e) <= 5 for e in ends) or not (
            int(ends[0]) <= int(ends[1]) <= MAX_CPU
        ):
            raise InventoryFileError(
                f"{what} {short_repr(text)}: {short_repr(part)} is not a range low-high of CPUs 0..{MAX_CPU}.",
                hint=_HINT,
            )
        cpus.extend(range(int(ends[0]), int(ends[1]) + 1))
    return tuple(sorted(set(cpus)))


@record
class Topology:
    """How a machine's GPUs are wired, as ``nvidia-smi topo -m`` shows it.

    Attributes:
        gpus: NVML indices of the physical GPUs, in the matrix's order.
        links: ``links[i][j]``: the link code between ``gpus[i]`` and ``gpus[j]``
            (``"X"`` on the diagonal, ``None`` where unknown).
        cpu_affinity: each GPU's close CPUs as a CPU list (``"0-19,40-59"``), ``None`` where unknown.
        numa_affinity: each GPU's close NUMA node, ``None`` where unknown.
        origin: where the matrix came from (``"nvml"``, or a published source for a fixture).
    """

    gpus: tuple[int, ...]
    links: tuple[tuple[str | None, ...], ...]
    cpu_affinity: tuple[str | None, ...] = ()
    numa_affinity: tuple[int | None, ...] = ()
    origin: str | None = None

    json_rules = Rules(
        entry="a topology",
        hint=_HINT,
        error=InventoryFileError,
        checks={  # each reader is given the fields read before it: the matrix and the lists follow gpus
            "gpus": Check(parse=lambda value, what, _: _index_list(value, what)),
            "links": Check(parse=lambda value, what, values: _matrix(value, len(values["gpus"]), what)),
            "cpu_affinity": Check(parse=lambda value, what, values: _cpu_lists(value, len(values["gpus"]), what)),
            "numa_affinity": Check(parse=lambda value, what, values: _numa_nodes(value, len(values["gpus"]), what)),
            "origin": Check(max_text=4096),
        },
    )

    def _at(self, index: int) -> int | None:
        try:
            return self.gpus.index(index)
        except ValueError:
            return None

    def link(self, a: int, b: int) -> str | None:
        """The link code between GPUs ``a`` and ``b`` (NVML indices); ``None`` where unknown."""
        i, j = self._at(a), self._at(b)
        if i is None or j is None:
            return "X" if a == b else None
        return self.links[i][j]

    def rank(self, a: int, b: int) -> int:
        """:func:`rank` of the link between ``a`` and ``b``."""
        return rank(self.link(a, b))

    def cpus(self, index: int) -> tuple[int, ...]:
        """The CPUs close to GPU ``index`` (empty where unknown)."""
        i = self._at(index)
        text = None if i is None or i >= len(self.cpu_affinity) else self.cpu_affinity[i]
        return parse_cpus(text) if text else ()

    def numa(self, index: int) -> int | None:
        """The NUMA node close to GPU ``index`` (``None`` where unknown)."""
        i = self._at(index)
        return None if i is None or i >= len(self.numa_affinity) else self.numa_affinity[i]

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        """The distinct NUMA nodes the GPUs are close to, in order of first appearance."""
        return tuple(dict.fromkeys(n for n in self.numa_affinity if n is not None))

    def to_dict(self) -> dict[str, Any]:
        """The topology as plain JSON values."""
        return {
            "gpus": list(self.gpus),
            "links": [list(row) for row in self.links],
            "cpu_affinity": list(self.cpu_affinity),
            "numa_affinity": list(self.numa_affinity),
            "origin": self.origin,
        }

    @classmethod
    def from_dict(cls, data: object, *, where: str = "topology", indices: Sequence[int] | None = None) -> Topology:
        """Reads :meth:`to_dict` output, checking its shape.

        Args:
            data: the mapping.
            where: the input's name in messages.
            indices: the physical GPUs of the inventory it belongs to; each GPU of the
                matrix must be one of them.

        Raises:
            InventoryFileError: a field is missing, of the wrong type or shape, or not a link code.
        """
        topology: Topology = load(cls, data, where=where)
        if indices is not None:
            check_indices(topology, indices, where)
        return topology

    def table(self) -> str:
        """The matrix as ``nvidia-smi topo -m`` prints it (without the legend: see :data:`LEGEND`)."""
        names = [f"GPU{g}" for g in self.gpus]
        cells = [[(code or "?") for code in row] for row in self.links]
        first = max([4] + [len(n) for n in names])
        width = max([4] + [len(n) for n in names] + [len(c) for row in cells for c in row])
        cpu = [(self.cpu_affinity[i] if i < len(self.cpu_affinity) else None) or "N/A" for i in range(len(names))]
        cpu_w = max([len("CPU Affinity")] + [len(c) for c in cpu])
        lines = [
            " " * first
            + "  "
            + "  ".join(n.center(width) for n in names)
            + f"  {'CPU Affinity':<{cpu_w}}  NUMA Affinity"
        ]
        for i, name in enumerate(names):
            numa = self.numa_affinity[i] if i < len(self.numa_affinity) else None
            lines.append(
                f"{name:<{first}}  "
                + "  ".join(c.center(width) for c in cells[i])
                + f"  {cpu[i]:<{cpu_w}}  {'N/A' if numa is None else numa}"
            )
        return "\n".join(line.rstrip() for line in lines)


def check_indices(topology: Topology, indices: Sequence[int], where: str) -> None:
    """Refuses a topology that names a GPU the inventory it belongs to lacks.

    Raises:
        InventoryFileError: naming the GPUs and the inventory's.
    """
    known = set(indices)
    missing = [i for i in topology.gpus if i not in known]
    if missing:
        raise InventoryFileError(
            f"{where}: gpus names GPU(s) {missing[:8]} that the inventory lacks; its GPUs: {sorted(known)[:16]}.",
            hint=_HINT,
        )


def _index_list(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= 1023 for i in value
    ):
        raise InventoryFileError(f"{what}={short_repr(value)} must be a list of NVML indices 0..1023.", hint=_HINT)
    if len(set(value)) != len(value):
        raise InventoryFileError(f"{what}={short_repr(value)} names a GPU twice.", hint=_HINT)
    return tuple(value)


def _matrix(value: object, n: int, what: str) -> tuple[tuple[str | None, ...], ...]:
    if not isinstance(value, list) or len(value) != n or not all(isinstance(r, list) and len(r) == n for r in value):
        raise InventoryFileError(
            f"{what} must be a {n} x {n} list of lists (one row per GPU), got {short_repr(value)}.", hint=_HINT
        )
    rows = tuple(tuple(check_code(c, f"{what}[{i}][{j}]") for j, c in enumerate(r)) for i, r in enumerate(value))
    for i in range(n):
        if rows[i][i] != "X":
            raise InventoryFileError(
                f"{what}[{i}][{i}]={short_repr(rows[i][i])}; a GPU's link to itself is 'X'.", hint=_HINT
            )
        for j in range(i):
            if rows[i][j] == "X" or rows[i][j] != rows[j][i]:
                raise InventoryFileError(
                    f"{what}[{i}][{j}]={short_repr(rows[i][j])} but links[{j}][{i}]="
                    f"{short_repr(rows[j][i])}; a link is the same both ways and 'X' only on "
                    "the diagonal.",
                    hint=_HINT,
                )
    return rows


def _per_gpu(value: object, n: int, what: str) -> list[Any]:
    if not isinstance(value, list) or len(value) not in (0, n):
        raise InventoryFileError(
            f"{what} must be a list with one entry per GPU ({n}), got {short_repr(value)}.", hint=_HINT
        )
    return value


def _cpu_lists(value: object, n: int, what: str) -> tuple[str | None, ...]:
    cpus = _per_gpu(value, n, what)
    for i, text in enumerate(cpus):
        if text is not None:
            parse_cpus(text, f"{what}[{i}]")
    return tuple(cpus)


def _numa_nodes(value: object, n: int, what: str) -> tuple[int | None, ...]:
    nodes = _per_gpu(value, n, what)
    for i, node in enumerate(nodes):
        if node is not None and (isinstance(node, bool) or not isinstance(node, int) or not 0 <= node <= MAX_CPU):
            raise InventoryFileError(
                f"{what}[{i}]={short_repr(node)} must be a NUMA node number 0..{MAX_CPU} or null.", hint=_HINT
            )
    return tuple(nodes)


def from_nvml(snap: NvmlSnapshot) -> Topology | None:
    """Builds the topology from a snapshot read with ``topology=True`` (``None`` when it was not).

    Two GPUs joined by NVLink get ``NV#``: their direct links, plus, where both reach
    NVSwitches, the links the one with fewer switch links has (``nvidia-smi`` shows
    ``NV12`` between any two A100s of a DGX A100, each with 12 links to its 6
    NVSwitches). A link whose far end NVML cannot name and that is no GPU of this
    machine is taken as an NVSwitch that NVML does not show (as NCCL does in a VM).
    Other pairs get the PCIe code of NVML's common ancestor.

    >>> from tfdevices.gpus.gpuinfo import GpuInfo
    >>> from tfdevices.gpus.nvml import NvmlDevice, NvmlSnapshot
    >>> devs = (NvmlDevice(GpuInfo(0, "A", "GPU-a", "00000000:07:00.0"), nvlinks=(("00000000:0f:00.0", "gpu"),) * 4,
    ...                    cpu_affinity=(0, 1), numa_node=0),
    ...         NvmlDevice(GpuInfo(1, "A", "GPU-b", "00000000:0F:00.0"), nvlinks=(("00000000:07:00.0", "gpu"),) * 4,
    ...                    cpu_affinity=(0, 1), numa_node=0))
    >>> from_nvml(NvmlSnapshot(devices=devs, ancestors=((None, 40), (40, None)))).links
    (('X', 'NV4'), ('NV4', 'X'))
    """
    if not snap.ancestors:
        return None
    devices = snap.devices
    bus = {normal_bus_id(d.gpu.pci_bus_id): i for i, d in enumerate(devices) if d.gpu.pci_bus_id}
    direct = [[0] * len(devices) for _ in devices]
    switch = [0] * len(devices)
    for i, d in enumerate(devices):
        for remote, kind in d.nvlinks or ():
            j = bus.get(remote)
            if j is not None and j != i and kind != "switch":
                direct[i][j] += 1
            elif j is None and kind != "gpu":
                switch[i] += 1
    links = []
    for i in range(len(devices)):
        row: list[str | None] = []
        for j in range(len(devices)):
            count = max(direct[i][j], direct[j][i]) + (min(switch[i], switch[j]) if switch[i] and switch[j] else 0)
            level = snap.ancestors[i][j] if i < len(snap.ancestors) and j < len(snap.ancestors[i]) else None
            row.append(
                "X"
                if i == j
                else f"NV{min(count, MAX_NVLINKS)}"
                if count
                else None
                if level is None
                else _LEVELS.get(level)
            )
        links.append(tuple(row))
    return Topology(
        gpus=tuple(d.gpu.index for d in devices),
        links=tuple(links),
        cpu_affinity=tuple(format_cpus(d.cpu_affinity) if d.cpu_affinity else None for d in devices),
        numa_affinity=tuple(d.numa_node for d in devices),
        origin="nvml",
    )
