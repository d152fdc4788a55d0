"""Train under a strategy: Keras 3 ``model.fit`` on many workers, and the Keras-version policy.

Keras 3 ``model.fit`` fails under ``MultiWorkerMirroredStrategy`` (keras-team/keras#20585:
"Attempt to convert a value (PerReplica ...) with an unsupported type"; Keras 3.3 and 3.4:
"Invalid reduction dimension 0"). The root causes are small defects in Keras' TensorFlow
backend, which the mend ``keras_fit`` (:mod:`tfdevices.mends.keras_fit`) mends, each where it
finds it in the installed Keras (checked release by release on 3.3 to 3.15);
:func:`tfdevices.build_strategy` installs it (:func:`install_fit_adapter`) when it builds a
multi-worker strategy. Then plain ``fit`` works: compiled metrics, ``validation_data``,
callbacks (``ModelCheckpoint``, ``BackupAndRestore`` ...), the progress bar and ``History``.

:func:`train` is one call for scripts that must run on any Keras: ``fit`` where it
works, a custom loop (``strategy.run`` over ``experimental_distribute_dataset``) where
it does not (a Keras where the adapter cannot tell). :func:`check_fit_supported` raises,
with that advice, where ``fit`` cannot work.

This module imports Keras only when a function needs it; it keeps the mend's names
(``install_fit_adapter``, ``install_when_imported``) for the scripts that import them from here.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

from tfdevices.core.errors import StrategyError
from tfdevices.core.tf_door import import_tf
from tfdevices.mends.keras_fit import (
    KERAS3_FIT_HINT,
    KERAS_FIT_ISSUE,
    install_fit_adapter,
    install_when_imported,
)

logger = logging.getLogger("tfdevices")

KERAS3_FIT_MESSAGE = (
    f"Keras 3 model.fit fails under MultiWorkerMirroredStrategy ({KERAS_FIT_ISSUE}: "
    "'Attempt to convert a value (PerReplica ...) with an unsupported type', or on Keras 3.3-3.4 "
    "'Invalid reduction dimension 0 for input with 0 dimensions')."
)


def legacy_keras() -> bool:
    """Whether ``TF_USE_LEGACY_KERAS`` asks for tf_keras (Keras 2)."""
    return os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")


# --------------------------------------------------------------------------- train


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What :func:`train` did.

    Attributes:
        model: the trained model.
        losses: the mean training loss of each epoch.
        path: ``"fit"``, or ``"custom_loop"`` (a Keras whose fit cannot work on many workers).
        reason: why that path.
    """

    model: Any
    losses: tuple[float, ...]
    path: str
    reason: str


def check_fit_supported(strategy: Any) -> None:
    """Raises when ``model.fit`` cannot work under this strategy.

    Args:
        strategy: from :func:`tfdevices.build_strategy`, or any ``tf.distribute.Strategy``.

    Raises:
        StrategyError: a Keras 3 ``fit`` under ``MultiWorkerMirroredStrategy`` with a Keras
            whose defect the fit adapter cannot tell or is off (keras-team/keras#20585), with the working
            path in the hint.
    """
    if _multi_worker(strategy) and not install_fit_adapter().fit_works:
        raise StrategyError(
            KERAS3_FIT_MESSAGE + f" {install_fit_adapter().reason.split(' HINT: ')[0]}.", hint=KERAS3_FIT_HINT
        )


