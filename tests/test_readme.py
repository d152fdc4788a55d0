"""README.rst tells the truth: every ``python`` block runs, every ``console`` command exits as it says.

As a newcomer meets them: in a fresh copy of the repository (its tracked files,
copied to a temporary directory), from the copy's root as the README's paths
assume, with nothing on ``PYTHONPATH`` and no GPU variables set; ``tfdevices`` is
the installed command.

Conventions in README.rst: ``.. code-block:: python`` blocks run, each saved as a
file in the copy's root and run there in a fresh process; every ``# prints: TEXT``
comment's TEXT must appear in what the block prints, and a line marked ``the runtime
starts here`` must be the line a later ``RuntimeInitializedError`` names.
``.. code-block:: console`` lines starting with ``$ `` run in bash and must exit 0,
or the status named by a trailing ``# exits N``; ``.. code-block:: bash`` blocks are
shown, not run (make targets, SLURM scripts). The tests share one xdist group, so
they run on one worker in this order, every python block, then every console line,
as a reader would (a console line may read what a python block wrote, e.g. a log
directory).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO

README = os.path.join(REPO, "README.rst")
RUNTIME_START = "the runtime starts here"


def _blocks(language: str) -> list[tuple[int, str]]:
    lines = open(README, encoding="utf-8").read().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != f".. code-block:: {language}":
            continue
        body = []
        for text in lines[i + 1 :]:
            if text and not text.startswith(" "):
                break
            body.append(text)
        blocks.append((i + 1, textwrap.dedent("\n".join(body)).strip("\n")))
    return blocks


def _commands() -> list[tuple[int, str, int]]:
    out = []
    for line_no, body in _blocks("console"):
        for line in body.splitlines():
            if line.startswith("$ "):
                match = re.search(r"\s+# exits (\d+)$", line)
                command = line[2 : match.start()] if match else line[2:]
                out.append((line_no, command, int(match[1]) if match else 0))
    return out


pytestmark = pytest.mark.xdist_group("readme")


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


def test_readme_has_runnable_examples():
    assert len(_blocks("python")) >= 4 and len(_commands()) >= 4


def test_the_copy_is_fresh_and_nothing_is_on_pythonpath(fresh_copy):
    assert not os.path.exists(os.path.join(fresh_copy, ".venv")) and "PYTHONPATH" not in newcomer_env()
    assert os.path.exists(os.path.join(fresh_copy, "tests", "data", "node-8gpu.json"))
    proc = subprocess.run(
        [sys.executable, "-c", "import tests"],
        cwd=os.path.join(fresh_copy, "notebooks"),
        env=newcomer_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "No module named 'tests'" in proc.stderr  # only what the README's cwd gives


@pytest.mark.parametrize("line_no, code", [pytest.param(n, c, id=f"line{n}") for n, c in _blocks("python")])
def test_python_example_runs(fresh_copy, line_no, code):
    script = f"readme_line{line_no}.py"
    with open(os.path.join(fresh_copy, script), "w", encoding="utf-8") as f:
        f.write(code + "\n")
    proc = subprocess.run(
        [sys.executable, script], cwd=fresh_copy, env=newcomer_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (
        f"README.rst line {line_no}:\n{code}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    assert proc.stdout.strip(), "an example should show something"
    for expected in _printed(code):
        assert expected in proc.stdout, f"README.rst line {line_no}: says it prints {expected!r}:\n{proc.stdout}"
    marked = [i for i, text in enumerate(code.splitlines(), 1) if RUNTIME_START in text]
    for i in marked:
        assert re.search(rf"it was started by \S*\b{re.escape(script)}:{i} \(", proc.stdout), (
            f"README.rst line {line_no + 1 + i}: marked as starting the runtime, but:\n{proc.stdout}"
        )


def _printed(code: str) -> list[str]:
    """The TEXT of every ``# prints: TEXT`` comment of a block."""
    return [m[1].strip() for m in re.finditer(r"#\s*prints:\s*(.+)$", code, flags=re.MULTILINE)]


def test_readme_says_what_its_examples_print():
    assert sum(len(_printed(code)) for _, code in _blocks("python")) >= 5
    assert any(RUNTIME_START in code for _, code in _blocks("python"))


@pytest.mark.parametrize(
    "line_no, command, status", [pytest.param(n, c, s, id=f"line{n}-{c.split(' --')[0]}") for n, c, s in _commands()]
)
def test_console_example_runs(fresh_copy, line_no, command, status):
    proc = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=newcomer_env(), cwd=fresh_copy, timeout=600
    )
    assert proc.returncode == status, f"README.rst line {line_no}: $ {command}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    if status:
        assert proc.stderr.count("\n") == 1 and "HINT: " in proc.stderr, proc.stderr  # one line, with its fix
