"""The public surface has an edge, and the documentation stays on its side.

Public: ``__all__`` of ``tfdevices`` and of each module in ``tfdevices.PUBLIC_MODULES``
(one group per stage of the flow, and ``tfdevices.errors``). Every other module is
internal. The README, the docs' pages (``docs/**/*.rst``) and the notebooks teach
only public names: their Python (``.. code-block:: python`` blocks, notebook code
cells) is read with ``ast``, and every ``import``/``from ... import`` of tfdevices and
every attribute path ``tfdevices.X.Y`` must name a public module or a name in a
public module's ``__all__``; a failure names the file, the line and the name, and
where the object is public when it is.
"""

from __future__ import annotations

import ast
import importlib
import json
import pathlib
import pkgutil
import re
import textwrap
import types

import pytest

import tfdevices
from tests.helpers import REPO

ROOT = pathlib.Path(REPO)
PUBLIC = ("tfdevices", *tfdevices.PUBLIC_MODULES)


def _all(module: str) -> list[str]:
    return list(importlib.import_module(module).__all__)


def public_names() -> list[str]:
    """Every public name, written as a user reaches it: ``tfdevices.gpus.select``."""
    return [f"{module}.{name}" for module in PUBLIC for name in _all(module)]


def _homes() -> dict[int, str]:
    """id(object) -> the public name it has in a public module (not the top level)."""
    out: dict[int, str] = {}
    for module in tfdevices.PUBLIC_MODULES:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            out.setdefault(id(getattr(mod, name)), f"{module}.{name}")
    return out


# -- the edge


def _package_modules() -> list[str]:
    """The package's modules."""
    return ["tfdevices"] + [m.name for m in pkgutil.walk_packages(tfdevices.__path__, "tfdevices.")]


def test_every_module_of_the_package_is_python():
    """One profile reader, in Python over protobuf's messages: no compiled module (none to build, none to trust)."""
    compiled = [n for n in _package_modules() if not str(importlib.util.find_spec(n).origin).endswith(".py")]
    assert compiled == []


def _declared_all(module: str) -> ast.expr | None:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    for node in ast.parse(pathlib.Path(spec.origin).read_text()).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return node.value
    return None


def test_only_the_public_modules_declare_all():
    """``__all__`` says what is public: the public modules declare it, the internal ones do not (a name an
    internal module has is the package's own business; its underscore says only that it is that module's)."""
    modules = _package_modules()
    assert len(modules) > 70
    assert [m for m in PUBLIC if _declared_all(m) is None] == []
    assert [m for m in modules if m not in PUBLIC and _declared_all(m) is not None] == []


def test_no_all_exports_a_private_name():
    offenders = []
    for module in PUBLIC:
        offenders += [f"{module}.{n}" for n in importlib.import_module(module).__all__ if n.startswith("_")]
    assert offenders == []


def test_the_public_modules_are_the_stages_and_the_errors():
    assert tfdevices.PUBLIC_MODULES[0] == "tfdevices.gpus" and "tfdevices.errors" in tfdevices.PUBLIC_MODULES
    assert len(set(tfdevices.PUBLIC_MODULES)) == len(tfdevices.PUBLIC_MODULES)
    for module in tfdevices.PUBLIC_MODULES:
        assert not any(part.startswith("_") for part in module.split("."))


@pytest.mark.parametrize("module", PUBLIC)
def test_every_name_in_a_public_all_resolves(module):
    mod = importlib.import_module(module)
    assert mod.__all__, module
    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{module}.{name}"


def test_each_top_level_name_is_a_name_of_a_public_module():
    for name in tfdevices.__all__:
        module = f"tfdevices.{tfdevices._EXPORTS[name]}"
        assert module in tfdevices.PUBLIC_MODULES and name in _all(module), name
        assert getattr(tfdevices, name) is getattr(importlib.import_module(module), name)


