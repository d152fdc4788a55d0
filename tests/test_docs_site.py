"""The documentation site: the reference documents every public name once and nothing internal, and the
pages look right in a real browser.

The site is built once per session, from ``docs/`` as ``make docs`` builds it
(``docs/prepare.py``, then Sphinx with warnings as errors), into a temporary folder and
with the notebooks shown as committed (``nb_execution_mode=off``: ``tests/docs_pages.py``);
these tests read the pages, not the notebooks' outputs. ``make docs`` (the end of
``make test``) builds the published site itself, notebooks executed.

Every code block of every page pastes as its copy button copies it: no block keeps a
space before each line (a ``:name:`` option indented less than its code does that), and
each Python block compiles; ``tests/test_readme.py`` runs the README's and the guides'.

Headless Chromium (Debian: ``apt-get install chromium``) opens the index, a guide (where
did my ops run: tables, the dashboard's picture, long commands) and a reference page: nothing
wider than the window or than the content column, and the sidebar lists the stages. On the
README's page and a guide's, each code block has a copy button, and what the button itself
copies (its own JavaScript) is what ``tests/docs_pages.py`` says it copies. At 1280x800 the
README's and the index's first screen shows the install and the first command.
Without Chromium the browser tests are skipped on a developer's machine and FAIL under
``CI=true``. Screenshots go to ``build/test-artifacts/docs-*.png`` (or
``$TFDEVICES_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import html.parser
import importlib
import os
import pathlib
import re

import pytest

import tfdevices
from tests.docs_pages import built_site, copied
from tests.helpers import REPO, unavailable
from tests.tensorboard.browser import Browser, find_chromium
from tests.test_public import public_names

ROOT = pathlib.Path(REPO)
STAGES = ("discover", "select", "reserve", "configure", "build", "run", "verify", "log", "decide")

# one worker builds the site these tests share
pytestmark = pytest.mark.xdist_group("docs_site")


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> pathlib.Path:
    """The built site (its ``index.html`` at the top), as ``tests/docs_pages.py`` builds it once per session."""
    return built_site(tmp_path_factory)


# -- the reference: the public names, each once, and nothing else


class _Objects(html.parser.HTMLParser):
    """The ids of the documented Python objects (``<dt class="sig sig-object py" id=...>``) and of the modules."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: list[str] = []
        self.modules: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        ident, classes = found.get("id") or "", (found.get("class") or "").split()
        if tag == "dt" and "sig-object" in classes and "py" in classes and ident:
            self.objects.append(ident)
        elif ident.startswith("module-"):
            self.modules.append(ident.removeprefix("module-"))


def _documented(site: pathlib.Path) -> tuple[list[str], list[str]]:
    objects, modules = [], []
    for page in sorted((site / "reference").glob("*.html")):
        parser = _Objects()
        parser.feed(page.read_text(encoding="utf-8"))
        objects += parser.objects
        modules += parser.modules
    return objects, modules


def test_every_public_name_is_documented_once_in_the_reference(site):
    objects, modules = _documented(site)
    public = public_names()
    top_level = [n for n in public if n.count(".") == 1]  # tfdevices.X: the same objects as in the stage modules
    missing = [n for n in public if n not in objects and n not in top_level]
    assert missing == []
    twice = sorted({n for n in objects if objects.count(n) > 1})
    assert twice == []
    assert sorted(modules) == sorted(tfdevices.PUBLIC_MODULES)
    assert len(public) > 100


def test_nothing_internal_is_documented_in_the_reference(site):
    objects, _ = _documented(site)
    public = set(public_names())
    classes = {n for n in public if isinstance(_resolve(n), type)}
    internal = [n for n in objects if n not in public and not any(n.startswith(c + ".") for c in classes)]
    assert internal == []


def test_the_reference_has_a_page_per_stage_and_the_errors(site):
    pages = {p.stem for p in (site / "reference").glob("*.html")}
    assert pages == {*STAGES, "errors", "index"}
    index = (site / "reference" / "index.html").read_text(encoding="utf-8")
    for module in tfdevices.PUBLIC_MODULES:  # the list of public modules, written down on the page
        assert module in index, module


