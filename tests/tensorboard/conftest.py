"""Fixtures for the Placement dashboard: real captures written to log directories, a real ``tensorboard``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import metadata

import pytest

from tests.keras_models import on_device_layer
from tfdevices.jobs.rendezvous import free_ports


def get(url: str, timeout: float = 30) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def get_json(url: str, timeout: float = 30) -> object:
    return json.loads(get(url, timeout))


def placement_entry_point() -> str:
    """The ``tensorboard_plugins`` entry point TensorBoard loads the dashboard from (installed metadata)."""
    points = [ep for ep in metadata.entry_points(group="tensorboard_plugins") if ep.name == "placement"]
    assert points, (
        "no 'placement' entry point in group 'tensorboard_plugins' of the installed metadata: "
        "reinstall tfdevices (pip install -e .) after setup.cfg changes"
    )
    return points[0].value


@contextlib.contextmanager
def tensorboard(
    logdir: str,
    expect_run: str | None = None,
    expect_placement: dict[str, list[int]] | None = None,
    expect_scalars: dict[str, list[str]] | None = None,
) -> Iterator[str]:
    """A real ``tensorboard --logdir`` on a free 127.0.0.1 port; stopped on exit, even on failure.

    Ready when ``/data/runs`` lists ``expect_run`` and, with ``expect_placement`` ({run: steps}), when the
    Placement plugin lists those runs with all those steps, and with ``expect_scalars`` ({run: tags}) when the
    scalars plugin lists those tags: TensorBoard lists a run before it has read all of its events, so a test
    that asks for a step too early would get a 404.
    """
    placement_entry_point()
    exe = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    (port,) = free_ports(1)
    log = open(os.path.join(logdir, os.pardir, f"tensorboard-{port}.log"), "wb")
    proc = subprocess.Popen(
        [exe, "--logdir", logdir, "--port", str(port), "--host", "127.0.0.1"], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):  # bounded: 60 s
            if proc.poll() is not None:
                raise AssertionError(f"tensorboard exited {proc.returncode}: {_tail(log.name)}")
            try:
                runs = get_json(f"{url}/data/runs", timeout=2)
                if (
                    (expect_run is None or expect_run in runs)
                    and _lists_placement(url, expect_placement)
                    and _lists_scalars(url, expect_scalars)
                ):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        else:
            raise AssertionError(
                f"tensorboard did not list {expect_run!r} / {expect_placement!r} within 60 s: {_tail(log.name)}"
            )
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _lists_placement(url: str, expected: dict[str, list[int]] | None) -> bool:
    if not expected:
        return True
    listed = {r["run"]: r["steps"] for r in get_json(f"{url}/data/plugin/placement/runs", timeout=2)["runs"]}
    return all(listed.get(run) == steps for run, steps in expected.items())


def _lists_scalars(url: str, expected: dict[str, list[str]] | None) -> bool:
    if not expected:
        return True
    listed = get_json(f"{url}/data/plugin/scalars/tags", timeout=2)
    return all(set(tags) <= set(listed.get(run, {})) for run, tags in expected.items())


def _tail(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")[-2000:]


def to_device_model(tf, devices: tuple[str, str] = ("/CPU:1", "/CPU:2")):
    """The ``.to(device)``-style model: layers ``b`` and ``c`` call under ``tf.device`` (weights stay on CPU:0)."""
    import keras

    on_device = on_device_layer(keras, tf)
    keras.utils.set_random_seed(0)
    inp = keras.Input((8,), name="x")
    a = keras.layers.Dense(16, name="a")(inp)
    b = on_device(keras.layers.Dense(16, name="b"), devices[0], name="to_b")(a)
    c = on_device(keras.layers.Dense(4, name="c"), devices[1], name="to_c")(b)
    return keras.Model(inp, c, name="model")


def _capture_forward(tf, model):
    from tfdevices.verify import capture

    x = tf.ones([32, 8])
    forward = tf.function(model)
    forward(x)
    return capture(forward, x)


@pytest.fixture(scope="session")
def to_device_report(tf4):
    """A 3-device capture: the ``.to(device)``-style model's forward pass on CPU:0, CPU:1 and CPU:2."""
    return _capture_forward(tf4, to_device_model(tf4))


