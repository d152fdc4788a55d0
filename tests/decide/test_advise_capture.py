"""advise() on real captures (4 logical CPUs) and the ``tfdevices advise`` command."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli
from tfdevices.decide.advise import advise


@pytest.fixture(scope="module")
def weights_elsewhere(tf4):
    """A step whose weight lives on CPU:0 and is used on CPU:1: copied on every call."""
    tf = tf4
    with tf.device("CPU:0"):
        w = tf.Variable(tf.ones([64, 64]))

    @tf.function
    def step(x):
        with tf.device("CPU:1"):
            return tf.reduce_sum(tf.matmul(x, w))

    x = tf.ones([8, 64])
    step(x)
    import tfdevices

    return tfdevices.capture(step, x)


def test_a_weight_read_on_another_device_is_found_with_its_size(weights_elsewhere):
    found = {f.kind: f for f in advise(weights_elsewhere)}
    assert "weights_across_devices" in found
    assert (
        "1 weight(s) are copied from the device that stores them to another on every step: 16.0 KiB"
        in found["weights_across_devices"].evidence
    )


def test_a_chain_over_two_devices_leaves_each_idle_while_the_other_works(tf4):
    tf = tf4
    import tfdevices

    @tf.function
    def chain(x):
        with tf.device("CPU:0"):
            for _ in range(4):
                x = tf.tanh(tf.matmul(x, x))
        with tf.device("CPU:1"):
            for _ in range(4):
                x = tf.tanh(tf.matmul(x, x))
        return x

    x = tf.ones([128, 128]) * 0.01
    chain(x)
    report = tfdevices.capture(chain, x)
    found = {f.kind: f for f in advise(report)}
    assert "idle_devices" in found
    data = json.loads(report.to_json())
    busy = {d: us for d, us in data["busy_us"].items() if d in ("CPU:0", "CPU:1")}
    assert f"CPU:0 busy {busy['CPU:0']:.0f} us" in found["idle_devices"].evidence


def test_the_command_prints_findings_from_a_placement_run(tmp_path, weights_elsewhere):
    from tfdevices.tensorboard.writer import write_placement

    write_placement(weights_elsewhere, tmp_path / "run")
    proc = run_cli("advise", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    assert "weights_across_devices" in proc.stdout and "FIX: create each layer's variables" in proc.stdout
    proc = run_cli("advise", str(tmp_path / "run"), "--json")
    assert "weights_across_devices" in [f["kind"] for f in json.loads(proc.stdout)]


def test_the_command_says_what_is_missing_without_a_traceback(tmp_path):
    proc = run_cli("advise", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.startswith("tfdevices advise: error:") and "HINT:" in proc.stderr
    assert "Traceback" not in proc.stderr
