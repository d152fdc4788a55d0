"""SLURM's formats: node lists, tasks per node, and GPU allocations. Pure.

No message quotes the value read (a variable's value is not for printing): it names the variable, the entry
by its position, and what is wrong. Every list is counted before it is expanded, so a hostile or mistyped value
(``"n[0-99999999]"``, ``"1(x100000000)"``, ``"0-4000000000"``) is an error at
once, never a MemoryError or a minute of expansion; duplicates are found with
sets, so a 16,000-host list expands in linear time. Only ASCII digits are
digits, as in SLURM.

>>> expand_nodelist("node[01-03],gpu7")
['node01', 'node02', 'node03', 'gpu7']
>>> expand_tasks_per_node("3(x2),2,1")
[3, 3, 2, 1]
>>> parse_gpu_list("gpu:2(IDX:0-1)")
GpuList(indices=[0, 1], notes=[])
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from tfdevices.core.errors import EnvVarError, LaunchError

GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "GPU_DEVICE_ORDINAL")
MAX_HOSTS = 100_000
"""The most hosts a node list may expand to (the largest machines have about 10,000 nodes)."""
MAX_TASKS = 10_000_000
"""The most tasks a tasks-per-node value may add up to."""
MAX_GPUS = 1024
"""The most GPUs (and the largest GPU index + 1) one node's GPU list may name."""
MAX_TEXT = 1 << 20
"""The longest node list read, in characters (the kernel caps one variable at 128 KiB)."""

_NUMBER = r"[0-9]{1,9}"
_RANGE = re.compile(rf"^({_NUMBER})(?:-({_NUMBER}))?$")
_TASKS = re.compile(rf"\s*({_NUMBER})(?:\(x({_NUMBER})\))?\s*")
_NODES_HINT = "SLURM writes node lists like 'node[01-03,07],gpu7'."


def join_indices(indices: Sequence[int]) -> str:
    """``[2, 3] -> "2,3"``: GPU indices as SLURM and CUDA_VISIBLE_DEVICES write them."""
    return ",".join(str(i) for i in indices)


def _ranges(body: str, variable: str) -> list[tuple[str, str]]:
    """``"01-03,7"`` -> ``[("01", "03"), ("7", "7")]``, checked (ASCII digits, ascending), not expanded."""
    out: list[tuple[str, str]] = []
    for n, part in enumerate(body.split(","), 1):
        match = _RANGE.match(part.strip())
        if not match:
            raise LaunchError(
                f"{variable}: entry {n} of a bracket is not a number or a range 'a-b' (ASCII digits, at most 9 each).",
                hint=_NODES_HINT,
            )
        lo, hi = match.group(1), match.group(2) or match.group(1)
        if int(hi) < int(lo):
            raise LaunchError(
                f"{variable}: range {n} of a bracket runs backwards.",
                hint="write the smaller number first, e.g. '01-03'.",
            )
        out.append((lo, hi))
    return out


def _expand(ranges: list[tuple[str, str]]) -> list[str]:
    out: list[str] = []
    for lo, hi in ranges:
        width = len(lo) if lo.startswith("0") else 0
        out += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
    return out


def _count(ranges: list[tuple[str, str]]) -> int:
    return sum(int(hi) - int(lo) + 1 for lo, hi in ranges)


def expand_nodelist(text: str, *, variable: str = "SLURM_STEP_NODELIST", limit: int = MAX_HOSTS) -> list[str]:
    """Expands a SLURM host list.

    Args:
        text: e.g. ``"node[01-03],gpu7"`` or ``"rack[1-2]-n[1,3]"``.
        variable: the variable's name, for error messages.
        limit: the most hosts it may expand to; counted before expanding.

    Returns:
        The host names in order.

    Raises:
        LaunchError: unbalanced brackets, an empty name, a backwards range, a
            number that is not ASCII digits, more than ``limit`` hosts, or a repeated host.

    >>> expand_nodelist("node[01-03],gpu7")
    ['node01', 'node02', 'node03', 'gpu7']
    >>> expand_nodelist("r[1-2]n[8,10]")
    ['r1n8', 'r1n10', 'r2n8', 'r2n10']
    """
    if len(text) > MAX_TEXT:
        raise LaunchError(
            f"{variable} is longer than {MAX_TEXT:,} characters.",
            hint="check the value; SLURM compresses node lists like 'node[0001-9999]'.",
        )
    items = _items(text, variable)
    total = 0
    for pieces in items:
        total += math.prod(_count(_ranges(p[1:-1], variable)) for p in pieces[1::2]) if len(pieces) > 1 else 1
        if total > limit:
            raise LaunchError(
                f"{variable} names more than {limit:,} hosts.",
                hint=f"check the value; tfdevices expands at most {limit:,} hosts.",
            )
    hosts: list[str] = []
    for pieces in items:
        if len(pieces) == 1:
            hosts.append(pieces[0])
            continue
        options = [_expand(_ranges(p[1:-1], variable)) if i % 2 else [p] for i, p in enumerate(pieces)]
        hosts += ["".join(parts) for parts in itertools.product(*options)]
    _refuse_repeats(hosts, variable)
    return hosts


