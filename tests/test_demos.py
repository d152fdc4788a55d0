"""Demos as users run them: real processes, real TensorFlow, TensorBoard logs on disk."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, run_cli, subprocess_env
from tfdevices.core.errors import InputError
from tfdevices.demos import DEMOS, run_demo

TOOLKIT_FLAGS = (
    "--gpus",
    "--min_free_memory",
    "--[no]memory_growth",
    "--memory_limit",
    "--virtual_devices",
    "--strategy",
    "--cross_device_ops",
    "--logdir",
    "--[no]log_placement",
)


def run_module(name: str, *args: str, cwd: str = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"tfdevices.demos.{name}", *args],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def test_unknown_demo_lists_the_demos():
    with pytest.raises(InputError) as info:
        run_demo("mirorred", [])
    assert str(info.value).startswith("demo 'mirorred' does not exist; demos: ")
    assert all(name in str(info.value) for name in ("mirrored", "tasks"))
    assert "HINT: did you mean 'tfdevices demo mirrored'?" in str(info.value)
    with pytest.raises(InputError) as info:
        run_demo("taks", [])
    assert "HINT: did you mean 'tfdevices demo tasks'?" in str(info.value)  # the hint follows the input


def test_every_demo_is_described_and_importable():
    for name, description in DEMOS.items():
        assert description
        assert os.path.exists(os.path.join(REPO, "tfdevices", "demos", f"{name}.py"))


def test_mirrored_demo_trains_and_leaves_tensorboard_logs(tmp_path):
    logdir = tmp_path / "logs"
    proc = run_module("mirrored", "--epochs=2", "--steps_per_epoch=4", f"--logdir={logdir}", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "strategy: mirrored (MirroredStrategy), 4 replica(s)" in out
    assert "epoch 1:" in out and "epoch 2:" in out and "examples/s on 4 replica(s)" in out
    assert "placement of one step:" in out and "CPU:0, CPU:1, CPU:2, CPU:3" in out
    assert f"TensorBoard logs: {logdir}" in out
    said = out + proc.stderr
    assert said.count("no GPU visible: running on 4 logical CPU devices") == 1, said  # in the table, not logged too
    events = [f for _, _, files in os.walk(logdir) for f in files if f.startswith("events.out.tfevents")]
    assert len(events) >= 2  # Keras' training scalars and the placement run


def test_tasks_demo_shows_the_cross_device_copy(tmp_path):
    proc = run_module("tasks", "--size=64", "--rounds=2", "--log_placement", f"--logdir={tmp_path}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "task_a: on CPU:0" in out and "task_b: on CPU:1" in out
    assert "copy CPU:1 -> CPU:0" in out and "float32[64,64] 16.0 KiB" in out
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path))


@pytest.mark.parametrize(
    "name, args, words",
    [
        ("mirrored", ["--gpus=auto"], "--gpus 'auto'"),
        ("mirrored", ["--strategy=mirror"], "strategy"),
        ("mirrored", ["--epochs=0"], "epochs"),
        ("tasks", ["--min_free_memory=8"], "a bare number is ambiguous"),
        ("tasks", ["--no_such_flag"], "no_such_flag"),
    ],
)
def test_bad_flag_is_a_usage_error_not_a_traceback(name, args, words):
    proc = run_module(name, *args)
    assert proc.returncode == 1
    assert words in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_run_demo_raises_bad_input_for_the_command_to_say():
    code = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys; from tfdevices.demos import run_demo\n"
                "try:\n    run_demo('tasks', ['--size=0'])\n"
                "except __import__('tfdevices').UsageError as err:\n    print(err)"
            ),
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert code.returncode == 0 and code.stdout.startswith("flag --size=0: ") and "HINT: " in code.stdout, code


# the workers demo takes its GPUs from the launcher (gpu_for_rank), not from --gpus
@pytest.mark.parametrize("name", sorted(set(DEMOS) - {"workers"}))
def test_helpfull_lists_the_toolkit_flags(name):
    proc = run_module(name, "--helpfull")
    assert proc.returncode == 0
    assert all(flag in proc.stdout for flag in TOOLKIT_FLAGS), proc.stdout[-2000:]


def test_workers_demo_lists_its_own_flags_and_not_gpus():
    proc = run_module("workers", "--helpfull")
    assert "--epochs" in proc.stdout and "--steps_per_epoch" in proc.stdout
    assert "--gpus" not in proc.stdout


def test_cli_reaches_the_demo():
    proc = run_cli("demo", "tasks", "--gpus=GPU:1")
    assert proc.returncode != 0
    assert "--gpus 'GPU:1'" in proc.stderr and "Traceback" not in proc.stderr


def test_workers_demo_under_the_launcher_trains_identical_weights():
    proc = run_cli(
        "launch", "-n", "2", "--", sys.executable, "-m", "tfdevices", "demo", "workers", "--epochs=1", timeout=240
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = sorted(line for line in proc.stdout.splitlines() if " rank " in line and "checksum" in line)
    assert [line[:16] for line in lines] == ["[0] rank 0/2 (TF", "[1] rank 1/2 (TF"]
    sums = {line.rsplit("checksum ", 1)[1] for line in lines}
    assert len(sums) == 1, lines  # every worker ends with the same weights
    assert all("2 replica(s), fit," in line for line in lines)  # plain Keras 3 fit, mended by build_strategy


@pytest.mark.parametrize(
    "name, args, words",
    [
        ("mirrored", ["--logdir={file}"], "--logdir="),
        ("mirrored", ["--logdir={file}/run1"], "lies under"),
        ("tasks", ["--logdir={file}"], "is a file, not a directory"),
        (
            "mirrored",
            ["--batch_size=3", "--gpus=none", "--virtual_devices=4"],
            "--batch_size=3 is smaller than the 4 replicas",
        ),
        ("mirrored", ["--batch_size=1"], "--batch_size=1 is smaller than the 4 replicas"),  # 4 logical CPUs
        ("mirrored", ["--virtual_devices=100000"], "virtual_devices"),
        (
            "workers",
            ["--batch_size=1", "RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2"],
            "--batch_size=1 is smaller than the 2 replicas",
        ),
    ],
)
def test_bad_flags_are_usage_errors_before_tensorflow_starts(tmp_path, name, args, words):
    blocker = tmp_path / "file"
    blocker.write_text("precious")
    env = dict(a.split("=", 1) for a in args if not a.startswith("--"))
    args = [a.format(file=blocker) for a in args if a.startswith("--")]
    code = (
        "import sys; sys.modules['tensorflow'] = None  # importing TensorFlow now fails\n"
        "from tfdevices.cli import main\n"
        f"sys.exit(main(['demo', {name!r}, *{args!r}]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(env),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr  # tfdevices demo: bad input is status 2
    assert words in proc.stderr and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert blocker.read_text() == "precious"


def test_planned_replicas_and_batch_check():
    from tfdevices.core.errors import UsageError
    from tfdevices.flags import check_batch_size, planned_replicas

    assert planned_replicas("multi_worker", 2, None, world_size=3) == 6
    assert planned_replicas("mirrored", 0, None) == 1
    check_batch_size(4, 4)
    with pytest.raises(UsageError, match="--batch_size=3 is smaller than the 4 replicas"):
        check_batch_size(3, 4)


# --- help and exit status, as a newcomer meets them ---------------------------------------------------------

HELP_SCRIPT = """
import contextlib, io, json, sys
from tfdevices.cli import main
out = {}
for flag in ("--help", "--helpshort", "--helpfull"):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        status = main(["demo", sys.argv[1], flag])
    out[flag] = [status, text.getvalue()]
