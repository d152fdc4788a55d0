"""Select: choose GPUs from an inventory. Pure: nothing here touches a GPU.

>>> from tfdevices.gpus.inventory import Inventory
>>> from tfdevices.gpus.gpuinfo import GpuInfo
>>> gpus = tuple(GpuInfo(index=i, name="A100", uuid=f"GPU-{i}", memory_total=80 << 30,
...                      memory_free=free << 30, memory_used=(80 - free) << 30, utilization=u,
...                      cuda_ordinal=i, tf_name=f"/GPU:{i}")
...              for i, (free, u) in enumerate([(10, 0.9), (70, 0.1), (60, 0.0)]))
>>> sel = select("auto:2", Inventory(gpus=gpus, source="nvml"), min_free_memory="20GiB")
>>> sel.cuda_visible_devices, sel.tf_names
('1,2', ('GPU:0', 'GPU:1'))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tfdevices.core.errors import PYTHON, InputError, SelectionError, SpecError, Terms
from tfdevices.core.record_class import asdict, record
from tfdevices.core.units import format_bytes, parse_memory, short_repr
from tfdevices.gpus import topology as tp, visibility
from tfdevices.gpus.discovery import discover
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.spec import DeviceSpec, parse_spec
from tfdevices.gpus.wiring import MAX_CANDIDATES, best_linked_set

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the listing path
if TYPE_CHECKING:
    from typing import Any


ORDERS = ("links", "free_memory", "utilization", "index")
"""How ``auto:N`` ranks GPUs: ``links`` (best-wired set, then free memory; the default) or the
wiring-blind orders of tfdevices 0.2."""
HIDDEN = "hidden by CUDA_VISIBLE_DEVICES"
"""Why a GPU that the process's mask hides is skipped."""


@record
class Decision:
    """Why one GPU was taken or skipped."""

    key: str
    taken: bool
    reason: str


@record
class Selection:
    """The GPUs chosen for this process.

    Attributes:
        spec: the canonical spec (``"auto:2"``).
        gpus: the chosen GPUs in their TensorFlow order once masked: as named for an explicit spec
            (``"7,6"``: GPU 7 is ``GPU:0``), the mask's order for ``"all"`` under a
            ``CUDA_VISIBLE_DEVICES`` already set, else NVML index order.
        decisions: one per GPU in the inventory, saying why it was taken or skipped.
        filters: the filters applied, for people (``"min_free_memory=8.0 GiB"``).
        source: the inventory's source (``"nvml"``, ``"none"`` ...).
        wiring: how the chosen GPUs are linked and why this set, for people (empty
            when the topology is unknown or one GPU is chosen).
    """

    spec: str
    gpus: tuple[GpuInfo, ...]
    decisions: tuple[Decision, ...] = ()
    filters: str = ""
    source: str = "none"
    wiring: str = ""

    @property
    def is_cpu_only(self) -> bool:
        """Whether no GPU was selected."""
        return not self.gpus

    @property
    def cuda_visible_devices(self) -> str:
        """The mask: NVML indices (MIG UUIDs for MIG instances), ``"-1"`` for no GPU."""
        return visibility.mask(self.gpus)

    @property
    def tf_names(self) -> tuple[str, ...]:
        """The TensorFlow names the chosen GPUs get once the mask is applied."""
        return tuple(f"GPU:{i}" for i in range(len(self.gpus)))

    def env(self) -> dict[str, str]:
        """The environment that applies this selection in a process not yet using CUDA."""
        return visibility.mask_env(self.gpus)

    def to_dict(self) -> dict[str, Any]:
        """The selection as plain JSON values, what ``tfdevices select --json`` prints."""
        return {
            "spec": self.spec,
            "filters": self.filters,
            "source": self.source,
            "wiring": self.wiring,
            "cuda_visible_devices": self.cuda_visible_devices,
            "gpus": [
                {"nvml": g.key, "uuid": g.uuid, "name": g.name, "tf_name": t} for g, t in zip(self.gpus, self.tf_names)
            ],
            "decisions": [asdict(d) for d in self.decisions],
        }

    def to_json(self) -> str:
        """The selection as JSON text."""
        import json  # noqa: PLC0415 (only --format json needs it: select's listing path stays clear of it)

        return json.dumps(self.to_dict(), indent=2)

    def table(self) -> str:
        """The decision for each GPU, and the NVML -> TensorFlow names of the chosen ones."""
        tf_of = dict(zip((g.key for g in self.gpus), self.tf_names))
        lines = [
            f"spec: {self.spec}"
            + (f"  filters: {self.filters}" if self.filters else "")
            + f"  CUDA_VISIBLE_DEVICES={self.cuda_visible_devices}"
        ]
        if self.wiring:
            lines.append(f"  links: {self.wiring}")
        for d in self.decisions:
            mark = f"-> {tf_of[d.key]}" if d.taken else "skip"
            lines.append(f"  GPU {d.key:<5} {mark:<10} {d.reason}")
        if not self.gpus:
            lines.append("  no GPU selected: TensorFlow will run on the CPU")
        return "\n".join(lines)


