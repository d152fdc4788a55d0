"""TensorFlow's three distribution tutorials, ported to tfdevices, run on logical CPUs.

tests/tutorials/ holds the tutorials' code (Distributed training with Keras, Multi-worker
training with Keras, Custom training with tf.distribute.Strategy) with each changed line
marked: ``# tfdevices`` (the port: at most 5 lines each), ``# test size`` (data without a
download, fewer steps), ``# keras 3`` (file names Keras 3 requires, whatever the strategy).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env

TUTORIALS = os.path.join(REPO, "tests", "tutorials")
PORTS = ("keras_distributed.py", "multi_worker_with_keras.py", "custom_training.py", "mnist_setup.py")


@pytest.mark.parametrize("name", PORTS)
def test_the_port_changes_at_most_5_lines(name):
    text = open(os.path.join(TUTORIALS, name)).read()
    ported = [line for line in text.splitlines() if re.search(r"#\s*tfdevices\b", line)]
    assert len(ported) <= 5, ported
    assert "tf.distribute.MirroredStrategy(" not in text.replace("was tf.distribute.MirroredStrategy()", "")


def run(*command: str, cwd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), env=subprocess_env(), cwd=cwd, capture_output=True, text=True, timeout=240)


def test_keras_distributed_tutorial(tmp_path):
    proc = run(sys.executable, os.path.join(TUTORIALS, "keras_distributed.py"), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Number of devices: 2" in proc.stdout
    assert re.search(r"Learning rate for epoch 2 is 0\.001", proc.stdout), proc.stdout[-2000:]
    accuracy = float(re.search(r"Eval loss: [\d.]+, Eval accuracy: ([\d.]+)", proc.stdout).group(1))
    assert accuracy > 0.5  # it learned the rule in tests/tutorials/data.py (chance: 0.1)
    assert sorted(os.listdir(tmp_path / "training_checkpoints")) == ["ckpt_1.weights.h5", "ckpt_2.weights.h5"]
    assert os.listdir(tmp_path / "logs")  # TensorBoard's


def test_multi_worker_with_keras_tutorial(tmp_path):
    """Unchanged it fails under Keras 3 (keras-team/keras#20585); ported, plain fit trains on 2 workers."""
    proc = run(
        sys.executable,
        "-m",
        "tfdevices",
        "launch",
        "-n",
        "2",
        "--log-dir",
        str(tmp_path / "logs"),
        "--",
        sys.executable,
        os.path.join(TUTORIALS, "multi_worker_with_keras.py"),
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        log = (tmp_path / "logs" / f"rank{rank}.log").read_text()
        losses = [float(v) for v in re.findall(r"4/4\D.* loss: ([\d.]+)", log)]
        assert len(losses) == 3 and losses[-1] < losses[0], log[-2000:]


def test_custom_training_tutorial(tmp_path):
    proc = run(sys.executable, os.path.join(TUTORIALS, "custom_training.py"), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Number of devices: 2" in proc.stdout
    losses = [float(v) for v in re.findall(r"^Epoch \d, Loss: ([\d.]+)", proc.stdout, re.M)]
    assert len(losses) == 2 and losses[1] < losses[0], proc.stdout
    assert any(name.startswith("ckpt-1") for name in os.listdir(tmp_path / "training_checkpoints"))


def _launch_unchanged(tmp_path, *options: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    logs = tmp_path / "logs"
    proc = run(
        sys.executable,
        "-m",
        "tfdevices",
        "launch",
        "-n",
        "2",
        "--log-dir",
        str(logs),
        *options,
        "--",
        sys.executable,
        os.path.join(TUTORIALS, "multi_worker_with_keras_unchanged.py"),
        cwd=str(tmp_path),
    )
    return proc, [(logs / f"rank{rank}.log").read_text() for rank in (0, 1)]


def test_the_unchanged_multi_worker_tutorial_trains_under_launch(tmp_path):
    """The tutorial's own MultiWorkerMirroredStrategy() and plain fit with metrics: launch mends its workers."""
    text = open(os.path.join(TUTORIALS, "multi_worker_with_keras_unchanged.py")).read()
    assert (
        "tfdevices" not in text.split('"""', 2)[2] and "strategy = tf.distribute.MultiWorkerMirroredStrategy()" in text
    )
    proc, logs = _launch_unchanged(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for log in logs:
        losses = [float(v) for v in re.findall(r"4/4\D.* accuracy: [\d.e+-]+ - loss: ([\d.e+-]+)", log)]
        assert len(losses) == 3 and losses[-1] < losses[0], log[-2000:]
        assert "sitecustomize" not in log and "Traceback" not in log
    for text in [proc.stdout, proc.stderr, *logs]:  # a success reads as one: no crash message anywhere
        assert "have crashed" not in text and "unavailable" not in text.lower(), text[-2000:]


def test_without_the_mend_the_unchanged_tutorial_fails_as_keras_issue_20585(tmp_path):
    proc, logs = _launch_unchanged(tmp_path, "--no-mend")
    assert proc.returncode != 0
    assert all("Attempt to convert a value (PerReplica" in log for log in logs), logs[0][-2000:]
