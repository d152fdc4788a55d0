"""The lazy TensorFlow import: nothing tfdevices does inside a traced function can log the environment."""

from __future__ import annotations

import secrets
import subprocess
import sys
import textwrap

from tests.helpers import REPO, subprocess_env

_SCRIPT = """
import tensorflow as tf
from tfdevices import runtime
from tfdevices.core.devices import logical_devices

logical_devices()


@tf.function
def step(x):
    logical_devices()
    runtime.quiet_tensorflow_logs()  # reads and writes os.environ: AutoGraph must leave it alone
    return x * 2.0


print(step(tf.ones([1])).numpy())
"""


def test_a_traced_function_calling_tfdevices_never_prints_the_environment(tmp_path):
    probe = f"probe-{secrets.token_hex(8)}"
    script = tmp_path / "traced.py"  # a file: AutoGraph converts only functions whose source it can read
    script.write_text(textwrap.dedent(_SCRIPT))
    proc = subprocess.run([sys.executable, str(script)], env=subprocess_env({"TFDEVICES_PROBE": probe}),
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "[2.]" in proc.stdout
    assert probe not in proc.stdout + proc.stderr
    assert "AutoGraph could not transform" not in proc.stderr
