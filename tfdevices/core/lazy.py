"""Names of a package loaded from their modules on first use (PEP 562 ``__getattr__``).

A package whose names each live in a submodule gives them without importing every
submodule when it is imported: ``tfdevices list`` (discovery) stays clear of selection
and reservation, a worker reading its rank imports no more.

>>> namespace = {"__name__": "pkg"}  # a package's globals()
>>> getattr_, dir_ = lazy_names(namespace, {"sqrt": "math"})
>>> getattr_("sqrt")(9.0), "sqrt" in dir_(), "sqrt" in namespace
(3.0, True, True)
"""

from __future__ import annotations

import importlib
import re

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def lazy_names(
    namespace: dict[str, Any],
    exports: dict[str, str],
    missing: Callable[[str], Any] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose ``globals()`` is ``namespace``: its name ``N``
    is ``exports[N]``'s ``N``, imported from that module when first read, then kept in ``namespace``.

    A name not in ``exports`` is ``missing(name)`` where given (it raises ``AttributeError`` for what the
    package does not have: the top-level package's former names and submodules), else ``AttributeError``.
    The one way tfdevices' packages export names lazily.
    """
    package = namespace["__name__"]

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            if missing is not None:
                return missing(name)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return getattr_, dir_


class LazyPattern:
    """A regular expression compiled at its first use, not when its module is imported.

    ``tfdevices list`` imports the modules that parse masks, specs and sizes, and uses their
    patterns only when there is something to parse; each compile costs about 0.1-0.5 ms.
    After the first use ``re``'s own cache holds the compiled pattern.

    >>> size = LazyPattern(r"^([0-9]+)(MiB|GiB)$")
    >>> size.match("8GiB").groups(), size.match("8 GB"), size.search("x 8MiB")
    (('8', 'GiB'), None, None)
    """

    __slots__ = ("pattern",)

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def match(self, text: str) -> re.Match[str] | None:
        """``re.compile(pattern).match(text)``."""
        return re.compile(self.pattern).match(text)

    def search(self, text: str) -> re.Match[str] | None:
        """``re.compile(pattern).search(text)``."""
        return re.compile(self.pattern).search(text)

    def sub(self, repl: str, text: str) -> str:
        """``re.compile(pattern).sub(repl, text)``."""
        return re.compile(self.pattern).sub(repl, text)
