"""README.rst and the guides tell the truth: every ``python`` block runs, every ``console`` command
exits as it says, as a reader copies them from the built site.

The documents are README.rst and every ``docs/guides/*.rst``. Each example runs as its page's copy button
copies it (``tests/docs_pages.py``: the site built once per session, each block through the button's
own filter), not as the source has it: a block the page renders differently (a ``:name:`` option indented
less than its code leaves a space before every line) fails here. The source gives the examples' order,
kinds, names and lines; the page must show the same blocks. As a newcomer meets them: in a fresh
copy of the repository (its tracked files, copied to a temporary directory; a new guide runs once
``git add`` has listed it), from the copy's root, as every document's paths assume (a guide's
``tests/data/node-8gpu.json`` is the repository's), with nothing on ``PYTHONPATH`` and no GPU
variables set; ``tfdevices`` is the installed command.

Conventions in each document: ``.. code-block:: python`` blocks run, each saved as a file in the
copy's root and run there in a fresh process; every ``# prints: TEXT`` comment's TEXT must appear in
what the block prints, and a line marked ``the runtime starts here`` must be the line a later
``RuntimeInitializedError`` names. A script for two GPUs (``:name: X``) followed by a one-line block
``:name: X-without-gpus`` runs, on a machine with fewer GPUs, with that line in place of its line that
starts the same way up to the first ``(``. ``.. code-block:: console`` lines starting with ``$ `` run in bash
(with the lines a trailing ``\\`` continues them onto)
and must exit 0, or the status named by a trailing ``# exits N``; ``.. code-block:: bash`` blocks are
shown, not run (make targets, SLURM scripts). Each document's examples share one xdist group, so they
run on one worker in the order a reader meets them (a console line may read what a python block above
it wrote, e.g. a log directory); test ids are ``FILE:LINE``.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from typing import NamedTuple

import pytest

from tests.docs_pages import built_site, commands, copied, page_of
from tests.helpers import REPO

README = "README.rst"
GUIDES = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "guides", "*.rst")))
DOCS = [README, *GUIDES]
RUNTIME_START = "the runtime starts here"


class Example(NamedTuple):
    """One runnable example: a python block, or one ``$`` line of a console block."""

    doc: str  # path from the repository's root
    line: int  # the block's directive line (python) or the command's own line (console)
    kind: str  # "python" or "console"
    text: str  # the code, or the command
    status: int = 0  # the exit status a console command must return
    without_gpus: str = ""  # a script for GPUs: the code with the line its "-without-gpus" block changes
    change_line: int = 0  # that "-without-gpus" block's directive line


def _lines(doc: str) -> list[str]:
    return open(os.path.join(REPO, doc), encoding="utf-8").read().splitlines()


def _blocks(doc: str, language: str) -> list[tuple[int, int, str]]:
    """Every ``.. code-block:: LANGUAGE`` of ``doc``: its line, its body's first line, its body (dedented)."""
    lines = _lines(doc)
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != f".. code-block:: {language}":
            continue
        body = []
        for text in lines[i + 1 :]:
            if text and not text.startswith(" "):
                break
            body.append(text)
        while body and OPTION.match(body[0]):  # the directive's options (:name: ...), not code
            body.pop(0)
        blocks.append((i + 1, i + 2, textwrap.dedent("\n".join(body)).strip("\n")))
    return blocks


OPTION = re.compile(r"^\s+:[\w-]+:")
WITHOUT_GPUS = "-without-gpus"


def _names(doc: str) -> dict[int, str]:
    """The ``:name:`` of each named block of ``doc``, by the block's directive line."""
    lines = _lines(doc)
    out = {}
    for i, line in enumerate(lines):
        if line.strip().startswith(".. code-block::"):
            for option in lines[i + 1 :]:
                if not OPTION.match(option):
                    break
                if option.strip().startswith(":name:"):
                    out[i + 1] = option.split(":name:", 1)[1].strip()
    return out


def _changed(code: str, line: str) -> str:
    """``code`` with its one line that starts as ``line`` does (up to its first ``(``) replaced by ``line``."""
    start = line[: line.index("(") + 1]
    lines = code.splitlines()
    at = [i for i, text in enumerate(lines) if text.startswith(start)]
    assert len(at) == 1, f"{start!r} starts {len(at)} lines of the script, not one"
    lines[at[0]] = line
    return "\n".join(lines)


