"""A launched worker's start-up: a malformed TFDEVICES_LISTEN stops it at once, naming the variable (the listen
check itself: tests/jobs/test_listen_check.py)."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import run_py
from tfdevices.jobs.listen_check import LISTEN_MARK, LISTEN_STATUS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platform: /proc: Linux")


def test_a_malformed_listen_variable_stops_the_worker_naming_it() -> None:
    proc = run_py(
        """
        from tfdevices.jobs.worker_sitecustomize import start_worker
        start_worker({"TFDEVICES_LISTEN": "0.0.0.0:80", "RANK": "2"})
        print("went on")
        """,
        check=False,
        timeout=60,
    )
    assert proc.returncode == LISTEN_STATUS and "went on" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"{LISTEN_MARK} TFDEVICES_LISTEN: not ADDRESS:PORT"), proc.stderr
    assert "0.0.0.0:80" not in proc.stderr  # the variable's value is not printed
