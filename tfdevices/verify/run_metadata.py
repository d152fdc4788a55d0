"""Placement from the runtime's own placed graphs: every new function instantiation, no profiler.

With run metadata on (``tensorflow.python.eager.context.enable_run_metadata()``),
TensorFlow records, each time it instantiates a ``tf.function`` (its first call, and
each retrace), the function's partition graphs: every node with the device it was
assigned, and the ``_Send``/``_Recv`` pairs between devices. A function already
instantiated records nothing more and costs nothing more per call. :class:`PlacementWatch`
turns it on, and :meth:`~PlacementWatch.poll` reads what was recorded since the last
poll as one :class:`Instantiation` per new function, each with a
:class:`~tfdevices.verify.PlacementReport` (ops and transfers, no times: times need the
profiler) and, against the previous one, a
:class:`~tfdevices.verify.drift.PlacementChange` naming the ops that moved.

Run metadata is a process-wide TensorFlow setting: the watch says whether it turned it
on (``turned_on``), and turns it off when it stops only if it did. TensorFlow does not
say whether it is on: a watch turns it on when no other watch of this process holds it,
so a program that had turned it on itself finds it off after the watch ends. Reading the recorded
graphs consumes them (``export_run_metadata``): another reader in the process sees only
what was recorded since either read.

>>> import tensorflow as tf
>>> from tfdevices.verify.run_metadata import PlacementWatch
>>> step = tf.function(lambda x: tf.reduce_sum(x * 2.0))
>>> with PlacementWatch(step) as watch:
...     _ = step(tf.ones([4]))
...     (new,) = watch.poll()
>>> new.report.devices, new.inputs
(('CPU:0',), ('(4,) float32',))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tfdevices.core.tf_door import import_tf
from tfdevices.runtime import hold_run_metadata, release_run_metadata
from tfdevices.verify.drift import PlacementChange, drift, inputs_of
from tfdevices.verify.records import PLUMBING, TRANSFER_OPS, OpPlacement, Transfer, program_name, report_device
from tfdevices.verify.report import PlacementReport

_SENDS = frozenset({"_Send", "_HostSend"})
_RECVS = frozenset({"_Recv", "_HostRecv"})
#: What a report read from placed graphs says of itself.
RUN_METADATA_NOTE = (
    "read from the runtime's placed graphs (run metadata) when the function was instantiated: no times; "
    "op types are the kernels' (a fused kernel is one op, named after its last op)"
)


@dataclass(frozen=True)
class Instantiation:
    """One new instantiation of a traced function, as TensorFlow placed it.

    Attributes:
        index: its number among the instantiations this watch saw, from 0.
        name: the traced function's name where the watch was given it (``"__inference_step_12"``),
            else ``"function K"``.
        inputs: its input signature as ``"(16, 8) float32"`` strings, where the watch was given the
            function (``()`` otherwise).
        report: its ops with their assigned devices, and its transfers (no times).
        change: against the previous instantiation this watch saw, ``None`` for the first.
    """

    index: int
    name: str
    inputs: tuple[str, ...]
    report: PlacementReport
    change: PlacementChange | None = None


def report_of_function_graph(function_graph: Any, *, dtype_name: Callable[[int], str] = str) -> PlacementReport:
    """The placement in one ``RunMetadata.FunctionGraphs``: each partition's nodes on their device.

    Args:
        function_graph: a ``RunMetadata.FunctionGraphs`` message (or one shaped like it).
        dtype_name: names a ``DataType`` enum value (``1 -> "float32"``).

    Returns:
        A report with the ops (function plumbing and transfers left out) and one transfer per
        ``_Send``, the tensor it sends and the devices on both sides; ``requested`` is the
        device the program asked for where the node kept its name.
    """
    asked = {node.name: node.device for node in function_graph.pre_optimization_graph.node}
    ops: list[OpPlacement] = []
    copies: list[Transfer] = []
    receivers: dict[str, str] = {}
    sends = []
    for partition in function_graph.partition_graphs:
        for node in partition.node:
            if node.op in _RECVS:
                receivers[node.attr["tensor_name"].s.decode()] = node.name
            elif node.op in _SENDS:
                sends.append(node)
            elif node.op not in PLUMBING and node.op not in TRANSFER_OPS:
                name = program_name(node.name)
                requested = report_device(asked[node.name]) if asked.get(node.name) else ""
                ops.append(OpPlacement(name, node.op, report_device(node.device), requested, 0, node.op, name))
    for node in sends:
        tensor = program_name(node.input[0]) if node.input else "?"
        copies.append(
            Transfer(
                report_device(node.attr["send_device"].s.decode()),
                report_device(node.attr["recv_device"].s.decode()),
                tensor if ":" in tensor else f"{tensor}:0",
                dtype_name(node.attr["T"].type) if "T" in node.attr else "",
                send_op=program_name(node.name),
                recv_op=program_name(receivers.get(node.attr["tensor_name"].s.decode(), "")),
            )
        )
    ops.sort(key=lambda op: (op.device, op.name))
    return PlacementReport(tuple(ops), tuple(copies), notes=(RUN_METADATA_NOTE,))


def placed_devices(function_graphs: Iterable[Any]) -> dict[str, str]:
    """Each op of these ``RunMetadata.FunctionGraphs`` (by the name the program wrote) and the device
    TensorFlow assigned it, from their partition graphs.
    """
    return {
        program_name(node.name): node.device
        for function_graph in function_graphs
        for partition in function_graph.partition_graphs
        for node in partition.node
        if node.device and node.op not in PLUMBING
    }


def _is_function(function_graph: Any) -> bool:
    """A traced function's instantiation, not one eager op's (``_Arg``, the op, ``_Retval``)."""
    return sum(node.op not in PLUMBING for node in function_graph.pre_optimization_graph.node) >= 2


class PlacementWatch:
    """Sees every new ``tf.function`` instantiation's placement from its partition graphs, without the profiler.

    Use as a context manager (or :meth:`start` / :meth:`stop`); call :meth:`poll` when a step
    may have traced (after each step of a custom loop costs one read of the runtime's
    buffer, a few tens of microseconds; given the functions, a poll costs nothing until one
    of them traced again).

    Args:
        functions: the ``tf.function`` objects to name (or plain functions that call them,
            such as Keras' ``model.train_function``: the ``tf.function`` objects they close over
            are found): their new traces name each new instantiation and give its input
            signature, and a poll reads the runtime only when one of them traced since the
            last poll. Without them every poll reads it.

    Attributes:
        seen: every :class:`Instantiation` polled so far.
        turned_on: whether this watch turned TensorFlow's run metadata on (it turns it off when
            it stops); ``False`` when another watch of this process had it on already.
    """

    def __init__(self, *functions: Any) -> None:
        self.functions = traced_functions(functions)
        self.seen: list[Instantiation] = []
        self.turned_on = False
        self._running = False
        self._traces: tuple[int, ...] = ()
        self._known: set[int] = set()  # the traced graphs already named
        self._context: Any = None
        self._dtype_name: Callable[[int], str] = str

    def start(self) -> PlacementWatch:
        """Turns TensorFlow's run metadata on (a process-wide setting) and drops what it recorded before."""
        if self._running:
            return self
        tf = import_tf()
        from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

        self._context = context
        self._dtype_name = lambda value: tf.dtypes.as_dtype(value).name
        self.turned_on = hold_run_metadata()
        context.export_run_metadata()  # what was recorded before the watch is not its business
        self._traces = self._tracing_counts()
        self._known = {id(g) for g in _graphs(self.functions)}
        self._running = True
        return self

    def stop(self) -> None:
        """Stops watching; turns run metadata off when no other watch of this process needs it."""
        if not self._running:
            return
        self._running = False
        release_run_metadata()

    @property
    def running(self) -> bool:
        """Whether the watch is on (between :meth:`start` and :meth:`stop`)."""
        return self._running

    def __enter__(self) -> PlacementWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _tracing_counts(self) -> tuple[int, ...]:
        return tuple(_traces(f) for f in self.functions)

    def poll(self) -> list[Instantiation]:
        """The functions instantiated since the last poll (or the start), each against the one before it."""
        if not self._running:
            return []
        if self.functions:
            counts = self._tracing_counts()
            if counts == self._traces and -1 not in counts:
                return []
            self._traces = counts
        metadata = self._context.export_run_metadata()
        graphs = [g for g in (metadata.function_graphs if metadata is not None else ()) if _is_function(g)]
        found = []
        for graph in graphs:
            found.append(self._instantiation(graph))
            self.seen.append(found[-1])
        return found

    def _instantiation(self, function_graph: Any) -> Instantiation:
        report = report_of_function_graph(function_graph, dtype_name=self._dtype_name)
        index = len(self.seen)
        traced = next((g for g in _graphs(self.functions) if id(g) not in self._known), None)
        if traced is not None:
            self._known.add(id(traced))
        name = str(getattr(traced, "name", "") or f"function {index}")
        source = traced if traced is not None else function_graph.pre_optimization_graph.SerializeToString()
        report = dataclasses.replace(report, graphs=((name, source),))
        inputs = inputs_of(report) if traced is not None else ()
        change = None
        if self.seen:
            before = self.seen[-1]
            change = drift(before.report, report, step=index, previous_step=before.index)
            change = dataclasses.replace(change, functions=(name,)) if change.retraced else change
        return Instantiation(index, name, inputs, report, change)


