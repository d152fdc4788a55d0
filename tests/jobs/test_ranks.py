"""Rank-to-GPU plans: the mapping table, weighted shares, candidates from an inventory or a Selection;
under hostile input one GPU is one GPU, and planning is linear at cluster scale."""

from __future__ import annotations

import pytest

from tests import inventories as inv
from tests.jobs.environments import slurm, tfc
from tfdevices.core.errors import LaunchError, SelectionError
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.selection import Selection, select
from tfdevices.jobs.env import LaunchInfo, launch_info
from tfdevices.jobs.ranks import MAX_LOCAL_RANKS, gpu_for_rank, plan_ranks

EMPTY = LaunchInfo()


@pytest.mark.parametrize(
    "kwargs, error, first_words",
    [
        (dict(local_world_size=2, gpus=[0, 0]), LaunchError, "gpus [0, 0] names GPU 0 more than once"),
        (dict(local_world_size=1, gpus=[3, 1, 3, 1]), LaunchError, "gpus [3, 1, 3, 1] names GPU 1,3 more than once"),
        (
            dict(local_world_size=2, gpus=[0, 1], mapping=[[0, 0], [1]]),
            LaunchError,
            "mapping[0] [0, 0] names GPU 0 more than once",
        ),
        (
            dict(local_world_size=2, gpus=[0, 1], mapping=[0, 0]),
            SelectionError,
            "the explicit mapping puts 2 local ranks on GPU 0",
        ),
        (
            dict(local_world_size=3, gpus=[0, 1, 2], mapping=lambda r, c: c[0]),
            SelectionError,
            "the function mapping puts 3 local ranks on GPU 0",
        ),
        (
            dict(local_world_size=MAX_LOCAL_RANKS + 1, gpus=[0], share=True),
            LaunchError,
            "local_world_size=1,000,001: more than 1,000,000 processes",
        ),
    ],
)
def test_one_gpu_is_one_gpu_in_rank_plans(kwargs, error, first_words):
    with pytest.raises(error) as err:
        gpu_for_rank(EMPTY, local_rank=0, **kwargs)
    assert str(err.value).startswith(first_words) and "HINT:" in str(err.value)


def test_sharing_is_allowed_when_asked_for():
    assert gpu_for_rank(EMPTY, local_rank=1, local_world_size=2, gpus=[0, 1], mapping=[0, 0], share=True).gpus == (0,)


def test_a_selection_of_two_mig_instances_of_one_gpu_is_one_gpu():
    machine = inv.mig()
    sel = select("0:0,0:1", machine)
    with pytest.raises(LaunchError, match="names GPU 0 more than once"):
        gpu_for_rank(EMPTY, sel, local_rank=0, local_world_size=1)
    doubled = Selection(spec="1,1", gpus=(machine.gpus[2],) * 2)
    with pytest.raises(LaunchError, match="selection '1,1'"):
        plan_ranks(EMPTY, doubled, local_world_size=1)


def test_an_inventory_of_mig_instances_offers_their_gpu_once():
    a = gpu_for_rank(EMPTY, inv.mig(), local_rank=0, local_world_size=2)
    assert a.candidates == (0, 1)


def test_plan_ranks_matches_gpu_for_rank_rank_by_rank():
    for kwargs in (
        dict(gpus=[4, 5, 6, 7]),
        dict(gpus=[0, 1], share=True),
        dict(gpus=[0, 1, 2], mapping="weighted", speeds={0: 3.0, 1: 2.0, 2: 1.0}, share=True),
        dict(gpus=[]),
        dict(gpus=inv.eight()),
    ):
        plans = plan_ranks(EMPTY, local_world_size=4, **kwargs)
        assert tuple(plans) == tuple(gpu_for_rank(EMPTY, local_rank=r, local_world_size=4, **kwargs) for r in range(4))
        assert plans[-1] == plans[3] and plans[1:3] == tuple(plans)[1:3] and len(plans) == 4
    with pytest.raises(IndexError, match="local rank 4 is out of range 0..3"):
        plan_ranks(EMPTY, [0, 1], local_world_size=4, share=True)[4]


@pytest.mark.parametrize("n", [1000, 16_000])
def test_planning_many_ranks(n):
    plans = plan_ranks(EMPTY, local_world_size=n, gpus=list(range(8)), share=True)
    assert len(plans) == n and plans[-1].gpus == ((n - 1) % 8,)
    assert plans[0].memory_fraction == pytest.approx(8 / n)
    one_each = plan_ranks(EMPTY, local_world_size=n, gpus=list(range(n)))
    assert [a.gpus[0] for a in one_each] == list(range(n))
    weighted = plan_ranks(
        EMPTY, local_world_size=n, gpus=[0, 1], mapping="weighted", speeds={0: 3.0, 1: 1.0}, share=True
    )
    assert sum(a.gpus == (0,) for a in weighted) == 3 * n // 4


