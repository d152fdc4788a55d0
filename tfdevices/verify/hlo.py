"""XLA's HLO modules in a profile: which ops each instruction came from, and the order instructions run in.

A profile of XLA-compiled work holds a ``/host:metadata`` plane whose event metadata carry
each module's ``HloProto`` (stat ``"Hlo Proto"``, with its ``program_id``). Every HLO
instruction carries ``metadata.op_name``: the op it was lowered from (under TensorFlow's
XLA, the TensorFlow op's name; under JAX, ``jit(f)/.../dot_general``), and ``op_type``
(TensorFlow's op type; empty under JAX). A GPU kernel's ``hlo_op`` stat names its
instruction (a fusion: ``gemm_fusion_dot.2``), whose fused computation's instructions name
the ops fused into it.

The module's schedule gives, for each computation that runs (the entry, loop bodies), its
instructions in the order they run; those that launch work on a GPU are its
:class:`Command` s: a fusion (XLA's own kernel, named after the instruction) or a library call
(cuBLAS, cuDNN: the library's kernels, under the library's names). A command buffer (a CUDA
graph XLA builds from a run of commands) runs them in that order
(:mod:`tfdevices.verify.command_buffers`). An instruction XLA made itself names no op (a
constant it materialised); it counts under the ops that use its output
(:attr:`HloModule.made_for`).

The HLO schema here is the project's own and minimal (``xla/service/hlo.proto`` and
``xla/xla_data.proto``: module name, computations, schedule, instructions with name, opcode,
fusion kind, custom-call target, metadata, operands, called computations and the backend
configuration); every other field is skipped. Reading is bounded: a proto larger than
:data:`MAX_HLO_BYTES` is not read, at most :data:`MAX_INSTRUCTIONS` instructions per module,
calls followed :data:`MAX_CALL_DEPTH` computations deep, and protobuf's own nesting limit
(100) holds the depth of the bytes.

>>> modules = HloModules(None)
>>> modules.ops_of("jit_step", 7, "fusion.1") is None
True
"""

from __future__ import annotations

import enum
import re
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, NamedTuple

from tfdevices.verify.xplane import MessageTable, build_messages

#: The plane of a profile that holds the XLA modules' HLO.
METADATA_PLANE = "/host:metadata"
#: The largest serialized HLO module read (bytes).
MAX_HLO_BYTES = 64 << 20
#: The most instructions read from one module.
MAX_INSTRUCTIONS = 1_000_000
#: The deepest chain of computations calling computations followed (a fusion in a loop body is 3 deep).
MAX_CALL_DEPTH = 32

#: The fields of ``HloProto`` this reader needs, numbered as ``xla/service/hlo.proto`` numbers them.
HLO_FIELDS: MessageTable = {
    "HloProto": (("hlo_module", 1, "OPTIONAL", "MESSAGE", "HloModuleProto", ""),),
    "HloModuleProto": (
        ("name", 1, "OPTIONAL", "STRING", "", ""),
        ("entry_computation_name", 2, "OPTIONAL", "STRING", "", ""),
        ("computations", 3, "REPEATED", "MESSAGE", "HloComputationProto", ""),
        ("id", 5, "OPTIONAL", "INT64", "", ""),
        ("entry_computation_id", 6, "OPTIONAL", "INT64", "", ""),
        ("schedule", 7, "OPTIONAL", "MESSAGE", "HloScheduleProto", ""),
    ),
    "HloScheduleProto": (("sequences", 1, "REPEATED", "MESSAGE", "HloScheduleProto.SequencesEntry", ""),),
    "HloScheduleProto.InstructionSequence": (("instruction_ids", 1, "REPEATED", "INT64", "", ""),),
    "HloScheduleProto.SequencesEntry": (
        ("key", 1, "OPTIONAL", "INT64", "", ""),
        ("value", 2, "OPTIONAL", "MESSAGE", "HloScheduleProto.InstructionSequence", ""),
    ),
    "HloComputationProto": (
        ("name", 1, "OPTIONAL", "STRING", "", ""),
        ("instructions", 2, "REPEATED", "MESSAGE", "HloInstructionProto", ""),
        ("id", 5, "OPTIONAL", "INT64", "", ""),
    ),
    "HloInstructionProto": (
        ("name", 1, "OPTIONAL", "STRING", "", ""),
        ("opcode", 2, "OPTIONAL", "STRING", "", ""),
        ("metadata", 7, "OPTIONAL", "MESSAGE", "OpMetadata", ""),
        ("fusion_kind", 11, "OPTIONAL", "STRING", "", ""),
        ("custom_call_target", 28, "OPTIONAL", "STRING", "", ""),
        ("id", 35, "OPTIONAL", "INT64", "", ""),
        ("operand_ids", 36, "REPEATED", "INT64", "", ""),
        ("called_computation_ids", 38, "REPEATED", "INT64", "", ""),
        ("backend_config", 43, "OPTIONAL", "BYTES", "", ""),
    ),
    "OpMetadata": (
        ("op_type", 1, "OPTIONAL", "STRING", "", ""),
        ("op_name", 2, "OPTIONAL", "STRING", "", ""),
    ),
}
_lock = threading.Lock()
_module: SimpleNamespace | None = None


