"""No function in the package is over 100 lines (functions short enough to read at once: STYLE).

A function's length is its span in the source (``def`` line to last line, docstring included), read
with ``ast``; a function nested in another counts on its own and inside its outer one.
"""

from __future__ import annotations

import ast
import pathlib
import textwrap

import tfdevices

PACKAGE = pathlib.Path(tfdevices.__file__).parent
MAX_LINES = 100


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """``(name, lines)`` of each function in ``source`` longer than ``limit`` lines."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_the_measure_counts_a_functions_whole_span():
    body = "\n".join(f"    x{i} = {i}" for i in range(99))
    source = f"def short():\n{body}\n\n\nasync def long():\n{body}\n    return x0\n"
    assert long_functions(source) == [("long", 101)]
    nested = (
        "def outer():\n    def inner():\n" + textwrap.indent(body, "    ") + "\n        return 1\n    return inner\n"
    )
    assert long_functions(nested) == [("outer", 103), ("inner", 101)]


def test_no_function_over_100_lines():
    found = [
        f"{path.relative_to(PACKAGE).as_posix()}:{name} ({lines} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, lines in long_functions(path.read_text())
    ]
    assert found == []