def test_weighted_sharing_follows_dhondt():
    plan = gpu_for_rank(
        EMPTY,
        local_rank=0,
        local_world_size=7,
        gpus=[0, 1, 2],
        mapping="weighted",
        speeds={0: 4.0, 1: 2.0, 2: 1.0},
        share=True,
    ).plan
    assert [p[0] for p in plan] == [0, 0, 0, 0, 1, 1, 2]


def test_inventory_candidates_use_the_allocation_in_order():
    info = LaunchInfo(gpus=(5, 2), gpus_variable="SLURM_STEP_GPUS", local_world_size=2)
    assert gpu_for_rank(info, inv.eight(), local_rank=1).gpus == (2,)
    assert isinstance(inv.eight(), Inventory)


# ------------------------------------------------------------------ mapping


def inventory(*indices: int, visible: tuple[int, ...] | None = None) -> Inventory:
    shown = indices if visible is None else visible
    gpus = tuple(
        GpuInfo(index=i, name="Fake", uuid=f"GPU-{i}", cuda_ordinal=shown.index(i) if i in shown else None)
        for i in indices
    )
    return Inventory(gpus=gpus, source="nvml")


ONE = launch_info({})

# local world size, candidates, mapping, speeds, share -> plan (per local rank)
MAPS = [
    (2, [0, 1], "sequential", None, False, ((0,), (1,))),
    (2, [2, 3], "sequential", None, False, ((2,), (3,))),
    (3, [0, 1, 2, 3], "sequential", None, False, ((0,), (1,), (2,))),
    (1, [5, 6], "sequential", None, False, ((5, 6),)),
    (4, [0, 1], "sequential", None, True, ((0,), (1,), (0,), (1,))),
    (2, [0, 1], [1, 0], None, False, ((1,), (0,))),
    (2, [0, 1, 2, 3], [[0, 2], [1, 3]], None, False, ((0, 2), (1, 3))),
    (2, [0, 1, 2, 3], lambda r, c: c[-1 - r], None, False, ((3,), (2,))),
    (2, [0, 1, 2], "weighted", {0: 1.0, 1: 3.0, 2: 2.0}, False, ((1,), (2,))),
    (4, [0, 1], "weighted", {0: 1.0, 1: 3.0}, True, ((0,), (1,), (1,), (1,))),
    (5, [0, 1, 2], "weighted", {0: 2.0, 1: 2.0, 2: 1.0}, True, ((0,), (0,), (1,), (1,), (2,))),
    (2, [], "sequential", None, False, ((), ())),
]


@pytest.mark.parametrize("size,candidates,mapping,speeds,share,plan", MAPS)
def test_mapping_table(size, candidates, mapping, speeds, share, plan) -> None:
    for rank in range(size):
        a = gpu_for_rank(
            ONE, candidates, local_rank=rank, local_world_size=size, mapping=mapping, speeds=speeds, share=share
        )
        assert a.plan == plan, a.table()
        assert a.gpus == plan[rank]
        assert f"*local rank {rank}" in a.table()
        users = sum(plan[rank][0] in p for p in plan) if plan[rank] else 0
        assert a.memory_fraction == (1 / users if users > 1 else None)


def test_weighted_work_share_follows_speed() -> None:
    shares = [
        gpu_for_rank(
            ONE, [0, 1], local_rank=r, local_world_size=3, mapping="weighted", speeds={0: 1.0, 1: 2.0}, share=True
        ).work_share
        for r in range(3)
    ]
    assert shares == pytest.approx([1 / 3, 1 / 3, 1 / 3])  # GPU 1 is twice as fast and carries two ranks
    fast = gpu_for_rank(ONE, [0, 1], local_rank=1, local_world_size=2, mapping="weighted", speeds={0: 1.0, 1: 3.0})
    assert fast.work_share == pytest.approx(0.75)


def test_weighted_accepts_measured_speeds() -> None:
    from tfdevices.measure import DeviceSpeed

    speeds = [
        DeviceSpeed(device="GPU:0", gpu_index=4, flops=5e12),
        DeviceSpeed(device="GPU:1", gpu_index=7, flops=1e13),
    ]
    a = gpu_for_rank(ONE, [4, 7], local_rank=0, local_world_size=1, mapping="weighted", speeds=speeds)
    assert a.gpus == (7,)