def _python_examples(doc: str) -> list[Example]:
    """The python blocks. A block named ``X-without-gpus`` is one line that a block named ``X`` (a script for
    GPUs) runs with on a machine without enough GPUs; it is not run alone."""
    names = _names(doc)
    blocks = {n: code for n, _, code in _blocks(doc, "python")}
    changes = {names[n][: -len(WITHOUT_GPUS)]: n for n in blocks if names.get(n, "").endswith(WITHOUT_GPUS)}
    out = []
    for n, code in blocks.items():
        if names.get(n, "").endswith(WITHOUT_GPUS):
            continue
        change = changes.pop(names.get(n, ""), 0)
        without = _changed(code, blocks[change]) if change else ""
        out.append(Example(doc, n, "python", code, without_gpus=without, change_line=change))
    assert not changes, f"{doc}: a -without-gpus block with no script of that name: {sorted(changes)}"
    return out


def _examples(doc: str) -> list[Example]:
    """``doc``'s examples in the order a reader meets them."""
    out = _python_examples(doc)
    lines = _lines(doc)
    for _, first, _ in _blocks(doc, "console"):
        for n in range(first, len(lines) + 1):
            text = lines[n - 1]
            if text and not text.startswith(" "):
                break
            if text.strip().startswith("$ "):
                command, more = text.strip()[2:], n
                while command.endswith("\\") and more < len(lines):  # continued on the next line
                    command, more = command[:-1].rstrip() + " " + lines[more].strip(), more + 1
                out.append(Example(doc, n, "console", *_exits(command)))
    return sorted(out, key=lambda e: e.line)


def _params(kind: str | None = None) -> list:
    return [
        pytest.param(e, id=f"{e.doc}:{e.line}", marks=pytest.mark.xdist_group(f"docs-{e.doc}"))
        for doc in DOCS
        for e in _examples(doc)
        if kind in (None, e.kind)
    ]


def as_copied(site, example: Example) -> Example:
    """``example`` as a reader copies it from its page: the same block of the built page, through its copy button."""
    page = [b.copied for b in copied(site, page_of(example.doc)) if b.language == example.kind]
    source = _blocks(example.doc, example.kind)
    assert len(page) == len(source), (
        f"{page_of(example.doc)} shows {len(page)} {example.kind} block(s), {example.doc} has {len(source)}"
    )
    if example.kind == "python":
        at = [line for line, _, _ in source]
        code = page[at.index(example.line)]
        change = page[at.index(example.change_line)] if example.change_line else ""
        return example._replace(text=code, without_gpus=_changed(code, change) if change else "")
    block = max(i for i, (_, first, _) in enumerate(source) if first <= example.line)
    end = source[block + 1][0] if block + 1 < len(source) else len(_lines(example.doc)) + 1
    mine = sorted(e.line for e in _examples(example.doc) if e.kind == "console" and source[block][1] <= e.line < end)
    shown = commands(page[block])
    assert len(shown) == len(mine), f"{page_of(example.doc)} shows the commands {shown}: {example.doc} has {len(mine)}"
    command, status = _exits(shown[mine.index(example.line)])
    return example._replace(text=command, status=status)


def _exits(command: str) -> tuple[str, int]:
    """A command without its trailing ``# exits N``, and N (0 without one)."""
    match = re.search(r"\s+# exits (\d+)$", command)
    return (command[: match.start()], int(match[1])) if match else (command, 0)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The built documentation site (``tests/docs_pages.py``)."""
    return built_site(tmp_path_factory)


@pytest.fixture(scope="session")
def fresh_copy(tmp_path_factory) -> str:
    """The repository's tracked files, as they are in the working tree, copied to a new directory."""
    root = tmp_path_factory.mktemp("newcomer") / "tfdevices"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = os.path.join(REPO, name)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            shutil.copy2(source, os.path.join(root, name))
    return str(root)


