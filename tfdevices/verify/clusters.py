"""XLA clusters as units: each cluster's ops listed under it, its time counted once.

The ops XLA compiled together run as one executable: a CPU capture of a
``jit_compile=True`` function gives each of the cluster's ops the cluster's whole time
(one record per op, all naming the cluster as ``kernel_name`` with ``kernel``
:data:`~tfdevices.verify.XLA_CLUSTER`), and a GPU profile gives each op a fusion came from
that fusion's time (:mod:`tfdevices.verify.xla`). Their times are one run's, shared, not
each op's: :func:`cluster_runs` counts each run once (the union of the distinct runs' spans).

>>> from tfdevices.verify import OpPlacement
>>> ops = [OpPlacement(n, t, "CPU:0", "", 0, "XlaCluster", "step", 0.0, 347.0) for n, t in [("a", "A"), ("b", "B")]]
>>> cluster_runs(ops)["step"]
ClusterRun(device='CPU:0', ops=('a', 'b'), runs=1, us=347.0)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tfdevices.verify.records import XLA_CLUSTER, OpPlacement, union_length

__all__ = ["ClusterRun", "cluster_runs", "cluster_markdown"]

_LISTED = 8  # op names a table row lists before "... N more"


@dataclass(frozen=True)
class ClusterRun:
    """One XLA cluster (a CPU capture's ``jit_compile`` function, a GPU profile's module) as one unit.

    Attributes:
        device: where it ran.
        ops: the distinct names of the ops compiled into it, in the order first seen.
        runs: its distinct runs (on a GPU: its fusions' kernel runs).
        us: its time, each run counted once (``None`` when untimed).
    """

    device: str
    ops: tuple[str, ...]
    runs: int
    us: float | None


def cluster_runs(ops: Iterable[OpPlacement]) -> dict[str, ClusterRun]:
    """Each XLA cluster of ``ops``, by its name (``kernel_name``), sorted by name."""
    names: dict[str, dict[str, None]] = {}
    device: dict[str, str] = {}
    spans: dict[str, set[tuple[int, float | None, float | None]]] = {}
    for op in ops:
        if op.kernel != XLA_CLUSTER:
            continue
        names.setdefault(op.kernel_name, {})[op.name] = None
        device.setdefault(op.kernel_name, op.device)
        spans.setdefault(op.kernel_name, set()).add((op.call, op.start_us, op.duration_us))
    out = {}
    for name in sorted(names):
        timed = [(s, s + d) for _, s, d in spans[name] if s is not None and d is not None]
        us = round(union_length(timed), 3) if timed else None
        out[name] = ClusterRun(device[name], tuple(names[name]), len(spans[name]), us)
    return out


def cluster_markdown(ops: Iterable[OpPlacement]) -> list[str]:
    """Markdown lines: a table of the clusters, each with its runs, time (counted once) and ops; ``[]`` for none."""
    clusters = cluster_runs(ops)
    if not clusters:
        return []
    lines = [
        "",
        f"**XLA clusters: {len(clusters)}**",
        "",
        "| cluster | device | runs | time | ops |",
        "|---|---|---:|---:|---|",
    ]
    for name, c in clusters.items():
        listed = ", ".join(f"`{n}`" for n in c.ops[:_LISTED]) + (
            f", ... {len(c.ops) - _LISTED} more" if len(c.ops) > _LISTED else ""
        )
        time = "?" if c.us is None else f"{c.us:.0f} us"
        lines.append(f"| {name} | {c.device} | {c.runs} | {time} | {len(c.ops)}: {listed} |")
    return lines
