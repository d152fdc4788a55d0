"""Keras callbacks: log where a real training step of ``fit`` ran.

:class:`PlacementLogger` captures a training step of ``model.fit`` (or one every N steps) with
:func:`tfdevices.verify.capturing`, writes it with
:func:`tfdevices.tensorboard.write_placement`, and logs per-device memory
(``tf.config.experimental.get_memory_info``, where the device supports it) at
the end of every epoch. It works with Keras 3 and with ``tf_keras``; every write
opens, flushes and closes its own summary writer, so nothing is left unwritten
when training raises.

>>> import tempfile, keras, numpy as np
>>> from tfdevices.tensorboard.callbacks import PlacementLogger
>>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> logger = PlacementLogger(tempfile.mkdtemp(), at_step=1)
>>> _ = model.fit(np.ones((8, 4)), np.ones((8, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])
>>> logger.report.devices
('CPU:0',)
"""

from __future__ import annotations

import functools
import os
from typing import Any

from tfdevices.core._tf import import_tf
from tfdevices.core.devices import short_name
from tfdevices.core.errors import InputError
from tfdevices.tensorboard.writer import write_placement
from tfdevices.verify import PlacementReport, capturing

__all__ = ["PlacementLogger"]

_FRAMEWORKS = ("keras", "tf_keras")


def _framework(framework: str | None) -> str:
    """The explicit argument, else ``tf_keras`` when ``TF_USE_LEGACY_KERAS`` is set, else Keras 3."""
    if framework is None:
        legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")
        return "tf_keras" if legacy else "keras"
    if framework not in _FRAMEWORKS:
        raise InputError(f"PlacementLogger(framework={framework!r}): expected one of {', '.join(_FRAMEWORKS)}.",
                         hint="framework='keras' for Keras 3, 'tf_keras' for the legacy tf.keras.")
    return framework


@functools.cache
def _callback_class(framework: str) -> type:
    """``PlacementLogger`` combined with the framework's ``Callback`` base class."""
    if framework == "tf_keras":
        import tf_keras as module  # noqa: PLC0415 (lazy Keras)
    else:
        import keras as module  # noqa: PLC0415 (lazy Keras)
    return type(f"PlacementLogger[{framework}]", (PlacementLogger, module.callbacks.Callback),
                {"__module__": __name__, "__doc__": PlacementLogger.__doc__})


class PlacementLogger:
    """Keras callback: captures training step ``at_step`` of ``fit`` (and every ``every`` steps after) to TensorBoard.

    Args:
        logdir: the TensorBoard run directory to write into.
        at_step: the training step to capture, counted from 0 over the whole ``fit``
            (Keras' ``optimizer.iterations``); the default 1 is the first step after tracing.
        every: also capture every ``every`` steps after ``at_step`` (``None``: that step only);
            each capture is written at its own step, so the scalars become series over steps.
        name: the prefix of the summary tags.
        framework: ``"keras"`` (Keras 3) or ``"tf_keras"``; by default ``tf_keras`` when
            ``TF_USE_LEGACY_KERAS`` is set, else Keras 3.
        memory: whether to log memory at the end of each epoch, one series per allocator:
            each GPU's own, and one for the host CPU however many logical CPUs share it.

    Attributes:
        report: the latest captured :class:`~tfdevices.verify.PlacementReport`, ``None``
            until step ``at_step`` ran.
        steps: the steps captured so far.
        memory_devices: the allocators whose memory was logged (``"GPU:0"``, ``"CPU"`` for the
            host); devices without memory statistics are skipped.

    Raises:
        InputError: ``at_step`` or ``every`` is not a whole number in range, or ``framework`` is unknown.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> PlacementLogger:
        if cls is PlacementLogger:
            cls = _callback_class(_framework(kwargs.get("framework")))
        return super().__new__(cls)

    def __init__(self, logdir: str | os.PathLike[str], at_step: int = 1, *, every: int | None = None,
                 name: str = "placement", framework: str | None = None, memory: bool = True) -> None:
        super().__init__()
        if isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0:
            raise InputError(f"PlacementLogger(at_step={at_step!r}): expected a training step >= 0.",
                             hint="at_step=1 captures the first step after tracing.")
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise InputError(f"PlacementLogger(every={every!r}): expected a whole number of steps >= 1, or None.",
                             hint="every=100 captures steps at_step, at_step + 100, ...")
        self.logdir = os.fspath(logdir)
        self.at_step = at_step
        self.every = every
        self.steps: list[int] = []
        self.name = name
        self.framework = _framework(framework)
        self.memory = memory
        self.report: PlacementReport | None = None
        self.memory_devices: tuple[str, ...] = ()
        self._step = 0
        self._restore: tuple[Any, Any, Any] | None = None

    def _due(self, step: int) -> bool:
        if step < self.at_step:
            return False
        return step == self.at_step or (self.every is not None and (step - self.at_step) % self.every == 0)

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Wraps the model's train function for the one call that runs a step to capture."""
        if self._due(self._step):
            model = self.model
            original = model.train_function
            step = self._step

            def captured(*args: Any, **kwargs: Any) -> Any:
                model.train_function = original
                try:
                    with capturing() as cap:
                        return original(*args, **kwargs)
                finally:
                    self._write(cap.report, step)

            model.train_function = captured
            self._restore = (model, original, captured)
        self._step += 1

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """Puts the model's own train function back if the captured step never ran."""
        restore, self._restore = self._restore, None
        if restore is not None and restore[0].train_function is restore[2]:
            restore[0].train_function = restore[1]

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """Logs ``current`` and ``peak`` memory of every device that reports it."""
        if not self.memory:
            return
        tf = import_tf()
        stats = {}
        for device in tf.config.list_logical_devices():
            allocator = _allocator(short_name(device.name))
            if allocator in stats:
                continue  # logical CPUs share the host's allocator: its figures once, not once per CPU
            try:
                stats[allocator] = tf.config.experimental.get_memory_info(device.name)
            except (ValueError, RuntimeError):
                continue  # devices without allocator statistics (the CPU unless oneDNN's allocator runs)
        self.memory_devices = tuple(sorted(stats))
        if not stats:
            return
        writer = tf.summary.create_file_writer(self.logdir)
        try:
            with writer.as_default():
                for device, info in sorted(stats.items()):
                    for key in ("current", "peak"):
                        tf.summary.scalar(f"{self.name}/memory/{device}/{key}_bytes", float(info[key]), step=epoch)
        finally:
            writer.flush()
            writer.close()

    def _write(self, report: PlacementReport, step: int) -> None:
        self.report = report
        self.steps.append(step)
        write_placement(report, self.logdir, step=step, name=self.name)


def _allocator(device: str) -> str:
    """The allocator behind a logical device: each GPU (a logical split included) has its own;
    every logical CPU of a process uses the host's one, named ``"CPU"``."""
    return "CPU" if device.startswith("CPU:") else device
