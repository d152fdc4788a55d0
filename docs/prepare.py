"""Lays out the Sphinx sources of the documentation site in a build folder (``make docs``).

    python docs/prepare.py build/docs-src [--executed build/notebooks]

Writes there: ``index.rst`` and ``changelog.rst`` (from this folder), ``glossary.rst`` and
``architecture.rst`` (from this folder, their links to the guides' and the glossary's files turned into links
to their pages), ``guides/`` (this folder's task guides, their links to each other's files turned into links
to their pages),
``readme.rst`` (the README, with the pictures it shows and its links to the guides'
files turned into links to their pages), ``reference/`` (one page
per stage of the flow, documenting the public names only: ``__all__`` of each module
in ``tfdevices.PUBLIC_MODULES``, each once; ``reference/index.rst``: the edge and
what ``import tfdevices`` gives), ``cli.rst`` (every command's ``--help``) and
``notebooks/`` (each notebook from ``--executed`` when that folder holds it with its
outputs, as ``make test`` leaves them, else the notebook as committed, without
outputs, which Sphinx then executes).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import os
import pathlib
import re
import shutil
import sys

import tfdevices
from tfdevices import cli

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent

# The reference: one page per stage of the flow, then the errors. Each page: its public modules, each with
# the names of its __all__ it documents (None: all of them). tfdevices.gpus serves three stages.
STAGES: tuple[tuple[str, str, dict[str, tuple[str, ...] | None]], ...] = (
    (
        "discover",
        "Which GPUs this machine has, read from NVML (never from TensorFlow): an inventory.",
        {"tfdevices.gpus": ("discover", "Inventory", "GpuInfo")},
    ),
    (
        "select",
        'Which of them to use: a spec (``"0,2"``, ``"auto:2"``, ``"none"``) and a pure, explained choice.',
        {
            "tfdevices.gpus": (
                "parse_spec",
                "DeviceSpec",
                "select",
                "Selection",
                "Decision",
                "parse_memory",
                "format_bytes",
            )
        },
    ),
    (
        "reserve",
        "Hold the chosen GPUs against other processes of this machine, until exit or a crash.",
        {"tfdevices.gpus": ("reserve", "Reservation", "holders", "Holder")},
    ),
    (
        "configure",
        "Set TensorFlow's devices up before its runtime starts, in the only order that works.",
        {"tfdevices.runtime": None},
    ),
    (
        "build",
        "The ``tf.distribute`` strategy, ``tf.device`` scopes for tasks, and a model's layers on devices.",
        {"tfdevices.strategy": None, "tfdevices.scopes": None, "tfdevices.layers": None},
    ),
    (
        "run",
        "Many processes (who am I, which GPU is mine), training that works with any Keras, the mends, absl flags.",
        {"tfdevices.jobs": None, "tfdevices.training": None, "tfdevices.mends": None, "tfdevices.flags": None},
    ),
    (
        "verify",
        "Where every op really ran, and for how long: captures, reports and profiles.",
        {"tfdevices.verify": None},
    ),
    (
        "log",
        "Placement in TensorBoard: the logger, placement runs, and the dashboard's views.",
        {"tfdevices.tensorboard": None, "tfdevices.tensorboard.views": None},
    ),
    (
        "decide",
        "Which way of running a model is fastest here, and why a step is slow.",
        {"tfdevices.decide": None, "tfdevices.decide.examples": None, "tfdevices.measure": None},
    ),
    ("errors", "Every error tfdevices raises, in one hierarchy.", {"tfdevices.errors": None}),
)


def _title(text: str, mark: str = "=") -> str:
    return f"{text}\n{mark * len(text)}\n"


def _exported(module: str) -> list[str]:
    return list(importlib.import_module(module).__all__)


def check_stages() -> None:
    """Every public module has a page and every public name is documented once: else the build stops here."""
    pages = [module for _, _, modules in STAGES for module in modules]
    missing = sorted(set(tfdevices.PUBLIC_MODULES) - set(pages))
    unknown = sorted(set(pages) - set(tfdevices.PUBLIC_MODULES))
    documented: dict[str, int] = {}
    for _, _, modules in STAGES:
        for module, names in modules.items():
            for name in names if names is not None else _exported(module):
                documented[f"{module}.{name}"] = documented.get(f"{module}.{name}", 0) + 1
    public = {f"{m}.{n}" for m in tfdevices.PUBLIC_MODULES for n in _exported(m)}
    problems = [f"public module without a page: {m}" for m in missing]
    problems += [f"page of a module that is not public: {m}" for m in unknown]
    problems += [f"public name not documented: {n}" for n in sorted(public - set(documented))]
    problems += [f"documented but not public: {n}" for n in sorted(set(documented) - public)]
    problems += [f"documented {k} times: {n}" for n, k in sorted(documented.items()) if k > 1]
    if problems:
        raise SystemExit("docs/prepare.py STAGES and tfdevices.PUBLIC_MODULES disagree:\n  " + "\n  ".join(problems))


def _data_doc(module: str, name: str) -> list[str]:
    """The docstring of a module constant (``#:`` or the string after it), from the module that assigns it."""
    from sphinx.pycode import ModuleAnalyzer  # noqa: PLC0415 (Sphinx: only when building)

    value = getattr(importlib.import_module(module), name)
    candidates = [module] + sorted(m for m in sys.modules if m.startswith("tfdevices.") and m != module)
    for candidate in candidates:
        if getattr(sys.modules.get(candidate), name, object()) is not value:
            continue
        docs = ModuleAnalyzer.for_module(candidate).find_attr_docs().get(("", name))
        if docs:
            return [line for line in docs if line is not None]
    return []


def _entry(module: str, name: str) -> str:
    """The autodoc directive of one public name, documented under its public module."""
    obj = getattr(importlib.import_module(module), name)
    full = f"{module}.{name}"
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return f".. autoexception:: {full}\n"
    if inspect.isclass(obj):
        return f".. autoclass:: {full}\n   :members:\n"
    if callable(obj):
        return f".. autofunction:: {full}\n"
    lines = [f".. py:data:: {name}", f"   :module: {module}", f"   :value: {obj!r}", ""]
    lines += [f"   {line}".rstrip() for line in _data_doc(module, name)]
    return "\n".join(lines) + "\n"


def stage_page(stage: str, summary: str, modules: dict[str, tuple[str, ...] | None], declared: set[str]) -> str:
    """One stage: a section per public module (its docstring where the module is first declared), then its names."""
    out = [_title(stage.capitalize()), f"{summary}\n"]
    for module, names in modules.items():
        out.append(_title(module, "-"))
        if module in declared:
            out.append(f".. currentmodule:: {module}\n")
        else:
            out.append(f".. automodule:: {module}\n")
            declared.add(module)
        out += [_entry(module, name) for name in (names if names is not None else _exported(module))]
    return "\n".join(out)


SURFACE = """What is public: the names in ``__all__`` of ``tfdevices`` and of the public modules below
(``tfdevices.PUBLIC_MODULES``), one group per stage of the flow, and ``tfdevices.errors``. Every other module of
the package is internal: import from these. Each public name is documented once, on its stage's page.
"""
TOP_LEVEL = """``import tfdevices`` never imports TensorFlow. It gives the names most programs call, and the errors they
catch most (every error: :doc:`errors`); each is the same object as in its stage's module.
"""


def reference_index() -> str:
    """The edge, written down: the public modules by stage, and what ``import tfdevices`` gives, by stage."""
    page_of = {}  # id(object) -> (stage, public name)
    for stage, _, pages in STAGES:
        for module, names in pages.items():
            for name in names if names is not None else _exported(module):
                page_of.setdefault(id(getattr(importlib.import_module(module), name)), (stage, f"{module}.{name}"))
    modules = "\n".join(
        f"   * - :doc:`{stage}`\n     - {', '.join(f'``{m}``' for m in pages)}" for stage, _, pages in STAGES
    )
    by_stage: dict[str, list[str]] = {}
    for name in tfdevices.__all__:
        stage, full = page_of[id(getattr(tfdevices, name))]
        by_stage.setdefault(stage, []).append(f":py:obj:`{name} <{full}>`")
    top = "\n".join(
        f"   * - :doc:`{stage}`\n     - {', '.join(by_stage[stage])}" for stage, _, _ in STAGES if stage in by_stage
    )
    return "\n".join(
        [
            _title("The public surface"),
            SURFACE,
            "::\n\n    discover -> select -> reserve -> configure -> build -> run -> verify -> log -> decide\n",
            ".. list-table::\n   :header-rows: 1\n\n   * - stage\n     - public modules\n" + modules + "\n",
            _title("import tfdevices", "-"),
            TOP_LEVEL,
            ".. list-table::\n   :header-rows: 1\n\n   * - stage\n     - ``tfdevices.NAME``\n" + top + "\n",
        ]
    )


def _help(parser: argparse.ArgumentParser) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as text:
        parser.print_help()
    return text.getvalue()


HELP_COLUMNS = 88
"""The width argparse wraps ``--help`` at on the command-line page: the width of every code line of the docs."""


def cli_examples(name: str) -> str:
    """A command's examples (``cli.USAGE``) as a shell block: what each does, in a comment above it."""
    lines = []
    for command, said in cli.USAGE[name]:
        lines += [f"    # {said}", f"    {command}"]
    return ".. code-block:: bash\n\n" + "\n".join(lines) + "\n"


def cli_page() -> str:
    """Every command's examples, then ``tfdevices --help`` and every command's ``--help`` as the command prints them."""
    os.environ["COLUMNS"] = str(HELP_COLUMNS)  # argparse wraps at the terminal's width: the same page everywhere
    out = [
        _title("Command line"),
        "Each command with examples, then what ``tfdevices COMMAND --help`` prints.\n",
        "::\n",
        _indent(_help(cli.build_parser())),
    ]
    for name in cli.COMMANDS:
        parser = cli.build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        out += [_title(f"tfdevices {name}", "-"), cli_examples(name), "::\n", _indent(_help(sub))]
    return "\n".join(out)


def _indent(text: str) -> str:
    return "".join(f"    {line}" if line.strip() else line for line in text.splitlines(keepends=True))


def notebooks(dest: pathlib.Path, executed: pathlib.Path | None) -> list[str]:
    """Copies each notebook, the executed one where ``executed`` has it; returns their names."""
    dest.mkdir(parents=True)
    names = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
    for name in names:
        ran = executed / name if executed is not None else None
        shutil.copyfile(ran if ran is not None and ran.is_file() else REPO / "notebooks" / name, dest / name)
    return names


GUIDE_LINK = re.compile(r"`([^`<]+?)\s*<(\w+)\.rst>`__?")
"""A guide's link to another guide's file, as GitHub follows it: `Title <other.rst>`__."""


def guide_page(text: str) -> str:
    """A guide as the site shows it: its links to the other guides' files become links to their pages."""
    return GUIDE_LINK.sub(r":doc:`\1 <\2>`", text)


def glossary_page(text: str) -> str:
    """The glossary as the site shows it: its links to the guides' files (``guides/X.rst``) become links to
    their pages."""
    return re.sub(r"`([^`<]+?)\s*<(guides/\w+)\.rst>`__?", r":doc:`\1 <\2>`", text)


def architecture_page(text: str) -> str:
    """The architecture page as the site shows it: its links to the glossary's and the guides' files
    (``glossary.rst``, ``guides/X.rst``) become links to their pages."""
    return re.sub(r"`([^`<]+?)\s*<((?:guides/)?\w+)\.rst>`__?", r":doc:`\1 <\2>`", text)


def readme_page() -> str:
    """The README as the site's tour page: its links to the guides' files become links to their pages."""
    text = (REPO / "README.rst").read_text()
    return re.sub(r"`([^`<]+?)\s*<docs/((?:guides/)?\w+)\.rst>`_", r":doc:`\1 <\2>`", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=pathlib.Path)
    parser.add_argument("--executed", type=pathlib.Path, help="a folder of notebooks executed with their outputs")
    args = parser.parse_args()
    check_stages()
    dest: pathlib.Path = args.dest
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "index.rst", dest / "index.rst")
    shutil.copyfile(HERE / "changelog.rst", dest / "changelog.rst")
    (dest / "glossary.rst").write_text(glossary_page((HERE / "glossary.rst").read_text(encoding="utf-8")))
    (dest / "architecture.rst").write_text(
        architecture_page((HERE / "architecture.rst").read_text(encoding="utf-8")), encoding="utf-8"
    )
    (dest / "guides").mkdir()
    for guide in sorted((HERE / "guides").glob("*.rst")):
        (dest / "guides" / guide.name).write_text(guide_page(guide.read_text(encoding="utf-8")), encoding="utf-8")
    (dest / "readme.rst").write_text(readme_page())
    shutil.copytree(HERE / "images", dest / "docs" / "images")  # the README's pictures, at the paths it uses
    shutil.copytree(HERE / "images", dest / "images")  # and the guides' (../images from docs/guides/)
    reference = dest / "reference"
    reference.mkdir()
    (reference / "index.rst").write_text(reference_index())
    declared: set[str] = set()
    for stage, summary, modules in STAGES:
        (reference / f"{stage}.rst").write_text(stage_page(stage, summary, modules, declared))
    (dest / "cli.rst").write_text(cli_page())
    names = notebooks(dest / "notebooks", args.executed)
    toc = "\n".join(f"   notebooks/{n.removesuffix('.ipynb')}" for n in names)
    (dest / "notebooks.rst").write_text(
        _title("Notebooks") + f"\nEach notebook with its outputs and plots.\n\n.. toctree::\n   :maxdepth: 1\n\n{toc}\n"
    )


if __name__ == "__main__":
    main()
