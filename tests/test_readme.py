"""README.rst tells the truth: every ``python`` block runs, every ``console`` command exits as it says.

Conventions in README.rst: ``.. code-block:: python`` blocks run, each in a fresh
process from the repository root with no GPU variables set, and every
``# prints: TEXT`` comment's TEXT must appear in what the block prints; ``.. code-block:: console`` lines starting with
``$ `` run in bash and must exit 0, or the status named by a trailing
``# exits N``; ``.. code-block:: bash`` blocks are shown, not run (make targets,
SLURM scripts). The tests share one xdist group, so they run on one worker in
this order, every python block, then every console line, as a reader would
(a console line may read what a python block wrote, e.g. a log directory).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO, run_py, subprocess_env

README = os.path.join(REPO, "README.rst")


def _blocks(language: str) -> list[tuple[int, str]]:
    lines = open(README, encoding="utf-8").read().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != f".. code-block:: {language}":
            continue
        body = []
        for text in lines[i + 1:]:
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
                command = line[2:match.start()] if match else line[2:]
                out.append((line_no, command, int(match[1]) if match else 0))
    return out


pytestmark = pytest.mark.xdist_group("readme")


def test_readme_has_runnable_examples():
    assert len(_blocks("python")) >= 4 and len(_commands()) >= 4


@pytest.mark.parametrize("line_no, code", [pytest.param(n, c, id=f"line{n}") for n, c in _blocks("python")])
def test_python_example_runs(line_no, code):
    proc = run_py(code, check=False, timeout=600)
    assert proc.returncode == 0, f"README.rst line {line_no}:\n{code}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.stdout.strip(), "an example should show something"
    for expected in _printed(code):
        assert expected in proc.stdout, f"README.rst line {line_no}: says it prints {expected!r}:\n{proc.stdout}"


def _printed(code: str) -> list[str]:
    """The TEXT of every ``# prints: TEXT`` comment of a block."""
    return [m[1].strip() for m in re.finditer(r"#\s*prints:\s*(.+)$", code, flags=re.MULTILINE)]


def test_readme_says_what_its_examples_print():
    assert sum(len(_printed(code)) for _, code in _blocks("python")) >= 5


@pytest.mark.parametrize("line_no, command, status",
                         [pytest.param(n, c, s, id=f"line{n}-{c.split(' --')[0]}") for n, c, s in _commands()])
def test_console_example_runs(line_no, command, status):
    env = subprocess_env({"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == status, f"README.rst line {line_no}: $ {command}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
