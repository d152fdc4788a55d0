"""What the command line says about itself: help that fits 88 columns, descriptions true for every mode,
every spec form named, and examples on the documentation's command-line page that the commands accept."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import re
import shlex

import pytest

from tests.helpers import REPO
from tfdevices import cli
from tfdevices.gpus import parse_spec

WIDTH = 88


def _prepare():
    """docs/prepare.py, the script that lays out the site (it renders the command-line page)."""
    spec = importlib.util.spec_from_file_location("docs_prepare", pathlib.Path(REPO, "docs", "prepare.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sub(name: str) -> argparse.ArgumentParser:
    parser = cli.build_parser(name)
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


@pytest.mark.parametrize("name", [None, *cli.COMMANDS])
def test_help_fits_88_columns(monkeypatch, name):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    text = (cli.build_parser() if name is None else _sub(name)).format_help()
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert wide == []
    assert _prepare().HELP_COLUMNS == WIDTH  # the page renders --help at this width


def test_launch_says_it_runs_on_several_machines():
    help_line = cli.COMMANDS["launch"][0]
    description = _sub("launch").description or ""
    assert "local" not in help_line and "several machines" in help_line
    assert "several machines" in description and "--nnodes" in description


# One spec of each form of the grammar (tfdevices/gpus/spec.py), as the help must name it.
FORMS = {"'all'": "all", "'none'": "none", "'cpu'": "none", "'auto:N'": "auto"}
EXPLICIT = {"'0,2'": ("0", "2"), "'0-3'": ("0", "1", "2", "3"), "'0:1'": ("0:1",), "'GPU-8a3c'": ("GPU-8a3c",)}


@pytest.mark.parametrize("command", ["select", "configure"])
def test_a_spec_argument_names_every_form_of_the_grammar(command):
    spec = next(a for a in _sub(command)._actions if a.dest == "spec")
    said = re.findall(r"'[^']+'", spec.help or "")
    assert sorted(said) == sorted([*FORMS, *EXPLICIT]), spec.help
    for form, kind in FORMS.items():
        assert parse_spec(form.strip("'").replace("N", "2")).kind == kind
    for form, keys in EXPLICIT.items():
        assert parse_spec(form.strip("'")) == type(parse_spec("0"))(kind="explicit", keys=keys)


def _invocation(line: str) -> list[str]:
    """The tfdevices command of an example line: inside ``eval "$(...)"``, without a redirection."""
    inner = re.fullmatch(r'eval "\$\((.*)\)"', line)
    words = shlex.split(inner[1] if inner else line)
    if ">" in words:
        words = words[: words.index(">")]
    assert words[0] == "tfdevices", line
    return words[1:]


def test_every_command_has_examples_the_command_accepts():
    assert set(cli.USAGE) == set(cli.COMMANDS)
    for name, examples in cli.USAGE.items():
        assert examples, name
        for line, said in examples:
            words = _invocation(line)
            assert words[0] == name, line
            args, extra = cli.build_parser(name).parse_known_args(words)  # a UsageError says what is wrong
            assert extra == [] and args.subcommand == name, line
            assert said, line


def test_the_command_line_page_shows_each_commands_examples_within_88_columns():
    page = _prepare().cli_page()
    for name, examples in cli.USAGE.items():
        section = page.split(f"\ntfdevices {name}\n", 1)[1]
        assert section.index(f"    {examples[0][0]}\n") < section.index("usage: tfdevices")
    rendered = [line[4:] for line in page.splitlines() if line.startswith("    ")]
    assert [line for line in rendered if len(line) > WIDTH] == []
