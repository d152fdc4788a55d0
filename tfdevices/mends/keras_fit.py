"""Mend ``keras_fit``: Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy``.

Keras 3 ``model.fit`` fails under ``MultiWorkerMirroredStrategy`` (keras-team/keras#20585), or on
older releases trains and reports wrongly. Five defects in Keras' TensorFlow backend, each in some
releases (1 and 2 are the failures; each is detected by its own feature):

1. ``reduce_per_replica`` (every Keras 3 from 3.3) reduces the step's logs (scalars: loss, metric
   results) across workers with ``strategy.reduce("MEAN", v, axis=0)``: a scalar has no axis 0
   ("Invalid reduction dimension 0 for input with 0 dimensions"). One worker takes the mean over
   replicas (``reduce_mean(local_results, axis=0)``: across replicas, not within a value);
   mended: the same across workers, ``strategy.reduce("MEAN", v, axis=None)``. Keras 3.3 and 3.4
   fail here, at the first step's logs.
2. ``TensorFlowTrainer._maybe_symbolic_build`` (from Keras 3.5) takes the first distributed batch
   and calls ``strategy.reduce("MEAN", batch, axis=None)`` on the whole ``(x, y)`` structure, only
   to learn its shapes and dtypes. ``Strategy.reduce`` takes one value, not a structure; one worker
   skips the reduction, but with several, CollectiveAllReduceStrategy hands the tuple of
   PerReplica values to ``convert_to_tensor``: "Attempt to convert a value (PerReplica ...) with
   an unsupported type". Keras 3.5 and later fail here, before the first step. Mended: the shapes
   come from this worker's own replica values (``experimental_local_results``), the very shapes the
   reduction would have had, with no collective op on the data. Keras 3.3 and 3.4 have no such
   function (the model is built when the train step is traced): nothing to mend there.
3. ``TFOptimizer._distributed_tf_update_step`` (Keras 3.3 and 3.4, ``keras/src/backend/tensorflow/
   optimizer.py``) sums the gradients over replicas inside ``maybe_merge_call``; wherever TensorFlow
   uses a merge call (any strategy on CPUs, or GPUs without XLA) that runs in the cross-replica
   context, where ``get_replica_context()`` is ``None``, so nothing is summed: each replica applies
   its own gradient and the workers' weights drift apart silently (loss still falls). Keras 3.5 sums
   them before the merge call. Mended: in the merge call they are summed with
   ``distribution.extended.batch_reduce_to(SUM, ...)``, as tf_keras does, and ``fit`` builds the
   model, its compiled metrics and optimizer (``_symbolic_build``, from the iterator's
   ``element_spec``) before its step is traced, as Keras 3.5 does (built inside the traced step
   with the sum, TensorFlow fails: "You must feed a value for placeholder tensor"). Detected by the
   feature itself: ``_distributed_tf_update_step`` calls ``_all_reduce_sum_gradients``.
4. ``TensorFlowTrainer.train_step`` (Keras 3.3 to 3.7) takes the gradients of each replica's mean
   loss, which the optimizer then sums over the replicas: every step is the replica count times a
   one-device step (Keras 3.8 scales the loss by ``1 / num_replicas_in_sync``,
   ``losses.loss.scale_loss_for_distribution``). Mended: Keras 3.8's scaling, applied where
   ``train_step`` hands the loss to ``optimizer.scale_loss``; the loss Keras reports is unscaled,
   as in 3.8. Detected: ``keras.src.losses.loss`` has no ``scale_loss_for_distribution``.
5. Keras 3.3 to 3.6 create their TensorFlow variables with no ``aggregation`` (3.7 added it): a
   metric's variables are each replica's own, and ``_get_metrics_result_or_logs`` hands the epoch's
   History the first local replica's metrics (on 2 workers: rank 0's accuracy 0.875, rank 1's
   0.719, one process' 0.797). Mended: under a strategy of several replicas the epoch's logs are
   the last step's, which ``reduce_per_replica`` has averaged across replicas and workers (equal
   shards: the one-process value). Detected: Keras' TensorFlow
   ``Variable`` has no ``_map_aggregation``.

Nothing else changes: the training step, gradients, optimizer and callbacks are Keras' own.
Checked: on 2 workers, loss, metrics, validation metrics and weights equal tf_keras' fit on the
same workers and a single process's fit on the same global batches (tests/test_multiworker.py), on
Keras 3.3.3 (TensorFlow 2.16.2), the newest Keras and the pinned Keras nightly (CI's oldest,
newest and nightly legs). Keras 3.16's nightlies call the trainer class ``Trainer``, not
``TensorFlowTrainer``: it is found by what it is (:func:`~tfdevices.mends.keras_trainer.trainer_class`).

Detected: the defect first, by running Keras' own functions on a strategy that runs nothing
(:mod:`tfdevices.mends.keras_trainer`: no TensorFlow start): ``reduce_per_replica`` asks for a
mean along axis 0 of a scalar log across workers (defect 1), ``_maybe_symbolic_build`` hands the
whole first batch to ``strategy.reduce`` (defect 2); 3 to 5 by the code that has them. Present:
mended, whatever the release. Gone: left alone, and said so. Where it cannot tell (Keras' trainer
moved, the probe failed): left alone, with one warning whose HINT says what to do. Versions
second: a Keras outside the releases checked (:data:`CHECKED`, 3.3 to 3.15) is said to be so in
the mend's status. No Keras 3 (tf_keras only, whose ``fit`` works): nothing to mend. Off: ``fit``
is left as Keras made it. Undone: what was wrapped is restored.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import threading
from typing import Any

from tfdevices.core.tf_door import import_tf
from tfdevices.mends import keras_trainer
from tfdevices.mends.base import (
    APPLIED,
    NOT_NEEDED,
    OFF,
    Checked,
    Finding,
    Mend,
    MendStatus,
    NotApplicableError,
    Replaced,
    is_installed,
    needed,
    not_needed,
    register,
    unknown,
    when_imported,
    without_tensorflow,
)
from tfdevices.mends.exit_barrier import leave_together

KERAS_FIT_ISSUE = "keras-team/keras#20585"
KERAS3_FIT_HINT = (
    "train with tfdevices.training.train(strategy, model_fn, dataset, loss=..., optimizer_fn=...), "
    "whose custom loop works with any Keras 3, or set TF_USE_LEGACY_KERAS=1 (with tf_keras "
    "installed) before TensorFlow is imported to use tf_keras' fit."
)

#: Keras releases the adapter was checked against, release by release against their source: from
#: 3.3.0 (when ``reduce_per_replica`` took the ``"mean"`` that fails across workers) up to, not
#: including, 3.16. 3.3.3 and 3.4.1 carry defect 1 only (no ``_maybe_symbolic_build``); 3.5.0, 3.6.0,
#: 3.8.0, 3.10.0, 3.12.0, 3.13.0, 3.14.0 and 3.15.1 carry both in the same code. Run on 2 workers:
#: 3.3.3 (TensorFlow 2.16.2), 3.15.1 and the 3.16 nightly CI pins (``keras-nightly``). A release
#: outside it is mended where the defect is found, and said to be unchecked.
CHECKED = Checked("Keras", (3, 3), (3, 16))
#: The module whose import installs the adapter (:func:`install_when_imported`).
KERAS_TRAINER = keras_trainer.KERAS_TRAINER


class FitState(str, enum.Enum):
    """What the mend means for ``model.fit`` on many workers (a ``str``: ``FitState.INSTALL == "install"``)."""

    INSTALL = "install"  # mended
    NOT_NEEDED = "not_needed"  # no defect to mend (tf_keras, or a Keras without it)
    NOT_COVERED = "not_covered"  # it cannot tell: fit is left as Keras made it
    OFF = "off"  # turned off with TFDEVICES_MENDS

    def __str__(self) -> str:
        return self.value


INSTALL, NOT_COVERED = FitState.INSTALL, FitState.NOT_COVERED


@dataclasses.dataclass(frozen=True)
class FitAdapter:
    """Whether tfdevices mends Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy``, and why.

    Attributes:
        keras_version: the Keras 3 in use (``"3.15.1"``), or ``""`` where there is none.
        state: a :class:`FitState`.
        reason: for people; says what to do when fit is not mended.
    """

    keras_version: str
    state: FitState
    reason: str

    @property
    def fit_works(self) -> bool:
        """Whether plain ``model.fit`` is expected to work under ``MultiWorkerMirroredStrategy``."""
        return self.state in (FitState.INSTALL, FitState.NOT_NEEDED)


#: What each mend state means for fit.
_FIT_STATES = {APPLIED: FitState.INSTALL, NOT_NEEDED: FitState.NOT_NEEDED, OFF: FitState.OFF}


def fit_finding(keras_version: str, defects: list[str] | None) -> Finding:
    """What the mend finds for a Keras with these defects (pure: the words of :meth:`KerasFit._check`).

    Args:
        keras_version: ``keras.__version__`` (only for the words).
        defects: what the probes found there (empty: gone), or ``None`` where they could not tell.

    >>> fit_finding("3.16.0", ["reduce_per_replica ..."]).found.value
    'needed'
    >>> fit_finding("3.17.0", []).found.value, fit_finding("3.17.0", None).found.value
    ('not_needed', 'unknown')
    """
    if defects is None:
        return unknown(
            f"Keras {keras_version[:40]}: whether its trainer has the defect {KERAS_FIT_ISSUE} cannot be "
            "told (its functions changed under the probe), so model.fit is left as Keras made it and may fail "
            "on many workers ('Attempt to convert a value (PerReplica ...)', 'Invalid reduction dimension 0')",
            KERAS3_FIT_HINT,
        )
    if not defects:
        return not_needed(
            f"the defect {KERAS_FIT_ISSUE} is gone from Keras {keras_version[:40]} (reduce_per_replica asks no "
            "mean along axis 0 of a scalar across workers, and the first batch is not reduced whole): fit is "
            "left as Keras made it"
        )
    return needed(f"the defect {KERAS_FIT_ISSUE} is present: {'; '.join(defects)}")


class KerasFit(Mend):
    """Mends Keras 3's TensorFlow trainer for many workers: each defect where this Keras has it (found first)."""

    name = "keras_fit"
    changes = (
        "keras.src.backend.tensorflow.trainer: reduce_per_replica and, where it reduces the first batch whole, "
        "the trainer's _maybe_symbolic_build (wrapped; only multi-worker calls take the mended path); "
        "where this Keras has the defect: TFOptimizer._distributed_tf_update_step and make_train_function "
        "(Keras 3.3-3.4: gradients summed in the merge call, fit built before its step is traced), "
        "train_step and scale_loss (3.3-3.7: the loss scaled by 1 / replicas), _get_metrics_result_or_logs "
        "(3.3-3.6: the History averaged across replicas)"
    )
    why = f"{KERAS_FIT_ISSUE}: Keras 3 fit fails under MultiWorkerMirroredStrategy"
    detects = (
        "Keras' own reduce_per_replica and _maybe_symbolic_build, run on a strategy that runs nothing: a mean "
        "along axis 0 of a scalar log across workers, or the first batch reduced whole (the defect); then "
        f"whether the Keras is a release it was checked against ({CHECKED.releases})"
    )
    hint = KERAS3_FIT_HINT
    checked = CHECKED

    def __init__(self) -> None:
        super().__init__()
        self._replaced: tuple[Replaced, ...] = ()
        self._applying = threading.local()

    def apply(self) -> MendStatus:
        """As :meth:`Mend.apply`, once: a call from inside it returns, and the first call mends.

        The check imports Keras, whose trainer's import runs :func:`install_when_imported`'s hook:
        without this, that inner call would mend and the outer one mend again on top of it.
        """
        if getattr(self._applying, "now", False):
            return self.status()
        self._applying.now = True
        try:
            return super().apply()
        finally:
            self._applying.now = False

    def _version(self) -> str | None:
        return keras_trainer.keras_version()

    def _check(self) -> Finding:
        if not is_installed("keras"):
            if is_installed("tf_keras"):
                return not_needed("no Keras 3 here: tf_keras' fit works under MultiWorkerMirroredStrategy")
            return not_needed("no Keras is installed here: no fit to mend")
        missing = without_tensorflow()
        if missing is not None:
            return missing
        # Keras 3 whatever TF_USE_LEGACY_KERAS says: that variable redirects tf.keras only, and
        # `import keras` (Ray Train's workers set it) is still Keras 3. Mending Keras 3's trainer
        # leaves tf_keras models alone: they train through tf_keras' own trainer.
        tf = import_tf()
        try:
            from keras.src.backend.tensorflow import trainer as module  # noqa: PLC0415 (lazy Keras)
        except ImportError as err:
            return unknown(f"Keras 3's TensorFlow trainer cannot be imported ({err})", KERAS3_FIT_HINT)
        version = keras_trainer.keras_version() or "?"
        cls = keras_trainer.trainer_class(module)
        if cls is None or not callable(getattr(module, "_collective_all_reduce_multi_worker", None)):
            return fit_finding(version, None)
        logs = keras_trainer.logs_reduced_along_axis_0(module, tf)
        batch = keras_trainer.first_batch_reduced_whole(cls, tf)
        if logs is None or batch is None:
            return fit_finding(version, None)
        defects = ["reduce_per_replica asks for a mean along axis 0 of a scalar log across workers"] * logs
        defects += ["_maybe_symbolic_build hands the whole first batch to strategy.reduce"] * batch
        return fit_finding(version, defects)

    def _apply(self) -> str:
        tf = import_tf()
        from keras.src.backend.tensorflow import trainer as module  # noqa: PLC0415 (lazy Keras)

        cls = keras_trainer.trainer_class(module)
        if cls is None:
            raise NotApplicableError("this Keras has no TensorFlow trainer class")
        replaced: list[Replaced] = []
        done: list[str] = []
        if keras_trainer.logs_reduced_along_axis_0(module, tf):
            replaced.append(_mend_reduce_per_replica(module))
            done.append("fit's step logs are averaged across workers as one value each (axis=None)")
        if keras_trainer.first_batch_reduced_whole(cls, tf):
            replaced.append(_mend_first_batch(tf, module, cls))
            done.append("fit learns the first batch's shapes from this worker's replica, not a reduce")
        found = _mend_older_releases(tf, cls)
        replaced += found.replaced
        self._replaced = tuple(replaced)
        for change in self._replaced:
            change.put()
        return "; ".join(done + found.done)

    def _undo(self) -> None:
        for change in reversed(self._replaced):
            change.restore()
        self._replaced = ()

    def fit_adapter(self) -> FitAdapter:
        """Applies the mend (where on) and says what it means for ``fit``."""
        status = self.apply()
        version = (keras_trainer.keras_version() or "") if "keras" in sys.modules else ""
        state = _FIT_STATES.get(status.state, FitState.NOT_COVERED)
        if state == FitState.OFF:
            return FitAdapter(
                version,
                state,
                f"the keras_fit mend is turned off, so Keras 3 model.fit is left as Keras made it and fails on "
                f"many workers ({KERAS_FIT_ISSUE}). HINT: {KERAS3_FIT_HINT}",
            )
        return FitAdapter(version, state, status.detail)


