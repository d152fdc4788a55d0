"""Rank-to-GPU plans under hostile input: one GPU is one GPU, and planning is linear at cluster scale."""

from __future__ import annotations

import pytest

from tests import inventories as inv
from tfdevices.core.errors import LaunchError, SelectionError
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.selection import Selection, select
from tfdevices.jobs.env import LaunchInfo
from tfdevices.jobs.ranks import MAX_LOCAL_RANKS, gpu_for_rank, plan_ranks

ONE = LaunchInfo()


@pytest.mark.parametrize("kwargs, error, first_words", [
    (dict(local_world_size=2, gpus=[0, 0]), LaunchError, "gpus [0, 0] names GPU 0 more than once"),
    (dict(local_world_size=1, gpus=[3, 1, 3, 1]), LaunchError, "gpus [3, 1, 3, 1] names GPU 1,3 more than once"),
    (dict(local_world_size=2, gpus=[0, 1], mapping=[[0, 0], [1]]), LaunchError,
     "mapping[0] [0, 0] names GPU 0 more than once"),
    (dict(local_world_size=2, gpus=[0, 1], mapping=[0, 0]), SelectionError,
     "the explicit mapping puts 2 local ranks on GPU 0"),
    (dict(local_world_size=3, gpus=[0, 1, 2], mapping=lambda r, c: c[0]), SelectionError,
     "the function mapping puts 3 local ranks on GPU 0"),
    (dict(local_world_size=MAX_LOCAL_RANKS + 1, gpus=[0], share=True), LaunchError,
     "local_world_size=1,000,001: more than 1,000,000 processes"),
])
def test_one_gpu_is_one_gpu_in_rank_plans(kwargs, error, first_words):
    with pytest.raises(error) as err:
        gpu_for_rank(ONE, local_rank=0, **kwargs)
    assert str(err.value).startswith(first_words) and "HINT:" in str(err.value)


def test_sharing_is_allowed_when_asked_for():
    assert gpu_for_rank(ONE, local_rank=1, local_world_size=2, gpus=[0, 1], mapping=[0, 0], share=True).gpus == (0,)


def test_a_selection_of_two_mig_instances_of_one_gpu_is_one_gpu():
    machine = inv.mig()
    sel = select("0:0,0:1", machine)
    with pytest.raises(LaunchError, match="names GPU 0 more than once"):
        gpu_for_rank(ONE, sel, local_rank=0, local_world_size=1)
    doubled = Selection(spec="1,1", gpus=(machine.gpus[2],) * 2)
    with pytest.raises(LaunchError, match="selection '1,1'"):
        plan_ranks(ONE, doubled, local_world_size=1)


def test_an_inventory_of_mig_instances_offers_their_gpu_once():
    a = gpu_for_rank(ONE, inv.mig(), local_rank=0, local_world_size=2)
    assert a.candidates == (0, 1)


def test_plan_ranks_matches_gpu_for_rank_rank_by_rank():
    for kwargs in (dict(gpus=[4, 5, 6, 7]), dict(gpus=[0, 1], share=True),
                   dict(gpus=[0, 1, 2], mapping="weighted", speeds={0: 3.0, 1: 2.0, 2: 1.0}, share=True),
                   dict(gpus=[]), dict(gpus=inv.eight())):
        plans = plan_ranks(ONE, local_world_size=4, **kwargs)
        assert tuple(plans) == tuple(gpu_for_rank(ONE, local_rank=r, local_world_size=4, **kwargs) for r in range(4))
        assert plans[-1] == plans[3] and plans[1:3] == tuple(plans)[1:3] and len(plans) == 4
    with pytest.raises(IndexError, match="local rank 4 is out of range 0..3"):
        plan_ranks(ONE, [0, 1], local_world_size=4, share=True)[4]


@pytest.mark.parametrize("n", [1000, 16_000])
def test_planning_many_ranks(n):
    plans = plan_ranks(ONE, local_world_size=n, gpus=list(range(8)), share=True)
    assert len(plans) == n and plans[-1].gpus == ((n - 1) % 8,)
    assert plans[0].memory_fraction == pytest.approx(8 / n)
    one_each = plan_ranks(ONE, local_world_size=n, gpus=list(range(n)))
    assert [a.gpus[0] for a in one_each] == list(range(n))
    weighted = plan_ranks(ONE, local_world_size=n, gpus=[0, 1], mapping="weighted", speeds={0: 3.0, 1: 1.0},
                          share=True)
    assert sum(a.gpus == (0,) for a in weighted) == 3 * n // 4


def test_weighted_sharing_follows_dhondt():
    plan = gpu_for_rank(ONE, local_rank=0, local_world_size=7, gpus=[0, 1, 2], mapping="weighted",
                        speeds={0: 4.0, 1: 2.0, 2: 1.0}, share=True).plan
    assert [p[0] for p in plan] == [0, 0, 0, 0, 1, 1, 2]


def test_inventory_candidates_use_the_allocation_in_order():
    info = LaunchInfo(gpus=(5, 2), gpus_variable="SLURM_STEP_GPUS", local_world_size=2)
    assert gpu_for_rank(info, inv.eight(), local_rank=1).gpus == (2,)
    assert isinstance(inv.eight(), Inventory)