def test_the_cli_page_shows_every_command_and_no_internals(site):
    from tfdevices import cli

    text = (site / "cli.html").read_text(encoding="utf-8")
    assert all(f"tfdevices {name}" in text for name in cli.COMMANDS)
    objects, _ = _documented(site)
    assert not [n for n in objects if n.startswith("tfdevices.cli")]


def _resolve(name: str) -> object:
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


# -- in a real browser

OVERFLOW = """(() => {
  const view = document.documentElement.clientWidth;
  // the column: furo's .content, whose padding is the gutter its headings and signatures hang into by 8px
  const main = document.querySelector('article[role=main]');
  const column = main.closest('.content').getBoundingClientRect();
  const scrolls = (el) => { for (let p = el.parentElement; p && p !== main; p = p.parentElement) {
      if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX)) return true; } return false; };
  const wide = [];
  for (const el of main.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || scrolls(el)) continue;  // inside a box that scrolls: clipped to it
    if (box.right > column.right + 1 || box.left < column.left - 1)
      wide.push(`${el.tagName.toLowerCase()}.${el.className} ${Math.round(box.width)}px: `
                + el.textContent.trim().slice(0, 60));
  }
  return {page: document.documentElement.scrollWidth, view, column: Math.round(column.width), wide: wide.slice(0, 8)};
})()"""

SIDEBAR = "[...document.querySelectorAll('.sidebar-tree a')].map((a) => a.textContent.trim())"


def _artifacts() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("TFDEVICES_TEST_ARTIFACTS") or ROOT / "build" / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def chromium() -> str:
    executable = find_chromium()
    if executable is None:
        unavailable("Chromium is not installed (Debian: apt-get install chromium)")
    return executable  # type: ignore[return-value]


@pytest.mark.parametrize("width", [1280, 420])
@pytest.mark.parametrize("page", ["index.html", "guides/placement.html", "reference/build.html"])
def test_pages_fit_the_window_and_the_sidebar_lists_the_stages(site, chromium, page, width):
    with Browser(chromium, width=width, height=900) as browser:
        browser.goto((site / page).as_uri())
        browser.wait_for("document.readyState === 'complete' && !!document.querySelector('.sidebar-tree')")
        shot = f"docs-{page.replace('/', '-').removesuffix('.html')}-{width}.png"
        browser.screenshot(str(_artifacts() / shot))
        fit = browser.evaluate(OVERFLOW)
        assert fit["page"] <= fit["view"], f"{page} at {width}px scrolls sideways: {fit}"
        assert fit["wide"] == [], f"{page} at {width}px: wider than the content column ({fit['column']}px): {fit}"
        if width >= 1000:  # beside the content; on a phone it is behind the menu button
            assert browser.evaluate(
                "getComputedStyle(document.querySelector('.sidebar-drawer')).display !== 'none' && "
                "document.querySelector('.sidebar-drawer').getBoundingClientRect().width > 100"
            )
        listed = browser.evaluate(SIDEBAR)
        assert [s for s in STAGES if s.capitalize() not in listed] == [], listed


def test_a_layout_block_is_text_and_code_is_python(site):
    page = (site / "reference" / "index.html").read_text(encoding="utf-8")
    assert '<div class="highlight-none notranslate">' in page  # the flow: a literal block, not highlighted
    readme = (site / "readme.html").read_text(encoding="utf-8")
    assert "highlight-python" in readme or "highlight-python3" in readme


def test_the_tour_links_every_guide_to_its_page(site):
    page = (site / "readme.html").read_text()
    linked = set(re.findall(r'href="(guides/\w+\.html)"', page))
    guides = {f"guides/{p.stem}.html" for p in (pathlib.Path(REPO) / "docs" / "guides").glob("*.rst")}
    assert linked == guides
    assert all((site / link).is_file() for link in linked)
    assert not re.search(r"href=\"[^\"]*docs/guides/", page)


