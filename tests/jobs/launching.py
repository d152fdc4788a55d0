"""Running ``tfdevices launch`` in the jobs tests: real launcher processes, workers without TensorFlow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.helpers import REPO, subprocess_env

WORKER = os.path.join(REPO, "tests", "scripts", "echo_worker.py")


def run_launcher(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfdevices", "launch", *args],
        env=subprocess_env(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def worker(*args: str) -> list[str]:
    return ["--", sys.executable, WORKER, *args]


def reports(stdout: str) -> dict[int, dict]:
    out = {}
    for line in stdout.splitlines():
        match = re.match(r"^\[(\d+)\] (\{.*\})$", line)
        if match:
            data = json.loads(match.group(2))
            assert data["rank"] == int(match.group(1)), line  # the prefix is the worker's own rank
            out[data["rank"]] = data
    return out
