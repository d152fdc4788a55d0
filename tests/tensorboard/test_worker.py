"""The background worker, and PlacementLogger's use of it: reading, building and writing off the training thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.helpers import run_py
from tfdevices.tensorboard import callbacks
from tfdevices.tensorboard.callbacks import PlacementLogger
from tfdevices.tensorboard.worker import Worker
from tfdevices.verify import profiling


def test_jobs_run_in_order_on_one_thread_and_flush_waits_for_them():
    worker = Worker("test", bound=2)
    done, threads = [], set()
    gate = threading.Event()

    def job(k):
        gate.wait(10)
        done.append(k)
        threads.add(threading.current_thread().name)

    worker.submit(lambda: job(0))
    submitted = []
    feeder = threading.Thread(
        target=lambda: [worker.submit(lambda k=k: job(k)) or submitted.append(k) for k in (1, 2, 3)]
    )
    feeder.start()
    feeder.join(0.5)
    assert len(submitted) < 3  # bounded: a full queue makes the submitter wait
    gate.set()
    feeder.join(10)
    worker.flush()
    assert done == [0, 1, 2, 3] and threads == {"tfdevices-test"}


def test_a_failed_job_is_kept_and_handed_over_once():
    worker = Worker("errors")
    worker.submit(lambda: 1 / 0)
    worker.submit(lambda: None)
    worker.flush()
    (err,) = worker.take_errors()
    assert isinstance(err, ZeroDivisionError) and worker.take_errors() == []


def test_at_exit_the_worker_finishes_its_jobs_and_prints_the_errors_nobody_took(tmp_path):
    done = tmp_path / "done"
    proc = run_py(
        f"""
        import time
        from tfdevices.tensorboard.worker import Worker
        worker = Worker("exit")
        worker.submit(lambda: (time.sleep(0.5), open({str(done)!r}, "w").write("yes")))
        worker.submit(lambda: 1 / 0)
        """
    )
    assert done.read_text() == "yes"
    assert "tfdevices: a background exit job failed: ZeroDivisionError" in proc.stderr


def _fit(keras, logger, steps=6):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((4 * steps, 4)), np.ones((4 * steps, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[logger])


def test_the_logger_builds_and_writes_off_the_training_thread(tf4, tmp_path, monkeypatch):
    import keras

    seen = {}
    build, write = profiling.build_report, callbacks.write_summaries

    def building(*args, **kwargs):
        seen.setdefault("build", set()).add(threading.current_thread().name)
        return build(*args, **kwargs)

    def writing(*args, **kwargs):
        seen.setdefault("write", set()).add(threading.current_thread().name)
        return write(*args, **kwargs)

    monkeypatch.setattr(profiling, "build_report", building)
    monkeypatch.setattr(callbacks, "write_summaries", writing)
    logger = PlacementLogger(tmp_path, at_step=1, every=2, framework="keras")
    _fit(keras, logger)
    assert logger.steps == [1, 3, 5] and logger.report is not None and "CPU:0" in logger.report.devices
    trainer = threading.current_thread().name
    assert seen["build"] and seen["write"] and trainer not in seen["build"] | seen["write"], seen
    assert all(name.startswith("tfdevices-placement-") for name in seen["build"] | seen["write"]), seen
    assert len(logger.worker_costs) == 3 and len(logger.costs) == 3


def test_a_write_that_fails_is_warned_about_and_kept(tf4, tmp_path, monkeypatch):
    import keras

    def failing(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(callbacks, "write_summaries", failing)
    logger = PlacementLogger(tmp_path, at_step=1, framework="keras", watch=False)
    with pytest.warns(RuntimeWarning, match=r"^PlacementLogger could not build or write a capture: OSError: disk full"):
        _fit(keras, logger, steps=3)
    assert [str(e) for e in logger.errors] == ["disk full"] and logger.steps == [1]


def test_close_runs_what_was_given_then_ends_the_thread():
    worker = Worker("close")
    done = []
    for i in range(3):
        worker.submit(lambda i=i: done.append(i))
    worker.close()
    assert done == [0, 1, 2] and worker._thread is None
    worker.close()  # no thread: nothing to do
    worker.submit(lambda: done.append(3))  # a later job starts another thread
    worker.flush()
    assert done == [0, 1, 2, 3]
