"""The text of README.rst and the guides: what a reader copies must be right as written.

- Every code line (``.. code-block::`` bodies, ``::`` literal blocks, ``>>>`` doctest blocks) fits
  88 characters: wider lines are cut off on the site's page and on the repository's.
- Each error message the troubleshooting guide quotes as TensorFlow's is spelled as the installed
  TensorFlow spells it: read from TensorFlow's own files (its Python source, its libraries), never
  by importing it, so the test fails the day TensorFlow respells one.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pathlib
import re

import pytest

from tests.helpers import REPO

WIDTH = 88
DOCS = [
    "README.rst",
    *sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "guides", "*.rst"))),
]


def code_blocks(text: str) -> list[tuple[int, list[str]]]:
    """Every code block of an rst text: its first line's number (from 1) and its lines as written.

    A block is the indented body after ``.. code-block::`` (or ``.. code::``, ``.. sourcecode::``), after a
    paragraph or a line ending ``::`` (a literal block), or a run of lines starting ``>>>`` (a doctest block).
    Directive options (``:caption:``) before the body are not code.
    """
    lines = text.splitlines()
    blocks: list[tuple[int, list[str]]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped.startswith(">>>"):
            start = i
            while i < len(lines) and lines[i].strip():
                i += 1
            blocks.append((start + 1, lines[start:i]))
            continue
        directive = re.match(r"\.\. (code-block|code|sourcecode)::", stripped)
        if directive or (stripped.endswith("::") and not stripped.startswith("..")):
            body, j = _indented_body(lines, i + 1, indent, options=bool(directive))
            if body:
                blocks.append((j + 1, body))
            i = j + len(body)
            continue
        i += 1
    return blocks


def _indented_body(lines: list[str], start: int, indent: int, *, options: bool) -> tuple[list[str], int]:
    """The block that starts after line ``start - 1``: lines indented past ``indent``, blank lines inside it."""
    j = start
    if options:
        while j < len(lines) and re.match(r"\s+:[\w-]+:", lines[j]):
            j += 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    end = j
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    while end > j and not lines[end - 1].strip():
        end -= 1
    return lines[j:end], j


def test_code_blocks_are_found_in_every_form():
    text = "\n".join(
        [
            "Text::",
            "",
            "    literal one",
            "",
            ".. code-block:: python",
            "   :caption: x",
            "",
            "    code two",
            "",
            "    code three",
            "",
            ">>> doctest four",
            "four",
            "",
            "Text after.",
        ]
    )
    assert code_blocks(text) == [
        (3, ["    literal one"]),
        (8, ["    code two", "", "    code three"]),
        (12, [">>> doctest four", "four"]),
    ]


@pytest.mark.parametrize("doc", DOCS)
def test_every_code_line_fits_88_characters(doc):
    text = pathlib.Path(REPO, doc).read_text(encoding="utf-8")
    blocks = code_blocks(text)
    assert blocks, f"{doc} has no code block: the parser missed them"
    wide = []
    for first, body in blocks:
        indent = min(len(s) - len(s.lstrip()) for s in body if s.strip())
        wide += [f"{doc}:{first + k}: {len(s) - indent} chars" for k, s in enumerate(body) if len(s) - indent > WIDTH]
    assert wide == []


# -- troubleshooting: TensorFlow's messages as TensorFlow spells them

TROUBLESHOOTING = pathlib.Path(REPO, "docs", "guides", "troubleshooting.rst")

# Each message the guide quotes as TensorFlow's, and the file of the installed TensorFlow package that holds it.
TENSORFLOW_SAYS = {
    "Physical devices cannot be modified after being initialized": "python/eager/context.py",
    "Virtual devices cannot be modified after being initialized": "python/eager/context.py",
    "Visible devices cannot be modified after being initialized": "python/eager/context.py",
    "Cannot set memory growth on device when virtual devices configured": "python/eager/context.py",
    "Memory growth cannot differ between GPU devices": "python/eager/context.py",
    # the environment variable the guide offers in place of set_memory_growth, read by TensorFlow's C++
    "TF_FORCE_GPU_ALLOW_GROWTH": "libtensorflow_framework.so*",
}


def _tensorflow_files(pattern: str) -> list[pathlib.Path]:
    spec = importlib.util.find_spec("tensorflow")  # where it is installed; TensorFlow is not imported
    assert spec is not None and spec.submodule_search_locations
    root = pathlib.Path(next(iter(spec.submodule_search_locations)))
    return sorted(root.glob(pattern))


def _quoted(text: str) -> list[str]:
    """The double-quoted phrases of an rst text's prose (code blocks left out), each on one line."""
    lines = text.splitlines()
    for first, body in code_blocks(text):
        lines[first - 1 : first - 1 + len(body)] = [""] * len(body)
    prose = "\n".join(lines)
    return [" ".join(q.split()) for q in re.findall(r'"([^"\n]*(?:\n[^"\n]*)?)"', prose)]


