"""docs/architecture.rst, rule 8, held by the syntax tree: outside ``tfdevices/mends/`` no code assigns to another
library's attributes (``module.attr = ...``, ``setattr(module, ...)``, ``Class.__init__ = ...``).

What counts as another library's: a name bound by an ``import`` of a module that is not tfdevices, or by
``from module import name`` (a module, a class, a mapping such as ``os.environ``), at any level of the module,
function-level imports included; a name bound (with or without an annotation, or by ``:=``) to what
:func:`import_tf`, ``importlib.import_module`` or ``__import__`` returns, to ``sys.modules[...]``, or to an
attribute of another library's name (``k = tf.keras``, ``getattr(tf, "keras")``). An assignment reaches it
through an attribute, an item (``environ["X"] = ...``), ``setattr``/``delattr``, ``object.__setattr__(mod,
...)`` (or any ``X.__setattr__``), ``vars(mod)[...]``, or a method that changes a mapping, list or set in
place (``os.environ.update(...)``, ``environ.pop(...)``, ``sys.path.insert(...)``, ``vars(mod).update(...)``).
An assignment to a double-underscore attribute (``X.__init__``, ``X.__class__``) counts too wherever ``X`` is
not ``self``, ``cls`` or a class or function the same module defines.
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
    # the environment of this process: runtime is the one module that writes it (docs/architecture.rst, "The flow")
    ("runtime.py", "os.environ"),
    # a tune candidate's own fresh process (tfdevices started it): the parent's import path, so that the
    # user's model module imports there too
    ("decide/child.py", "sys.path"),
}

_RETURNS_FOREIGN = {"import_tf", "import_module", "__import__"}
_SETTERS = {"setattr", "delattr"}
_DUNDER_SETTERS = {"__setattr__", "__delattr__"}
#: Methods that change the mapping, list or set they are called on (``os.environ.update(...)``, ``sys.path.insert``).
_MUTATORS = {
    "update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert", "remove", "add", "discard",
    "__setitem__", "__delitem__",
}  # fmt: skip


def _foreign_names(tree: ast.Module) -> set[str]:
    """Names the module binds to another library's modules or objects, anywhere in it (aliases followed)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if not _own(a.name))
        elif isinstance(node, ast.ImportFrom) and not node.level and not _own(node.module or ""):
            if node.module == "__future__":  # a compiler directive, not another library's object
                continue
            names.update(a.asname or a.name for a in node.names)
    bindings = [(target, value) for node in ast.walk(tree) for target, value in _bindings(node)]
    while True:  # an alias of an alias: until no binding adds a name
        added = {t for t, v in bindings if t not in names and (_returns_foreign(v) or _reaches(v, names))}
        if not added:
            return names
        names |= added


