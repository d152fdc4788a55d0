"""XLA's work on a GPU, read from a profile: each module's kernels, grouped by module and fusion.

An XLA-compiled step (TensorFlow's ``jit_compile=True``, Keras 3's default ``fit`` step on
a GPU, JAX's ``jit``) runs as one executable, an HLO *module*, whose kernels are
*fusions*. On the GPU's plane each kernel names its module and fusion (``hlo_module``:
``jit_train_step``, ``hlo_op``: ``gemm_fusion_dot.2``) and its ``tf_op`` reads
``XlaModule:``: no TensorFlow op. :func:`add_xla_kernels` makes each fusion's run one
unit of the report, timed by the GPU's clock: one record per op the profile's HLO
metadata (:mod:`tfdevices.verify.hlo`) says the fusion came from, all naming the module
as ``kernel_name`` with ``kernel`` :data:`~tfdevices.verify.XLA_CLUSTER` and sharing the
fusion's time (counted once, as a fused kernel's is); one record named after the fusion
where the profile carries no HLO for its module (the notes say so). Kernels that name
neither a TensorFlow op nor a module (a library's, outside any annotation) are ops of
their own, under their kernel's name: a device that ran kernels never reads as no ops.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from tfdevices.verify.device import GpuKernel, GpuPlane, nccl_primitive
from tfdevices.verify.hlo import HloModules
from tfdevices.verify.records import XLA_CLUSTER, OpPlacement, _us

__all__ = ["add_xla_kernels", "fusion_type"]

_NUMBERED = re.compile(r"\.\d+$")


def fusion_type(fusion: str) -> str:
    """A fusion's kind, its name without XLA's numbering: ``"gemm_fusion_dot.2"`` -> ``"gemm_fusion_dot"``.

    >>> fusion_type("gemm_fusion_dot.2"), fusion_type("input_reduce_fusion")
    ('gemm_fusion_dot', 'input_reduce_fusion')
    """
    return _NUMBERED.sub("", fusion) or fusion


def add_xla_kernels(
    built: Any, device: str, gpu: GpuPlane, origin: int, call_starts: list[int], modules: HloModules
) -> None:
    """Adds to ``built`` the ops of ``gpu``'s kernels that name no TensorFlow op (reading a profile).

    Args:
        built: the records being built (``ops``, ``notes``: lists).
        device: ``"GPU:N"``.
        gpu: its plane.
        origin: the trace's time origin (ps).
        call_starts: each call's start (ps), to give a kernel the call it ran in.
        modules: the profile's HLO modules.
    """
    kernels = [k for k in gpu.unannotated() if not nccl_primitive(k.name)]
    untied: dict[str, set[str]] = {}
    fusions: dict[str, set[str]] = {}  # module -> the fusions its kernels ran
    plain = 0
    for k in kernels:
        call = max(0, bisect.bisect_right(call_starts, k.start_ps) - 1)
        start, duration = _us(k.start_ps - origin), _us(k.end_ps - k.start_ps)
        if not k.module:
            plain += 1
            built.ops.append(
                OpPlacement(k.name, k.name, device, "", call, k.name, k.name, start, duration, None, (k.name,))
            )
            continue
        fusion, origins = _fusion_of(k, modules)
        fusions.setdefault(k.module, set()).add(fusion)
        if not origins:
            untied.setdefault(k.module, set()).add(fusion)
            origins = ((fusion, fusion_type(fusion)),)
        for name, op_type in origins:
            built.ops.append(
                OpPlacement(name, op_type, device, "", call, XLA_CLUSTER, k.module, start, duration, None, (k.name,))
            )
    _notes(built, device, kernels, fusions, untied, plain, modules)


def _fusion_of(kernel: GpuKernel, modules: HloModules) -> tuple[str, tuple[tuple[str, str], ...] | None]:
    """The fusion a kernel ran (its ``hlo_op``, else the instruction its name finds) and the ops it came from.

    A kernel of a command buffer (a CUDA graph: its ``hlo_op`` names the graph, which the HLO
    does not hold) is found by its own name; one that names no instruction (a library's
    kernel inside the graph) is reported under its kernel's name.
    """
    program = kernel.program if kernel.program >= 0 else None
    origins = modules.ops_of(kernel.module, program, kernel.fusion) if kernel.fusion else None
    if origins:
        return kernel.fusion, origins
    if origins is not None or not kernel.fusion:  # the HLO is there and does not know the fusion
        instruction = modules.instruction_of(kernel.module, program, kernel.name)
        if instruction:
            return instruction, modules.ops_of(kernel.module, program, instruction)
        return kernel.name, origins
    return kernel.fusion, None


def _notes(
    built: Any,
    device: str,
    kernels: list[GpuKernel],
    fusions: dict[str, set[str]],
    untied: dict[str, set[str]],
    plain: int,
    modules: HloModules,
) -> None:
    if fusions:
        runs = sum(1 for k in kernels if k.module)
        built.notes.append(
            f"{runs} XLA kernel run(s) on {device}, by the GPU's clock: "
            + ", ".join(f"module {m} ({len(f)} fusion(s))" for m, f in sorted(fusions.items()))
            + "; each fusion's ops share its time (kernel XlaCluster, kernel_name the module)"
        )
    for module, names in sorted(untied.items()):
        listed = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        why = (
            "the profile holds no HLO metadata (no /host:metadata plane with its HLO proto)"
            if modules.ops_of(module, None, "") is None
            else "the HLO the profile holds names no op for them"
        )
        built.notes.append(
            f"XLA module {module}'s fusion(s) or kernel(s) {listed} not tied to the ops they came from: {why}; "
            "reported under that name"
        )
    if modules.unread:
        built.notes.append("HLO not read: " + "; ".join(modules.unread[:5]))
    if plain:
        built.notes.append(
            f"{plain} kernel run(s) on {device} name no TensorFlow op and no XLA module: "
            "reported under their kernel's name"
        )
