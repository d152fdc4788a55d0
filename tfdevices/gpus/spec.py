"""The GPU spec grammar, one for every entry point (API, CLI, absl flags).

======================  =====================================================
spec                    meaning
======================  =====================================================
``"all"``               every visible GPU that passes the filters (none: CPU)
``"none"``/``"cpu"``    no GPU: run on the CPU
``"auto:N"``            the N best visible GPUs after filters, by ``order``
``"0,2"``, ``0``,       these physical GPUs by NVML index (what ``nvidia-smi``
``[0, 2]``              shows); ``"0-3"`` is ``0,1,2,3``
``"0:1"``               MIG instance 1 of GPU 0
``"GPU-8a3c"``          the GPU whose UUID starts with this prefix
======================  =====================================================

No input means two things: the int ``0`` and the string ``"0"`` both mean GPU 0
(never "no GPU", unlike some libraries); a count is only ever ``"auto:N"``.
Ambiguous spellings are errors: ``""`` (CUDA reads it as "no GPU"), ``"auto"``
(how many?), ``"-1"``, and TensorFlow names like ``"GPU:1"`` (masking renumbers
them; name the physical GPU instead).

Only ASCII digits are digits (``"٣"`` is not GPU 3), and sizes are bounded before
anything is expanded: a spec names at most :data:`MAX_GPUS` GPUs, each index
below :data:`MAX_GPUS`, so ``"0-100000000"`` is an error at once. Naming one GPU
twice is an error here when the spelling is the same (``"0,0"``, ``"0-2,1"``);
:func:`tfdevices.gpus.selection.select` also finds one GPU named in two
spellings (an index and its UUID, two UUID prefixes, a MIG instance and its parent).

>>> parse_spec("auto:2")
DeviceSpec(kind='auto', count=2, keys=())
>>> parse_spec([2, "0"]).keys
('2', '0')
>>> parse_spec("0-2").text
'0,1,2'
"""

from __future__ import annotations

from collections.abc import Sequence

from tfdevices.core.devices import is_logical_name
from tfdevices.core.errors import SpecError
from tfdevices.core.lazy import LazyPattern
from tfdevices.core.record_class import record
from tfdevices.core.units import is_digits, parse_count, short_repr

SPEC_FORMS = (
    "GPUs: 'all', 'none' (or 'cpu'), 'auto:N' (the N best), NVML indices as nvidia-smi shows "
    "them '0,2', a range '0-3', a MIG instance '0:1' (instance 1 of GPU 0), a UUID prefix 'GPU-8a3c'"
)
"""Every form of a GPU spec (``tfdevices.gpus.spec``), as the commands' help says it."""

_HINT = (
    "write 'all', 'none', 'auto:N' (the N best GPUs), or NVML indices as nvidia-smi shows them "
    "('0,2', '0-3', '0:1' for a MIG instance, 'GPU-<uuid prefix>')."
)
MAX_GPUS = 1024
"""The most GPUs a spec may name, and one more than the largest index it may name."""
MAX_SPEC_CHARS = 65536
"""The longest spec read, in characters."""
_MIG = LazyPattern(r"^([0-9]+):([0-9]+)$")
_RANGE = LazyPattern(r"^([0-9]+)-([0-9]+)$")
_UUID = LazyPattern(r"^(GPU|MIG)-[0-9A-Za-z/-]+$")


