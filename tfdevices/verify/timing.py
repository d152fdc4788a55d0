"""GPU time for a report's records: each GPU op, copy and collective timed by the GPU's own clock.

The host plane shows where each op was placed and when the host *launched* it; each
GPU's plane (:mod:`tfdevices.verify.device`) shows when the GPU ran it. An op's
executions on GPU ``N`` are matched to its launches by name on device ``GPU:N``: each
execution belongs to the latest launch of that op that started before it (a GPU runs
a kernel after its launch, never before). The op then takes the GPU's start and the
union of its kernels' time, and keeps the launch as ``launch_us``. A GPU op with no
kernel on the device (host-memory ops, ``_Recv``, ops whose kernels ran outside the
trace) keeps its host time; the report's notes count them.

Copies: a memcpy is matched to the ``_Send``/``_Recv`` pair of the op that issued it,
the same way, and gives that transfer its direction, bytes and GPU time; a memcpy no
transfer names becomes a transfer of its own. NCCL's kernels time their collective.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any

from tfdevices.verify.device import GpuCopy, GpuOp, GpuPlane, nccl_primitive
from tfdevices.verify.graph import written_name
from tfdevices.verify.hlo import HloModules
from tfdevices.verify.records import (
    UNKNOWN_DEVICE,
    Collective,
    OpPlacement,
    Transfer,
    ps_to_us,
)
from tfdevices.verify.xla import add_xla_kernels


def _match(launches: list[float], starts: list[float]) -> list[int]:
    """For each start (sorted), the index of the latest launch at or before it; -1 when none.

    >>> _match([1.0, 5.0, 9.0], [0.5, 2.0, 6.0, 6.5, 20.0])
    [-1, 0, 1, 1, 2]
    """
    return [bisect.bisect_right(launches, start) - 1 for start in starts]


def apply_gpu_time(
    built: Any,
    gpus: dict[int, GpuPlane],
    origin: int,
    call_starts: list[int],
    *,
    keep_unmatched: bool,
    modules: HloModules | None = None,
) -> dict[str, float]:
    """Times ``built``'s GPU ops, copies and collectives by the GPUs' planes; returns GPU busy time.

    Args:
        built: the records being built (``ops``, ``transfers``, ``collectives``, ``notes``: lists).
        gpus: each GPU's plane, by ordinal.
        origin: the trace's time origin, in picoseconds.
        call_starts: the start (ps) of each call, by index, to give a GPU execution no launch
            names the call it ran in (the last one started before it).
        keep_unmatched: add GPU executions that match no op as ops of their own (reading a
            profile), and the kernels that name no TensorFlow op (XLA's fusions: see
            :mod:`tfdevices.verify.xla`); otherwise they count in busy time only and a note
            says how many.
        modules: the profile's HLO modules, to tie XLA's fusions to the ops they came from.

    Returns:
        ``{"GPU:N": busy microseconds}``: the union of each GPU's kernels.
    """
    busy = {}
    for index, gpu in sorted(gpus.items()):
        device = f"GPU:{index}"
        ps = gpu.busy_ps()
        if ps or gpu.kernels or gpu.derived:
            busy[device] = round(ps / 1e6, 3)
        executions = gpu.executions()
        left = _time_ops(built, device, executions, origin)
        _time_copies(built, device, gpu.copies, origin, call_starts)
        if keep_unmatched:
            _add_executions(built, device, left, origin, call_starts)
            add_xla_kernels(built, device, gpu, origin, call_starts, modules or HloModules(None))
        elif left:
            built.notes.append(
                f"{len(left)} kernel execution(s) on {device} belong to no captured op (work of "
                "other threads, or launched before the capture): counted in its busy time only"
            )
        _add_nccl(built, device, gpu, origin, call_starts)
    _time_collectives(built)
    return busy


def _time_ops(built: Any, device: str, executions: list[GpuOp], origin: int) -> list[GpuOp]:
    """Gives the ops on ``device`` their GPU time; returns the executions no op launched."""
    launches: dict[str, dict[float, list[int]]] = {}
    for i, op in enumerate(built.ops):
        if op.device == device and op.start_us is not None:
            launches.setdefault(op.kernel_name or op.name, {}).setdefault(op.start_us, []).append(i)
    by_op: dict[str, list[GpuOp]] = {}
    for execution in executions:
        by_op.setdefault(execution.op, []).append(execution)
    left: list[GpuOp] = []
    timed: set[int] = set()
    for name, runs in by_op.items():
        starts = sorted(launches.get(name, {}))
        owners: dict[float, list[GpuOp]] = {}
        for execution, at in zip(runs, _match(starts, [ps_to_us(e.start_ps - origin) for e in runs])):
            if at < 0:
                left.append(execution)
            else:
                owners.setdefault(starts[at], []).append(execution)
        for launch, mine in owners.items():
            for i in launches[name][launch]:
                built.ops[i] = _timed(built.ops[i], mine, origin)
                timed.add(i)
    untimed = sum(1 for i, op in enumerate(built.ops) if op.device == device and i not in timed)
    if untimed and executions:
        built.notes.append(
            f"{untimed} op(s) on {device} ran no kernel on the device in this trace (host-memory "
            "ops, receives, or kernels outside it): their times are the host's"
        )
    return left


def _timed(op: OpPlacement, runs: list[GpuOp], origin: int) -> OpPlacement:
    names: list[str] = []
    for run in runs:
        names += [n for n in run.kernels if n not in names]
    start = min(run.start_ps for run in runs)
    return dataclasses.replace(
        op,
        start_us=ps_to_us(start - origin),
        duration_us=ps_to_us(sum(r.busy_ps for r in runs)),
        launch_us=op.start_us,
        kernels=tuple(names),
    )


def _call_at(call_starts: list[int], ps: int) -> int:
    return max(0, bisect.bisect_right(call_starts, ps) - 1)


def _add_executions(built: Any, device: str, runs: list[GpuOp], origin: int, call_starts: list[int]) -> None:
    """Ops seen only on the GPU (reading a profile): eager ops, or ops whose launch the host plane lacks."""
    for run in runs:
        built.ops.append(
            OpPlacement(
                written_name(run.op),
                run.type,
                device,
                "",
                _call_at(call_starts, run.start_ps),
                run.type,
                run.op,
                ps_to_us(run.start_ps - origin),
                ps_to_us(run.busy_ps),
                None,
                run.kernels,
            )
        )


def _time_copies(built: Any, device: str, copies: list[GpuCopy], origin: int, call_starts: list[int]) -> None:
    index = int(device[4:])
    issued: dict[str, dict[float, list[int]]] = {}
    for i, t in enumerate(built.transfers):
        if device in (t.src, t.dst) and t.start_us is not None:
            for name in {t.send_op, t.recv_op} - {""}:
                issued.setdefault(name, {}).setdefault(t.start_us, []).append(i)
    done: set[int] = set()
    for copy in sorted(copies, key=lambda c: c.start_ps):
        starts = sorted(issued.get(copy.op, {}))
        at = _match(starts, [ps_to_us(copy.start_ps - origin)])[0]
        owners = [i for i in issued[copy.op][starts[at]] if i not in done] if at >= 0 else []
        if owners:
            i = owners[0]
            done.add(i)
            t = built.transfers[i]
            built.transfers[i] = dataclasses.replace(
                t,
                kind=copy.kind,
                bytes=t.bytes if t.bytes is not None else copy.bytes,
                start_us=ps_to_us(copy.start_ps - origin),
                duration_us=ps_to_us(copy.end_ps - copy.start_ps),
            )
        else:
            src, dst = _copy_ends(copy, index)
            built.transfers.append(
                Transfer(
                    src,
                    dst,
                    f"{copy.op}:0" if copy.op else f"memcpy {copy.kind}".strip(),
                    "",
                    None,
                    copy.bytes,
                    "",
                    copy.op,
                    _call_at(call_starts, copy.start_ps),
                    ps_to_us(copy.start_ps - origin),
                    ps_to_us(copy.end_ps - copy.start_ps),
                    copy.kind,
                )
            )


def _copy_ends(copy: GpuCopy, index: int) -> tuple[str, str]:
    """Where a memcpy on GPU ``index`` went from and to; the host is ``CPU:0``, an unknown end ``"?"``."""
    here = f"GPU:{index}"
    if copy.kind == "H2D":
        return "CPU:0", here
    if copy.kind == "D2H":
        return here, "CPU:0"
    if copy.kind == "P2P" and copy.dest is not None and copy.dest != index:
        return here, f"GPU:{copy.dest}"
    if copy.kind == "D2D":
        return here, here
    return here, UNKNOWN_DEVICE


def _add_nccl(built: Any, device: str, gpu: GpuPlane, origin: int, call_starts: list[int]) -> None:
    """NCCL kernels no TensorFlow op is named for: each is a collective of its own, timed by the GPU."""
    for k in gpu.unannotated():
        primitive = nccl_primitive(k.name)
        if primitive:
            built.collectives.append(
                Collective(
                    k.name,
                    primitive,
                    device,
                    "",
                    "",
                    _call_at(call_starts, k.start_ps),
                    ps_to_us(k.start_ps - origin),
                    ps_to_us(k.end_ps - k.start_ps),
                )
            )


def _time_collectives(built: Any) -> None:
    """A collective op takes the time of its op (on a GPU: its NCCL kernels' time)."""
    ops = {(op.name, op.call, op.device): op for op in built.ops}
    built.collectives[:] = [_with_time(c, ops.get((c.name, c.call, c.device))) for c in built.collectives]


def _with_time(collective: Collective, op: OpPlacement | None) -> Collective:
    if op is None or collective.start_us is not None:
        return collective
    return dataclasses.replace(collective, start_us=op.start_us, duration_us=op.duration_us)


def gpu_op_names(gpus: dict[int, GpuPlane]) -> dict[str, int]:
    """Each op name the GPUs ran -> the first GPU that ran it (to place a partition no send names)."""
    names: dict[str, int] = {}
    for index, gpu in sorted(gpus.items()):
        for k in gpu.kernels:
            if k.op:
                names.setdefault(k.op, index)
        for op in gpu.derived:
            names.setdefault(op.op, index)
    return names
