"""The house in numbers, at any git revision: what a stranger meets when they open the package.

For each revision given (default: ``HEAD``), the package as ``git archive`` has it, read with ``ast``:

* lines of ``tfdevices/`` (every ``.py``), and the share of them that are docstrings;
* the longest module, and the longest class with its method count;
* cross-module imports of an underscored name (``from tfdevices.x import _y``);
* modules that touch ``sys.meta_path`` (the import hooks);
* internal modules that declare ``__all__``;
* bare ``print(`` calls outside the command line (``tfdevices/cli.py``) and the demos (``tfdevices/demos/``).

Run: ``.venv/bin/python benchmarks/house_counts.py 9e3e3f7 HEAD`` (one column per revision).
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tarfile
from collections.abc import Iterator

ROOT = subprocess.run(
    ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
).stdout.strip()
PRINTS_ALLOWED = ("tfdevices/cli.py", "tfdevices/demos/")


def sources(revision: str) -> Iterator[tuple[str, str]]:
    """``(path, text)`` of each ``.py`` file of ``tfdevices/`` at ``revision``."""
    archive = subprocess.run(["git", "archive", revision, "tfdevices"], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".py"):
                handle = tar.extractfile(member)
                assert handle is not None
                yield member.name, handle.read().decode()


def _docstring_lines(tree: ast.AST) -> int:
    total = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            text = first.value.value if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else None
            if isinstance(text, str):
                total += (first.end_lineno or first.lineno) - first.lineno + 1
    return total


def _declares_all(tree: ast.Module) -> bool:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets += [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def public_paths(files: dict[str, str]) -> set[str]:
    """The files of the public modules: ``tfdevices`` and ``PUBLIC_MODULES`` as that revision's ``__init__`` has it."""
    public = {"tfdevices/__init__.py"}
    for node in ast.parse(files["tfdevices/__init__.py"]).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and "PUBLIC_MODULES" in ast.unparse(node).split("=")[0]:
            for module in ast.literal_eval(node.value):
                stem = module.replace(".", "/")
                public |= {f"{stem}.py", f"{stem}/__init__.py"} & set(files)
    return public


def counts(revision: str) -> dict[str, str]:
    """The numbers of one revision, as printed."""
    lines = docs = underscored = hooks = alls = prints = 0
    longest_module = ("", 0)
    longest_class = ("", 0, 0)
    files = dict(sources(revision))
    public = public_paths(files)
    for path, text in files.items():
        tree = ast.parse(text)
        lines += len(text.splitlines())
        docs += _docstring_lines(tree)
        longest_module = max(longest_module, (path, len(text.splitlines())), key=lambda m: m[1])
        hooks += "meta_path" in text
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body)
                longest_class = max(longest_class, (f"{path}:{node.name}", size, methods), key=lambda c: c[1])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfdevices"):
                underscored += sum(a.name.startswith("_") and not a.name.startswith("__") for a in node.names)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                prints += not path.startswith(PRINTS_ALLOWED)
        alls += path not in public and _declares_all(tree)
    return {
        "package lines": f"{lines:,}",
        "docstring share": f"{docs / lines:.0%}",
        "longest module": f"{longest_module[0]} ({longest_module[1]:,})",
        "longest class": f"{longest_class[0]} ({longest_class[1]} lines, {longest_class[2]} methods)",
        "cross-module underscored imports": str(underscored),
        "modules touching sys.meta_path": str(hooks),
        "internal modules with __all__": str(alls),
        "bare print outside the CLI and demos": str(prints),
    }


def main(argv: list[str]) -> int:
    revisions = argv or ["HEAD"]
    columns = [counts(r) for r in revisions]
    width = max(len(k) for k in columns[0])
    print(f"{'':{width}}  " + "  |  ".join(revisions))
    for key in columns[0]:
        print(f"{key:{width}}  " + "  |  ".join(c[key] for c in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