def _multi_worker(strategy: Any) -> bool:
    kind = getattr(strategy, "kind", None)
    if kind is not None:
        return kind == "multi_worker"
    tf = import_tf()
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def train(
    strategy: Any,
    model_fn: Callable[[], Any],
    dataset: Any,
    *,
    loss: Any,
    optimizer_fn: Callable[[], Any],
    epochs: int = 1,
    steps_per_epoch: int | None = None,
    global_batch_size: int,
    path: str = "auto",
) -> TrainResult:
    """Trains a Keras model under ``strategy`` by the path that works with the installed Keras.

    ``fit`` wherever it works: one process, tf_keras (``TF_USE_LEGACY_KERAS=1``), and
    Keras 3 on many workers with the fit adapter (:func:`install_fit_adapter`, installed here
    under every strategy: Keras 3.3 to 3.7 need it in one process too). A custom
    loop (``strategy.run`` over ``experimental_distribute_dataset``, optimizer built in
    the scope) under ``MultiWorkerMirroredStrategy`` with a Keras whose defect the adapter
    cannot tell (or with the adapter off). Both end with identical weights on every worker.

    Args:
        strategy: from :func:`tfdevices.build_strategy`, or any ``tf.distribute.Strategy``.
        model_fn: builds and returns the (uncompiled) model; called inside the scope.
        dataset: a ``tf.data.Dataset`` of ``(x, y)`` global batches of ``global_batch_size``.
        loss: a Keras loss object or name (``"mse"``); applied per example.
        optimizer_fn: returns a new optimizer; called inside the scope.
        epochs: passes over ``steps_per_epoch`` batches.
        steps_per_epoch: batches per epoch (``None``: the whole dataset).
        global_batch_size: examples per step across all replicas (scales the loss).
        path: ``"auto"``, ``"fit"`` or ``"custom_loop"``.

    Returns:
        A :class:`TrainResult`.

    Raises:
        StrategyError: ``path="fit"`` where fit cannot work, or an unknown path.
    """
    if path not in ("auto", "fit", "custom_loop"):
        raise StrategyError(
            f"train(path={path!r}): unknown path; known: auto, fit, custom_loop.", hint="leave path='auto'."
        )
    if path == "fit":
        check_fit_supported(strategy)
    multi = _multi_worker(strategy)
    mended = install_fit_adapter()  # on Keras 3.3-3.7 fit (and the optimizer) need it under any strategy
    adapter = mended if multi else None
    if path == "custom_loop" or (path == "auto" and adapter is not None and not adapter.fit_works):
        reason = adapter.reason if adapter is not None and not adapter.fit_works else "asked for"
        losses, model = _custom_loop(
            strategy, model_fn, dataset, loss, optimizer_fn, epochs, steps_per_epoch, global_batch_size
        )
        return TrainResult(model, losses, "custom_loop", reason)
    with strategy.scope():
        model = model_fn()
        model.compile(optimizer=optimizer_fn(), loss=loss)
    history = model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0, shuffle=False)
    reason = adapter.reason if adapter is not None else "model.fit works under this strategy"
    return TrainResult(model, tuple(float(x) for x in history.history["loss"]), "fit", reason)


def _custom_loop(
    strategy: Any,
    model_fn: Callable[[], Any],
    dataset: Any,
    loss: Any,
    optimizer_fn: Callable[[], Any],
    epochs: int,
    steps_per_epoch: int | None,
    global_batch_size: int,
) -> tuple[tuple[float, ...], Any]:
    tf = import_tf()
    keras = tf.keras
    with strategy.scope():
        model = model_fn()
        optimizer = optimizer_fn()
        loss_obj = keras.losses.get(loss) if isinstance(loss, str) else loss
        per_example = _per_example_loss(keras, loss_obj)
        optimizer.build(model.trainable_variables)

    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            value = tf.nn.compute_average_loss(per_example(y, pred), global_batch_size=global_batch_size)
        grads = tape.gradient(value, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return value

    @tf.function
    def distributed_step(x: Any, y: Any) -> Any:
        per_replica = strategy.run(step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    data = strategy.experimental_distribute_dataset(dataset)
    losses = []
    iterator = iter(data)
    for _ in range(epochs):
        total, count = 0.0, 0
        while steps_per_epoch is None or count < steps_per_epoch:
            batch = next(iterator, None)
            if batch is None:  # end of the data: start again, and end the epoch if it has no set length
                iterator = iter(data)
                if steps_per_epoch is None:
                    break
                batch = next(iterator)
            total += float(distributed_step(*batch))
            count += 1
        losses.append(total / max(count, 1))
    return tuple(losses), model


def _per_example_loss(keras: Any, loss_obj: Any) -> Callable[[Any, Any], Any]:
    """A function returning one loss per example, whatever reduction ``loss_obj`` was made with."""
    config = loss_obj.get_config() if hasattr(loss_obj, "get_config") else None
    if config is not None and hasattr(loss_obj, "reduction"):
        config = dict(config, reduction="none")
        per_example = type(loss_obj).from_config(config)
        return lambda y, p: per_example(y, p)
    return lambda y, p: loss_obj(y, p)


__all__ = ["train", "TrainResult", "check_fit_supported", "install_fit_adapter", "install_when_imported"]
