"""Memory sizes with units.

A size is an ``int`` number of bytes or a string with a unit: ``B``, decimal
``KB``/``MB``/``GB``/``TB`` (powers of 1000) or binary ``KiB``/``MiB``/``GiB``/``TiB``
(powers of 1024). Units are case-insensitive: ``"8gib"`` is 8 GiB. A bare number string such as ``"8"`` is rejected, because it could mean
bytes, MiB (TensorFlow's ``memory_limit``) or GB; write the unit. A Python
``int`` means bytes.

>>> parse_memory("8GiB")
8589934592
>>> parse_memory("1.5 GB")
1500000000
>>> format_bytes(8589934592)
'8.0 GiB'
"""

from __future__ import annotations

import math
import re

from tfdevices.core.errors import MemorySizeError

_UNITS = {
    "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")
_HINT = "write a number and a unit, e.g. '8GiB', '512MiB' or '1.5GB'."


def parse_memory(value: int | str, *, what: str = "memory size") -> int:
    """Returns a memory size in bytes.

    Args:
        value: bytes as an ``int``, or a string with a unit (``"8GiB"``).
        what: the name of the input, used in error messages (e.g. ``"--min_free_memory"``).

    Returns:
        The size in whole bytes (rounded down).

    Raises:
        MemorySizeError: the value is negative, has no unit, or an unknown unit.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise MemorySizeError(
            f"{what} {value!r}: expected bytes as an int or a string with a unit, got {type(value).__name__}.",
            hint=_HINT)
    if isinstance(value, int):
        if value < 0:
            raise MemorySizeError(f"{what} {value!r}: a size cannot be negative.", hint=_HINT)
        return value
    match = _SIZE.match(value)
    if not match:
        if re.fullmatch(r"\s*\d+(\.\d+)?\s*", value):
            raise MemorySizeError(
                f"{what} {value!r}: a bare number is ambiguous (bytes? MiB? GB?).", hint=_HINT)
        raise MemorySizeError(f"{what} {value!r}: not a size.", hint=_HINT)
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise MemorySizeError(
            f"{what} {value!r}: unknown unit {unit!r}; known units are "
            "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB.", hint=_HINT)
    result = float(number) * factor
    if not math.isfinite(result):
        raise MemorySizeError(f"{what} {value!r}: too large.", hint=_HINT)
    return int(result)


def format_bytes(n: int | None) -> str:
    """Formats bytes for people, in binary units: ``format_bytes(1536) -> '1.5 KiB'``."""
    if n is None:
        return "n/a"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