def _refuse_repeats(hosts: list[str], variable: str) -> None:
    if len(set(hosts)) == len(hosts):
        return
    first: dict[str, int] = {}
    for n, host in enumerate(hosts, 1):
        if host in first:
            raise LaunchError(
                f"{variable}: host {n:,} of the {len(hosts):,} it names repeats host {first[host]:,}.",
                hint="each node appears once.",
            )
        first[host] = n


def _items(text: str, variable: str) -> list[list[str]]:
    """Splits at top-level commas; each item alternates text and ``[...]`` pieces (text first and last)."""
    items: list[list[str]] = [[]]
    for i, piece in enumerate(re.split(r"(\[[^\[\]]*\])", text.strip())):
        if i % 2:
            items[-1].append(piece)
            continue
        if "[" in piece or "]" in piece:
            raise LaunchError(f"{variable} has unbalanced brackets.", hint=_NODES_HINT)
        first, *rest = piece.split(",")
        items[-1].append(first)
        items += [[part] for part in rest]
    for item in items:
        item[0] = item[0].lstrip()
        item[-1] = item[-1].rstrip()
        if len(item) == 1 and not item[0]:
            raise LaunchError(f"{variable} has an empty host name.", hint=_NODES_HINT)
    return items


def expand_tasks_per_node(
    text: str, *, variable: str = "SLURM_STEP_TASKS_PER_NODE", max_nodes: int = MAX_HOSTS, max_tasks: int = MAX_TASKS
) -> list[int]:
    """Expands SLURM's tasks-per-node syntax.

    Args:
        text: e.g. ``"2(x3),1"``.
        variable: the variable's name, for error messages.
        max_nodes: the most nodes it may describe; counted before expanding.
        max_tasks: the most tasks it may add up to.

    Returns:
        Tasks on each node, in node order.

    Raises:
        LaunchError: the text is malformed, a count is zero, or it describes
            more than ``max_nodes`` nodes or ``max_tasks`` tasks.

    >>> expand_tasks_per_node("2(x3),1")
    [2, 2, 2, 1]
    """
    parts: list[tuple[int, int]] = []
    nodes = tasks = 0
    for n, part in enumerate(text.split(","), 1):
        match = _TASKS.fullmatch(part)
        if not match or int(match.group(1)) == 0 or (match.group(2) is not None and int(match.group(2)) == 0):
            raise LaunchError(
                f"entry {n} of {variable} is not 'N' or 'N(xM)' with N, M >= 1 (ASCII digits).",
                hint="SLURM writes tasks per node like '2(x3),1'.",
            )
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        nodes, tasks = nodes + repeat, tasks + count * repeat
        if nodes > max_nodes or tasks > max_tasks:
            raise LaunchError(
                f"{variable} describes more than {max_nodes:,} nodes or {max_tasks:,} tasks.",
                hint="check the value; SLURM sets it for the job step.",
            )
        parts.append((count, repeat))
    return [count for count, repeat in parts for _ in range(repeat)]


_GRES = re.compile(r"^gpu(?::(?![0-9]+\()[\w.-]+)?(?::([0-9]{1,9}))?\(IDX:([^)]*)\)$", re.ASCII)


class GpuList(NamedTuple):
    """A scheduler's GPU list, read (:func:`parse_gpu_list`)."""

    indices: list[int]
    """NVML indices in the order given."""
    notes: list[str]
    """Caveats (a ``(null)`` entry ignored ...)."""


def parse_gpu_list(text: str, *, variable: str = "SLURM_STEP_GPUS") -> GpuList:
    """Parses a scheduler's GPU list.

    Accepts plain lists and ranges (``"0,1"``, ``"2-3"``), SLURM's GRES detail
    format (``"gpu:2(IDX:0-1)"``, ``"gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)"``) and
    ``(null)`` entries, which SLURM writes for slots without a GPU (``"0,(null)"``).
    Indices are ASCII digits below :data:`MAX_GPUS`, counted before a range is expanded.

    Args:
        text: the variable's value.
        variable: its name, for messages.

    Returns:
        A :class:`GpuList`: NVML indices in the order given, and caveats.

    Raises:
        EnvVarError: an entry is neither an index, a range, ``(null)`` nor a GRES
            entry, a GRES count disagrees with its IDX list, an index is
            :data:`MAX_GPUS` or more, or an index repeats.

    >>> parse_gpu_list("gpu:2(IDX:0-1)")
    GpuList(indices=[0, 1], notes=[])
    >>> parse_gpu_list("0,(null)", variable="GPU_DEVICE_ORDINAL").indices
    [0]
    """
    hint = "expected GPU indices such as '0,1', '2-3' or SLURM's 'gpu:2(IDX:0-1)'."
    if "IDX:" in text:
        indices, notes = _parse_gres(text, variable, hint)
    else:
        indices, notes = [], []
        for n, part in enumerate((p.strip() for p in text.split(",")) if text.strip() else (), 1):
            if part == "(null)":
                notes.append(f"{variable} has a '(null)' entry (a slot without a GPU); ignored.")
                continue
            match = _RANGE.match(part)
            if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
                raise EnvVarError(f"entry {n} of {variable} is not a GPU index or range (ASCII digits).", hint=hint)
            last = int(match.group(2) or match.group(1))
            if last >= MAX_GPUS:
                raise EnvVarError(
                    f"entry {n} of {variable} is past the last GPU index a node can have ({MAX_GPUS - 1}).",
                    hint=hint,
                )
            indices += range(int(match.group(1)), last + 1)
            if len(indices) > MAX_GPUS:
                break  # a repeat: reported below
    _refuse_repeated_gpus(indices, variable, hint)
    return GpuList(indices, notes)


