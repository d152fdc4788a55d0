"""Mend ``fit_progress``: ``model.fit`` says which step and which callback each rank is in.

In a multi-worker ``fit`` a rank that stops (in a callback, in its input) blocks the others in the
step's collectives; the stall detector (:mod:`tfdevices.jobs.stall`) names it from each rank's
progress record. This mend wraps ``CallbackList.__init__`` of Keras 3
(``keras/src/callbacks/callback_list.py``) and of tf_keras (``tf_keras/src/callbacks.py``): each
list built for ``fit`` gets two small callbacks, first one that marks "after step N" at a batch's end,
last one that marks "in step N" once every other callback's batch-begin hook has run; and each
callback of the user's that overrides a hook is wrapped, on that instance, to mark "in
ModelCheckpoint.on_epoch_end" while it runs. The step, the logs and the callbacks' own behaviour are
Keras' own. Cost: a few microseconds per batch. Every few steps the batch-end mark has the waits the step's
collectives and its input read measured read into the record (the ``collective_wait`` mend:
:mod:`tfdevices.mends.collective_wait`).

Detected: the ``CallbackList`` class of the Keras in use exists with the ``callbacks`` attribute.
Applied where a multi-worker job reports progress. Off: ``fit`` reports nothing (custom loops still do,
through ``step_progress``). Undone: ``__init__`` restored (lists built since keep their callbacks).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from tfdevices.mends import collective_wait
from tfdevices.mends.base import Finding, Mend, is_installed, needed, not_needed, register, unknown

#: module -> (CallbackList's module attribute, Callback base's module)
_KERAS = {
    "keras.src.callbacks.callback_list": ("CallbackList", "keras.src.callbacks.callback"),
    "tf_keras.src.callbacks": ("CallbackList", "tf_keras.src.callbacks"),
}
_HOOKS = (
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_begin",
    "on_test_end",
)


class FitProgress(Mend):
    """Wraps ``CallbackList.__init__`` (Keras 3, tf_keras) to add progress marks to ``fit``."""

    name = "fit_progress"
    changes = (
        "CallbackList.__init__ of Keras 3 and tf_keras (wrapped: two progress callbacks, user hooks named; "
        "every few steps the collectives' waits are read: collective_wait)"
    )
    why = "a rank stuck in a callback or its input blocks the others in the step's collectives, with no word"
    detects = "keras.src.callbacks.callback_list.CallbackList or tf_keras.src.callbacks.CallbackList exists"

    def __init__(self) -> None:
        super().__init__()
        self.writer: Any = None
        self._patched: dict[str, Any] = {}

    def _check(self) -> Finding:
        keras3, tf_keras = is_installed("keras"), is_installed("tf_keras")
        if not keras3 and not tf_keras:
            return not_needed("neither Keras 3 nor tf_keras is installed: no fit to report")
        only_tf_keras = needed("tf_keras' CallbackList (wrapped once tf_keras is imported)")
        if not keras3:
            return only_tf_keras
        if not any(name in sys.modules for name in _KERAS):
            try:
                importlib.import_module("keras.src.callbacks.callback_list")
            except ImportError:
                if tf_keras:
                    return only_tf_keras
                return unknown(
                    "neither Keras 3's nor tf_keras' CallbackList can be imported",
                    "fit's steps are not reported; a custom loop's are (step_progress).",
                )
        return needed(self.detects)

    def _apply(self) -> str:
        self.extend()
        return f"fit marks its steps and names its callbacks ({', '.join(sorted(self._patched))})"

    def extend(self) -> None:
        """Wraps the ``CallbackList`` of each Keras imported since (Keras 3 and tf_keras may both load)."""
        for module_name, (attr, base_module) in _KERAS.items():
            module = sys.modules.get(module_name)
            if module is None or module_name in self._patched:
                continue
            cls = getattr(module, attr, None)
            base = getattr(sys.modules.get(base_module), "Callback", None)
            if cls is None or base is None:
                continue
            self._patched[module_name] = (cls, cls.__init__)
            cls.__init__ = self._wrapped_init(cls.__init__, base)

    def _wrapped_init(self, original: Any, base: Any) -> Any:
        mend = self
        begins, ends = _marks(base, mend)

        def __init__(callback_list: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
            original(callback_list, *args, **kwargs)
            if mend.writer is None or not mend.applied:
                return
            for callback in callback_list.callbacks:
                _name_hooks(callback, base, mend.writer)
            callback_list.callbacks.insert(0, ends())
            callback_list.callbacks.append(begins())
            if hasattr(callback_list, "_should_call_train_batch_hooks"):  # tf_keras decides at construction
                callback_list._should_call_train_batch_hooks = True

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        return __init__

    def _undo(self) -> None:
        for cls, init in self._patched.values():
            cls.__init__ = init
        self._patched.clear()


def _marks(base: Any, mend: FitProgress) -> tuple[Any, Any]:
    """The two callbacks (classes made once per Keras): step begins, last; step ends, first."""

    class _StepBegins(base):
        async_safe = True
        _supports_tf_logs = True

        def on_train_begin(self, logs: Any = None) -> None:
            mend.writer.in_fit = True

        def on_train_end(self, logs: Any = None) -> None:
            mend.writer.in_fit = False

        def on_train_batch_begin(self, batch: Any, logs: Any = None) -> None:
            mend.writer.begin_step()

    class _StepEnds(base):
        async_safe = True  # Keras 3 may run it on another thread, after the next batch began
        _supports_tf_logs = True

        def on_train_begin(self, logs: Any = None) -> None:
            self.ends = mend.writer.started

        def on_train_batch_end(self, batch: Any, logs: Any = None) -> None:
            self.ends += 1
            mend.writer.end_step(step=self.ends)
            collective_wait.MEND.after_step(mend.writer, self.ends)

    return _StepBegins, _StepEnds


def _name_hooks(callback: Any, base: Any, writer: Any) -> None:
    """Wraps, on this instance, each hook its class overrides: the record names it while it runs."""
    for hook in _HOOKS:
        own = getattr(type(callback), hook, None)
        if own is None or own is getattr(base, hook, None) or hook in vars(callback):
            continue
        setattr(callback, hook, _named(getattr(callback, hook), f"{type(callback).__name__}.{hook}", writer))


def _named(method: Any, label: str, writer: Any) -> Any:
    def hook(*args: Any, **kwargs: Any) -> Any:
        before = writer.phase, writer.detail
        writer.enter("callback", label)
        try:
            return method(*args, **kwargs)
        finally:
            writer.enter(*before)

    hook.__wrapped__ = method  # type: ignore[attr-defined]
    return hook


MEND = register(FitProgress())
