"""Reading without TensorFlow: profiles, ``tfdevices placement`` and the Placement tab through a real TensorBoard.

Every leg runs these; ``make test-no-tf`` runs them where neither TensorFlow nor Keras is
installed (docs/architecture.rst, rule 9: a laptop, a TensorBoard-only host). Each check also says that
TensorFlow was not imported. The profiles are real (``tests/data/profiles``): one TensorFlow
2.21 wrote on a CPU, and JAX's XLA on an NVIDIA H200 (the GPU runtime and CUPTI tracer
TensorFlow's ``jit_compile=True`` uses). The stored placement is written with TensorBoard's
own event writer, as TensorFlow's ``tf.summary.write`` would.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse

import pytest

from tests.helpers import REPO, run_cli, run_py
from tests.tensorboard.browser import Browser, find_chromium
from tests.tensorboard.conftest import get_json, tensorboard
from tests.tensorboard.test_browser import FRAME, artifacts_dir

pytestmark = pytest.mark.xdist_group("no_tf_tab")

PROFILES = os.path.join(REPO, "tests", "data", "profiles")
SESSION = "2026_11_26_09_00_00"


def _stored_placement(logdir: str) -> str:
    """A run holding a placement summary (the CPU profile's report), written without TensorFlow."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from tfdevices.tensorboard.metadata import summary_metadata
    from tfdevices.verify import read_profile

    text = read_profile(os.path.join(PROFILES, "tf_cpu_function.xplane.pb")).to_json()
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode()])
    tensor.tensor_shape.SetInParent()
    value = summary_pb2.Summary.Value(tag="placement/json", metadata=summary_metadata(), tensor=tensor)
    writer = EventFileWriter(logdir)
    writer.add_event(event_pb2.Event(wall_time=1.0, step=3, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    return text


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> str:
    """``cpu`` and ``h200``: profiles as Keras' TensorBoard callback lays them out; ``stored``: a placement summary."""
    root = tmp_path_factory.mktemp("no-tf") / "logs"
    for run, name in (("cpu", "tf_cpu_function"), ("h200", "h200_jax_train_step")):
        session = root / run / "plugins" / "profile" / SESSION
        session.mkdir(parents=True)
        shutil.copy(os.path.join(PROFILES, f"{name}.xplane.pb"), session / "vm.xplane.pb")
    _stored_placement(str(root / "stored"))
    return str(root)


@pytest.fixture(scope="module")
def server(logs):
    with tensorboard(logs, expect_run="stored", expect_placement={"stored": [3]}) as url:
        yield url


def _view(url: str, run: str) -> dict:
    runs = {r["run"]: r for r in get_json(f"{url}/data/plugin/placement/runs")["runs"]}
    query = urllib.parse.urlencode({"run": run, "tag": runs[run]["tag"]})
    return get_json(f"{url}/data/plugin/placement/view?{query}")


def test_the_tab_serves_a_gpu_xla_profile_and_a_cpu_profile(server):
    runs = {r["run"]: (r["tag"], r.get("kind")) for r in get_json(f"{server}/data/plugin/placement/runs")["runs"]}
    assert runs["h200"] == (f"profile/{SESSION}", "profile") and runs["cpu"] == (f"profile/{SESSION}", "profile")
    gpu = _view(server, "h200")
    assert [d["name"] for d in gpu["devices"]] == ["CPU:0", "GPU:0"]  # the host end of the copies, and the GPU
    assert any("XLA kernel run(s) on GPU:0" in note for note in gpu["summary"]["notes"]), gpu["summary"]["notes"]
    cpu = _view(server, "cpu")
    assert [d["name"] for d in cpu["devices"]] == ["CPU:0"] and cpu["summary"]["timed"]


def test_the_tab_serves_a_stored_placement(server, logs):
    from tfdevices.verify import read_profile

    view = _view(server, "stored")
    expected = read_profile(os.path.join(PROFILES, "tf_cpu_function.xplane.pb")).op_counts
    assert {d["name"]: d["ops"] for d in view["devices"]} == expected


def test_reading_leaves_tensorflow_unimported(logs):
    proc = run_py(
        f"""
        import json, os, sys
        from tfdevices.tensorboard.writer import load_placement, read_placement
        from tfdevices.verify import read_profile
        gpu = read_profile(os.path.join({logs!r}, "h200"))
        stored = read_placement(os.path.join({logs!r}, "stored"))
        cpu = load_placement(os.path.join({logs!r}, "cpu"))
        print(json.dumps({{"tf": "tensorflow" in sys.modules, "keras": "keras" in sys.modules,
                          "gpu": gpu.kernel_counts, "stored": stored.op_counts, "cpu": cpu.op_counts}}))
        """
    )
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["tf"] is False and seen["keras"] is False, seen
    assert seen["gpu"] == {"GPU:0": 59} and seen["stored"] == seen["cpu"] and seen["cpu"]["CPU:0"] > 0, seen


@pytest.mark.parametrize("run", ["h200", "stored", "cpu"])
def test_tfdevices_placement_reads_profiles_and_log_directories(logs, run):
    proc = run_cli("placement", os.path.join(logs, run))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\ndevice  ops  " in proc.stdout and "needs TensorFlow" not in proc.stdout + proc.stderr
    if run == "h200":
        assert "GPU busy (device clock): GPU:0:" in proc.stdout and "\nGPU:0 " in proc.stdout, proc.stdout


def test_the_tab_shows_the_gpu_profile_in_a_browser(server, tmp_path):
    executable = find_chromium()
    if executable is None:
        from tests.helpers import unavailable

        unavailable("Chromium is not installed (Debian: apt-get install chromium)")
    with Browser(executable, width=1400, height=1900) as browser:
        browser.goto(f"{server}/#placement")
        browser.wait_for(_in_frame("!!doc.getElementById('run')"))
        browser.evaluate(
            _in_frame("""(() => { const s = doc.getElementById('run');
            s.value = [...s.options].find((o) => o.textContent.startsWith('h200')).value;
            s.dispatchEvent(new Event('change')); return true; })()""")
        )
        devices = browser.wait_for(
            _in_frame(
                "[...doc.querySelectorAll('.device-name')].map((e) => e.textContent).includes('GPU:0') && "
                "[...doc.querySelectorAll('.device-name')].map((e) => e.textContent)"
            )
        )
        assert devices == ["CPU:0", "GPU:0"]
        shot = browser.screenshot(str(tmp_path / "placement_gpu_profile_without_tf.png"))
    assert os.path.getsize(shutil.copy(shot, os.path.join(artifacts_dir(), "placement_gpu_profile_without_tf.png")))


def _in_frame(expression: str) -> str:
    return f"(() => {{ const doc = {FRAME}; if (!doc) return null; return ({expression}); }})()"