def traced_functions(functions: Iterable[Any], depth: int = 2) -> tuple[Any, ...]:
    """The ``tf.function`` objects among ``functions`` and those their closures hold (``depth`` levels).

    Keras' ``train_function`` is a plain function that calls ``tf.function`` objects it closes over.
    """
    found: list[Any] = []
    for function in functions:
        if callable(getattr(function, "experimental_get_tracing_count", None)):
            found.append(function)
        elif depth > 0:
            cells = getattr(function, "__closure__", None) or ()
            inner = []
            for cell in cells:
                try:
                    inner.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    continue
            found += [f for f in traced_functions([c for c in inner if callable(c)], depth - 1) if f not in found]
    return tuple(found)


def _traces(function: Any) -> int:
    """How many times ``function`` traced; ``-1`` when it does not say (then every poll reads)."""
    counter = getattr(function, "experimental_get_tracing_count", None)
    try:
        return int(counter()) if callable(counter) else -1
    except (TypeError, ValueError, AttributeError):
        return -1


def _graphs(functions: Iterable[Any]) -> list[Any]:
    """The graphs of every trace of ``functions``, in the order TensorFlow lists them."""
    out = []
    for function in functions:
        listing = getattr(function, "_list_all_concrete_functions", None)
        try:
            concrete = listing() if callable(listing) else []
        except (TypeError, ValueError, AttributeError):
            concrete = []
        out += [c.graph for c in concrete if getattr(c, "graph", None) is not None]
    return out
