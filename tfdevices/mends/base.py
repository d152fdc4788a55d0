"""What every mend is: a declared, switchable, reported change to code tfdevices does not own.

A mend (OpenTelemetry's instrumentors and gevent's named patches are the models) is one
class per change: it says what it changes and why (the upstream issue or source line),
detects whether it applies, can be turned off by name (``TFDEVICES_MENDS`` or :func:`turn_off`),
reports what it did (:meth:`Mend.status`), and can be undone where the change allows it.

Detection looks at what the mend fixes first, versions second (docs/architecture.rst, rule 8). A mend's
:meth:`Mend._check` returns a :class:`Finding`: the defect (or the gap it fills) is here
(:attr:`Found.NEEDED`: it applies), is not (:attr:`Found.NOT_NEEDED`: left alone, and said why),
or it cannot tell (:attr:`Found.UNKNOWN`: left alone, and what the user should do said once).
Versions only annotate: a mend that declares the releases it was checked against
(:class:`Checked`) says so when the installed release is outside them, and still does what its
finding says ("Keras 3.16.0.dev2026102704: not checked against this release; the defect
keras-team/keras#20585 is present, mended: ...").

This module imports nothing of TensorFlow or Keras: each mend imports them when it applies, and
:func:`installed` reads what is installed from the packages' metadata.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib.abc
import importlib.metadata
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from tfdevices.core.errors import EnvVarError, InputError
from tfdevices.core.units import short_repr

logger = logging.getLogger("tfdevices")

#: The environment variable that turns mends off: a comma list of their names, or ``all``.
MENDS_ENV = "TFDEVICES_MENDS"
#: Longest ``TFDEVICES_MENDS`` read (a list of every name is far shorter).
_MAX_ENV_CHARS = 1024


class MendState(str, enum.Enum):
    """What a mend's status says (a ``str``: ``MendState.APPLIED == "applied"``, and JSON writes the word)."""

    APPLIED = "applied"  # the change is in place
    NOT_NEEDED = "not_needed"  # nothing to mend here (the defect is gone, or what it changes is not used)
    SKIPPED = "skipped"  # it cannot tell, or cannot apply here: nothing changed, what to do said once
    OFF = "off"  # turned off by TFDEVICES_MENDS or turn_off()
    NOT_REACHED = "not_reached"  # nothing in this process has needed it yet
    UNDONE = "undone"  # applied, then taken back
    WOULD_APPLY = "would_apply"  # a preview: on, and it would apply here when needed

    def __str__(self) -> str:
        return self.value


APPLIED = MendState.APPLIED
NOT_NEEDED = MendState.NOT_NEEDED
SKIPPED = MendState.SKIPPED
OFF = MendState.OFF
NOT_REACHED = MendState.NOT_REACHED
UNDONE = MendState.UNDONE
WOULD_APPLY = MendState.WOULD_APPLY
STATES = tuple(MendState)


class Found(enum.Enum):
    """What a mend's detection found."""

    NEEDED = "needed"  # the defect (or the gap the mend fills) is here, and what it changes exists
    NOT_NEEDED = "not_needed"  # nothing to mend: the defect is gone, or what it changes is not in use
    UNKNOWN = "unknown"  # it cannot tell, or cannot apply here: left alone, the user told what to do


@dataclasses.dataclass(frozen=True)
class Finding:
    """A mend's detection: what it found, and what it looked at to find it.

    Attributes:
        found: :class:`Found`.
        why: what the detection saw, in words ("reduce_per_replica averages a scalar log across
            workers along axis 0").
        hint: for :attr:`Found.UNKNOWN`, what the user should do.
    """

    found: Found
    why: str
    hint: str = ""


def needed(why: str) -> Finding:
    """A :class:`Finding`: the mend applies here, because ``why``."""
    return Finding(Found.NEEDED, why)


def not_needed(why: str) -> Finding:
    """A :class:`Finding`: nothing to mend here, because ``why``."""
    return Finding(Found.NOT_NEEDED, why)


