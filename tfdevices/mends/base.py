"""What every mend is: a declared, switchable, reported change to code tfdevices does not own.

A mend (OpenTelemetry's instrumentors and gevent's named patches are the models) is one
class per change: it says what it changes and why (the upstream issue or source line),
detects whether it applies (features first, versions second), can be turned off by name
(``TFDEVICES_MENDS`` or :func:`turn_off`), reports what it did (:meth:`Mend.status`), and
can be undone where the change allows it. A mend that cannot apply says so once, plainly,
and changes nothing.

This module imports nothing of TensorFlow or Keras: each mend imports them when it applies.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from tfdevices.core.errors import EnvVarError, InputError
from tfdevices.core.units import shown

logger = logging.getLogger("tfdevices")

#: The environment variable that turns mends off: a comma list of their names, or ``all``.
MENDS_ENV = "TFDEVICES_MENDS"
#: Longest ``TFDEVICES_MENDS`` read (a list of every name is far shorter).
_MAX_ENV_CHARS = 1024

# what a mend's status says
APPLIED = "applied"  # the change is in place
NOT_NEEDED = "not_needed"  # nothing to mend here (e.g. tf_keras, whose fit works)
SKIPPED = "skipped"  # it could not apply (a release or platform it does not cover): nothing changed
OFF = "off"  # turned off by TFDEVICES_MENDS or turn_off()
NOT_REACHED = "not_reached"  # nothing in this process has needed it yet
UNDONE = "undone"  # applied, then taken back
WOULD_APPLY = "would_apply"  # a preview: on, and it would apply here when needed
STATES = (APPLIED, NOT_NEEDED, SKIPPED, OFF, NOT_REACHED, UNDONE, WOULD_APPLY)


@dataclasses.dataclass(frozen=True)
class MendStatus:
    """One mend as this process has it.

    Attributes:
        name: the mend's name (what ``TFDEVICES_MENDS`` takes).
        state: one of :data:`STATES`.
        detail: what it did, or why not.
        changes: what it changes (the declaration).
        why: the upstream issue or source line it answers.
    """

    name: str
    state: str
    detail: str
    changes: str
    why: str

    def line(self) -> str:
        """``keras_fit      applied      Keras 3.15.1 ...``: one line for a table."""
        return f"{self.name:<14} {self.state:<12} {self.detail}"


class Mend:
    """One change to code tfdevices does not own. Subclasses set the declaration and the three hooks.

    Subclasses define ``name``, ``changes``, ``why`` and ``detects`` (how it knows it applies), and
    :meth:`_check` (``None`` when it applies, else why not and whether that is worth a warning),
    :meth:`_apply` (make the change; returns what it did) and :meth:`_undo` (take it back, or raise
    ``NotImplementedError`` where it cannot be). :meth:`apply` is idempotent and thread-safe.
    """

    name: ClassVar[str] = ""
    changes: ClassVar[str] = ""
    why: ClassVar[str] = ""
    detects: ClassVar[str] = ""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._state = NOT_REACHED
        self._detail = "nothing in this process has needed it yet"
        self._warned = False

    # ------------------------------------------------------------ for subclasses

    def _check(self) -> tuple[str, str] | None:
        """``None`` when the mend applies here; else ``(NOT_NEEDED or SKIPPED, why)``."""
        return None

    def _apply(self) -> str:
        raise NotImplementedError

    def _undo(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ for everyone

    def enabled(self) -> bool:
        """Whether this mend may apply: not turned off by :func:`turn_off` or ``TFDEVICES_MENDS``."""
        return self.name not in turned_off()

    def apply(self) -> MendStatus:
        """Applies the mend where it is on and applies here; says once when it cannot. Idempotent."""
        with self._lock:
            if self._state in (APPLIED, NOT_NEEDED, SKIPPED):
                return self.status()
            if not self.enabled():
                self._set(OFF, f"turned off ({MENDS_ENV} or tfdevices.mends.turn_off)")
                return self.status()
            verdict = self._check()
            if verdict is None:
                try:
                    self._set(APPLIED, self._apply())
                except NotApplicableError as err:
                    verdict = (SKIPPED, str(err))
            if verdict is not None:
                self._set(*verdict)
                if verdict[0] == SKIPPED and not self._warned:
                    self._warned = True
                    logger.warning(
                        "tfdevices: mend %s does not apply here and changed nothing: %s", self.name, verdict[1]
                    )
            return self.status()

    def undo(self) -> MendStatus:
        """Takes the change back where it was made; a mend that cannot be undone says so in its status."""
        with self._lock:
            if self._state != APPLIED:
                return self.status()
            try:
                self._undo()
            except NotImplementedError:
                self._detail += " (cannot be undone in a running process)"
                return self.status()
            self._set(UNDONE, "taken back")
            return self.status()

    def preview(self) -> MendStatus:
        """What this mend would do in this process, found without changing anything (``tfdevices doctor``).

        A mend this process already reached says what it did; one not reached yet runs its detection
        (which may import what it would change, never change it).
        """
        with self._lock:
            if self._state != NOT_REACHED or not self.enabled():
                return self.status()
            try:
                verdict = self._check()
            except Exception as err:  # noqa: BLE001 (a detection that fails is what the preview reports)
                verdict = (SKIPPED, f"its detection failed: {type(err).__name__}: {err}")
            if verdict is None:
                return MendStatus(self.name, WOULD_APPLY, self.detects, self.changes, self.why)
            return MendStatus(self.name, verdict[0], verdict[1], self.changes, self.why)

    def status(self) -> MendStatus:
        """What this mend did in this process (off wins over not reached)."""
        state, detail = self._state, self._detail
        if state == NOT_REACHED and not self.enabled():
            state, detail = OFF, f"turned off ({MENDS_ENV} or tfdevices.mends.turn_off)"
        return MendStatus(self.name, state, detail, self.changes, self.why)

    @property
    def applied(self) -> bool:
        """Whether the change is in place now."""
        return self._state == APPLIED

    def _set(self, state: str, detail: str) -> None:
        self._state, self._detail = state, detail


class NotApplicableError(Exception):
    """Raised by a mend's ``_apply`` when what it changes is not there: it becomes a SKIPPED status."""


