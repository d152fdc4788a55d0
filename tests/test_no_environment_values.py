"""Nothing tfdevices prints holds an environment variable's value: every variable it reads is set to values that
carry a sentinel, the commands that read it run, and the sentinel shows nowhere (stdout, stderr, log lines, JSON).
A malformed value still gives one line that names the variable, with a HINT, and no traceback.

What tfdevices works out from a value may be shown (the GPUs a mask shows, a rank, a wait in seconds): a sentinel
cannot hide in a number, so the values below carry it in the text a user wrote (a name, a path, a uuid, a mask
entry, a malformed word).
"""

from __future__ import annotations

import argparse
import json
import logging
import os

import pytest

from tests.helpers import REPO, run_cli
from tfdevices.cli import main

SENTINEL = "5ec4e7"  # hex digits, so it fits in a GPU uuid prefix
BAD = f"zz{SENTINEL}"  # a malformed value for any variable
NODE = os.path.join(REPO, "tests", "data", "node-8gpu.json")  # a saved listing of eight GPUs
with open(NODE, encoding="utf-8") as _f:
    NODE_UUID_PREFIX = json.load(_f)["gpus"][2]["uuid"][:14]  # GPU 2's, as a mask may name it


def _tf_config(workers: list[str], *, task_type: str = "worker", index: int = 0, **extra: object) -> str:
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": task_type, "index": index}, **extra})


SLURM_STEP = {  # a well-formed srun task, so that each variable's own check is reached
    "SLURM_PROCID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_TASKS_PER_NODE": "2",
    "SLURM_STEP_NODELIST": "node1",
}

# variable: (where tfdevices reads it, the values to try, what else a well-formed job sets with it)
GPUS = {
    "TFDEVICES_INVENTORY": ("gpus/discovery.py: discover", [f"/no/{SENTINEL}.json", BAD], {}),
    "CUDA_VISIBLE_DEVICES": (
        "gpus/visibility.py: parse_visible_devices, resolve",
        [f"GPU-{SENTINEL}", f"0,GPU-{SENTINEL}", f"0,{BAD}", f"9{SENTINEL[1:].replace('e', '0')}", "0,,1", "1,1"],
        {},
    ),
    "CUDA_DEVICE_ORDER": ("gpus/visibility.py: parse_device_order", [BAD, f"PCI_BUS_ID{SENTINEL}"], {}),
}
TENSORFLOW = {
    "TF_XLA_FLAGS": ("doctor.py: _xla", [f"--tf_xla_auto_jit=2 --{SENTINEL}", BAD], {}),
    "TF_ENABLE_ONEDNN_OPTS": ("doctor.py: _onednn", [BAD], {}),
    "TF_USE_LEGACY_KERAS": ("doctor.py: _tf_keras_is; training.py", [BAD], {}),
    "TFDEVICES_VIRTUAL_DEVICES": ("runtime.py: virtual_devices_from_env", [BAD], {}),
}
JOB = {
    "TF_CONFIG": (
        "jobs/tfconfig.py: read_tf_config",
        [
            BAD,
            _tf_config([f"h{SENTINEL}:1", "h2:2"]),
            _tf_config(["h1:1"], task_type=SENTINEL),
            _tf_config(["h1:1"], index=5, **{f"x{SENTINEL}": 1}),
        ],
        {},
    ),
    **{
        name: ("jobs/env.py: _from_slurm; jobs/slurm.py", [BAD], SLURM_STEP)
        for name in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_NUM_TASKS")
    },
    "SLURM_STEP_ID": ("jobs/env.py: _from_slurm", [SENTINEL], SLURM_STEP),
    "SLURM_STEP_TASKS_PER_NODE": ("jobs/slurm.py: expand_tasks_per_node", [BAD, f"1,{BAD}", "3"], SLURM_STEP),
    "SLURM_STEP_NODELIST": (
        "jobs/slurm.py: expand_nodelist",
        [f"n{SENTINEL}[", f"n{SENTINEL},n{SENTINEL}"],
        SLURM_STEP,
    ),
    "SLURM_STEP_GPUS": ("jobs/slurm.py: parse_gpu_list", [BAD, f"0,{BAD}", "0,0"], SLURM_STEP),
    "SLURM_JOB_GPUS": ("jobs/slurm.py: parse_gpu_list", [BAD], SLURM_STEP),
    **{
        name: ("jobs/env.py: _from_ompi", [BAD], {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})
        for name in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")
    },
    **{
        name: ("jobs/env.py: _from_pmi", [BAD], {"PMI_RANK": "0", "PMI_SIZE": "2"}) for name in ("PMI_RANK", "PMI_SIZE")
    },
    **{
        name: ("jobs/env.py: _from_generic", [BAD], {"RANK": "0", "WORLD_SIZE": "2"})
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    },
    "TFDEVICES_RANK_GPUS": ("jobs/env.py: _with_gpus", [BAD], {}),
    "TFDEVICES_RDZV_TOKEN": ("jobs/handshake.py: read_token (doctor: set or unset)", [SENTINEL], {}),
    "SLURM_JOB_ID": ("jobs/progress.py: progress_dir; jobs/metrics.py", [f"1/{SENTINEL}"], SLURM_STEP),
    "TFDEVICES_POD_CLUSTER": ("jobs/kubernetes.py: pod_cluster", [BAD], {}),
    "NVIDIA_VISIBLE_DEVICES": ("jobs/kubernetes.py: pod_gpus; gpus/cuda_facts.py", [BAD], {}),
}
# Read by the mends and a job's progress and stall watch (messages that quoted their values until these cases came)
ELSEWHERE = {
    "TFDEVICES_EXIT_WAIT": ("mends/exit_barrier.py: exit_wait_s", [BAD], {}),
    "TFDEVICES_STALL_WINDOW": ("jobs/stall.py: policy_from_env", [BAD], {}),
    "TFDEVICES_STALL_TIMEOUT": ("jobs/stall.py: policy_from_env", [BAD], {}),
    "TFDEVICES_PROGRESS_DIR": ("jobs/progress.py: progress_dir", [f"rel/{SENTINEL}"], {}),
    "TFDEVICES_MENDS": ("mends/base.py: parse_mends_off", [BAD, f"keras_fit,{BAD}"], {}),
}
ALL = {**GPUS, **TENSORFLOW, **JOB, **ELSEWHERE}

