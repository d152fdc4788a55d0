"""Keras 3 ``fit`` on 2 workers through tfdevices under the real engines people launch with.

A one-node SLURM (``srun -n 2``) and a local Ray cluster (Ray Train's ``TensorflowTrainer``), each
started by the test on this machine (tests/engines.py), on 127.0.0.1 only. Both ranks must end with
the weights a single process gets from the same global batches, and identical to each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.engines import slurm_cluster
from tests.helpers import REPO, subprocess_env, unavailable
from tests.test_multiworker import EPOCHS, SCRIPT, STEPS, TIMEOUT, reference_fit

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("engines")]


def _check_two_workers(tf, results: list[dict]) -> None:
    ref_history, ref_weights = reference_fit(tf)
    for r in results:
        assert (r["kind"], r["workers"], r["replicas"], r["keras"].startswith("3.")) == ("multi_worker", 2, 2, True)
        assert sorted(r["history"]) == ["accuracy", "loss", "val_accuracy", "val_loss"]
        np.testing.assert_allclose(r["history"]["loss"], ref_history["loss"], rtol=1e-4)
        for got, want in zip(r["weights"], ref_weights):
            np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-6)
    for a, b in zip(results[0]["weights"], results[1]["weights"]):
        np.testing.assert_array_equal(np.array(a), np.array(b))


def test_keras3_fit_on_two_tasks_of_a_real_srun(tf4, tmp_path):
    """srun -n 2 of the multi-worker script: launch_info reads the step, build_strategy('auto') builds the job."""
    with slurm_cluster(str(tmp_path / "slurm")) as slurm:
        out = tmp_path / "out"
        out.mkdir()
        proc = subprocess.run(
            ["srun", "-n", "2", "--kill-on-bad-exit=1", sys.executable, SCRIPT, str(out), str(EPOCHS), str(STEPS)],
            env=subprocess_env(slurm),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr and "have crashed" not in proc.stdout + proc.stderr
        _check_two_workers(tf4, [json.loads((out / f"result-rank{r}.json").read_text()) for r in (0, 1)])


def test_keras3_fit_on_two_ray_train_workers(tf4, tmp_path):
    """Ray Train's TensorflowTrainer, 2 workers on a local Ray cluster (127.0.0.1): launch_info knows Ray, and
    plain Keras 3 fit with metrics and validation_data works, although Ray sets TF_USE_LEGACY_KERAS=1."""
    try:
        import ray.train.tensorflow  # noqa: F401
    except ImportError as err:
        unavailable(f"Ray Train is not installed ({err}; pip install 'ray[train]', the test extra)")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "scripts", "ray_fit.py"), str(out), str(EPOCHS), str(STEPS)],
        env=subprocess_env({"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [json.loads((out / f"result-rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["source"], r["rank"], r["world_size"], r["local_rank"]) for r in results] == [
        ("ray", 0, 2, 0),
        ("ray", 1, 2, 1),
    ]
    assert all(r["legacy_keras"] == "1" for r in results)  # what Ray's TensorFlow backend sets
    _check_two_workers(tf4, results)
