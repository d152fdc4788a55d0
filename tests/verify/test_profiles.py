"""read_profile and ``tfdevices placement`` on profiles: Keras' own on this CPU, GPU shapes, bad files.

The Keras test depends on the kernels TensorFlow runs (oneDNN fuses a Dense layer into one
kernel): run it under both TF_ENABLE_ONEDNN_OPTS=1 and =0.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.helpers import run_cli
from tests.keras_models import fit_with_profile
from tests.verify.test_gpu_time import MATMUL, _host_step, _streams
from tests.xspaces import Space, gpu_kernel, host_call
from tfdevices.core.errors import InputError
from tfdevices.verify import PlacementReport, read_profile
from tfdevices.verify.device import parse_annotation
from tfdevices.verify.profiles import find_profiles


def _profile_dir(tmp_path, run: str = "train", session: str = "2026_11_24_10_00_00") -> str:
    path = tmp_path / run / "plugins" / "profile" / session
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _gpu_space() -> Space:
    space = Space()
    _host_step(space)
    _streams(space)
    return space


# ----------------------------------------------------------------------------- a real Keras profile


@pytest.fixture(scope="module")
def keras_logdir(tf4, tmp_path_factory):
    """A Keras 3 fit with keras.callbacks.TensorBoard(profile_batch=(2, 3)): the profile users already have."""
    import keras

    return fit_with_profile(keras, str(tmp_path_factory.mktemp("keras-profile")))


def _model_ops(report: PlacementReport) -> dict[str, set[str]]:
    """Ops of the two Dense layers (forward and gradient), by layer, with the model op types they ran."""
    found: dict[str, set[str]] = {"hidden": set(), "out": set()}
    for op in report.ops:
        for layer in found:
            if f"/{layer}" in op.name:
                found[layer].add(op.type)
    return found


def test_read_profile_finds_the_model_ops_of_a_keras_tensorboard_profile(keras_logdir):
    (profile,) = find_profiles(keras_logdir)
    # Keras writes LOGDIR/train/plugins/profile; Keras 3.3 LOGDIR/plugins/profile (the run ".")
    assert profile.run in ("train", ".") and profile.path.endswith(".xplane.pb"), profile
    report = read_profile(keras_logdir)
    layers = _model_ops(report)
    assert "MatMul" in layers["hidden"] and "MatMul" in layers["out"], layers
    assert set(report.devices) == {"CPU:0"}
    assert all(op.requested == "" and op.start_us is not None and op.duration_us is not None for op in report.ops)
    assert report.busy_us["CPU:0"] > 0
    assert not any(op.name.startswith("StatefulPartitionedCall/") for op in report.ops)
    assert any("read from a profile" in note for note in report.notes)
    assert read_profile(profile.path).op_counts == report.op_counts  # the file itself reads the same


def test_tfdevices_placement_reads_the_keras_profile(keras_logdir, tmp_path):
    proc = run_cli("placement", keras_logdir)
    assert proc.returncode == 0, proc.stderr
    assert "on 1 device(s) (CPU:0:" in proc.stdout and "\nCPU:0 " in proc.stdout
    assert "I0000" not in proc.stderr and "Traceback" not in proc.stderr
    data = json.loads(run_cli("placement", keras_logdir, "--json").stdout)
    assert any("/hidden" in op["name"] and op["type"] == "MatMul" for op in data["ops"])
    trace = tmp_path / "profile.trace.json"
    assert run_cli("placement", keras_logdir, "--trace", str(trace)).returncode == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert any("/hidden" in e.get("name", "") for e in events)


# ----------------------------------------------------------------------------- GPU profiles and several hosts


def test_a_gpu_profile_reads_with_gpu_time_and_its_steps(tmp_path):
    space = _gpu_space()
    host = space.plane("/host:CPU")
    host.event("python", "train", 30, 200, step_num=7, _r=1)
    path = space.write(os.path.join(_profile_dir(tmp_path), "gpu-node.xplane.pb"))
    report = read_profile(tmp_path)
    (matmul,) = [op for op in report.ops if op.name == MATMUL]
    assert (matmul.device, matmul.duration_us, matmul.kernels) == (
        "GPU:0",
        24.0,
        ("volta_sgemm_128x64_nn", "splitKreduce_kernel"),
    )
    assert report.busy_us["GPU:0"] == 56.0
    assert report.steps == (7,)
    assert "step(s) covered: 7" in report.summary()
    assert read_profile(path).ops == report.ops


def test_ops_seen_only_on_the_gpu_are_reported_there(tmp_path):
    space = Space()
    host_call(space, "__inference_f_1", 40, 60, 7, [("host/Add", "AddV2", 45, 2)])
    gpu_kernel(space, 0, 13, "sgemm", 100, 20, "MatMul:MatMul")  # an eager op: no host kernel event
    report = read_profile(space.write(str(tmp_path / "h.xplane.pb")))
    assert {(op.name, op.device, op.duration_us, op.launch_us) for op in report.ops} == {
        ("host/Add", "CPU:0", 2.0, None),
        ("MatMul", "GPU:0", 20.0, None),
    }


def test_several_hosts_are_one_report_with_a_prefix_per_host(tmp_path):
    session = _profile_dir(tmp_path)
    _gpu_space().write(os.path.join(session, "node-a.xplane.pb"))
    _gpu_space().write(os.path.join(session, "node-b.xplane.pb"))
    report = read_profile(tmp_path)
    assert {op.device for op in report.ops if op.name == MATMUL} == {"host:0/GPU:0", "host:1/GPU:0"}
    assert report.busy_us["host:1/GPU:0"] == 56.0
    assert any("host:0 = 'node-a'" in note and "host:1 = 'node-b'" in note for note in report.notes)
    assert len(report.ops_on("host:1/GPU:*")) == len(report.ops_on("host:0/GPU:*")) > 0


def test_the_newest_session_is_read_and_the_others_are_named(tmp_path):
    _gpu_space().write(os.path.join(_profile_dir(tmp_path, session="2026_01_01_00_00_00"), "old.xplane.pb"))
    space = Space()
    host_call(space, "__inference_f_1", 40, 60, 7, [("newest/Add", "AddV2", 45, 2)])
    space.write(os.path.join(_profile_dir(tmp_path, session="2026_02_01_00_00_00"), "new.xplane.pb"))
    report = read_profile(tmp_path)
    assert [op.name for op in report.ops] == ["newest/Add"]
    assert "'2026_02_01_00_00_00' of run 'train' (the newest of 2" in report.notes[0]
    assert "train/2026_01_01_00_00_00" in report.notes[0]


# ----------------------------------------------------------------------------- bad profiles: clear errors


def _tpu_only(path):
    space = Space()
    space.plane("/device:TPU:0").event("XLA Ops", "fusion.1", 0, 5)
    return space.write(path)


def _unknown_version(path):
    space = Space()
    space.plane("/host:CPU").event("python", "SomeFutureEvent", 0, 5)
    return space.write(path)


def _truncated(path):
    data = _gpu_space().bytes()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    return path


def _write(data: bytes):
    def make(path):
        with open(path, "wb") as f:
            f.write(data)
        return path

    return make


def _fifo(path):
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "make, first_words",
    [
        (_write(b""), "profile '{path}' is empty (0 bytes)"),
        (_truncated, "profile '{path}' ("),
        (_write(b"\xff" * 64), "profile '{path}' ("),
        (_tpu_only, "profile '{path}' holds no host CPU or GPU plane (a TPU profile); its planes: '/device:TPU:0'"),
        (_unknown_version, "profile '{path}' holds 1 host event(s) and 0 GPU event(s), but none"),
        (_fifo, "profile '{path}' is not a regular file"),
    ],
    ids=["empty", "truncated", "corrupt", "tpu-only", "unknown-version", "fifo"],
)
def test_bad_profiles_are_clear_errors(tmp_path, make, first_words):
    path = make(str(tmp_path / "host.xplane.pb"))
    with pytest.raises(InputError) as err:
        read_profile(path)
    assert str(err.value).startswith(first_words.format(path=path)), str(err.value)
    assert "HINT:" in str(err.value)


def test_a_profile_larger_than_the_bound_is_refused_before_it_is_read(tmp_path):
    path = _gpu_space().write(str(tmp_path / "big.xplane.pb"))
    with pytest.raises(InputError, match=r"more than the 100 B read at most\. HINT: .*max_bytes="):
        read_profile(path, max_bytes=100)
    assert read_profile(path, max_bytes=os.path.getsize(path)).ops


@pytest.mark.parametrize("bad", [0, -1, True, "1GiB"])
def test_max_bytes_is_validated(tmp_path, bad):
    with pytest.raises(InputError, match=r"^read_profile\(max_bytes="):
        read_profile(tmp_path, max_bytes=bad)


def test_missing_paths_and_directories_without_profiles_say_where_profiles_live(tmp_path):
    with pytest.raises(InputError, match=r"does not exist\. HINT: .*plugins/profile"):
        read_profile(tmp_path / "nope")
    (tmp_path / "train").mkdir()
    with pytest.raises(InputError, match=r"holds no profile \(\.xplane\.pb file\)"):
        read_profile(tmp_path)


def test_the_cli_prints_the_error_not_a_traceback(tmp_path):
    path = _tpu_only(str(tmp_path / "tpu.xplane.pb"))
    proc = run_cli("placement", path)
    assert proc.returncode != 0
    assert "holds no host CPU or GPU plane" in proc.stderr and "Traceback" not in proc.stderr


def test_a_placement_directory_with_profiles_prefers_the_placement_unless_asked(tf4, tmp_path):
    from tfdevices.tensorboard.writer import load_placement, write_placement
    from tfdevices.verify import capture

    write_placement(capture(lambda: tf4.reduce_sum(tf4.ones([3]))), str(tmp_path))
    space = Space()
    host_call(space, "__inference_f_1", 40, 60, 7, [("from_profile/Add", "AddV2", 45, 2)])
    space.write(os.path.join(_profile_dir(tmp_path), "h.xplane.pb"))
    assert "from_profile/Add" not in {op.name for op in load_placement(tmp_path).ops}
    assert [op.name for op in load_placement(tmp_path, profile=True).ops] == ["from_profile/Add"]


# ----------------------------------------------------------------------------- fuzzing the parsers


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2048))
def test_any_bytes_are_a_report_or_a_clear_error(tmp_path, data):
    path = str(tmp_path / "fuzz.xplane.pb")
    with open(path, "wb") as f:
        f.write(data)
    try:
        report = read_profile(path)
    except InputError as err:
        assert "HINT:" in str(err)
    else:
        assert isinstance(report, PlacementReport)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_any_annotation_parses_to_an_op_or_nothing(text):
    op, op_type = parse_annotation(text)
    assert isinstance(op, str) and isinstance(op_type, str)
    assert bool(op) == bool(op_type)


def test_find_profiles_stops_at_its_depth_bound(tmp_path):
    deep = tmp_path.joinpath(*[f"d{i}" for i in range(12)])
    deep.mkdir(parents=True)
    shutil.copyfile(_gpu_space().write(str(tmp_path / "top.xplane.pb")), deep / "deep.xplane.pb")
    assert [p.host for p in find_profiles(tmp_path)] == ["top"]