def newcomer_env() -> dict[str, str]:
    """This environment with no PYTHONPATH and no GPU, job or inventory variables; the installed
    ``tfdevices`` first on PATH; TensorFlow's C++ start-up lines quiet (noise, not behaviour)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_CONFIG", "TFDEVICES_INVENTORY")
    }
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def test_readme_is_the_front_door():
    lines = _lines(README)
    assert len(lines) <= 260, f"README.rst has {len(lines)} lines: the manual belongs in docs/guides"
    text = "\n".join(lines)
    assert "make demo" in text and "make test" in text  # .ci/run runs the README's test command
    for guide in GUIDES:
        assert f"<{guide}>`_" in text, f"README.rst does not link {guide}"


def test_every_document_has_runnable_examples():
    assert len(_blocks(README, "python")) >= 2  # the tour: pick GPUs; configure, build, fit and log
    assert len([e for e in _examples(README) if e.kind == "console"]) >= 3
    assert len(GUIDES) >= 9
    for guide in GUIDES:
        assert _examples(guide), f"{guide} has no example the tests run"


def test_the_copy_is_fresh_and_nothing_is_on_pythonpath(fresh_copy):
    assert not os.path.exists(os.path.join(fresh_copy, ".venv")) and "PYTHONPATH" not in newcomer_env()
    assert os.path.exists(os.path.join(fresh_copy, "tests", "data", "node-8gpu.json"))
    for doc in DOCS:
        assert os.path.exists(os.path.join(fresh_copy, doc)), f"{doc} is not tracked: git add it"
    proc = subprocess.run(
        [sys.executable, "-c", "import tests"],
        cwd=os.path.join(fresh_copy, "notebooks"),
        env=newcomer_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "No module named 'tests'" in proc.stderr  # only what the docs' cwd gives


@pytest.mark.parametrize("example", _params())
def test_example_runs(fresh_copy, site, example):
    source = example
    example = as_copied(site, example)
    assert example.status == source.status, f"{example.doc} line {example.line}: the page's '# exits' differs"
    if example.kind == "python":
        _run_python(fresh_copy, example)
    else:
        _run_console(fresh_copy, example)


def _gpus() -> int:
    """The GPUs a newcomer's process sees here (NVML: no TensorFlow)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import tfdevices; print(len(tfdevices.discover().gpus))"],
        env=newcomer_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(proc.stdout.split()[-1])


def _run_python(fresh_copy: str, example: Example) -> None:
    where, code = f"{example.doc} line {example.line}", example.text
    if example.without_gpus and _gpus() < 2:  # a script for two GPUs, with its line for a machine without
        where, code = f"{where} (its -without-gpus line)", example.without_gpus
    stem = os.path.splitext(os.path.basename(example.doc))[0].lower()
    script = f"{stem if example.doc == README else 'guide_' + stem}_line{example.line}.py"
    with open(os.path.join(fresh_copy, script), "w", encoding="utf-8") as f:
        f.write(code + "\n")
    printed = os.path.join(fresh_copy, script + ".printed.json")
    proc = subprocess.run(
        [sys.executable, "-c", PRINTS, script, printed],
        cwd=fresh_copy,
        env=newcomer_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{where}:\n{code}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.stdout.strip(), "an example should show something"
    with open(printed, encoding="utf-8") as f:
        calls = [(line, text) for line, text in json.load(f)]
    for claim in _printed(code):
        _check_claim(where, claim, calls)
    marked = [i for i, text in enumerate(code.splitlines(), 1) if RUNTIME_START in text]
    for i in marked:
        assert re.search(rf"it was started by \S*\b{re.escape(script)}:{i} \(", proc.stdout), (
            f"{example.doc} line {example.line + 1 + i}: marked as starting the runtime, but:\n{proc.stdout}"
        )


def _run_console(fresh_copy: str, example: Example) -> None:
    command = example.text
    proc = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=newcomer_env(), cwd=fresh_copy, timeout=600
    )
    assert proc.returncode == example.status, (
        f"{example.doc} line {example.line}: $ {command}\n{proc.stdout}\n{proc.stderr}"
    )
    assert "Traceback" not in proc.stderr
    if example.status:
        assert proc.stderr.count("\n") == 1 and "HINT: " in proc.stderr, proc.stderr  # one line, with its fix