@pytest.fixture(scope="session")
def plain_report(tf4):
    """The same model with every layer asked for CPU:0 (the 'before' of a placement change)."""
    return _capture_forward(tf4, to_device_model(tf4, ("/CPU:0", "/CPU:0")))


@pytest.fixture(scope="session")
def placement_logdir(to_device_report, plain_report, tmp_path_factory) -> str:
    """Runs ``to_device`` (steps 0 and 5), ``plain`` (step 0, with memory), ``fit`` (PlacementLogger, step 1)
    and ``retrace`` (PlacementLogger every 2 steps; a new input shape at step 4 moves a layer)."""
    from tfdevices.tensorboard.writer import write_placement

    logdir = tmp_path_factory.mktemp("placement") / "logs"
    write_placement(to_device_report, logdir / "to_device", step=0)
    write_placement(to_device_report, logdir / "to_device", step=5)
    write_placement(plain_report, logdir / "plain", step=0)
    import tensorflow as tf

    with tf.summary.create_file_writer(str(logdir / "plain")).as_default():  # memory as PlacementLogger logs it
        tf.summary.scalar("placement/memory/CPU/current_bytes", 1024.0, step=0)  # the host's allocator
        tf.summary.scalar("placement/memory/CPU/peak_bytes", 4096.0, step=0)
    _fit_with_placement_logger(str(logdir / "fit"))
    _fit_that_retraces(str(logdir / "retrace"))
    return str(logdir)


def _fit_that_retraces(run: str) -> None:
    """4 steps of batch 16, then batch 4: Keras retraces at step 4 and the switch layer moves CPU:0 -> CPU:1."""
    import keras
    import tensorflow as tf

    from tests.keras_models import shape_switch
    from tfdevices.tensorboard.callbacks import PlacementLogger

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), shape_switch(keras, tf), keras.layers.Dense(1, name="head")])
    model.compile(optimizer="sgd", loss="mse")
    logger = PlacementLogger(run, at_step=2, every=2, memory=False)
    for batch, batches in ((16, 4), (4, 2)):
        x, y = tf.ones([batch * batches, 8]), tf.zeros([batch * batches, 1])
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
        model.fit(data, epochs=1, verbose=0, callbacks=[logger])
    assert [c.step for c in logger.changes] == [4], [c.summary() for c in logger.changes]


def _fit_with_placement_logger(run: str) -> None:
    """A run as users make it: ``model.fit`` with the PlacementLogger callback (step 1 captured)."""
    import tensorflow as tf

    from tfdevices.tensorboard.callbacks import PlacementLogger

    model = to_device_model(tf)
    model.compile(optimizer="sgd", loss="mse")
    model.fit(
        tf.ones([64, 8]),
        tf.zeros([64, 4]),
        batch_size=16,
        epochs=1,
        verbose=0,
        callbacks=[PlacementLogger(run, at_step=1)],
    )


@pytest.fixture(scope="session")
def server(placement_logdir) -> Iterator[str]:
    """A real ``tensorboard`` over :func:`placement_logdir`."""
    with tensorboard(
        placement_logdir,
        expect_run="to_device",
        expect_placement={"to_device": [0, 5], "plain": [0], "fit": [1], "retrace": [2, 4]},
        expect_scalars={"plain": ["placement/memory/CPU/current_bytes", "placement/memory/CPU/peak_bytes"]},
    ) as url:
        yield url


@pytest.fixture(scope="session")
def profile_logdir(tf4, tmp_path_factory) -> str:
    """A log directory that holds only a profile: Keras' TensorBoard(profile_batch=...)'s, without its summaries."""
    import shutil

    import keras

    from tests.keras_models import fit_with_profile

    written = fit_with_profile(keras, str(tmp_path_factory.mktemp("fit-with-profile")))
    logdir = tmp_path_factory.mktemp("profile-only") / "logs"
    shutil.copytree(os.path.join(written, "train", "plugins"), logdir / "train" / "plugins")
    return str(logdir)


@pytest.fixture(scope="session")
def profile_server(profile_logdir) -> Iterator[str]:
    """A real ``tensorboard`` over :func:`profile_logdir` (no event file: TensorBoard lists no run)."""
    with tensorboard(profile_logdir) as url:
        yield url
