"""Kill a worker mid-epoch; the launcher restarts the job; BackupAndRestore resumes it.

Two local workers (real TensorFlow gRPC on loopback) train a tiny model with
MultiWorkerMirroredStrategy and plain ``fit``: tf_keras, and Keras 3 through
tfdevices.build_strategy (its fit adapter). Rank 1 is killed with SIGKILL in the middle of
epoch 1. ``tfdevices launch --max-restarts 1`` stops rank 0, starts both again,
and training resumes from the epoch-0 backup. The finished job must have run the
requested number of steps, hold identical weights on both workers, equal to an
uninterrupted run's, and have run every epoch to its end exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import REPO, subprocess_env

SCRIPT = os.path.join(REPO, "tests", "scripts", "ft_train.py")
EPOCHS, STEPS = 3, 4
KILL_EPOCH, KILL_BATCH = 1, 1


def launch(out: str, *extra: str, restarts: int = 0, keras: str = "2") -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "tfdevices",
        "launch",
        "-n",
        "2",
        "--max-restarts",
        str(restarts),
        "--",
        sys.executable,
        SCRIPT,
        out,
        str(EPOCHS),
        str(STEPS),
        *extra,
    ]
    return subprocess.Popen(
        cmd,
        env=subprocess_env({"FT_KERAS": keras}),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float) -> str:
    """Waits for the launcher; on timeout stops it (it stops its workers) and fails."""
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out
    except subprocess.TimeoutExpired:
        stop(proc)
        raise AssertionError(f"launcher did not finish within {timeout} s") from None


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the launcher forwards it and stops its workers
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)


def weights(out: str, rank: int) -> dict[str, np.ndarray]:
    with np.load(os.path.join(out, f"weights-rank{rank}.npz")) as data:
        return {k: data[k] for k in data.files}


def events(out: str, rank: int) -> list[dict]:
    with open(os.path.join(out, f"log-rank{rank}.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.slow
@pytest.mark.parametrize("keras", ["2", "3"])
def test_kill_a_worker_mid_epoch_and_resume(tmp_path, keras) -> None:
    reference, resumed = str(tmp_path / "reference"), str(tmp_path / "resumed")
    os.makedirs(reference)
    os.makedirs(resumed)

    proc = launch(reference, keras=keras)
    output = finish(proc, timeout=240)
    assert proc.returncode == 0, output

    proc = launch(resumed, f"{KILL_EPOCH}:{KILL_BATCH}", restarts=1, keras=keras)
    try:
        marker = os.path.join(resumed, "ready-to-die")
        deadline = time.monotonic() + 240
        while not (os.path.exists(marker) and open(marker).read()):
            assert proc.poll() is None, f"launcher ended before the kill: {proc.communicate()[0]}"
            assert time.monotonic() < deadline, "rank 1 never reached the kill point"
            time.sleep(0.1)
        os.kill(int(open(marker).read()), signal.SIGKILL)
        output = finish(proc, timeout=240)
    finally:
        stop(proc)
    assert proc.returncode == 0, output
    assert "[launcher] worker 1 exited with status 137 (signal 9)" in output, output
    assert "[launcher] restarting all 2 workers (restart 1 of 1)" in output, output

    ref = weights(reference, 0)
    assert int(ref["iterations"]) == EPOCHS * STEPS
    for rank in (0, 1):
        got = weights(resumed, rank)
        assert int(got["iterations"]) == EPOCHS * STEPS, f"rank {rank} ran {got['iterations']} steps"
        for name in ref:
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-6, err_msg=f"rank {rank} {name}")
    for name in ref:  # identical on both workers
        np.testing.assert_array_equal(weights(resumed, 0)[name], weights(resumed, 1)[name])

    for rank in (0, 1):
        log = events(resumed, rank)
        first = [(e["event"], e["epoch"]) for e in log if e["attempt"] == 0]
        second = [(e["event"], e["epoch"]) for e in log if e["attempt"] == 1]
        # attempt 0 finished epoch 0 and died inside epoch 1
        assert first == [("begin", 0), ("end", 0), ("begin", 1)], log
        # attempt 1 resumed at epoch 1 from the epoch-0 backup: nothing lost, nothing run twice
        assert second == [("begin", 1), ("end", 1), ("begin", 2), ("end", 2)], log
        resumed_at = next(e for e in log if e["attempt"] == 1)
        assert resumed_at["iterations"] == STEPS * KILL_EPOCH, log
        ends = [e["epoch"] for e in log if e["event"] == "end"]
        assert sorted(ends) == list(range(EPOCHS)), log
