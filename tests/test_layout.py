"""The package's shape: wings that import one way, no cycles, at most 20 entries on top, no private name
taken across modules.

Imports are read from the source (``ast``), function-level ones included, so a
cycle hidden inside a function still counts.
"""

from __future__ import annotations

import ast
import pathlib

import tfdevices

PACKAGE = pathlib.Path(tfdevices.__file__).parent
# what each part may import from the package (besides itself); the top floor may import everything below it
ALLOWED = {
    "core": {"core"},
    "mends": {"core", "mends"},
    "gpus": {"core", "mends", "gpus"},
    "jobs": {"core", "mends", "gpus", "jobs"},
    "layers": {"core", "mends", "layers"},  # layers import TensorFlow: through the door the mends set
}
# the one module whose own-package imports may sit inside functions: each command imports its module when it runs
LAZY_OK = {"tfdevices.cli"}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, bool]]:
    """(imported module of the package, at module level?) for each import in ``name``."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = {id(node) for node in tree.body}
    # imports under `if TYPE_CHECKING:` never run (a lazy package's names, for the type checker): not counted
    typing_only = {
        id(inner)
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for target in targets:
            if target in MODULES and target != name:
                found.append((target, id(node) in top))
    return found


def _part(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else "top"


def test_at_most_20_entries_at_the_top_of_the_package():
    # 16, decide/ (tune, advise): the flow's last stage, mends/: every change to code tfdevices does not
    # own, doctor.py: the one screen for a bug report, and errors.py: every error's public home
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name not in ("__pycache__", "py.typed"))
    assert len(entries) <= 20, entries


def test_no_import_cycles_counting_function_level_imports():
    graph = {m: {t for t, _ in _imports(m)} for m in MODULES}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(m: str, path: list[str]) -> bool:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycle.extend(path[path.index(t) :] + [m, t] if t in path else [m, t])
                return True
            if t not in state and visit(t, path + [m]):
                return True
        state[m] = 2
        return False

    for m in sorted(graph):
        if m not in state and visit(m, []):
            break
    assert cycle == []


def test_each_wing_imports_only_the_floors_below_it():
    offenders = [
        f"{m} imports {t}"
        for m in MODULES
        if _part(m) != "top"
        for t, _ in _imports(m)
        if _part(t) not in ALLOWED[_part(m)]
    ]
    assert offenders == []


def test_own_modules_are_imported_at_module_level():
    offenders = [
        f"{m} imports {t} inside a function"
        for m in MODULES
        if m not in LAZY_OK
        for t, at_top in _imports(m)
        if not at_top
    ]
    assert offenders == []


def test_the_checks_see_imports_where_they_are():
    # the reader finds a known module-level import and a known wing, so the tests above can fail
    assert ("tfdevices.core.errors", True) in _imports("tfdevices.gpus.spec")
    assert _part("tfdevices.gpus.spec") == "gpus" and _part("tfdevices.runtime") == "top"
    assert any(not at_top for _, at_top in _imports("tfdevices.cli"))


def test_the_verify_package_keeps_each_module_under_500_lines():
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items() if m.startswith("tfdevices.verify")}
    assert len(sizes) >= 8, sizes  # the package's sections, not one file
    assert {m: n for m, n in sizes.items() if n > 500} == {}


def _private_imports(source: str, filename: str) -> list[str]:
    """``"file:line: from module import _name"`` for each private name the source takes from the package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "tfdevices"):
            module = "." * node.level + (node.module or "")
            found += [
                f"{filename}:{node.lineno}: from {module} import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
    return found


def test_no_module_imports_another_modules_private_name():
    # a name used across modules is public in its package (no leading underscore), or the two modules are one
    offenders = [
        line
        for path in sorted(MODULES.values())
        for line in _private_imports(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    assert offenders == []


def test_the_private_import_check_names_file_line_and_name():
    source = (
        "from tfdevices.verify.records import make_op, _flat\nfrom . import __version__\nfrom .host import _Trace\n"
    )
    assert _private_imports(source, "x.py") == [
        "x.py:1: from tfdevices.verify.records import _flat",
        "x.py:3: from .host import _Trace",
    ]


def test_capture_stays_a_function_whatever_submodules_are_imported():
    import importlib

    for name in MODULES:
        if name.startswith("tfdevices.verify."):
            importlib.import_module(name)
    import tfdevices.verify

    assert callable(tfdevices.capture) and tfdevices.capture.__name__ == "capture"
    assert tfdevices.verify.capture is tfdevices.capture and tfdevices.verify.capturing.__name__ == "capturing"
    assert not any(name.rsplit(".", 1)[-1] in ("capture", "capturing") for name in MODULES)