def _mend_reduce_per_replica(module: Any) -> Replaced:
    """Defect 1: across workers, each log (a scalar) averaged as one value (``axis=None``), not along axis 0."""
    from keras.src import tree  # noqa: PLC0415 (lazy Keras)

    reduce_per_replica = module.reduce_per_replica
    multi_worker = module._collective_all_reduce_multi_worker

    def mended_reduce_per_replica(values: Any, strategy: Any, reduction: Any) -> Any:
        if reduction in ("auto", "mean") and multi_worker(strategy):
            return tree.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return reduce_per_replica(values, strategy, reduction)

    mended_reduce_per_replica.__wrapped__ = reduce_per_replica  # type: ignore[attr-defined]
    return Replaced.of(module, "reduce_per_replica", mended_reduce_per_replica)


def _mend_first_batch(tf: Any, module: Any, cls: Any) -> Replaced:
    """Defect 2: on many workers, the first batch's shapes from this worker's first replica, not a reduce."""
    from keras.src import tree  # noqa: PLC0415 (lazy Keras)

    symbolic_build = cls._maybe_symbolic_build
    multi_worker = module._collective_all_reduce_multi_worker

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

    mended_symbolic_build.__wrapped__ = symbolic_build  # type: ignore[attr-defined]
    return Replaced.of(cls, "_maybe_symbolic_build", mended_symbolic_build)


