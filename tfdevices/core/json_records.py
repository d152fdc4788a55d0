"""One typed loader for records read from JSON: :func:`load` checks each field against its annotation.

A saved listing, a topology, a process entry: each record read back from JSON is checked by
:func:`load`, driven by the record's own field annotations (``int``, ``str | None``,
``tuple[GpuProcess, ...]``, ``tuple[int, int]``, ``dict[str, int]``, a nested record). What a
type cannot say (a range, the names a field may hold, a format of the record's own) is a
:class:`Check` in the class's ``json_rules`` (a :class:`Rules`). Every read is bounded: lists and
objects hold at most :data:`MAX_ITEMS` entries unless a check says otherwise, strings at most
:data:`MAX_TEXT` characters (and no lone surrogate: what loads can be printed and written back),
records nest at most :data:`MAX_DEPTH` deep. Each error is one line: the input and the field's path,
the value (shortened), what it must be, what it is, and the record's hint (how to fix it).

It works on :func:`tfdevices.core.record_class.record` classes and on frozen dataclasses alike, and
imports neither :mod:`dataclasses` nor :mod:`typing` (the listing path reads saved listings too).
Annotations are read as text (every module uses ``from __future__ import annotations``), by a
small parser of their own: nothing is evaluated.

>>> from tfdevices.core.record_class import record
>>> @record
... class Point:
...     x: int
...     tags: tuple[str, ...] = ()
...     json_rules = Rules(entry="a point", hint="0 to 9.", checks={"x": Check(low=0, high=9)})
>>> load(Point, {"x": 3, "tags": ["a"]}, where="p.json")
Point(x=3, tags=('a',))
>>> load(Point, {"x": 12}, where="p.json")
Traceback (most recent call last):
...
tfdevices.core.errors.InputError: p.json: x=12 must be a whole number from 0 to 9; it is out of range. HINT: 0 to 9.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping

from tfdevices.core.errors import InputError
from tfdevices.core.record_class import defaults, fields, is_record, record
from tfdevices.core.units import short_repr

TYPE_CHECKING = False  # typing's flag without importing typing: the listing path does not load it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MAX_DEPTH = 16
"""The deepest records and lists nest in one load."""
MAX_ITEMS = 4096
"""The most entries of a list or an object, unless a :class:`Check` says otherwise."""
MAX_TEXT = 4096
"""The longest string, in characters, unless a :class:`Check` says otherwise."""
_MAX_ANNOTATION = 300
_HINT = "fix the file, or write it again with the tool that made it."


@record
class Check:
    """What one field must hold beyond its type.

    Attributes:
        low: the smallest number (a whole number or a number, in the field or its list's items).
        high: the largest number.
        choices: the strings the field may hold.
        noun: what ``choices`` are called (``"kinds"``), or what one entry of a list is (``"GPU"``).
        max_items: the most entries of a list or object (default :data:`MAX_ITEMS`).
        max_text: the longest string (default :data:`MAX_TEXT`).
        parse: the field's own reader, called as ``parse(value, what, values)`` (``values``: the
            fields read before it) in place of the type's; it returns the field's value or raises.
    """

    low: int | float | None = None
    high: int | float | None = None
    choices: tuple[str, ...] = ()
    noun: str = ""
    max_items: int = MAX_ITEMS
    max_text: int = MAX_TEXT
    parse: Callable[[Any, str, dict[str, Any]], Any] | None = None


@record
class Rules:
    """How one record class is read from JSON (its ``json_rules`` class attribute).

    Attributes:
        entry: the record in words, for "expected a JSON object for ..." (``"a GPU entry"``).
        hint: how to fix a bad entry, ending every message.
        prefix: put before each field's name in messages (``"GPU field "``).
        checks: field name -> :class:`Check`.
        skip: fields never read from JSON (set after loading, such as the file it came from).
        error: the error raised (:class:`~tfdevices.core.errors.InputError` or a subclass).
    """

    entry: str = ""
    hint: str = _HINT
    prefix: str = ""
    checks: dict[str, Check] | None = None
    skip: tuple[str, ...] = ()
    error: type[InputError] = InputError


def load(cls: type[Any], data: object, *, where: str, depth: int = 0) -> Any:
    """``cls`` built from ``data`` (JSON values), every field checked against its annotation and checks.

    Args:
        cls: a :func:`~tfdevices.core.record_class.record` class or a dataclass.
        data: what ``json.loads`` returned for it.
        where: the input's name, first in every message (``"inventory file 'node.json': gpus[2]"``).
        depth: how deep this record is nested (callers leave it 0).

    Raises:
        InputError: (or the class's ``Rules.error``) the data is not such a record; the message names the
            path, the value, what it must be and how to fix it.
    """
    rules = rules_of(cls)
    if depth > MAX_DEPTH:
        raise rules.error(f"{where}: nested deeper than {MAX_DEPTH} records.", hint=rules.hint)
    if not isinstance(data, Mapping):
        raise rules.error(
            f"{where}: expected a JSON object for {rules.entry or 'a ' + cls.__name__}, not {kind(data)}.",
            hint=rules.hint,
        )
    spec = _spec(cls)
    known = _known(cls, spec, rules)
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        shown = ", ".join(short_repr(k, 40) for k in unknown[:8]) + (", ..." if len(unknown) > 8 else "")
        raise rules.error(
            f"{where}: unknown {rules.prefix.strip() or 'field'}(s) [{shown}]; known fields: {sorted(known)}.",
            hint=rules.hint,
        )
    required = [name for name, _, needed in spec if needed]
    missing = [name for name in required if name not in data]
    if missing:
        raise rules.error(
            f"{where}: lacks {', '.join(repr(m) for m in missing)}; required fields: {required}.", hint=rules.hint
        )
    checks = rules.checks or {}
    values: dict[str, Any] = {}
    reader = _Reader(rules, depth)
    for name, tree, _ in spec:
        if name in data:
            value = data[name]
            what = f"{where}: {rules.prefix}{name}"
            check = checks.get(name, _NO_CHECK)
            if check.parse is not None and not (value is None and _fits(tree, None)):
                values[name] = check.parse(value, what, values)
            else:
                values[name] = reader.read(tree, value, what, check)
    return cls(**values)


def rules_of(cls: type[Any]) -> Rules:
    """The class's ``json_rules``, or the plain rules (any ``InputError``, a general hint)."""
    rules = getattr(cls, "json_rules", None)
    return rules if isinstance(rules, Rules) else _PLAIN


def kind(value: object) -> str:
    """A JSON value's kind in words: ``"null"``, ``"a boolean"``, ``"a whole number"``, ``"a list"`` ...

    >>> kind(None), kind(True), kind(3), kind(1.5), kind("x"), kind([]), kind({})
    ('null', 'a boolean', 'a whole number', 'a number', 'a string', 'a list', 'an object')
    """
    if value is None:
        return "null"
    for types, words in ((bool, "a boolean"), (int, "a whole number"), (float, "a number"), (str, "a string")):
        if isinstance(value, types):
            return words
    return "a list" if isinstance(value, (list, tuple)) else "an object" if isinstance(value, Mapping) else "not JSON"


def check_text(value: object, what: str, *, error: type[InputError] = InputError, hint: str = _HINT,
               limit: int = MAX_TEXT) -> None:  # fmt: skip
    """Refuses a string that cannot be printed or written back: longer than ``limit``, or holding a lone surrogate."""
    if not isinstance(value, str):
        return
    if len(value) > limit:
        raise error(f"{what}={short_repr(value)} is longer than {limit:,} characters.", hint=hint)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise error(
            f"{what}={short_repr(value)} holds a lone surrogate ({value[err.start]!r} at "
            f"character {err.start}), which is not text.",
            hint=hint,
        ) from None


_NO_CHECK = Check()
_PLAIN = Rules()
_SCALARS: dict[str, object] = {"int": int, "float": float, "str": str, "bool": bool, "None": None}
_LISTS = {"tuple": tuple, "list": list, "Sequence": tuple}
_MAPS = {"dict", "Mapping"}
_SPECS: dict[type, tuple[tuple[str, Any, bool], ...]] = {}
_KNOWN: dict[type, frozenset[str]] = {}


class _Reader:
    """Reads one record's values against their type trees (internal)."""

    def __init__(self, rules: Rules, depth: int) -> None:
        self.rules = rules
        self.depth = depth

    def fail(self, what: str, value: object, expected: str, why: str = "") -> InputError:
        return self.rules.error(
            f"{what}={short_repr(value)} must be {expected}; {why or 'it is ' + kind(value)}.", hint=self.rules.hint
        )

    def read(self, tree: Any, value: Any, what: str, check: Check) -> Any:
        """The value read as ``tree`` says (a scalar type, ``None``, a record class, or a tagged tuple)."""
        if isinstance(tree, tuple) and tree[0] == "union":
            return self._union(tree[1], value, what, check)
        if tree is None or tree in (int, float, str, bool):
            return self._scalar(tree, value, what, check)
        if isinstance(tree, tuple):
            return self._container(tree, value, what, check)
        return load(tree, value, where=what, depth=self.depth + 1)

    def _union(self, members: tuple[Any, ...], value: Any, what: str, check: Check) -> Any:
        if value is None and None in members:
            return None
        for member in members:
            if _fits(member, value):
                return self.read(member, value, what, check)
        raise self.fail(what, value, " or ".join(_expected(m, check) for m in members))

    def _scalar(self, tree: Any, value: Any, what: str, check: Check) -> Any:
        if not _fits(tree, value):
            raise self.fail(what, value, _expected(tree, check))
        if tree in (int, float):
            if tree is float and not math.isfinite(value):
                raise self.fail(what, value, _expected(tree, check), "it is not a finite number")
            low = -(1 << 64) if check.low is None else check.low
            high = 1 << 64 if check.high is None else check.high
            if not low <= value <= high:
                raise self.fail(what, value, _expected(tree, check), "it is out of range")
        if tree is str:
            check_text(value, what, error=self.rules.error, hint=self.rules.hint, limit=check.max_text)
            if check.choices and value not in check.choices:
                raise self.rules.error(
                    f"{what}={short_repr(value)}; known {check.noun or 'values'}: {', '.join(check.choices)}.",
                    hint=self.rules.hint,
                )
        return value

    def _container(self, tree: tuple[Any, ...], value: Any, what: str, check: Check) -> Any:
        tag, args = tree
        if not _fits(tree, value):
            raise self.fail(what, value, _expected(tree, check))
        if len(value) > check.max_items:
            noun = f"{check.noun} " if check.noun else ""
            raise self.rules.error(
                f"{what}: {len(value):,} {noun}entries; at most {check.max_items:,} are read.", hint=self.rules.hint
            )
        if self.depth + 1 > MAX_DEPTH:
            raise self.rules.error(f"{what}: nested deeper than {MAX_DEPTH}.", hint=self.rules.hint)
        inner = _Reader(self.rules, self.depth + 1)
        if tag == "dict":
            out = {}
            for key, item in value.items():
                check_text(key, f"{what} key", error=self.rules.error, hint=self.rules.hint)
                out[key] = inner.read(args[0], item, f"{what}[{short_repr(key, 40)}]", check)
            return out
        if tag == "fixed" and len(value) != len(args):
            raise self.fail(what, value, _expected(tree, check), f"it holds {len(value)}")
        items = [
            inner.read(args[i] if tag == "fixed" else args[0], item, f"{what}[{i}]", check)
            for i, item in enumerate(value)
        ]
        return items if tag == "list" else tuple(items)


def _fits(tree: Any, value: Any) -> bool:
    """Whether ``value``'s JSON kind is the kind ``tree`` reads (its content is checked after)."""
    if tree is None:
        return value is None
    if tree is bool:
        return isinstance(value, bool)
    if tree is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tree is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tree is str:
        return isinstance(value, str)
    if isinstance(tree, tuple) and tree[0] == "union":
        return any(_fits(m, value) for m in tree[1])
    if isinstance(tree, tuple):
        return isinstance(value, Mapping) if tree[0] == "dict" else isinstance(value, (list, tuple))
    return isinstance(value, Mapping)


def _expected(tree: Any, check: Check) -> str:
    """What ``tree`` reads, in words, with the check's range and bounds."""
    if tree is None:
        return "null"
    if tree in (int, float):
        words = "a whole number" if tree is int else "a number"
        if check.low is not None and check.high is not None:
            return f"{words} from {check.low:,} to {check.high:,}"
        return words
    if tree is str:
        return f"a string of at most {check.max_text:,} characters"
    if tree is bool:
        return "true or false"
    if isinstance(tree, tuple) and tree[0] == "union":
        return " or ".join(_expected(m, check) for m in tree[1])
    if isinstance(tree, tuple) and tree[0] == "fixed":
        return f"a list of {len(tree[1])} ({', '.join(_expected(a, _NO_CHECK) for a in tree[1])})"
    if isinstance(tree, tuple):
        return f"{'an object' if tree[0] == 'dict' else 'a list'} of at most {check.max_items:,} entries"
    return f"an object ({rules_of(tree).entry or tree.__name__})"


def _known(cls: type[Any], spec: tuple[tuple[str, Any, bool], ...], rules: Rules) -> frozenset[str]:
    """The field names JSON may hold for ``cls`` (its fields less ``rules.skip``), once per class."""
    if cls not in _KNOWN:
        _KNOWN[cls] = frozenset(name for name, _, _ in spec if name not in rules.skip)
    return _KNOWN[cls]


def _spec(cls: type[Any]) -> tuple[tuple[str, Any, bool], ...]:
    """``(name, type tree, required)`` of each field of ``cls``, read once per class."""
    if cls in _SPECS:
        return _SPECS[cls]
    module = vars(sys.modules[cls.__module__]) if cls.__module__ in sys.modules else {}
    if is_record(cls):
        declared: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            declared.update(klass.__dict__.get("__annotations__", {}))  # noqa: RUF063 (no inspect)
        given = defaults(cls)
        rows = [(name, declared[name], name not in given) for name in fields(cls)]
    elif hasattr(cls, "__dataclass_fields__"):
        missing = sys.modules["dataclasses"].MISSING  # a dataclass: dataclasses is loaded already
        rows = [
            (f.name, f.type, f.default is missing and f.default_factory is missing)
            for f in cls.__dataclass_fields__.values()
            if f.init
        ]
    else:
        raise TypeError(f"{cls!r} is neither a record nor a dataclass")
    spec = tuple((name, _resolve(_parse(text), module, cls), required) for name, text, required in rows)
    _SPECS[cls] = spec
    return spec


def _parse(annotation: object) -> Any:
    """An annotation's text as a tree of names: ``("union", ...)``, ``(name, args)`` or a name."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    if len(text) > _MAX_ANNOTATION:
        raise TypeError(f"annotation longer than {_MAX_ANNOTATION} characters: {text[:60]}...")
    tokens = _tokens(text)
    try:
        tree, end = _union(tokens, 0, 0)
    except IndexError:
        end = -1
    if end != len(tokens):
        raise TypeError(f"cannot read the annotation {text!r}")
    return tree


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == " ":
            i += 1
        elif text.startswith("...", i):
            out.append("...")
            i += 3
        elif c in "[],|":
            out.append(c)
            i += 1
        else:
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] in "_."):
                j += 1
            if j == i:
                raise TypeError(f"cannot read the annotation {text!r} (at {c!r})")
            out.append(text[i:j])
            i = j
    return out


def _union(tokens: list[str], at: int, depth: int) -> tuple[Any, int]:
    if depth > MAX_DEPTH:
        raise TypeError("annotation nested too deeply")
    members = []
    while True:
        if at >= len(tokens):
            raise TypeError("annotation ends early")
        name, at = tokens[at], at + 1
        args: list[Any] = []
        if at < len(tokens) and tokens[at] == "[":
            at += 1
            while tokens[at] != "]":
                if tokens[at] == "...":
                    args.append("...")
                    at += 1
                else:
                    arg, at = _union(tokens, at, depth + 1)
                    args.append(arg)
                if tokens[at] == ",":
                    at += 1
            at += 1
        members.append((name, tuple(args)) if args else name)
        if at < len(tokens) and tokens[at] == "|":
            at += 1
            continue
        return (members[0] if len(members) == 1 else ("union", tuple(members))), at


def _resolve(tree: Any, module: Mapping[str, Any], owner: type) -> Any:
    """A name tree as the loader's type tree: scalars, ``("union"|"tuple"|"list"|"fixed"|"dict", args)``, classes."""
    if isinstance(tree, str):
        if tree in _SCALARS:
            return _SCALARS[tree]
        found = owner if tree == owner.__name__ else module.get(tree.rsplit(".", 1)[-1])
        if isinstance(found, type) and (is_record(found) or hasattr(found, "__dataclass_fields__")):
            return found
        raise TypeError(f"{owner.__name__}: the loader cannot read fields of type {tree!r}")
    name, args = tree
    if name == "union":
        return ("union", tuple(_resolve(a, module, owner) for a in args))
    if name == "Optional":
        return ("union", (_resolve(args[0], module, owner), None))
    if name in _LISTS:
        if name == "tuple" and not (len(args) == 2 and args[1] == "..."):
            return ("fixed", tuple(_resolve(a, module, owner) for a in args))
        return ("list" if name == "list" else "tuple", (_resolve(args[0], module, owner),))
    if name in _MAPS and len(args) == 2 and args[0] == "str":
        return ("dict", (_resolve(args[1], module, owner),))
    raise TypeError(f"{owner.__name__}: the loader cannot read fields of type {name}[...]")
