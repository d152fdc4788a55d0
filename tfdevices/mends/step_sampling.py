"""A sampled step: TensorFlow's profiler around one step in many, read for the time spent waiting.

Used by the mends ``step_progress`` (a custom loop's step function) and ``fit_progress`` (``fit``'s
steps), which declare it: every rank of a multi-worker job runs TensorFlow's profiler
(``tf.profiler.experimental``, its defaults) around the same step, one in :func:`sample_every`
(the first sampled step only warms the profiler up: its first start takes about 0.1 s)
(a power of two: every rank samples the steps that are multiples of the largest spacing any rank
chose), and reads from the host plane of the profile how long the step's collective kernels took
from their start to their completion (the ranks that arrive first wait longest) and how long its
input pipeline's ops ran (the iterator's, inside ``fit``'s step). The result goes to the rank's
progress record (:meth:`tfdevices.jobs.progress.ProgressWriter.sample`). The spacing keeps a
sample's cost (the profiler's start and stop, the profile read) within 1% of the steps between
samples. A profiler already running (the user's, Keras' ``TensorBoard(profile_batch=...)``)
makes that step unsampled; one that cannot start at all ends the sampling, said once.

On a CPU a collective's kernel runs from its launch to its completion on the host; on a GPU
(NCCL) the host sees the same two events, around the GPU's work (not checked on a GPU here).

Off unless ``TFDEVICES_STEP_SAMPLING=1`` (``on``; ``0``/``off`` or unset: off). Measured on TensorFlow
2.21 (CPU, two workers under ``tfdevices launch``, Keras ``fit`` with rank 1 slow between steps, two busy
processes beside): the slow rank aborted in 2 of 31 jobs of about 200 steps here and in one CI run, in
``tf.profiler.experimental.stop`` (glibc: "double free or corruption", "munmap_chunk(): invalid
pointer") as the profiler session was freed; its peers then stopped at the next all-reduce. A job
whose rank may die for a report is not worth the report. Without samples the slow-rank report still
names a rank slow between steps or in fit's callbacks; a rank slow inside its step (a slower device,
its input read inside fit's step) is told apart only from sampled steps: turn them on to see it, and
know the risk.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from tfdevices.core.errors import EnvVarError
from tfdevices.core.units import env_switch

#: A sampled step costs at most this share of the steps between samples.
SAMPLE_BUDGET = 0.01
#: Steps between samples at the least (the first sample: this step, past the compiled first steps).
SAMPLE_EVERY_MIN = 16
_SAMPLE_EVERY_MAX = 1 << 20
_COLLECTIVES = ("Collective", "Nccl", "AllReduce", "AllGather", "ReduceScatter", "AllToAll")
_INPUT = frozenset(
    {"IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional", "MultiDeviceIteratorGetNextFromShard"}
)
_HOST = "/host:CPU"
SAMPLING_ENV = "TFDEVICES_STEP_SAMPLING"


def sampling_from_env(env: Mapping[str, str]) -> bool:
    """``TFDEVICES_STEP_SAMPLING`` (``1``/``on``; ``0``/``off`` or unset: off, the default).

    Raises:
        EnvVarError: it is set to anything else.

    >>> sampling_from_env({"TFDEVICES_STEP_SAMPLING": "on"}), sampling_from_env({})
    (True, False)
    """
    hint = f"{SAMPLING_ENV}=1 samples steps under TensorFlow's profiler; unset it for the default (off)."
    return env_switch(env, SAMPLING_ENV, default=False, hint=hint)


def sample_every(cost_s: float, step_s: float, budget: float = SAMPLE_BUDGET) -> int:
    """Steps between sampled steps: the least power of two (at least :data:`SAMPLE_EVERY_MIN`) that keeps a
    sample's cost within ``budget`` of the steps between samples. Powers of two: ranks that measured a
    different cost still sample the same steps (every multiple of the larger).

    >>> sample_every(0.003, 0.003)  # a 3 ms capture of a 3 ms step: at most every 100 steps
    128
    >>> sample_every(0.003, 0.05)
    16
    """
    if not (cost_s > 0 and step_s > 0) or math.isinf(cost_s):
        return SAMPLE_EVERY_MIN
    wanted = cost_s / (budget * step_s)
    every = SAMPLE_EVERY_MIN
    while every < wanted and every < _SAMPLE_EVERY_MAX:
        every *= 2
    return every


def _is_collective(kernel: str) -> bool:
    return any(part in kernel for part in _COLLECTIVES)


def read_waits(space: Any) -> tuple[float, float]:
    """``(wait_s, input_s)`` of a profile (an XSpace): the union of the collective kernels' spans from
    their start to their completion, and the input ops' time, on the host plane.

    A span is written when it ends, and the profiler may lose a thread's last spans: a collective whose
    completion (``ProcessAsync::Done``) is missing (seen in about one sample in three on a 2-core
    machine) is taken to complete when its executor step next runs a node (the first
    ``ExecutorState::Process`` of its context after the one that started it).
    """
    collective: list[tuple[int, int]] = []
    inputs: list[tuple[int, int]] = []
    for plane in space.planes:
        if plane.name == _HOST:
            _read_host(plane, collective, inputs)
    return _union(collective) / 1e12, _union(inputs) / 1e12


def _read_host(plane: Any, collective: list[tuple[int, int]], inputs: list[tuple[int, int]]) -> None:
    names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    starts: dict[int, tuple[int, str, int, int]] = {}  # _p -> (start, kernel, its step's context, its node's end)
    dones: dict[int, int] = {}
    runs: dict[int, list[int]] = {}  # context -> when each of its nodes began
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        node = (0, 0, 0)  # the innermost ExecutorState::Process so far on this line: (context, start, end)
        for event in sorted(line.events, key=lambda e: e.offset_ps):
            name = plane.event_metadata[event.metadata_id].name
            at = base + event.offset_ps
            if name == "ExecutorState::Process":
                context = int(_stats(event, names).get("_c", -1))
                node = (context, at, at + event.duration_ps)
                runs.setdefault(context, []).append(at)
            elif name == "ExecutorState::ProcessAsync::Start":
                stats = _stats(event, names)
                inside = node[1] <= at <= node[2]
                starts[int(stats.get("_p", -1))] = (
                    at,
                    str(stats.get("kernel_type", "")),
                    node[0] if inside else -1,
                    node[2] if inside else at,
                )
            elif name == "ExecutorState::ProcessAsync::Done":
                dones[int(_stats(event, names).get("_c", -1))] = at
            elif ":" in name and name.rpartition(":")[2] in _INPUT:
                inputs.append((at, at + event.duration_ps))
    for key, (began, kernel, context, node_end) in starts.items():
        done = dones.get(key)
        if done is None:  # its completion was lost: its step's next node
            done = min((t for t in runs.get(context, ()) if t >= node_end), default=None)
        if done is None or done < began:
            continue
        if _is_collective(kernel):
            collective.append((began, done))
        elif kernel in _INPUT:
            inputs.append((began, done))


def _stats(event: Any, names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stat in event.stats:
        kind = stat.WhichOneof("value")
        if kind is not None:
            value = getattr(stat, kind)
            out[names.get(stat.metadata_id, "")] = names.get(value, value) if kind == "ref_value" else value
    return out


def _union(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


class StepSampler:
    """Runs the profiler around the steps due for a sample, and writes what it read to the progress record."""

    def __init__(self, enabled: bool | None = None) -> None:
        """``enabled``: sample at all; ``None`` reads ``TFDEVICES_STEP_SAMPLING`` at the first step."""
        self.enabled = enabled
        self.every = SAMPLE_EVERY_MIN
        self.stopped: str | None = None  # why sampling ended, if it did
        self._dir: str | None = None
        self._began = self._step = self._cycle = 0.0
        self._running = False
        self._warm = False
        self.samples = 0  # steps sampled (the warm-up included)
        self.spent_s = 0.0  # what the samples cost in all: the profiler's start and stop, the read
        self._sums = [0.0, 0.0, 0.0]  # the sampled steps' seconds, wait and input, summed (the record's Waits)

    def due(self, step: int) -> bool:
        """Whether step ``step`` (its number, from 1) is sampled."""
        if self.enabled is None:
            try:
                self.enabled = sampling_from_env(os.environ)
            except EnvVarError as err:  # a bad value turns sampling off and says so; the job goes on
                self.enabled = False
                self._stop_sampling(str(err))
        return self.enabled and self.stopped is None and step >= SAMPLE_EVERY_MIN and step % self.every == 0

    def start(self, writer: Any) -> bool:
        """Starts the profiler before a step (``writer``: the rank's progress record, read for how long its
        last step took); ``False`` when it cannot (one already runs: this step is not sampled).
        """
        import tensorflow as tf  # noqa: PLC0415 (the worker runs TensorFlow: this runs inside its steps)

        if self._dir is None:
            memory = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
            self._dir = tempfile.mkdtemp(prefix="tfdevices-sample-", dir=memory)
            atexit.register(shutil.rmtree, self._dir, True)
        self._step, self._cycle = writer.last_step_s, writer.last_cycle_s
        self._began = time.perf_counter()
        try:
            tf.profiler.experimental.start(self._dir)
        except tf.errors.AlreadyExistsError:
            return False
        except Exception as err:  # noqa: BLE001 (a profiler that cannot start ends sampling, never the step)
            self._stop_sampling(f"{type(err).__name__}: {err}")
            return False
        self._running = True
        return True

    def finish(self, writer: Any, step: int) -> None:
        """Stops the profiler, reads the step's waits, writes them to ``writer``, spaces the next sample.

        The cost: the time from the profiler's start to the profile read, less an unsampled step's; the
        spacing keeps it within :data:`SAMPLE_BUDGET` of the whole steps (between steps included) until
        the next sample.
        """
        if not self._running:
            return
        self._running = False
        import tensorflow as tf  # noqa: PLC0415

        try:
            tf.profiler.experimental.stop()
            wait_s, input_s = read_waits(self._read_space())
        except Exception as err:  # noqa: BLE001 (a profile that cannot be read ends sampling, never the step)
            self._stop_sampling(f"{type(err).__name__}: {err}")
            return
        step_s = writer.last_step_s
        cost = max(0.0, time.perf_counter() - self._began - min(step_s, self._step or step_s))
        self.samples += 1
        self.spent_s += cost
        if not self._warm:  # the profiler's first start in a process takes about 0.1 s: that step is not read
            self._warm = True
            return
        sums = self._sums
        sums[0], sums[1], sums[2] = sums[0] + step_s, sums[1] + min(wait_s, step_s), sums[2] + min(input_s, step_s)
        writer.record_waits(step, sums[0], sums[1], sums[2], self.spent_s)
        self.every = max(self.every, sample_every(cost, self._cycle or step_s))

    def _read_space(self) -> Any:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: PLC0415

        space = xplane_pb2.XSpace()
        sessions = os.path.join(self._dir or "", "plugins", "profile")
        for session in os.listdir(sessions):
            here = os.path.join(sessions, session)
            for name in os.listdir(here):
                if name.endswith(".xplane.pb"):
                    with open(os.path.join(here, name), "rb") as f:
                        space.MergeFromString(f.read())
            shutil.rmtree(here, ignore_errors=True)
        return space

    def _stop_sampling(self, why: str) -> None:
        self.stopped = why
        print(f"tfdevices: no sampled steps in this rank (the slow-rank report infers waits): {why}", file=sys.stderr)


__all__ = [
    "SAMPLE_BUDGET",
    "SAMPLE_EVERY_MIN",
    "SAMPLING_ENV",
    "StepSampler",
    "read_waits",
    "sample_every",
    "sampling_from_env",
]