GPU_COMMANDS = (
    ["list"],
    ["list", "--json"],
    ["select", "all"],
    ["select", "0", "--format", "json"],
    ["configure", "--dry-run", "0"],
)
DOCTOR = (["doctor", "--no-tensorflow"], ["doctor", "--json", "--no-tensorflow"])


def _cases(table, commands):
    for name, (_, values, job) in table.items():
        for value in values:
            for argv in commands:
                yield pytest.param(name, value, job, argv, id=f"{name}={value[:24]}-{' '.join(argv)}")


@pytest.fixture
def clean_env(monkeypatch):
    """No variable of the table set; the GPUs are the saved listing's."""
    for name in {*ALL, *SLURM_STEP, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "TF_CONFIG"}:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith(("SLURM_", "OMPI_", "PMI_", "JOBSET_")) or name in ("JOB_COMPLETION_INDEX",):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TFDEVICES_INVENTORY", NODE)
    return monkeypatch


def _run(argv, capsys, caplog) -> tuple[int, str]:
    with caplog.at_level(logging.DEBUG):
        status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out + out.err + caplog.text


def _check(name: str, status: int, printed: str) -> None:
    assert SENTINEL not in printed, printed
    assert "Traceback" not in printed, printed
    if status != 0:
        error = [line for line in printed.splitlines() if ": error: " in line]
        assert len(error) == 1 and name in error[0] and "HINT:" in error[0], printed


@pytest.mark.parametrize("name, value, job, argv", list(_cases(GPUS, GPU_COMMANDS + DOCTOR)))
def test_gpu_variables_are_never_printed(clean_env, capsys, caplog, name, value, job, argv):
    for key, setting in job.items():
        clean_env.setenv(key, setting)
    clean_env.setenv(name, value)
    _check(name, *_run(argv, capsys, caplog))


@pytest.mark.parametrize("name, value, job, argv", list(_cases({**TENSORFLOW, **JOB, **ELSEWHERE}, DOCTOR)))
def test_doctor_prints_no_variable_it_reads(clean_env, capsys, caplog, name, value, job, argv):
    for key, setting in job.items():
        clean_env.setenv(key, setting)
    clean_env.setenv(name, value)
    status, printed = _run(argv, capsys, caplog)
    assert status == 0  # the doctor reports a bad variable in its row
    _check(name, status, printed)


CUDA = {  # read by gpus/cuda_facts.py (gather) and gpus/cuda_libraries.py (loader_order) for doctor --cuda
    "CUDA_VISIBLE_DEVICES": [f"GPU-{SENTINEL}", BAD],
    "CUDA_DEVICE_ORDER": [BAD],
    "NVIDIA_VISIBLE_DEVICES": [BAD],
    "CUDA_CACHE_MAXSIZE": [BAD],
    "LD_LIBRARY_PATH": [f"/no/{SENTINEL}:/usr/lib/{SENTINEL}"],
}