@dataclasses.dataclass(frozen=True)
class _Found:
    """What :func:`_mend_older_releases` replaces, and what that does in words."""

    replaced: list[Replaced]
    done: list[str]


def _mend_older_releases(tf: Any, cls: Any) -> _Found:
    """Defects 3 to 5 (Keras 3.3 to 3.7), each where this Keras has it (the code that has it is found)."""
    found = _Found([], [])
    update_step = _mend_update_step(tf)
    if update_step is not None:
        found.replaced.append(update_step)
        found.done.append("its optimizer's gradients are summed in the merge call (tf_keras' way)")
        built_first = _build_before_tracing(tf, cls)
        if built_first is not None:
            found.replaced.append(built_first)
            found.done.append("fit builds the model, metrics and optimizer before tracing its step (as Keras 3.5 does)")
    local_metrics = _mend_local_metrics(cls)
    if local_metrics is not None:
        found.replaced.append(local_metrics)
        found.done.append("the History's metrics are the replicas' mean, not the first replica's own")
    loss_scaling = _mend_loss_scaling(tf, cls)
    if loss_scaling:
        found.replaced.extend(loss_scaling)
        found.done.append("fit's loss is scaled by 1 / replicas before its gradients (Keras 3.8's scaling)")
    return found


def _sums_inside_merge_call(optimizer_class: Any) -> bool:
    """Whether ``TFOptimizer`` sums the gradients inside its merge call (Keras 3.3-3.4: defect 3)."""
    inside = getattr(optimizer_class, "_distributed_tf_update_step", None)
    code = getattr(inside, "__code__", None)
    return (
        code is not None
        and "_all_reduce_sum_gradients" in code.co_names
        and callable(getattr(optimizer_class, "_backend_update_step", None))
        and callable(getattr(optimizer_class, "_all_reduce_sum_gradients", None))
    )


