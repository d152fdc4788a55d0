"""Mend ``uneven_batch``: Keras 3 ``fit`` under a mirrored strategy with a batch the replicas do not divide.

Keras 3 ``model.fit`` under ``tf.distribute.MirroredStrategy`` over 3 devices with a global batch
of 256 stops before its first step: ``InvalidArgumentError: Inputs to operation AddN of type AddN
must have the same size and shape. Input 0: [86,32] != input 2: [84,32]`` (keras-team/keras#19246;
measured with Keras 3.15 and plain ``tf.distribute``, no tfdevices imported; a batch of 255 works,
tf_keras works). Two defects in Keras' TensorFlow backend, each detected by its own feature:

1. ``TensorFlowTrainer._maybe_symbolic_build`` (from Keras 3.5) takes the first distributed batch
   and calls ``strategy.reduce("MEAN", batch, axis=None)`` on it, only to learn its shapes and
   dtypes. The mean over replicas is an ``AddN`` of each replica's tensor: tf.data splits 256 rows
   over 3 replicas as 86, 86 and 84, and ``AddN`` refuses tensors of different shapes. This is the
   failure. Mended: the shapes come from the first replica's own values
   (``experimental_local_results``), the shapes the mean would have had on an even split, with no
   op on the data (as the ``keras_fit`` mend does on many workers, whose path this one leaves to it).
2. ``TensorFlowTrainer.train_step`` takes each replica's mean loss over its own rows and scales it
   by ``1 / num_replicas_in_sync`` (Keras 3.8's ``scale_loss_for_distribution``; the ``keras_fit``
   mend adds the same on 3.3 to 3.7) before the gradients are summed over replicas: on an uneven
   split a row on a replica of 84 weighs more than a row on one of 86, so the step is not the
   one-device step on the same 256 rows (measured: weights 8e-4 apart after 8 steps, where the
   float reduction order leaves 3e-8). Mended: the loss ``train_step`` hands to
   ``optimizer.scale_loss`` is also multiplied by ``rows * replicas / global rows`` (a sum of the
   replicas' row counts in the step, one scalar all-reduce), so each replica's share is its rows
   over the global batch, as ``tf.nn.compute_average_loss(..., global_batch_size=...)`` has it. On
   an even split the factor is exactly 1. The loss Keras reports was right already (its tracker
   weighs each replica's loss by its rows).

Checked: Keras 3 ``fit`` over 3 logical CPUs with a batch of 256 trains, and its losses and weights
equal one device's on the same data within float reduction order (tests/mends/test_uneven_batch.py),
on Keras 3.15.1 and 3.3.3 (TensorFlow 2.16.2: no defect 1 there, defect 2 mended).

Detected: the defect first (defect 1: Keras' own ``_maybe_symbolic_build``, run on a strategy that
runs nothing, hands the first batch to ``strategy.reduce``: :mod:`tfdevices.mends.keras_trainer`;
defect 2: ``train_step`` hands its loss to ``scale_loss``), whatever the release; then versions (a
Keras 3 release outside those checked, :data:`UNEVEN_BATCH_KERAS`, is said to be so). Neither
defect: left alone, and said so. tf_keras' ``fit`` works: nothing to mend. Applied by
:func:`tfdevices.build_strategy` when it builds a mirrored strategy. Off: ``fit`` is left as Keras
made it, and a batch the replicas do not divide fails at the first step (HINT: a batch the replica
count divides). Undone: what was wrapped is restored (where it is still this mend's).
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from tfdevices.core.tf_door import import_tf
from tfdevices.mends import keras_trainer
from tfdevices.mends.base import (
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
    without_tensorflow,
)

UNEVEN_BATCH_ISSUE = "keras-team/keras#19246"
#: Keras releases this mend covers: 3.3 (its train_step's loss reaches ``scale_loss``) up to, not
#: including, 3.16 (the newest checked). Run: 3.3.3 (TensorFlow 2.16.2) and 3.15.1.
CHECKED = Checked("Keras", (3, 3), (3, 16))
UNEVEN_BATCH_KERAS = (CHECKED.low, CHECKED.high)
#: What a user can do where the mend does not apply.
UNEVEN_BATCH_HINT = "use a global batch the replica count divides (e.g. 255 or 258 for 3 replicas)."

_step = threading.local()  # .share: set while Keras' train_step runs in this (replica's) thread


class UnevenBatch(Mend):
    """Mends Keras 3's TensorFlow trainer for a batch the replicas do not divide (features first)."""

    name = "uneven_batch"
    changes = (
        "keras.src.backend.tensorflow.trainer.TensorFlowTrainer: _maybe_symbolic_build (Keras 3.5+: the "
        "first batch's shapes from one replica, not a MEAN over replicas) and train_step with the optimizers' "
        "scale_loss (each replica's loss weighted by its share of the global batch)"
    )
    why = f"{UNEVEN_BATCH_ISSUE}: AddN of per-replica batches of different shapes"
    detects = (
        "Keras' own _maybe_symbolic_build, run on a strategy that runs nothing, hands the first batch to "
        "strategy.reduce (an AddN over replicas), or train_step hands its loss to scale_loss (1 / replicas); "
        f"then whether the Keras is a release it was checked against ({CHECKED.releases})"
    )
    hint = UNEVEN_BATCH_HINT
    checked = CHECKED

    def __init__(self) -> None:
        super().__init__()
        self._replaced: tuple[Replaced, ...] = ()

    def _version(self) -> str | None:
        return keras_trainer.keras_version()

    def _check(self) -> Finding:
        if not is_installed("keras"):
            if is_installed("tf_keras"):
                return not_needed("no Keras 3 here: tf_keras' fit splits an uneven batch itself")
            return not_needed("no Keras is installed here: no fit to mend")
        missing = without_tensorflow()
        if missing is not None:
            return missing
        tf = import_tf()
        try:
            from keras.src.backend.tensorflow import trainer as module  # noqa: PLC0415 (lazy Keras)
        except ImportError as err:
            return unknown(f"Keras 3's TensorFlow trainer cannot be imported ({err})", UNEVEN_BATCH_HINT)
        cls = keras_trainer.trainer_class(module)
        usable = cls is not None and callable(getattr(module, "_collective_all_reduce_multi_worker", None))
        first = keras_trainer.first_batch_reduced_whole(cls, tf) if usable else None
        if first is None:
            return unknown(
                f"whether this Keras' fit has the defect {UNEVEN_BATCH_ISSUE} cannot be told (its trainer changed "
                "under the probe): fit is left as Keras made it",
                UNEVEN_BATCH_HINT,
            )
        defects = ["_maybe_symbolic_build reduces the first batch over replicas (an AddN)"] * first
        defects += ["train_step weighs each replica's loss 1 / replicas"] * ("scale_loss" in _names(cls.train_step))
        if not defects:
            return not_needed(f"the defect {UNEVEN_BATCH_ISSUE} is gone from this Keras: fit is left as Keras made it")
        return needed(f"the defect {UNEVEN_BATCH_ISSUE} is present: {'; '.join(defects)}")

    def _apply(self) -> str:
        tf = import_tf()
        from keras.src.backend.tensorflow import trainer as module  # noqa: PLC0415 (lazy Keras)

        cls = keras_trainer.trainer_class(module)
        if cls is None:
            raise NotApplicableError("this Keras has no TensorFlow trainer class")
        replaced: list[Replaced] = []
        done: list[str] = []
        if keras_trainer.first_batch_reduced_whole(cls, tf):
            replaced.append(_mend_first_batch(tf, module, cls))
            done.append("fit learns the first batch's shapes from one replica, not from an AddN over replicas")
        shares = _mend_loss_shares(tf, cls)
        if shares:
            replaced.extend(shares)
            done.append("each replica's loss weighs its share of the global batch (rows / global rows)")
        if not replaced:
            raise NotApplicableError("this Keras has neither defect (nothing to mend)")
        self._replaced = tuple(replaced)
        for change in self._replaced:
            change.put()
        return "; ".join(done)

    def _undo(self) -> None:
        for change in reversed(self._replaced):
            change.restore()
        self._replaced = ()


