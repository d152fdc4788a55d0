"""tfdevices doctor: one screen for a bug report, with no environment value it does not read and no secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, run_cli, run_py, subprocess_env, unavailable
from tfdevices.doctor import Report, diagnose

NODE = os.path.join(REPO, "tests", "data", "node-8gpu.json")  # a saved listing of eight GPUs

SECTIONS = ["python", "tensorflow", "gpus", "cuda", "job", "mends", "launch"]
FAKE_NVML = os.path.join(REPO, "tests", "pynvml_fake")  # `import pynvml` answers as the real H200 (tests/fake_nvml.py)
MENDS = ["runtime_start", "keras_fit", "exit_barrier", "fork_sockets", "loopback"]


def test_doctor_prints_every_section_and_every_mend_with_tensorflow_loaded() -> None:
    proc = run_cli("doctor", env={"TFDEVICES_MENDS": "keras_fit"})
    assert proc.returncode == 0, proc.stderr
    heads = [line[:-1] for line in proc.stdout.splitlines() if line and not line.startswith(" ")]
    assert heads == SECTIONS
    rows = {line.split()[0]: line.split(None, 1)[1] for line in proc.stdout.splitlines() if line.startswith("  ")}
    assert rows["TFDEVICES_MENDS"] == "off: keras_fit" and rows["keras_fit"] == "off"
    assert rows["runtime_start"].startswith("applies here: ") and rows["exit_barrier"].startswith("applies here: ")
    assert rows["tensorflow"][0].isdigit() and "Traceback" not in proc.stderr


def test_doctor_json_without_tensorflow_keeps_it_out_of_the_process() -> None:
    out = run_py("""
        import json, sys
        from tfdevices.doctor import diagnose
        report = diagnose(tensorflow=False)
        print(json.dumps({"report": report.to_dict(), "tf": "tensorflow" in sys.modules}))
    """).stdout.splitlines()[-1]
    got = json.loads(out)
    assert got["tf"] is False and list(got["report"]) == SECTIONS
    assert [m for m in MENDS if m in got["report"]["mends"]] == MENDS
    assert all(got["report"]["mends"][m].startswith("not_reached") for m in MENDS)


def test_doctor_shows_no_secret_and_no_environment_value_it_does_not_read() -> None:
    secret = "s3cr3t-token-7f1e"
    proc = run_cli(
        "doctor",
        "--json",
        "--no-tensorflow",
        env={
            "TFDEVICES_RDZV_TOKEN": secret,
            "AWS_SECRET_ACCESS_KEY": "AKIA-not-for-print",
            "TFDEVICES_EXIT_WAIT": "45",
        },
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["job"]["TFDEVICES_RDZV_TOKEN"] == "set" and report["job"]["TFDEVICES_EXIT_WAIT"] == "45 s"
    assert secret not in proc.stdout + proc.stderr and "AKIA" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "env, section, label, words",
    [
        ({"TFDEVICES_MENDS": "kerasfit"}, "mends", "TFDEVICES_MENDS", "TFDEVICES_MENDS: entry 1 names no mend"),
        ({"TFDEVICES_EXIT_WAIT": "-1"}, "job", "TFDEVICES_EXIT_WAIT", "error: TFDEVICES_EXIT_WAIT is not a number"),
        ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "tensorflow", "oneDNN", "off (TF_ENABLE_ONEDNN_OPTS says off)"),
        ({"TF_USE_LEGACY_KERAS": "1"}, "tensorflow", "tf.keras is", "tf_keras "),
        (
            {"CUDA_VISIBLE_DEVICES": "\u0663"},
            "gpus",
            "error",
            "entry 1 of CUDA_VISIBLE_DEVICES is neither a GPU index nor",
        ),
        ({"TFDEVICES_STALL_TIMEOUT": "90"}, "job", "stall timeout", "stop the job 90 s past the window"),
        ({"TFDEVICES_STALL_WINDOW": "x"}, "job", "stalls", "error: TFDEVICES_STALL_WINDOW is not a number"),
        ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, "job", "progress records", "/tmp/tfdevices-progress/slurm-7.0"),
        ({}, "mends", "TFDEVICES_MENDS", "unset: no mend is off"),
        ({}, "job", "rank", "0 of 1, local rank 0 of 1: no launcher variables are set: a single process"),
        (
            {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"},
            "job",
            "rank",
            "1 of 2, local rank 1 of an unknown number on this machine: RANK/WORLD_SIZE are set (a torchrun",
        ),
        ({"RANK": "1", "WORLD_SIZE": "2"}, "job", "note", "LOCAL_RANK is not set: local rank 0 assumed"),
        (
            {
                "SLURM_PROCID": "1",
                "SLURM_LOCALID": "1",
                "SLURM_STEP_NUM_TASKS": "4",
                "SLURM_NODEID": "0",
                "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
                "SLURM_STEP_NODELIST": "n[1-2]",
                "SLURM_STEP_ID": "0",
            },
            "job",
            "rank",
            "1 of 4, local rank 1 of 2: srun started this process as task 1 of its job step",
        ),
        (
            {"TFDEVICES_INVENTORY": NODE},
            "gpus",
            "source",
            "nvml (driver 550.54.15): the saved listing TFDEVICES_INVENTORY",
        ),
        ({"TFDEVICES_INVENTORY": NODE}, "gpus", "GPU 5", "V100-SXM2-32GB, CUDA 7, 2.0 GiB free of 32.0 GiB"),
    ],
)
def test_bad_or_telling_settings_are_said_in_their_row(env, section, label, words) -> None:
    report = diagnose(env=env, tensorflow=False).to_dict()
    assert words in report[section][label]


def test_report_text_aligns_rows_under_their_section() -> None:
    text = Report((("a", (("x", "1"), ("longer", "2"))), ("b", (("y", "3"),)))).text()
    assert text == "a:\n  x       1\n  longer  2\n\nb:\n  y       3"


# --------------------------------------------------------------------------- every line, in environments built here


def site_without(tmp_path, *import_names: str) -> str:
    """This interpreter's site-packages as links, less the named import names and their distributions' metadata."""
    import importlib.metadata
    import pathlib
    import sysconfig

    def norm(name: str) -> str:
        return name.lower().replace("_", "-").replace(".", "-")

    dropped = {norm(d) for n in import_names for d in importlib.metadata.packages_distributions().get(n, [])}
    site, out = pathlib.Path(sysconfig.get_paths()["purelib"]), tmp_path / "site"
    out.mkdir()
    for entry in site.iterdir():
        meta = entry.name.endswith((".dist-info", ".egg-info"))
        if entry.name in import_names or (meta and norm(entry.name.rsplit(".", 1)[0].rsplit("-", 1)[0]) in dropped):
            continue
        (out / entry.name).symlink_to(entry)
    return str(out)


def doctor_in(site: str, env: dict[str, str] | None = None) -> tuple[dict[str, dict[str, str]], bool]:
    """``tfdevices doctor --json`` in a Python whose packages are ``site`` only (``-S``: no site-packages of its own),
    and whether TensorFlow was imported there."""
    code = (
        "import json, sys; from tfdevices.doctor import diagnose; "
        "print(json.dumps([diagnose().to_dict(), 'tensorflow' in sys.modules]))"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env=subprocess_env({"PYTHONPATH": os.pathsep.join([REPO, site]), **(env or {})}, drop=("TFDEVICES_MENDS",)),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    return report, loaded


#: What every mend's line says where its detection runs with TensorFlow but without the Keras named.
_TF_MENDS = {
    "runtime_start": "applies here: Context.ensure_initialized exists and TensorFlow's runtime has not started yet",
    "exit_barrier": "applies here: TensorFlow's Context.wait_at_barrier exists",
    "fork_sockets": "applies here: os.register_at_fork exists",
    "loopback": "not_needed: no listen address asked (TFDEVICES_LISTEN unset",
    "step_progress": "applies here: polymorphic_function.Function.__call__ exists",
    "collective_wait": "applies here: cross_device_utils.CollectiveReplicaLauncher.all_reduce and ._all_gather exist",
    "stack_dumps": "not_needed: no stack file was named",
    "at_exit": "applies here: always",
    "quiet_import": "applied: ",
    "autograph_skip": "applied: AutoGraph calls tfdevices functions as they are",
    "capture_calls": "applies here: AtomicFunction.call_flat and func_graph.func_graph_from_py_func exist",
}
_NO_TF = "not_needed: TensorFlow is not installed here: nothing of it to mend"


def _read_every_line(report: dict[str, dict[str, str]], keras: dict[str, str], mends: dict[str, str]) -> None:
    rows = report["tensorflow"]
    for label, words in keras.items():
        assert rows[label].startswith(words), (label, rows[label])
    got = {name: line for name, line in report["mends"].items() if name != "TFDEVICES_MENDS"}
    assert set(got) == set(mends), sorted(set(got) ^ set(mends))
    for name, words in mends.items():
        assert got[name].startswith(words), (name, got[name])


@pytest.mark.slow
def test_doctor_without_keras_3_says_tf_keras_and_no_fit_to_mend(tmp_path) -> None:
    from tfdevices.mends.base import installed

    if not installed("tf_keras"):
        unavailable("tf_keras is not installed (every leg with TensorFlow installs it)")
    tf_keras = installed("tf_keras")[0].version
    report, loaded = doctor_in(site_without(tmp_path, "keras"))
    assert loaded
    _read_every_line(
        report,
        {
            "keras": "not installed",
            "tf_keras": tf_keras,
            "tf.keras is": f"none: Keras 3 is not installed (tf_keras {tf_keras}",
        },
        {
            **_TF_MENDS,
            "keras_fit": "not_needed: no Keras 3 here: tf_keras' fit works under MultiWorkerMirroredStrategy",
            "uneven_batch": "not_needed: no Keras 3 here: tf_keras' fit splits an uneven batch itself",
            "fit_progress": "applies here: tf_keras' CallbackList (wrapped once tf_keras is imported)",
            "fit_end": "applies here: tf_keras installed: its fit is read once imported",
        },
    )


@pytest.mark.slow
def test_doctor_without_any_keras_says_no_fit_to_mend(tmp_path) -> None:
    report, loaded = doctor_in(site_without(tmp_path, "keras", "tf_keras"), {"TF_USE_LEGACY_KERAS": "1"})
    assert loaded
    _read_every_line(
        report,
        {
            "keras": "not installed",
            "tf_keras": "not installed",
            "tf.keras is": "none: TF_USE_LEGACY_KERAS asks for tf_keras, which is not installed",
        },
        {
            **_TF_MENDS,
            "keras_fit": "not_needed: no Keras is installed here: no fit to mend",
            "uneven_batch": "not_needed: no Keras is installed here: no fit to mend",
            "fit_progress": "not_needed: neither Keras 3 nor tf_keras is installed",
            "fit_end": "not_needed: neither Keras 3 nor tf_keras is installed: no fit to wrap",
        },
    )


@pytest.mark.slow
def test_doctor_without_tensorflow_runs_every_detection_and_imports_nothing(tmp_path) -> None:
    report, loaded = doctor_in(site_without(tmp_path, "tensorflow", "keras", "tf_keras"))
    assert not loaded
    _read_every_line(
        report,
        {
            "tensorflow": "not installed (in the tfdevices clone, pip install -e",
            "keras": "not installed",
            "tf.keras is": "none: TensorFlow is",
        },
        {
            **dict.fromkeys(
                ("runtime_start", "exit_barrier", "step_progress", "collective_wait", "autograph_skip"), _NO_TF
            ),
            **dict.fromkeys(("capture_calls", "quiet_import"), _NO_TF),
            "uneven_batch": "not_needed: no Keras is installed here: no fit to mend",
            "keras_fit": "not_needed: no Keras is installed here: no fit to mend",
            "fork_sockets": _TF_MENDS["fork_sockets"],
            "loopback": _TF_MENDS["loopback"],
            "stack_dumps": _TF_MENDS["stack_dumps"],
            "at_exit": _TF_MENDS["at_exit"],
            "fit_progress": "not_needed: neither Keras 3 nor tf_keras is installed",
            "fit_end": "not_needed: neither Keras 3 nor tf_keras is installed: no fit to wrap",
        },
    )


def test_doctor_names_keras_by_what_programs_import_whatever_the_distribution() -> None:
    """keras-nightly is Keras: the row is the version of what ``import keras`` finds, and the distribution is named."""
    import keras
    import tf_keras

    from tfdevices.mends.base import installed

    report = diagnose(tensorflow=False).to_dict()["tensorflow"]
    for name, module in (("keras", keras), ("tf_keras", tf_keras)):
        (dist,) = installed(name)
        assert report[name].startswith(module.__version__), (name, report[name])
        named = dist.name.lower().replace("_", "-") not in (name, name.replace("_", "-"))
        assert report[name] == module.__version__ + (f" ({dist.name})" if named else "")


def test_doctor_says_each_mends_finding_on_the_keras_installed() -> None:
    """With TensorFlow loaded, each Keras mend's line is what its detection found in the Keras installed here."""
    from tfdevices.mends.keras_fit import CHECKED

    proc = run_cli("doctor", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    version = report["tensorflow"]["keras"].split()[0]
    note = (
        "" if CHECKED.covers(version) else f"Keras {version}: not checked against this release (checked: 3.3 to 3.15); "
    )
    assert report["mends"]["keras_fit"].startswith(
        f"applies here: {note}the defect keras-team/keras#20585 is present: "
    )
    assert report["mends"]["uneven_batch"].startswith(
        f"applies here: {note}the defect keras-team/keras#19246 is present"
    )
    assert report["mends"]["fit_end"] == "applies here: the fit of keras calls on_train_end outside any finally"


# ---------------------------------------------------------------------- the cuda section: can TensorFlow use the GPUs


def _installed_tensorflow() -> tuple[str, str, bool]:
    """The TensorFlow of this leg as its metadata and build info files say (read here as text, not through the
    checks): its distribution, its version, and whether its build info lists code for compute capability 9.0 (PTX
    only, compute_90, as 2.21; the nightly's CPU-side build info lists no capability at all)."""
    import importlib.metadata
    import importlib.util

    dists = [d for d in ("tensorflow", "tf-nightly", "tensorflow-cpu") if _version_of(d)]
    name = dists[0]
    spec = importlib.util.find_spec("tensorflow")
    assert spec is not None and spec.submodule_search_locations, "TensorFlow is not installed in this leg"
    info = os.path.join(next(iter(spec.submodule_search_locations)), "python", "platform", "build_info.py")
    with open(info, encoding="utf-8") as f:
        text = f.read()
    ptx_only = "'compute_90'" in text and "'sm_90'" not in text
    return name, importlib.metadata.version(name), ptx_only


def _version_of(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _install_fix(name: str, version: str) -> str:
    return (
        "pip install -U 'tf-nightly[and-cuda]'"
        if name == "tf-nightly"
        else f"pip install 'tensorflow[and-cuda]=={version}'"
    )


def test_doctor_cuda_names_the_driver_first_here_and_keeps_tensorflow_out() -> None:
    """This machine as it is (a CUDA build of TensorFlow, no CUDA wheels, no driver), NVML answering as the H200."""
    out = run_py(
        """
        import json, sys
        from tfdevices.doctor import cuda_report
        print(json.dumps([cuda_report().to_dict(), "tensorflow" in sys.modules]))
    """,
        env={"PYTHONPATH": os.pathsep.join([FAKE_NVML, REPO])},
    ).stdout.splitlines()[-1]
    report, loaded = json.loads(out)
    rows = report["cuda"]
    assert not loaded
    assert next(iter(rows)) == "driver", rows
    assert rows["driver"].startswith("no NVIDIA driver: no /dev/nvidia* and no /proc/driver/nvidia/version: CUDA "
                                     "cannot start, so TensorFlow lists no GPU. HINT: ")  # fmt: skip
    name, version, ptx_only = _installed_tensorflow()
    assert rows["libraries"].endswith(f"HINT: {_install_fix(name, version)}"), rows["libraries"]
    if ptx_only:  # TensorFlow 2.21: the H200's kernels are compiled from PTX at the first start
        assert rows["gpu 9.0"].startswith(
            f"GPU 0 (NVIDIA H200, compute capability 9.0): {name} {version} holds no sm_90"
        )
    else:
        assert "gpu 9.0" not in rows, rows


def test_doctor_cuda_prints_one_line_per_cause_and_no_environment_value() -> None:
    proc = run_cli(
        "doctor", "--cuda",
        env={"CUDA_VISIBLE_DEVICES": "GPU-c0ffee42", "LD_LIBRARY_PATH": "/opt/cuda-c0ffee42/lib64",
             "NVIDIA_VISIBLE_DEVICES": "void", "PYTHONPATH": os.pathsep.join([FAKE_NVML, REPO])},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    head, *rows = proc.stdout.splitlines()
    assert head == "cuda:" and all(r.startswith("  ") and " HINT: " in r for r in rows), proc.stdout
    labels = [r.split("  ")[1].strip() for r in rows]
    assert labels[:3] == ["mask", "container mask", "driver"], labels
    assert "c0ffee42" not in proc.stdout + proc.stderr


def test_doctor_json_has_the_cuda_section_with_its_causes() -> None:
    report = diagnose(env={"CUDA_VISIBLE_DEVICES": "-1"}, tensorflow=False).to_dict()
    assert list(report) == SECTIONS
    assert report["cuda"]["mask"].startswith("CUDA_VISIBLE_DEVICES hides every GPU")


def test_configure_with_a_gpu_nvml_sees_and_tensorflow_lists_none_names_the_first_cause() -> None:
    """The real TensorFlow, the fake NVML's H200: configure's error is the first cause, its fix the HINT."""
    proc = run_py(
        """
        import tfdevices
        try:
            tfdevices.configure("auto:1")
        except tfdevices.TfDevicesError as err:
            print("ERROR", err)
    """,
        env={"PYTHONPATH": os.pathsep.join([FAKE_NVML, REPO])},
    )
    error = proc.stdout.split("ERROR ", 1)[1].strip()
    assert error.startswith("1 GPU(s) selected but TensorFlow lists 0: CUDA could not use them: no NVIDIA driver: no "
                            "/dev/nvidia* and no /proc/driver/nvidia/version"), error  # fmt: skip
    assert error.endswith(
        "HINT: install the NVIDIA driver (nvidia-smi lists the GPUs), or in a container: docker run "
        "--gpus all (Kubernetes: runtimeClassName: nvidia) (every cause: tfdevices doctor --cuda)."
    )
    # a start from PTX is said before TensorFlow starts, where this TensorFlow's build info says it will be one
    name, version, ptx_only = _installed_tensorflow()
    said = f"tfdevices: GPU 0 (NVIDIA H200, compute capability 9.0): {name} {version} holds no sm_90 code"
    assert (said in proc.stderr) == ptx_only, proc.stderr


def test_configure_of_one_gpu_of_eight_is_not_taken_for_a_mask_that_hides_it() -> None:
    """configure("3") masks the others itself: the first cause is still the driver, not that mask."""
    proc = run_py(
        """
        import tfdevices
        try:
            tfdevices.configure("3")
        except tfdevices.TfDevicesError as err:
            print("ERROR", err)
    """,
        env={"PYTHONPATH": os.pathsep.join([FAKE_NVML, REPO]), "FAKE_NVML": "eight"},
    )
    error = proc.stdout.split("ERROR ", 1)[1].strip()
    assert error.startswith("1 GPU(s) selected but TensorFlow lists 0: CUDA could not use them: no NVIDIA driver"), (
        error
    )


def test_the_last_resort_reads_a_verbose_tensorflow_start_as_the_same_causes() -> None:
    """TensorFlow started once, verbose, in a fresh process: here its log names the missing driver and runtime."""
    from tfdevices.doctor import tensorflow_log
    from tfdevices.gpus.cuda_log import log_findings

    causes = {f.cause for f in log_findings(tensorflow_log(subprocess_env({"TF_CPP_MIN_LOG_LEVEL": "2"})))}
    assert {"log driver", "log cuInit"} <= causes, causes


def test_the_report_records_docstring_example() -> None:
    import doctest

    import tfdevices.core.doctor_report

    result = doctest.testmod(tfdevices.core.doctor_report)
    assert result.attempted > 0 and result.failed == 0
