"""The package's functions are short enough to read at once, and its constructors take few arguments.

Two house limits, held here with ``ast`` over every module of ``tfdevices/`` (they were set by issue 45;
this file is where they are written down):

* no function is over :data:`MAX_LINES` lines: its span in the source, ``def`` line to last line, docstring
  included; a function nested in another counts on its own and inside its outer one;
* no constructor (``__init__``) takes over :data:`MAX_PARAMETERS` parameters besides ``self``: a class
  that needs more takes a record (a frozen dataclass, whose generated ``__init__`` is not in the source)
  and is made from it.
"""

from __future__ import annotations

import ast
import pathlib
import textwrap

import tfdevices

PACKAGE = pathlib.Path(tfdevices.__file__).parent
MAX_LINES = 60
MAX_PARAMETERS = 8


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """``(name, lines)`` of each function in ``source`` longer than ``limit`` lines."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in _functions(ast.parse(source))
        if node.end_lineno is not None and node.end_lineno - node.lineno + 1 > limit
    ]


def wide_constructors(source: str, limit: int = MAX_PARAMETERS) -> list[tuple[str, int]]:
    """``(class, parameters)`` of each ``__init__`` in ``source`` taking more than ``limit`` parameters besides
    ``self`` (``*args`` and ``**kwargs`` count one each)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for init in (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
            args = init.args
            count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs) - 1
            count += (args.vararg is not None) + (args.kwarg is not None)
            if count > limit:
                found.append((node.name, count))
    return found


def _over_the_limits() -> set[str]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        source, relative = path.read_text(), path.relative_to(PACKAGE).as_posix()
        found |= {f"{relative}:{name}" for name, _ in long_functions(source)}
        found |= {f"{relative}:{name}.__init__" for name, _ in wide_constructors(source)}
    return found


def test_the_measure_counts_a_functions_whole_span():
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    source = f"def short():\n{body}\n\n\nasync def long():\n{body}\n    return x0\n"
    assert long_functions(source) == [("long", 61)]
    nested = (
        "def outer():\n    def inner():\n" + textwrap.indent(body, "    ") + "\n        return 1\n    return inner\n"
    )
    assert long_functions(nested) == [("outer", 63), ("inner", 61)]


def test_the_measure_counts_a_constructors_parameters_and_leaves_records_alone():
    source = textwrap.dedent(
        """
        import dataclasses

        class Wide:
            def __init__(self, a, b, c, d, e, f, g, *, h, i):
                pass

        class Eight:
            def __init__(self, a, b, c, d, e, f, g, h):
                pass

        class Open:
            def __init__(self, a, b, c, d, e, f, g, *args, **kwargs):
                pass

        @dataclasses.dataclass
        class Record:
            a: int
            b: int
            c: int
            d: int
            e: int
            f: int
            g: int
            h: int
            i: int
        """
    )
    assert wide_constructors(source) == [("Wide", 9), ("Open", 9)]


def test_no_function_over_60_lines_and_no_constructor_over_8_parameters():
    assert sorted(_over_the_limits()) == []
