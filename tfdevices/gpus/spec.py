"""The GPU spec grammar, one for every entry point (API, CLI, absl flags).

==================  =====================================================
spec                meaning
==================  =====================================================
``"all"``           every visible GPU that passes the filters (none: CPU)
``"none"``/``"cpu"``  no GPU: run on the CPU
``"auto:N"``        the N best visible GPUs after filters, by ``order``
``"0,2"``, ``0``,     these physical GPUs by NVML index (what ``nvidia-smi``
``[0, 2]``          shows); ``"0-3"`` is ``0,1,2,3``
``"0:1"``           MIG instance 1 of GPU 0
``"GPU-8a3c"``      the GPU whose UUID starts with this prefix
==================  =====================================================

No input means two things: the int ``0`` and the string ``"0"`` both mean GPU 0
(never "no GPU", unlike some libraries); a count is only ever ``"auto:N"``.
Ambiguous spellings are errors: ``""`` (CUDA reads it as "no GPU"), ``"auto"``
(how many?), ``"-1"``, and TensorFlow names like ``"GPU:1"`` (masking renumbers
them; name the physical GPU instead).

>>> parse_spec("auto:2")
DeviceSpec(kind='auto', count=2, keys=())
>>> parse_spec([2, "0"]).keys
('2', '0')
>>> parse_spec("0-2").text
'0,1,2'
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tfdevices.core.devices import is_logical_name
from tfdevices.core.errors import SpecError

_HINT = ("write 'all', 'none', 'auto:N' (the N best GPUs), or NVML indices as nvidia-smi shows them "
         "('0,2', '0-3', '0:1' for a MIG instance, 'GPU-<uuid prefix>').")
_INDEX = re.compile(r"^\d+$")
_MIG = re.compile(r"^\d+:\d+$")
_RANGE = re.compile(r"^(\d+)-(\d+)$")
_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+$")


@dataclasses.dataclass(frozen=True)
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
        return DeviceSpec("explicit", keys=(_token(str(spec), spec, what),))
    if isinstance(spec, str):
        return _parse_text(spec, what)
    if isinstance(spec, Sequence):
        if not spec:
            raise SpecError(f"{what} []: an empty list is ambiguous.", hint="write 'none' for no GPU, 'all' for every GPU.")
        keys: list[str] = []
        for item in spec:
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                raise SpecError(f"{what} {spec!r}: item {item!r} is not a GPU index.", hint=_HINT)
            keys += _expand(str(item).strip(), spec, what)
        return DeviceSpec("explicit", keys=_unique(keys, spec, what))
    raise SpecError(f"{what} {spec!r}: expected a string, an int or a list, got {type(spec).__name__}.", hint=_HINT)


def _parse_text(spec: str, what: str) -> DeviceSpec:
    text = spec.strip()
    low = text.lower()
    if not text:
        raise SpecError(f"{what} {spec!r}: an empty spec is ambiguous (CUDA reads it as 'no GPU').",
                        hint="write 'none' for no GPU, 'all' for every GPU.")
    if low in ("all", "none", "cpu"):
        return DeviceSpec("none" if low == "cpu" else low)
    if low == "auto":
        raise SpecError(f"{what} {spec!r}: 'auto' needs a count.",
                        hint="write 'auto:1' for the best GPU, 'auto:N' for the N best, or 'all'.")
    if low.startswith("auto:"):
        count = text[5:].strip()
        if not _INDEX.match(count) or int(count) == 0:
            raise SpecError(f"{what} {spec!r}: the count after 'auto:' must be a whole number >= 1.",
                            hint="write e.g. 'auto:2'; for no GPU write 'none'.")
        return DeviceSpec("auto", count=int(count))
    keys: list[str] = []
    for token in text.split(","):
        keys += _expand(token.strip(), spec, what)
    return DeviceSpec("explicit", keys=_unique(keys, spec, what))


def _expand(token: str, spec: object, what: str) -> list[str]:
    match = _RANGE.match(token)
    if match:
        first, last = int(match[1]), int(match[2])
        if first > last:
            raise SpecError(f"{what} {spec!r}: range {token!r} runs backwards.", hint=f"write '{last}-{first}'.")
        return [str(i) for i in range(first, last + 1)]
    return [_token(token, spec, what)]


def _token(token: str, spec: object, what: str) -> str:
    if _INDEX.match(token):
        return str(int(token))
    if _MIG.match(token):
        gpu, mig = token.split(":")
        return f"{int(gpu)}:{int(mig)}"
    if _UUID.match(token):
        return token
    if is_logical_name(token):
        raise SpecError(
            f"{what} {spec!r}: {token!r} is a TensorFlow logical name, which masking renumbers.",
            hint="name physical GPUs by their nvidia-smi index ('1'); TensorFlow names go to build_strategy/device_scope.")
    if token.lstrip("-").isdigit():
        raise SpecError(f"{what} {spec!r}: {token!r} is not a GPU index (indices are >= 0).",
                        hint="write 'none' to use no GPU." if token == "-1" else _HINT)
    if not token:
        raise SpecError(f"{what} {spec!r}: empty item in the list.", hint="remove the stray comma.")
    raise SpecError(f"{what} {spec!r}: {token!r} is not a GPU index, range, MIG id or UUID.", hint=_HINT)


def _unique(keys: list[str], spec: object, what: str) -> tuple[str, ...]:
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise SpecError(f"{what} {spec!r}: GPU {', '.join(dupes)} named more than once.",
                        hint="name each GPU once.")
    return tuple(keys)
