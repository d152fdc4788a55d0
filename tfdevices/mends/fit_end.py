"""Mend ``fit_end``: what a callback holds for ``fit`` is let go when ``fit`` raises.

Keras calls a callback's ``on_train_end`` only when training ends normally: in Keras 3
(``keras/src/backend/tensorflow/trainer.py``, ``TensorFlowTrainer.fit``) and tf_keras
(``tf_keras/src/engine/training.py``, ``Model.fit``) ``callbacks.on_train_end(...)`` is the last
line of the training block, with no ``try``/``finally`` around it. When the model, its input or
another callback raises, the exception leaves ``fit`` and no callback hears of it. tfdevices'
``PlacementLogger`` holds process-wide things for one fit: TensorFlow's run metadata (its watch),
the model's train function wrapped for the step it captures, a background writer. This mend wraps
``fit`` of those two classes: when it raises, the clean-ups registered for that model
(:func:`when_fit_fails`, by whoever holds something for its fit) run, then the same exception goes
on. A ``fit`` that returns is not touched, and nothing else changes: the training, the callbacks
and the error are Keras' own.

Detected: the defect first, in each Keras installed (found on ``sys.path``, not imported): its
``fit`` calls ``on_train_end`` outside any ``finally`` (read from its source, once that Keras is
imported; each wrapped then). A ``fit`` that calls it in a ``finally`` is left alone; no Keras at
all: nothing to mend. Keras 3.16's nightlies call the trainer class ``Trainer``: it is found by
what it is. Applied when a ``PlacementLogger`` is made. Off: a ``fit``
that raises leaves the logger's run metadata on (and its train function wrapped) until the process
ends. Undone: ``fit`` restored.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import logging
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

from tfdevices.mends.base import Finding, Mend, is_installed, needed, not_needed, register
from tfdevices.mends.keras_trainer import KERAS_TRAINER, trainer_class

logger = logging.getLogger("tfdevices")

#: The Keras packages, and the module whose trainer class's ``fit`` the mend wraps.
_FITS = (("keras", KERAS_TRAINER), ("tf_keras", "tf_keras.src.engine.training"))


def _fit_class(module_name: str) -> Any:
    """The class whose ``fit`` runs the callbacks: Keras 3's TensorFlow trainer, tf_keras' ``Model``."""
    module = importlib.import_module(module_name)
    return getattr(module, "Model", None) if module_name.startswith("tf_keras") else trainer_class(module)


def ends_outside_finally(fit: Any) -> bool | None:
    """Whether ``fit`` calls ``on_train_end`` and none of those calls is in a ``finally`` (the defect).

    ``None`` where its source cannot be read (it cannot tell).
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fit))))
    except (OSError, TypeError, SyntaxError):
        return None
    guarded = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.Try)
        for statement in block.finalbody
        for node in ast.walk(statement)
    }
    ends = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "on_train_end"
    ]
    return bool(ends) and not any(id(node) in guarded for node in ends)