# -- every code block pastes as copied


def _pages(site: pathlib.Path) -> list[str]:
    """Every page of the site (not Sphinx's own: the index of names, the search page)."""
    pages = [str(p.relative_to(site)) for p in sorted(site.rglob("*.html"))]
    return [p for p in pages if not p.startswith(("_", "genindex", "search", "py-modindex"))]


def test_every_code_block_on_every_page_pastes_as_copied(site):
    blocks, python = 0, 0
    indented, broken = [], []
    for page in _pages(site):
        for block in copied(site, page):
            blocks += 1
            lines = [line for line in block.copied.splitlines() if line.strip()]
            if lines and all(line[0].isspace() for line in lines):
                indented.append(f"{page}: {block.language}: {lines[0]!r}")
            if block.language in ("python", "default") and not page.startswith("notebooks/"):  # notebooks: IPython
                python += 1
                try:
                    compile(block.copied, page, "exec")
                except SyntaxError as err:
                    broken.append(f"{page}: {err}: {block.copied[:200]!r}")
            if block.language == "console":
                assert block.copied.strip() and "$ " not in block.copied, f"{page}: {block.copied!r}"
    assert blocks >= 100 and python >= 50
    assert indented == []  # a space before every line: an IndentationError in Python, odd in a shell
    assert broken == []


def test_the_copy_button_copies_a_console_blocks_commands_without_prompts_or_output(site):
    page = [b for b in copied(site, "readme.html") if b.language == "console"]
    assert page[0].text.startswith("$ tfdevices list") and page[0].copied == "tfdevices list"
    continued = [b.copied for b in page if "\\\n" in b.copied]
    assert continued and all(not line.startswith("$") for text in continued for line in text.splitlines())


# The page's own copy function: the one sphinx-copybutton hands ClipboardJS (its ``text`` option), caught as the
# page makes its ClipboardJS, before any script of the page runs.
CATCH = """(() => { let real;
  Object.defineProperty(window, 'ClipboardJS', {configurable: true, set(value) { real = value; },
    get() { return real && function (selector, options) {
      window.tfdevicesCopyText = options.text; return new real(selector, options); }; }});
})()"""

COPIED = """(() => [...document.querySelectorAll('div.highlight pre')].map((pre) => {
  const button = pre.parentElement.querySelector('button.copybtn');
  return button ? window.tfdevicesCopyText(button) : null;
}))()"""

FIRST_RUN = """(() => {
  const pre = [...document.querySelectorAll('article[role=main] pre')].find((p) => p.textContent.includes('make demo'));
  return pre ? pre.getBoundingClientRect().bottom + window.scrollY : null;
})()"""


@pytest.mark.parametrize("page", ["readme.html", "guides/shared_box.html"])
def test_each_code_block_has_a_copy_button_that_copies_what_the_tests_run(site, chromium, page):
    with Browser(chromium, width=1280, height=800) as browser:
        browser.send("Page.addScriptToEvaluateOnNewDocument", {"source": CATCH}, session=True)
        browser.goto((site / page).as_uri())
        browser.wait_for("!!window.tfdevicesCopyText && !!document.querySelector('button.copybtn')")
        in_browser = browser.evaluate(COPIED)
    blocks = copied(site, page)
    assert len(in_browser) == len(blocks) >= 5
    assert None not in in_browser  # every block has its button
    assert in_browser == [b.copied for b in blocks]


@pytest.mark.parametrize("page", ["readme.html", "index.html"])
def test_the_first_screen_shows_the_install_and_the_first_command(site, chromium, page):
    with Browser(chromium, width=1280, height=800) as browser:
        browser.goto((site / page).as_uri())
        browser.wait_for("document.readyState === 'complete' && !!document.querySelector('.sidebar-tree')")
        browser.screenshot(str(_artifacts() / f"docs-first-screen-{page.removesuffix('.html')}.png"))
        bottom = browser.evaluate(FIRST_RUN)
    assert bottom is not None and bottom <= 800, f"{page}: the block with 'make demo' ends at {bottom}px"