@pytest.mark.parametrize("name, value", [(n, v) for n, values in CUDA.items() for v in values])
def test_doctor_cuda_prints_no_variable(clean_env, capsys, caplog, name, value):
    clean_env.setenv(name, value)
    _check(name, *_run(["doctor", "--cuda", "--json"], capsys, caplog))


# Read only inside a job's workers or the launcher, not by a command above (their readers quote no value):
# TFDEVICES_LISTEN (mends/loopback.py), TFDEVICES_METRICS (jobs/metrics.py), TFDEVICES_SLOW_RANK
# (jobs/straggler.py), TFDEVICES_STACKS_DIR, TFDEVICES_LAUNCHER_WATCHES (jobs/rank_hooks.py), TFDEVICES_RESTART
# (jobs/worker_plan.py), TFDEVICES_LOCK_DIR (gpus/reservation.py: tested below), JOBSET_*, JOB_COMPLETION_INDEX
# (jobs/kubernetes.py), TF_CPP_MIN_LOG_LEVEL (set, never printed).


@pytest.mark.parametrize("name", ["TFDEVICES_VIRTUAL_DEVICES"])
def test_configure_dry_run_names_a_bad_variable_alone(clean_env, capsys, caplog, name):
    clean_env.setenv(name, BAD)
    _check(name, *_run(["configure", "--dry-run", "0"], capsys, caplog))