def hlo_module() -> SimpleNamespace:
    """The minimal HLO message classes (``HloProto``, ``HloModuleProto``, ...), built once."""
    global _module
    if _module is None:
        with _lock:
            if _module is None:
                _module = SimpleNamespace(**build_messages("tfdevices/hlo.proto", "tfdevices.schema.hlo", HLO_FIELDS))
    return _module


#: An op an HLO instruction came from: ``(op name, op type)``.
Origin = tuple[str, str]


class Launch(enum.Enum):
    """What an instruction of a running computation launches on a GPU."""

    KERNEL = "kernel"  # XLA's own kernel (a fusion, a sort ...), named after the instruction or an identical one
    LIBRARY = "library"  # a library's kernels (cuBLAS, cuDNN ...), under the library's own names
    CONTROL = "control"  # a loop, condition or call: the kernels of the computations it runs


class Command(NamedTuple):
    """One instruction of a running computation that launches work on a GPU, in the order its schedule runs them.

    Attributes:
        name: the instruction (``"gemm_fusion_dot.283"``, ``"custom-call.1"``).
        launch: what it launches.
        family: what a kernel it may share must match: a fusion's kind and name without its
            numbering (``"kCustom gemm_fusion_dot"``: XLA compiles identical fusions once and names
            their kernel after the first), a library call's library (``"cuBLAS"``).
    """

    name: str
    launch: Launch
    family: str


#: Instructions that launch nothing read here: plumbing, host transfers, and (by :data:`_NO_LAUNCH_PARTS`) the
#: asynchronous halves and collectives (NCCL's kernels are collectives of their own).
_NO_LAUNCH = frozenset(
    {"parameter", "get-tuple-element", "bitcast", "tuple", "constant", "after-all", "add-dependency", "domain"}
    | {"opt-barrier", "partition-id", "replica-id", "send", "recv", "infeed", "outfeed", "reduce-scatter"}
)
_NO_LAUNCH_PARTS = re.compile(r"-start$|-done$|-update$|^all-|^collective-|^ragged-all-")
_CONTROL = frozenset({"while", "conditional", "call"})
_PASS_THROUGH = frozenset({"get-tuple-element", "bitcast", "tuple", "copy", "reshape"})
_FUSION_KIND = re.compile(rb'"kind"\s*:\s*"([^"]{1,80})"')
_LIBRARIES = (
    ("__cublas", "cuBLAS"),
    ("__cudnn", "cuDNN"),
    ("__custom_fusion", "CUTLASS"),
    ("__triton", "Triton"),
)
_NUMBERED = re.compile(r"\.\d+$")