def _bindings(node: ast.AST) -> list[tuple[str, ast.expr]]:
    """``(name, value)`` for each plain name ``node`` binds to a value: ``=``, an annotated ``=``, ``:=``."""
    if isinstance(node, ast.Assign):
        return [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
    if (
        isinstance(node, (ast.AnnAssign, ast.NamedExpr))
        and node.value is not None
        and isinstance(node.target, ast.Name)
    ):
        return [(node.target.id, node.value)]
    return []


def _own(module: str) -> bool:
    return module == "tfdevices" or module.startswith("tfdevices.")


def _returns_foreign(value: ast.expr) -> bool:
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in _RETURNS_FOREIGN
    return isinstance(value, ast.Subscript) and ast.unparse(value.value) == "sys.modules"


def _reaches(value: ast.expr, foreign: set[str]) -> bool:
    """Whether ``value`` is another library's object itself: a foreign name, an attribute of one
    (``tf.keras``), or ``getattr`` of one; not what calling or indexing it returns (a new object)."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr" and value.args:
        value = value.args[0]
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Name) and value.id in foreign


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node


def _assigned(node: ast.AST) -> list[ast.expr]:
    """The targets ``node`` assigns or deletes (a tuple's items each)."""
    if isinstance(node, ast.Assign):
        return [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def _set_through_call(node: ast.Call) -> tuple[ast.expr, str] | None:
    """``(object, attribute)`` a call sets or deletes: ``setattr(obj, "a", v)``, ``object.__setattr__(obj, "a", v)``,
    ``obj.__setattr__("a", v)`` (and the ``delattr`` forms); ``None`` for any other call."""
    func, args = node.func, node.args

    def name(at: int) -> str:
        return str(args[at].value) if len(args) > at and isinstance(args[at], ast.Constant) else ""

    if isinstance(func, ast.Name) and func.id in _SETTERS and args:
        return args[0], name(1)
    if isinstance(func, ast.Attribute) and func.attr in _DUNDER_SETTERS:
        unbound = (func.attr == "__setattr__" and len(args) == 3) or (func.attr == "__delattr__" and len(args) == 2)
        return (args[0], name(1)) if unbound else (func.value, name(0))
    return None


def _changed_through_method(node: ast.Call) -> ast.expr | None:
    """The object a call changes in place: ``held`` of ``held.update(...)`` (or another of :data:`_MUTATORS`),
    ``module`` of ``vars(module).update(...)``, where ``held`` is a name or an attribute of one (what a call
    returns, ``os.environ.copy()``, is a new object); ``None`` for any other call."""
    func = node.func
    if not isinstance(func, ast.Attribute) or func.attr not in _MUTATORS:
        return None
    held = func.value
    if isinstance(held, ast.Call) and isinstance(held.func, ast.Name) and held.func.id == "vars":
        return held.args[0] if held.args else None
    return held if isinstance(held, (ast.Name, ast.Attribute)) else None


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
        for target in _assigned(node):
            if isinstance(target, ast.Attribute):
                check(target, node.lineno, target.attr)
            elif isinstance(target, ast.Subscript):
                held = target.value  # module.table[key] = ..., environ[key] = ..., vars(module)[key] = ...
                if isinstance(held, ast.Call) and isinstance(held.func, ast.Name) and held.func.id == "vars":
                    if held.args:
                        check(held.args[0], node.lineno, "")
                elif isinstance(held, (ast.Attribute, ast.Name)):
                    check(held, node.lineno, held.attr if isinstance(held, ast.Attribute) else "")
        if isinstance(node, ast.Call):
            through = _set_through_call(node)
            if through is not None:
                check(through[0], node.lineno, through[1])
            changed = _changed_through_method(node)
            if changed is not None:
                check(changed, node.lineno, changed.attr if isinstance(changed, ast.Attribute) else "")
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
        ("from tfdevices.core.tf_door import import_tf\ntf = import_tf()\ntf.foo = 1", ["tf.foo"]),
        ("import importlib\nm = importlib.import_module('json')\nm.dumps = str", ["m.dumps"]),
        ("import sys\nm = sys.modules['json']\nm.dumps = str", ["m.dumps"]),
        ("import abc\nabc.registry['x'] = 1", ["abc.registry"]),
        ("import a\na.x, b = 1, 2", ["a.x"]),
        ("def f(thing):\n    thing.__init__ = None", ["thing.__init__"]),
        ("def f(obj):\n    obj.__class__ = int", ["obj.__class__"]),
        ("import logging\nlogging.root.level += 1", ["logging.root.level"]),
        ("from os import environ\nenviron['X'] = '1'", ["environ"]),
        ("from os import environ as env\ndef f():\n    del env['X']", ["env"]),
        ("import importlib, types\nm: types.ModuleType = importlib.import_module('json')\nm.dumps = str", ["m.dumps"]),
        ("import importlib\nif (m := importlib.import_module('json')):\n    m.dumps = str", ["m.dumps"]),
        ("import tensorflow as tf\nk = tf.keras\nk.Model.fit = None", ["k.Model.fit"]),
        ("import tensorflow as tf\nk = tf.keras\nm = k.Model\nm.fit = None", ["m.fit"]),
        ("import tensorflow as tf\nk = getattr(tf, 'keras')\nk.Model.fit = None", ["k.Model.fit"]),
        ("import json\nobject.__setattr__(json, 'dumps', str)", ["json"]),
        ("import json\njson.__setattr__('dumps', str)", ["json"]),
        ("import json\ntype.__delattr__(json, 'dumps')", ["json"]),
        ("import json\nvars(json)['dumps'] = str", ["json"]),
        ("import os\nos.environ.update({'X': '1'})", ["os.environ"]),
        ("import os\ndef f():\n    os.environ.setdefault('X', '1')", ["os.environ"]),
        ("from os import environ\nenviron.pop('X', None)", ["environ"]),
        ("import os\nos.environ.__setitem__('X', '1')", ["os.environ"]),
        ("import sys\nsys.path.insert(0, '/tmp')", ["sys.path"]),
        ("import json\nvars(json).update(dumps=str)", ["json"]),
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
        "import os\nenv = dict(os.environ)\nenv['X'] = '1'",  # a copy: what a call returns is a new object
        "import json\nresult = json.loads('{}')\nresult['a'] = 1",
        "class A:\n    def __post_init__(self):\n        object.__setattr__(self, 'x', 1)",  # a frozen record's own
        "import json\nvars(record)['x'] = json.dumps(1)",
        "import os\nenv = os.environ.copy()\nenv.update({'X': '1'})",  # a copy, changed: the process' own is not
        "import os\nseen = set()\nseen.add(os.getpid())",
        "import json\nrows = []\nrows.append(json.dumps(1))",
        "from __future__ import annotations\nannotations = {}\nannotations.update({'a': 1})",  # a local name
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