# --------------------------------------------------------------------------- turning mends off

_M = TypeVar("_M", bound=Mend)
_REGISTRY: dict[str, Mend] = {}
_TURNED_OFF: dict[str, frozenset[str] | None] = {"python": None}


def register(mend: _M) -> _M:
    """Adds a mend to the registry (each mend module registers its one instance)."""
    _REGISTRY[mend.name] = mend
    return mend


def names() -> tuple[str, ...]:
    """Every declared mend's name, in the order declared."""
    return tuple(_REGISTRY)


def parse_mends_off(value: str, *, asked: str | None = None) -> frozenset[str]:
    """Reads a comma list of mend names (or ``all``, or nothing) (pure).

    Args:
        value: ``"keras_fit,loopback"``, ``"all"`` or ``""``.
        asked: what was asked, for the message (default ``TFDEVICES_MENDS='...'``).

    Returns:
        The names turned off.

    Raises:
        EnvVarError: a name that is no mend's, or a value too long or not ASCII.

    >>> sorted(parse_mends_off("keras_fit, exit_barrier"))
    ['exit_barrier', 'keras_fit']
    >>> parse_mends_off("") == frozenset()
    True
    """
    known = names()
    asked = f"{MENDS_ENV}={shown(value)}" if asked is None else asked
    fix = f"name mends from: {', '.join(known)} (or 'all'), comma-separated; see `tfdevices doctor`."
    if len(value) > _MAX_ENV_CHARS or not value.isascii() or not value.isprintable():
        raise EnvVarError(f"{asked}: not a short ASCII list of mend names.", hint=fix)
    wanted = {part.strip().lower() for part in value.split(",") if part.strip()}
    if "all" in wanted:
        return frozenset(known)
    unknown = sorted(wanted - set(known))
    if unknown:
        raise EnvVarError(
            f"{asked}: no mend is called {', '.join(map(repr, unknown))}; the mends are {', '.join(known)}.",
            hint=fix,
        )
    return frozenset(wanted)


def turned_off(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The mends turned off: by :func:`turn_off` if it was called, else by ``TFDEVICES_MENDS``.

    Raises:
        EnvVarError: ``TFDEVICES_MENDS`` names no mend.
    """
    chosen = _TURNED_OFF["python"]
    if chosen is not None and env is None:
        return chosen
    return parse_mends_off((os.environ if env is None else env).get(MENDS_ENV, ""))


def turn_off(*mends: str) -> frozenset[str]:
    """Turns mends off by name (``"all"`` for every one) from Python; an explicit call beats ``TFDEVICES_MENDS``.

    Mends already applied are undone where they can be. ``turn_off()`` with no name turns every
    mend back on (those already undone apply again when next needed).

    Returns:
        The names now off.

    Raises:
        InputError: a name that is no mend's.
    """
    for text in mends:
        if not isinstance(text, str):
            raise InputError(
                f"turn_off({shown(text)}): mend names are strings.", hint=f"e.g. turn_off('{names()[0]}')."
            )
    try:
        off = parse_mends_off(",".join(mends), asked=f"turn_off({', '.join(shown(m) for m in mends)})")
    except EnvVarError as err:
        raise InputError(err.message, hint=err.hint) from None
    _TURNED_OFF["python"] = off
    for name in off:
        _REGISTRY[name].undo()
    for mend in _REGISTRY.values():  # on again: an undone mend may apply again
        if mend.name not in off and mend.status().state in (UNDONE, OFF):
            mend._set(NOT_REACHED, "nothing in this process has needed it since it was turned on")
    return off


def when_imported(module: str, then: Callable[[], object]) -> None:
    """Runs ``then()`` once ``module`` has been imported by the program (at once if it already was).

    Imports nothing itself: a finder first on ``sys.meta_path`` wraps the module's loader once.
    """
    if module in sys.modules:
        then()
        return
    sys.meta_path.insert(0, _WhenImported(module, then))


class _WhenImported(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of one module to call a function once it has run."""

    def __init__(self, module: str, then: Callable[[], object]) -> None:
        self.module, self.then = module, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.module:
            return None
        sys.meta_path.remove(self)  # once; and find_spec below must not find this finder again
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run, then = spec.loader.exec_module, self.then

        def exec_module(module: Any) -> None:
            run(module)
            then()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def use_environment() -> None:
    """Forgets :func:`turn_off`: ``TFDEVICES_MENDS`` decides again which mends are off."""
    _TURNED_OFF["python"] = None


__all__ = [
    "APPLIED",
    "MENDS_ENV",
    "NOT_NEEDED",
    "NOT_REACHED",
    "OFF",
    "SKIPPED",
    "STATES",
    "UNDONE",
    "WOULD_APPLY",
    "NotApplicableError",
    "Mend",
    "MendStatus",
    "names",
    "parse_mends_off",
    "register",
    "turn_off",
    "turned_off",
    "use_environment",
    "when_imported",
]