def _mend_update_step(tf: Any) -> Replaced | None:
    """Defect 3: the gradients summed in the merge call, where the optimizer sums them in the wrong context.

    In the cross-replica context (a merge call), ``distribution.extended.batch_reduce_to(SUM, ...)``
    sums them, as tf_keras' optimizer does; Keras' own update then applies the sums (its own
    ``_all_reduce_sum_gradients`` returns them as they are there). In a replica context (no merge
    call: XLA on GPUs) Keras' own code sums them already and runs unchanged.

    Returns:
        The replacement of ``TFOptimizer._distributed_tf_update_step``, or ``None`` where not needed.
    """
    try:
        from keras.src.backend.tensorflow.optimizer import TFOptimizer  # noqa: PLC0415 (lazy Keras)
    except ImportError:
        return None
    if not _sums_inside_merge_call(TFOptimizer):
        return None
    original = TFOptimizer._distributed_tf_update_step

    def distributed_tf_update_step(self: Any, distribution: Any, grads_and_vars: Any, learning_rate: Any) -> Any:
        if not tf.distribute.in_cross_replica_context():
            return original(self, distribution, grads_and_vars, learning_rate)
        pairs = list(grads_and_vars)
        kept = [(g, v) for g, v in pairs if g is not None]
        sums = iter(distribution.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, kept) if kept else ())
        summed = [(None, v) if g is None else (next(sums), v) for g, v in pairs]
        return original(self, distribution, summed, learning_rate)

    distributed_tf_update_step.__wrapped__ = original  # type: ignore[attr-defined]
    return Replaced.of(TFOptimizer, "_distributed_tf_update_step", distributed_tf_update_step)


