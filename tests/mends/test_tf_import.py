"""The mends of TensorFlow's import (quiet_import, autograph_skip) and of a capture (capture_calls): each
changes what it declares when on, leaves TensorFlow as it is when off, and reaches every part that
imports TensorFlow."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest

import tfdevices
from tests.helpers import REPO, run_py, subprocess_env, unavailable
from tfdevices.mends.base import MENDS_ENV

PACKAGE = pathlib.Path(tfdevices.__file__).parent

_IMPORT = """
    import json
    from tfdevices import mends
    from tfdevices.mends.tf_import import import_tf
    from tensorflow.python.autograph.core import config  # imports TensorFlow straight: not quieted

    import_tf()
    states = {s.name: s.state for s in mends.applied()}
    first = config.CONVERSION_RULES[0]
    print(json.dumps({"first": getattr(first, "_prefix", None), "state": states["autograph_skip"]}))
"""


@pytest.mark.parametrize("off", [False, True])
def test_autograph_skip_puts_tfdevices_first_in_the_rules_only_when_on(off: bool) -> None:
    out = json.loads(run_py(_IMPORT, env={MENDS_ENV: "autograph_skip"} if off else {}).stdout.splitlines()[-1])
    assert out["state"] == ("off" if off else "applied")
    assert (out["first"] == "tfdevices") is not off


def test_autograph_skip_is_undone() -> None:
    out = run_py("""
        from tfdevices.mends.tf_import import AUTOGRAPH, import_tf
        from tensorflow.python.autograph.core import config

        import_tf()
        before = len(config.CONVERSION_RULES)
        AUTOGRAPH.undo()
        print(before - len(config.CONVERSION_RULES), AUTOGRAPH.status().state)
    """)
    assert out.stdout.split()[-2:] == ["1", "undone"]


_QUIET = """
    from tfdevices import mends
    from tfdevices.mends.tf_import import import_tf

    import_tf()
    print({s.name: s.state for s in mends.applied()}["quiet_import"])
"""


def _start_up(line: str) -> bool:
    """A start-up line the mend drops: an INFO line, absl's banner, TensorFlow 2.16's factories registered twice."""
    return line.startswith("I0000") or "InitializeLog" in line or "Unable to register cu" in line


@pytest.mark.parametrize("off", [False, True])
def test_quiet_import_drops_tensorflows_start_up_lines_only_when_on(off: bool) -> None:
    # oneDNN on: its "custom operations are on" line is a start-up line on every x86 build; a CPU-only
    # build (tf-nightly's) with oneDNN off prints none, and CI runs the suite with oneDNN off
    loud = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "1"}
    proc = run_py(_QUIET, env={**loud, **({MENDS_ENV: "quiet_import"} if off else {})})
    assert proc.stdout.split()[-1] == ("off" if off else "applied")
    straight = run_py("import tensorflow", env=loud)
    early = [line for line in straight.stderr.splitlines() if _start_up(line)]
    if not early:
        unavailable("this TensorFlow prints no start-up line here: nothing for the mend to drop")
    shown = [line for line in proc.stderr.splitlines() if _start_up(line)]
    assert bool(shown) is off, proc.stderr


def test_quiet_import_is_not_needed_where_the_level_shows_info() -> None:
    assert run_py(_QUIET, env={"TF_CPP_MIN_LOG_LEVEL": "0"}).stdout.split()[-1] == "not_needed"


# the one part of tfdevices that imports TensorFlow below the mends floor: core (the door itself,
# and core.devices, whose callers all stand above it); and discover(source="tensorflow"), an
# explicit TensorFlow listing on the GPU listing's path, which must not import the mends (60 ms)
EXEMPT = {"tfdevices.core.tf_door", "tfdevices.core.devices", "tfdevices.gpus.discovery"}


def _modules_importing_tensorflow() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if any(
            (isinstance(n, ast.Name) and n.id == "import_tf")
            or (isinstance(n, ast.Attribute) and n.attr == "import_tf")
            for n in ast.walk(tree)
        ):
            parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_every_part_that_imports_tensorflow_goes_through_the_mended_door() -> None:
    modules = [m for m in _modules_importing_tensorflow() if m not in EXEMPT]
    assert len(modules) > 15
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "from tfdevices.core import tf_door\n"
        "print(tf_door._hooks['around'] is not None and tf_door._hooks['after'] is not None)\n"
    )
    unmended = []
    for module in modules:  # each alone, in a fresh interpreter: nothing else imported the mends first
        proc = subprocess.run(
            [sys.executable, "-c", code, module],
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert proc.returncode == 0, proc.stderr
        if proc.stdout.strip() != "True":
            unmended.append(module)
    assert unmended == []


_CAPTURE = """
    import json
    import tensorflow as tf
    import tfdevices
    from tensorflow.python.eager.polymorphic_function import atomic_function

    original = atomic_function.AtomicFunction.call_flat

    @tf.function
    def step(x):
        return tf.matmul(x, x) + 1.0

    x = tf.ones([4, 4])
    step(x)
    seen = []
    with tfdevices.verify.capturing() as cap:
        seen.append(atomic_function.AtomicFunction.call_flat is not original)
        step(x)
    state = {s.name: s.state for s in tfdevices.mends.applied()}["capture_calls"]
    ops = sorted({op.type for op in cap.report.ops})
    print(json.dumps({"during": seen[0], "after": atomic_function.AtomicFunction.call_flat is original,
                      "state": state, "ops": ops}))
"""


@pytest.mark.parametrize("off", [False, True])
def test_capture_calls_is_in_place_during_a_capture_only_and_only_when_on(off: bool) -> None:
    out = json.loads(run_py(_CAPTURE, env={MENDS_ENV: "capture_calls"} if off else {}).stdout.splitlines()[-1])
    assert out["during"] is not off and out["after"] is True
    assert out["state"] == ("off" if off else "undone")
    assert out["ops"], out  # a capture without the mend still reads what ran
