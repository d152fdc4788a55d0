"""Under ``CI=true`` a skipped test fails, unless its reason names one of the kinds this suite allows.

A skip on CI hides what it did not run. The tests skip for three kinds of reason only, each written first in the
reason: ``platform:`` (an operating system this machine is not: /proc, ELF, process groups are Linux's),
``hardware:`` (a GPU driver or CPUs this machine has or lacks), ``leg:`` (what a CI leg leaves out by design:
tf_keras is not Keras 3). Anything else (``pytest.importorskip``, a plain ``pytest.skip``, a ``skipif`` without a
kind) fails under ``CI=true`` with its reason: a missing dependency is for ``.ci/run`` to install.
``tests.helpers.unavailable`` fails there already.

The hook is imported by ``tests/conftest.py``; ``tests/test_skip_rule.py`` runs it on a suite of its own.
"""

from __future__ import annotations

import os

import pytest

#: The kinds of reason a test may be skipped for under ``CI=true``, as a reason begins.
ALLOWED = ("platform: ", "hardware: ", "leg: ")


def refused(reason: str, env: dict[str, str] | None = None) -> str | None:
    """Why a skip with ``reason`` fails here; ``None`` where it may skip (not on CI, or an allowed kind).

    >>> refused("could not import 'ray'", {"CI": "true"})
    "skipped under CI=true for a reason of no allowed kind (platform: , hardware: , leg: ): could not import 'ray'"
    >>> refused("platform: /proc: Linux", {"CI": "true"}) is None, refused("anything", {}) is None
    (True, True)
    """
    env = dict(os.environ) if env is None else env
    if env.get("CI", "").lower() not in ("1", "true", "yes") or reason.startswith(ALLOWED):
        return None
    return f"skipped under CI=true for a reason of no allowed kind ({', '.join(ALLOWED)}): {reason}"


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text.removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    why = refused(_reason(report))
    if why is not None:
        report.outcome = "failed"
        report.longrepr = why
