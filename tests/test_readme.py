"""README.rst and the guides tell the truth: every ``python`` block runs, every ``console`` command
exits as it says.

The documents are README.rst and every ``docs/guides/*.rst``. As a newcomer meets them: in a fresh
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
import os
import re
import shutil
import subprocess
import sys
import textwrap
from typing import NamedTuple

import pytest

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
    changes = {
        names[n][: -len(WITHOUT_GPUS)]: code for n, code in blocks.items() if names.get(n, "").endswith(WITHOUT_GPUS)
    }
    out = []
    for n, code in blocks.items():
        if names.get(n, "").endswith(WITHOUT_GPUS):
            continue
        change = changes.pop(names.get(n, ""), "")
        out.append(Example(doc, n, "python", code, without_gpus=_changed(code, change) if change else ""))
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
                match = re.search(r"\s+# exits (\d+)$", command)
                out.append(
                    Example(
                        doc, n, "console", command[: match.start()] if match else command, int(match[1]) if match else 0
                    )
                )
    return sorted(out, key=lambda e: e.line)


def _params(kind: str | None = None) -> list:
    return [
        pytest.param(e, id=f"{e.doc}:{e.line}", marks=pytest.mark.xdist_group(f"docs-{e.doc}"))
        for doc in DOCS
        for e in _examples(doc)
        if kind in (None, e.kind)
    ]


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
def test_example_runs(fresh_copy, example):
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
    proc = subprocess.run(
        [sys.executable, script], cwd=fresh_copy, env=newcomer_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{where}:\n{code}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.stdout.strip(), "an example should show something"
    for expected in _printed(code):
        assert expected in proc.stdout, f"{where}: says it prints {expected!r}:\n{proc.stdout}"
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


def _printed(code: str) -> list[str]:
    """The TEXT of every ``# prints: TEXT`` comment of a block."""
    return [m[1].strip() for m in re.finditer(r"#\s*prints:\s*(.+)$", code, flags=re.MULTILINE)]


def test_the_documents_say_what_their_examples_print():
    codes = [e.text for doc in DOCS for e in _examples(doc) if e.kind == "python"]
    assert sum(len(_printed(code)) for code in codes) >= 5
    assert any(RUNTIME_START in code for code in codes)