def unknown(why: str, hint: str) -> Finding:
    """A :class:`Finding`: the mend cannot tell (or cannot apply), because ``why``; ``hint`` says what to do."""
    return Finding(Found.UNKNOWN, why, hint)


@dataclasses.dataclass(frozen=True)
class Distribution:
    """One installed distribution that provides an import name: ``keras-nightly`` provides ``keras``."""

    name: str
    version: str


@functools.lru_cache(maxsize=1)
def _by_import_name() -> dict[str, tuple[str, ...]]:
    return {name: tuple(dict.fromkeys(dists)) for name, dists in importlib.metadata.packages_distributions().items()}


def installed(import_name: str) -> tuple[Distribution, ...]:
    """The installed distributions that provide ``import_name``, from their metadata (nothing is imported).

    ``keras`` is provided by ``keras`` or ``keras-nightly``, ``tensorflow`` by ``tensorflow``,
    ``tensorflow-cpu`` or ``tf-nightly``: the import name is what a program uses, whichever
    distribution brought it.

    >>> [d.name for d in installed("no_such_module_here")]
    []
    """
    found = []
    for name in _by_import_name().get(import_name, ()):
        try:
            metadata = importlib.metadata.distribution(name).metadata
        except importlib.metadata.PackageNotFoundError:  # a record left by an uninstall
            continue
        found.append(Distribution(str(metadata["Name"] or name), str(metadata["Version"])))
    return tuple(found)


def is_installed(import_name: str) -> bool:
    """Whether ``import_name`` can be imported here (found on ``sys.path``; nothing is imported)."""
    if import_name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(import_name) is not None
    except (ImportError, ValueError):
        return False


@dataclasses.dataclass(frozen=True)
class Checked:
    """The releases of a package a mend was checked against: from ``low`` up to, not including, ``high``.

    Attributes:
        package: what people call it ("Keras").
        low: the first release checked, ``(major, minor)``.
        high: the first release not checked.
    """

    package: str
    low: tuple[int, int]
    high: tuple[int, int]

    @property
    def releases(self) -> str:
        """``"3.3 to 3.15"``."""
        return f"{self.low[0]}.{self.low[1]} to {self.high[0]}.{self.high[1] - 1}"

    def covers(self, version: str) -> bool:
        """Whether ``version`` is a release in the range (a ``.dev`` build of the first unchecked one is not).

        >>> checked = Checked("Keras", (3, 3), (3, 16))
        >>> checked.covers("3.15.1"), checked.covers("3.16.0.dev2026102704"), checked.covers("x")
        (True, False, False)
        """
        release = release_of(version)
        return release is not None and self.low <= release < self.high

    def note(self, version: str | None) -> str:
        """``""`` for a release checked (or none in use); else ``"Keras 3.16.0.dev2026102704: not checked ...; "``."""
        if version is None or self.covers(version):
            return ""
        return f"{self.package} {_short(version)}: not checked against this release (checked: {self.releases}); "


