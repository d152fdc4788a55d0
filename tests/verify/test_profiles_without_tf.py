"""Reading profiles never imports TensorFlow: read_profile and ``tfdevices placement PROFILE``.

The profiles are TensorFlow's own, written in a fresh process; each reading runs in another
fresh process, so ``sys.modules`` there says whether TensorFlow was imported.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_py

WRITE_PROFILE = """
import sys, tensorflow as tf
logdir = sys.argv[1] if len(sys.argv) > 1 else {logdir!r}
step = tf.function(lambda x: tf.reduce_sum(tf.matmul(x, x) * 2.0))
step(tf.ones([8, 8]))
tf.profiler.experimental.start(logdir)
step(tf.ones([8, 8]))
tf.profiler.experimental.stop()
"""


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory) -> str:
    """A log directory holding one profile tf.profiler.experimental wrote (in a fresh process)."""
    logdir = str(tmp_path_factory.mktemp("tf-profile"))
    run_py(WRITE_PROFILE.format(logdir=logdir))
    return logdir


def test_read_profile_leaves_tensorflow_unimported(profile_dir):
    proc = run_py(
        f"""
        import json, sys
        from tfdevices.verify import read_profile
        report = read_profile({profile_dir!r})
        print(json.dumps({{"tf": "tensorflow" in sys.modules, "types": sorted({{op.type for op in report.ops}}),
                          "devices": list(report.devices)}}))
        """
    )
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["tf"] is False
    assert "CPU:0" in seen["devices"] and any("MatMul" in t for t in seen["types"]), seen


def test_tfdevices_placement_on_a_profile_leaves_tensorflow_unimported(profile_dir):
    proc = run_py(
        f"""
        import sys
        from tfdevices.cli import main
        status = main(["placement", {profile_dir!r}])
        print("STATUS", status, "tensorflow" in sys.modules)
        """
    )
    assert "\nCPU:0 " in proc.stdout, proc.stdout
    assert proc.stdout.splitlines()[-1] == "STATUS 0 False", proc.stdout[-500:]


def test_a_profile_read_before_tensorflow_is_imported_and_one_written_after_both_read(profile_dir, tmp_path):
    """The project's schema lives in a descriptor pool of its own: TensorFlow's xplane_pb2 loads beside it."""
    proc = run_py(
        f"""
        import sys
        from tfdevices.verify import read_profile
        from tfdevices.verify.xplane import xplane_module
        before = read_profile({profile_dir!r})
        assert "tensorflow" not in sys.modules
        import tensorflow as tf
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
        step = tf.function(lambda x: tf.reduce_sum(tf.matmul(x, x) * 2.0))
        step(tf.ones([8, 8]))
        tf.profiler.experimental.start({str(tmp_path)!r})
        step(tf.ones([8, 8]))
        tf.profiler.experimental.stop()
        after = read_profile({str(tmp_path)!r})
        apart = xplane_pb2.XSpace is not xplane_module().XSpace
        print("OPS", sorted(before.op_counts) == sorted(after.op_counts), apart)
        """
    )
    assert proc.stdout.splitlines()[-1] == "OPS True True", proc.stdout[-500:] + proc.stderr[-2000:]