class FitEnd(Mend):
    """Wraps ``fit`` (Keras 3's TensorFlow trainer, tf_keras' Model): registered clean-ups run when it raises."""

    name = "fit_end"
    changes = "fit of Keras 3's TensorFlowTrainer and tf_keras' Model (wrapped: clean-ups run when fit raises)"
    why = "Keras calls on_train_end only when fit ends normally: a failed fit left a PlacementLogger's run metadata on"
    detects = (
        "Keras 3 or tf_keras is installed, and (once imported) its fit calls on_train_end outside any finally "
        "(its source read)"
    )

    def __init__(self) -> None:
        super().__init__()
        self._patched: dict[str, tuple[Any, Any]] = {}
        self._hooks: dict[int, list[Callable[[], Any]]] = {}  # id(model) -> its clean-ups
        self._hooks_lock = threading.Lock()

    def _check(self) -> Finding:
        kinds = [package for package, _ in _FITS if is_installed(package)]
        if not kinds:
            return not_needed("neither Keras 3 nor tf_keras is installed: no fit to wrap")
        checked = {package: self._defect(package, module) for package, module in _FITS if module in sys.modules}
        if checked and not any(checked.values()) and set(checked) == set(kinds):
            return not_needed(f"the fit of {', '.join(kinds)} calls on_train_end in a finally: nothing to mend")
        found = [package for package, defect in checked.items() if defect]
        if found:
            return needed(f"the fit of {', '.join(found)} calls on_train_end outside any finally")
        return needed(
            f"{', '.join(kinds)} installed: its fit is read once imported, and wrapped where it calls on_train_end "
            "outside any finally"
        )

    @staticmethod
    def _defect(package: str, module_name: str) -> bool:
        """Whether that Keras' ``fit`` has the defect (one whose source cannot be read is taken to have it)."""
        try:
            cls = _fit_class(module_name)
        except ImportError:
            return False
        return cls is not None and ends_outside_finally(cls.fit) is not False

    def _apply(self) -> str:
        self.extend()  # and again at each arm(): a Keras imported later is wrapped then
        wrapped = ", ".join(sorted(self._patched)) or "none imported yet"
        return f"fit lets its callbacks' holds go when it raises ({wrapped})"

    def extend(self) -> None:
        """Wraps the ``fit`` of each Keras imported since (Keras 3 and tf_keras may both be loaded)."""
        for package, module_name in _FITS:
            if package not in sys.modules or module_name in self._patched:
                continue
            try:
                cls = _fit_class(module_name)
            except ImportError:  # another backend, or a layout this mend does not know
                continue
            if cls is not None and callable(getattr(cls, "fit", None)) and self._defect(package, module_name):
                self._patched[module_name] = (cls, cls.__dict__.get("fit"))
                cls.fit = self._wrapped(cls.fit)

    def _wrapped(self, original: Any) -> Any:
        mend = self

        def fit(model: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(model, *args, **kwargs)
            except BaseException:
                mend.failed(model)
                raise

        fit.__wrapped__ = original  # type: ignore[attr-defined]
        fit.__name__, fit.__doc__ = getattr(original, "__name__", "fit"), getattr(original, "__doc__", None)
        return fit

    def when_fit_fails(self, model: Any, hook: Callable[[], Any]) -> None:
        """Runs ``hook()`` if the ``fit`` of ``model`` now running raises (once); :meth:`forget` drops it."""
        with self._hooks_lock:
            self._hooks.setdefault(id(model), []).append(hook)

    def forget(self, model: Any, hook: Callable[[], Any]) -> None:
        """Drops ``hook`` (the fit ended normally: its ``on_train_end`` let go itself)."""
        with self._hooks_lock:
            hooks = self._hooks.get(id(model), [])
            if hook in hooks:
                hooks.remove(hook)
            if not hooks:
                self._hooks.pop(id(model), None)

    def failed(self, model: Any) -> None:
        """Runs the clean-ups registered for ``model`` (its ``fit`` raised); one that fails does not stop the rest."""
        with self._hooks_lock:
            hooks = self._hooks.pop(id(model), [])
        for hook in hooks:
            try:
                hook()
            except Exception as err:  # noqa: BLE001 (the fit's own error is the one to raise; this one is said)
                logger.warning("tfdevices: a clean-up after a failed fit failed: %s: %s", type(err).__name__, err)

    def _undo(self) -> None:
        for cls, fit in self._patched.values():
            if fit is None:
                del cls.fit
            else:
                cls.fit = fit
        self._patched.clear()


MEND = register(FitEnd())


def arm() -> bool:
    """Wraps ``fit`` of each Keras imported (where the mend is on); returns whether it is wrapped.

    Call it before ``fit`` starts (``PlacementLogger`` does when it is made): a ``fit`` already
    running when the mend applies is Keras' own.
    """
    if MEND.apply().state != "applied":
        return False
    MEND.extend()
    return True


def when_fit_fails(model: Any, hook: Callable[[], Any]) -> bool:
    """Runs ``hook()`` if the ``fit`` of ``model`` now running raises; returns whether it will (the mend is on).

    :func:`forget` drops it when the fit ends normally.
    """
    if not MEND.applied:
        return False
    MEND.when_fit_fails(model, hook)
    return True


def forget(model: Any, hook: Callable[[], Any]) -> None:
    """Drops a clean-up :func:`when_fit_fails` registered (the fit ended normally)."""
    MEND.forget(model, hook)