def test_inventory_candidates_intersect_allocation() -> None:
    info = launch_info(slurm(1, 1, 2, SLURM_STEP_TASKS_PER_NODE="2", SLURM_STEP_GPUS="3,1"))
    a = gpu_for_rank(info, inventory(0, 1, 2, 3))
    assert (a.candidates, a.gpus) == ((3, 1), (1,))
    # inside a device cgroup the allocated GPUs 2,3 show up as NVML 0,1
    b = gpu_for_rank(launch_info(slurm(1, 1, 2, SLURM_STEP_TASKS_PER_NODE="2", SLURM_STEP_GPUS="2,3")), inventory(0, 1))
    assert b.gpus == (1,) and "cgroup" in b.candidates_from
    masked = inventory(0, 1, 2, 3, visible=(2,))
    with pytest.raises(SelectionError, match=r"SLURM_STEP_GPUS=1,3 allocates GPUs this machine does not show"):
        gpu_for_rank(launch_info(slurm(0, 0, 1, SLURM_STEP_TASKS_PER_NODE="1", SLURM_STEP_GPUS="1,3")), masked)


def test_launcher_assignment_beats_the_inventory() -> None:
    info = launch_info({**tfc(["127.0.0.1:7", "127.0.0.1:8"], 1), "TFDEVICES_RANK_GPUS": "1"})
    a = gpu_for_rank(info, inventory(0, 1, visible=(1,)))  # the worker sees only its own GPU
    assert (a.gpus, a.method) == ((1,), "launcher")
    assert gpu_for_rank(info, [0, 1]).gpus == (1,) and gpu_for_rank(info, [0, 1]).method == "sequential"


def test_selection_candidates() -> None:
    from tfdevices.gpus.selection import select

    sel = select("1,3", inventory(0, 1, 2, 3))
    a = gpu_for_rank(ONE, sel, local_rank=1, local_world_size=2)
    assert a.gpus == (3,) and a.candidates_from == "selection '1,3'"
    assert a.env() == {"CUDA_VISIBLE_DEVICES": "3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "TFDEVICES_RANK_GPUS": "3"}
    assert a.spec == "3"


BAD_MAPS = [
    (dict(local_world_size=3, gpus=[0, 1]), SelectionError, "3 local ranks but only 2 GPU(s) (0,1)"),
    (dict(local_world_size=2, gpus=[0, 1], mapping=[0]), LaunchError, "mapping=[0] has 1 entr(ies) for 2"),
    (dict(local_world_size=2, gpus=[0, 1], mapping=[0, 5]), SelectionError, "mapping[1] gave GPU(s) [5]"),
    (
        dict(local_world_size=2, gpus=[0, 1], mapping=lambda r, c: "0"),
        LaunchError,
        "mapping function for local rank 0 gave '0'",
    ),
    (dict(local_world_size=2, gpus=[0, 1], mapping="round-robin"), LaunchError, "mapping='round-robin': unknown"),
    (dict(local_world_size=2, gpus=[0, 1], mapping="weighted"), LaunchError, "mapping='weighted' needs speeds="),
    (
        dict(local_world_size=2, gpus=[0, 1], mapping="weighted", speeds={0: 1.0}),
        SelectionError,
        "no speed for GPU(s) [1]",
    ),
    (
        dict(local_world_size=2, gpus=[0, 1], mapping="weighted", speeds={0: 1.0, 1: 0}),
        LaunchError,
        "speeds {1: 0} must be positive",
    ),
    (dict(local_world_size=2, local_rank=2, gpus=[0, 1]), LaunchError, "local_rank=2 is out of range"),
    (dict(local_world_size=0, gpus=[0]), LaunchError, "local_world_size=0 must be a whole number >= 1"),
    (dict(local_world_size=1, gpus="0,1"), LaunchError, "gpus='0,1': expected NVML indices"),
]


@pytest.mark.parametrize("kwargs,error,message", BAD_MAPS, ids=[b[2][:30] for b in BAD_MAPS])
def test_bad_mappings(kwargs: dict, error: type[Exception], message: str) -> None:
    kwargs.setdefault("local_rank", 0)
    with pytest.raises(error) as caught:
        gpu_for_rank(ONE, **kwargs)
    assert str(caught.value).startswith(message), str(caught.value)


def test_unknown_local_world_size() -> None:
    info = launch_info({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})
    assert info.local_world_size is None and info.notes
    with pytest.raises(LaunchError, match="the number of processes on this machine is unknown"):
        gpu_for_rank(info, [0, 1])
