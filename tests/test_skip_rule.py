"""A skip cannot hide under CI=true: a suite of its own (a skipif of each allowed kind, one without a kind, a plain
``pytest.skip`` and an ``importorskip`` of a module that is not there) run by pytest with the suite's hook, on CI and
off it."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
import textwrap

import pytest

from tests import skip_rule
from tests.helpers import REPO, subprocess_env

SUITE = """
import pytest

@pytest.mark.skipif(True, reason="platform: /proc: Linux")
def test_platform(): pass

@pytest.mark.skipif(True, reason="hardware: a machine with an NVIDIA driver")
def test_hardware(): pass

@pytest.mark.skipif(True, reason="leg: tf_keras")
def test_leg(): pass

@pytest.mark.skipif(True, reason="needs something")
def test_no_kind(): pass

def test_plain():
    pytest.skip("not today")

def test_missing_module():
    pytest.importorskip("no_such_module_for_the_skip_rule")

def test_runs(): assert True
"""


MISSING = "no_such_module_for_the_skip_rule"


def test_docstring_examples() -> None:
    result = doctest.testmod(skip_rule)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("ci, failed", [("true", 3), ("", 0)])
def test_under_ci_only_an_allowed_kind_of_skip_skips(tmp_path, ci: str, failed: int) -> None:
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.skip_rule", "-p", "no:cacheprovider", "-q", "-rfs", "-n", "0"],
        cwd=tmp_path,
        env=subprocess_env({"CI": ci, "PYTHONPATH": REPO}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (failed|passed|skipped|error)", out.splitlines()[-1])}
    # a skipif's skip is its setup's: refused, it is an error; a skip inside the test, a failure
    assert (counts.get("failed", 0) + counts.get("error", 0), counts["passed"], counts["skipped"]) == (
        failed,
        1,
        6 - failed,
    ), out
    assert proc.returncode == (1 if failed else 0), out
    refused = re.findall(r"skipped under CI=true for a reason of no allowed kind \(.*\): (.*)$", out, re.M)
    assert refused == (
        ["needs something", "not today", f"could not import '{MISSING}': No module named '{MISSING}'"] if failed else []
    ), out