# The script as ``python SCRIPT`` runs it (its name, ``__main__``, the folder it is in first on sys.path), with
# each print() called from its own lines recorded: the line that called it and what it printed.
PRINTS = """
import builtins, io, json, runpy, sys
script, out = sys.argv[1], sys.argv[2]
sys.argv = [script]
calls, original = [], builtins.print
def print(*args, **kwargs):
    caller = sys._getframe(1)
    if caller.f_code.co_filename != script or kwargs.get("file") not in (None, sys.stdout):
        return original(*args, **kwargs)
    text = io.StringIO()
    original(*args, **{**kwargs, "file": text})
    calls.append((caller.f_lineno, text.getvalue()))
    sys.stdout.write(text.getvalue())
builtins.print = print
try:
    runpy.run_path(script, run_name="__main__")
finally:
    with open(out, "w") as f:
        json.dump(calls, f)
"""


class Claim(NamedTuple):
    """A ``# prints`` comment, on the line of the print() it is about or alone on a line after it:
    ``# prints: TEXT`` (one line, TEXT in it), ``# prints N lines, the first: TEXT``, or ``# prints N lines,
    one of them: TEXT`` (N a number, or ``several`` where the count depends on the run: more than one)."""

    line: int  # the comment's line in the block (from 1)
    text: str
    lines: int  # the lines that print() prints; 0: several
    first: bool  # TEXT is in the first of them


CLAIM = re.compile(r"#\s*prints(?: (\d+|several) lines, (the first|one of them))?:\s*(.+)$")


def _printed(code: str) -> list[Claim]:
    """The ``# prints`` comments of a block."""
    out = []
    for n, line in enumerate(code.splitlines(), 1):
        match = CLAIM.search(line)
        if match:
            count = 0 if match[1] == "several" else int(match[1] or 1)
            out.append(Claim(n, match[3].strip(), count, match[2] != "one of them"))
    return out


def _check_claim(where: str, claim: Claim, calls: list[tuple[int, str]]) -> None:
    """The print() the comment is about (the last one called from its line or above) printed what it says;
    one called in a loop prints what it says each time, TEXT in one of them."""
    above = [line for line, _ in calls if line <= claim.line]
    assert above, f"{where}: no print() ran at or above the line of '# prints: {claim.text}'"
    texts = [text for line, text in calls if line == max(above)]
    said = f"{where}, line {claim.line} of the block: says it prints"
    for text in texts:
        lines = text.count("\n")
        assert lines == claim.lines or (claim.lines == 0 and lines > 1), f"{said} {claim}, but printed:\n{text}"
    shown = [text.splitlines()[:1] if claim.first else text.splitlines() for text in texts]
    assert any(claim.text in line for lines in shown for line in lines), f"{said} {claim.text!r}, but:\n{texts}"


def test_the_documents_say_what_their_examples_print():
    codes = [e.text for doc in DOCS for e in _examples(doc) if e.kind == "python"]
    assert sum(len(_printed(code)) for code in codes) >= 5
    assert any(RUNTIME_START in code for code in codes)


def test_a_prints_comment_says_how_many_lines_and_where_its_text_is():
    code = "\n".join(
        [
            "print(a)  # prints: x",
            "print(t)",
            "# prints 3 lines, the first: head",
            "print(u)  # prints several lines, one of them: mid",
        ]
    )
    claims = _printed(code)
    assert claims == [Claim(1, "x", 1, True), Claim(3, "head", 3, True), Claim(4, "mid", 0, False)]
    calls = [(1, "x y\n"), (2, "head\nb\nc\n"), (4, "a\nmid\n")]
    for claim in claims:
        _check_claim("block", claim, calls)
    with pytest.raises(AssertionError, match="says it prints Claim"):
        _check_claim("block", Claim(2, "head", 1, True), calls)  # it printed 3 lines, not 1
    with pytest.raises(AssertionError, match="says it prints 'b'"):
        _check_claim("block", Claim(3, "b", 3, True), calls)  # b is not its first line
    with pytest.raises(AssertionError, match="no print"):
        _check_claim("block", Claim(1, "x", 1, True), [(2, "x\n")])  # nothing printed at or above the comment
