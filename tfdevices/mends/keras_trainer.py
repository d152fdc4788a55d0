"""What Keras 3's TensorFlow trainer does, found by looking at it: the detection the Keras mends share.

The mends ``keras_fit``, ``uneven_batch`` and ``fit_end`` change Keras 3's TensorFlow trainer
(``keras/src/backend/tensorflow/trainer.py``). Whether each defect is there is found here, before
any version is read, by running Keras' own function on stand-ins (a probe), where that costs no
TensorFlow start: a ``MultiWorkerMirroredStrategy`` made without its constructor (no cluster, no
runtime) whose ``reduce`` only notes how it was called, and replicas' values that are plain
objects. What Keras then asks of the strategy is what it would ask of a real one.

- :func:`logs_reduced_along_axis_0`: ``reduce_per_replica`` (``fit``'s step logs) calls
  ``strategy.reduce("MEAN", value, axis=0)`` across workers: a scalar has no axis 0
  (keras-team/keras#20585 on Keras 3.3 and 3.4: "Invalid reduction dimension 0").
- :func:`first_batch_reduced_whole`: ``_maybe_symbolic_build`` hands the first batch, a structure,
  to ``strategy.reduce("MEAN", ...)`` (keras-team/keras#20585 from Keras 3.5: "Attempt to convert a
  value (PerReplica ...)" across workers; keras-team/keras#19246 in one process: an ``AddN`` of
  replicas' batches of different shapes).

Each returns ``True`` (the defect is there), ``False`` (Keras' function no longer does it) or
``None`` (the function is missing, or the probe failed: it cannot tell). Keras' own functions are
reached under any mend's wrapper (``inspect.unwrap``). Imports Keras and TensorFlow (not their
runtime) when called; nothing at import.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

#: The module of Keras 3's TensorFlow trainer.
KERAS_TRAINER = "keras.src.backend.tensorflow.trainer"
#: The trainer class's names: ``TensorFlowTrainer`` (Keras 3.0 to 3.15), ``Trainer`` (the 3.16 nightlies).
_TRAINER_NAMES = ("TensorFlowTrainer", "Trainer")


def trainer_class(module: Any) -> Any:
    """Keras 3's TensorFlow trainer class in ``module`` (whatever this Keras calls it), or ``None``."""
    for name in _TRAINER_NAMES:
        cls = getattr(module, name, None)
        if isinstance(cls, type) and callable(getattr(cls, "fit", None)):
            return cls
    return None


def keras_version() -> str | None:
    """The Keras 3 in use (``keras.src.version``), or ``None`` where there is none."""
    try:
        from keras.src.version import __version__  # noqa: PLC0415 (lazy Keras)
    except ImportError:
        return None
    return str(__version__)


def _probe_strategy(tf: Any, calls: list[tuple[str, Any, Any]]) -> Any:
    """A multi-worker strategy that runs nothing: ``reduce`` notes ``(op, value, axis)`` and returns the value."""

    class Extended:
        def _in_multi_worker_mode(self) -> bool:
            return True

    class Probe(tf.distribute.MultiWorkerMirroredStrategy):
        extended = property(lambda self: Extended())

        def reduce(self, reduce_op: Any, value: Any, axis: Any = None) -> Any:
            calls.append((str(reduce_op), value, axis))
            return value

        def scope(self) -> Any:
            return contextlib.nullcontext()

    return object.__new__(Probe)  # no constructor: no cluster resolver, no runtime


def logs_reduced_along_axis_0(module: Any, tf: Any) -> bool | None:
    """Whether ``reduce_per_replica`` averages a step's scalar log across workers along axis 0 (defect 1).

    Args:
        module: Keras' ``keras.src.backend.tensorflow.trainer``.
        tf: TensorFlow.

    Returns:
        ``True``, ``False``, or ``None`` where it cannot tell.
    """
    reduce_per_replica = getattr(module, "reduce_per_replica", None)
    if not callable(reduce_per_replica):
        return None
    calls: list[tuple[str, Any, Any]] = []
    log = object()  # a scalar log of one worker (what a PerReplica of scalars would be)
    try:
        inspect.unwrap(reduce_per_replica)({"loss": log}, _probe_strategy(tf, calls), "auto")
    except Exception:  # noqa: BLE001 (Keras' code changed under the probe: it cannot tell)
        return None
    return any(value is log and axis == 0 for _, value, axis in calls)


def first_batch_reduced_whole(cls: Any, tf: Any) -> bool | None:
    """Whether ``_maybe_symbolic_build`` hands the first batch, a structure, to ``strategy.reduce`` (defect 2).

    Args:
        cls: Keras 3's TensorFlow trainer class (:func:`trainer_class`).
        tf: TensorFlow.

    Returns:
        ``True``, ``False`` (no such reduction: Keras 3.3 and 3.4 have no ``_maybe_symbolic_build``),
        or ``None`` where it cannot tell.
    """
    build = getattr(cls, "_maybe_symbolic_build", None)
    if build is None:
        return False
    try:
        from tensorflow.python.distribute.values import PerReplica  # noqa: PLC0415 (lazy TensorFlow)
    except ImportError:
        return None
    calls: list[tuple[str, Any, Any]] = []
    strategy = _probe_strategy(tf, calls)
    batch = (PerReplica((object(), object())), PerReplica((object(), object())))  # (x, y) on 2 replicas
    model = type("Model", (), {"_distribute_strategy": strategy, "distribute_strategy": strategy})()
    model._symbolic_build = lambda data_batch=None: None

    class Iterator:  # Keras 3.7 on: (begin, end, iterator); 3.5-3.6: enumerate_epoch() of (step, iterator)
        def __iter__(self) -> Any:
            return iter([(0, 0, iter([batch]))])

        def enumerate_epoch(self) -> Any:
            return iter([(0, iter([batch]))])

    try:
        inspect.unwrap(build)(model, iterator=Iterator())
    except Exception:  # noqa: BLE001 (Keras' code changed under the probe: it cannot tell)
        return None
    return any(value is batch for _, value, _ in calls)
