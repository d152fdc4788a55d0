"""Discover: what GPUs exist, without starting TensorFlow.

:func:`discover` reads NVML (through :mod:`tfdevices.gpus.nvml`) and returns a frozen
:class:`Inventory`. Each :class:`GpuInfo` carries the three names a GPU has:

* ``index``: the NVML index, what ``nvidia-smi`` shows (the name tfdevices speaks);
* ``cuda_ordinal``: its number for CUDA under the current ``CUDA_VISIBLE_DEVICES``
  and ``CUDA_DEVICE_ORDER`` (``None`` when masked out);
* ``tf_name``: the ``/GPU:n`` name TensorFlow will give it (``None`` when masked out).

An inventory round-trips through JSON, so a listing saved on one node
(``tfdevices list --json > node.json``) can be planned against elsewhere
(``TFDEVICES_INVENTORY=node.json`` or ``--inventory node.json``).

>>> inv = Inventory.from_json(Inventory(gpus=(), source="none", reason="no NVIDIA driver").to_json())
>>> inv.source, inv.reason, len(inv)
('none', 'no NVIDIA driver', 0)
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from tfdevices.core.errors import InventoryFileError
from tfdevices.core.json_records import Check, Rules, load
from tfdevices.core.record_class import asdict, record, replace
from tfdevices.core.units import format_bytes, short_repr
from tfdevices.gpus.gpuinfo import MAX_GPUS, GpuInfo
from tfdevices.gpus.topology import Topology, check_indices

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the listing path
if TYPE_CHECKING:
    from typing import Any


SOURCES = ("nvml", "tensorflow", "none")
INVENTORY_ENV = "TFDEVICES_INVENTORY"
MAX_FILE_BYTES = 4 << 20
"""The largest inventory file read (a listing of 8 GPUs is about 4 KB)."""
_FILE_HINT = "save one with 'tfdevices list --json > FILE'."
_SAVE = "save it with 'tfdevices list --json > FILE'."


@record
class Inventory:
    """The GPUs of one machine, as seen by one process.

    Attributes:
        gpus: every GPU NVML reports, visible or masked, in NVML index order.
        source: ``"nvml"``, ``"tensorflow"`` or ``"none"``.
        reason: why no GPU was found (``None`` when some were).
        driver_version: the NVIDIA driver version, when known.
        cuda_visible_devices: ``CUDA_VISIBLE_DEVICES`` at discovery (``None``: unset).
        cuda_device_order: ``CUDA_DEVICE_ORDER`` at discovery (``None``: unset, CUDA's FASTEST_FIRST).
        notes: caveats worth showing, e.g. an estimated CUDA order.
        loaded_from: the file this inventory was read from, if any.
        shown_as: how messages and the listing name that file, where not by its path (a path an environment
            variable gave is not printed: ``"the file TFDEVICES_INVENTORY names"``).
        topology: how the physical GPUs are wired (``None`` where not read).
    """

    gpus: tuple[GpuInfo, ...] = ()
    source: str = "none"
    reason: str | None = None
    driver_version: str | None = None
    cuda_visible_devices: str | None = None
    cuda_device_order: str | None = None
    notes: tuple[str, ...] = ()
    loaded_from: str | None = None
    shown_as: str | None = None
    topology: Topology | None = None

    json_rules = Rules(
        entry="an inventory",
        hint=_SAVE,
        error=InventoryFileError,
        skip=("loaded_from", "shown_as"),
        checks={
            "gpus": Check(max_items=MAX_GPUS, noun="GPU"),
            "source": Check(choices=SOURCES, noun="sources"),
            "notes": Check(max_items=64, noun="note"),
        },
    )

    def __iter__(self) -> Iterator[GpuInfo]:
        return iter(self.gpus)

    def __len__(self) -> int:
        return len(self.gpus)

    @property
    def visible(self) -> tuple[GpuInfo, ...]:
        """The GPUs CUDA will see, in CUDA ordinal order."""
        return tuple(sorted((g for g in self.gpus if g.visible), key=lambda g: g.cuda_ordinal or 0))

    @property
    def file_words(self) -> str | None:
        """How messages name the file it was read from (``None``: read from no file)."""
        return self.shown_as or self.loaded_from

    def mask_words(self) -> str:
        """``CUDA_VISIBLE_DEVICES`` in words, never its value: ``"unset"``, or what the mask shows of these GPUs.

        >>> from tfdevices.gpus.gpuinfo import GpuInfo
        >>> gpus = tuple(GpuInfo(index=i, name="A100", uuid=f"GPU-{i}", cuda_ordinal={2: 0}.get(i)) for i in range(4))
        >>> Inventory(gpus=gpus, source="nvml", cuda_visible_devices="2").mask_words()
        "set (shows 1 of 4 GPUs: 2 in nvidia-smi's numbers)"
        """
        if self.cuda_visible_devices is None:
            return "unset"
        parents = {g.index for g in self.gpus if g.mig_index is not None}
        count = sum(1 for g in self.gpus if g.mig_index is not None or g.index not in parents)
        if not self.gpus or self.source != "nvml":
            return "set"
        if not self.visible:
            return f"set (hides all {count} GPUs)" if count > 1 else "set (hides the GPU)"
        keys = ", ".join(g.key for g in self.visible)
        return f"set (shows {len(self.visible)} of {count} GPUs: {keys} in nvidia-smi's numbers)"

    def order_words(self) -> str:
        """``CUDA_DEVICE_ORDER`` in words: unset, or the order CUDA follows (one of the two it knows).

        >>> Inventory(cuda_device_order="PCI_BUS_ID").order_words(), Inventory().order_words()
        ('PCI_BUS_ID', "unset (CUDA's FASTEST_FIRST)")
        """
        order = self.cuda_device_order
        if order is None:
            return "unset (CUDA's FASTEST_FIRST)"
        if not order.strip():
            return "blank (CUDA's FASTEST_FIRST)"
        return order.strip() if order.strip() in ("FASTEST_FIRST", "PCI_BUS_ID") else "set to no order CUDA knows"

    def get(self, key: str) -> GpuInfo | None:
        """The GPU with this key (``"3"``, ``"0:1"``), or ``None``."""
        return next((g for g in self.gpus if g.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        """The inventory as plain JSON values, what ``tfdevices list --json`` prints."""
        data = asdict(self)
        data["gpus"] = [g.to_dict() for g in self.gpus]
        data["notes"] = list(self.notes)
        data.pop("loaded_from")
        data.pop("shown_as")
        data.pop("cuda_visible_devices")  # the process's variables, not the machine's: never printed
        data.pop("cuda_device_order")
        data["topology"] = None if self.topology is None else self.topology.to_dict()
        return data

    def to_json(self, indent: int | None = 2) -> str:
        """The inventory as JSON text (read back by :meth:`from_json`)."""
        import json  # noqa: PLC0415 (only --json needs it: the listing path stays clear of it)

        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str, *, where: str = "inventory JSON") -> Inventory:
        """Reads what :meth:`to_json` (``tfdevices list --json``) wrote.

        Raises:
            InventoryFileError: the text is not JSON or not an inventory.
        """
        import json  # noqa: PLC0415 (reading a saved listing only: the listing path stays clear of it)

        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise InventoryFileError(
                f"{where}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}).",
                hint="save it with 'tfdevices list --json > FILE'.",
            ) from None
        except RecursionError:
            raise InventoryFileError(
                f"{where}: JSON nested too deeply to be an inventory.",
                hint="save it with 'tfdevices list --json > FILE'.",
            ) from None
        except ValueError:  # a number past Python's 4300-digit limit for int()
            raise InventoryFileError(
                f"{where}: holds a number thousands of digits long; not an inventory.",
                hint="save it with 'tfdevices list --json > FILE'.",
            ) from None
        return cls.from_dict(data, where=where)

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "inventory") -> Inventory:
        """An inventory from :meth:`to_dict`'s output; ``where`` names the input in errors.

        Every field is read against its annotation and ``json_rules``
        (:func:`tfdevices.core.json_records.load`); then no GPU may appear twice, and the
        topology may name only the inventory's GPUs.

        Raises:
            InventoryFileError: the data is not an inventory; the message names the field.
        """
        inv: Inventory = load(cls, data, where=where)
        seen: set[str] = set()
        dupes = sorted({g.key for g in inv.gpus if g.key in seen or seen.add(g.key)})  # type: ignore[func-returns-value]
        if dupes:
            raise InventoryFileError(
                f"{where}: GPU index(es) {dupes[:8]} appear more than once.", hint="each GPU must appear once."
            )
        if inv.topology is not None:
            check_indices(inv.topology, [g.index for g in inv.gpus], f"{where}: topology")
        return inv

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, shown_as: str | None = None) -> Inventory:
        """Reads an inventory file (one ``tfdevices list --json`` wrote, or ``to_json()``).

        Args:
            path: the file.
            shown_as: how messages name it (default: its path, quoted); a path from an environment variable
                is named by the variable instead.

        Raises:
            InventoryFileError: the file is missing, unreadable or not an inventory.

        >>> import tfdevices
        >>> node = tfdevices.Inventory.load("tests/data/node-8gpu.json")
        >>> [gpu.index for gpu in node.gpus if gpu.memory_free >= 30 * 2**30]
        [0, 2, 4]
        """
        where = f"inventory file {short_repr(os.fspath(path), 240)}" if shown_as is None else shown_as
        inv = cls.from_json(_decode(read_bounded(path, what=where), where), where=where)
        return replace(inv, loaded_from=os.fspath(path), shown_as=shown_as)

    def table(self, *, processes: bool = False) -> str:
        """A table like ``nvidia-smi``'s, with the NVML -> CUDA -> TensorFlow mapping and what gpustat shows.

        Args:
            processes: list each GPU's processes under it (pid, user, GPU memory, kind, command).
        """
        header = (
            "NVML",
            "CUDA",
            "TF",
            "Name",
            "Memory used / total",
            "Free",
            "Util",
            "CC",
            "Procs",
            "Temp",
            "Fan",
            "Power / cap",
            "Perf",
            "SM/mem MHz",
            "ECC",
            "MIG",
        )
        rows: list[tuple[str, ...]] = [header]
        for g in self.gpus:
            rows.append(
                (
                    g.key,
                    "-" if g.cuda_ordinal is None else str(g.cuda_ordinal),
                    g.tf_name or "(masked)",
                    g.name,
                    f"{format_bytes(g.memory_used)} / {format_bytes(g.memory_total)}",
                    format_bytes(g.memory_free),
                    "n/a" if g.utilization is None else f"{g.utilization:.0%}",
                    "n/a" if g.compute_capability is None else "{}.{}".format(*g.compute_capability),
                    "n/a" if g.processes is None else str(g.processes),
                    *_sensors(g),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if processes:
            lines = [lines[0], lines[1]] + [
                line for g, row in zip(self.gpus, lines[2:]) for line in [row, *_process_lines(g)]
            ]
        origin = f" (from {self.file_words})" if self.file_words else ""
        head = f"source: {self.source}{origin}"
        if self.driver_version:
            head += f"  driver: {self.driver_version}"
        head += f"  CUDA_VISIBLE_DEVICES: {self.mask_words()}"
        head += f"  CUDA_DEVICE_ORDER: {self.order_words()}"
        out = [head]
        if self.gpus:
            out += lines
        if not self.visible:
            out.append(f"no GPU visible: {self.reason or 'none found'}")
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)


def _sensors(g: GpuInfo) -> tuple[str, ...]:
    """Temperature, fan, power, P-state, clocks, ECC and MIG mode as the listing shows them ("n/a": not reported)."""

    def some(value: object, text: str) -> str:
        return "n/a" if value is None else text

    power = (
        "n/a"
        if g.power_draw_mw is None and g.power_limit_mw is None
        else (
            f"{some(g.power_draw_mw, f'{(g.power_draw_mw or 0) / 1000:.0f}')} / "
            f"{some(g.power_limit_mw, f'{(g.power_limit_mw or 0) / 1000:.0f}')} W"
        )
    )
    clocks = (
        "n/a"
        if g.clock_sm_mhz is None and g.clock_memory_mhz is None
        else (f"{some(g.clock_sm_mhz, str(g.clock_sm_mhz))}/{some(g.clock_memory_mhz, str(g.clock_memory_mhz))}")
    )
    return (
        some(g.temperature, f"{g.temperature}C"),
        some(g.fan_speed, f"{g.fan_speed}%"),
        power,
        some(g.performance_state, f"P{g.performance_state}"),
        clocks,
        some(g.ecc_errors, str(g.ecc_errors)),
        some(g.mig_enabled, "on" if g.mig_enabled else "off"),
    )


def _process_lines(g: GpuInfo) -> list[str]:
    """One line per process: pid, user, GPU memory, kind, command ("?" where it could not be seen)."""
    if g.process_list is None:
        return ["    (processes not listed: NVML did not say, or the listing was saved without them)"]
    if not g.process_list:
        return ["    (no process)"]
    lines = []
    for p in g.process_list:
        command = p.command if p.command is not None else "? (not visible to this user, or gone)"
        memory = format_bytes(p.gpu_memory) if p.gpu_memory is not None else "n/a"
        lines.append(f"    pid {p.pid:<8} {p.user or '?':<12} {memory:>10}  {p.kind:<3}  {command}")
    return lines


def read_bounded(path: str | os.PathLike[str], *, what: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """Reads a regular file of at most ``limit`` bytes, never waiting on a FIFO or a device.

    Args:
        path: the file.
        what: the file's description in messages (``"inventory file 'x.json'"``).
        limit: the most bytes to read.

    Returns:
        The file's bytes.

    Raises:
        InventoryFileError: the path is missing, unreadable, not a regular file (a FIFO,
            a device, a directory, a socket) or larger than ``limit``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) else str(err)
        raise InventoryFileError(f"{what}: {why}.", hint=_FILE_HINT) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a directory"
                if stat.S_ISDIR(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "not a regular file"
            )
            raise InventoryFileError(f"{what} is {kind}, not a file; it is not read.", hint=_FILE_HINT)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise InventoryFileError(f"{what}: {err.strerror}.", hint=_FILE_HINT) from None
    finally:
        os.close(fd)
    if size > limit:
        raise InventoryFileError(
            f"{what} is larger than {format_bytes(limit)}; an inventory is a few KB.", hint=_FILE_HINT
        )
    return b"".join(chunks)


def _decode(data: bytes, where: str) -> str:
    """JSON text in UTF-8 (with or without a BOM), UTF-16 or UTF-32, as RFC 8259 allows; anything else is refused."""
    import json  # noqa: PLC0415 (reading a saved listing only)

    encoding = json.detect_encoding(data)
    try:
        return data.decode("utf-8-sig" if encoding == "utf-8" else encoding)
    except UnicodeDecodeError as err:
        raise InventoryFileError(
            f"{where}: not JSON text (byte {data[err.start]:#04x} at offset {err.start} is not "
            f"{encoding}; binary data, or a text encoding other than UTF-8/16/32).",
            hint=_FILE_HINT,
        ) from None
