"""XLA's HLO modules in a profile: which ops each fusion came from.

A profile of XLA-compiled work holds a ``/host:metadata`` plane whose event metadata carry
each module's ``HloProto`` (stat ``"Hlo Proto"``, with its ``program_id``). Every HLO
instruction carries ``metadata.op_name``: the op it was lowered from (under TensorFlow's
XLA, the TensorFlow op's name; under JAX, ``jit(f)/.../dot_general``), and ``op_type``
(TensorFlow's op type; empty under JAX). A GPU kernel's ``hlo_op`` stat names its
instruction (a fusion: ``gemm_fusion_dot.2``), whose fused computation's instructions name
the ops fused into it.

The HLO schema here is the project's own and minimal (``xla/service/hlo.proto`` and
``xla/xla_data.proto``: module name, computations, instructions with name, opcode, metadata
and called computations); every other field is skipped. Reading is bounded: a proto larger
than :data:`MAX_HLO_BYTES` is not read, at most :data:`MAX_INSTRUCTIONS` instructions per
module, calls followed :data:`MAX_CALL_DEPTH` computations deep, and protobuf's own nesting
limit (100) holds the depth of the bytes.

>>> modules = HloModules(None)
>>> modules.ops_of("jit_step", 7, "fusion.1") is None
True
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from tfdevices.verify.xplane import MessageTable, build_messages

__all__ = [
    "HloModules",
    "hlo_module",
    "HLO_FIELDS",
    "METADATA_PLANE",
    "MAX_HLO_BYTES",
    "MAX_INSTRUCTIONS",
    "MAX_CALL_DEPTH",
]

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
        ("id", 35, "OPTIONAL", "INT64", "", ""),
        ("called_computation_ids", 38, "REPEATED", "INT64", "", ""),
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


@dataclass
class _Module:
    """One module's instructions (internal): each instruction's name -> the ops it came from."""

    name: str
    ops: dict[str, tuple[Origin, ...]] = field(default_factory=dict)
    kernels: dict[str, str] | None = None  # kernel name -> instruction name, made when first asked for


class HloModules:
    """The HLO modules of a profile's ``/host:metadata`` plane, each parsed when first asked for.

    Args:
        plane: the parsed ``/host:metadata`` plane, or ``None`` when the profile has none.
    """

    def __init__(self, plane: Any) -> None:
        self._protos: dict[int, tuple[str, bytes]] = {}  # program id -> (event name, serialized HloProto)
        self._by_name: dict[str, int] = {}
        self._parsed: dict[int, _Module | None] = {}
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
        parsed = self._module(module, program_id)
        return None if parsed is None else parsed.ops.get(instruction, ())

    def instruction_of(self, module: str, program_id: int | None, kernel: str) -> str:
        """The instruction a kernel is named after (``input_reduce_fusion_3`` -> ``input_reduce_fusion.3``), or ``""``.

        XLA names a fusion's kernel after its instruction, ``.`` written ``_``. A kernel run
        inside a CUDA graph XLA built after its HLO (a command buffer) names only the graph in
        its ``hlo_op``: its own name still finds its fusion.
        """
        parsed = self._module(module, program_id)
        if parsed is None:
            return ""
        if parsed.kernels is None:
            parsed.kernels = {}
            for name in parsed.ops:
                parsed.kernels.setdefault(name.replace(".", "_"), name)
        return parsed.kernels.get(kernel, "")

    def _module(self, name: str, program_id: int | None) -> _Module | None:
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

    def _parse(self, event: str, data: bytes) -> _Module | None:
        from google.protobuf.message import DecodeError  # noqa: PLC0415 (lazy protobuf)

        if len(data) > MAX_HLO_BYTES:
            self.unread.append(f"{event} ({len(data):,} bytes, more than the {MAX_HLO_BYTES:,} read)")
            return None
        try:
            proto = hlo_module().HloProto.FromString(data).hlo_module
        except (DecodeError, RuntimeError, ValueError) as err:
            self.unread.append(f"{event} (not an HLO proto: {str(err)[:80]})")
            return None
        return _origins(proto)


def _origins(proto: Any) -> _Module:
    """Each instruction's ops: its own ``metadata.op_name`` and those of the computations it calls (fusions)."""
    module = _Module(proto.name)
    computations = {c.id: c for c in proto.computations}
    below: dict[int, tuple[Origin, ...]] = {}
    seen = 0

    def called(ids: Any, path: frozenset[int]) -> list[Origin]:
        out: list[Origin] = []
        for cid in ids:
            if cid in path or cid not in computations or len(path) >= MAX_CALL_DEPTH:
                continue
            if cid not in below:
                found: dict[Origin, None] = {}
                for inner in computations[cid].instructions[: MAX_INSTRUCTIONS - seen]:
                    found.update(dict.fromkeys(_own(inner)))
                    found.update(dict.fromkeys(called(inner.called_computation_ids, path | {cid})))
                below[cid] = tuple(found)
            out += below[cid]
        return out

    for computation in proto.computations:
        for inst in computation.instructions:
            seen += 1
            if seen > MAX_INSTRUCTIONS:
                return module
            origins = dict.fromkeys(_own(inst))
            origins.update(dict.fromkeys(called(inst.called_computation_ids, frozenset())))
            module.ops[inst.name] = tuple(origins)
    return module


def _own(inst: Any) -> tuple[Origin, ...]:
    """The op an instruction names in its metadata: TensorFlow's type, else the name's last part (JAX)."""
    name = inst.metadata.op_name
    if not name:
        return ()
    return ((name, inst.metadata.op_type or name.rstrip("/").rsplit("/", 1)[-1]),)
