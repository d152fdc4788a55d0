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
Keras 3.3.3 (TensorFlow 2.16.2) and the newest Keras (CI's oldest and newest legs).

Detected: features first, the functions it wraps exist (``reduce_per_replica`` and the multi-worker
test always; each of the others where the Keras has its defect), then versions, a Keras release it
was checked against (:data:`FIT_ADAPTER_KERAS`). Keras 3.0 to 3.2 are not covered: their ``"auto"``
reduction sums the logs over replicas (no ``"mean"``), a different code path the adapter was not
checked against. Off: ``fit`` is left as Keras made it. Undone: what was wrapped is restored.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import Any

from tfdevices.core._tf import import_tf
from tfdevices.mends.base import NOT_NEEDED, OFF, SKIPPED, Mend, MendStatus, NotApplicableError, register, when_imported
from tfdevices.mends.exit_barrier import leave_together

KERAS_FIT_ISSUE = "keras-team/keras#20585"
KERAS3_FIT_HINT = (
    "train with tfdevices.training.train(strategy, model_fn, dataset, loss=..., optimizer_fn=...), "
    "whose custom loop works with any Keras 3, or set TF_USE_LEGACY_KERAS=1 (with tf_keras "
    "installed) before TensorFlow is imported to use tf_keras' fit."
)

#: Keras releases the adapter covers: from 3.3.0 (when ``reduce_per_replica`` took the ``"mean"``
#: that fails across workers) up to, not including, 3.16. Checked release by release against their
#: source: 3.3.3 and 3.4.1 carry defect 1 only (no ``_maybe_symbolic_build``); 3.5.0, 3.6.0, 3.8.0,
#: 3.10.0, 3.12.0, 3.13.0, 3.14.0 and 3.15.1 carry both in the same code. Run on 2 workers: 3.3.3
#: (TensorFlow 2.16.2) and 3.15.1.
FIT_ADAPTER_KERAS = ((3, 3), (3, 16))
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
    >>> decide_fit_adapter("3.3.3").state
    'install'
    >>> decide_fit_adapter("3.2.1").state, decide_fit_adapter("3.16.0").state
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
        "fail on many workers ('Attempt to convert a value (PerReplica ...)', 'Invalid reduction "
        "dimension 0'). "
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
    """Mends Keras 3's TensorFlow trainer for many workers: each defect where this Keras has it (features first)."""

    name = "keras_fit"
    changes = (
        "keras.src.backend.tensorflow.trainer: reduce_per_replica and, where it exists (Keras 3.5+), "
        "TensorFlowTrainer._maybe_symbolic_build (wrapped; only multi-worker calls take the mended path); "
        "where this Keras has the defect: TFOptimizer._distributed_tf_update_step and make_train_function "
        "(Keras 3.3-3.4: gradients summed in the merge call, fit built before its step is traced), "
        "train_step and scale_loss (3.3-3.7: the loss scaled by 1 / replicas), _get_metrics_result_or_logs "
        "(3.3-3.6: the History averaged across replicas)"
    )
    why = f"{KERAS_FIT_ISSUE}: Keras 3 fit fails under MultiWorkerMirroredStrategy"
    detects = (
        "the trainer functions it wraps exist (features: _maybe_symbolic_build is wrapped only where it "
        "exists), in a Keras it was checked against "
        f"({FIT_ADAPTER_KERAS[0][0]}.{FIT_ADAPTER_KERAS[0][1]} to "
        f"{FIT_ADAPTER_KERAS[1][0]}.{FIT_ADAPTER_KERAS[1][1] - 1}: versions)"
    )

    def __init__(self) -> None:
        super().__init__()
        self.adapter: FitAdapter | None = None
        self._originals: tuple[Any, ...] = ()
        self._update_step: tuple[Any, Any] | None = None
        self._built_first: Any = None
        self._local_metrics: Any = None
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
        self._loss_scaling: tuple[tuple[Any, str, Any], ...] = ()

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
            trainer_class,
            getattr(keras_trainer, "reduce_per_replica", None),
            getattr(keras_trainer, "_collective_all_reduce_multi_worker", None),
        )
        # Keras 3.5 came with _maybe_symbolic_build (defect 2); before it the model is built when
        # the train step is traced, and only reduce_per_replica needs the mend
        symbolic_build: Any = getattr(trainer_class, "_maybe_symbolic_build", None)
        if not all(callable(f) for f in needed):
            self.adapter = FitAdapter(
                self.adapter.keras_version,
                NOT_COVERED,
                f"Keras {self.adapter.keras_version} no longer has the trainer code the tfdevices adapter for "
                f"{KERAS_FIT_ISSUE} mends; model.fit is left as Keras made it. HINT: {KERAS3_FIT_HINT}",
            )
            raise NotApplicableError(self.adapter.reason)
        _, reduce_per_replica, multi_worker = needed

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
        keras_trainer.reduce_per_replica = mended_reduce_per_replica
        done = [self.adapter.reason]
        if callable(symbolic_build):
            trainer_class._maybe_symbolic_build = mended_symbolic_build
        else:
            done.append("this Keras has no _maybe_symbolic_build (nothing to mend there)")
        self._update_step = _mend_update_step(tf)
        self._built_first = None
        if self._update_step is not None:
            done.append("its optimizer's gradients are summed in the merge call (tf_keras' way)")
            self._built_first = _build_before_tracing(tf, trainer_class)
            if self._built_first is not None:
                done.append("fit builds the model, metrics and optimizer before tracing its step (as Keras 3.5 does)")
        self._local_metrics = _mend_local_metrics(trainer_class)
        if self._local_metrics is not None:
            done.append("the History's metrics are the replicas' mean, not the first replica's own")
        self._loss_scaling = _mend_loss_scaling(tf, trainer_class)
        if self._loss_scaling:
            done.append("fit's loss is scaled by 1 / replicas before its gradients (Keras 3.8's scaling)")
        return "; ".join(done)

    def _undo(self) -> None:
        trainer_class, symbolic_build, keras_trainer, reduce_per_replica = self._originals
        if callable(symbolic_build):
            trainer_class._maybe_symbolic_build = symbolic_build
        keras_trainer.reduce_per_replica = reduce_per_replica
        if self._update_step is not None:
            optimizer_class, original = self._update_step
            optimizer_class._distributed_tf_update_step = original
            self._update_step = None
        if self._built_first is not None:
            trainer_class.make_train_function = self._built_first
            self._built_first = None
        if self._local_metrics is not None:
            if self._local_metrics is _INHERITED:
                del trainer_class._get_metrics_result_or_logs
            else:
                trainer_class._get_metrics_result_or_logs = self._local_metrics
            self._local_metrics = None
        for owner, attribute, original in self._loss_scaling:
            setattr(owner, attribute, original)
        self._loss_scaling = ()

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