def _family(inst: Any) -> tuple[Launch, str] | None:
    """What ``inst`` launches and the family its kernels belong to; ``None`` when it launches nothing read."""
    opcode = inst.opcode
    if opcode in _NO_LAUNCH or _NO_LAUNCH_PARTS.search(opcode):
        return None
    if opcode in _CONTROL:
        return Launch.CONTROL, opcode
    if opcode == "custom-call":
        target = inst.custom_call_target
        return Launch.LIBRARY, next((name for prefix, name in _LIBRARIES if target.startswith(prefix)), target)
    if opcode == "fusion" and inst.fusion_kind == "kCustom":
        found = _FUSION_KIND.search(inst.backend_config[:400])
        kind = found[1].decode("ascii", "replace") if found else ""
        if kind.startswith(("__cudnn", "__custom_fusion")):
            return Launch.LIBRARY, next(name for prefix, name in _LIBRARIES if kind.startswith(prefix))
    return Launch.KERNEL, f"{inst.fusion_kind} {_NUMBERED.sub('', inst.name)}"


@dataclass
class HloModule:
    """One module's HLO as a profile is read with it: each instruction's ops, and what runs in which order.

    Attributes:
        name: the module's name.
        sequences: each computation that runs (the entry, loop bodies ...) -> its commands in order.
        where: each command -> ``(its computation, its index in that computation's commands)``.
        position: each instruction of a running computation -> its step in the entry's order (an
            instruction of a loop body: the loop's step): where one run of the module is.
        made_for: the commands that name no op of their own (XLA made them), counted under the
            ops that use their output.
        loops: the computations a loop runs (its body and condition): a run of them repeats.
        scheduled: whether the order is the module's schedule (else its instructions' own order).
        memo: what a reader worked out from the module once, by its own keys (one graph run's
            kernels placed, one instruction's ops and step: a step's kernels repeat every step).
    """

    name: str
    sequences: dict[str, tuple[Command, ...]] = field(default_factory=dict)
    where: dict[str, tuple[str, int]] = field(default_factory=dict)
    position: dict[str, int] = field(default_factory=dict)
    made_for: set[str] = field(default_factory=set)
    loops: set[str] = field(default_factory=set)
    scheduled: bool = False
    memo: dict[Any, Any] = field(default_factory=dict)
    _instructions: dict[str, Any] = field(default_factory=dict)  # every computation's, by name (read bounded)
    _computations: dict[int, Any] = field(default_factory=dict)
    _ops: dict[str, tuple[Origin, ...]] = field(default_factory=dict)  # instruction -> its ops, when first asked
    _below: dict[int, tuple[Origin, ...]] = field(default_factory=dict)  # computation -> the ops it holds
    _kernels: dict[str, str] | None = None  # kernel name -> instruction, made when first asked for

    def knows(self, instruction: str) -> bool:
        """Whether the module has an instruction of that name."""
        return instruction in self._instructions

    def ops_of(self, instruction: str) -> tuple[Origin, ...]:
        """The ops ``instruction`` came from (``()`` for none): its own ``metadata.op_name`` and those of the
        computations it calls (a fusion's), or, for one XLA made, those that use its output.
        """
        found = self._ops.get(instruction)
        if found is None:
            inst = self._instructions.get(instruction)
            found = self._ops[instruction] = () if inst is None else self._origins(inst)
        return found

    def _origins(self, inst: Any) -> tuple[Origin, ...]:
        found = dict.fromkeys(_own(inst))
        found.update(dict.fromkeys(self._called(inst.called_computation_ids, frozenset())))
        return tuple(found)

    def _called(self, ids: Any, path: frozenset[int]) -> list[Origin]:
        """The ops the computations ``ids`` hold (each once per module), followed :data:`MAX_CALL_DEPTH` deep."""
        out: list[Origin] = []
        for cid in ids:
            if cid in path or cid not in self._computations or len(path) >= MAX_CALL_DEPTH:
                continue
            if cid not in self._below:
                found: dict[Origin, None] = {}
                for inner in self._computations[cid].instructions:
                    found.update(dict.fromkeys(_own(inner)))
                    if inner.called_computation_ids:
                        found.update(dict.fromkeys(self._called(inner.called_computation_ids, path | {cid})))
                self._below[cid] = tuple(found)
            out += self._below[cid]
        return out

    def instruction_of(self, kernel: str) -> str:
        """The instruction a kernel is named after (``input_reduce_fusion_3`` -> ``input_reduce_fusion.3``), or ``""``.

        XLA names a fusion's kernel after its instruction, ``.`` written ``_``; identical fusions
        share the first one's kernel, and so its name.
        """
        if self._kernels is None:
            self._kernels = {}
            for name in (*self.where, *self._instructions):
                self._kernels.setdefault(name.replace(".", "_"), name)
        return self._kernels.get(kernel, "")

    def command(self, instruction: str) -> Command | None:
        """The command ``instruction`` is in its computation, or ``None`` (not a running computation's)."""
        found = self.where.get(instruction)
        return None if found is None else self.sequences[found[0]][found[1]]