def select(
    spec: str | int | Sequence[int | str] = "all",
    inventory: Inventory | None = None,
    *,
    min_free_memory: int | str | None = None,
    max_utilization: float | None = None,
    exclude: str | int | Sequence[int | str] | None = None,
    order: str = "links",
    terms: Terms = PYTHON,
) -> Selection:
    """Chooses GPUs.

    Only GPUs visible under the current ``CUDA_VISIBLE_DEVICES`` are candidates: a scheduler's mask is never widened.

    Args:
        spec: see :mod:`tfdevices.gpus.spec` (``"all"``, ``"none"``, ``"auto:N"``, ``"0,2"``, ``0``, ``[0, 2]``).
        inventory: what to choose from; ``None`` runs :func:`tfdevices.discover`.
        min_free_memory: skip GPUs with less free memory (``"8GiB"`` or bytes).
        max_utilization: skip GPUs busier than this fraction (0..1).
        exclude: GPUs never to take, as an explicit spec (``"0"``, ``[0, 3]``).
        order: how ``auto:N`` ranks GPUs: ``"links"`` (the default: the N qualifying GPUs with the best
            mutual links (all NVLink, else one PCIe switch, else one socket), among equals the most free
            memory; without a known topology, as ``"free_memory"``), or, ignoring the wiring,
            ``"free_memory"`` (most first), ``"utilization"`` (least first) or ``"index"``.
        terms: how messages name the settings (:data:`tfdevices.core.errors.CLI` for the command line).

    Returns:
        A frozen :class:`Selection`.

    Raises:
        SpecError: the spec or ``exclude`` is malformed, or names a GPU that does not exist.
        InputError: a filter or ``order`` is malformed.
        SelectionError: the request is valid but cannot be met (too few GPUs pass the filters, or an
            explicitly named GPU fails them or is hidden).

    The two best GPUs with 30 GiB free in a saved 8-GPU listing (``table()`` says why each was taken or not):

    >>> from tfdevices import Inventory, select
    >>> picked = select("auto:2", Inventory.load("tests/data/node-8gpu.json"), min_free_memory="30GiB")
    >>> [gpu.index for gpu in picked.gpus], picked.cuda_visible_devices
    ([0, 2], '0,2')
    """
    parsed = parse_spec(spec, what=terms.name("spec"))
    inventory = discover() if inventory is None else inventory
    min_free = None if min_free_memory is None else parse_memory(min_free_memory, what=terms.name("min_free_memory"))
    max_util = _check_utilization(max_utilization, terms)
    _check_order(order, terms)
    excluded = _resolve_exclude(exclude, inventory, terms)
    checks = _checks(min_free, max_util, excluded)
    filters = _filters_text(terms, min_free, max_util, excluded)
    failures = {g.key: _first_failure(g, checks) for g in inventory.gpus}
    chosen, wiring = _choose(_Asked(parsed, spec, terms), inventory, failures, order, filters)
    return Selection(
        spec=parsed.text,
        gpus=_tf_order(parsed, chosen, inventory),
        decisions=_decisions(inventory, parsed, failures, chosen, bool(wiring) and order == "links"),
        filters=filters,
        source=inventory.source,
        wiring=wiring,
    )