def _names(function: Any) -> tuple[str, ...]:
    """The global and attribute names Keras' own function uses (under any mend's wrapper: ``__wrapped__``)."""
    return tuple(getattr(getattr(inspect.unwrap(function), "__code__", None), "co_names", ()))


def _mend_first_batch(tf: Any, module: Any, trainer_class: Any) -> Replaced:
    """Defect 1: the first batch's shapes from one replica's values, not a MEAN (an ``AddN``) over replicas."""
    from keras.src import tree  # noqa: PLC0415 (lazy Keras)

    original = trainer_class._maybe_symbolic_build
    multi_worker = module._collective_all_reduce_multi_worker

    def one_replica(value: Any, strategy: Any) -> Any:
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    def maybe_symbolic_build(model: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        strategy = model._distribute_strategy
        if iterator is None or strategy is None or multi_worker(strategy):  # many workers: keras_fit's path
            return original(model, iterator=iterator, data_batch=data_batch)
        for entry in iterator:  # (begin, end, iterator), or (step, iterator) in older releases: last
            data_batch = tree.map_structure(lambda v: one_replica(v, strategy), next(entry[-1]))
            break
        return original(model, data_batch=data_batch)

    maybe_symbolic_build.__wrapped__ = original  # type: ignore[attr-defined]
    return Replaced.of(trainer_class, "_maybe_symbolic_build", maybe_symbolic_build)


def _mend_loss_shares(tf: Any, trainer_class: Any) -> tuple[Replaced, ...]:
    """Defect 2: each replica's loss scaled by its rows over the global batch's, not ``1 / replicas`` alone.

    While Keras' own ``train_step`` runs in a replica's thread, ``scale_loss`` (which ``train_step``
    hands the loss its gradients are taken of) also multiplies by ``rows * replicas / global rows``.

    Returns:
        Each replacement; none where ``train_step`` does not reach ``scale_loss``.
    """
    try:
        from keras.src import tree  # noqa: PLC0415 (lazy Keras)
        from keras.src.optimizers import base_optimizer, loss_scale_optimizer  # noqa: PLC0415 (lazy Keras)
        from keras.src.trainers.data_adapters import data_adapter_utils  # noqa: PLC0415 (lazy Keras)
    except ImportError:
        return ()
    owners = (base_optimizer.BaseOptimizer, loss_scale_optimizer.LossScaleOptimizer)
    train_step = getattr(trainer_class, "train_step", None)
    unpack = getattr(data_adapter_utils, "unpack_x_y_sample_weight", None)
    if not callable(train_step) or "scale_loss" not in _names(train_step) or not callable(unpack):
        return ()
    if not all(callable(owner.__dict__.get("scale_loss")) for owner in owners):
        return ()

    def share_of_rows(data: Any) -> Any:
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        context = tf.distribute.get_replica_context()
        if replicas <= 1 or context is None:
            return None
        x = unpack(data)[0]
        rows = tf.cast(tf.shape(next(v for v in tree.flatten(x) if v is not None))[0], tf.float32)
        return rows * float(replicas) / context.all_reduce(tf.distribute.ReduceOp.SUM, rows)

    def mended_train_step(self: Any, data: Any) -> Any:
        _step.share = share_of_rows(data)
        try:
            return train_step(self, data)
        finally:
            _step.share = None

    mended_train_step.__wrapped__ = train_step  # type: ignore[attr-defined]
    replaced = [Replaced.of(trainer_class, "train_step", mended_train_step)]
    for owner in owners:
        scale_loss = owner.__dict__["scale_loss"]

        def mended_scale_loss(self: Any, loss: Any, _scale_loss: Any = scale_loss) -> Any:
            loss = _scale_loss(self, loss)
            share = getattr(_step, "share", None)
            return loss if share is None else loss * tf.cast(share, loss.dtype)

        mended_scale_loss.__wrapped__ = scale_loss  # type: ignore[attr-defined]
        replaced.append(Replaced.of(owner, "scale_loss", mended_scale_loss))
    return tuple(replaced)


MEND = register(UnevenBatch())


def mend_uneven_batches() -> MendStatus:
    """Mends Keras 3 ``fit`` for a batch the replicas do not divide (the mend ``uneven_batch``). Idempotent.

    Called by :func:`tfdevices.build_strategy` when it builds a mirrored strategy.
    ``TFDEVICES_MENDS=uneven_batch`` turns it off.

    Returns:
        The mend's status: applied (and what), not needed (no Keras 3), skipped (and why), or off.
    """
    return MEND.apply()
