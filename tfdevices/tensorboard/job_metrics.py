"""The job's metrics as TensorBoard scalars: each rank's steps and their split, and its GPUs, one run per rank.

:class:`JobMetricsLogger` is a Keras callback (Keras 3 and ``tf_keras``) that writes the series
``tfdevices launch --metrics`` serves to Prometheus (:data:`tfdevices.jobs.metrics.SERIES`) as scalars in
``logdir/rank{R}``: this rank's steps, step time, the split of its step (``tfdevices_rank_split_seconds/wait``
...), its wait share and slow-rank score, whether it is the slow rank, and for each of its GPUs, from NVML,
``hw_gpu_utilization/gpu{I}`` ... The rank series are this rank's row of the job watch's latest look, which the
watcher leaves beside the ranks' progress records (``job.json``: :mod:`tfdevices.jobs.watch`; under ``tfdevices
launch``, ``srun`` or Ray Train, where :func:`tfdevices.build_strategy` opens the records); nothing is computed
here. Without a look on this machine, only the GPUs'.

The training thread only looks at the clock: every ``every_s`` seconds the look and NVML are read and the
scalars written on a background thread (:class:`~tfdevices.tensorboard.worker.Worker`).

>>> import tempfile, keras, numpy as np
>>> from tfdevices.tensorboard.job_metrics import JobMetricsLogger
>>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> logger = JobMetricsLogger(tempfile.mkdtemp(), env={"RANK": "1", "WORLD_SIZE": "2"})
>>> _ = model.fit(np.ones((8, 4)), np.ones((8, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])
>>> logger.run_dir.endswith("rank1"), logger.written  # no job's watch, no GPU here: nothing to write
(True, 0)
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from tfdevices.core.errors import InputError
from tfdevices.core.units import short_repr
from tfdevices.jobs.env import launch_info
from tfdevices.jobs.metrics import GpuReading, gpu_reader, own_gpus, rank_values
from tfdevices.jobs.progress import progress_dir
from tfdevices.jobs.watch import read_snapshot_row
from tfdevices.tensorboard.callbacks import keras_framework, with_callback_base
from tfdevices.tensorboard.worker import Worker
from tfdevices.tensorboard.writer import EventWriter


class JobMetricsLogger:
    """Keras callback: this rank's step series and its GPUs' as TensorBoard scalars in ``logdir/rank{R}``.

    Args:
        logdir: the TensorBoard log directory (each rank writes its own run, ``rank{R}``).
        every_s: seconds between two samples (one more when training ends).
        framework: ``"keras"`` (Keras 3) or ``"tf_keras"``; by default ``tf_keras`` when
            ``TF_USE_LEGACY_KERAS`` is set.
        env: the environment the rank, the job's records and the GPUs are read from (default ``os.environ``).
        nvml_module: a ``pynvml``-like module (tests); ``None``: NVML.

    Raises:
        InputError: ``every_s`` is not a number of seconds > 0, or ``framework`` is unknown.
        LaunchError: the environment names this rank badly.

    Each scalar's step is this rank's steps finished (from the watch's look; without one, the batches
    seen by this callback).
    """

    model: Any  # Keras' Callback.set_model sets it

    def __new__(cls, *args: Any, **kwargs: Any) -> JobMetricsLogger:
        """An instance of the callback class of the chosen Keras (``framework=``)."""
        if cls is JobMetricsLogger:
            cls = with_callback_base(JobMetricsLogger, keras_framework(kwargs.get("framework")))
        return super().__new__(cls)

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        every_s: float = 10.0,
        *,
        framework: str | None = None,
        env: Mapping[str, str] | None = None,
        nvml_module: Any = None,
    ) -> None:
        super().__init__()
        if isinstance(every_s, bool) or not isinstance(every_s, (int, float)) or not 0 < every_s < math.inf:
            raise InputError(
                f"JobMetricsLogger(every_s={short_repr(every_s)}): not a number of seconds > 0.",
                hint="e.g. every_s=10.",
            )
        env = os.environ if env is None else env
        self.framework = keras_framework(framework)
        self.every_s = float(every_s)
        self.rank = launch_info(env).rank
        self.run_dir = os.path.join(os.fspath(logdir), f"rank{self.rank}")
        self.records_dir = progress_dir(env)
        self.gpus = own_gpus(env)
        self._read_gpus: Callable[[], Mapping[int, GpuReading]] | None = (
            gpu_reader(env, nvml_module) if self.gpus else None
        )
        self._worker = Worker("job-metrics")
        self._writer: EventWriter | None = None  # one event file per run, opened at the first sample
        self._next = 0.0
        self._batches = 0
        self.written = 0

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Counts the batch; every ``every_s`` seconds, samples on the background thread."""
        self._batches += 1
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every_s
            self._worker.submit(functools.partial(self._sample, self._batches))

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """One last sample, then waits until every sample is written; raises what a write raised."""
        self._worker.submit(functools.partial(self._sample, self._batches))
        self._worker.submit(self._close)
        self._worker.flush()
        errors = self._worker.take_errors()
        if errors:
            raise errors[0]

    def scalars(self, batches: int = 0) -> tuple[int, dict[str, float]]:
        """This rank's step and its series now: tag -> value (its row of the watch's latest look, and NVML); the
        step is its steps finished in that look, else ``batches``.
        """
        row = read_snapshot_row(self.records_dir, self.rank) if self.records_dir else None
        values = rank_values(row) if row is not None else {}
        step = row.steps if row is not None else batches
        gpus = self._read_gpus() if self._read_gpus is not None else {}
        for index in self.gpus:
            if index in gpus:
                for name, value in gpus[index].values().items():
                    values[f"{name}/gpu{index}"] = value
        return step, values

    def _sample(self, batches: int) -> None:
        step, values = self.scalars(batches)
        if not values:
            return
        if self._writer is None:
            self._writer = EventWriter(self.run_dir)
        for tag, value in sorted(values.items()):
            self._writer.scalar(tag, value, step)
        self._writer.flush()
        self.written += 1

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
