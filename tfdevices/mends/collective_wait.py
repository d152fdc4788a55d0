"""Mend ``collective_wait``: every step of a multi-worker job measures how long it waited in its collectives.

A collective (a step's all-reduce) holds every rank until the last one arrives: the ranks that arrive
first wait longest, and the one the others wait for waits least. That wait is what tells a rank slower
inside its step (a slower or busier device) from the others, and it cannot be seen from the outside of
the step. This mend wraps ``CollectiveReplicaLauncher.all_reduce`` and ``._all_gather``
(``tensorflow/python/distribute/cross_device_utils.py``: every collective of ``MultiWorkerMirroredStrategy``,
gradients in ``fit`` and ``ReplicaContext.all_reduce`` in a custom loop alike, goes through one of them):
while a step function is traced, each collective gets two ``tf.timestamp()`` ops on its task's CPU, one
when its input is ready and one when its output is, and their difference is added to a small local
float64 variable of this process (never a variable of the strategy: no collective of its own). Eager
collectives inside a step are timed by the host's clock. The hooked-collectives way of FALCON and
Greyhound (ATC'25); no profiler runs.

Every few steps (:func:`read_every`: a power of two, so that every rank reads after the same steps)
the step hooks (``step_progress``, ``fit_progress``) read the variable after the step and write the sum
with the steps' own time to the rank's progress record (:meth:`~tfdevices.jobs.progress.ProgressWriter.record_waits`);
the job's watch compares the ranks' waits over the steps all of them read alike.

What is measured: the time from a collective's input being ready on the host's executor to its output
being ready there, summed over a step's collectives (stateful ops without a resource are run in program
order by ``tf.function``: each collective's span begins no earlier than the previous one's end, so
concurrent collectives are not counted twice). On a CPU that is the collective from its start to its end.
On a GPU the two timestamps are taken by the task's CPU when TensorFlow's executor sees the collective's
input tensor and its output tensor ready: the span covers the NCCL kernel's launch, its transfer and its
wait for the other ranks; it is not the device's own kernel time (not checked on a GPU here). Not
measured: collectives outside the steps (an evaluation's, a callback's), collectives compiled by XLA
(``jit_compile=True``: left as they are), and a rank's compute inside the step, which is what remains.

Cost: two timestamps, a subtraction and an add on a CPU variable per collective (benchmarks/RESULTS.md),
and one read of the variable every :func:`read_every` steps. Detected: the two launcher methods exist.
Applied where a multi-worker job reports progress. Off: the slow-rank report infers the waits from the
time between steps (a rank slow inside its step is then not told apart). Undone: the methods restored
(step functions traced since keep their timestamps).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from tfdevices.core.tf_door import import_tf
from tfdevices.mends.base import Finding, Mend, needed, register, unknown, without_tensorflow

#: Steps between reads at the least: the first read after this step (past the compiled first steps).
READ_EVERY_MIN = 16
#: A read costs at most this share of the steps between reads ...
READ_BUDGET = 0.002
#: ... unless that would space the reads by more steps than last this long (seconds).
READ_AT_LEAST_S = 1.0
_READ_EVERY_MAX = 1 << 20
_HOOKED = ("all_reduce", "_all_gather")
_INPUT = ("get_next_as_list", "get_next_as_optional_list")


def read_every(cost_s: float, step_s: float, budget: float = READ_BUDGET, most_s: float = READ_AT_LEAST_S) -> int:
    """Steps between reads: the least power of two (at least :data:`READ_EVERY_MIN`) that keeps a read's cost
    within ``budget`` of the steps between reads, and no more than the least power of two whose steps last
    ``most_s`` (the waits are read about once a second at the least, however a busy machine slows a read).
    Powers of two: ranks that measured another cost still read after the same steps (every multiple of the larger).

    >>> read_every(0.00005, 0.001)  # a 50 us read of 1 ms steps: at least every 25 steps
    32
    >>> read_every(0.00005, 0.05)
    16
    >>> read_every(0.005, 0.014)  # a read slowed to 5 ms, 14 ms steps: every 128 steps (1.8 s), not 256
    128
    """
    if not (cost_s > 0 and step_s > 0) or math.isinf(cost_s):
        return READ_EVERY_MIN
    wanted = min(cost_s / (budget * step_s), most_s / step_s)
    every = READ_EVERY_MIN
    while every < wanted and every < _READ_EVERY_MAX:
        every *= 2
    return every


class CollectiveWait(Mend):
    """Wraps ``CollectiveReplicaLauncher.all_reduce`` and ``._all_gather`` to time each collective of a step."""

    name = "collective_wait"
    changes = (
        "tensorflow's CollectiveReplicaLauncher.all_reduce and ._all_gather (cross_device_utils.py), wrapped: "
        "inside a step, two tf.timestamp() ops around each collective add its span to a local CPU variable"
    )
    why = (
        "the rank the others wait for inside its step (a slower device) shows only in how long each rank waits "
        "in the collectives; TensorFlow's profiler, which measured it, aborted a rank when stopped"
    )
    detects = "cross_device_utils.CollectiveReplicaLauncher.all_reduce and ._all_gather exist"

    def __init__(self) -> None:
        super().__init__()
        self.writer: Any = None
        self._originals: dict[str, Any] = {}
        self._total: Any = None  # two float64 variables: seconds in collectives, seconds waiting for input
        self._eager_s = 0.0  # eager collectives inside steps, timed by the host's clock
        self._eager_lock = threading.Lock()
        self.every = READ_EVERY_MIN
        self.reads = 0
        self.spent_s = 0.0  # what the reads cost in all
        self._costs: list[float] = []  # the latest reads' costs but the first's (which makes TensorFlow's read op)
        self.stopped: str | None = None  # why the reads ended, if they did

    def _check(self) -> Finding:
        absent = without_tensorflow()
        if absent is not None:
            return absent
        import_tf()
        from tensorflow.python.distribute import cross_device_utils  # noqa: PLC0415

        launcher = getattr(cross_device_utils, "CollectiveReplicaLauncher", None)
        missing = [m for m in _HOOKED if not callable(getattr(launcher, m, None))]
        if missing:
            return unknown(
                f"this TensorFlow's CollectiveReplicaLauncher has no {', '.join(missing)}",
                "a rank slow inside its step is not told apart; the slow-rank report reads the time between steps.",
            )
        return needed(self.detects)

    def _apply(self) -> str:
        from tensorflow.python.distribute import cross_device_utils, input_lib  # noqa: PLC0415

        launcher = cross_device_utils.CollectiveReplicaLauncher
        for method in _HOOKED:
            original = self._originals[method] = vars(launcher)[method]
            setattr(launcher, method, self._timed(original))
        iterator = getattr(input_lib, "_SingleWorkerDatasetIteratorBase", None)
        if iterator is None or any(not callable(vars(iterator).get(m)) for m in _INPUT):
            return "the collectives of a step add their time to this rank's record (its input's wait: not measured)"
        for method in _INPUT:
            original = self._originals[method] = vars(iterator)[method]
            setattr(iterator, method, self._input_timed(original))
        return "the collectives of a step, and its wait for its input, add their time to this rank's record"

    def _undo(self) -> None:
        from tensorflow.python.distribute import cross_device_utils, input_lib  # noqa: PLC0415

        for method, original in self._originals.items():
            owner = (
                cross_device_utils.CollectiveReplicaLauncher
                if method in _HOOKED
                else input_lib._SingleWorkerDatasetIteratorBase
            )
            setattr(owner, method, original)
        self._originals.clear()

    def _in_step(self) -> bool:
        writer = self.writer
        return writer is not None and writer.phase == "step" and self.applied

    def _timed(self, original: Any) -> Any:
        mend = self

        def timed(launcher: Any, input_tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not mend._in_step():
                return original(launcher, input_tensor, *args, **kwargs)
            return mend._around(original, launcher, input_tensor, args, kwargs)

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        return timed

    def _input_timed(self, original: Any) -> Any:
        mend = self

        def timed(iterator: Any, *args: Any, **kwargs: Any) -> Any:
            if not mend._in_step():
                return original(iterator, *args, **kwargs)
            return mend._input_around(original, iterator, args, kwargs)

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        return timed

    def _around(self, original: Any, launcher: Any, input_tensor: Any, args: Any, kwargs: Any) -> Any:
        """The collective between two timestamps (graph), or between two reads of the host's clock (eager)."""
        tf = import_tf()
        from tensorflow.python.eager import context  # noqa: PLC0415
        from tensorflow.python.ops import control_flow_util  # noqa: PLC0415

        if context.executing_eagerly():
            began = time.perf_counter()
            try:
                return original(launcher, input_tensor, *args, **kwargs)
            finally:
                with self._eager_lock:
                    self._eager_s += time.perf_counter() - began
        graph = tf.compat.v1.get_default_graph()
        if control_flow_util.GraphOrParentsInXlaContext(graph):
            return original(launcher, input_tensor, *args, **kwargs)  # XLA compiles no timestamp: left as it is
        total = self._variables(tf, launcher)[0]
        with tf.device(total.device):
            # one chain, the collective's own: its input, the first timestamp, the collective, the second timestamp
            # and the add, then its output. Ops beside the collective instead of in its chain would each make
            # TensorFlow's executor hand work to another thread (benchmarks/RESULTS.md: 2% of a 4.5 ms step)
            with tf.control_dependencies([input_tensor]):
                began = tf.timestamp()
            with tf.control_dependencies([began]):
                input_tensor = tf.identity(input_tensor)
            output = original(launcher, input_tensor, *args, **kwargs)
            with tf.control_dependencies([output]):
                added = total.assign_add(tf.timestamp() - began, read_value=False)
            with tf.control_dependencies([added]):
                return tf.identity(output)

    def _input_around(self, original: Any, iterator: Any, args: Any, kwargs: Any) -> Any:
        """A step's read of its batch between two timestamps: from the step's beginning (the first has no input)
        to its batch being ready. Inside a step function only (an eager read is outside the step).
        """
        tf = import_tf()
        from tensorflow.python.ops import control_flow_util  # noqa: PLC0415

        graph = tf.compat.v1.get_default_graph()
        if tf.executing_eagerly() or control_flow_util.GraphOrParentsInXlaContext(graph):
            return original(iterator, *args, **kwargs)
        total = self._variables(tf, iterator, "_worker")[1]
        with tf.device(total.device):
            began = tf.timestamp()
        batch = original(iterator, *args, **kwargs)
        flat = tf.nest.flatten(batch, expand_composites=True)
        with tf.device(total.device), tf.control_dependencies([t for t in flat if isinstance(t, tf.Tensor)]):
            added = total.assign_add(tf.timestamp() - began, read_value=False)
        with tf.control_dependencies([added]):  # the batch comes after the add: one chain (see _around)
            flat = [tf.identity(t) if isinstance(t, tf.Tensor) else t for t in flat]
        return tf.nest.pack_sequence_as(batch, flat, expand_composites=True)

    def _variables(self, tf: Any, owner: Any, attribute: str = "_device") -> tuple[Any, Any]:
        """The two local float64 variables the spans add to (seconds in collectives, seconds waiting for input):
        made once, outside any function, on this task's CPU.
        """
        if self._total is None:
            from tensorflow.python.ops import resource_variable_ops  # noqa: PLC0415

            spec = tf.DeviceSpec.from_string(str(getattr(owner, attribute, "") or ""))
            cpu = spec.replace(device_type="CPU", device_index=0).to_string()
            with tf.init_scope(), tf.device(cpu):
                # ResourceVariables made directly: no strategy's variable creator turns them into mirrored ones
                self._total = tuple(
                    resource_variable_ops.ResourceVariable(0.0, dtype=tf.float64, trainable=False, name=name)
                    for name in ("tfdevices_collective_wait", "tfdevices_input_wait")
                )
        return self._total

    def after_step(self, writer: Any, step: int) -> None:
        """After step ``step`` (its number from 1), every :attr:`every` steps: reads the sums into ``writer``'s
        record, and spaces the next read by what this one cost. Never raises: a read that fails ends the reads,
        said once.
        """
        if step < READ_EVERY_MIN or step % self.every or self.stopped is not None or not self.applied:
            return
        began = time.perf_counter()
        try:
            values = (0.0, 0.0) if self._total is None else tuple(float(v.numpy()) for v in self._total)
        except Exception as err:  # noqa: BLE001 (a read that fails ends the reads, never the step)
            self.stopped = f"{type(err).__name__}: {err}"
            logging.getLogger(__name__).warning(
                "tfdevices: this rank's collective waits are no longer read: %s", self.stopped
            )
            return
        cost = time.perf_counter() - began
        self.reads += 1
        self.spent_s += cost
        with self._eager_lock:
            wait = values[0] + self._eager_s
        writer.record_waits(step, writer.steps_s, wait, values[1], self.spent_s)
        if self.reads > 1:  # the spacing follows the median of the latest reads' costs
            self._costs = [*self._costs[-7:], cost]
            typical = sorted(self._costs)[len(self._costs) // 2]  # a read slowed by a busy machine is no measure
            self.every = read_every(typical, writer.last_cycle_s or writer.last_step_s)


MEND = register(CollectiveWait())
