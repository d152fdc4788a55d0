"""Train under a strategy: Keras 3 ``model.fit`` on many workers, and the Keras-version policy.

Keras 3 ``model.fit`` fails under ``MultiWorkerMirroredStrategy`` (keras-team/keras#20585:
"Attempt to convert a value (PerReplica ...) with an unsupported type"). The root cause
is two small defects in Keras' TensorFlow trainer (see the notes above
:data:`FIT_ADAPTER_KERAS`); :func:`install_fit_adapter` mends them, for the Keras releases
it was checked against, and :func:`tfdevices.build_strategy` installs it when it builds a
multi-worker strategy. Then plain ``fit`` works: compiled metrics, ``validation_data``,
callbacks (``ModelCheckpoint``, ``BackupAndRestore`` ...), the progress bar and ``History``.

:func:`train` is one call for scripts that must run on any Keras: ``fit`` where it
works, a custom loop (``strategy.run`` over ``experimental_distribute_dataset``) where
it does not (a Keras the adapter does not cover). :func:`check_fit_supported` raises,
with that advice, where ``fit`` cannot work.

This module owns the Keras-version policy; it imports Keras only when a function needs it.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.abc
import importlib.util
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from tfdevices.core._tf import import_tf
from tfdevices.core.errors import StrategyError

logger = logging.getLogger("tfdevices")

KERAS_FIT_ISSUE = "keras-team/keras#20585"
KERAS3_FIT_MESSAGE = (
    f"Keras 3 model.fit fails under MultiWorkerMirroredStrategy ({KERAS_FIT_ISSUE}: "
    "'Attempt to convert a value (PerReplica ...) with an unsupported type')."
)
KERAS3_FIT_HINT = (
    "train with tfdevices.training.train(strategy, model_fn, dataset, loss=..., optimizer_fn=...), "
    "whose custom loop works with any Keras 3, or set TF_USE_LEGACY_KERAS=1 (with tf_keras "
    "installed) before TensorFlow is imported to use tf_keras' fit."
)


def legacy_keras() -> bool:
    """Whether ``TF_USE_LEGACY_KERAS`` asks for tf_keras (Keras 2)."""
    return os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")


# --------------------------------------------------------------------------- Keras 3 fit on many workers
#
# Why Keras 3 ``model.fit`` fails under MultiWorkerMirroredStrategy (keras-team/keras#20585), in
# keras/src/backend/tensorflow/trainer.py, two defects that only show with more than one worker:
#
# 1. ``TensorFlowTrainer._maybe_symbolic_build`` takes the first distributed batch and calls
#    ``strategy.reduce("MEAN", batch, axis=None)`` on the whole ``(x, y)`` structure, only to learn
#    its shapes and dtypes. ``Strategy.reduce`` takes one value, not a structure; one worker skips
#    the reduction, but with several, CollectiveAllReduceStrategy hands the tuple of PerReplica
#    values to ``convert_to_tensor``: "Attempt to convert a value (PerReplica ...) with an
#    unsupported type". Mended: the shapes come from this worker's own replica values
#    (``experimental_local_results``), the very shapes the reduction would have had, with no
#    collective op on the data.
# 2. ``reduce_per_replica`` reduces the step's logs (scalars: loss, metric results) across
#    workers with ``strategy.reduce("MEAN", v, axis=0)``: a scalar has no axis 0 ("Invalid
#    reduction dimension 0 for input with 0 dimensions"). One worker takes the mean over
#    replicas (``reduce_mean(local_results, axis=0)``: across replicas, not within a value);
#    mended: the same across workers, ``strategy.reduce("MEAN", v, axis=None)``.
#
# Nothing else changes: the training step, gradients, optimizer and callbacks are Keras' own.
# Checked: on 2 workers, loss, metrics, validation metrics and weights equal tf_keras' fit on the
# same workers and a single process's fit on the same global batches (tests/test_multiworker.py).

#: Keras releases the adapter covers: from 3.5.0 (when ``_maybe_symbolic_build`` came) up to,
#: not including, 3.16. Checked release by release against their source: 3.5.0, 3.6.0, 3.8.0,
#: 3.10.0, 3.12.0, 3.13.0, 3.14.0 and 3.15.1 carry both defects in the same code.
FIT_ADAPTER_KERAS = ((3, 5), (3, 16))
INSTALL, NOT_NEEDED, NOT_COVERED = "install", "not_needed", "not_covered"


@dataclasses.dataclass(frozen=True)
class FitAdapter:
    """Whether tfdevices mends Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy``, and why.

    Attributes:
        keras_version: the Keras in use (``"3.15.1"``, or ``"tf_keras"``).
        state: ``"install"`` (mended), ``"not_needed"`` (tf_keras, whose fit works) or
            ``"not_covered"`` (a Keras the adapter was not checked against: fit is left as Keras made it).
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
    if len(parts) < 2 or not all(p.isascii() and p.isdigit() for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


_ADAPTER_STATE: dict[str, FitAdapter] = {}


def install_fit_adapter() -> FitAdapter:
    """Mends Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy`` where it is known broken.

    :func:`tfdevices.build_strategy` calls it when it builds a multi-worker strategy. It
    checks the installed Keras at run time (:func:`decide_fit_adapter`) and that the two
    functions it wraps are there; a Keras it does not cover is left alone, with one
    warning that says so. Wraps only multi-worker calls; one process keeps Keras' code path.
    Idempotent.

    Returns:
        A :class:`FitAdapter`: what was done, and why.
    """
    if "done" in _ADAPTER_STATE:
        return _ADAPTER_STATE["done"]
    try:
        from keras.src.version import __version__ as keras_version  # noqa: PLC0415 (lazy Keras); set before `import keras` ends
    except ImportError:  # no Keras 3: only tf_keras (whose fit works) can be in use
        result = decide_fit_adapter("", legacy=True)
    else:
        # Keras 3 whatever TF_USE_LEGACY_KERAS says: that variable redirects tf.keras only, and
        # `import keras` (Ray Train's workers set it) is still Keras 3. Mending Keras 3's trainer
        # leaves tf_keras models alone: they train through tf_keras' own trainer.
        result = decide_fit_adapter(str(keras_version))
        if result.state == INSTALL:
            result = _patch_trainer(result)
    if result.state == NOT_COVERED:
        logger.warning("tfdevices: %s", result.reason)
    _ADAPTER_STATE["done"] = result
    return result


#: The module whose import installs the adapter (:func:`install_when_imported`).
KERAS_TRAINER = "keras.src.backend.tensorflow.trainer"


def install_when_imported() -> None:
    """Mends Keras 3 ``fit`` (:func:`install_fit_adapter`) as soon as Keras' TensorFlow trainer is imported.

    For scripts that build their own ``tf.distribute.MultiWorkerMirroredStrategy()``: the
    workers ``tfdevices launch`` starts call it at start-up (its ``sitecustomize``), so they
    need no change. Importing this costs nothing: Keras, TensorFlow and the mend load when
    the program imports Keras' trainer itself; it is mended at once when that has happened.
    Idempotent.
    """
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


def _patch_trainer(decision: FitAdapter) -> FitAdapter:
    """Wraps the two functions of Keras' TensorFlow trainer (see the notes above :data:`FIT_ADAPTER_KERAS`)."""
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
        return FitAdapter(
            decision.keras_version,
            NOT_COVERED,
            f"Keras {decision.keras_version} no longer has the trainer code the tfdevices adapter for "
            f"{KERAS_FIT_ISSUE} mends; model.fit is left as Keras made it. HINT: {KERAS3_FIT_HINT}",
        )
    symbolic_build, reduce_per_replica, multi_worker = needed

    def local_batch(strategy: Any, batch: Any) -> Any:
        """This worker's first replica's values: the shapes and dtypes a MEAN over replicas would have."""
        return tree.map_structure(
            lambda v: (
                strategy.experimental_local_results(v)[0] if isinstance(v, tf.distribute.DistributedValues) else v
            ),
            batch,
        )

    def mended_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        strategy = self._distribute_strategy
        if iterator is None or strategy is None or not multi_worker(strategy):
            return symbolic_build(self, iterator=iterator, data_batch=data_batch)
        leave_together()
        # Keras 3.5-3.6 yield (step, iterator) from enumerate_epoch(); later releases iterate
        # (step, iterator) or (begin, end, iterator): the iterator is always last
        epochs = iterator.enumerate_epoch() if hasattr(iterator, "enumerate_epoch") else iterator
        for entry in epochs:
            data_batch = local_batch(strategy, next(entry[-1]))
            break
        return symbolic_build(self, data_batch=data_batch)

    def mended_reduce_per_replica(values: Any, strategy: Any, reduction: Any) -> Any:
        if reduction in ("auto", "mean") and multi_worker(strategy):
            return tree.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return reduce_per_replica(values, strategy, reduction)

    mended_symbolic_build.__wrapped__ = symbolic_build  # type: ignore[attr-defined]
    mended_reduce_per_replica.__wrapped__ = reduce_per_replica  # type: ignore[attr-defined]
    trainer_class._maybe_symbolic_build = mended_symbolic_build
    keras_trainer.reduce_per_replica = mended_reduce_per_replica
    return decision


# --------------------------------------------------------------------------- leaving together

#: How long a worker waits at exit for the others (a crashed one fails the barrier at once).
EXIT_BARRIER_MS = 600_000
_EXIT = {"registered": False}


def leave_together() -> None:
    """Makes the workers of a multi-worker job leave together: a barrier when the process exits.

    TensorFlow's coordination service watches every task's heartbeat; when one worker finishes and
    exits while another still runs, the service reports it as unhealthy and the survivor prints
    "The tasks have crashed ..." although both succeed. Waiting at a barrier at exit keeps every
    worker until all have reached it. A task that really crashed (stopped sending heartbeats) fails
    the barrier, and the others exit with TensorFlow's report as before. Idempotent; registered by
    :func:`tfdevices.build_strategy` and by the fit adapter when a multi-worker ``fit`` starts.
    """
    if not _EXIT["registered"]:
        _EXIT["registered"] = True
        atexit.register(_wait_for_the_others)
        previous = sys.excepthook

        def crashed(*info: Any) -> None:  # an uncaught exception ends this worker: it must not wait for the
            _EXIT["crashed"] = True  # others (they may be blocked on it), its peers see it go as before
            previous(*info)

        sys.excepthook = crashed


def _wait_for_the_others() -> None:
    if _EXIT.get("crashed"):
        return
    try:
        from tensorflow.python.eager import context  # noqa: PLC0415 (lazy TensorFlow)

        if context.context().coordination_service is None:
            return
        context.context().wait_at_barrier("tfdevices/exit", EXIT_BARRIER_MS)
    except Exception:  # noqa: BLE001 (a peer that crashed fails the barrier: TensorFlow reports it)
        return


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
            the fit adapter does not cover (keras-team/keras#20585), with the working path in the hint.
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
    Keras 3 on many workers with the fit adapter (:func:`install_fit_adapter`). A custom
    loop (``strategy.run`` over ``experimental_distribute_dataset``, optimizer built in
    the scope) under ``MultiWorkerMirroredStrategy`` with a Keras the adapter does not
    cover. Both end with identical weights on every worker.

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
    adapter = install_fit_adapter() if multi else None
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
