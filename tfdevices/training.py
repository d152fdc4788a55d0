"""Train under a strategy by the path that works with the installed Keras.

Keras 3 ``model.fit`` fails under ``MultiWorkerMirroredStrategy``
(keras-team/keras#20585). :func:`train` takes ``fit`` for one process and for
``tf_keras`` (``TF_USE_LEGACY_KERAS=1``), and a custom loop (``strategy.run`` over
``experimental_distribute_dataset``, optimizer built in the scope) for Keras 3 on
many workers; both end with identical weights on every worker.
:func:`check_fit_supported` raises the error, with that advice, where ``fit`` cannot work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tfdevices.core._tf import import_tf
from tfdevices.core.errors import StrategyError
from tfdevices.strategy import KERAS3_FIT_HINT, KERAS3_FIT_MESSAGE, StrategyInfo, legacy_keras


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What :func:`train` did.

    Attributes:
        model: the trained model.
        losses: the mean training loss of each epoch.
        path: ``"custom_loop"`` (Keras 3) or ``"fit"``.
        reason: why that path.
    """

    model: Any
    losses: tuple[float, ...]
    path: str
    reason: str


def check_fit_supported(info: StrategyInfo) -> None:
    """Raises when ``model.fit`` cannot work under this strategy.

    Raises:
        StrategyError: a Keras 3 ``fit`` under ``MultiWorkerMirroredStrategy``
            (keras-team/keras#20585), with the working path in the hint.
    """
    if info.kind == "multi_worker" and not legacy_keras():
        raise StrategyError(KERAS3_FIT_MESSAGE, hint=KERAS3_FIT_HINT)


def train(info: StrategyInfo, model_fn: Callable[[], Any], dataset: Any, *, loss: Any,
          optimizer_fn: Callable[[], Any], epochs: int = 1, steps_per_epoch: int | None = None,
          global_batch_size: int, path: str = "auto") -> TrainResult:
    """Trains a Keras model under ``info.strategy`` by the path that works.

    ``fit`` for one process, and for ``tf_keras`` (``TF_USE_LEGACY_KERAS=1``) on many;
    a custom loop (``strategy.run`` over ``experimental_distribute_dataset``,
    optimizer built in the scope) for Keras 3 under ``MultiWorkerMirroredStrategy``,
    whose ``fit`` fails (keras-team/keras#20585). Both end with identical weights
    on every worker.

    Args:
        info: from :func:`build_strategy`.
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
        raise StrategyError(f"train(path={path!r}): unknown path; known: auto, fit, custom_loop.",
                            hint="leave path='auto'.")
    if path == "fit":
        check_fit_supported(info)
    keras3_multi = info.kind == "multi_worker" and not legacy_keras()
    if path == "custom_loop" or (path == "auto" and keras3_multi):
        reason = KERAS3_FIT_MESSAGE if keras3_multi else "asked for"
        losses, model = _custom_loop(info.strategy, model_fn, dataset, loss, optimizer_fn, epochs,
                                     steps_per_epoch, global_batch_size)
        return TrainResult(model, losses, "custom_loop", reason)
    with info.strategy.scope():
        model = model_fn()
        model.compile(optimizer=optimizer_fn(), loss=loss)
    history = model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0, shuffle=False)
    return TrainResult(model, tuple(float(x) for x in history.history["loss"]), "fit",
                       "model.fit works under this strategy")


def _custom_loop(strategy: Any, model_fn: Callable[[], Any], dataset: Any, loss: Any,
                 optimizer_fn: Callable[[], Any], epochs: int, steps_per_epoch: int | None,
                 global_batch_size: int) -> tuple[tuple[float, ...], Any]:
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
