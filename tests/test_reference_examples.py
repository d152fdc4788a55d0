"""The reference's examples of the names the README teaches run as a reader copies them from the built site.

Each name the README's tour calls (``discover``, ``Inventory.load``, ``select``, ``configure``,
``build_strategy``, ``PlacementLogger`` with ``read_placement``, ``capture``) has an example on its
reference page: a ``>>>`` block of its docstring. On the built page (``tests/docs_pages.py``: the site
built once per session), what the block's copy button copies is exactly the example's code (the
``>>>`` and ``...`` prompts and the outputs left out, Sphinx's ``# doctest:`` flags trimmed), and the
block as the page shows it runs as a doctest in a fresh process: the code a reader pastes, with each
output the page shows checked. The object's blocks run in one session, in order, as a reader pastes
them into one Python; from a folder holding the listing the examples read
(``tests/data/node-8gpu.json``), as from a clone's root. ``+SKIP`` flags keep the examples that
start TensorFlow's runtime out of the package's own in-process doctests; here each runs in its own
process.
"""

from __future__ import annotations

import doctest
import html
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from tests.docs_pages import built_site, copied_from
from tests.helpers import REPO, subprocess_env

pytestmark = pytest.mark.xdist_group("docs_site")

# the names the README's tour calls, as the reference documents them
TOUR = (
    "tfdevices.gpus.discover",
    "tfdevices.gpus.Inventory.load",
    "tfdevices.gpus.select",
    "tfdevices.runtime.configure",
    "tfdevices.strategy.build_strategy",
    "tfdevices.tensorboard.PlacementLogger",
    "tfdevices.verify.capture",
)

RUN = """
import doctest, sys
text = open(sys.argv[1], encoding="utf-8").read()
test = doctest.DocTestParser().get_doctest(text, {"__name__": "__main__"}, sys.argv[1], sys.argv[1], 0)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
runner.run(test)
sys.exit(1 if runner.failures or not runner.tries else 0)
"""


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> pathlib.Path:
    return built_site(tmp_path_factory)


def _end(text: str, start: int) -> int:
    """Where the ``<dl>`` that opens at ``start`` closes."""
    depth = 0
    for match in re.finditer(r"<(/?)dl\b", text[start:]):
        depth += -1 if match[1] else 1
        if depth == 0:
            return start + match.end()
    raise AssertionError("an entry's <dl> never closes")


def section(site: pathlib.Path, name: str) -> str:
    """The HTML of ``name``'s entry on its reference page: its ``<dl>``, members included."""
    for page in sorted((site / "reference").glob("*.html")):
        text = page.read_text(encoding="utf-8")
        at = text.find(f'id="{name}"')
        if at >= 0:
            start = text.rfind("<dl", 0, at)
            return text[start : _end(text, start)]
    raise AssertionError(f"{name} is on no reference page")


def _own(part: str) -> str:
    """An entry's HTML without its members' entries (a member's examples are its own; a class's
    attributes are entries too, and its example may come after them)."""
    while (member := part.find('<dl class="py ', 1)) > 0:
        part = part[:member] + part[_end(part, member) :]
    return part


def examples(site: pathlib.Path, name: str) -> list[tuple[str, str]]:
    """``name``'s ``>>>`` blocks: as shown, and as copied."""
    blocks = copied_from(site, _own(section(site, name)))
    return [(html.unescape(b.text), b.copied) for b in blocks if b.text.lstrip().startswith(">>>")]


def _code(shown: str) -> str:
    """The code of a doctest block: its examples' sources, prompts and outputs left out."""
    sources = [e.source for e in doctest.DocTestParser().get_examples(shown)]
    return "".join(sources).rstrip("\n")


@pytest.mark.parametrize("name", TOUR)
def test_each_name_of_the_tour_has_an_example_that_copies_as_its_code(site, name):
    found = examples(site, name)
    assert found, f"{name}: no >>> example on its reference page"
    for shown, copied in found:
        assert "doctest:" not in shown, f"{name}: the page shows a doctest flag:\n{shown}"
        assert copied == _code(shown), f"{name}: the copy button copies\n{copied}\nnot\n{_code(shown)}"
    assert any("Traceback" not in shown for shown, _ in found), f"{name}: its only example raises"
    assert any(re.search(r"^>>> (import tfdevices|from tfdevices)", shown, re.M) for shown, _ in found), (
        f"{name}: no example imports what it calls: pasted alone, it fails with a NameError"
    )


@pytest.mark.parametrize("name", TOUR)
def test_each_name_of_the_tour_runs_as_copied(site, name, tmp_path):
    (tmp_path / "tests" / "data").mkdir(parents=True)
    shutil.copy(pathlib.Path(REPO, "tests", "data", "node-8gpu.json"), tmp_path / "tests" / "data")
    session = "\n".join(shown for shown, _ in examples(site, name))
    script = tmp_path / "example.txt"
    script.write_text(session + "\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-c", RUN, str(script)],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{name}:\n{session}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-3000:]}"


def test_a_block_whose_copy_is_not_its_code_is_found():
    shown = ">>> x = 1\n>>> x + 1\n2"
    assert _code(shown) == "x = 1\nx + 1"
    assert _code(shown) != "x = 1\nx + 1\n2"