def _decisions(
    inventory: Inventory,
    parsed: DeviceSpec,
    failures: dict[str, str | None],
    chosen: Sequence[GpuInfo],
    by_links: bool,
) -> tuple[Decision, ...]:
    """Each GPU of the inventory, taken or not, and why (``by_links``: chosen for their mutual links)."""
    keys = {g.key for g in chosen}
    links = _links_within(chosen, inventory.topology)
    return tuple(
        Decision(g.key, g.key in keys, _reason(g, parsed, failures[g.key], g.key in keys, links.get(g.key), by_links))
        for g in inventory.gpus
    )


def _check_order(order: str, terms: Terms) -> None:
    if order not in ORDERS:
        raise InputError(
            f"{terms.setting('order', order)}: unknown order; known orders: {', '.join(ORDERS)}.",
            hint="use 'links' (best-wired first), 'free_memory' (most free first), "
            "'utilization' (least busy first) or 'index'.",
        )


def _filters_text(terms: Terms, min_free: int | None, max_util: float | None, excluded: frozenset[str]) -> str:
    """The filters asked for, as the user named them (empty: none)."""
    parts = (
        _filter(terms, "min_free_memory", format_bytes(min_free)) if min_free is not None else "",
        _filter(terms, "max_utilization", f"{max_util:.0%}") if max_util is not None else "",
        _filter(terms, "exclude", ",".join(sorted(excluded))) if excluded else "",
    )
    return ", ".join(p for p in parts if p)


def _filter(terms: Terms, param: str, text: str) -> str:
    """A filter for people: ``min_free_memory=8.0 GiB`` (the API), ``--min-free-memory 8.0 GiB`` (the CLI)."""
    return f"{param}={text}" if terms.style == "python" else terms.setting(param, text)


def _tf_order(spec: DeviceSpec, chosen: Sequence[GpuInfo], inventory: Inventory) -> tuple[GpuInfo, ...]:
    """The order the mask gives the chosen GPUs: as named (``"7,6"``), a mask already set
    kept for ``"all"``, else NVML order.
    """
    if spec.kind == "explicit":
        return tuple(chosen)
    if spec.kind == "all" and inventory.cuda_visible_devices is not None:
        return tuple(sorted(chosen, key=lambda g: (g.cuda_ordinal is None, g.cuda_ordinal or 0, _nvml_order(g))))
    return tuple(sorted(chosen, key=_nvml_order))


@record
class _Asked:
    """A spec as parsed, as typed (for messages), and the terms of the entry point it came through."""

    parsed: DeviceSpec
    typed: object
    terms: Terms

    @property
    def echo(self) -> str:
        return f"{self.terms.name('spec')} {short_repr(self.typed)}"


def _nvml_order(gpu: GpuInfo) -> tuple[int, int]:
    return gpu.index, -1 if gpu.mig_index is None else gpu.mig_index


def _check_utilization(value: object, terms: Terms = PYTHON) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InputError(
            f"{terms.setting('max_utilization', value)}: must be a fraction between 0 and 1.",
            hint=f"write {terms.setting('max_utilization', 0.5)} for 50%.",
        )
    return float(value)


def resolve_gpus(spec: object, inventory: Inventory, *, what: str = "GPU spec") -> tuple[GpuInfo, ...]:
    """The physical GPUs an explicit spec names, in the order given; one GPU named twice is an error.

    This is where every list of GPUs enters (``select``, ``reserve``, ``tfdevices launch --gpus``):
    each name is resolved to a GPU of ``inventory`` first, and then two names of one
    GPU are refused, whatever their spelling: an index and its UUID, two UUID
    prefixes of one GPU, or a MIG instance and its parent GPU.

    Args:
        spec: an explicit spec: ``"0,2"``, ``[0, "GPU-8a3c"]``, ``"0:1"`` ...
        inventory: the GPUs that exist.
        what: the input's name in messages (``"--gpus"``).

    Returns:
        The named GPUs, in the order given.

    Raises:
        SpecError: the spec is malformed or not explicit, a name matches no GPU or
            several, or two names are one GPU.

    >>> from tfdevices.gpus.inventory import Inventory
    >>> from tfdevices.gpus.gpuinfo import GpuInfo
    >>> inv = Inventory(gpus=tuple(GpuInfo(index=i, name="A100", uuid=f"GPU-{i}a") for i in range(2)))
    >>> [g.index for g in resolve_gpus("1,0", inv)]
    [1, 0]
    >>> resolve_gpus("0,GPU-0a", inv)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.SpecError: GPU spec '0,GPU-0a': 'GPU-0a' is GPU 0 (GPU-0a), named before as '0'; ...
    """
    parsed = parse_spec(spec, what=what)
    if parsed.kind != "explicit":
        raise SpecError(
            f"{what} {short_repr(spec)}: must name GPUs ('0,3'), not {parsed.kind!r}.",
            hint="list NVML indices, UUID prefixes or MIG ids.",
        )
    return _resolve_all(parsed.keys, inventory, what, spec)


