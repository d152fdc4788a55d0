"""The model graph of a function: the ops the program wrote, looked up by the names that ran.

TensorFlow rewrites graphs before running them (oneDNN, grappler's fusions, inlining);
these helpers map an executed kernel back to the ops of the traced graph it ran.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Known:
    """What one traced graph has told already (internal): read once per traced function, not per capture."""

    ops: dict[str, Any]  # op name -> op
    asked: dict[str, str] = field(default_factory=dict)  # op name -> the device it asked for
    model_ops: dict[tuple[str, str], list[tuple[str, str, str]]] = field(default_factory=dict)  # per kernel
    asked_by: dict[tuple[str, str], str] = field(default_factory=dict)  # kernel -> the device its op asked for
    placed: dict[tuple[str, str], Any] = field(default_factory=dict)  # per kernel: what the report's builder adds
    asks_nothing: bool | None = None  # no op of the graph, nor of a function it calls, asked for a device


_KNOWN: weakref.WeakKeyDictionary[Any, _Known] = weakref.WeakKeyDictionary()


_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


class FunctionGraph:
    """The ops a function's traced graph holds, looked up by executed name.

    TensorFlow inlines the functions a function calls, naming their ops after the
    call op (``"StatefulPartitionedCall/model/dense/MatMul"``); those are looked up in
    the called function's graph and reported by the name the program gave them there
    (``"model/dense/MatMul"``; ``kernel_name`` keeps the executed name).
    """

    def __init__(self, graph: Any) -> None:
        self._graph = graph
        self._inner: dict[str, FunctionGraph | None] = {}
        known = _KNOWN.get(graph) if graph is not None else None
        if known is None:
            known = _Known({op.name: op for op in graph.get_operations()} if graph is not None else {})
            if graph is not None:
                _KNOWN[graph] = known
        self._known = known
        self._ops = known.ops
        self._asked = known.asked

    def find(self, name: str) -> tuple[Any, str]:
        """The op an executed node name stands for, and the prefix of the call it was inlined from."""
        op = self._ops.get(name)
        if op is not None or self._graph is None:
            return op, ""
        at = name.find("/")
        while at > 0:
            inner = self._called(name[:at])
            if inner is not None:
                op, prefix = inner.find(name[at + 1 :])
                if op is not None:
                    return op, f"{name[:at]}/{prefix}"
            at = name.find("/", at + 1)
        return None, ""

    def op(self, name: str) -> Any:
        """The op an executed node name stands for (``None`` when the graph has none)."""
        return self.find(name)[0]

    def asked_by(self, keys: Sequence[tuple[str, str]]) -> str:
        """The one device the ops of these kernels (``(executed name, kernel)``) asked for; ``""`` when none or several.

        What each kernel asked for is read once per traced graph (a partition's kernels differ
        from capture to capture as the thread pool splits the work; the kernels do not).
        """
        if self.asks_nothing():
            return ""
        cache = self._known.asked_by
        found: set[str | None] = set(map(cache.get, keys))
        if None in found:
            found.discard(None)
            for key in keys:
                if key not in cache:
                    op = self.op(key[0])
                    cache[key] = device = self.asked(op) if op is not None else ""
                    found.add(device)
        found.discard("")
        return found.pop() or "" if len(found) == 1 else ""

    def asks_nothing(self) -> bool:
        """Whether no op of the graph, nor of the functions its ops call, asked for a device (read once per graph).

        Then every kernel's ops asked for none, and :meth:`asked_by` reads no kernel.
        """
        known = self._known
        if known.asks_nothing is None:
            known.asks_nothing = not any(self.asked(op) for op in known.ops.values()) and all(
                inner is None or inner.asks_nothing()
                for inner in (self._called(name) for name, op in known.ops.items() if op.type in _CALL_OPS)
            )
        return known.asks_nothing

    def asked(self, op: Any) -> str:
        """The device ``op`` asked for (read from TensorFlow once per op)."""
        device = self._asked.get(op.name)
        if device is None:
            device = self._asked[op.name] = op.device
        return device

    def _called(self, call_name: str) -> FunctionGraph | None:
        if call_name not in self._inner:
            call = self._ops.get(call_name)
            inner = None
            if call is not None and call.type in _CALL_OPS:
                try:
                    function = getattr(self._graph, "_functions", {}).get(call.get_attr("f").name)
                    inner = FunctionGraph(function.graph) if function is not None else None
                except (ValueError, AttributeError):
                    inner = None
            self._inner[call_name] = inner
        return self._inner[call_name]

    def tensor(self, name: str) -> Any:
        """The tensor ``"op:index"`` names (``None`` when the graph has no such op)."""
        op_name, _, index = name.rpartition(":")
        op = self.op(op_name)
        try:
            return op.outputs[int(index)] if op is not None else None
        except (IndexError, ValueError):
            return None


_MKL_PREFIX = re.compile(r"^_Mkl(?:Native)?")
_FUSED_BASE = {"FusedBatchNormEx": "FusedBatchNormV3"}


def _base_type(kernel: str) -> str:
    """The op a kernel implements: ``_MklMatMul`` -> ``MatMul``, ``_FusedMatMul`` -> ``MatMul``."""
    plain = _MKL_PREFIX.sub("", kernel).lstrip("_")
    if plain.startswith("Fused") and plain not in ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"):
        plain = plain[len("Fused") :]
    return _FUSED_BASE.get(plain, plain)


def _is_fused(kernel: str) -> bool:
    return "Fused" in kernel and _base_type(kernel) != _MKL_PREFIX.sub("", kernel).lstrip("_")


def _fused_chain(op: Any, base: str, depth: int = 4) -> list[Any] | None:
    """The ops from a fused kernel's first op (of type ``base``) to ``op``, its last; ``None`` if not found."""
    if op.type == base:
        return [op]
    if depth == 0:
        return None
    for tensor in op.inputs:
        chain = _fused_chain(tensor.op, base, depth - 1)
        if chain is not None:
            return [*chain, op]
    return None


_INLINED = re.compile(r"^(?:(?:Stateful)?PartitionedCall(?:_\d+)?/)+")


def written_name(executed: str) -> str:
    """An executed op's name without the call ops TensorFlow inlined it through (when no graph says more).

    >>> written_name("StatefulPartitionedCall/sequential/dense/MatMul")
    'sequential/dense/MatMul'
    """
    return _INLINED.sub("", executed) or executed


def model_ops(graph: FunctionGraph, name: str, kernel: str) -> list[tuple[str, str, str]]:
    """``(name, model op, requested device)`` for each op the user wrote that this kernel ran (cached per graph)."""
    key = (name, kernel)
    found = graph._known.model_ops.get(key)
    if found is None:
        found = graph._known.model_ops[key] = _read_model_ops(graph, name, kernel)
    return found


def _read_model_ops(graph: FunctionGraph, name: str, kernel: str) -> list[tuple[str, str, str]]:
    op, _ = graph.find(name)
    if op is None:
        return [(written_name(name), _base_type(kernel), "")]
    if _is_fused(kernel):
        chain = _fused_chain(op, _base_type(kernel))
        if chain is not None:
            return [(o.name, o.type, graph.asked(o)) for o in chain]
    return [(op.name, op.type, graph.asked(op))]
