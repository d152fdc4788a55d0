"""Mend ``keras_fit``: Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy``.

Keras 3 ``model.fit`` fails under ``MultiWorkerMirroredStrategy`` (keras-team/keras#20585:
"Attempt to convert a value (PerReplica ...) with an unsupported type"). In
``keras/src/backend/tensorflow/trainer.py``, two defects that only show with more than one worker:

1. ``TensorFlowTrainer._maybe_symbolic_build`` takes the first distributed batch and calls
   ``strategy.reduce("MEAN", batch, axis=None)`` on the whole ``(x, y)`` structure, only to learn
   its shapes and dtypes. ``Strategy.reduce`` takes one value, not a structure; one worker skips
   the reduction, but with several, CollectiveAllReduceStrategy hands the tuple of PerReplica
   values to ``convert_to_tensor``: "Attempt to convert a value (PerReplica ...) with an
   unsupported type". Mended: the shapes come from this worker's own replica values
   (``experimental_local_results``), the very shapes the reduction would have had, with no
   collective op on the data.
2. ``reduce_per_replica`` reduces the step's logs (scalars: loss, metric results) across
   workers with ``strategy.reduce("MEAN", v, axis=0)``: a scalar has no axis 0 ("Invalid
   reduction dimension 0 for input with 0 dimensions"). One worker takes the mean over
   replicas (``reduce_mean(local_results, axis=0)``: across replicas, not within a value);
   mended: the same across workers, ``strategy.reduce("MEAN", v, axis=None)``.

Nothing else changes: the training step, gradients, optimizer and callbacks are Keras' own.
Checked: on 2 workers, loss, metrics, validation metrics and weights equal tf_keras' fit on the
same workers and a single process's fit on the same global batches (tests/test_multiworker.py).

Detected: the functions it wraps exist (features first), in a Keras release it was checked against
(:data:`FIT_ADAPTER_KERAS`, versions second). Off: ``fit`` is left as Keras made it.
Undone: both functions restored.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.util
import sys
from typing import Any

from tfdevices.core._tf import import_tf
from tfdevices.mends.base import NOT_NEEDED, OFF, SKIPPED, Mend, NotApplicableError, register
from tfdevices.mends.exit_barrier import leave_together

KERAS_FIT_ISSUE = "keras-team/keras#20585"
KERAS3_FIT_HINT = (
    "train with tfdevices.training.train(strategy, model_fn, dataset, loss=..., optimizer_fn=...), "
    "whose custom loop works with any Keras 3, or set TF_USE_LEGACY_KERAS=1 (with tf_keras "
    "installed) before TensorFlow is imported to use tf_keras' fit."
)

#: Keras releases the adapter covers: from 3.5.0 (when ``_maybe_symbolic_build`` came) up to,
#: not including, 3.16. Checked release by release against their source: 3.5.0, 3.6.0, 3.8.0,
#: 3.10.0, 3.12.0, 3.13.0, 3.14.0 and 3.15.1 carry both defects in the same code.
FIT_ADAPTER_KERAS = ((3, 5), (3, 16))
INSTALL, NOT_COVERED = "install", "not_covered"
#: The module whose import installs the adapter (:func:`install_when_imported`).
KERAS_TRAINER = "keras.src.backend.tensorflow.trainer"


@dataclasses.dataclass(frozen=True)
class FitAdapter:
    """Whether tfdevices mends Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy``, and why.

    Attributes:
        keras_version: the Keras in use (``"3.15.1"``, or ``"tf_keras"``).
        state: ``"install"`` (mended), ``"not_needed"`` (tf_keras, whose fit works),
            ``"not_covered"`` (a Keras the adapter was not checked against: fit is left as Keras
            made it) or ``"off"`` (turned off with ``TFDEVICES_MENDS``).
        reason: for people; says what to do when fit is not mended.
    """

    keras_version: str
    state: str
    reason: str

    @property
    def fit_works(self) -> bool:
        """Whether plain ``model.fit`` is expected to work under ``MultiWorkerMirroredStrategy``."""
        return self.state in (INSTALL, NOT_NEEDED)


def decide_fit_adapter(keras_version: str, *, legacy: bool = False) -> FitAdapter:
    """Decides whether the fit adapter applies to this Keras (pure).

    Args:
        keras_version: ``keras.__version__``.
        legacy: whether ``TF_USE_LEGACY_KERAS`` selects tf_keras (Keras 2), whose ``fit`` works.

    Returns:
        A :class:`FitAdapter`.

    >>> decide_fit_adapter("3.15.1").state
    'install'
    >>> decide_fit_adapter("3.4.1").state, decide_fit_adapter("3.16.0").state
    ('not_covered', 'not_covered')
    >>> decide_fit_adapter("3.10.0", legacy=True).state
    'not_needed'
    """
    if legacy:
        return FitAdapter(
            "tf_keras",
            NOT_NEEDED,
            "TF_USE_LEGACY_KERAS selects tf_keras, whose fit works under MultiWorkerMirroredStrategy",
        )
    (lo_major, lo_minor), (hi_major, hi_minor) = FIT_ADAPTER_KERAS
    covered = f"{lo_major}.{lo_minor} to {hi_major}.{hi_minor - 1}"
    release = _release(keras_version)
    if release is not None and (lo_major, lo_minor) <= release < (hi_major, hi_minor):
        return FitAdapter(
            keras_version,
            INSTALL,
            f"Keras {keras_version} fit fails on many workers ({KERAS_FIT_ISSUE}); tfdevices "
            f"mends it (the adapter covers Keras {covered})",
        )
    return FitAdapter(
        keras_version,
        NOT_COVERED,
        f"Keras {_short(keras_version)} is not a release the tfdevices adapter for {KERAS_FIT_ISSUE} "
        f"was checked against (Keras {covered}), so model.fit is left as Keras made it and may "
        "fail on many workers with 'Attempt to convert a value (PerReplica ...)'. "
        f"HINT: {KERAS3_FIT_HINT}",
    )


def _release(version: str) -> tuple[int, int] | None:
    """``"3.15.1"`` -> ``(3, 15)``; ``None`` for what is not a release number."""
    parts = str(version).split(".")
    if len(parts) < 2 or not all(p.isascii() and p.isdigit() and len(p) <= 6 for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class KerasFit(Mend):
    """Wraps ``TensorFlowTrainer._maybe_symbolic_build`` and ``reduce_per_replica`` for many workers."""

    name = "keras_fit"
    changes = (
        "keras.src.backend.tensorflow.trainer: TensorFlowTrainer._maybe_symbolic_build and "
        "reduce_per_replica (wrapped; only multi-worker calls take the mended path)"
    )
    why = f"{KERAS_FIT_ISSUE}: Keras 3 fit fails under MultiWorkerMirroredStrategy"
    detects = (
        "the trainer functions it wraps exist (features), in a Keras it was checked against "
        f"({FIT_ADAPTER_KERAS[0][0]}.{FIT_ADAPTER_KERAS[0][1]} to "
        f"{FIT_ADAPTER_KERAS[1][0]}.{FIT_ADAPTER_KERAS[1][1] - 1}: versions)"
    )

    def __init__(self) -> None:
        super().__init__()
        self.adapter: FitAdapter | None = None
        self._originals: tuple[Any, ...] = ()

    def _check(self) -> tuple[str, str] | None:
        try:
            from keras.src.version import __version__ as keras_version  # noqa: PLC0415 (lazy Keras)
        except ImportError:  # no Keras 3: only tf_keras (whose fit works) can be in use
            self.adapter = decide_fit_adapter("", legacy=True)
            return NOT_NEEDED, self.adapter.reason
        # Keras 3 whatever TF_USE_LEGACY_KERAS says: that variable redirects tf.keras only, and
        # `import keras` (Ray Train's workers set it) is still Keras 3. Mending Keras 3's trainer
        # leaves tf_keras models alone: they train through tf_keras' own trainer.
        self.adapter = decide_fit_adapter(str(keras_version))
        if self.adapter.state != INSTALL:
            return SKIPPED, self.adapter.reason
        return None

    def _apply(self) -> str:
        assert self.adapter is not None
        tf = import_tf()
        from keras.src import tree  # noqa: PLC0415 (lazy Keras)
        from keras.src.backend.tensorflow import trainer as keras_trainer  # noqa: PLC0415 (lazy Keras)

        trainer_class: Any = getattr(keras_trainer, "TensorFlowTrainer", None)
        needed: tuple[Any, ...] = (
            getattr(trainer_class, "_maybe_symbolic_build", None),
            getattr(keras_trainer, "reduce_per_replica", None),
            getattr(keras_trainer, "_collective_all_reduce_multi_worker", None),
        )
        if not all(callable(f) for f in needed):
            self.adapter = FitAdapter(
                self.adapter.keras_version,
                NOT_COVERED,
                f"Keras {self.adapter.keras_version} no longer has the trainer code the tfdevices adapter for "
                f"{KERAS_FIT_ISSUE} mends; model.fit is left as Keras made it. HINT: {KERAS3_FIT_HINT}",
            )
            raise NotApplicableError(self.adapter.reason)
        symbolic_build, reduce_per_replica, multi_worker = needed

        def local_batch(strategy: Any, batch: Any) -> Any:
            """This worker's first replica's values: the shapes and dtypes a MEAN over replicas would have."""
            return tree.map_structure(
                lambda v: (
                    strategy.experimental_local_results(v)[0] if isinstance(v, tf.distribute.DistributedValues) else v
                ),
                batch,
            )

        def mended_symbolic_build(model: Any, iterator: Any = None, data_batch: Any = None) -> Any:
            strategy = model._distribute_strategy
            if iterator is None or strategy is None or not multi_worker(strategy):
                return symbolic_build(model, iterator=iterator, data_batch=data_batch)
            leave_together()
            # Keras 3.5-3.6 yield (step, iterator) from enumerate_epoch(); later releases iterate
            # (step, iterator) or (begin, end, iterator): the iterator is always last
            epochs = iterator.enumerate_epoch() if hasattr(iterator, "enumerate_epoch") else iterator
            for entry in epochs:
                data_batch = local_batch(strategy, next(entry[-1]))
                break
            return symbolic_build(model, data_batch=data_batch)

        def mended_reduce_per_replica(values: Any, strategy: Any, reduction: Any) -> Any:
            if reduction in ("auto", "mean") and multi_worker(strategy):
                return tree.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
            return reduce_per_replica(values, strategy, reduction)

        mended_symbolic_build.__wrapped__ = symbolic_build  # type: ignore[attr-defined]
        mended_reduce_per_replica.__wrapped__ = reduce_per_replica  # type: ignore[attr-defined]
        self._originals = (trainer_class, symbolic_build, keras_trainer, reduce_per_replica)
        trainer_class._maybe_symbolic_build = mended_symbolic_build
        keras_trainer.reduce_per_replica = mended_reduce_per_replica
        return self.adapter.reason

    def _undo(self) -> None:
        trainer_class, symbolic_build, keras_trainer, reduce_per_replica = self._originals
        trainer_class._maybe_symbolic_build = symbolic_build
        keras_trainer.reduce_per_replica = reduce_per_replica

    def fit_adapter(self) -> FitAdapter:
        """Applies the mend (where on) and says what it means for ``fit``."""
        status = self.apply()
        if status.state == OFF:
            return FitAdapter(
                self.adapter.keras_version if self.adapter else "?",
                OFF,
                f"the keras_fit mend is turned off, so Keras 3 model.fit is left as Keras made it and fails on "
                f"many workers ({KERAS_FIT_ISSUE}). HINT: {KERAS3_FIT_HINT}",
            )
        assert self.adapter is not None
        return self.adapter


MEND = register(KerasFit())


def install_fit_adapter() -> FitAdapter:
    """Mends Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy`` where it is known broken.

    :func:`tfdevices.build_strategy` calls it when it builds a multi-worker strategy. It
    checks the installed Keras at run time (:func:`decide_fit_adapter`) and that the two
    functions it wraps are there; a Keras it does not cover is left alone, with one
    warning that says so. Wraps only multi-worker calls; one process keeps Keras' code path.
    Idempotent. The mend is ``keras_fit`` (``TFDEVICES_MENDS=keras_fit`` turns it off).

    Returns:
        A :class:`FitAdapter`: what was done, and why.
    """
    return MEND.fit_adapter()


def install_when_imported() -> None:
    """Mends Keras 3 ``fit`` (:func:`install_fit_adapter`) as soon as Keras' TensorFlow trainer is imported.

    For scripts that build their own ``tf.distribute.MultiWorkerMirroredStrategy()``: the
    workers ``tfdevices launch`` starts call it at start-up, so they need no change.
    Importing this costs nothing: Keras, TensorFlow and the mend load when the program imports
    Keras' trainer itself; it is mended at once when that has happened. Idempotent.
    """
    if not MEND.enabled():
        return
    if KERAS_TRAINER in sys.modules:
        install_fit_adapter()
        return
    if not any(isinstance(finder, _TrainerImported) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TrainerImported())


class _TrainerImported(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of Keras' TensorFlow trainer to mend it once it has run."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != KERAS_TRAINER:
            return None
        sys.meta_path.remove(self)  # once: the mend imports the trainer's package itself
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            install_fit_adapter()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


__all__ = [
    "FIT_ADAPTER_KERAS",
    "INSTALL",
    "KERAS3_FIT_HINT",
    "KERAS_FIT_ISSUE",
    "KERAS_TRAINER",
    "MEND",
    "NOT_COVERED",
    "FitAdapter",
    "KerasFit",
    "decide_fit_adapter",
    "install_fit_adapter",
    "install_when_imported",
]