def _resolve_all(keys: tuple[str, ...], inventory: Inventory, what: str, spec: object) -> tuple[GpuInfo, ...]:
    by_key = {g.key: g for g in inventory.gpus}
    named = tuple(_resolve(k, inventory, what, spec, by_key) for k in keys)
    clash = first_overlap(named)
    if clash is not None:
        (i, a), (j, b) = clash
        relation = (
            f"is GPU {_label(b)}"
            if a.key == b.key
            else (
                f"is MIG instance {_label(b)} of GPU {_label(a)}"
                if b.mig_index is not None
                else f"is GPU {_label(b)}, the parent of MIG instance {_label(a)}"
            )
        )
        raise SpecError(
            f"{what} {short_repr(spec)}: {short_repr(keys[j])} {relation}, named before as "
            f"{short_repr(keys[i])}; one GPU is one GPU.",
            hint="name each GPU once (an index, its UUID and its MIG instances all name that GPU).",
        )
    return named


def _label(g: GpuInfo) -> str:
    return f"{g.key} ({g.uuid})" if g.uuid else g.key


def first_overlap(gpus: Sequence[GpuInfo]) -> tuple[tuple[int, GpuInfo], tuple[int, GpuInfo]] | None:
    """The first two entries of ``gpus`` that are one GPU, as ``((i, gpu), (j, gpu))`` with ``i < j``; else ``None``.

    Two entries are one GPU when they have the same key or UUID, or when one is a
    MIG instance of the other (same NVML index, one of them whole). Two MIG
    instances of one GPU are two devices. Linear time.

    >>> from tfdevices.gpus.gpuinfo import GpuInfo
    >>> parent = GpuInfo(index=0, name="A100", uuid="GPU-a")
    >>> mig = GpuInfo(index=0, name="A100 MIG", uuid="MIG-b", mig_index=1)
    >>> first_overlap([parent, mig])[1][0]
    1
    """
    seen_key: dict[str, int] = {}
    seen_uuid: dict[str, int] = {}
    whole: dict[int, int] = {}
    parts: dict[int, int] = {}
    for j, g in enumerate(gpus):
        uuid = g.uuid.lower()
        family = parts if g.mig_index is None else whole  # a whole GPU clashes with its parts, and back
        for i in (seen_key.get(g.key), seen_uuid.get(uuid) if uuid else None, family.get(g.index)):
            if i is not None:
                return (i, gpus[i]), (j, g)
        seen_key[g.key] = j
        if uuid:
            seen_uuid[uuid] = j
        (whole if g.mig_index is None else parts).setdefault(g.index, j)
    return None


