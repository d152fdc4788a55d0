from __future__ import annotations

import io
import json
import os
import pwd
import subprocess
import sys

import pytest

from tests import fake_nvml as fk, inventories as inv
from tests.helpers import REPO, run_cli, subprocess_env
from tfdevices import Inventory
from tfdevices.cli import CLEAR, main, watch
from tfdevices.gpus import nvml as nvml_mod, processes as processes_mod


@pytest.fixture
def eight_file(tmp_path):
    path = tmp_path / "node.json"
    path.write_text(inv.eight().to_json())
    return str(path)


def test_list_table_shows_nvml_cuda_and_tf_names(eight_file, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert main(["list", "--inventory", eight_file]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"source: nvml (from {eight_file})")
    assert out.splitlines()[1].split()[:3] == ["NVML", "CUDA", "TF"]
    row = next(line for line in out.splitlines() if line.startswith("3 "))
    assert row.split()[:4] == ["3", "3", "/GPU:3", "A100-SXM4-40GB"]


def test_list_json_round_trips(eight_file, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA numbers = NVML numbers, as in the file
    assert main(["list", "--json", "--inventory", eight_file]) == 0
    listed = Inventory.from_json(capsys.readouterr().out)
    assert listed.gpus == Inventory.from_json(open(eight_file).read()).gpus
    assert listed.cuda_device_order is None  # a listing holds the machine, not the variables it was made under


def test_list_estimates_the_fastest_first_order(eight_file, capsys, monkeypatch):
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert main(["list", "--inventory", eight_file]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[3:11]}
    assert rows == {"0": "0", "1": "1", "2": "2", "3": "3", "6": "4", "7": "5", "4": "6", "5": "7"}  # 8.0, 7.5, 7.0
    assert "note: CUDA order estimated" in out


def test_select_prints_exports_and_explains_on_stderr(eight_file, capsys):
    assert main(["select", "auto:2", "--min-free-memory", "35GiB", "--inventory", eight_file]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["export CUDA_VISIBLE_DEVICES=0,2", "export CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    assert "GPU 4     skip" in captured.err and "31.0 GiB free < 35.0 GiB" in captured.err


def test_select_output_evaluates_in_a_shell(eight_file):
    script = (
        f'eval "$({sys.executable} -m tfdevices select auto:1 --order utilization --inventory {eight_file})"; '
        'echo "$CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER"'
    )
    proc = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=60
    )
    assert proc.stdout.strip() == "0 PCI_BUS_ID"


@pytest.mark.parametrize(
    "fmt, check",
    [
        ("json", lambda out: json.loads(out)["cuda_visible_devices"] == "7,6"),
        ("table", lambda out: out.startswith("spec: 7,6  CUDA_VISIBLE_DEVICES=7,6")),
    ],
)
def test_select_formats(eight_file, capsys, fmt, check):
    assert main(["select", "7,6", "--format", fmt, "--inventory", eight_file]) == 0
    assert check(capsys.readouterr().out)


@pytest.mark.parametrize(
    "argv, first_words",
    [
        (["select", "auto"], "tfdevices select: error: GPU spec 'auto': 'auto' needs a count"),
        (["select", "GPU:1"], "tfdevices select: error: GPU spec 'GPU:1': 'GPU:1' is a TensorFlow logical name"),
        (["select", "9"], "tfdevices select: error: GPU spec '9': '9' names no GPU; the inventory "),
        (["select", "auto:9"], "tfdevices select: error: GPU spec 'auto:9': only 8 of 8 GPUs qualify"),
        (["select", "all", "--min-free-memory", "8"], "tfdevices select: error: --min-free-memory '8': a bare number"),
        (["select", "all", "--exclude", "all"], "tfdevices select: error: --exclude 'all': must name GPUs"),
        (
            ["select", "1", "--max-utilization", "50%"],
            "tfdevices select: error: GPU spec '1': GPU 1 is utilization 95%",
        ),
    ],
)
def test_errors_are_one_line_exit_2(eight_file, capsys, argv, first_words):
    assert main([*argv, "--inventory", eight_file]) == 2
    err = capsys.readouterr().err
    assert err.startswith(first_words), err
    assert err.count("\n") == 1 and "HINT:" in err


@pytest.mark.parametrize(
    "argv, env, first_words",
    [
        (
            ["list", "--inventory", "/no/such.json"],
            {},
            "tfdevices list: error: inventory file '/no/such.json': No such",
        ),
        (
            ["list"],
            {"TFDEVICES_INVENTORY": "/no/such.json"},
            "tfdevices list: error: the file TFDEVICES_INVENTORY names: No such file",
        ),
        (
            ["list"],
            {"CUDA_VISIBLE_DEVICES": "0,zero"},
            "tfdevices list: error: entry 2 of CUDA_VISIBLE_DEVICES is neither a GPU index nor",
        ),
        (
            ["list"],
            {"CUDA_DEVICE_ORDER": "SLOWEST_FIRST"},
            "tfdevices list: error: CUDA_DEVICE_ORDER is set to something other than a CUDA device order",
        ),
        (["select", "all", "--max-utilization", "2"], {}, "tfdevices select: error: argument --max-utilization: '2'"),
        (["select"], {}, "tfdevices select: error: the following arguments are required: spec."),
        (["frobnicate"], {}, "tfdevices: error: argument COMMAND: invalid choice: 'frobnicate'"),
        (["placement"], {}, "tfdevices placement: error: the following arguments are required: PATH."),
        (
            ["launch", "--bogus"],
            {},
            (
                "tfdevices launch: error: unrecognized arguments: --bogus (and the following "
                "arguments are required: -n/--num-workers)."
            ),
        ),
    ],
)
def test_bad_input_in_a_real_process_gives_no_traceback(argv, env, first_words):
    proc = run_cli(*argv, env=env)
    assert proc.returncode == 2
    assert proc.stderr.startswith(first_words), proc.stderr
    assert proc.stderr.count("\n") == 1 and "HINT:" in proc.stderr, proc.stderr


def test_bad_inventory_file(tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text('{"gpus": [{"index": 0, "name": "A100"}]}')
    assert main(["list", "--inventory", str(path)]) == 2
    assert capsys.readouterr().err.startswith(
        f"tfdevices list: error: inventory file '{path}': gpus[0]: lacks 'uuid'; required fields: "
        "['index', 'name', 'uuid']."
    )


def test_list_and_select_work_without_tensorflow(eight_file):
    code = (
        "import sys; sys.modules['tensorflow'] = None  # import tensorflow now fails\n"
        "from tfdevices.cli import main\n"
        f"assert main(['list', '--inventory', {eight_file!r}]) == 0\n"
        f"assert main(['select', 'auto:2', '--inventory', {eight_file!r}]) == 0\n"
        "assert main(['list']) == 0\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "export CUDA_VISIBLE_DEVICES=0,2" in proc.stdout


def test_inventory_flag_applies_this_process_mask(eight_file, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,2")
    assert main(["select", "all", "--format", "json", "--inventory", eight_file]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cuda_visible_devices"] == "5,2"  # the mask's order is kept: GPU 5 stays GPU:0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert main(["list", "--inventory", eight_file]) == 0
    assert "no GPU visible: all 8 GPUs are hidden: CUDA_VISIBLE_DEVICES is set to hide every GPU" in (
        capsys.readouterr().out
    )


def test_a_closed_pipe_is_not_an_error(eight_file):
    proc = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m tfdevices list --json --inventory {eight_file} | head -1"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
        timeout=60,
    )
    assert proc.stdout == "{\n" and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_launch_passes_its_options_through(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text("import json, os\nprint(json.loads(os.environ['TF_CONFIG'])['task']['index'])\n")
    proc = run_cli("launch", "-n", "2", "--", sys.executable, str(script), timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith(("[0] ", "[1] ")))
    assert lines == ["[0] 0", "[1] 1"]


@pytest.mark.parametrize(
    "argv, first_words",
    [
        (["launch", "-n", "zero", "--", "x"], "tfdevices launch: error: argument -n/--num-workers: invalid int"),
        (
            ["placement", "/no/such/logdir"],
            "tfdevices placement: error: log directory '/no/such/logdir' does not exist",
        ),
    ],
)
def test_forwarded_commands_report_errors_in_one_line(argv, first_words):
    proc = run_cli(*argv)
    assert proc.returncode == 2 and proc.stderr.startswith(first_words), proc.stderr
    assert "Traceback" not in proc.stderr


def test_demo_with_a_bad_inventory_file_fails_before_the_demo(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    proc = run_cli("demo", "--inventory", str(bad), "mirrored")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"tfdevices demo: error: inventory file '{bad}': expected a JSON object"), proc.stderr


def test_a_full_disk_is_one_line_and_non_zero(eight_file):
    for args in (["list"], ["list", "--json"], ["select", "auto:2"]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [sys.executable, "-m", "tfdevices", *args, "--inventory", eight_file],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                env=subprocess_env(),
                cwd=REPO,
                timeout=60,
            )
        assert proc.returncode == 1, proc.stderr
        said = proc.stderr.splitlines()[-1]  # select explains its choice on stderr first
        assert said.startswith(f"tfdevices {args[0]}: error: cannot write the output: No space left")
        assert "HINT:" in said and "Traceback" not in proc.stderr


def test_a_fifo_given_as_inventory_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "inventory.fifo"
    os.mkfifo(fifo)
    proc = run_cli("list", "--inventory", str(fifo), timeout=60)  # would block forever on open() or read()
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"tfdevices list: error: inventory file '{fifo}' is a FIFO, not a file")


# --- list --processes / --watch, topo -----------------------------------------------------------------------

DATA = os.path.join(os.path.dirname(__file__), "data")


def _fake_proc(root, pid: int, uid: int, cmdline: bytes) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "status").write_text(f"Name:\tpython\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "cmdline").write_bytes(cmdline)
    (d / "environ").write_bytes(b"SECRET_TOKEN=hunter2\0HOME=/root\0")  # never read, never printed


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """The fake NVML (the 4-GPU PCIe box) with processes of two users (root and this user), and one whose
    /proc entry is gone; a /proc made of files."""
    gpus = fk.from_inventory(
        Inventory.load(os.path.join(DATA, "topo-pcie-4gpu-bridges.json")),
        pids={"0": ((4242, 3 << 30), (5151, 1 << 30)), "1": ((6161, 5 << 30),)},
    )
    monkeypatch.setattr(nvml_mod, "_DEFAULT", nvml_mod.Nvml(gpus))
    proc = tmp_path / "proc"
    proc.mkdir()
    _fake_proc(proc, 4242, 0, b"python\0train.py\0--epochs\x003\0")
    _fake_proc(proc, 5151, os.getuid(), b"python3\0-m\0serve\0")
    monkeypatch.setattr(processes_mod, "PROC_ROOT", str(proc))  # 6161 has no entry: it is gone
    for name in ("TFDEVICES_INVENTORY", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    return gpus


def test_list_processes_shows_pid_user_memory_and_command_of_two_users_and_a_gone_one(machine, capsys):
    assert main(["list", "--processes"]) == 0
    out = capsys.readouterr().out
    me = pwd.getpwuid(os.getuid()).pw_name
    lines = [line.split() for line in out.splitlines() if line.startswith("    pid ")]
    assert lines[0] == ["pid", "4242", "root", "3.0", "GiB", "C", "python", "train.py", "--epochs", "3"]
    assert lines[1] == ["pid", "5151", me, "1.0", "GiB", "C", "python3", "-m", "serve"]
    assert lines[2][:6] == ["pid", "6161", "?", "5.0", "GiB", "C"]  # gone: what NVML said is kept
    assert "(not visible to this user, or gone)" in out
    assert out.count("(no process)") == 2  # GPUs 2 and 3
    assert "hunter2" not in out and "SECRET_TOKEN" not in out
    assert "Temp" in out and "60 / 300 W" in out and "P0" in out


def test_list_json_carries_processes_sensors_and_topology(machine, capsys):
    assert main(["list", "--json"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    back = Inventory.from_json(out)
    assert [(p.pid, p.user, p.command, p.gpu_memory) for p in back.gpus[0].process_list] == [
        (4242, "root", "python train.py --epochs 3", 3 << 30),
        (5151, pwd.getpwuid(os.getuid()).pw_name, "python3 -m serve", 1 << 30),
    ]
    assert [(p.pid, p.user, p.command) for p in back.gpus[1].process_list] == [(6161, None, None)]
    assert back.topology.links[0] == ("X", "NV4", "SYS", "SYS") and back.topology.numa_affinity == (0, 0, 1, 1)
    assert (back.gpus[3].temperature, back.gpus[3].fan_speed, back.gpus[3].power_limit_mw) == (43, 45, 300_000)


@pytest.mark.parametrize("argv", [["select", "auto:2"], ["topo"]])
def test_select_and_topo_read_no_sensor_nor_process(machine, argv, capsys):
    assert main(argv) == 0
    read = set(machine.calls)
    assert {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetCpuAffinity"} <= read  # what they use
    assert not read & {"nvmlDeviceGetTemperature", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetClockInfo"}


@pytest.mark.parametrize(
    "spec, wiring", [("auto:1", False), ("2", False), ("none", False), ("auto:2", True), ("0,2", True), ("all", True)]
)
def test_select_reads_the_wiring_only_where_it_can_choose_or_show_by_it(machine, spec, wiring, capsys):
    assert main(["select", spec]) == 0
    read = set(machine.calls) & {"nvmlDeviceGetCpuAffinity", "nvmlDeviceGetTopologyCommonAncestor"}
    assert bool(read) == wiring, read
    if spec == "auto:2":  # the pair chosen by its links, and said so
        assert "links: all NVLink (weakest NV4, GPU 0-1)" in capsys.readouterr().err


def test_plain_list_reads_neither_topology_nor_proc(machine, capsys):
    assert main(["list"]) == 0
    assert "nvmlDeviceGetTopologyCommonAncestor" not in machine.calls
    assert "    pid " not in capsys.readouterr().out


def test_topo_prints_the_matrix_with_affinity_and_legend(machine, capsys):
    assert main(["topo"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == ["GPU0", "X", "NV4", "SYS", "SYS", "0-15,32-47", "0"]
    assert "NV#  = Connection traversing a bonded set of # NVLinks" in out


def test_topo_json_round_trips(machine, capsys):
    from tfdevices.gpus.topology import Topology

    assert main(["topo", "--json"]) == 0
    topo = Topology.from_dict(json.loads(capsys.readouterr().out))
    assert topo.links[2] == ("SYS", "SYS", "X", "NV4") and topo.cpu_affinity[3] == "16-31,48-63"


@pytest.mark.parametrize(
    "name",
    [
        "topo-dgx-a100-nvswitch.json",
        "topo-dgx1-v100-cubemesh.json",
        "topo-mig-a100.json",
        "topo-pcie-4gpu-bridges.json",
    ],
)
def test_topo_from_a_saved_inventory_names_its_source(name, capsys):
    assert main(["topo", "--inventory", os.path.join(DATA, name), "--no-legend"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("GPU0   X ") and "\nsource: " in out and "Legend" not in out


def test_topo_of_a_file_without_topology_is_one_line_and_non_zero(eight_file, capsys):
    assert main(["topo", "--inventory", eight_file]) == 2
    assert capsys.readouterr().err.startswith(f"tfdevices topo: error: inventory file {eight_file!r} holds no topology")


def test_topo_without_gpus_says_why(monkeypatch, capsys):
    monkeypatch.setattr(nvml_mod, "_DEFAULT", nvml_mod.Nvml(fk.FakeNvml(init_error=fk.NVML_ERROR_LIBRARY_NOT_FOUND)))
    monkeypatch.delenv("TFDEVICES_INVENTORY", raising=False)
    assert main(["topo"]) == 0
    assert capsys.readouterr().out.startswith("no topology: no NVIDIA driver")


@pytest.mark.parametrize(
    "value, words",
    [
        ("0", "outside 0.1..86400"),
        ("x", "is not a number of seconds"),
        ("1e9", "outside 0.1..86400"),
        ("nan", "outside 0.1..86400"),
    ],
)
def test_watch_interval_is_bounded(value, words, capsys):
    assert main(["list", "--watch", value]) == 2
    assert words in capsys.readouterr().err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _stop_after(rounds: int):
    calls = []

    def sleep(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) == rounds:
            raise KeyboardInterrupt

    return sleep, calls


@pytest.mark.parametrize("out, redraw", [(io.StringIO(), False), (_Tty(), True)])
def test_watch_redraws_on_a_terminal_and_appends_otherwise_and_ctrl_c_ends_cleanly(out, redraw):
    sleep, calls = _stop_after(3)
    texts = iter(["one", "two", "three"])
    assert watch(lambda: next(texts), 1.5, out, sleep=sleep, clock=lambda: "12:00:00") == 0
    text = out.getvalue()
    assert calls == [1.5, 1.5, 1.5]
    assert text.count(CLEAR) == (3 if redraw else 0)
    assert text.count("12:00:00  every 1.5s (Ctrl-C ends)") == 3
    assert [line for line in text.replace(CLEAR, "").splitlines() if line in ("one", "two", "three")] == [
        "one",
        "two",
        "three",
    ]


def test_watch_in_a_real_process_ends_on_sigint_without_traceback(tmp_path):
    import signal
    import time

    path = os.path.join(DATA, "topo-mig-a100.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdevices", "list", "--watch", "0.2", "--inventory", path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=subprocess_env(),
        # as in a terminal: a run started in the background (`cmd &`) ignores SIGINT, and so would its child
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    first, deadline = b"", time.monotonic() + 120  # Ctrl-C while it watches, however slow it was to start
    while b"every 0.2s (Ctrl-C ends)" not in first and time.monotonic() < deadline:
        first += proc.stdout.readline()
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert (first + out).decode().count("every 0.2s (Ctrl-C ends)") >= 2 and b"Traceback" not in err


# --- configure --dry-run: every logical device, limits said when derived, the flags in the hints ---------

NODE8 = os.path.join(DATA, "node-8gpu.json")


def _dry_run(capsys, *args):
    status = main(["configure", "--dry-run", *args, "--inventory", NODE8])
    out, err = capsys.readouterr()
    return (
        status,
        dict(
            line.split(None, 1)
            if not line.startswith(("GPUs", "memory", "logical"))
            else (line[:17].strip(), line[19:])
            for line in out.splitlines()
        ),
        err,
    )


def test_dry_run_split_shows_every_logical_device_and_why_the_limits(capsys, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    status, rows, _ = _dry_run(capsys, "0,2", "--virtual-devices", "2")
    assert status == 0
    assert rows["GPUs (NVML -> TF)"] == "0 -> GPU:0 and GPU:1, 2 -> GPU:2 and GPU:3"
    assert rows["memory limit"].startswith("GPU 0: 37.0 GiB + 37.0 GiB; GPU 2: 18.5 GiB + 18.5 GiB (not asked for: ")
    assert "95% of each GPU's free memory" in rows["memory limit"]


def test_dry_run_uneven_split_by_gpu_as_the_readme_says(capsys, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    status, rows, _ = _dry_run(capsys, "auto:2", "--memory-limit", "0=8GiB,2=6GiB+2GiB")
    assert status == 0
    assert rows["GPUs (NVML -> TF)"] == "0 -> GPU:0, 2 -> GPU:1 and GPU:2"
    assert rows["logical split"] == "GPU 0 x 1, GPU 2 x 2" and "None" not in rows["logical split"]
    assert "not asked for" not in rows["memory limit"]


def test_dry_run_without_a_spec_splits_from_the_inventorys_free_memory(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    status, rows, err = _dry_run(capsys, "--virtual-devices", "2")
    assert status == 0, err
    assert rows["GPUs (NVML -> TF)"] == "2 -> GPU:0 and GPU:1, 0 -> GPU:2 and GPU:3"
    assert rows["memory limit"].startswith("GPU 2: 18.5 GiB + 18.5 GiB; GPU 0: 37.0 GiB + 37.0 GiB")


@pytest.mark.parametrize(
    "args, first_words, hint",
    [
        (
            ["0,2", "--memory-limit", "100GiB"],
            (
                "--memory-limit asks for more memory than a GPU has: GPU 0 "
                "(A100-SXM4-80GB) has 80.0 GiB in all, 100.0 GiB asked; GPU 2"
            ),
            "HINT: keep each GPU's limits within its memory, e.g. --memory-limit 36GiB.",
        ),
        (
            ["0", "--memory-growth", "--memory-limit", "4GiB"],
            "--memory-growth cannot be combined with --memory-limit",
            "HINT: drop --memory-growth",
        ),
        (["0", "--virtual-devices", "0"], "--virtual-devices 0: must be", "HINT: write e.g. --virtual-devices 4"),
        (["0", "--memory-limit", "8"], "--memory-limit '8': a bare number", "HINT: "),
    ],
)
def test_dry_run_errors_speak_in_flags(capsys, args, first_words, hint):
    status, _, err = _dry_run(capsys, *args)
    assert status == 2
    assert err.startswith(f"tfdevices configure: error: {first_words}"), err
    assert hint in err and "memory_limit=" not in err and "virtual_devices=" not in err, err


def test_a_split_without_free_memory_hints_the_flag(tmp_path, capsys):
    unknown = tmp_path / "node.json"
    data = json.loads(open(NODE8).read())
    for g in data["gpus"]:
        g["memory_free"] = 0
    unknown.write_text(json.dumps(data))
    assert main(["configure", "--dry-run", "--virtual-devices", "2", "--inventory", str(unknown)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "tfdevices configure: error: --virtual-devices 2: splitting a GPU needs each part's memory"
    ), err
    assert "HINT: give the memory of each logical GPU, e.g. --memory-limit 4GiB." in err


# --- argument errors: what was wrong as typed, and the fix for that case; every command's help ------------


@pytest.mark.parametrize(
    "argv, first_words, hint",
    [
        (
            ["launch", "python", "-c", "print('hi')", "-n", "2"],
            (
                "the following arguments are required: -n/--num-workers ('-n 2' comes after the command 'python', "
                "so it went to the command)."
            ),
            (
                "HINT: put tfdevices launch's options before '--' and the command: tfdevices launch -n 2 -- python "
                "-c print('hi')"
            ),
        ),
        (
            ["launch", "--bogus"],
            "unrecognized arguments: --bogus (and the following arguments are required",
            "HINT: 'tfdevices launch --help' lists its options.",
        ),
        (
            ["launch"],
            "the following arguments are required: -n/--num-workers.",
            "HINT: e.g. tfdevices launch -n 2 -- python train.py",
        ),
        (["select", "0", "--exlude", "1"], "unrecognized arguments: --exlude 1.", "HINT: did you mean --exclude?"),
        (
            ["placement", "logs", "--inventory", "node.json"],
            "unrecognized arguments: --inventory node.json.",
            (
                "HINT: --inventory is an option of list, topo, select, demo, launch, configure, not of tfdevices "
                "placement."
            ),
        ),
        (["lst"], "argument COMMAND: invalid choice: 'lst'", "HINT: did you mean 'list'?"),
        (
            ["launch", "-n", "zero", "--", "x"],
            "argument -n/--num-workers: invalid int value: 'zero'.",
            "HINT: -n/--num-workers: worker processes on this machine.",
        ),
    ],
)
def test_an_argument_error_names_what_was_typed_and_its_fix(capsys, argv, first_words, hint):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.split(": error: ", 1)[1].startswith(first_words), err
    assert hint in err and err.count("\n") == 1 and "usage:" not in err and len(err) < 400, err


@pytest.mark.parametrize("name", sorted(__import__("tfdevices.cli", fromlist=["COMMANDS"]).COMMANDS))
def test_every_commands_help_exits_0_with_its_own_options_first(capsys, name):
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    section = out.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]  # the first group: options, not groups
    options = [line.split()[0].rstrip(",") for line in section.splitlines() if line.startswith("  -")]
    assert options[0] == "-h"
    own = options[1:]
    if "--inventory" in own and len(own) > 1:
        assert own[-1] == "--inventory", own  # the shared option after the command's own
    assert out.startswith(f"usage: tfdevices {name} ")