@pytest.mark.parametrize("message", list(TENSORFLOW_SAYS))
def test_troubleshooting_quotes_tensorflow_as_it_spells_it(message):
    page = " ".join(TROUBLESHOOTING.read_text(encoding="utf-8").split())
    assert message in page, f"troubleshooting.rst no longer names {message!r}: drop it here"
    files = _tensorflow_files(TENSORFLOW_SAYS[message])
    assert files, f"no {TENSORFLOW_SAYS[message]} in the installed TensorFlow"
    assert any(message.encode() in f.read_bytes() for f in files), (
        f"the installed TensorFlow no longer says {message!r} ({TENSORFLOW_SAYS[message]}): update the guide"
    )


def test_every_device_message_the_guide_quotes_is_checked():
    """A new quote about devices, memory growth or initialization must be listed above, so it is checked."""
    quotes = _quoted(TROUBLESHOOTING.read_text(encoding="utf-8"))
    about = [q for q in quotes if re.search(r"\bdevices\b|memory growth|initiali[sz]ed", q, flags=re.IGNORECASE)]
    assert len(about) >= 5
    # "... devices cannot be modified": the end the messages share (the section's heading)
    shared = [q for q in about if q.startswith("... ") and sum(m.endswith(q[4:]) for m in TENSORFLOW_SAYS) >= 2]
    assert [q for q in about if q not in TENSORFLOW_SAYS and q not in shared] == []


def test_the_guides_first_section_names_each_message_with_its_call_and_fix():
    text = TROUBLESHOOTING.read_text(encoding="utf-8")
    section = text.split("\n---", 2)[1]
    flat = " ".join(section.split())
    for message, call in (
        ("Physical devices", "set_memory_growth"),
        ("Virtual devices", "set_logical_device_configuration"),
        ("Visible devices", "set_visible_devices"),
    ):
        item = flat[flat.index(f'"{message} cannot be modified') :][:700]
        assert call in item.split("Fix:")[0], message
        assert "tfdevices.configure(" in item.split("Fix:")[1], message
    assert "TF_FORCE_GPU_ALLOW_GROWTH=true" in flat and "CUDA_VISIBLE_DEVICES" in flat


# -- the changelog


def test_the_changelog_begins_with_this_version_and_names_what_broke():
    import configparser

    import tfdevices

    text = pathlib.Path(REPO, "docs", "changelog.rst").read_text(encoding="utf-8")
    versions = re.findall(r"^(\d+\.\d+\.\d+)(?: \(unreleased\))?\n-+$", text, flags=re.MULTILINE)
    assert versions[0] == tfdevices.__version__, versions  # the newest first: the version the package says
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    setup = configparser.ConfigParser()
    setup.read(pathlib.Path(REPO, "setup.cfg"))
    assert setup["metadata"]["version"] == tfdevices.__version__
    newest = text.split(f"\n{versions[1]}\n", 1)[0]
    # what 0.4.0 removed, each with the line a caller writes instead
    for removed in ("StrategyDecision", "report.copies", "report.transfers(", "transfers_between(", "LaunchConfig(n"):
        assert removed in newest, removed
    assert "changelog" in pathlib.Path(REPO, "docs", "index.rst").read_text(encoding="utf-8")


# -- links that work on the repository's page (plain rst) and on the site


@pytest.mark.parametrize("doc", DOCS)
def test_links_are_plain_rst_to_files_that_exist(doc):
    """GitHub renders README.rst and the guides as plain rst: a Sphinx role (``:doc:``) shows raw there."""
    text = pathlib.Path(REPO, doc).read_text(encoding="utf-8")
    assert re.findall(r":(?:doc|ref):`[^`]*`", text) == []
    here = pathlib.Path(REPO, doc).parent
    targets = re.findall(r"`[^`<]+<([^>`]+\.rst)>`__?", text)
    assert [t for t in targets if not (here / t).is_file()] == []