def _mend_update_step(tf: Any) -> tuple[Any, Any] | None:
    """Defect 3: the gradients summed in the merge call, where the optimizer sums them in the wrong context.

    In the cross-replica context (a merge call), ``distribution.extended.batch_reduce_to(SUM, ...)``
    sums them, as tf_keras' optimizer does; Keras' own update then applies the sums (its own
    ``_all_reduce_sum_gradients`` returns them as they are there). In a replica context (no merge
    call: XLA on GPUs) Keras' own code sums them already and runs unchanged.

    Returns:
        ``(TFOptimizer, its own _distributed_tf_update_step)`` when replaced, else ``None``.
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
    TFOptimizer._distributed_tf_update_step = distributed_tf_update_step
    return TFOptimizer, original


def _build_before_tracing(tf: Any, trainer_class: Any) -> Any:
    """With defect 3 mended (Keras 3.3-3.4): build what fit's step would create before it is traced.

    Keras 3.3 and 3.4 build the compiled metrics (and the model, the optimizer) inside the first
    traced step, in each replica's context; with the gradients summed there too, TensorFlow fails
    ("You must feed a value for placeholder tensor ... cond/Placeholder"). Keras 3.5 builds them
    first (``_maybe_symbolic_build``); mended: the same, with ``_symbolic_build`` from the shapes
    of the first call's iterator (its ``element_spec``: no batch is taken from it).

    Returns:
        Keras' own ``make_train_function`` when wrapped, else ``None``.
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
    trainer_class.make_train_function = make_train_function
    return make


_INHERITED = object()  # what _mend_local_metrics returns where the trainer inherited the method


def _mend_local_metrics(trainer_class: Any) -> Any:
    """Defect 5: the epoch's logs averaged across replicas and workers, not the first replica's own metrics.

    Returns:
        What to restore (Keras' own function, or :data:`_INHERITED`), or ``None`` where nothing changed.
    """
    try:
        from keras.src.backend.tensorflow.core import Variable  # noqa: PLC0415 (lazy Keras)
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
    restore = trainer_class.__dict__.get("_get_metrics_result_or_logs", _INHERITED)
    trainer_class._get_metrics_result_or_logs = get_metrics_result_or_logs
    return restore


_fit_step = threading.local()  # .replicas: set while Keras' train_step runs in this thread


def _mend_loss_scaling(tf: Any, trainer_class: Any) -> tuple[tuple[Any, str, Any], ...]:
    """Defect 4: Keras 3.8's ``1 / num_replicas_in_sync`` on the loss ``train_step`` takes gradients of.

    ``train_step`` passes that loss through ``optimizer.scale_loss`` (after the loss tracker has
    it): while Keras' own ``train_step`` runs in this thread (a replica's thread under a
    strategy), ``scale_loss`` also divides by the replica count. Custom loops' calls of
    ``scale_loss`` are left as they are.

    Returns:
        ``(owner, attribute, original)`` for each function replaced; empty where the Keras scales itself.
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
    replaced: list[tuple[Any, str, Any]] = [(trainer_class, "train_step", train_step)]

    def mended_train_step(self: Any, data: Any) -> Any:
        _fit_step.replicas = tf.distribute.get_strategy().num_replicas_in_sync
        try:
            return train_step(self, data)
        finally:
            _fit_step.replicas = 1

    for owner in owners:
        scale_loss = owner.__dict__["scale_loss"]
        replaced.append((owner, "scale_loss", scale_loss))

        def mended_scale_loss(self: Any, loss: Any, _scale_loss: Any = scale_loss) -> Any:
            loss = _scale_loss(self, loss)
            replicas = getattr(_fit_step, "replicas", 1)
            return loss * (1.0 / replicas) if replicas > 1 else loss

        mended_scale_loss.__wrapped__ = scale_loss  # type: ignore[attr-defined]
        owner.scale_loss = mended_scale_loss
    mended_train_step.__wrapped__ = train_step  # type: ignore[attr-defined]
    trainer_class.train_step = mended_train_step
    return tuple(replaced)


MEND = register(KerasFit())


def install_fit_adapter() -> FitAdapter:
    """Mends Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy`` where it is known broken.

    :func:`tfdevices.build_strategy` calls it when it builds a multi-worker strategy. It
    checks the installed Keras at run time (:func:`decide_fit_adapter`) and which of the five
    defects it has (the module's docstring); a Keras it does not cover is left alone, with one
    warning that says so. Defects 1 and 2 take the mended path on many workers only; 3 to 5
    (Keras 3.3 to 3.7) under every strategy in the process, as later Keras releases do.
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