class HloModules:
    """The HLO modules of a profile's ``/host:metadata`` plane, each parsed when first asked for.

    Args:
        plane: the parsed ``/host:metadata`` plane, or ``None`` when the profile has none.
    """

    def __init__(self, plane: Any) -> None:
        self._protos: dict[int, tuple[str, bytes]] = {}  # program id -> (event name, serialized HloProto)
        self._by_name: dict[str, int] = {}
        self._parsed: dict[int, HloModule | None] = {}
        self.unread: list[str] = []  # modules whose HLO could not be read, as "name (why)"
        if plane is None:
            return
        names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for meta in plane.event_metadata.values():
            proto, program = None, None
            for stat in meta.stats:
                if names.get(stat.metadata_id) == "Hlo Proto":
                    proto = stat.bytes_value
                elif names.get(stat.metadata_id) == "program_id":
                    program = stat.int64_value or stat.uint64_value
            if proto is not None:
                key = program if program is not None else -1 - len(self._protos)
                self._protos[key] = (meta.name, proto)

    def __len__(self) -> int:
        return len(self._protos)

    def ops_of(self, module: str, program_id: int | None, instruction: str) -> tuple[Origin, ...] | None:
        """The ops ``instruction`` of ``module`` came from; ``None`` when the profile holds no HLO for it."""
        parsed = self.module(module, program_id)
        return None if parsed is None else parsed.ops_of(instruction)

    def instruction_of(self, module: str, program_id: int | None, kernel: str) -> str:
        """The instruction of ``module`` a kernel is named after (see :meth:`HloModule.instruction_of`), or ``""``."""
        parsed = self.module(module, program_id)
        return "" if parsed is None else parsed.instruction_of(kernel)

    def module(self, name: str, program_id: int | None) -> HloModule | None:
        """The module of that program id (else of that name), parsed; ``None`` when the profile holds no HLO for it."""
        key = program_id if program_id in self._protos else self._named(name)
        if key is None:
            return None
        if key not in self._parsed:
            self._parsed[key] = self._parse(*self._protos[key])
        return self._parsed[key]

    def _named(self, name: str) -> int | None:
        if not self._by_name:
            for key, (event, _) in self._protos.items():
                self._by_name.setdefault(event.split("(", 1)[0], key)
        return self._by_name.get(name)

    def _parse(self, event: str, data: bytes) -> HloModule | None:
        from google.protobuf.message import DecodeError  # noqa: PLC0415 (lazy protobuf)

        if len(data) > MAX_HLO_BYTES:
            self.unread.append(f"{event} ({len(data):,} bytes, more than the {MAX_HLO_BYTES:,} read)")
            return None
        try:
            proto = hlo_module().HloProto.FromString(data).hlo_module
        except (DecodeError, RuntimeError, ValueError) as err:
            self.unread.append(f"{event} (not an HLO proto: {str(err)[:80]})")
            return None
        module = HloModule(proto.name)
        _instructions(module, proto)
        _program(module, proto, module._computations)
        _made_for(module, proto)
        return module


