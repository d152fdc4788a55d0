"""JobMetricsLogger inside real ``fit`` runs (Keras 3 and tf_keras): each rank's step series from the job watch's
look over real progress records (``job.json``) and its GPUs' from the fake NVML, one run per rank, read back with
TensorBoard's own loader.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from tests.fake_nvml import FakeGpu, FakeNvml
from tfdevices.core.errors import InputError
from tfdevices.jobs.progress import ProgressWriter, read_records
from tfdevices.jobs.stall import StallPolicy
from tfdevices.jobs.watch import JobWatch, write_snapshot
from tfdevices.tensorboard.job_metrics import JobMetricsLogger


def _board(directory: str, steps: int) -> None:
    """Two ranks' records, looked at by the job's watch every 10 steps (its latest look left in ``job.json``):
    rank 1 spends 51 ms between steps, rank 0 waits for it 50 ms in each step.
    """
    now = [1000.0]
    writers = [ProgressWriter(directory, rank, clock=lambda: now[0]) for rank in (0, 1)]
    watch = JobWatch([0, 1], StallPolicy(), clock=lambda: now[0])
    for n in range(steps):
        start = now[0]
        now[0] = start + 0.001
        writers[0].begin_step()
        now[0] = start + 0.051
        writers[1].begin_step()
        now[0] = start + 0.056
        writers[0].end_step()
        writers[1].end_step()
        if n % 10 == 9:
            write_snapshot(watch.poll(read_records(directory)), directory)


def _read(run: str) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)], as TensorBoard loads the run."""
    acc = EventAccumulator(run, size_guidance={"tensors": 0})
    acc.Reload()
    return {
        tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
        for tag in acc.Tags()["tensors"]
    }


@pytest.mark.parametrize("framework", ["keras", "tf_keras"])
def test_each_rank_writes_its_series_and_its_gpus_to_its_own_run(tf4, tmp_path, framework: str) -> None:
    K = importlib.import_module(framework)  # noqa: N806 (the Keras module)
    board = str(tmp_path / "board")
    _board(board, 40)
    fake = FakeNvml([FakeGpu(uuid="GPU-0", util_percent=87), FakeGpu(uuid="GPU-1", util_percent=12)])
    for rank in (0, 1):
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "TFDEVICES_PROGRESS_DIR": board, "TFDEVICES_RANK_GPUS": str(rank)}
        logger = JobMetricsLogger(tmp_path / "logs", every_s=1e-9, framework=framework, env=env, nvml_module=fake)
        model = K.Sequential([K.Input((4,)), K.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.ones((8, 4)), np.ones((8, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])
        assert logger.written == 3  # every batch (2), and once at the end
    runs = {rank: _read(str(tmp_path / "logs" / f"rank{rank}")) for rank in (0, 1)}
    for rank, scalars in runs.items():
        assert scalars["tfdevices_rank_steps"] == [(40, 40.0)] * 3  # the step is the rank's steps finished
        assert f"hw_gpu_utilization/gpu{rank}" in scalars and f"hw_gpu_utilization/gpu{1 - rank}" not in scalars
        assert scalars["hw_gpu_memory_limit_bytes/gpu" + str(rank)][-1][1] == 40 << 30
    assert runs[0]["hw_gpu_utilization/gpu0"][-1][1] == pytest.approx(0.87)
    assert runs[1]["hw_gpu_utilization/gpu1"][-1][1] == pytest.approx(0.12)
    wait = {rank: runs[rank]["tfdevices_rank_wait_ratio"][-1][1] for rank in (0, 1)}
    assert wait[0] > 0.8 and wait[1] < 0.2, wait
    assert runs[1]["tfdevices_rank_split_seconds/between"][-1][1] == pytest.approx(0.051, abs=1e-6)
    assert [runs[r]["tfdevices_rank_slow"][-1][1] for r in (0, 1)] == [0.0, 1.0]
    assert runs[0]["tfdevices_rank_slow_score"][-1][1] == 1.0 > runs[1]["tfdevices_rank_slow_score"][-1][1]


def test_without_a_watch_only_the_gpus_are_written(tf4, tmp_path) -> None:
    import keras

    fake = FakeNvml([FakeGpu(uuid="GPU-0", util_percent=50)])
    logger = JobMetricsLogger(tmp_path, every_s=60, env={"TFDEVICES_RANK_GPUS": "0"}, nvml_module=fake)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((8, 4)), np.ones((8, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])
    scalars = _read(str(tmp_path / "rank0"))
    assert sorted(scalars) == [f"{name}/gpu0" for name in sorted(FakeGpuSeries)]
    assert scalars["hw_gpu_utilization/gpu0"] == [(1, 0.5), (2, 0.5)]  # after the first batch, and at the end


FakeGpuSeries = (
    "hw_gpu_utilization",
    "hw_gpu_memory_usage_bytes",
    "hw_gpu_memory_limit_bytes",
    "hw_gpu_power_watts",
    "hw_gpu_temperature_celsius",
    "hw_gpu_clock_sm_hertz",
)


@pytest.mark.parametrize("every_s", [0, -1, float("inf"), "10", True])
def test_a_bad_interval_is_refused(tmp_path, every_s: object) -> None:
    with pytest.raises(InputError, match=r"^JobMetricsLogger\(every_s=.*\): not a number of seconds > 0\."):
        JobMetricsLogger(tmp_path, every_s=every_s, framework="keras", env={})


def test_docstring_example(tf4) -> None:
    import doctest

    from tfdevices.tensorboard import job_metrics

    result = doctest.testmod(job_metrics)
    assert result.attempted > 0 and result.failed == 0