def _resolve(
    key: str, inventory: Inventory, what: str, spec: object, by_key: dict[str, GpuInfo] | None = None
) -> GpuInfo:
    """The GPU a spec key names: an NVML key (``"3"``, ``"0:1"``) or a unique UUID prefix."""
    if key.startswith(("GPU-", "MIG-")):
        low = key.lower()
        found = [g for g in inventory.gpus if g.uuid.lower().startswith(low)]
    else:
        one = (by_key if by_key is not None else {g.key: g for g in inventory.gpus}).get(key)
        found = [] if one is None else [one]
    if len(found) == 1:
        return found[0]
    if not inventory.gpus:
        raise SpecError(
            f"{what} {short_repr(spec)}: {short_repr(key)} names no GPU; {_has(inventory)} no GPU "
            f"({inventory.reason or 'none found'}).",
            hint="leave it out: there is no GPU to exclude."
            if "exclude" in what
            else f"run on the CPU: {_setting(what, 'none')} (or 'all', which falls back to the CPU).",
        )
    exists = ", ".join(f"{g.key} ({g.uuid})" for g in inventory.gpus[:16])
    if len(inventory.gpus) > 16:
        exists += f" and {len(inventory.gpus) - 16} more"
    if found:
        raise SpecError(
            f"{what} {short_repr(spec)}: {short_repr(key)} matches several GPUs: "
            f"{', '.join(f'{g.key} ({g.uuid})' for g in found[:8])}.",
            hint="write more of the UUID, or the NVML index, to name one of them.",
        )
    keys = ", ".join(g.key for g in inventory.gpus[:16]) + (" ..." if len(inventory.gpus) > 16 else "")
    raise SpecError(
        f"{what} {short_repr(spec)}: {short_repr(key)} names no GPU; {_has(inventory)} {exists}.",
        hint=f"name one of {keys} ('tfdevices list' shows them)"
        + ("." if "exclude" in what else f", or {_setting(what, 'none')} for the CPU."),
    )


def _has(inventory: Inventory) -> str:
    """Who has the GPUs: ``this machine has`` or ``the inventory node.json has`` (read from a file)."""
    if inventory.file_words:
        return f"the inventory {inventory.file_words} has"
    return "this machine has"


def _setting(what: str, value: str) -> str:
    """``'none'`` for the GPU spec, ``--gpus none`` for a flag: the value as the user would give it."""
    return f"{what} {value}" if what.startswith("--") else repr(value)


def _resolve_exclude(exclude: object, inventory: Inventory, terms: Terms) -> frozenset[str]:
    if exclude is None:
        return frozenset()
    return frozenset(g.key for g in resolve_gpus(exclude, inventory, what=terms.name("exclude")))


Check = Callable[[GpuInfo], "str | None"]


def _checks(min_free: int | None, max_util: float | None, excluded: frozenset[str]) -> list[Check]:
    checks: list[Check] = [lambda g: None if g.visible else HIDDEN, lambda g: "excluded" if g.key in excluded else None]
    if min_free is not None:
        checks.append(
            lambda g: (
                None if g.memory_free >= min_free else f"{format_bytes(g.memory_free)} free < {format_bytes(min_free)}"
            )
        )
    if max_util is not None:
        checks.append(
            lambda g: (
                "utilization unknown"
                if g.utilization is None
                else None
                if g.utilization <= max_util
                else f"utilization {g.utilization:.0%} > {max_util:.0%}"
            )
        )
    return checks


def _first_failure(gpu: GpuInfo, checks: list[Check]) -> str | None:
    return next((why for why in (check(gpu) for check in checks) if why), None)


_SORT_KEYS: dict[str, Callable[[GpuInfo], tuple[Any, ...]]] = {
    "free_memory": lambda g: (-g.memory_free, _nvml_order(g)),
    "utilization": lambda g: (g.utilization if g.utilization is not None else 2.0, -g.memory_free, _nvml_order(g)),
    "index": _nvml_order,
}


MIG_LINK = "MIG"
"""The link of a MIG instance to any other device: MIG has no peer-to-peer (neither PCIe nor
NVLink, per NVIDIA's MIG user guide), so its traffic goes through host memory."""


def _code(a: GpuInfo, b: GpuInfo, topology: tp.Topology) -> str:
    """The link code between two entries; ``"MIG"`` where either is a MIG instance."""
    if a.mig_index is not None or b.mig_index is not None:
        return MIG_LINK
    return topology.link(a.index, b.index) or "unknown"


def _link(a: GpuInfo, b: GpuInfo, topology: tp.Topology) -> int:
    """The rank of the link between two entries: a MIG instance's, through host memory, ranks as a host
    bridge (PHB), or as the socket link (SYS) where the GPUs are on different sockets.
    """
    code = _code(a, b, topology)
    if code == MIG_LINK:
        return tp.rank("SYS" if topology.link(a.index, b.index) == "SYS" else "PHB")
    return tp.rank(code)


def _words(code: str) -> str:
    return "no peer-to-peer: through host memory" if code == MIG_LINK else tp.describe(code)


