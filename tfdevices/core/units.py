"""Memory sizes with units.

A size is an ``int`` number of bytes or a string with a unit: ``B``, decimal
``KB``/``MB``/``GB``/``TB`` (powers of 1000) or binary ``KiB``/``MiB``/``GiB``/``TiB``
(powers of 1024). Units are case-insensitive: ``"8gib"`` is 8 GiB. A bare
number string such as ``"8"`` is rejected, because it could mean bytes, MiB
(TensorFlow's ``memory_limit``) or GB; write the unit. A Python ``int`` means
bytes.

Two rules every parser of tfdevices follows live here too: only the ASCII
digits ``0``-``9`` are digits (:func:`is_digits`; ``"٣"`` is not 3, because
CUDA, SLURM and TensorFlow would not read it as 3), and an input echoed in a
message is shortened (:func:`short_repr`), so a 100 KB variable gives a one-line error. An
environment variable that turns something on or off reads through :func:`env_switch`.

>>> parse_memory("8GiB")
8589934592
>>> parse_memory("1.5 GB")
1500000000
>>> format_bytes(8589934592)
'8.0 GiB'
>>> is_digits("12"), is_digits("\u0663"), is_digits("")
(True, False, False)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from tfdevices.core.errors import EnvVarError, MemorySizeError
from tfdevices.core.lazy import LazyPattern

_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = LazyPattern(r"^\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([a-zA-Z]+)\s*$")
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
            hint=_HINT,
        )
    if isinstance(value, int):
        if value < 0:
            raise MemorySizeError(f"{what} {value!r}: a size cannot be negative.", hint=_HINT)
        return value
    match = _SIZE.match(value)
    if not match:
        if re.fullmatch(r"\s*[0-9]+(\.[0-9]+)?\s*", value):
            raise MemorySizeError(
                f"{what} {short_repr(value)}: a bare number is ambiguous (bytes? MiB? GB?).", hint=_HINT
            )
        raise MemorySizeError(
            f"{what} {short_repr(value)}: not a size (a number of at most 30 ASCII digits and a unit).", hint=_HINT
        )
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise MemorySizeError(
            f"{what} {short_repr(value)}: unknown unit {unit!r}; known units are B, KB, MB, GB, TB, KiB, MiB, "
            "GiB, TiB.",
            hint=_HINT,
        )
    result = float(number) * factor
    if not math.isfinite(result):
        raise MemorySizeError(f"{what} {short_repr(value)}: too large.", hint=_HINT)
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


def is_digits(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits ``0``-``9`` (``str.isdigit`` also takes ``"٣"``, ``"²"``).

    >>> is_digits("007"), is_digits("-1"), is_digits("\u00b2")
    (True, False, False)
    """
    return text.isascii() and text.isdigit()


def parse_count(text: str, *, limit: int) -> int | None:
    """``text`` as a whole number in ``0..limit`` (ASCII digits only), else ``None``.

    The digits are counted before ``int()`` runs, so a 100,000-digit string costs nothing.

    >>> parse_count("0012", limit=100), parse_count("101", limit=100), parse_count("\u0663", limit=9)
    (12, None, None)
    """
    digits = text.lstrip("0") or "0"
    if not is_digits(text) or len(digits) > len(str(limit)):
        return None
    value = int(digits)
    return value if value <= limit else None


SHORT_REPR_CHARS = 80


def parse_seconds(text: str, *, most: float) -> float | None:
    """A number of seconds in (0, ``most``] written in ASCII; ``None`` when it is not one (pure).

    >>> parse_seconds(" 30 ", most=60), parse_seconds("0", most=60), parse_seconds("\u0663", most=60)
    (30.0, None, None)
    """
    if len(text) > 32 or not text.strip().isascii():
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if 0 < value <= most else None


def env_switch(env: Mapping[str, str], name: str, *, default: bool, hint: str) -> bool:
    """The variable ``name`` of ``env`` as a switch: ``1``/``on`` or ``0``/``off`` (any case, spaces
    around); unset or blank: ``default``.

    Raises:
        EnvVarError: any other value (the message names the variable, never its value, then ``hint``).

    >>> env_switch({"X": " ON "}, "X", default=False, hint=""), env_switch({}, "X", default=True, hint="")
    (True, True)
    """
    text = env.get(name)
    if text is None or not text.strip():
        return default
    value = text.strip().lower()
    if value not in ("0", "1", "on", "off"):
        raise EnvVarError(f"{name} is set to something other than 1, on, 0 or off.", hint=hint)
    return value in ("1", "on")


def short_repr(value: object, limit: int = SHORT_REPR_CHARS) -> str:
    """``repr(value)``, shortened in the middle past ``limit`` characters, for messages.

    >>> short_repr("0-2")
    "'0-2'"
    >>> short_repr("n[" + "1," * 50000 + "2]")
    "'n[1,1,1,1,1,1,1,1,1,1,1,1,1,1...(100004 chars)...,1,1,1,1,1,1,1,1,1,1,1,1,1,2]'"
    """
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit conversion limit
        if isinstance(value, int):
            return f"<int of {value.bit_length()} bits>"
        return f"<a {type(value).__name__} too long to show>"
    if len(text) <= limit:
        return text
    size = f"({len(value)} chars)" if isinstance(value, (str, bytes)) else f"({len(text)} chars shown as repr)"
    keep = max(8, (limit - len(size) - 6) // 2)
    return f"{text[:keep]}...{size}...{text[-keep:]}"