@record
class DeviceSpec:
    """A parsed GPU spec.

    Attributes:
        kind: ``"all"``, ``"none"``, ``"auto"`` or ``"explicit"``.
        count: N for ``"auto:N"``, else ``None``.
        keys: for ``"explicit"``: GPU keys (``"3"``, ``"0:1"``) or UUID prefixes, in the order given.
    """

    kind: str
    count: int | None = None
    keys: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The canonical spelling: ``"all"``, ``"none"``, ``"auto:2"``, ``"0,2"``."""
        if self.kind == "auto":
            return f"auto:{self.count}"
        return ",".join(self.keys) if self.kind == "explicit" else self.kind


def parse_spec(spec: object, *, what: str = "GPU spec") -> DeviceSpec:
    """Parses a GPU spec (see the module docstring for the grammar).

    Args:
        spec: a string, a non-negative int, or a sequence of ints/strings.
        what: the input's name in error messages (e.g. ``"--gpus"``).

    Returns:
        A :class:`DeviceSpec`.

    Raises:
        SpecError: the spec is malformed or ambiguous.
    """
    if isinstance(spec, bool) or spec is None:
        raise SpecError(f"{what} {spec!r}: expected a string, an int or a list of GPU indices.", hint=_HINT)
    if isinstance(spec, int):
        if not 0 <= spec < MAX_GPUS:
            raise SpecError(
                f"{what} {short_repr(spec)}: {short_repr(str(spec)) if abs(spec) < MAX_GPUS**2 else 'it'} "
                f"{_index_problem(spec)}.",
                hint="write 'none' to use no GPU." if spec == -1 else _HINT,
            )
        return DeviceSpec("explicit", keys=(str(spec),))
    if isinstance(spec, str):
        if len(spec) > MAX_SPEC_CHARS:
            raise SpecError(f"{what} {short_repr(spec)}: longer than {MAX_SPEC_CHARS:,} characters.", hint=_HINT)
        return _parse_text(spec, what)
    if isinstance(spec, Sequence):
        if not spec:
            raise SpecError(
                f"{what} []: an empty list is ambiguous.", hint="write 'none' for no GPU, 'all' for every GPU."
            )
        if len(spec) > MAX_GPUS:
            raise SpecError(
                f"{what} {short_repr(spec)}: {len(spec):,} items; a spec names at most {MAX_GPUS} GPUs.", hint=_HINT
            )
        keys: list[str] = []
        for item in spec:
            if (
                isinstance(item, bool)
                or not isinstance(item, (int, str))
                or (isinstance(item, str) and len(item) > MAX_SPEC_CHARS)
            ):
                raise SpecError(f"{what} {short_repr(spec)}: item {short_repr(item)} is not a GPU index.", hint=_HINT)
            if isinstance(item, int) and not 0 <= item < MAX_GPUS:
                raise SpecError(
                    f"{what} {short_repr(spec)}: item {short_repr(item)} {_index_problem(item)}.", hint=_HINT
                )
            keys += _expand(str(item).strip(), spec, what, len(keys))
        return DeviceSpec("explicit", keys=_unique(keys, spec, what))
    raise SpecError(
        f"{what} {short_repr(spec)}: expected a string, an int or a list, got {type(spec).__name__}.", hint=_HINT
    )


def _index_problem(value: int) -> str:
    if value < 0:
        return "is not a GPU index (indices are >= 0)"
    return f"is not a GPU index (a machine has at most {MAX_GPUS} GPUs)"


def _parse_text(spec: str, what: str) -> DeviceSpec:
    text = spec.strip()
    low = text.lower()
    if not text:
        raise SpecError(
            f"{what} {short_repr(spec)}: an empty spec is ambiguous (CUDA reads it as 'no GPU').",
            hint="write 'none' for no GPU, 'all' for every GPU.",
        )
    if low in ("all", "none", "cpu"):
        return DeviceSpec("none" if low == "cpu" else low)
    if low == "auto":
        raise SpecError(
            f"{what} {short_repr(spec)}: 'auto' needs a count.",
            hint="write 'auto:1' for the best GPU, 'auto:N' for the N best, or 'all'.",
        )
    if low.startswith("auto:"):
        count = parse_count(text[5:].strip(), limit=MAX_GPUS)
        if not count:
            raise SpecError(
                f"{what} {short_repr(spec)}: the count after 'auto:' must be a whole number from 1 to "
                f"{MAX_GPUS} (ASCII digits).",
                hint="write e.g. 'auto:2'; for no GPU write 'none'.",
            )
        return DeviceSpec("auto", count=count)
    keys: list[str] = []
    for token in text.split(","):
        keys += _expand(token.strip(), spec, what, len(keys))
    return DeviceSpec("explicit", keys=_unique(keys, spec, what))


def _index(text: str, spec: object, what: str) -> int:
    value = parse_count(text, limit=MAX_GPUS - 1)
    if value is None:
        raise SpecError(
            f"{what} {short_repr(spec)}: {short_repr(text)} is not a GPU index (a machine has at most "
            f"{MAX_GPUS} GPUs).",
            hint=_HINT,
        )
    return value


def _expand(token: str, spec: object, what: str, named: int) -> list[str]:
    """One item's keys; ``named`` keys came before it (the total is bounded before a range expands)."""
    match = _RANGE.match(token)
    if not match:
        if named >= MAX_GPUS:
            raise SpecError(f"{what} {short_repr(spec)}: names more than {MAX_GPUS} GPUs.", hint=_HINT)
        return [_token(token, spec, what)]
    first, last = _index(match[1], spec, what), _index(match[2], spec, what)
    if first > last:
        raise SpecError(
            f"{what} {short_repr(spec)}: range {short_repr(token)} runs backwards.", hint=f"write '{last}-{first}'."
        )
    if named + last - first + 1 > MAX_GPUS:
        raise SpecError(f"{what} {short_repr(spec)}: names more than {MAX_GPUS} GPUs.", hint=_HINT)
    return [str(i) for i in range(first, last + 1)]