def _links_within(chosen: Sequence[GpuInfo], topology: tp.Topology | None) -> dict[str, str]:
    """Each chosen GPU's links to the others: ``{"0": "NV4 to GPU 1"}`` (empty without a topology)."""
    if topology is None or len(chosen) < 2:
        return {}
    ordered = sorted(chosen, key=_nvml_order)
    out = {}
    for g in ordered:
        parts = [f"{_code(g, o, topology)} to GPU {o.key}" for o in ordered if o is not g]
        out[g.key] = ", ".join(parts[:4]) + (f" and {len(parts) - 4} more" if len(parts) > 4 else "")
    return out


def _by_links(passing: list[GpuInfo], count: int, topology: tp.Topology) -> tuple[list[GpuInfo], str]:
    """The best-linked ``count`` of ``passing`` (see :mod:`tfdevices.gpus.wiring`), and why, for people."""
    pool = sorted(passing, key=_nvml_order)
    note = ""
    if len(pool) > MAX_CANDIDATES:
        pool = sorted(sorted(pool, key=_SORT_KEYS["free_memory"])[:MAX_CANDIDATES], key=_nvml_order)
        note = f"; searched the {MAX_CANDIDATES} with the most free memory of {len(passing)} qualifying"
    best = best_linked_set(
        len(pool), count, lambda a, b: _link(pool[a], pool[b], topology), [g.memory_free for g in pool]
    )
    chosen = [pool[i] for i in best.members]
    weakest = min(((a, b) for a, b in _pairs(chosen)), key=lambda p: _link(p[0], p[1], topology))
    code = _code(*weakest, topology)
    where = f"GPU {weakest[0].key}-{weakest[1].key}"
    kind = (
        f"all NVLink (weakest {code}, {where})"
        if tp.nvlinks(code)
        else f"weakest link {code} ({_words(code)}, {where})"
    )
    sets = f"{best.considered:,} set{'s' if best.considered != 1 else ''}"
    why = (
        f"{kind}; the best-linked of {sets} of {count} qualifying GPUs, then the most free memory{note} "
        "(order='free_memory' ignores the wiring)"
    )
    return chosen, why


def _pairs(gpus: Sequence[GpuInfo]) -> list[tuple[GpuInfo, GpuInfo]]:
    return [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]


def _blind(chosen: list[GpuInfo], topology: tp.Topology | None, order: str) -> str:
    """How a wiring-blind choice is linked, so the table shows what the order gave up."""
    if topology is None or len(chosen) < 2:
        return ""
    weakest = min(_pairs(sorted(chosen, key=_nvml_order)), key=lambda p: _link(p[0], p[1], topology))
    code = _code(*weakest, topology)
    return (
        f"weakest link {code} ({_words(code)}, GPU {weakest[0].key}-{weakest[1].key}); "
        f"order={order!r} ignores the wiring (order='links' prefers the best-linked set)"
    )


def _choose(
    asked: _Asked, inventory: Inventory, failures: dict[str, str | None], order: str, filters: str
) -> tuple[list[GpuInfo], str]:
    chosen = _choose_gpus(asked, inventory, failures, order, filters)
    if isinstance(chosen, tuple):
        return chosen
    return chosen, "" if asked.parsed.kind != "auto" else _blind(chosen, inventory.topology, order)


def _choose_gpus(
    asked: _Asked, inventory: Inventory, failures: dict[str, str | None], order: str, filters: str
) -> list[GpuInfo] | tuple[list[GpuInfo], str]:
    spec = asked.parsed
    if spec.kind == "none":
        return []
    if spec.kind == "explicit":
        named = list(_resolve_all(spec.keys, inventory, asked.terms.name("spec"), asked.typed))
        bad = [g for g in named if failures[g.key]]
        if bad:
            raise SelectionError(
                f"{asked.echo}: "
                + "; ".join(f"GPU {g.key} is {failures[g.key]}" for g in bad)
                + f". {_summary(inventory, failures)}",
                hint=_named_hint(asked, bad, inventory, failures),
            )
        return named
    passing = [g for g in inventory.gpus if not failures[g.key]]
    if spec.kind == "all":
        if not passing and filters and inventory.gpus:
            raise SelectionError(
                f"{asked.echo} with {filters}: no GPU qualifies. {_summary(inventory, failures)}",
                hint=f"relax the filters, or use {asked.terms.setting('spec', 'none')} for the CPU.",
            )
        return passing
    if len(passing) < (spec.count or 0):
        raise SelectionError(
            f"{asked.echo}{' with ' + filters if filters else ''}: only {len(passing)} of "
            f"{len(inventory.gpus)} GPUs qualify. {_summary(inventory, failures)}",
            hint=_count_hint(asked, passing, inventory, failures),
        )
    count = spec.count or 0
    if order == "links" and inventory.topology is not None and count >= 2:
        return _by_links(passing, count, inventory.topology)
    return sorted(passing, key=_SORT_KEYS["free_memory" if order == "links" else order])[:count]


