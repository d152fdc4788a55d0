"""tfdevices doctor: one screen for a bug report, with no environment value it does not read and no secret."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli, run_py
from tfdevices.doctor import Report, diagnose

SECTIONS = ["python", "tensorflow", "gpus", "job", "mends", "launch"]
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
        ({"TFDEVICES_MENDS": "kerasfit"}, "mends", "TFDEVICES_MENDS", "no mend is called 'kerasfit'"),
        ({"TFDEVICES_EXIT_WAIT": "-1"}, "job", "TFDEVICES_EXIT_WAIT", "error: TFDEVICES_EXIT_WAIT='-1' is not"),
        ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "tensorflow", "oneDNN", "off (TF_ENABLE_ONEDNN_OPTS=0)"),
        ({"TF_USE_LEGACY_KERAS": "1"}, "tensorflow", "tf.keras is", "tf_keras "),
        ({"CUDA_VISIBLE_DEVICES": "\u0663"}, "gpus", "error", "CUDA_VISIBLE_DEVICES='\u0663'"),
        ({"TFDEVICES_STALL_TIMEOUT": "90"}, "job", "stall timeout", "stop the job 90 s past the window"),
        ({"TFDEVICES_STALL_WINDOW": "x"}, "job", "stalls", "error: TFDEVICES_STALL_WINDOW='x'"),
        ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, "job", "progress records", "/tmp/tfdevices-progress/slurm-7.0"),
    ],
)
def test_bad_or_telling_settings_are_said_in_their_row(env, section, label, words) -> None:
    report = diagnose(env=env, tensorflow=False).to_dict()
    assert words in report[section][label]


def test_report_text_aligns_rows_under_their_section() -> None:
    text = Report((("a", (("x", "1"), ("longer", "2"))), ("b", (("y", "3"),)))).text()
    assert text == "a:\n  x       1\n  longer  2\n\nb:\n  y       3"
