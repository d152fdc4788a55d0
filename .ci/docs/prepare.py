"""Lays out the Sphinx sources of the API pages in a build folder (``make docs``).

    python .ci/docs/prepare.py build/docs-src [--executed build/notebooks]

Writes there: ``index.rst`` (from this folder), ``guide.rst`` (the README, with
the pictures it shows), ``cli.rst`` (every command's ``--help``), ``api.rst``
(one autodoc section per public module) and ``notebooks/`` (each notebook from
``--executed`` when that folder holds it with its outputs, as ``make test`` leaves
them, else the notebook as committed, without outputs, which Sphinx then executes).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pathlib
import pkgutil
import shutil

import tfdevices
from tfdevices import cli

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
# modules left out of the reference: the CLI's and demos' entry points, and the private ones (a leading _)
SKIPPED = ("tfdevices.__main__", "tfdevices.demos.")


def _title(text: str, mark: str = "=") -> str:
    return f"{text}\n{mark * len(text)}\n"


def modules() -> list[str]:
    """The public modules of the package, in import order of their names."""
    found = ["tfdevices"]
    for info in pkgutil.walk_packages(tfdevices.__path__, "tfdevices."):
        name = info.name
        if any(part.startswith("_") for part in name.split(".")) or name.startswith(SKIPPED):
            continue
        found.append(name)
    return sorted(found)


def api_page() -> str:
    """The names ``import tfdevices`` gives, then one section per module from its docstrings.

    Members are those each module defines (``ignore-module-all``): a name a package re-exports is
    documented once, where it is defined.
    """
    names = "\n".join(f"* :py:obj:`{n} <{_where(getattr(tfdevices, n))}>`" for n in tfdevices._EXPORTS)
    out = [_title("API reference"), ".. automodule:: tfdevices\n", f"``import tfdevices`` gives:\n\n{names}\n"]
    for name in modules()[1:]:
        out.append(f".. automodule:: {name}\n   :members:\n   :ignore-module-all:\n")
    return "\n".join(out)


def _where(obj: object) -> str:
    """Where ``obj`` is defined, and so documented: ``tfdevices.verify.report.PlacementReport``."""
    return f"{obj.__module__}.{obj.__qualname__}"  # type: ignore[attr-defined]


def _help(parser: argparse.ArgumentParser) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as text:
        parser.print_help()
    return text.getvalue()


def cli_page() -> str:
    """``tfdevices --help`` and every command's ``--help``, as the command prints them."""
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: the same pages on every machine
    out = [
        _title("Command line"),
        "``tfdevices COMMAND --help`` prints each of these.\n",
        "::\n",
        _indent(_help(cli.build_parser())),
    ]
    for name in cli.COMMANDS:
        parser = cli.build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        out += [_title(f"tfdevices {name}", "-"), "::\n", _indent(_help(sub))]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=pathlib.Path)
    parser.add_argument("--executed", type=pathlib.Path, help="a folder of notebooks executed with their outputs")
    args = parser.parse_args()
    dest: pathlib.Path = args.dest
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "index.rst", dest / "index.rst")
    shutil.copyfile(REPO / "README.rst", dest / "guide.rst")
    shutil.copytree(REPO / "docs" / "images", dest / "docs" / "images")  # the README's pictures, same paths
    (dest / "cli.rst").write_text(cli_page())
    (dest / "api.rst").write_text(api_page())
    names = notebooks(dest / "notebooks", args.executed)
    toc = "\n".join(f"   notebooks/{n.removesuffix('.ipynb')}" for n in names)
    (dest / "notebooks.rst").write_text(
        _title("Notebooks") + f"\nEach notebook with its outputs and plots.\n\n.. toctree::\n   :maxdepth: 1\n\n{toc}\n"
    )


if __name__ == "__main__":
    main()
