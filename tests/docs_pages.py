"""The documentation site as a reader has it: built once per test session, and each page's code blocks as its
copy button copies them.

:func:`built_site` builds the site as ``make docs`` does (``docs/prepare.py``, then Sphinx with warnings as
errors), with the notebooks shown as committed (``nb_execution_mode=off``: the pages, not the notebooks' outputs,
are under test), once for all the session's xdist workers (the first one builds, under a lock, the others wait
and read it).

:func:`copied` gives a page's code blocks as the copy button (sphinx-copybutton) copies them: the text of each
``div.highlight-LANGUAGE pre`` without the nodes the site's ``copybutton_exclude`` names, then the button's own
``formatCopyText`` (prompts stripped, output lines left out, continued lines kept), with the parameters read from
the built ``_static/copybutton.js``: what the site does, not a second copy of ``docs/conf.py``.
``tests/test_docs_site.py`` holds this port to the button's own JavaScript in a real browser.
"""

from __future__ import annotations

import ast
import fcntl
import html.parser
import os
import pathlib
import re
import subprocess
import sys
from typing import NamedTuple

from tests.helpers import REPO, subprocess_env

PAGES = {"README.rst": "readme.html", "docs/index.rst": "index.html"}  # else docs/guides/X.rst: guides/X.html


def page_of(doc: str) -> str:
    """The built page of a document of the repository (``README.rst`` -> ``readme.html``)."""
    if doc in PAGES:
        return PAGES[doc]
    path = pathlib.PurePosixPath(doc)
    assert path.parent == pathlib.PurePosixPath("docs/guides"), doc
    return f"guides/{path.stem}.html"


def built_site(tmp_path_factory) -> pathlib.Path:  # type: ignore[no-untyped-def]
    """The site built from this working tree (its ``index.html`` at the top), one build per session."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the folder every xdist worker's temporary folder is in
    root = shared / "docs-site"
    root.mkdir(exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "html" / "index.html"
        if not done.exists():
            _build(root)
    return root / "html"


def _build(root: pathlib.Path) -> None:
    env = subprocess_env()
    for command in (
        [sys.executable, "docs/prepare.py", str(root / "src")],
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-c", "docs"]
        + ["-D", "nb_execution_mode=off", str(root / "src"), str(root / "html")],
    ):
        proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{' '.join(command[1:3])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


class Block(NamedTuple):
    """One code block of a page."""

    language: str  # the highlight-LANGUAGE class: python, console, bash, none, ...
    text: str  # as the page shows it
    copied: str  # as its copy button copies it


class _Pre(html.parser.HTMLParser):
    """Each ``<pre>`` of a ``div.highlight-LANGUAGE``: its language, and its text without the excluded classes."""

    def __init__(self, excluded: frozenset[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.excluded = excluded
        self.blocks: list[tuple[str, str, str]] = []  # language, shown text, text the button filters
        self._language: str | None = None
        self._depth = 0  # open elements inside the <pre>
        self._skip_at: int | None = None  # depth of an excluded element
        self._shown: list[str] = []
        self._kept: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "div":
            found = [c.removeprefix("highlight-") for c in classes if c.startswith("highlight-")]
            if found:
                self._language = found[0]
        if tag == "pre" and self._language is not None and self._depth == 0:
            self._depth, self._shown, self._kept = 1, [], []
            return
        if self._depth:
            self._depth += 1
            if self._skip_at is None and self.excluded & set(classes):
                self._skip_at = self._depth

    def handle_endtag(self, tag: str) -> None:
        if not self._depth:
            return
        if self._skip_at == self._depth:
            self._skip_at = None
        self._depth -= 1
        if self._depth == 0:
            assert self._language is not None
            self.blocks.append((self._language, "".join(self._shown), "".join(self._kept)))
            self._language = None

    def handle_data(self, data: str) -> None:
        if self._depth:
            self._shown.append(data)
            if self._skip_at is None:
                self._kept.append(data)


class _Button(NamedTuple):
    """The copy button's settings as the built site has them."""

    excluded: frozenset[str]
    prompt: re.Pattern[str]
    only_prompt_lines: bool
    remove_prompts: bool
    empty_lines: bool
    continuation: str
    here_doc: str


def _button(site: pathlib.Path) -> _Button:
    script = (site / "_static" / "copybutton.js").read_text(encoding="utf-8")
    exclude = re.search(r"let exclude = '([^']*)';", script)
    call = re.search(r"return formatCopyText\(text, (.*)\)\s*$", script, flags=re.MULTILINE)
    assert exclude and call, "the built copybutton.js is not the one this port reads: see tests/site.py"
    prompt, regexp, only, remove, empty, continuation, here_doc = ast.literal_eval(
        "(" + call[1].replace("true", "True").replace("false", "False") + ")"
    )
    selectors = [s.strip() for s in exclude[1].split(",") if s.strip()]
    assert all(re.fullmatch(r"\.[\w-]+", s) for s in selectors), f"a selector this port cannot read: {selectors}"
    return _Button(
        frozenset(s[1:] for s in selectors),
        re.compile("^(" + (prompt if regexp else re.escape(prompt)) + ")(.*)"),
        only,
        remove,
        empty,
        continuation,
        here_doc,
    )


def _format(text: str, button: _Button) -> str:
    """sphinx-copybutton 0.5.2's ``formatCopyText``, line by line."""
    out, prompted = [], []
    continued = here_doc = False
    for line in text.split("\n"):
        match = button.prompt.match(line)
        if match or continued or here_doc:
            prompted.append(bool(match))
            out.append(match[2] if button.remove_prompts and match else line)
            continued = bool(button.continuation) and line.endswith(button.continuation)
            if button.here_doc and button.here_doc in line:
                here_doc = not here_doc
        elif not button.only_prompt_lines or (button.empty_lines and not line.strip()):
            out.append(line)
    if any(prompted):
        text = "\n".join(out)
    return text[:-1] if text.endswith("\n") else text


def copied(site: pathlib.Path, page: str) -> list[Block]:
    """Every code block of ``page`` (a path under the built site), in order."""
    return copied_from(site, (site / page).read_text(encoding="utf-8"))


def copied_from(site: pathlib.Path, html_text: str) -> list[Block]:
    """Every code block of a part of one of the site's pages (``html_text``), in order."""
    button = _button(site)
    parser = _Pre(button.excluded)
    parser.feed(html_text)
    return [Block(language, shown, _format(kept, button)) for language, shown, kept in parser.blocks]


def commands(copied_text: str) -> list[str]:
    """The commands of a console block's copied text: a line a trailing ``\\`` continues is joined to the next."""
    out: list[str] = []
    lines = copied_text.split("\n")
    while lines:
        command = lines.pop(0)
        while command.endswith("\\") and lines:
            command = command[:-1].rstrip() + " " + lines.pop(0).strip()
        if command.strip():
            out.append(command)
    return out
