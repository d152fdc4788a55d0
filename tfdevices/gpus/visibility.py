"""CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER: which GPUs CUDA sees, and their numbers.

Pure functions: they read an environment mapping and a list of :class:`GpuInfo`
and return new data. The rules they follow:

* CUDA numbers devices in *enumeration order*: ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
  gives ``nvidia-smi``'s order; unset (or ``FASTEST_FIRST``) puts the fastest
  first, which tfdevices estimates as compute capability descending, then PCI
  bus id. A GPU in MIG mode is enumerated as its MIG instances.
* ``CUDA_VISIBLE_DEVICES`` lists devices by index *in that enumeration order*,
  by ``GPU-<uuid prefix>``, by ``MIG-<uuid>`` or by the old
  ``MIG-GPU-<uuid>/<gi>/<ci>``; unset shows all, ``""`` and ``"-1"`` hide all.
  The visible devices get CUDA ordinals 0, 1, ... in the order listed, and
  TensorFlow names them ``/GPU:0``, ``/GPU:1``, ... in that same order.
* CUDA silently stops at the first token it cannot use; tfdevices refuses such
  a mask instead (:class:`~tfdevices.core.errors.EnvVarError`).
* No message quotes either variable's value (a user's variables are not for printing): a message says
  which entry of the mask is wrong, by its position, and what this machine has.

>>> from tfdevices.gpus.gpuinfo import GpuInfo
>>> gpus = [GpuInfo(index=i, name="A100", uuid=f"GPU-{i}aaa", pci_bus_id=f"0000:0{i}:00.0")
...         for i in range(3)]
>>> vis = resolve(gpus, {"CUDA_VISIBLE_DEVICES": "2,0"})
>>> [(g.index, g.cuda_ordinal, g.tf_name) for g in vis.gpus]
[(0, 1, '/GPU:1'), (1, None, None), (2, 0, '/GPU:0')]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from tfdevices.core.errors import EnvVarError
from tfdevices.core.lazy import LazyPattern
from tfdevices.core.record_class import record, replace
from tfdevices.core.units import is_digits, parse_count
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
HIDE_ALL = "-1"  # the mask that hides every GPU
ORDER_ENV = "CUDA_DEVICE_ORDER"
ORDERS = ("FASTEST_FIRST", "PCI_BUS_ID")
NOTE_PREFIX = "CUDA order"  # every note this module writes starts so; recomputing replaces them

MAX_TOKENS = 1024
"""The most entries ``CUDA_VISIBLE_DEVICES`` may list (a machine has fewer devices)."""
_INDEX_LIMIT = 1 << 20
_GPU_UUID = LazyPattern(r"^GPU-[0-9A-Fa-f][0-9A-Fa-f-]*$")
_MIG_UUID = LazyPattern(r"^MIG-(?!GPU-)[0-9A-Fa-f][0-9A-Fa-f-]*$")
_MIG_LEGACY = LazyPattern(r"^MIG-(GPU-[0-9A-Fa-f][0-9A-Fa-f-]*)/([0-9]{1,6})/([0-9]{1,6})$")
_MASK_HINT = (
    "write indices ('0,2'), GPU-<uuid> or MIG-<uuid> ids separated by commas, "
    "'' or '-1' to hide every GPU, or unset it to show all"
)


@record
class MaskToken:
    """One entry of ``CUDA_VISIBLE_DEVICES``.

    Attributes:
        kind: ``"index"``, ``"gpu"`` (``GPU-<uuid prefix>``), ``"mig"``
            (``MIG-<uuid prefix>``) or ``"mig-legacy"`` (``MIG-GPU-<uuid>/<gi>/<ci>``).
        text: the token as written, without surrounding spaces.
        position: which entry of the mask it is, from 1 (how messages name it).
        index: the CUDA enumeration index (``"index"`` only).
        uuid: the uuid or uuid prefix (``"GPU-..."``/``"MIG-..."``; the parent GPU's for ``"mig-legacy"``).
        gpu_instance: the GPU instance id (``"mig-legacy"`` only).
        compute_instance: the compute instance id (``"mig-legacy"`` only).
    """

    kind: str
    text: str
    position: int = 1
    index: int | None = None
    uuid: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None


@record
class MigIds:
    """What the old ``MIG-GPU-<uuid>/<gi>/<ci>`` form needs to name a MIG instance."""

    parent_uuid: str
    gpu_instance: int | None
    compute_instance: int | None


@record
class Visibility:
    """The result of :func:`resolve`.

    Attributes:
        gpus: the input GPUs, same order, with ``cuda_ordinal`` and ``tf_name`` set.
        order: ``"FASTEST_FIRST"`` or ``"PCI_BUS_ID"``.
        enumeration: keys of the devices CUDA enumerates, in its order, before masking.
        notes: caveats (an estimated order, a MIG GPU without instances ...).
        hidden_reason: why no GPU is visible although some exist, else ``None``.
    """

    gpus: tuple[GpuInfo, ...]
    order: str
    enumeration: tuple[str, ...]
    notes: tuple[str, ...] = ()
    hidden_reason: str | None = None


def parse_device_order(value: str | None) -> str:
    """Validates ``CUDA_DEVICE_ORDER``.

    Args:
        value: the variable's value, ``None`` when unset.

    Returns:
        ``"FASTEST_FIRST"`` (CUDA's default, also for unset or ``""``) or ``"PCI_BUS_ID"``.

    Raises:
        EnvVarError: any other value (CUDA would silently use FASTEST_FIRST).

    >>> parse_device_order(None), parse_device_order("PCI_BUS_ID")
    ('FASTEST_FIRST', 'PCI_BUS_ID')
    """
    if value is None or value.strip() == "":
        return "FASTEST_FIRST"
    if value.strip() in ORDERS:
        return value.strip()
    raise EnvVarError(
        f"{ORDER_ENV} is set to something other than a CUDA device order; CUDA knows {', '.join(ORDERS)} "
        "(and would silently use FASTEST_FIRST).",
        hint=f"export {ORDER_ENV}=PCI_BUS_ID so CUDA numbers GPUs as nvidia-smi does.",
    )


def parse_visible_devices(value: str | None) -> tuple[MaskToken, ...] | None:
    """Checks the syntax of ``CUDA_VISIBLE_DEVICES``.

    Args:
        value: the variable's value, ``None`` when unset.

    Returns:
        ``None`` when unset (every GPU visible), ``()`` for ``""``/``"-1"`` (none
        visible), else the tokens in the order written.

    Raises:
        EnvVarError: an empty entry, a negative number other than a lone ``-1``,
            a token that is neither an index nor a ``GPU-``/``MIG-`` id, or a
            token written twice.

    >>> [t.kind for t in parse_visible_devices(" 1, GPU-8f2a ,MIG-GPU-8f2a/1/0")]
    ['index', 'gpu', 'mig-legacy']
    >>> parse_visible_devices("-1")
    ()
    """
    if value is None:
        return None
    if value.strip() in ("", "-1"):
        return ()
    if value.count(",") >= MAX_TOKENS:
        raise EnvVarError(
            f"{VISIBLE_ENV} lists more than {MAX_TOKENS} entries; a machine has at most {MAX_TOKENS} devices.",
            hint=_MASK_HINT + ".",
        )
    tokens: list[MaskToken] = []
    seen: dict[str, int] = {}
    for position, raw in enumerate(value.split(","), 1):
        token = _parse_token(raw.strip(), position)
        if token.text in seen:
            raise EnvVarError(f"{entry(position)} repeats entry {seen[token.text]}.", hint="list each GPU once.")
        seen[token.text] = position
        tokens.append(token)
    return tuple(tokens)


def entry(position: int) -> str:
    """How a message names one entry of the mask, never its text.

    >>> entry(2)
    'entry 2 of CUDA_VISIBLE_DEVICES'
    """
    return f"entry {position} of {VISIBLE_ENV}"


def _parse_token(text: str, position: int) -> MaskToken:
    where = entry(position)
    if text == "":
        raise EnvVarError(f"{where} is empty (CUDA stops there and hides the rest).", hint="remove the stray comma.")
    if is_digits(text):
        index = parse_count(text, limit=_INDEX_LIMIT)
        if index is None:
            raise EnvVarError(f"{where} is a number too large for a device index.", hint=_MASK_HINT + ".")
        return MaskToken("index", text, position, index=index)
    if text.startswith("-") and is_digits(text[1:]):
        raise EnvVarError(
            f"{where} is a negative number; only a lone '-1' means 'no GPU' (CUDA stops at it and hides what follows).",
            hint=_MASK_HINT + ".",
        )
    if _GPU_UUID.match(text):
        return MaskToken("gpu", text, position, uuid=text)
    if _MIG_UUID.match(text):
        return MaskToken("mig", text, position, uuid=text)
    legacy = _MIG_LEGACY.match(text)
    if legacy:
        return MaskToken(
            "mig-legacy", text, position, uuid=legacy[1], gpu_instance=int(legacy[2]), compute_instance=int(legacy[3])
        )
    raise EnvVarError(
        f"{where} is neither a GPU index nor a GPU-/MIG- id (CUDA reads only ASCII digits 0-9).",
        hint=_MASK_HINT + ".",
    )


def cuda_enumeration(gpus: Sequence[GpuInfo], order: str) -> tuple[tuple[GpuInfo, ...], bool]:
    """The devices CUDA enumerates, in its order, before masking.

    A GPU that has MIG instances in ``gpus`` is replaced by them (in MIG index order).

    Args:
        gpus: physical GPUs and MIG instances (``mig_index`` set).
        order: ``"FASTEST_FIRST"`` or ``"PCI_BUS_ID"``.

    Returns:
        ``(devices, estimated)``; ``estimated`` is true when the order is a guess
        (FASTEST_FIRST over GPUs that differ in name or compute capability).

    >>> from tfdevices.gpus.gpuinfo import GpuInfo
    >>> a = GpuInfo(index=0, name="T4", uuid="GPU-a", pci_bus_id="0000:01:00.0", compute_capability=(7, 5))
    >>> b = GpuInfo(index=1, name="A100", uuid="GPU-b", pci_bus_id="0000:02:00.0", compute_capability=(8, 0))
    >>> [g.name for g in cuda_enumeration([a, b], "FASTEST_FIRST")[0]]
    ['A100', 'T4']
    """
    parents_with_mig = {g.index for g in gpus if g.mig_index is not None}
    devices = [g for g in gpus if g.mig_index is not None or g.index not in parents_with_mig]
    kinds = {(g.name, g.compute_capability) for g in gpus if g.mig_index is None}
    estimated = order == "FASTEST_FIRST" and len(kinds) > 1

    def key(g: GpuInfo) -> tuple[object, ...]:
        place = (g.pci_bus_id.lower(), g.index, g.mig_index if g.mig_index is not None else -1)
        if order == "FASTEST_FIRST":
            cc = g.compute_capability or (0, 0)
            return (-cc[0], -cc[1], *place)
        return place

    return tuple(sorted(devices, key=key)), estimated


def resolve(
    gpus: Sequence[GpuInfo],
    env: Mapping[str, str],
    *,
    mig_ids: Mapping[str, MigIds] | None = None,
    source: str = "NVML",
) -> Visibility:
    """Gives each GPU its CUDA ordinal and TensorFlow name under ``env``.

    Args:
        gpus: every GPU and MIG instance of the machine.
        env: reads ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``.
        mig_ids: per MIG key (``"0:1"``), its parent uuid and instance ids, needed
            for ``GPU-<uuid>`` of a MIG-mode GPU and the old ``MIG-GPU-...`` form.
        source: where ``gpus`` came from, for error messages.

    Returns:
        A :class:`Visibility`. With no GPU, only the syntax is checked.

    Raises:
        EnvVarError: either variable is malformed, or the mask names a GPU that
            does not exist, an ambiguous uuid prefix, or one GPU twice.

    >>> from tfdevices.gpus.gpuinfo import GpuInfo
    >>> gpus = [GpuInfo(index=i, name="A100", uuid=f"GPU-{i}aaa") for i in range(2)]
    >>> resolve(gpus, {"CUDA_VISIBLE_DEVICES": "-1"}).hidden_reason
    'all 2 GPUs are hidden: CUDA_VISIBLE_DEVICES is set to hide every GPU'
    """
    order = parse_device_order(env.get(ORDER_ENV))
    mask_text = env.get(VISIBLE_ENV)
    tokens = parse_visible_devices(mask_text)
    enumeration, estimated = cuda_enumeration(gpus, order)
    notes = _notes(gpus, order, estimated, env.get(ORDER_ENV))
    if tokens is None:
        chosen = list(enumeration)
    else:
        chosen = [] if not gpus else _match(tokens, enumeration, gpus, mig_ids or {}, source)
    ordinal = {g.key: n for n, g in enumerate(chosen)}
    out = tuple(
        replace(g, cuda_ordinal=ordinal.get(g.key), tf_name=None if g.key not in ordinal else f"/GPU:{ordinal[g.key]}")
        for g in gpus
    )
    hidden = None
    if enumeration and not chosen:
        count = len(enumeration)
        what = "the GPU is" if count == 1 else f"all {count} GPUs are"
        hidden = f"{what} hidden: {VISIBLE_ENV} is set to hide every GPU"
    return Visibility(
        gpus=out, order=order, enumeration=tuple(g.key for g in enumeration), notes=notes, hidden_reason=hidden
    )


def _notes(gpus: Sequence[GpuInfo], order: str, estimated: bool, raw_order: str | None) -> tuple[str, ...]:
    notes = []
    if estimated:
        setting = "unset" if raw_order is None else "blank" if not raw_order.strip() else "set to FASTEST_FIRST"
        notes.append(
            f"{NOTE_PREFIX} estimated: {ORDER_ENV} is {setting} (FASTEST_FIRST) and the GPUs differ, "
            "so CUDA numbers them fastest first (guessed here by compute capability, then PCI bus id); "
            f"configure() sets {ORDER_ENV}=PCI_BUS_ID so the numbers match nvidia-smi."
        )
    parents = {g.index for g in gpus if g.mig_index is not None}
    for g in gpus:
        if g.mig_index is None and g.index in parents:
            notes.append(f"{NOTE_PREFIX}: GPU {g.index} is in MIG mode; CUDA sees its MIG instances, not the GPU.")
    return tuple(notes)


def _label(g: GpuInfo) -> str:
    return f"{g.key} ({g.uuid[:12]})" if g.uuid else g.key


def _existing(enumeration: Sequence[GpuInfo], source: str) -> str:
    """``this machine has GPUs 0 (GPU-8f2a...), 1 (GPU-11c0...) (NVML)``, plus CUDA's order when it differs."""
    if not enumeration:
        return f"this machine has no GPU CUDA can use ({source})"
    by_key = sorted(enumeration, key=lambda g: (g.index, g.mig_index if g.mig_index is not None else -1))
    text = f"this machine has GPUs {_first(_label(g) for g in by_key)} ({source})"
    if [g.key for g in by_key] != [g.key for g in enumeration]:
        text += f"; CUDA indices 0..{len(enumeration) - 1} are, in order, {_first(g.key for g in enumeration)}"
    return text


def _first(items: Iterable[str], shown_items: int = 16) -> str:
    """``"a, b, c"``, the first ``shown_items`` of them and how many more, so a message stays one short line."""
    items = list(items)
    more = f" and {len(items) - shown_items} more" if len(items) > shown_items else ""
    return ", ".join(items[:shown_items]) + more


def _match(
    tokens: Sequence[MaskToken],
    enumeration: Sequence[GpuInfo],
    gpus: Sequence[GpuInfo],
    mig_ids: Mapping[str, MigIds],
    source: str,
) -> list[GpuInfo]:
    exists = _existing(enumeration, source)
    hint = "name GPUs that exist, by CUDA index ('0,2'), GPU-<uuid> or MIG-<uuid>"
    chosen: list[GpuInfo] = []
    keys: dict[str, int] = {}
    for token in tokens:
        device = _match_one(token, enumeration, gpus, mig_ids, exists, hint)
        if device.key in keys:
            raise EnvVarError(
                f"{entry(token.position)} names GPU {device.key} again (entry {keys[device.key]} named it); {exists}.",
                hint="list each GPU once.",
            )
        keys[device.key] = token.position
        chosen.append(device)
    return chosen


def _match_one(
    token: MaskToken,
    enumeration: Sequence[GpuInfo],
    gpus: Sequence[GpuInfo],
    mig_ids: Mapping[str, MigIds],
    exists: str,
    hint: str,
) -> GpuInfo:
    where = entry(token.position)
    if token.kind == "index":
        if token.index is not None and token.index < len(enumeration):
            return enumeration[token.index]
        count = len(enumeration)
        has = f"CUDA's indices here run 0 to {count - 1}" if count else "CUDA sees no GPU here"
        raise EnvVarError(
            f"{where} is past the last GPU ({has}); {exists}.",
            hint=f"{hint}; indices count in CUDA's order (set CUDA_DEVICE_ORDER=PCI_BUS_ID to match nvidia-smi).",
        )
    if token.kind == "mig-legacy":
        found = [
            g
            for g in enumeration
            if g.key in mig_ids
            and mig_ids[g.key].parent_uuid.lower() == (token.uuid or "").lower()
            and (mig_ids[g.key].gpu_instance, mig_ids[g.key].compute_instance)
            == (token.gpu_instance, token.compute_instance)
        ]
        if len(found) == 1:
            return found[0]
        extra = "" if mig_ids else " (a saved listing does not keep MIG instance ids)"
        raise EnvVarError(
            f"{where} names no MIG instance{extra}; {exists}.",
            hint="name MIG instances by their MIG-<uuid> as nvidia-smi -L shows them.",
        )
    prefix = (token.uuid or "").lower()
    pool = [g for g in enumeration if (g.mig_index is None) == (token.kind == "gpu")]
    found = [g for g in pool if g.uuid.lower().startswith(prefix)]
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise EnvVarError(
            f"{where} is the start of {len(found)} GPUs' uuids ({', '.join(_label(g) for g in found)}); {exists}.",
            hint="write more of the uuid so it names one GPU.",
        )
    mig_parent = [
        g
        for g in gpus
        if g.mig_index is None and g.uuid.lower().startswith(prefix) and g.key not in {d.key for d in enumeration}
    ]
    if token.kind == "gpu" and mig_parent:
        raise EnvVarError(
            f"{where} is GPU {mig_parent[0].key}, which is in MIG mode; CUDA sees only its MIG instances; {exists}.",
            hint="name its MIG instances by their MIG-<uuid>.",
        )
    raise EnvVarError(f"{where} names no GPU; {exists}.", hint=f"{hint} (nvidia-smi -L lists them).")


def apply(inventory: Inventory, env: Mapping[str, str], *, mig_ids: Mapping[str, MigIds] | None = None) -> Inventory:
    """Recomputes an inventory's CUDA/TF names for the masking in ``env``.

    The inventory's earlier visibility notes and "hidden" reason are replaced;
    its other notes are kept.

    Args:
        inventory: e.g. a saved listing (``Inventory.load``).
        env: reads ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``.
        mig_ids: see :func:`resolve`.

    Returns:
        A new :class:`Inventory`.

    Raises:
        EnvVarError: see :func:`resolve`.

    >>> from tfdevices.gpus.inventory import Inventory
    >>> from tfdevices.gpus.gpuinfo import GpuInfo
    >>> inv = Inventory(gpus=(GpuInfo(index=0, name="A100", uuid="GPU-0aaa"),), source="nvml")
    >>> apply(inv, {"CUDA_VISIBLE_DEVICES": ""}).reason
    'the GPU is hidden: CUDA_VISIBLE_DEVICES is set to hide every GPU'
    """
    where = "a saved listing" if inventory.loaded_from is None else f"saved listing {inventory.file_words}"
    label = "NVML" if inventory.loaded_from is None and inventory.source == "nvml" else where
    vis = resolve(inventory.gpus, env, mig_ids=mig_ids, source=label)
    kept = tuple(n for n in inventory.notes if not n.startswith(NOTE_PREFIX))
    reason = inventory.reason
    if inventory.gpus:
        reason = vis.hidden_reason
    return replace(
        inventory,
        gpus=vis.gpus,
        notes=kept + vis.notes,
        reason=reason,
        cuda_visible_devices=env.get(VISIBLE_ENV),
        cuda_device_order=env.get(ORDER_ENV),
    )


def mask(gpus: Sequence[GpuInfo | int]) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that shows exactly ``gpus``, in that order.

    The one place tfdevices builds a mask: selection, rank mapping, reservation and
    the launcher all call it. A GPU is its NVML index (``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    makes CUDA number GPUs as NVML does); a MIG instance is its UUID.

    >>> mask([2, 0]), mask([])
    ('2,0', '-1')
    """
    if not gpus:
        return HIDE_ALL
    return ",".join(str(g) if isinstance(g, int) else g.uuid if g.mig_index is not None else str(g.index) for g in gpus)


def mask_env(gpus: Sequence[GpuInfo | int]) -> dict[str, str]:
    """The environment that shows exactly ``gpus`` to a process not yet using CUDA.

    >>> mask_env([1])
    {'CUDA_VISIBLE_DEVICES': '1', 'CUDA_DEVICE_ORDER': 'PCI_BUS_ID'}
    """
    return {VISIBLE_ENV: mask(gpus), ORDER_ENV: "PCI_BUS_ID"}
