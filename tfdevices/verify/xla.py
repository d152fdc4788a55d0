"""XLA's work on a GPU, read from a profile: each kernel run tied to its module, instruction and the ops it came from.

An XLA-compiled step (TensorFlow's ``jit_compile=True``, Keras 3's default ``fit`` step on
a GPU, JAX's ``jit``) runs as one executable, an HLO *module*, whose kernels are
*fusions* and library calls (cuBLAS, cuDNN). On the GPU's plane each kernel names its
module (``hlo_module``: ``jit_train_step``) and, in ``hlo_op``, its instruction
(``gemm_fusion_dot.2``), or, inside a command buffer (a CUDA graph XLA builds; the default),
only the graph (``command_buffer_1``): those kernels are tied to their instructions by the
order they ran in (:mod:`tfdevices.verify.command_buffers`). Its ``tf_op`` reads
``XlaModule:``: no TensorFlow op. :func:`add_xla_kernels` makes each kernel run one unit of
the report, timed by the GPU's clock: one record per op the profile's HLO metadata
(:mod:`tfdevices.verify.hlo`) says its instruction came from, all naming the module as
``kernel_name`` with ``kernel`` :data:`~tfdevices.verify.XLA_CLUSTER`, the instruction as
``fusion`` and the graph as ``graph``, and sharing the kernel's time (counted once, as a fused
kernel's is); one record named after the kernel's instruction (or the kernel) where none is
known, and the notes say why, for how much of the GPU's time, and what to change. Kernels
that name neither a TensorFlow op nor a module (a library's, outside any annotation) are ops of
their own, under their kernel's name: a device that ran kernels never reads as no ops. Each run
of a module is a call (``call``) where the profile marks no calls of its own (JAX's).
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tfdevices.verify.command_buffers import Untied, place_run
from tfdevices.verify.device import GpuKernel, GpuPlane, nccl_primitive
from tfdevices.verify.hlo import HloModule, HloModules, Launch, Origin
from tfdevices.verify.records import XLA_CLUSTER, OpPlacement, XlaOpPlacement, ps_to_us

_NUMBERED = re.compile(r"\.\d+$")
#: What keeps each kernel's own instruction in a profile: XLA without command buffers.
COMMAND_BUFFER_FIX = (
    "profile with XLA_FLAGS=--xla_gpu_enable_command_buffer= (XLA without command buffers: each kernel then "
    "names its own instruction)"
)
_NO_HLO = "the profile holds no HLO metadata (no /host:metadata plane with its HLO proto)"
_NO_OP = "the HLO the profile holds names no op for their instructions"
_NO_INSTRUCTION = "their names name no instruction of the HLO the profile holds"


def fusion_type(fusion: str) -> str:
    """A fusion's kind, its name without XLA's numbering: ``"gemm_fusion_dot.2"`` -> ``"gemm_fusion_dot"``.

    >>> fusion_type("gemm_fusion_dot.2"), fusion_type("input_reduce_fusion")
    ('gemm_fusion_dot', 'input_reduce_fusion')
    """
    return _NUMBERED.sub("", fusion) or fusion


@dataclass(frozen=True, slots=True)
class _Tie:
    """What one XLA kernel run is tied to (internal)."""

    instruction: str  # its instruction ("a, b": shared by library calls); "" when none is known
    origins: tuple[Origin, ...]  # the ops it came from; () when not tied
    graph: str = ""  # the command buffer it ran in
    why: str = ""  # why it is not tied; "" when it is
    position: int = -1  # its step in one run of the module, where its order says (to count runs)
    made_for: bool = False  # its instruction names no op: XLA made it for the ops that use its output
    by_name: str = ""  # tied by its kernel's name alone, its graph's order not holding: why not ("" otherwise)


def add_xla_kernels(
    built: Any, device: str, gpu: GpuPlane, origin: int, call_starts: list[int], modules: HloModules
) -> None:
    """Adds to ``built`` the ops of ``gpu``'s kernels that name no TensorFlow op (reading a profile).

    Args:
        built: the records being built (``ops``, ``notes``: lists).
        device: ``"GPU:N"``.
        gpu: its plane.
        origin: the trace's time origin (ps).
        call_starts: each call's start (ps), to give a kernel the call it ran in; with none, each
            run of a module is a call.
        modules: the profile's HLO modules.
    """
    kernels = sorted((k for k in gpu.unannotated() if not nccl_primitive(k.name)), key=lambda k: k.start_ps)
    ties = _tie_all(kernels, modules)
    calls = _calls(kernels, ties, call_starts)
    for k, tie, call in zip(kernels, ties, calls):
        start, duration = ps_to_us(k.start_ps - origin), ps_to_us(k.end_ps - k.start_ps)
        if not k.module:
            built.ops.append(
                OpPlacement(k.name, k.name, device, "", call, k.name, k.name, start, duration, None, (k.name,))
            )
            continue
        named = tie.instruction or k.name
        rest = (device, "", call, XLA_CLUSTER, k.module, start, duration, None, (k.name,), tie.instruction, tie.graph)
        for name, op_type in tie.origins or ((named, fusion_type(named)),):
            built.ops.append(XlaOpPlacement(name, op_type, *rest))
    _notes(built, device, kernels, ties, calls)
    if modules.unread:
        built.notes.append("HLO not read: " + "; ".join(modules.unread[:5]))


def _tie_all(kernels: list[GpuKernel], modules: HloModules) -> list[_Tie]:
    """Each kernel's instruction and ops: by its ``hlo_op``, by its command buffer's order, else by its name."""
    ties: list[_Tie | None] = [None] * len(kernels)
    graphs: dict[tuple[str, int, str, int], tuple[HloModule, list[int]]] = {}
    for i, k in enumerate(kernels):
        module = modules.module(k.module, k.program if k.program >= 0 else None) if k.module else None
        if not k.module:
            ties[i] = _Tie("", ())
        elif module is None:
            ties[i] = _Tie(k.fusion or k.name, (), "", _NO_HLO)
        elif module.knows(k.fusion) and not _runs_many(module, k.fusion):
            ties[i] = _tied(module, (k.fusion,), "", by_order=True)
        elif k.fusion or k.graph >= 0:  # a command buffer's kernel: hlo_op names the graph (or the call that runs it)
            graph = k.fusion or f"CUDA graph {k.graph}"
            graphs.setdefault((k.module, k.program, graph, k.graph), (module, []))[1].append(i)
        else:
            ties[i] = _by_name(module, k, "", "")
    for (_, _, graph, _), (module, members) in graphs.items():
        for run in _runs(kernels, members):
            names = tuple(kernels[i].name for i in run)
            placed = module.memo.get(("placed", names))  # a graph's runs repeat: each distinct run read once
            if placed is None:
                placed = module.memo[("placed", names)] = place_run(names, module)
            for i, instructions in zip(run, placed.instructions):
                ties[i] = _graph_tie(module, kernels[i], instructions, graph, placed.cause)
    return [tie or _Tie("", ()) for tie in ties]


def _runs_many(module: HloModule, instruction: str) -> bool:
    """Whether ``instruction`` runs a computation of commands (a call, a loop): its kernels are placed by order."""
    command = module.command(instruction)
    return command is not None and command.launch is Launch.CONTROL


def _graph_tie(
    module: HloModule, kernel: GpuKernel, instructions: tuple[str, ...], graph: str, cause: Untied | None
) -> _Tie:
    """A command buffer's kernel: tied by its order; past where the order holds, a fusion's kernel by its name
    (the order broke: ``cause`` names why), unless the graph ran more kernels than its HLO launches.
    """
    if instructions:
        return _tied(module, instructions, graph, by_order=True)
    why = cause.value if cause is not None else Untied.ORDER.value
    if cause in (Untied.ORDER, Untied.CONTROL):
        tie = _by_name(module, kernel, graph, why)
        return dataclasses.replace(tie, by_name=why) if tie.origins else tie
    return _Tie("", (), graph, why)


def _runs(kernels: list[GpuKernel], members: list[int]) -> list[list[int]]:
    """The runs of one command buffer, each in the order its kernels ran (then by graph node): its kernels of one
    graph launch (``correlation_id``), or, where the profile gives none, from one start of its first node to the next.

    >>> k = [GpuKernel("", "", "a", 0, 1, node=5), GpuKernel("", "", "b", 1, 2, node=6), GpuKernel("", "", "a", 9, 10,
    ...      node=5)]
    >>> _runs(k, [0, 1, 2])
    [[0, 1], [2]]
    """
    by_launch: dict[int, list[int]] = {}
    for i in members:
        by_launch.setdefault(kernels[i].launch, []).append(i)
    runs = []
    for launch, run in by_launch.items():
        run.sort(key=lambda i: (kernels[i].start_ps, kernels[i].node))
        if launch >= 0 or kernels[run[0]].node < 0:
            runs.append(run)
            continue
        first = kernels[run[0]].node
        for i in run:
            if i == run[0] or kernels[i].node == first:
                runs.append([])
            runs[-1].append(i)
    return runs


def _tied(module: HloModule, instructions: tuple[str, ...], graph: str, *, by_order: bool) -> _Tie:
    """The tie of a kernel of ``instructions`` (worked out once per module: a step's kernels repeat every step)."""
    key = ("tie", instructions, graph, by_order)
    tie: _Tie | None = module.memo.get(key)
    if tie is None:
        found: dict[Origin, None] = {}
        for instruction in instructions:
            found.update(dict.fromkeys(module.ops_of(instruction)))
        position = module.position.get(instructions[0], -1) if by_order else -1
        made_for = any(instruction in module.made_for for instruction in instructions)
        tie = _Tie(", ".join(instructions), tuple(found), graph, "" if found else _NO_OP, position, made_for)
        module.memo[key] = tie
    return tie


def _by_name(module: HloModule, kernel: GpuKernel, graph: str, why: str) -> _Tie:
    """A kernel its order does not place: tied by its own name (a fusion's kernel is named after it), else not."""
    instruction = module.instruction_of(kernel.name)
    command = module.command(instruction) if instruction else None
    if instruction and (command is None or command.launch is Launch.KERNEL):
        return _tied(module, (instruction,), graph, by_order=False)
    return _Tie("", (), graph, why or _NO_INSTRUCTION)


def _calls(kernels: list[GpuKernel], ties: list[_Tie], call_starts: list[int]) -> list[int]:
    """Each kernel's call: the profile's own (the last started before it), else its module's run.

    A module's run starts again where its kernels' steps (:attr:`HloModule.position`) go back;
    runs are numbered in the order they started, every module's together.
    """
    if call_starts:
        return [max(0, bisect.bisect_right(call_starts, k.start_ps) - 1) for k in kernels]
    now: dict[tuple[str, int], list[int]] = {}  # module -> [its run now, the furthest step seen in it]
    runs = 0
    out = []
    for k, tie in zip(kernels, ties):  # in time order
        if not k.module:
            out.append(max(0, runs - 1))
            continue
        run = now.get((k.module, k.program))
        if run is None or -1 < tie.position < run[1]:
            run = now[(k.module, k.program)] = [runs, -1]
            runs += 1
        run[1] = max(run[1], tie.position)
        out.append(run[0])
    return out


def _notes(built: Any, device: str, kernels: list[GpuKernel], ties: list[_Tie], calls: list[int]) -> None:
    xla = [(k, tie, call) for k, tie, call in zip(kernels, ties, calls) if k.module]
    if xla:
        total = sum(k.end_ps - k.start_ps for k, _, _ in xla)
        untied = sum(k.end_ps - k.start_ps for k, tie, _ in xla if not tie.origins)
        modules: dict[str, tuple[set[str], set[int]]] = {}
        for k, tie, call in xla:
            module = modules.setdefault(k.module, (set(), set()))
            if tie.instruction:
                module[0].add(tie.instruction)
            module[1].add(call)
        graphs = Counter(tie.graph for _, tie, _ in xla if tie.graph)
        ordered = sum(1 for _, tie, _ in xla if tie.graph and tie.position >= 0)
        built.notes.append(
            f"{len(xla)} XLA kernel run(s) on {device}, by the GPU's clock: "
            + ", ".join(
                f"module {m} ({len(f)} instruction(s), {len(c)} run(s))" for m, (f, c) in sorted(modules.items())
            )
            + (
                f"; {sum(graphs.values())} in command buffers ({', '.join(sorted(graphs))}), {ordered} of them tied "
                "to their instruction by the order the graph ran them in"
                if graphs
                else ""
            )
            + "; each instruction's ops share its kernels' time (kernel XlaCluster, kernel_name the module, fusion "
            f"the instruction); {_percent(total - untied, total)} of their summed time "
            f"({ps_to_us(total):.0f} us) tied to the ops it came from"
        )
        _untied_notes(built, device, xla, total)
    plain = sum(1 for k in kernels if not k.module)
    if plain:
        built.notes.append(
            f"{plain} kernel run(s) on {device} name no TensorFlow op and no XLA module: "
            "reported under their kernel's name"
        )


def _untied_notes(built: Any, device: str, xla: list[tuple[GpuKernel, _Tie, int]], total: int) -> None:
    """Per module and cause: the kernels not tied to ops, their share of the time, why, and what to change."""
    groups: dict[tuple[str, str], list[tuple[GpuKernel, _Tie]]] = {}
    made: dict[str, list[tuple[GpuKernel, _Tie]]] = {}
    named: dict[tuple[str, str], list[tuple[GpuKernel, _Tie]]] = {}
    for k, tie, _ in xla:
        if tie.why:
            groups.setdefault((k.module, tie.why), []).append((k, tie))
        elif tie.made_for:
            made.setdefault(k.module, []).append((k, tie))
        if tie.by_name:
            named.setdefault((k.module, tie.by_name), []).append((k, tie))
    for (module, why), members in sorted(groups.items()):
        spent = sum(k.end_ps - k.start_ps for k, _ in members)
        names = sorted({tie.instruction or k.name for k, tie in members})
        listed = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        graphs = sorted({tie.graph for _, tie in members if tie.graph})
        where = f"command buffer(s) {', '.join(graphs)}: " if graphs else ""
        fix = f"; fix: {COMMAND_BUFFER_FIX}" if graphs else ""
        built.notes.append(
            f"XLA module {module}'s fusion(s) or kernel(s) {listed} not tied to the ops they came from "
            f"({len(members)} kernel run(s), {ps_to_us(spent):.0f} us, {_percent(spent, total)} of the XLA "
            f"kernels' time on {device}): {where}{why}{fix}; reported under their name"
        )
    for (module, why), members in sorted(named.items()):
        graphs = sorted({tie.graph for _, tie in members})
        built.notes.append(
            f"XLA module {module}: {len(members)} kernel run(s) in command buffer(s) {', '.join(graphs)} tied to their "
            f"instructions by their names alone (XLA names the kernel it shares between identical fusions after the "
            f"first): {why}; fix: {COMMAND_BUFFER_FIX}"
        )
    for module, members in sorted(made.items()):
        names = sorted({tie.instruction for _, tie in members})
        ops = dict.fromkeys(op_type for _, tie in members for _, op_type in tie.origins)
        built.notes.append(
            f"XLA module {module}: {len(members)} kernel run(s) of {', '.join(names[:5])}, which XLA made itself "
            f"(their HLO names no op), counted under the ops that use their output: {', '.join(list(ops)[:8])}"
        )


def _percent(part: int, whole: int) -> str:
    """``"23.2%"``; one decimal, so that 99.96% does not read as all.

    >>> _percent(1, 3), _percent(0, 0)
    ('33.3%', '0.0%')
    """
    return f"{100 * part / whole:.1f}%" if whole else "0.0%"
