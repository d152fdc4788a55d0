"""The lazy TensorFlow import: quiet by default, and nothing tfdevices does inside a traced function can
log the environment."""

from __future__ import annotations

import ast
import os
import pathlib
import secrets
import subprocess
import sys
import textwrap

import pytest

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
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=subprocess_env({"TFDEVICES_PROBE": probe}),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[2.]" in proc.stdout
    assert probe not in proc.stdout + proc.stderr
    assert "AutoGraph could not transform" not in proc.stderr


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=subprocess_env(env),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


def test_tensorflow_start_up_lines_are_dropped_when_the_level_hides_info():
    proc = _python(
        """
        import logging
        from tfdevices.mends.tf_import import import_tf
        from tfdevices.core.devices import logical_devices

        tf = import_tf()
        logical_devices()
        tf.get_logger().info("an INFO line of TensorFlow")
        print(logging.getLogger("tensorflow").level)
    """,
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(30)  # WARNING
    assert "before absl::InitializeLog" not in proc.stderr
    assert not [line for line in proc.stderr.splitlines() if line.startswith("I0000")], proc.stderr
    assert "an INFO line of TensorFlow" not in proc.stderr


def test_a_level_chosen_for_tensorflow_logs_is_kept():
    proc = _python(
        """
        import logging
        logging.getLogger("tensorflow").setLevel(logging.INFO)
        from tfdevices.mends.tf_import import import_tf

        import_tf()
        print(logging.getLogger("tensorflow").level)
    """,
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(20)  # INFO, as the program asked


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.path.exists("/proc/driver/nvidia"),
    reason="hardware: the case of a Linux machine with no NVIDIA driver loaded",
)
def test_cudas_no_driver_complaint_is_dropped_where_there_is_no_driver():
    code = """
        import tensorflow as tf  # through import_tf, or straight
        tf.config.list_physical_devices("GPU")
        print(tf.constant(1) + 1)
    """
    straight = _python(code, TF_CPP_MIN_LOG_LEVEL="2")
    quiet = _python(
        "from tfdevices.mends.tf_import import import_tf\n"
        + textwrap.dedent(code).replace("import tensorflow as tf", "tf = import_tf()"),
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    assert straight.returncode == quiet.returncode == 0, quiet.stderr
    # what TensorFlow prints on its own here: CUDA's complaint (TF 2.17 on), or TF 2.16's three
    # "Unable to register cuFFT/cuDNN/cuBLAS factory" lines (it says nothing of cuInit)
    noise = ("failed call to cuInit", "Unable to register cuFFT factory", "Unable to register cuDNN factory")
    assert any(line in straight.stderr for line in noise), straight.stderr
    assert not any(line in quiet.stderr for line in noise), quiet.stderr
    assert "tf.Tensor(2" in quiet.stdout


#: Where ``import tensorflow`` (the package itself) may appear: :mod:`tfdevices.core.tf_door` alone.
_IMPORTS_TENSORFLOW = {"core/tf_door.py"}


def _imports_of_tensorflow(source: str) -> list[int]:
    """Lines of ``source`` that import the ``tensorflow`` package itself, outside ``if TYPE_CHECKING:``."""
    tree = ast.parse(source)
    hints = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Import) and id(node) not in hints and any(a.name == "tensorflow" for a in node.names)
    ]


def test_the_door_is_the_one_import_of_tensorflow_as_its_docstring_says():
    import tfdevices

    package = pathlib.Path(tfdevices.__file__).parent
    found = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if _imports_of_tensorflow(path.read_text())
    }
    assert found <= _IMPORTS_TENSORFLOW and "core/tf_door.py" in found
    assert _imports_of_tensorflow("if TYPE_CHECKING:\n    import tensorflow as tf\nimport tensorflow") == [3]