def test_the_site_turns_each_guide_link_into_a_link_to_its_page():
    spec = importlib.util.spec_from_file_location("docs_prepare", pathlib.Path(REPO, "docs", "prepare.py"))
    assert spec is not None and spec.loader is not None
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    linked = 0
    for guide in sorted(pathlib.Path(REPO, "docs", "guides").glob("*.rst")):
        text = guide.read_text(encoding="utf-8")
        page = prepare.guide_page(text)
        linked += len(re.findall(r":doc:`[^`]+ <\w+>`", page))
        assert ".rst>`_" not in page, guide.name
    assert linked >= 20
    assert "<docs/guides/" not in prepare.readme_page() and ":doc:`" in prepare.readme_page()


def test_the_sites_index_links_every_guide_and_the_changelog_in_its_text():
    text = pathlib.Path(REPO, "docs", "index.rst").read_text(encoding="utf-8")
    prose = text.split(".. toctree::", 1)[0]  # not only the sidebar's hidden tables of contents
    guides = sorted(p.stem for p in pathlib.Path(REPO, "docs", "guides").glob("*.rst"))
    assert [g for g in guides if f":doc:`guides/{g}`" not in prose] == []
    assert ":doc:`changelog`" in prose


def test_the_glossary_is_linked_from_the_readme_and_the_index_and_its_links_work():
    """The glossary (docs/glossary.rst) is plain rst on the repository's page and links to the guides' pages on
    the site; the README and the site's index link to it in their text."""
    text = pathlib.Path(REPO, "docs", "glossary.rst").read_text(encoding="utf-8")
    assert re.findall(r":(?:doc|ref|term):`[^`]*`", text) == []
    targets = re.findall(r"`[^`<]+<([^>`]+\.rst)>`__?", text)
    assert targets and [t for t in targets if not pathlib.Path(REPO, "docs", t).is_file()] == []
    spec = importlib.util.spec_from_file_location("docs_prepare", pathlib.Path(REPO, "docs", "prepare.py"))
    assert spec is not None and spec.loader is not None
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    page = prepare.glossary_page(text)
    assert ".rst>`" not in page and len(re.findall(r":doc:`[^`]+ <guides/\w+>`", page)) == len(targets)
    assert "<docs/glossary.rst>`_" in pathlib.Path(REPO, "README.rst").read_text(encoding="utf-8")
    index = pathlib.Path(REPO, "docs", "index.rst").read_text(encoding="utf-8")
    assert ":doc:`glossary`" in index.split(".. toctree::", 1)[0]


def test_no_row_of_a_simple_table_in_the_readme_splits():
    """In a simple table a line whose first column has text starts a new row: a first cell written over two
    lines ("Keras 3 fit under mirrored" / "in one process") makes two rows of one. A row's first cell that
    starts with a word that only goes on a phrase (in, of, on, under, ...) is such a second half."""
    lines = pathlib.Path(REPO, "README.rst").read_text(encoding="utf-8").splitlines()
    borders = [i for i, line in enumerate(lines) if re.fullmatch(r"=+( +=+)+", line)]
    assert len(borders) >= 3
    halves = []
    for top, head, bottom in zip(borders[::3], borders[1::3], borders[2::3]):
        width = lines[top].index(" ")
        firsts = [line[:width].strip() for line in lines[head + 1 : bottom]]
        assert len([f for f in firsts if f]) >= 5
        halves += [f for f in firsts if f.split(" ", 1)[0] in GOES_ON]
    assert halves == []


GOES_ON = {"in", "of", "on", "under", "with", "and", "or", "for", "to", "from", "by", "at", "per", "without"}


# -- density: short paragraphs

PARAGRAPH_LINES = 8  # every guide, no exception


def paragraphs(text: str) -> list[tuple[int, int]]:
    """Each paragraph of an rst text (list items' and notes' included): its line and its lines in the source."""
    import docutils.core
    import docutils.nodes

    doc = docutils.core.publish_doctree(text, settings_overrides={"report_level": 5, "halt_level": 5})
    return [(p.line or 0, len(p.rawsource.splitlines())) for p in doc.findall(docutils.nodes.paragraph)]


def test_paragraphs_are_counted_in_source_lines_in_every_form():
    text = "Title\n=====\n\nOne\ntwo\nthree.\n\n- an item\n  on two lines\n\n.. note::\n\n   A note.\n"
    assert sorted(n for _, n in paragraphs(text)) == [1, 2, 3]


@pytest.mark.parametrize("doc", [d for d in DOCS if d.startswith("docs/guides/")])
def test_no_paragraph_of_a_guide_runs_over_8_lines(doc):
    found = paragraphs(pathlib.Path(REPO, doc).read_text(encoding="utf-8"))
    assert found, f"{doc}: no paragraph found"
    long = [f"{doc}:{line}: {n} lines" for line, n in found if n > PARAGRAPH_LINES]
    assert long == []