def _build_before_tracing(tf: Any, trainer_class: Any) -> Replaced | None:
    """With defect 3 mended (Keras 3.3-3.4): build what fit's step would create before it is traced.

    Keras 3.3 and 3.4 build the compiled metrics (and the model, the optimizer) inside the first
    traced step, in each replica's context; with the gradients summed there too, TensorFlow fails
    ("You must feed a value for placeholder tensor ... cond/Placeholder"). Keras 3.5 builds them
    first (``_maybe_symbolic_build``); mended: the same, with ``_symbolic_build`` from the shapes
    of the first call's iterator (its ``element_spec``: no batch is taken from it).

    Returns:
        The replacement of ``make_train_function``, or ``None`` where this Keras has no ``_symbolic_build``.
    """
    make = getattr(trainer_class, "make_train_function", None)
    if not callable(make) or not callable(getattr(trainer_class, "_symbolic_build", None)):
        return None

    def one_replica(spec: Any) -> Any:
        return getattr(spec, "_value_specs", (spec,))[0]  # PerReplicaSpec: one replica's TensorSpec

    def make_train_function(self: Any, force: bool = False) -> Any:
        result = make(self, force=force)
        traced = self.train_function
        if self._distribute_strategy is None or traced is None or hasattr(traced, "_tfdevices_first"):
            return result

        def train_function(iterator: Any) -> Any:
            if not train_function._tfdevices_first:  # type: ignore[attr-defined]
                train_function._tfdevices_first = True  # type: ignore[attr-defined]
                batch = tf.nest.map_structure(one_replica, iterator.element_spec)
                with self.distribute_strategy.scope():
                    self._symbolic_build(data_batch=batch)
            return traced(iterator)

        train_function._tfdevices_first = False  # type: ignore[attr-defined]
        self.train_function = train_function
        return result

    make_train_function.__wrapped__ = make  # type: ignore[attr-defined]
    return Replaced.of(trainer_class, "make_train_function", make_train_function)


