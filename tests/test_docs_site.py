"""The documentation site: the reference documents every public name once and nothing internal, and the
pages look right in a real browser.

The site is built here, once per session, from ``docs/`` as ``make docs`` builds it
(``docs/prepare.py``, then Sphinx with warnings as errors), into a temporary folder and
with the notebooks shown as committed (``nb_execution_mode=off``): these tests read the
pages, not the notebooks' outputs, and the build takes seconds. ``make docs`` (the end
of ``make test``) builds the published site itself, notebooks executed.

Headless Chromium (Debian: ``apt-get install chromium``) opens the index, a guide (where
did my ops run: tables, the dashboard's picture, long commands) and a reference page: nothing
wider than the window or than the content column, and the sidebar lists the stages.
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
import subprocess
import sys

import pytest

import tfdevices
from tests.helpers import REPO, subprocess_env, unavailable
from tests.tensorboard.browser import Browser, find_chromium
from tests.test_public import public_names

ROOT = pathlib.Path(REPO)
STAGES = ("discover", "select", "reserve", "configure", "build", "run", "verify", "log", "decide")

# one worker builds the site these tests share
pytestmark = pytest.mark.xdist_group("docs_site")


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> pathlib.Path:
    """The built site (its ``index.html`` is at the top)."""
    tmp = tmp_path_factory.mktemp("docs")
    env = subprocess_env()
    for command in (
        [sys.executable, "docs/prepare.py", str(tmp / "src")],
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-c", "docs"]
        + ["-D", "nb_execution_mode=off", str(tmp / "src"), str(tmp / "html")],
    ):
        proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(command[1:3])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return tmp / "html"


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