def _refuse_repeated_gpus(indices: list[int], variable: str, hint: str) -> None:
    if len(set(indices)) == len(indices):
        return
    raise EnvVarError(f"{variable} names the same GPU more than once.", hint=hint)


def _parse_gres(text: str, variable: str, hint: str) -> tuple[list[int], list[str]]:
    indices: list[int] = []
    notes: list[str] = []
    for n, entry in enumerate(re.findall(r"[^,()]+(?:\([^)]*\))?", text), 1):
        entry = entry.strip()
        if not entry.startswith("gpu"):
            notes.append(f"{variable}: GRES entry {n} is not a GPU; ignored.")
            continue
        match = _GRES.match(entry)
        if not match:
            raise EnvVarError(f"{variable}: GRES entry {n} is not 'gpu[:type]:N(IDX:list)'.", hint=hint)
        if match.group(2).strip() == "N/A":
            continue
        found, _ = parse_gpu_list(match.group(2), variable=variable)
        if match.group(1) is not None and int(match.group(1)) != len(found):
            raise EnvVarError(
                f"{variable}: GRES entry {n}'s count disagrees with its IDX list, which names {len(found)} GPU(s).",
                hint=hint,
            )
        indices += found
        if len(indices) > MAX_GPUS:
            break  # a repeat: reported by the caller
    return indices, notes


class Allocation(NamedTuple):
    """The GPUs the scheduler gave (:func:`allocated_gpus`)."""

    gpus: tuple[int, ...] | None
    """NVML indices; ``None`` when no variable names them."""
    variable: str | None
    """The variable they came from (one of :data:`GPU_VARIABLES`)."""
    notes: tuple[str, ...]
    """Caveats."""


def allocated_gpus(env: Mapping[str, str]) -> Allocation:
    """The GPUs the scheduler gave, from the first of :data:`GPU_VARIABLES` set."""
    for var in GPU_VARIABLES:
        if var in env:
            indices, notes = parse_gpu_list(env[var], variable=var)
            return Allocation(tuple(indices), var, tuple(notes))
    return Allocation(None, None, ())


#: The ports a SLURM step's TensorFlow servers listen on start in this range, one block per step: under
#: Linux's ephemeral range (32768 to 60999 by default), where an outgoing connection of any process on
#: the node may hold a port for a while, and the step's server would fail to start ("Could not start
#: gRPC server": seen once in a test run beside other work, with the range that reached 60000).
PORT_RANGE = (20000, 32768)


def step_port_base(job_id: int, step_id: int, tasks_per_node: int) -> int:
    """The first port of a job step's block: task ``j`` of a node listens on ``base + j``.

    Derived from the job and step ids, so every task of the step computes the same base
    with no exchange, and two steps on one node (``srun &`` twice in a job, or two jobs)
    fall in different blocks (blocks repeat only every ``(32768 - 20000) // tasks_per_node``
    steps). TensorFlow's own ``SlurmClusterResolver`` puts every step on port 8888.

    >>> step_port_base(4242, 0, 2), step_port_base(4242, 1, 2)
    (32348, 24750)
    """
    low, high = PORT_RANGE
    block = max(1, tasks_per_node)
    blocks = (high - low) // block
    return low + ((job_id * 7919 + step_id * 104729) % blocks) * block


def step_cluster(nodes: Sequence[str], tasks_per_node: Sequence[int], job_id: int, step_id: int) -> list[str]:
    """Every task's ``host:port`` in a SLURM step, in rank order (SLURM's default block distribution).

    >>> step_cluster(["n1", "n2"], [2, 1], 4242, 0)
    ['n1:32348', 'n1:32349', 'n2:32348']
    """
    if len(nodes) != len(tasks_per_node):
        raise LaunchError(
            f"the step has {len(nodes)} node(s) but tasks for {len(tasks_per_node)}.",
            hint="SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE come from the same srun.",
        )
    base = step_port_base(job_id, step_id, max(tasks_per_node, default=1))
    return [f"{host}:{base + j}" for host, count in zip(nodes, tasks_per_node) for j in range(count)]
