"""A ``memory_limit`` as ``configure`` and ``tfdevices launch`` take it, read into bytes per logical device of each
GPU (pure; :func:`normalize_memory_limit`). :mod:`tfdevices.runtime` applies what it reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from tfdevices.core.errors import PYTHON, InputError, Terms
from tfdevices.core.units import parse_memory, short_repr

MIB = 1024 * 1024
#: Logical devices per physical device: more is a mistake, not a plan.
MAX_LOGICAL = 1024

#: Bytes per logical device of each GPU: ``(GPU key, or None for every GPU; sizes)`` pairs; ``()``: no limit.
Limits = tuple[tuple[str | None, tuple[int, ...]], ...]


def normalize_memory_limit(limit: object, split: int | None = None, *, terms: Terms = PYTHON) -> Limits:
    """Reads a ``memory_limit`` into ``(GPU key or None, bytes per logical device)`` pairs (pure).

    Args:
        limit: ``None``; one size (``"4GiB"``, bytes); a list of sizes (one logical device
            each, on every GPU); or a dict by NVML GPU key of sizes or lists.
        split: ``virtual_devices``: one size then means that many logical devices of that size.
        terms: how messages name the settings.

    Returns:
        ``()`` for no limit, else the pairs (key ``None``: every GPU).

    Raises:
        InputError: a size is malformed or below 1 MiB, a list is empty or disagrees with
            ``split``, or a key is not a GPU key.

    >>> normalize_memory_limit("2GiB", 2)
    ((None, (2147483648, 2147483648)),)
    >>> normalize_memory_limit({"1": "1GiB", 0: ["3GiB", "1GiB"]})
    (('0', (3221225472, 1073741824)), ('1', (1073741824,)))
    """
    if limit is None:
        return ()
    if isinstance(limit, Mapping):
        if not limit:
            raise InputError("memory_limit={}: names no GPU.", hint="pass None for no limit, or {'0': '8GiB'}.")
        pairs = []
        for key, value in limit.items():
            name = str(key).strip()
            if isinstance(key, bool) or not (name.replace(":", "", 1).isascii() and name.replace(":", "", 1).isdigit()):
                raise InputError(
                    f"memory_limit: key {short_repr(key)} is not a GPU's NVML key.",
                    hint="key the dict by NVML index, as nvidia-smi shows it: {'0': '8GiB', '1': '4GiB'}.",
                )
            pairs.append(
                (
                    name,
                    _sizes(
                        value,
                        split,
                        terms.name("memory_limit") + (f"[{name!r}]" if terms.style == "python" else f" for GPU {name}"),
                        terms,
                    ),
                )
            )
        if len({k for k, _ in pairs}) != len(pairs):
            raise InputError(f"memory_limit names a GPU twice: {short_repr(list(limit))}.", hint="name each GPU once.")
        return tuple(sorted(pairs, key=lambda kv: [int(p) for p in kv[0].split(":")]))
    return ((None, _sizes(limit, split, terms.name("memory_limit"), terms)),)


def _sizes(value: object, split: int | None, what: str, terms: Terms = PYTHON) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        if not value or len(value) > MAX_LOGICAL:
            raise InputError(
                f"{what}={short_repr(value)}: a list needs 1 to {MAX_LOGICAL} sizes, one per logical device.",
                hint="e.g. ['6GiB', '2GiB'] for two logical devices.",
            )
        if split is not None and len(value) != split:
            raise InputError(
                f"{what} lists {len(value)} sizes but {terms.setting('virtual_devices', split)}.",
                hint=f"leave {terms.name('virtual_devices')} out: the list says how many logical devices.",
            )
        sizes = tuple(parse_memory(v, what=what) for v in value)
    else:
        sizes = (parse_memory(value, what=what),) * (split or 1)  # type: ignore[arg-type]
    if min(sizes) < MIB:
        raise InputError(
            f"{what}={short_repr(value)}: below 1 MiB, TensorFlow's unit for limits.", hint="write e.g. '2GiB'."
        )
    return sizes