def test_every_error_has_its_public_home_in_tfdevices_errors():
    from tfdevices.core import errors as core_errors

    defined = {n for n, v in vars(core_errors).items() if isinstance(v, type) and issubclass(v, Exception)}
    assert set(_all("tfdevices.errors")) == defined
    top_errors = [n for n in tfdevices.__all__ if n.endswith("Error")]
    assert len(top_errors) <= 8 and "TfDevicesError" in top_errors
    # the others still answer as tfdevices.NAME, for programs written before tfdevices.errors
    assert tfdevices.LaunchError is core_errors.LaunchError and "LaunchError" not in tfdevices.__all__


def test_the_names_the_docs_used_from_submodules_are_public():
    homes = set(public_names())
    for name in [
        "tfdevices.tensorboard.PlacementLogger",
        "tfdevices.tensorboard.read_placement",
        "tfdevices.tensorboard.write_placement",
        "tfdevices.verify.capturing",
        "tfdevices.runtime.configure_worker",
        "tfdevices.verify.short_name",
        "tfdevices.jobs.step_cluster",
        "tfdevices.jobs.launch",  # the metrics guide: tfdevices launch from Python
        "tfdevices.jobs.LaunchConfig",
        "tfdevices.jobs.StallPolicy",  # the fields of LaunchConfig
        "tfdevices.jobs.SlowRankPolicy",  # StallPolicy's
        "tfdevices.jobs.MetricsAddress",
        "tfdevices.jobs.Nodes",
        "tfdevices.layers.planned_devices",
        "tfdevices.training.train",
        "tfdevices.training.install_fit_adapter",
        "tfdevices.training.install_when_imported",
        "tfdevices.strategy.explanation",
        "tfdevices.gpus.Inventory",
        "tfdevices.mends.turn_off",
        "tfdevices.mends.applied",
        "tfdevices.decide.examples.tiny_mlp",
        "tfdevices.tensorboard.views.device_table",
    ]:
        assert name in homes, name


# -- the documentation imports only public names


def _resolve(name: str) -> object | None:
    """The module or object ``name`` names, ``None`` when there is none."""
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    module, _, attr = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError):
        return None


def check_source(source: str, where: str, first_line: int = 1) -> list[str]:
    """``FILE:LINE: NAME is not public ...`` for each non-public tfdevices name the code imports or reaches."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return [f"{where}:{first_line + (err.lineno or 1) - 1}: does not parse as Python: {err.msg}"]
    bound: dict[str, str] = {}  # local name -> the tfdevices module it is
    problems: list[str] = []
    homes = _homes()

    def fail(node: ast.AST, name: str) -> None:
        line = first_line + getattr(node, "lineno", 1) - 1
        obj = _resolve(name)
        if obj is None or isinstance(obj, types.ModuleType):
            hint = "" if obj is None else "; an internal module"
        else:
            hint = f"; public as {homes[id(obj)]}" if id(obj) in homes else "; no public module exports it"
        problems.append(f"{where}:{line}: {name} is not public{hint}")

    def reach(node: ast.AST, module: str, parts: list[str]) -> None:
        """``module.parts[0].parts[1]...``: public while it walks public modules, then one name of an __all__."""
        for i, part in enumerate(parts):
            if f"{module}.{part}" in PUBLIC:
                module = f"{module}.{part}"
                continue
            if part not in _all(module) and not part.startswith("__"):
                # into an internal module: name what the code takes from it
                inner = isinstance(_resolve(f"{module}.{part}"), types.ModuleType) and i + 1 < len(parts)
                fail(node, ".".join([module, *parts[i : i + 2 if inner else i + 1]]))
            return

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "tfdevices":
                    continue
                if alias.name not in PUBLIC:
                    fail(node, alias.name)
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound["tfdevices"] = "tfdevices"
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "tfdevices":
            module = node.module or ""
            if module not in PUBLIC:
                for alias in node.names:
                    fail(node, f"{module}.{alias.name}")
                continue
            for alias in node.names:
                if f"{module}.{alias.name}" in PUBLIC:
                    bound[alias.asname or alias.name] = f"{module}.{alias.name}"
                elif alias.name != "*" and alias.name not in _all(module):
                    fail(node, f"{module}.{alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "parent", None), ast.Attribute):
            parts: list[str] = []
            value: ast.expr = node
            while isinstance(value, ast.Attribute):
                parts.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                reach(node, bound[value.id], parts)
        for child in ast.iter_child_nodes(node):
            child.parent = node  # type: ignore[attr-defined]
    return problems


def _python_blocks(path: pathlib.Path) -> list[tuple[int, str]]:
    """(first line of the code, code) of each ``.. code-block:: python`` (and ``.. code:: python``) block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if not re.fullmatch(r"\s*\.\. (code-block|code|sourcecode):: python3?\s*", line):
            continue
        indent = len(line) - len(line.lstrip())
        body: list[str] = []
        start = None
        for j in range(i + 1, len(lines)):
            text = lines[j]
            if text.strip() and len(text) - len(text.lstrip()) <= indent:
                break
            if start is None and (not text.strip() or text.strip().startswith(":")):
                continue  # the blank line and the directive's options
            start = j + 1 if start is None else start
            body.append(text)
        if start is not None:
            blocks.append((start, textwrap.dedent("\n".join(body))))
    return blocks


