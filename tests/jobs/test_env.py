"""launch_info and gpu_for_rank: tables of launch environments, good and bad."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env
from tests.jobs.environments import STEP, slurm, tfc
from tfdevices.core.errors import EnvVarError, LaunchError, SelectionError, TfConfigError, TfDevicesError
from tfdevices.jobs import env as launch
from tfdevices.jobs.env import launch_info
from tfdevices.jobs.ranks import gpu_for_rank

# name, env, (source, rank, world, local_rank, local_world, node_rank, nodes, allocated gpus), this rank's GPUs
GOOD = [
    ("empty", {}, ("none", 0, 1, 0, 1, None, (), None), ()),
    (
        "slurm 1 node 2 gpus rank1",
        slurm(1, 1, 2, SLURM_STEP_NODELIST="gpu01", SLURM_STEP_TASKS_PER_NODE="2", SLURM_STEP_GPUS="0,1"),
        ("SLURM", 1, 2, 1, 2, 0, ("gpu01",), (0, 1)),
        (1,),
    ),
    (
        "slurm allocation not 0..n-1",
        slurm(0, 0, 2, SLURM_STEP_NODELIST="gpu01", SLURM_STEP_TASKS_PER_NODE="2", SLURM_STEP_GPUS="2,3"),
        ("SLURM", 0, 2, 0, 2, 0, ("gpu01",), (2, 3)),
        (2,),
    ),
    (
        "slurm gres IDX format",
        slurm(1, 1, 2, SLURM_NODELIST="n1", SLURM_TASKS_PER_NODE="2", SLURM_JOB_GPUS="gpu:2(IDX:0-1)"),
        ("SLURM", 1, 2, 1, 2, 0, ("n1",), (0, 1)),
        (1,),
    ),
    (
        "slurm typed gres, two types",
        slurm(0, 0, 1, SLURM_NODELIST="n1", SLURM_JOB_GPUS="gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)"),
        ("SLURM", 0, 1, 0, 1, 0, ("n1",), (0, 2)),
        (0, 2),
    ),
    (
        "slurm GPU_DEVICE_ORDINAL with (null)",
        slurm(0, 0, 1, SLURM_NODELIST="n1", GPU_DEVICE_ORDINAL="0,(null)"),
        ("SLURM", 0, 1, 0, 1, 0, ("n1",), (0,)),
        (0,),
    ),
    (
        "slurm bracketed node list, node 2",
        slurm(
            5,
            1,
            6,
            SLURM_NODEID="2",
            SLURM_STEP_NODELIST="node[01-03]",
            SLURM_STEP_TASKS_PER_NODE="2(x3)",
            SLURM_STEP_GPUS="0,1",
        ),
        ("SLURM", 5, 6, 1, 2, 2, ("node01", "node02", "node03"), (0, 1)),
        (1,),
    ),
    (
        "slurm mixed node list and uneven tasks",
        slurm(
            6,
            0,
            7,
            SLURM_NODEID="3",
            SLURM_STEP_NODELIST="node[01-03],gpu7",
            SLURM_STEP_TASKS_PER_NODE="2(x3),1",
            SLURM_STEP_GPUS="3",
        ),
        ("SLURM", 6, 7, 0, 1, 3, ("node01", "node02", "node03", "gpu7"), (3,)),
        (3,),
    ),
    (
        "slurm step beats job gpus",
        slurm(
            0,
            0,
            2,
            SLURM_STEP_NODELIST="a",
            SLURM_STEP_TASKS_PER_NODE="2",
            SLURM_STEP_GPUS="1",
            SLURM_JOB_GPUS="0,1,2,3",
        ),
        ("SLURM", 0, 2, 0, 2, 0, ("a",), (1,)),
        None,
    ),  # 2 ranks, 1 GPU: error unless share
    (
        "slurm one rank, four gpus: takes all",
        slurm(0, 0, 1, SLURM_STEP_NODELIST="a", SLURM_STEP_GPUS="0-3"),
        ("SLURM", 0, 1, 0, 1, 0, ("a",), (0, 1, 2, 3)),
        (0, 1, 2, 3),
    ),
    (
        "slurm 2 ranks 4 gpus: blocks of two",
        slurm(1, 1, 2, SLURM_STEP_NODELIST="a", SLURM_STEP_TASKS_PER_NODE="2", SLURM_STEP_GPUS="4-7"),
        ("SLURM", 1, 2, 1, 2, 0, ("a",), (4, 5, 6, 7)),
        (6, 7),
    ),
    (
        "slurm batch script is one process",
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_GPUS": "0"},
        ("none", 0, 1, 0, 1, None, (), (0,)),
        (0,),
    ),
    (
        "slurm step without gpus",
        slurm(
            0,
            0,
            1,
            SLURM_STEP_NODELIST="cpu[1-2]",
            SLURM_STEP_TASKS_PER_NODE="1(x2)",
            SLURM_NODEID="0",
            SLURM_NTASKS="2",
        ),
        ("SLURM", 0, 2, 0, 1, 0, ("cpu1", "cpu2"), None),
        (),
    ),
    (
        "slurm with a 2-D bracket host list",
        slurm(
            3,
            1,
            4,
            SLURM_NODEID="1",
            SLURM_STEP_NODELIST="r1n[8,10]",
            SLURM_STEP_TASKS_PER_NODE="2(x2)",
            SLURM_STEP_GPUS="0,1",
        ),
        ("SLURM", 3, 4, 1, 2, 1, ("r1n8", "r1n10"), (0, 1)),
        (1,),
    ),
    (
        "tf_config 2 local workers",
        tfc(["127.0.0.1:4000", "127.0.0.1:4001"], 1),
        ("TF_CONFIG", 1, 2, 1, 2, 0, ("127.0.0.1",), None),
        (),
    ),
    (
        "tf_config 2 hosts x 2",
        tfc(["h0:1", "h0:2", "h1:1", "h1:2"], 2),
        ("TF_CONFIG", 2, 4, 0, 2, 1, ("h0", "h1"), None),
        (),
    ),
    (
        "tf_config chief counts first",
        tfc(["h0:1", "h1:1", "h1:2"], 2, "chief"),
        ("TF_CONFIG", 2, 3, 1, 2, 1, ("h0", "h1"), None),
        (),
    ),
    (
        "tf_config beats slurm batch vars (launcher inside sbatch)",
        {
            **tfc(["localhost:5", "localhost:6"], 1),
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "1",
            **STEP,
            "SLURM_STEP_GPUS": "0,1",
        },
        ("TF_CONFIG", 1, 2, 1, 2, 0, ("localhost",), (0, 1)),
        (1,),
    ),
    (
        "tf_config agreeing with RANK",
        {**tfc(["a:1", "a:2"], 0), "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
        ("TF_CONFIG", 0, 2, 0, 2, 0, ("a",), None),
        (),
    ),
    (
        "open mpi",
        {
            "OMPI_COMM_WORLD_RANK": "3",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "SLURM_JOB_GPUS": "0,1",
        },
        ("OMPI", 3, 4, 1, 2, None, (), (0, 1)),
        (1,),
    ),
    (
        "open mpi inside a slurm batch step",
        {
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "2",
            "SLURM_JOB_GPUS": "2,3",
        },
        ("OMPI", 1, 2, 1, 2, None, (), (2, 3)),
        (3,),
    ),
    (
        "pmi (mpich, intel mpi)",
        {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2", "SLURM_STEP_GPUS": "0,1"},
        ("PMI", 2, 4, 0, 2, None, (), (0, 1)),
        (0,),
    ),
    (
        "pmi from srun --mpi=pmi2 beats slurm",
        {
            **slurm(1, 1, 2, SLURM_STEP_NODELIST="a", SLURM_STEP_TASKS_PER_NODE="2"),
            "PMI_RANK": "1",
            "PMI_SIZE": "2",
            "MPI_LOCALRANKID": "1",
            "MPI_LOCALNRANKS": "2",
        },
        ("PMI", 1, 2, 1, 2, None, (), None),
        (),
    ),
    (
        "torchrun-style",
        {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1"},
        ("ENV", 5, 8, 1, 4, 1, (), None),
        (),
    ),
    (
        "torchrun-style inside srun",
        {
            **slurm(1, 0, 2, SLURM_NODEID="1", SLURM_STEP_NODELIST="n[1-2]", SLURM_STEP_TASKS_PER_NODE="1(x2)"),
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "SLURM_STEP_GPUS": "0,1",
        },
        ("ENV", 3, 4, 1, 2, None, (), (0, 1)),
        (1,),
    ),
    ("single-process generic", {"RANK": "0", "WORLD_SIZE": "1"}, ("ENV", 0, 1, 0, None, None, (), None), ()),
    (
        "whitespace around numbers",
        {"RANK": " 1 ", "WORLD_SIZE": "2 ", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
        ("ENV", 1, 2, 1, 2, None, (), None),
        (),
    ),
    (
        "launcher assignment wins",
        {
            **tfc(["127.0.0.1:7", "127.0.0.1:8"], 1),
            "TFDEVICES_RANK_GPUS": "3",
            "SLURM_STEP_GPUS": "2,3",
            "RANK": "1",
            "WORLD_SIZE": "2",
        },
        ("TF_CONFIG", 1, 2, 1, 2, 0, ("127.0.0.1",), (2, 3)),
        (3,),
    ),
]


@pytest.mark.parametrize("name,env,expected,gpus", GOOD, ids=[g[0] for g in GOOD])
def test_launch_table(name: str, env: dict[str, str], expected: tuple, gpus: tuple | None) -> None:
    info = launch_info(env)
    got = (
        info.source,
        info.rank,
        info.world_size,
        info.local_rank,
        info.local_world_size,
        info.node_rank,
        info.nodes,
        info.gpus,
    )
    assert got == expected, info.table()
    assert info.reason and info.source in launch.SOURCES
    if gpus is None:
        with pytest.raises(SelectionError, match="local ranks but only"):
            gpu_for_rank(info, local_world_size=info.local_world_size or 1)
    else:
        assignment = gpu_for_rank(info, local_world_size=info.local_world_size or 1)
        assert assignment.gpus == gpus, assignment.table()
        assert assignment.cuda_visible_devices == (",".join(map(str, gpus)) or "-1")


def test_table_is_large_enough() -> None:
    assert len(GOOD) >= 25


def test_winner_lists_losers() -> None:
    info = launch_info(
        {**tfc(["a:1", "a:2"], 1), "SLURM_PROCID": "0", "SLURM_NTASKS": "1", **STEP, "RANK": "1", "WORLD_SIZE": "2"}
    )
    assert info.source == "TF_CONFIG"
    assert info.ignored == ("ENV", "SLURM") and info.agreeing == ("RANK", "WORLD_SIZE")  # read, and the same
    table = info.table().splitlines()
    assert "also set, and saying the same: RANK, WORLD_SIZE" in table and "ignored: SLURM" in table
    alone = launch_info({**tfc(["a:1", "a:2"], 1), "LOCAL_RANK": "1"})  # only LOCAL_RANK beside TF_CONFIG
    assert "also set, and saying the same: LOCAL_RANK" in alone.table().splitlines()


def test_a_launched_cpu_workers_tables_are_true() -> None:
    """What tfdevices launch gives a CPU worker: no GPU, said as none; the launcher's choice, said as this rank's."""
    from tfdevices.jobs.ranks import gpu_for_rank

    env = {**tfc(["127.0.0.1:1", "127.0.0.1:2"], 0), "RANK": "0", "WORLD_SIZE": "2", "TFDEVICES_RANK_GPUS": ""}
    info = launch_info(env)
    assert "assigned GPUs: none (CPU) (from TFDEVICES_RANK_GPUS)" in info.table().splitlines()
    assert not any(line.startswith("ignored:") for line in info.table().splitlines())
    assert gpu_for_rank(info).table() == (
        "launcher assignment: local rank 0 runs on CPU (no GPU): tfdevices launch assigned this rank's GPUs "
        "(TFDEVICES_RANK_GPUS)"
    )


def test_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TF_CONFIG", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert (launch_info().source, launch_info().rank) == ("ENV", 1)


# env, error type, first words of the message
BAD = [
    (
        {"RANK": "x", "WORLD_SIZE": "2"},
        LaunchError,
        "RANK is not a whole number >= 0 (ASCII digits, at most 2,147,483,647).",
    ),
    (
        {"RANK": "-1", "WORLD_SIZE": "2"},
        LaunchError,
        "RANK is not a whole number >= 0 (ASCII digits, at most 2,147,483,647).",
    ),
    ({"RANK": "2", "WORLD_SIZE": "2"}, LaunchError, "RANK is past the last one (WORLD_SIZE makes ranks 0 to 1)."),
    (
        {"RANK": "0", "WORLD_SIZE": "0"},
        LaunchError,
        "WORLD_SIZE is not a whole number >= 1 (ASCII digits, at most 2,147,483,647).",
    ),
    ({"RANK": "1"}, LaunchError, "WORLD_SIZE is not set, but RANK is: ENV rank information is incomplete."),
    ({"LOCAL_RANK": "0"}, LaunchError, "RANK is not set, but LOCAL_RANK is: ENV rank information is incomplete."),
    ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2"}, LaunchError, "LOCAL_RANK is larger than RANK."),
    (
        {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
        LaunchError,
        "LOCAL_RANK is past the last one (LOCAL_WORLD_SIZE makes ranks 0 to 1).",
    ),
    (
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3"},
        LaunchError,
        "LOCAL_WORLD_SIZE is larger than WORLD_SIZE.",
    ),
    (slurm(4, 0, 4), LaunchError, "SLURM_PROCID is past the last one (SLURM_NTASKS makes ranks 0 to 3)."),
    (
        slurm(1, 2, 4, SLURM_STEP_TASKS_PER_NODE="2(x2)", SLURM_NODEID="0"),
        LaunchError,
        "SLURM_LOCALID is past the last one (SLURM_STEP_TASKS_PER_NODE gives this node tasks 0 to 1).",
    ),
    (
        slurm(1, 1, 4, SLURM_STEP_TASKS_PER_NODE="2(x3)"),
        LaunchError,
        "SLURM_STEP_TASKS_PER_NODE adds up to a different number of tasks than SLURM_NTASKS says.",
    ),
    (
        slurm(1, 1, 4, SLURM_STEP_TASKS_PER_NODE="2(x2)", SLURM_STEP_NODELIST="n[1-3]"),
        LaunchError,
        "SLURM_STEP_TASKS_PER_NODE describes 2 node(s), but SLURM_STEP_NODELIST lists 3.",
    ),
    (slurm(0, 0, 2, SLURM_STEP_NODELIST="node[01-03"), LaunchError, "SLURM_STEP_NODELIST has unbalanced brackets."),
    (
        slurm(0, 0, 2, SLURM_STEP_NODELIST="node[03-01]"),
        LaunchError,
        "SLURM_STEP_NODELIST: range 1 of a bracket runs backwards.",
    ),
    (slurm(0, 0, 2, SLURM_JOB_NODELIST="a,,b"), LaunchError, "SLURM_JOB_NODELIST has an empty host name."),
    (
        slurm(0, 0, 2, SLURM_STEP_NODELIST="n[1,1]"),
        LaunchError,
        "SLURM_STEP_NODELIST: host 2 of the 2 it names repeats host 1.",
    ),
    (
        slurm(0, 0, 2, SLURM_NODEID="2", SLURM_STEP_NODELIST="n[1-2]"),
        LaunchError,
        "SLURM_NODEID is past the last one (SLURM_STEP_NODELIST lists nodes 0 to 1).",
    ),
    (
        slurm(0, 0, 2, SLURM_STEP_TASKS_PER_NODE="2(x0)"),
        LaunchError,
        "entry 1 of SLURM_STEP_TASKS_PER_NODE is not 'N' or 'N(xM)' with N, M >= 1 (ASCII digits).",
    ),
    ({"SLURM_PROCID": "0", **STEP}, LaunchError, "SLURM_PROCID is set but neither SLURM_STEP_NUM_TASKS"),
    (
        slurm(0, 0, 1, SLURM_STEP_GPUS="0,x"),
        EnvVarError,
        "entry 2 of SLURM_STEP_GPUS is not a GPU index or range (ASCII digits).",
    ),
    (slurm(0, 0, 1, SLURM_STEP_GPUS="0,0"), EnvVarError, "SLURM_STEP_GPUS names the same GPU more than once."),
    (
        slurm(0, 0, 1, SLURM_JOB_GPUS="gpu:3(IDX:0-1)"),
        EnvVarError,
        "SLURM_JOB_GPUS: GRES entry 1's count disagrees with its IDX list, which names 2 GPU(s).",
    ),
    (
        slurm(0, 0, 1, SLURM_JOB_GPUS="gpu:2(IDX:0-1"),
        EnvVarError,
        "SLURM_JOB_GPUS: GRES entry 1 is not 'gpu[:type]:N(IDX:list)'.",
    ),
    (
        {"GPU_DEVICE_ORDINAL": "3-1"},
        EnvVarError,
        "entry 1 of GPU_DEVICE_ORDINAL is not a GPU index or range (ASCII digits).",
    ),
    (
        {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2"},
        LaunchError,
        "OMPI_COMM_WORLD_RANK is past the last one (OMPI_COMM_WORLD_SIZE makes ranks 0 to 1).",
    ),
    ({"PMI_RANK": "0"}, LaunchError, "PMI_SIZE is not set, but PMI_RANK is: PMI rank information is incomplete."),
    (
        {**tfc(["a:1", "a:2"], 1), "RANK": "0", "WORLD_SIZE": "2"},
        LaunchError,
        "RANK contradicts TF_CONFIG, which makes this process rank 1.",
    ),
    (
        {**tfc(["a:1", "a:2"], 1), "WORLD_SIZE": "3"},
        LaunchError,
        "WORLD_SIZE contradicts TF_CONFIG, which makes this process world size 2.",
    ),
    ({"TF_CONFIG": "{not json"}, TfConfigError, "TF_CONFIG: not valid JSON"),
    (
        {"TFDEVICES_RANK_GPUS": "a"},
        EnvVarError,
        "entry 1 of TFDEVICES_RANK_GPUS is not a GPU index or range (ASCII digits).",
    ),
]


@pytest.mark.parametrize("env,error,message", BAD, ids=[b[2][:40] for b in BAD])
def test_bad_environments(env: dict[str, str], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        launch_info(env)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "HINT:" in str(caught.value)


def test_docstring_examples() -> None:
    from tfdevices.jobs import ranks, slurm

    results = [doctest.testmod(module) for module in (launch, ranks, slurm)]
    assert sum(r.attempted for r in results) >= 10 and sum(r.failed for r in results) == 0


def test_launch_does_not_import_tensorflow() -> None:
    code = (
        "import sys, tfdevices; from tfdevices.jobs.env import launch_info; "
        "from tfdevices.jobs.ranks import gpu_for_rank; "
        "import tfdevices.gpus.reservation, tfdevices.jobs.launcher; "
        "print(tfdevices.launch_info({'RANK': '0', 'WORLD_SIZE': '1'}).source, 'tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert out.stdout.split() == ["ENV", "False"], out.stderr


# ---------------------------------------------------------------- hostile environments


@pytest.mark.parametrize(
    "env, first_words",
    [
        (
            {"RANK": "\u0660", "WORLD_SIZE": "\u0661"},
            "WORLD_SIZE is not a whole number >= 1 (ASCII digits, at most 2,147,483,647).",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "\uff12"},
            "WORLD_SIZE is not a whole number >= 1 (ASCII digits, at most 2,147,483,647).",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "9" * 100_000},
            "WORLD_SIZE is not a whole number >= 1 (ASCII digits, at most 2,147,483,647).",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "4294967296"},
            "WORLD_SIZE is not a whole number >= 1 (ASCII digits, at most 2,147,483,647).",
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "\u0663", "OMPI_COMM_WORLD_SIZE": "4"},
            "OMPI_COMM_WORLD_RANK is not a whole number >= 0 (ASCII digits, at most 2,147,483,647).",
        ),
        (
            slurm(0, 0, 2, SLURM_STEP_NODELIST="n[0-99999999]", SLURM_STEP_TASKS_PER_NODE="2"),
            "SLURM_STEP_NODELIST names more than 100,000 hosts.",
        ),
        (
            slurm(0, 0, 2, SLURM_STEP_NODELIST="n1", SLURM_STEP_TASKS_PER_NODE="1(x100000000)"),
            "SLURM_STEP_TASKS_PER_NODE describes more than 100,000 nodes or 10,000,000 tasks.",
        ),
        (
            slurm(0, 0, 2, SLURM_STEP_GPUS="0-100000000"),
            "entry 1 of SLURM_STEP_GPUS is past the last GPU index a node can have (1023).",
        ),
    ],
)
def test_hostile_environments_are_short_errors(env, first_words):
    with pytest.raises(TfDevicesError) as err:
        launch_info(env)
    message = str(err.value)
    assert message.startswith(first_words) and "HINT:" in message and len(message) < 400


def test_16000_task_slurm_step_is_read():
    n = 16_000
    env = slurm(
        n - 1,
        0,
        n,
        SLURM_STEP_NODELIST=f"n[00000-{n - 1:05d}]",
        SLURM_STEP_TASKS_PER_NODE=f"1(x{n})",
        SLURM_NODEID=str(n - 1),
    )
    info = launch_info(env)
    assert (info.rank, info.world_size, info.node_rank, len(info.nodes)) == (n - 1, n, n - 1, n)


def test_table_of_a_16000_node_step_stays_short():
    n = 16_000
    env = slurm(
        n - 1,
        0,
        n,
        SLURM_STEP_NODELIST=",".join(f"node{i:05d}" for i in range(n)),
        SLURM_STEP_TASKS_PER_NODE=f"1(x{n})",
        SLURM_NODEID=str(n - 1),
    )
    table = launch_info(env).table()
    assert "nodes: 16,000" in table and "node00001" not in table and len(table) < 2000
    assert "read: SLURM_PROCID, SLURM_LOCALID" in table and env["SLURM_STEP_NODELIST"][:200] not in table


@pytest.mark.parametrize(
    "role, index, trains, rank, world",
    [
        ("chief", 0, True, 0, 4),
        ("worker", 2, True, 3, 4),  # the chief is rank 0: worker 2 is rank 3
        ("evaluator", 0, False, 0, 1),
        ("ps", 1, False, 0, 1),
    ],
)
def test_every_tf_config_role_is_answered(role, index, trains, rank, world):
    """A Kubeflow TFJob's processes: chief, workers, an evaluator and parameter servers."""
    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2", "w:3"], "ps": ["p:1", "p:2"]}
    env = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})}
    info = launch_info(env)
    assert (info.role, info.role_index, info.trains, info.rank, info.world_size) == (role, index, trains, rank, world)
    if not trains:
        assert f"role: {role} {index} (does not train: no rank)" in info.table()
        assert not info.is_distributed
