"""The design lives in the repository: ``docs/architecture.rst``, and the code's citations of it.

- Code that leans on a rule cites "architecture, rule N" (or "docs/architecture.rst, rule N"): every such
  citation in the package, the tests, the benchmarks, the docs, the Makefile and CI names a rule the page has.
- Nothing there cites a design kept outside the repository (the card the design started from).
- The page is plain rst on the repository's page (links to files that exist, no Sphinx role), a link on the
  site (``docs/prepare.py``), in the index's text, and each file it names exists (a test it names, too).
"""

from __future__ import annotations

import importlib.util
import pathlib
import re

import docutils.core
import docutils.nodes
import pytest

from tests.helpers import REPO

ROOT = pathlib.Path(REPO)
PAGE = ROOT / "docs" / "architecture.rst"
#: Where code and comments live: the citations are looked for there.
SCANNED = ("tfdevices", "tests", "benchmarks", "docs", ".ci")
TEXT = {".py", ".md", ".rst", ".txt", ".cfg", ".toml", ".sh", ".js", ".css", ".json", ".ini", ".yml", ".yaml"}
#: "architecture, rule 9", "docs/architecture.rst, rule 9", "architecture.rst rule 9"
CITATION = re.compile(r"\barchitecture(?:\.rst)?,?\s+rules?\s+(\d+)")
# the card's name, spelled so that this file does not match itself
OUTSIDE = re.compile(r"\b" + "DESIGN" + r"\b|\b" + "design" + r" card\b")


def _files() -> list[pathlib.Path]:
    found = [ROOT / "Makefile"]
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            if path.suffix in TEXT or (top == ".ci" and not path.suffix):
                found.append(path)
    return found


def _lines(pattern: re.Pattern[str]) -> list[tuple[str, int, re.Match[str]]]:
    """Each match of ``pattern`` in the scanned files (this one left out: it spells the patterns)."""
    out = []
    for path in _files():
        if path == pathlib.Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            out += [(str(path.relative_to(ROOT)), n, m) for m in pattern.finditer(line)]
    return out


def page_rules(text: str) -> list[int]:
    """The numbers of the rules the page lists: the enumerated list of its section "The rules"."""
    doc = docutils.core.publish_doctree(text, settings_overrides={"report_level": 5, "halt_level": 5})
    sections = [
        s for s in doc.findall(docutils.nodes.section) if s[0].astext() == "The rules"
    ]  # the section's title is its first child
    assert len(sections) == 1, "docs/architecture.rst has no section 'The rules'"
    lists = [n for n in sections[0].children if isinstance(n, docutils.nodes.enumerated_list)]
    assert len(lists) == 1, "the section 'The rules' holds one numbered list"
    rules = lists[0]
    assert rules.get("enumtype") == "arabic"
    start = int(rules.get("start", 1))
    return list(range(start, start + len(rules.children)))


def test_the_rules_are_read_in_every_form():
    text = "\n".join(
        ["Title", "=====", "", "The rules", "---------", "", "1. One.", "2. Two,", "   on two lines.", "3. Three."]
        + ["", "Other", "-----", "", "1. x", ""]
    )
    assert page_rules(text) == [1, 2, 3]
    assert [m[1] for m in CITATION.finditer("(architecture, rule 9) docs/architecture.rst, rule 12")] == ["9", "12"]
    assert OUTSIDE.search("(" + "DESIGN" + " rule 9)") and not OUTSIDE.search("the design of tfdevices")


def test_the_page_numbers_its_fifteen_rules_in_order():
    assert page_rules(PAGE.read_text(encoding="utf-8")) == list(range(1, 16))


def test_every_citation_of_the_architecture_names_a_rule_it_has():
    rules = set(page_rules(PAGE.read_text(encoding="utf-8")))
    citations = _lines(CITATION)
    assert len(citations) >= 5, citations  # the citations this test was written with: the reader finds them
    unknown = [f"{path}:{n}: {m[0]}" for path, n, m in citations if int(m[1]) not in rules]
    assert unknown == []


def test_nothing_cites_a_design_kept_outside_the_repository():
    found = [f"{path}:{n}: {m[0]}" for path, n, m in _lines(OUTSIDE)]
    assert found == []


def test_the_page_is_plain_rst_and_its_links_work_on_the_site():
    text = PAGE.read_text(encoding="utf-8")
    assert re.findall(r":(?:doc|ref|term):`[^`]*`", text) == []  # GitHub shows a Sphinx role raw
    targets = re.findall(r"`[^`<]+<([^>`]+\.rst)>`__?", text)
    assert "glossary.rst" in targets
    assert targets and [t for t in targets if not (PAGE.parent / t).is_file()] == []
    spec = importlib.util.spec_from_file_location("docs_prepare", ROOT / "docs" / "prepare.py")
    assert spec is not None and spec.loader is not None
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    page = prepare.architecture_page(text)
    assert ".rst>`" not in page and len(re.findall(r":doc:`[^`]+ <(?:guides/)?\w+>`", page)) == len(targets)
    index = (ROOT / "docs" / "index.rst").read_text(encoding="utf-8")
    assert ":doc:`architecture`" in index.split(".. toctree::", 1)[0]
    assert re.search(r"^   architecture$", index, flags=re.MULTILINE)  # in a table of contents


#: A file of the repository as the page names it: ``tfdevices/jobs/watch.py``, ``tests/verify/``,
#: ``tests/test_cli.py::test_name``; short forms inside a table row (``gpus/spec.py``) are left out.
NAMED = re.compile(r"``((?:tfdevices|tests|benchmarks|docs)/[\w/.]*)(?:::(\w+))?``")


@pytest.mark.parametrize("what", ["files", "tests"])
def test_every_file_and_test_the_page_names_exists(what):
    named = NAMED.findall(PAGE.read_text(encoding="utf-8"))
    assert len(named) >= 60, len(named)
    if what == "files":
        assert [p for p, _ in named if not (ROOT / p).exists()] == []
    else:
        tests = [(p, t) for p, t in named if t]
        assert len(tests) >= 5
        missing = [f"{p}::{t}" for p, t in tests if f"\ndef {t}(" not in (ROOT / p).read_text(encoding="utf-8")]
        assert missing == []