def test_launch_reads_its_variables_without_printing_them(clean_env, tmp_path):
    from tfdevices.core.errors import TfDevicesError
    from tfdevices.jobs import launch_command

    parser = argparse.ArgumentParser()
    launch_command.add_arguments(parser)
    args = parser.parse_args(["-n", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--", "true"])
    clean_env.setenv("TFDEVICES_RDZV_TOKEN", SENTINEL)
    clean_env.setenv("TFDEVICES_POD_CLUSTER", BAD)
    with pytest.raises(TfDevicesError) as err:
        launch_command.config_from_args(args, ["true"])
    assert SENTINEL not in str(err.value) and "TFDEVICES_POD_CLUSTER" in str(err.value)


@pytest.mark.parametrize(
    "argv, env, name",
    [
        (["list"], {"CUDA_VISIBLE_DEVICES": f"0,{BAD}"}, "CUDA_VISIBLE_DEVICES"),
        (["list", "--json"], {"CUDA_VISIBLE_DEVICES": f"GPU-{SENTINEL}"}, "CUDA_VISIBLE_DEVICES"),
        (["select", "all"], {"CUDA_DEVICE_ORDER": BAD}, "CUDA_DEVICE_ORDER"),
        (["list"], {"TFDEVICES_INVENTORY": f"/no/{SENTINEL}.json"}, "TFDEVICES_INVENTORY"),
    ],
)
def test_a_real_process_says_one_line_that_names_the_variable(argv, env, name):
    proc = run_cli(*argv, env={"TFDEVICES_INVENTORY": NODE, **env})
    assert proc.returncode == 2, proc.stderr
    assert SENTINEL not in proc.stdout + proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and name in proc.stderr and "HINT:" in proc.stderr, proc.stderr


def test_doctor_with_tensorflow_prints_no_value(tmp_path):
    env = {
        "TFDEVICES_INVENTORY": NODE,
        "CUDA_VISIBLE_DEVICES": f"0,{NODE_UUID_PREFIX}",
        "TF_XLA_FLAGS": "--tf_xla_auto_jit=2",  # TensorFlow itself exits at import on a flag it does not know
        "TF_CONFIG": _tf_config([f"h{SENTINEL}:1", "h2:2"]),
        "TFDEVICES_RDZV_TOKEN": SENTINEL,
    }
    proc = run_cli("doctor", env=env)
    assert proc.returncode == 0, proc.stderr
    assert SENTINEL not in proc.stdout + proc.stderr and NODE_UUID_PREFIX not in proc.stdout + proc.stderr


def test_a_lock_directory_from_the_environment_is_named_by_the_variable(clean_env, tmp_path):
    from tfdevices.core.errors import ReservationError
    from tfdevices.gpus.inventory import Inventory
    from tfdevices.gpus.reservation import reserve

    blocker = tmp_path / f"{SENTINEL}.file"  # gpus/reservation.py: default_lock_dir reads TFDEVICES_LOCK_DIR
    blocker.write_text("")
    clean_env.setenv("TFDEVICES_LOCK_DIR", str(blocker))
    with pytest.raises(ReservationError) as err:
        reserve("auto:1", Inventory.load(NODE))
    assert SENTINEL not in str(err.value) and "TFDEVICES_LOCK_DIR" in str(err.value)


def test_launch_info_table_counts_the_nodes_it_does_not_name(clean_env):
    from tfdevices.jobs.env import launch_info

    env = {**SLURM_STEP, "SLURM_STEP_NODELIST": f"n{SENTINEL}[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}
    table = launch_info(env).table()
    assert SENTINEL not in table and "nodes: 2" in table


def _refused(call, *args):
    from tfdevices.core.errors import TfDevicesError

    with pytest.raises(TfDevicesError) as err:
        call(*args)
    return str(err.value)


@pytest.mark.parametrize(
    "name, value, read",
    [
        ("TFDEVICES_EXIT_WAIT", BAD, "tfdevices.mends.exit_barrier:exit_wait_s"),
        ("TFDEVICES_STALL_WINDOW", BAD, "tfdevices.jobs.stall:policy_from_env"),
        ("TFDEVICES_STALL_TIMEOUT", f"9{SENTINEL}", "tfdevices.jobs.stall:policy_from_env"),
        ("TFDEVICES_PROGRESS_DIR", f"rel/{SENTINEL}", "tfdevices.jobs.progress:progress_dir"),
        ("TFDEVICES_MENDS", BAD, "tfdevices.mends.base:turned_off"),
        ("TFDEVICES_MENDS", f"keras_fit, {BAD}", "tfdevices.mends.base:turned_off"),
    ],
)
def test_each_reader_names_its_variable_alone(name, value, read):
    import importlib

    module, _, function = read.partition(":")
    message = _refused(getattr(importlib.import_module(module), function), {name: value})
    assert SENTINEL not in message and name in message, message


def test_a_mends_list_names_its_unknown_entries_by_position():
    from tfdevices.mends.base import parse_mends_off

    message = _refused(parse_mends_off, f"keras_fit,{BAD},n{SENTINEL}")
    assert SENTINEL not in message and "TFDEVICES_MENDS: entries 2, 3 name no mend" in message, message


@pytest.mark.parametrize("name", ["SLURM_JOB_ID", "SLURM_STEP_ID"])
def test_a_slurm_step_cluster_names_a_bad_id_alone(clean_env, name):
    from tfdevices.jobs.cluster import cluster_from_env

    message = _refused(cluster_from_env, {**SLURM_STEP, name: f"1{SENTINEL}"})
    assert SENTINEL not in message and f"{name} is not a whole number" in message, message


POD = "5ec4e7a"  # the pods' names carry the sentinel: a JobSet's, an Indexed Job's, a LeaderWorkerSet's
PODS = {
    "JobSet": {
        "TFDEVICES_POD_CLUSTER": "port=2222,pods=1",
        "JOBSET_NAME": POD,
        "JOBSET_REPLICATED_JOB": f"w{SENTINEL}",
        "JOBSET_REPLICAS": "2",
        "JOBSET_JOB_INDEX": "1",
        "JOB_COMPLETION_INDEX": "0",
        "HOSTNAME": f"{POD}-w{SENTINEL}-1-0",
    },
    "Indexed Job": {
        "TFDEVICES_POD_CLUSTER": f"port=2222,pods=3,subdomain=s{SENTINEL}",
        "JOB_COMPLETION_INDEX": "2",
        "HOSTNAME": f"{POD}-2",
    },
    "LeaderWorkerSet": {
        "TFDEVICES_POD_CLUSTER": "port=2222",
        "LWS_LEADER_ADDRESS": f"{POD}-0.{POD}.default",
        "LWS_GROUP_SIZE": "3",
        "LWS_WORKER_INDEX": "1",
        "HOSTNAME": f"{POD}-0-1",
    },
}


@pytest.mark.parametrize("kind", list(PODS))
def test_a_pods_reason_names_its_kind_not_its_names(kind):
    from tfdevices.jobs.kubernetes import pod_cluster

    pod = pod_cluster(PODS[kind])
    assert pod is not None and pod.kind == kind and SENTINEL not in pod.reason and kind in pod.reason, pod.reason


def test_a_pod_cluster_spec_names_a_bad_entry_by_position():
    from tfdevices.jobs.kubernetes import pod_cluster

    message = _refused(pod_cluster, {**PODS["JobSet"], "TFDEVICES_POD_CLUSTER": f"port=1,k{SENTINEL[1:]}=2"})
    assert SENTINEL[1:] not in message and "TFDEVICES_POD_CLUSTER: entry 2 is not one of" in message, message


def test_pod_names_that_do_not_resolve_are_named_by_worker():
    from tfdevices.jobs.kubernetes import wait_for_names

    def resolve(name: str) -> None:
        raise OSError("no such name")

    hosts = [f"{POD}-{i}.s{SENTINEL}" for i in range(3)]
    message = _refused(lambda: wait_for_names(hosts, 0, resolve=resolve))
    assert SENTINEL not in message and "(worker(s) 0, 1, 2)" in message, message