def _named_hint(asked: _Asked, bad: Sequence[GpuInfo], inventory: Inventory, failures: dict[str, str | None]) -> str:
    """The fix for named GPUs that cannot be taken, by why: hidden, excluded, or below a filter."""
    whys = {failures[g.key] for g in bad}
    visible = [g.key for g in inventory.gpus if g.visible]
    fixes = []
    if HIDDEN in whys:
        fixes.append(
            f"pick among the GPUs visible here ({', '.join(visible[:16]) or 'none'}): the "
            "CUDA_VISIBLE_DEVICES this process started with (a scheduler's, or yours) hides the others; "
            "tfdevices narrows a mask, never widens it"
        )
    if "excluded" in whys:
        fixes.append(
            f"leave GPU {', '.join(g.key for g in bad if failures[g.key] == 'excluded')} out of "
            f"{asked.terms.name('exclude')}"
        )
    if whys - {HIDDEN, "excluded"}:
        fixes.append("choose other GPUs or relax the filters")
    return "; or ".join(fixes) + f"; or use {asked.terms.setting('spec', 'auto:N')} to let tfdevices choose."


def _count_hint(
    asked: _Asked, passing: Sequence[GpuInfo], inventory: Inventory, failures: dict[str, str | None]
) -> str:
    """The fix for ``auto:N`` with too few GPUs, by what keeps the others out."""
    if not inventory.gpus:
        return (
            f"use {asked.terms.setting('spec', 'none')} (or 'all', which falls back to the CPU) on a "
            "machine without GPUs."
        )
    whys = {w for w in failures.values() if w}
    most = asked.terms.setting("spec", f"auto:{len(passing)}") if passing else asked.terms.setting("spec", "none")
    fixes = [f"ask for at most {most}"]
    if HIDDEN in whys:
        fixes.append("start without the CUDA_VISIBLE_DEVICES that hides the others (a scheduler's, or yours)")
    if whys - {HIDDEN, "excluded"}:
        fixes.append("relax the filters, or wait for GPUs to free up")
    if "excluded" in whys:
        fixes.append(f"exclude fewer GPUs ({asked.terms.name('exclude')})")
    return ", or ".join(fixes) + "."


def _summary(inventory: Inventory, failures: dict[str, str | None]) -> str:
    if not inventory.gpus:
        return f"{_has(inventory).capitalize()} no GPU ({inventory.reason or 'none found'})."
    parts = [f"GPU {g.key}: {failures[g.key] or 'ok'}" for g in inventory.gpus[:16]]
    more = f"; and {len(inventory.gpus) - 16} more" if len(inventory.gpus) > 16 else ""
    return "GPUs: " + "; ".join(parts) + more + "."


def _reason(
    gpu: GpuInfo, spec: DeviceSpec, failure: str | None, taken: bool, links: str | None = None, by_links: bool = False
) -> str:
    detail = f"{gpu.name}, {format_bytes(gpu.memory_free)} free" + (
        f", {gpu.utilization:.0%} busy" if gpu.utilization is not None else ""
    )
    if taken:
        return f"taken ({detail}{'; ' + links if links else ''})"
    if failure:
        return f"{failure} ({detail})"
    if spec.kind == "none":
        return "spec 'none': CPU only"
    if spec.kind == "auto":
        return f"not among the {'best-linked' if by_links else 'best'} {spec.count} ({detail})"
    return f"not named in {spec.text!r}"