def _instructions(module: HloModule, proto: Any) -> None:
    """The module's computations and instructions by name: at most :data:`MAX_INSTRUCTIONS`, the rest not read."""
    seen = 0
    for computation in proto.computations:
        seen += len(computation.instructions)
        if seen > MAX_INSTRUCTIONS:
            return
        module._computations[computation.id] = computation
        for inst in computation.instructions:
            module._instructions[inst.name] = inst


def _own(inst: Any) -> tuple[Origin, ...]:
    """The op an instruction names in its metadata: TensorFlow's type, else the name's last part (JAX)."""
    name = inst.metadata.op_name
    if not name:
        return ()
    return ((name, inst.metadata.op_type or name.rstrip("/").rsplit("/", 1)[-1]),)


def _program(module: HloModule, proto: Any, computations: dict[int, Any]) -> None:
    """The computations that run (the entry, and what its loops, conditions and calls run), their commands in order."""
    schedule = proto.schedule.sequences
    module.scheduled = len(schedule) > 0
    entry = computations.get(proto.entry_computation_id) or next(
        (c for c in proto.computations if c.name == proto.entry_computation_name), None
    )
    stack: list[tuple[Any, int]] = [] if entry is None else [(entry, -1)]
    done: set[int] = set()
    read = 0
    while stack and read < MAX_INSTRUCTIONS:
        computation, under = stack.pop()
        if computation.id in done:
            continue
        done.add(computation.id)
        if computation.id in schedule:
            by_id = {inst.id: inst for inst in computation.instructions}
            order = [by_id[i] for i in schedule[computation.id].instruction_ids if i in by_id]
        else:
            order = list(computation.instructions)
        read += len(order)
        commands: list[Command] = []
        for step, inst in enumerate(order):
            module.position[inst.name] = step if under < 0 else under
            launch = _family(inst)
            if launch is None:
                continue
            module.where[inst.name] = (computation.name, len(commands))
            commands.append(Command(inst.name, *launch))
            if launch[0] is Launch.CONTROL:
                if inst.opcode == "while":
                    module.loops.update(computations[c].name for c in inst.called_computation_ids if c in computations)
                stack += [
                    (computations[c], module.position[inst.name])
                    for c in inst.called_computation_ids
                    if c in computations
                ]
        module.sequences[computation.name] = tuple(commands)


def _made_for(module: HloModule, proto: Any) -> None:
    """Commands that name no op (XLA made them: a constant it materialised) take the ops that use their output."""
    bare = {name for name in module.where if not module.ops_of(name)}
    for computation in proto.computations:
        if not bare or computation.name not in module.sequences:
            continue
        mine = [inst for inst in computation.instructions if inst.name in bare]
        if not mine:
            continue
        users: dict[int, list[Any]] = {}
        for inst in computation.instructions:
            for operand in inst.operand_ids:
                users.setdefault(operand, []).append(inst)
        for inst in mine:
            found = _users_ops(users, inst)
            if found:
                module._ops[inst.name] = found
                module.made_for.add(inst.name)


def _users_ops(users: dict[int, list[Any]], inst: Any) -> tuple[Origin, ...]:
    """The ops the instructions that use ``inst``'s output name as theirs, through tuples, bitcasts and copies."""
    found: dict[Origin, None] = {}
    frontier = [inst]
    for _ in range(4):
        later = []
        for here in frontier:
            for user in users.get(here.id, ()):
                own = _own(user)
                if own:
                    found.update(dict.fromkeys(own))
                elif user.opcode in _PASS_THROUGH:
                    later.append(user)
        frontier = later
    return tuple(found)