def _documents() -> list[pathlib.Path]:
    return [ROOT / "README.rst", *sorted((ROOT / "docs").rglob("*.rst")), *sorted((ROOT / "notebooks").glob("*.ipynb"))]


def problems_in(path: pathlib.Path) -> list[str]:
    where = str(path.relative_to(ROOT))
    if path.suffix == ".ipynb":
        out = []
        for n, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
                out += check_source(source, f"{where} cell {n} line")
        return out
    return [p for first, code in _python_blocks(path) for p in check_source(code, where, first)]


@pytest.mark.parametrize("path", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_documentation_imports_only_public_names(path):
    problems = problems_in(path)
    assert not problems, "the documentation imports names that are not public:\n" + "\n".join(problems)


def test_the_documentation_check_reads_python_where_it_is():
    assert any(_python_blocks(ROOT / "README.rst"))
    assert check_source("import tfdevices\ntfdevices.select('auto:1')", "x") == []
    assert check_source("from tfdevices.gpus import Inventory, select\nimport tfdevices.verify", "x") == []
    assert check_source("from tfdevices import flags as f\nf.define_flags\nf.FLAGS", "x") == [
        "x:3: tfdevices.flags.FLAGS is not public; no public module exports it"
    ]
    assert check_source("from tfdevices.gpus.inventory import Inventory", "README.rst", 10) == [
        "README.rst:10: tfdevices.gpus.inventory.Inventory is not public; public as tfdevices.gpus.Inventory"
    ]
    logger = "tfdevices.tensorboard.callbacks.PlacementLogger"
    assert check_source(f"import tfdevices\n\n{logger}", "x") == [
        f"x:3: {logger} is not public; public as tfdevices.tensorboard.PlacementLogger"
    ]
    assert check_source("import tfdevices\ntfdevices.layers.place.planned_devices(m)", "x") == [
        "x:2: tfdevices.layers.place.planned_devices is not public; public as tfdevices.layers.planned_devices"
    ]
    assert check_source("import tfdevices.jobs.slurm\nfrom tfdevices.core.devices import short_name", "x") == [
        "x:1: tfdevices.jobs.slurm is not public; an internal module",
        "x:2: tfdevices.core.devices.short_name is not public; public as tfdevices.verify.short_name",
    ]
    assert check_source("from tfdevices.verify import _gc_paused", "x") == [
        "x:1: tfdevices.verify._gc_paused is not public"
    ]
    assert check_source("import tfdevices\ntfdevices.PlacementReport.from_json(s).ops", "x") == []


def test_a_public_function_named_as_its_module_stays_a_function_whatever_is_imported():
    import tfdevices.decide.advise
    import tfdevices.decide.tune
    from tfdevices import decide

    assert callable(decide.tune) and decide.tune.__name__ == "tune" and tfdevices.tune is decide.tune
    assert callable(decide.advise) and decide.advise.__name__ == "advise" and tfdevices.advise is decide.advise
