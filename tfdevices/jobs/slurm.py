"""SLURM's formats: node lists, tasks per node, and GPU allocations. Pure.

>>> expand_nodelist("node[01-03],gpu7")
['node01', 'node02', 'node03', 'gpu7']
>>> expand_tasks_per_node("3(x2),2,1")
[3, 3, 2, 1]
>>> parse_gpu_list("gpu:2(IDX:0-1)")
([0, 1], [])
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence

from tfdevices.core.errors import EnvVarError, LaunchError

GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "GPU_DEVICE_ORDINAL")


def join_indices(indices: Sequence[int]) -> str:
    """``[2, 3] -> "2,3"``: GPU indices as SLURM and CUDA_VISIBLE_DEVICES write them."""
    return ",".join(str(i) for i in indices)


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _expand_ranges(body: str, variable: str, whole: str) -> list[str]:
    """``"01-03,7"`` -> ``["01", "02", "03", "7"]``, keeping zero padding."""
    out: list[str] = []
    for part in body.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise LaunchError(f"{variable}={whole!r}: {part!r} is not a number or a range 'a-b'.",
                              hint="SLURM writes node lists like 'node[01-03,07],gpu7'.")
        lo, hi = match.group(1), match.group(2) or match.group(1)
        if int(hi) < int(lo):
            raise LaunchError(f"{variable}={whole!r}: range {part!r} runs backwards.",
                              hint="write the smaller number first, e.g. '01-03'.")
        width = len(lo) if lo.startswith("0") else 0
        out += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
    return out


def expand_nodelist(text: str, *, variable: str = "SLURM_STEP_NODELIST") -> list[str]:
    """Expands a SLURM host list.

    Args:
        text: e.g. ``"node[01-03],gpu7"`` or ``"rack[1-2]-n[1,3]"``.
        variable: the variable's name, for error messages.

    Returns:
        The host names in order.

    Raises:
        LaunchError: unbalanced brackets, an empty name, a backwards range or a repeated host.

    >>> expand_nodelist("node[01-03],gpu7")
    ['node01', 'node02', 'node03', 'gpu7']
    >>> expand_nodelist("r[1-2]n[8,10]")
    ['r1n8', 'r1n10', 'r2n8', 'r2n10']
    """
    hosts: list[str] = []
    for item in _split_top_level(text, variable):
        pieces = re.split(r"(\[[^\[\]]*\])", item)
        if any(c in p for p in pieces if not p.startswith("[") for c in "[]"):
            raise LaunchError(f"{variable}={text!r}: unbalanced brackets in {item!r}.",
                              hint="SLURM writes node lists like 'node[01-03,07],gpu7'.")
        choices = [_expand_ranges(p[1:-1], variable, text) if p.startswith("[") else [p] for p in pieces]
        hosts += ["".join(parts) for parts in itertools.product(*choices)]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        raise LaunchError(f"{variable}={text!r} names {dupes} more than once.", hint="each node appears once.")
    return hosts


def _split_top_level(text: str, variable: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in text.strip():
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise LaunchError(f"{variable}={text!r}: unbalanced brackets.",
                              hint="SLURM writes node lists like 'node[01-03,07],gpu7'.")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    if depth != 0 or not all(i.strip() for i in items):
        raise LaunchError(f"{variable}={text!r}: {'unbalanced brackets' if depth else 'an empty host name'}.",
                          hint="SLURM writes node lists like 'node[01-03,07],gpu7'.")
    return [i.strip() for i in items]


def expand_tasks_per_node(text: str, *, variable: str = "SLURM_STEP_TASKS_PER_NODE") -> list[int]:
    """Expands SLURM's tasks-per-node syntax.

    Args:
        text: e.g. ``"2(x3),1"``.
        variable: the variable's name, for error messages.

    Returns:
        Tasks on each node, in node order.

    Raises:
        LaunchError: the text is malformed or a count is zero.

    >>> expand_tasks_per_node("2(x3),1")
    [2, 2, 2, 1]
    """
    out: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match or int(match.group(1)) == 0 or match.group(2) == "0":
            raise LaunchError(f"{variable}={text!r}: {part!r} is not 'N' or 'N(xM)' with N, M >= 1.",
                              hint="SLURM writes tasks per node like '2(x3),1'.")
        out += [int(match.group(1))] * int(match.group(2) or 1)
    return out


_GRES = re.compile(r"^gpu(?::(?!\d+\()[\w.-]+)?(?::(\d+))?\(IDX:([^)]*)\)$")


def parse_gpu_list(text: str, *, variable: str = "SLURM_STEP_GPUS") -> tuple[list[int], list[str]]:
    """Parses a scheduler's GPU list.

    Accepts plain lists and ranges (``"0,1"``, ``"2-3"``), SLURM's GRES detail
    format (``"gpu:2(IDX:0-1)"``, ``"gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)"``) and
    ``(null)`` entries, which SLURM writes for slots without a GPU (``"0,(null)"``).

    Args:
        text: the variable's value.
        variable: its name, for messages.

    Returns:
        ``(indices, notes)``: NVML indices in the order given, and caveats.

    Raises:
        EnvVarError: an entry is neither an index, a range, ``(null)`` nor a GRES
            entry, a GRES count disagrees with its IDX list, or an index repeats.

    >>> parse_gpu_list("gpu:2(IDX:0-1)")
    ([0, 1], [])
    >>> parse_gpu_list("0,(null)", variable="GPU_DEVICE_ORDINAL")[0]
    [0]
    """
    hint = "expected GPU indices such as '0,1', '2-3' or SLURM's 'gpu:2(IDX:0-1)'."
    if "IDX:" in text:
        indices, notes = _parse_gres(text, variable, hint)
    else:
        indices, notes = [], []
        for part in (p.strip() for p in text.split(",")) if text.strip() else ():
            if part == "(null)":
                notes.append(f"{variable}={text!r} has a '(null)' entry (a slot without a GPU); ignored.")
                continue
            match = _RANGE.match(part)
            if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
                raise EnvVarError(f"{variable}={text!r}: {part!r} is not a GPU index or range.", hint=hint)
            indices += range(int(match.group(1)), int(match.group(2) or match.group(1)) + 1)
    dupes = sorted({i for i in indices if indices.count(i) > 1})
    if dupes:
        raise EnvVarError(f"{variable}={text!r} names GPU(s) {dupes} more than once.", hint=hint)
    return indices, notes


def _parse_gres(text: str, variable: str, hint: str) -> tuple[list[int], list[str]]:
    indices: list[int] = []
    notes: list[str] = []
    for entry in re.findall(r"[^,()]+(?:\([^)]*\))?", text):
        entry = entry.strip()
        if not entry.startswith("gpu"):
            notes.append(f"{variable}: GRES entry {entry!r} is not a GPU; ignored.")
            continue
        match = _GRES.match(entry)
        if not match:
            raise EnvVarError(f"{variable}={text!r}: GRES entry {entry!r} is not 'gpu[:type]:N(IDX:list)'.",
                              hint=hint)
        if match.group(2).strip() == "N/A":
            continue
        found, _ = parse_gpu_list(match.group(2), variable=variable)
        if match.group(1) is not None and int(match.group(1)) != len(found):
            raise EnvVarError(f"{variable}={text!r}: {entry!r} counts {match.group(1)} GPU(s) but lists "
                              f"{len(found)} ({join_indices(tuple(found))}).", hint=hint)
        indices += found
    return indices, notes


def allocated_gpus(env: Mapping[str, str]) -> tuple[tuple[int, ...] | None, str | None, tuple[str, ...]]:
    """The GPUs the scheduler gave: (NVML indices, the variable they came from, notes); ``None`` when unset."""
    for var in GPU_VARIABLES:
        if var in env:
            indices, notes = parse_gpu_list(env[var], variable=var)
            return tuple(indices), var, tuple(notes)
    return None, None, ()
