"""What Python saw while a capture ran: eager ops and function calls, and each function's graph."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tfdevices.mends.capture_calls import calls_seen


@dataclass
class Call:
    """One op or function call seen by the op callback."""

    name: str
    is_function: bool
    device: str  # where its outputs (or, with none, its first input) live
    requested: str  # the device scope it was called in


@dataclass
class Recorder:
    """What :func:`capturing` records on the Python side while the block runs."""

    calls: list[Call] = field(default_factory=list)
    graphs: dict[str, Any] = field(default_factory=dict)
    traced: list[str] = field(default_factory=list)  # functions traced while recording: a first execution
    # op name -> the device TensorFlow assigned it when its function was instantiated (run metadata of
    # capture's warm-up): the device of a kernel the profiler's trace ties to no executor step
    placed: dict[str, str] = field(default_factory=dict)

    def on_op(
        self, op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None, graph: Any = None
    ) -> None:
        """The op callback: records eager ops and function calls, ignores graph construction."""
        if graph is not None:
            return
        from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

        name = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
        values = list(outputs or ()) or list(inputs or ())
        device = getattr(values[0], "device", "") if values else ""
        self.calls.append(Call(name, name in self.graphs, device or "", context.context().device_name or ""))


@contextlib.contextmanager
def record_calls(recorder: Recorder) -> Iterator[None]:
    """Records calls (an op callback) and the graph of every function called (the graphs and
    traces come from the mend ``capture_calls``, in place while the block runs).
    """
    from tensorflow.python.framework import op_callbacks  # noqa: PLC0415 (lazy TensorFlow)

    def on_call(name: str, graph: Any) -> None:
        if name not in recorder.graphs:
            recorder.graphs[name] = graph

    with calls_seen(on_call, recorder.traced.append):
        op_callbacks.add_op_callback(recorder.on_op)
        try:
            yield
        finally:
            op_callbacks.remove_op_callback(recorder.on_op)