def _mend_local_metrics(trainer_class: Any) -> Replaced | None:
    """Defect 5: the epoch's logs averaged across replicas and workers, not the first replica's own metrics.

    Returns:
        The replacement of ``_get_metrics_result_or_logs``, or ``None`` where this Keras aggregates metrics.
    """
    try:
        from keras.src.backend.tensorflow import Variable  # noqa: PLC0415 (lazy Keras; in ops.core from 3.16)
    except ImportError:
        return None
    original = getattr(trainer_class, "_get_metrics_result_or_logs", None)
    if hasattr(Variable, "_map_aggregation") or not callable(original):
        return None

    def get_metrics_result_or_logs(self: Any, logs: Any) -> Any:
        strategy = self._distribute_strategy
        if strategy is not None and isinstance(logs, dict) and logs and strategy.num_replicas_in_sync > 1:
            return logs  # the last step's, averaged across replicas and workers by reduce_per_replica
        return original(self, logs)

    get_metrics_result_or_logs.__wrapped__ = original  # type: ignore[attr-defined]
    return Replaced.of(trainer_class, "_get_metrics_result_or_logs", get_metrics_result_or_logs)


_fit_step = threading.local()  # .replicas: set while Keras' train_step runs in this thread


def _mend_loss_scaling(tf: Any, trainer_class: Any) -> tuple[Replaced, ...]:
    """Defect 4: Keras 3.8's ``1 / num_replicas_in_sync`` on the loss ``train_step`` takes gradients of.

    ``train_step`` passes that loss through ``optimizer.scale_loss`` (after the loss tracker has
    it): while Keras' own ``train_step`` runs in this thread (a replica's thread under a
    strategy), ``scale_loss`` also divides by the replica count. Custom loops' calls of
    ``scale_loss`` are left as they are.

    Returns:
        Each replacement; none where the Keras scales the loss itself.
    """
    try:
        from keras.src.losses import loss as loss_module  # noqa: PLC0415 (lazy Keras)
        from keras.src.optimizers import base_optimizer, loss_scale_optimizer  # noqa: PLC0415 (lazy Keras)
    except ImportError:
        return ()
    owners = (base_optimizer.BaseOptimizer, loss_scale_optimizer.LossScaleOptimizer)
    train_step = getattr(trainer_class, "train_step", None)
    if hasattr(loss_module, "scale_loss_for_distribution") or not callable(train_step):
        return ()
    if not all(callable(owner.__dict__.get("scale_loss")) for owner in owners):
        return ()

    def mended_train_step(self: Any, data: Any) -> Any:
        _fit_step.replicas = tf.distribute.get_strategy().num_replicas_in_sync
        try:
            return train_step(self, data)
        finally:
            _fit_step.replicas = 1

    mended_train_step.__wrapped__ = train_step  # type: ignore[attr-defined]
    replaced = [Replaced.of(trainer_class, "train_step", mended_train_step)]
    for owner in owners:
        scale_loss = owner.__dict__["scale_loss"]

        def mended_scale_loss(self: Any, loss: Any, _scale_loss: Any = scale_loss) -> Any:
            loss = _scale_loss(self, loss)
            replicas = getattr(_fit_step, "replicas", 1)
            return loss * (1.0 / replicas) if replicas > 1 else loss

        mended_scale_loss.__wrapped__ = scale_loss  # type: ignore[attr-defined]
        replaced.append(Replaced.of(owner, "scale_loss", mended_scale_loss))
    return tuple(replaced)


MEND = register(KerasFit())


def install_fit_adapter() -> FitAdapter:
    """Mends Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy`` where the defect is found.

    :func:`tfdevices.build_strategy` calls it when it builds a multi-worker strategy. It
    looks at the installed Keras' trainer at run time (:func:`fit_finding`) for each of the
    five defects (the module's docstring); a Keras whose defect is gone is left alone, and
    one where it cannot tell too, with one warning that says what to do. Defects 1 and 2
    take the mended path on many workers only; 3 to 5 (Keras 3.3 to 3.7) under every
    strategy in the process, as later Keras releases do.
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
    if not _ARMED:
        _ARMED.append(True)
        # from inside the mend's own check (its import of Keras) apply() returns at once: that call mends
        when_imported(KERAS_TRAINER, MEND.apply)


_ARMED: list[bool] = []