print(json.dumps(out))
"""

OWN_FLAGS = {
    "mirrored": ("--epochs", "--batch_size", "--gpus"),
    "tasks": ("--size", "--rounds", "--gpus"),
    "layers": ("--layers", "--devices", "--gpus"),
    "workers": ("--epochs", "--steps_per_epoch"),
}


@pytest.mark.parametrize("name", sorted(DEMOS))
def test_a_demos_help_shows_its_own_flags_first_and_exits_0(name):
    import json

    proc = subprocess.run(
        [sys.executable, "-c", HELP_SCRIPT, name],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    helps = json.loads(proc.stdout.splitlines()[-1])
    for flag, (status, text) in helps.items():
        assert status == 0, (flag, text)
        assert text.startswith("Demo: ") and f"USAGE: tfdevices demo {name} [flags]" in text, text[:300]
        own = text.split("flags of this demo:", 1)[1]
        first_other = own.find("absl.") if flag == "--helpfull" else len(own)
        for wanted in OWN_FLAGS[name]:
            assert -1 < own.find(wanted) < first_other, (flag, wanted)
        assert ("logtostderr" in text) == (flag == "--helpfull")  # absl's own flags only in --helpfull


def test_a_demo_run_as_a_script_follows_absl_help_0_and_bad_input_1():
    shown = run_module("tasks", "--help")
    assert shown.returncode == 0 and "--size" in shown.stdout and "--rounds" in shown.stdout
    bad = run_module("tasks", "--gpus=GPU:1")
    assert bad.returncode == 1 and bad.stderr.startswith("python -m tfdevices.demos.tasks: error: --gpus 'GPU:1'")
    assert bad.stderr.count("\n") == 1 and "HINT: write '1'" in bad.stderr


@pytest.mark.parametrize(
    "args, first_words",
    [
        (["--gpus=GPU:1"], "tfdevices demo: error: --gpus 'GPU:1': 'GPU:1' is a TensorFlow logical name"),
        (
            ["--gpus=0"],
            (
                "tfdevices demo: error: --gpus '0': '0' names no GPU; "
                "the inventory the file TFDEVICES_INVENTORY names has no GPU"
            ),
        ),
    ],
)
def test_a_bad_gpus_in_a_demo_is_one_line_and_status_2_whoever_finds_it(tmp_path, args, first_words):
    from tfdevices import Inventory

    path = tmp_path / "no-gpu.json"
    path.write_text(Inventory(source="none", reason="no NVIDIA driver").to_json())
    proc = run_cli("demo", "--inventory", str(path), "mirrored", *args, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(first_words) and proc.stderr.count("\n") == 1, proc.stderr
    assert str(path) not in proc.stderr  # the demo reads the file through TFDEVICES_INVENTORY, whose value is not said