def release_of(version: str) -> tuple[int, int] | None:
    """``"3.15.1"`` -> ``(3, 15)``; ``None`` for what is not a release number (pure).

    >>> release_of("3.16.0.dev2026102704"), release_of("3.\u0661\u0665.0")
    ((3, 16), None)
    """
    parts = str(version).split(".")
    if len(parts) < 2 or not all(p.isascii() and p.isdigit() and len(p) <= 6 for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


@dataclasses.dataclass(frozen=True)
class MendStatus:
    """One mend as this process has it.

    Attributes:
        name: the mend's name (what ``TFDEVICES_MENDS`` takes).
        state: a :class:`MendState`.
        detail: what it did, or why not.
        changes: what it changes (the declaration).
        why: the upstream issue or source line it answers.
    """

    name: str
    state: MendState
    detail: str
    changes: str
    why: str

    def line(self) -> str:
        """``keras_fit      applied      Keras 3.15.1 ...``: one line for a table."""
        return f"{self.name:<14} {self.state.value:<12} {self.detail}"


class Mend:
    """One change to code tfdevices does not own. Subclasses set the declaration and the hooks.

    Subclasses define ``name``, ``changes``, ``why``, ``detects`` (what the detection looks at
    first) and ``hint`` (what a user does where it cannot apply); where the change was checked
    release by release, ``checked`` (a :class:`Checked`) and :meth:`_version`. The hooks:
    :meth:`_check` (a :class:`Finding`), :meth:`_apply` (make the change; returns what it did)
    and :meth:`_undo` (take it back, or raise ``NotImplementedError`` where it cannot be).
    :meth:`apply` is idempotent and thread-safe.
    """

    name: ClassVar[str] = ""
    changes: ClassVar[str] = ""
    why: ClassVar[str] = ""
    detects: ClassVar[str] = ""
    hint: ClassVar[str] = ""
    checked: ClassVar[Checked | None] = None

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._state = NOT_REACHED
        self._detail = "nothing in this process has needed it yet"
        self._warned = False

    # ------------------------------------------------------------ for subclasses

    def _check(self) -> Finding:
        """What the detection finds here (the default: it always applies)."""
        return needed(self.detects)

    def _version(self) -> str | None:
        """The release of what :attr:`checked` names, as in use here (``None``: unknown)."""
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
        """Applies the mend where it is on and what it fixes is here; says once when it cannot tell. Idempotent."""
        with self._lock:
            if self._state in (APPLIED, NOT_NEEDED, SKIPPED):
                return self.status()
            if not self.enabled():
                self._set(OFF, f"turned off ({MENDS_ENV} or tfdevices.mends.turn_off)")
                return self.status()
            finding, note = self._check(), self._note()
            if finding.found is Found.NEEDED:
                try:
                    done = self._apply()
                except NotApplicableError as err:
                    finding = unknown(str(err), err.hint or self.hint)
                else:
                    self._set(APPLIED, f"{note}{finding.why}; mended: {done}" if note else done)
                    if note:
                        logger.info("tfdevices: mend %s: %s", self.name, self._detail)
                    return self.status()
            self._set(*_verdict(finding, note))
            if self._state == SKIPPED and not self._warned:
                self._warned = True
                logger.warning("tfdevices: mend %s changed nothing: %s", self.name, self._detail)
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
        (which may import what it would change, never change it) and says what it found.
        """
        with self._lock:
            if self._state != NOT_REACHED or not self.enabled():
                return self.status()
            try:
                finding, note = self._check(), self._note()
            except Exception as err:  # noqa: BLE001 (a detection that fails is what the preview reports)
                finding, note = unknown(f"its detection failed: {type(err).__name__}: {err}", self.hint), ""
            state, detail = _verdict(finding, note)
            return MendStatus(self.name, state, detail, self.changes, self.why)

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

    def _note(self) -> str:
        return "" if self.checked is None else self.checked.note(self._version())

    def _set(self, state: MendState, detail: str) -> None:
        self._state, self._detail = state, detail


def _verdict(finding: Finding, note: str) -> tuple[MendState, str]:
    """The state and words of a finding (pure): would apply, not needed, or skipped with what to do."""
    if finding.found is Found.NEEDED:
        return WOULD_APPLY, f"{note}{finding.why}"
    if finding.found is Found.NOT_NEEDED:
        return NOT_NEEDED, f"{note}{finding.why}"
    return SKIPPED, f"{note}{finding.why}" + (f" HINT: {finding.hint}" if finding.hint else "")


_MISSING = object()  # an attribute the owner did not hold itself (inherited, or none)


@dataclasses.dataclass(frozen=True)
class Replaced:
    """One attribute a mend replaces: whose, which, what was there and what the mend puts.

    Attributes:
        owner: the class or module.
        attribute: the attribute's name.
        original: what the owner itself held (not inherited), or a marker where it held none.
        ours: the replacement.
    """

    owner: Any
    attribute: str
    original: Any
    ours: Any

    @classmethod
    def of(cls, owner: Any, attribute: str, ours: Any) -> Replaced:
        """The replacement of ``owner.attribute`` by ``ours`` (made by :meth:`put`, not here)."""
        return cls(owner, attribute, vars(owner).get(attribute, _MISSING), ours)

    def put(self) -> None:
        """Puts the replacement in place."""
        setattr(self.owner, self.attribute, self.ours)

    def restore(self) -> None:
        """Puts the original back where the replacement is still there (a later wrapper keeps its own)."""
        if vars(self.owner).get(self.attribute) is not self.ours:
            return
        if self.original is _MISSING:
            delattr(self.owner, self.attribute)
        else:
            setattr(self.owner, self.attribute, self.original)


class NotApplicableError(Exception):
    """Raised by a mend's ``_apply`` when what it changes is not there: it becomes a SKIPPED status.

    Args:
        message: what is missing.
        hint: what the user should do (default: the mend's own ``hint``).
    """

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


#: What a mend of TensorFlow finds where TensorFlow is not installed.
NO_TENSORFLOW = "TensorFlow is not installed here: nothing of it to mend"


def without_tensorflow() -> Finding | None:
    """``not_needed`` where TensorFlow is not installed (found on ``sys.path``, not imported); else ``None``."""
    return None if is_installed("tensorflow") else not_needed(NO_TENSORFLOW)


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
        asked: what was asked, for the message (default: ``TFDEVICES_MENDS``, its entries named by position).

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
    fix = f"name mends from: {', '.join(known)} (or 'all'), comma-separated; see `tfdevices doctor`."
    if len(value) > _MAX_ENV_CHARS or not value.isascii() or not value.isprintable():
        raise EnvVarError(f"{asked or MENDS_ENV}: not a short ASCII list of mend names.", hint=fix)
    parts = [part.strip().lower() for part in value.split(",") if part.strip()]
    if "all" in parts:
        return frozenset(known)
    unknown = [n for n, part in enumerate(parts, 1) if part not in known]
    if unknown:
        what = (  # a variable's value is not for printing: its entries are named by position
            f"{MENDS_ENV}: entr{'y' if len(unknown) == 1 else 'ies'} {', '.join(map(str, unknown))} "
            f"name{'s' if len(unknown) == 1 else ''} no mend"
            if asked is None
            else f"{asked}: no mend is called {', '.join(map(repr, sorted({parts[n - 1] for n in unknown})))}"
        )
        raise EnvVarError(f"{what}; the mends are {', '.join(known)}.", hint=fix)
    return frozenset(parts)


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
                f"turn_off({short_repr(text)}): mend names are strings.", hint=f"e.g. turn_off('{names()[0]}')."
            )
    try:
        off = parse_mends_off(",".join(mends), asked=f"turn_off({', '.join(short_repr(m) for m in mends)})")
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
    """Finds nothing itself: wraps the loader of one module to call a function once it has run.

    A look-up that imports nothing (``importlib.util.find_spec``, as :func:`is_installed` does) gets a
    wrapped spec it never runs: the finder stays on ``sys.meta_path`` until the module itself is run.
    """

    def __init__(self, module: str, then: Callable[[], object]) -> None:
        self.module, self.then = module, then
        self._looking = False

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.module or self._looking:
            return None
        self._looking = True  # the look-up below must not find this finder again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking = False
        if spec is None or spec.loader is None:
            return spec
        run, finder = spec.loader.exec_module, self

        def exec_module(module: Any) -> None:
            run(module)
            if finder in sys.meta_path:  # once, however many look-ups were wrapped
                sys.meta_path.remove(finder)
                finder.then()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def use_environment() -> None:
    """Forgets :func:`turn_off`: ``TFDEVICES_MENDS`` decides again which mends are off."""
    _TURNED_OFF["python"] = None