def _token(token: str, spec: object, what: str) -> str:
    if is_digits(token):
        return str(_index(token, spec, what))
    mig = _MIG.match(token)
    if mig:
        return f"{_index(mig[1], spec, what)}:{_index(mig[2], spec, what)}"
    if _UUID.match(token):
        return token
    if is_logical_name(token):
        raise SpecError(
            f"{what} {short_repr(spec)}: {short_repr(token)} is a TensorFlow logical name, which masking renumbers.",
            hint=_logical_hint(token, spec),
        )
    if token.startswith("-") and is_digits(token[1:]):
        raise SpecError(
            f"{what} {short_repr(spec)}: {short_repr(token)} is not a GPU index (indices are >= 0).",
            hint="write 'none' to use no GPU." if token == "-1" else _HINT,
        )
    if not token:
        raise SpecError(f"{what} {short_repr(spec)}: empty item in the list.", hint="remove the stray comma.")
    raise SpecError(
        f"{what} {short_repr(spec)}: {short_repr(token)} is not a GPU index, range, MIG id or UUID (digits are "
        "ASCII 0-9).",
        hint=_HINT,
    )


def _logical_hint(token: str, spec: object) -> str:
    """The fix for a TensorFlow name in a GPU spec, from what was typed: ``'GPU:3'`` -> ``'3'``."""
    kind = _DEVICE_TYPE.match(token.strip())
    if kind is not None and kind[1].lower() == "cpu":
        return "write 'none' to run on the CPU; CPU:N names go to build_strategy/device_scope."
    items = spec if isinstance(spec, (list, tuple)) else str(spec).split(",")
    guess = ",".join(
        _LOGICAL_INDEX.sub(r"\1", str(item).strip()) if is_logical_name(str(item)) else str(item).strip()
        for item in items
    )
    found = _LOGICAL_INDEX.search(token.strip())
    index = found[1] if found is not None else token.strip()
    return (
        f"write {guess!r}, in nvidia-smi's numbers: without a CUDA_VISIBLE_DEVICES mask TensorFlow's "
        f"GPU:{index} is GPU {index} ('tfdevices list' shows both names); TensorFlow names go to "
        "build_strategy/device_scope."
    )


_DEVICE_TYPE = LazyPattern(r"^.*?/?(?:device:)?([A-Za-z_]+):[0-9]+$")
_LOGICAL_INDEX = LazyPattern(r"^.*:([0-9]+)$")


def _unique(keys: list[str], spec: object, what: str) -> tuple[str, ...]:
    if len(set(keys)) == len(keys):
        return tuple(keys)
    seen: set[str] = set()
    dupes = sorted({k for k in keys if k in seen or seen.add(k)})  # type: ignore[func-returns-value]
    raise SpecError(
        f"{what} {short_repr(spec)}: GPU {', '.join(dupes[:8])} named more than once.", hint="name each GPU once."
    )
