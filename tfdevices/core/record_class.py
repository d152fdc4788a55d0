"""Frozen records for the GPU listing path, without importing :mod:`dataclasses`.

``tfdevices list``, ``select`` and ``topo`` aim at 1.3x a bare python + NVML call (issue 37).
On Python 3.11 ``import dataclasses`` loads ``inspect``, ``ast``, ``dis`` and ``tokenize``,
and every ``@dataclass`` compiles its methods with ``exec`` (about 1 ms a class). Issue 54
measured the ten records ``list`` builds as dataclasses: ``list`` took 6 to 24 ms more
(fake H200, 2 cores: 1.15x -> 1.56x and 1.23x -> 1.69x the floor in two runs; 1.18x its own
CPU time side by side), so the records of the GPU commands' path (:mod:`tfdevices.gpus.nvml`,
``gpuinfo``, ``processes``, ``topology``, ``inventory``, ``visibility``, ``spec``,
``selection``, ``wiring``) use :func:`record` instead: the same frozen, keyword-or-positional,
compared-by-value classes, with :func:`replace`, :func:`asdict` and :func:`fields` in place of
dataclasses' own. Everything else in the package is ``@dataclasses.dataclass(frozen=True)``;
:func:`tfdevices.core.json_records.load` reads both kinds back from JSON.

>>> @record
... class Point:
...     x: int
...     y: int = 0
>>> p = Point(1)
>>> p, p == Point(x=1, y=0), replace(p, y=2), asdict(p)
(Point(x=1, y=0), True, Point(x=1, y=2), {'x': 1, 'y': 0})
>>> p.x = 3
Traceback (most recent call last):
...
tfdevices.core.record_class.FrozenRecordError: cannot assign to field 'x' of a frozen Point
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing: the listing path does not load it
if TYPE_CHECKING:
    from typing import TypeVar

    from typing_extensions import dataclass_transform

    _R = TypeVar("_R")
else:

    def dataclass_transform(**_: object):  # noqa: D103 - what type checkers read; nothing at run time
        return lambda decorator: decorator


_FIELDS = "__record_fields__"
_DEFAULTS = "__record_defaults__"


class FrozenRecordError(AttributeError):
    """A field of a frozen record was assigned or deleted (as dataclasses' ``FrozenInstanceError``)."""


@dataclass_transform(frozen_default=True)
def record(cls: type[_R]) -> type[_R]:
    """Makes ``cls`` a frozen record of its annotated fields (class attributes are defaults).

    Fields are read in definition order, base classes first; a field without a
    default may not follow one with a default, as with dataclasses.

    Raises:
        TypeError: a field without a default follows one with a default.
    """
    names: list[str] = []
    defaults: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        for name in klass.__dict__.get("__annotations__", {}):  # noqa: RUF063 (this class's own; no inspect)
            if name not in names:
                names.append(name)
            if name in klass.__dict__:
                defaults[name] = klass.__dict__[name]
    for before, after in zip(names, names[1:]):
        if before in defaults and after not in defaults:
            raise TypeError(f"{cls.__name__}: field {after!r} without a default follows {before!r}, which has one")
    setattr(cls, _FIELDS, tuple(names))
    setattr(cls, _DEFAULTS, defaults)
    for name, method in (
        ("__init__", _init),
        ("__repr__", _repr),
        ("__eq__", _eq),
        ("__hash__", _hash),
        ("__setattr__", _setattr),
        ("__delattr__", _delattr),
    ):
        setattr(cls, name, method)
    return cls


def _init(self: object, *args: object, **kwargs: object) -> None:
    cls = type(self)
    names: tuple[str, ...] = getattr(cls, _FIELDS)
    if len(args) > len(names):
        raise TypeError(f"{cls.__name__}() takes {len(names)} arguments but {len(args)} were given")
    values = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names:
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
        if name in values:
            raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
        values[name] = value
    defaults = getattr(cls, _DEFAULTS)
    for name in names:
        if name in values:
            object.__setattr__(self, name, values[name])
        elif name in defaults:
            object.__setattr__(self, name, defaults[name])
        else:
            raise TypeError(f"{cls.__name__}() missing required argument {name!r}")


def _repr(self: object) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in getattr(type(self), _FIELDS))
    return f"{type(self).__qualname__}({shown})"


def _values(obj: object) -> tuple[object, ...]:
    return tuple(getattr(obj, name) for name in getattr(type(obj), _FIELDS))


def _eq(self: object, other: object) -> object:  # bool, or NotImplemented
    if type(other) is not type(self):
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: object) -> int:
    return hash(_values(self))


def _setattr(self: object, name: str, value: object) -> None:
    raise FrozenRecordError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")


def _delattr(self: object, name: str) -> None:
    raise FrozenRecordError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")


def is_record(obj: object) -> bool:
    """Whether ``obj`` is a record instance or class."""
    return hasattr(obj, _FIELDS)


def fields(obj: object) -> tuple[str, ...]:
    """The field names of a record (instance or class), in order."""
    names: tuple[str, ...] = getattr(obj, _FIELDS)
    return names


def defaults(obj: object) -> dict[str, object]:
    """The fields of a record (instance or class) that have a default, with it."""
    given: dict[str, object] = getattr(obj, _DEFAULTS)
    return dict(given)


def replace(obj: _R, **changes: object) -> _R:
    """A copy of the record ``obj`` with ``changes`` (as ``dataclasses.replace``)."""
    return type(obj)(**{**{name: getattr(obj, name) for name in fields(obj)}, **changes})


def asdict(obj: object) -> dict[str, object]:
    """The record's fields as a dict, nested records, tuples, lists and dicts converted too."""
    return {name: _plain(getattr(obj, name)) for name in fields(obj)}


def _plain(value: object) -> object:
    if is_record(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
