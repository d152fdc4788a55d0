"""DESIGN rule 8, held by the syntax tree: outside ``tfdevices/mends/`` no code assigns to another library's
attributes (``module.attr = ...``, ``setattr(module, ...)``, ``Class.__init__ = ...``).

What counts as another library's: a name bound by an ``import`` of a module that is not tfdevices (at any
level of the module, function-level imports included), a name bound to what :func:`import_tf` or
``importlib.import_module`` returns, and ``sys.modules[...]``. An assignment to a double-underscore
attribute (``X.__init__``, ``X.__class__``) counts too wherever ``X`` is not ``self``, ``cls`` or a class or
function the same module defines.
"""

from __future__ import annotations

import ast
import pathlib
import textwrap

import pytest

import tfdevices

PACKAGE = pathlib.Path(tfdevices.__file__).parent

#: Assignments outside mends/ that stay, each with why: (module path, the target as written).
ALLOWED = {
    # the environment of this process: runtime is the one module that writes it (DESIGN, "The flow")
    ("runtime.py", "os.environ"),
    # a tune candidate's own fresh process (tfdevices started it): the parent's import path, so that the
    # user's model module imports there too
    ("decide/child.py", "sys.path"),
}

_RETURNS_FOREIGN = {"import_tf", "import_module", "__import__"}


def _foreign_names(tree: ast.Module) -> set[str]:
    """Names the module binds to another library's modules or objects, anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if not _own(a.name))
        elif isinstance(node, ast.ImportFrom) and not node.level and not _own(node.module or ""):
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Assign) and _returns_foreign(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _own(module: str) -> bool:
    return module == "tfdevices" or module.startswith("tfdevices.")


def _returns_foreign(value: ast.expr) -> bool:
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in _RETURNS_FOREIGN
    return isinstance(value, ast.Subscript) and ast.unparse(value.value) == "sys.modules"


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node


def foreign_assignments(source: str) -> list[tuple[int, str]]:
    """``(line, target)`` for each assignment to another library's attribute in ``source``."""
    tree = ast.parse(source)
    foreign = _foreign_names(tree)
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    found: list[tuple[int, str]] = []

    def check(target: ast.expr, line: int, attribute: str) -> None:
        root = _root(target)
        name = root.id if isinstance(root, ast.Name) else ""
        if name in foreign or (attribute.startswith("__") and name not in own | {"self", "cls"}):
            found.append((line, ast.unparse(target)))

    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            if isinstance(target, ast.Attribute):
                check(target, node.lineno, target.attr)
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):
                check(target.value, node.lineno, target.value.attr)  # module.table[key] = ...
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
        ):
            attribute = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else ""
            check(node.args[0], node.lineno, str(attribute))
    return found


# --------------------------------------------------------------------------- the checker catches what it must


@pytest.mark.parametrize(
    "source,caught",
    [
        ("import os\nos.environ = {}", ["os.environ"]),
        ("import sys\ndef f():\n    sys.excepthook = print", ["sys.excepthook"]),
        ("def f():\n    from tensorflow.python.framework import func_graph\n    func_graph.trace = None", None),
        ("from keras.src import trainer as t\nt.Trainer.fit = lambda self: 0", ["t.Trainer.fit"]),
        ("import tensorflow as tf\nsetattr(tf.config, 'x', 1)", ["tf.config"]),
        ("import tensorflow as tf\ndelattr(tf, 'x')", ["tf"]),
        ("from tfdevices.core._tf import import_tf\ntf = import_tf()\ntf.foo = 1", ["tf.foo"]),
        ("import importlib\nm = importlib.import_module('json')\nm.dumps = str", ["m.dumps"]),
        ("import sys\nm = sys.modules['json']\nm.dumps = str", ["m.dumps"]),
        ("import abc\nabc.registry['x'] = 1", ["abc.registry"]),
        ("import a\na.x, b = 1, 2", ["a.x"]),
        ("def f(thing):\n    thing.__init__ = None", ["thing.__init__"]),
        ("def f(obj):\n    obj.__class__ = int", ["obj.__class__"]),
        ("import logging\nlogging.root.level += 1", ["logging.root.level"]),
    ],
)
def test_the_checker_catches_a_planted_change(source: str, caught: list[str] | None) -> None:
    found = [target for _, target in foreign_assignments(textwrap.dedent(source))]
    assert found == (caught if caught is not None else ["func_graph.trace"])


@pytest.mark.parametrize(
    "source",
    [
        "class A:\n    def __init__(self):\n        self.x = 1\n        self.__dict__['y'] = 2",
        "def f():\n    pass\nf.__doc__ = 'own'",
        "from tfdevices.core import units\nunits.x = 1",  # tfdevices' own module: not this rule's
        "import json\nx = json.dumps({})\ny = {}\ny['a'] = 1",
        "from . import sibling\nsibling.x = 1",
        "def f(args):\n    args.value = 3",  # an object handed over by the caller, not a library's
    ],
)
def test_the_checker_leaves_own_objects_alone(source: str) -> None:
    assert foreign_assignments(source) == []


# --------------------------------------------------------------------------- the package holds the rule


def test_no_assignment_to_another_librarys_attribute_outside_mends() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("mends/"):
            continue
        found += [
            f"tfdevices/{relative}:{line}: {target}"
            for line, target in foreign_assignments(path.read_text())
            if (relative, target) not in ALLOWED
        ]
    assert found == []


def test_the_allowed_list_is_short_and_each_entry_is_still_there() -> None:
    assert len(ALLOWED) <= 5
    for relative, target in ALLOWED:
        assert target in [t for _, t in foreign_assignments((PACKAGE / relative).read_text())], (relative, target)
