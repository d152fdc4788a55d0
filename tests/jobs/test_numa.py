"""NUMA affinity: each rank's GPU and CPU cores on one NUMA node (gpu_for_rank, plan_ranks, tfdevices launch)."""

from __future__ import annotations

import io
import os
import sys

import pytest

from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.topology import Topology
from tfdevices.jobs import launch_command, launcher
from tfdevices.jobs.env import LaunchInfo
from tfdevices.jobs.ranks import cpu_binding, gpu_for_rank, numa_cpus, plan_ranks

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
INFO = LaunchInfo(local_world_size=None, source="test", reason="test")


def fixture(name: str) -> Inventory:
    return Inventory.load(os.path.join(DATA, name))


@pytest.mark.parametrize(
    "rank, gpu, node, cpus",
    [
        (0, 0, 3, "48-63,176-191"),
        (2, 2, 1, "16-31,144-159"),
        (4, 4, 7, "112-127,240-255"),
        (7, 7, 5, "80-95,208-223"),
    ],
)
def test_each_rank_gets_the_cpus_of_its_gpus_numa_node(rank, gpu, node, cpus):
    inv = fixture("topo-dgx-a100-nvswitch.json")
    a = gpu_for_rank(INFO, inv, local_rank=rank, local_world_size=8)
    assert a.gpus == (gpu,) and a.numa_node == node
    assert a.cpus == inv.topology.cpus(gpu) and inv.topology.cpu_affinity[gpu] == cpus
    assert f"NUMA node {node}, CPUs {cpus}" in a.table()


def test_blocks_of_several_gpus_stay_on_one_node_where_they_can():
    # GPUs alternate between two nodes: blocks of 2 are drawn within a node
    topo = Topology(
        gpus=(0, 1, 2, 3),
        links=tuple(tuple("X" if i == j else "SYS" for j in range(4)) for i in range(4)),
        cpu_affinity=("0-7", "8-15", "0-7", "8-15"),
        numa_affinity=(0, 1, 0, 1),
    )
    plan = plan_ranks(INFO, [0, 1, 2, 3], local_world_size=2, topology=topo)
    assert [a.gpus for a in plan] == [(0, 2), (1, 3)]
    assert [(a.numa_node, a.cpus) for a in plan] == [(0, tuple(range(8))), (1, tuple(range(8, 16)))]
    # one GPU per rank: the order of GPUs is kept
    assert [a.gpus for a in plan_ranks(INFO, [0, 1, 2, 3], local_world_size=4, topology=topo)] == [
        (0,),
        (1,),
        (2,),
        (3,),
    ]


def test_one_numa_node_or_no_topology_binds_nothing():
    inv = fixture("topo-mig-a100.json")  # both GPUs on node 3
    assert gpu_for_rank(INFO, [0, 1], local_rank=0, local_world_size=2, topology=inv.topology).cpus == ()
    assert gpu_for_rank(INFO, [0, 1], local_rank=0, local_world_size=2).cpus == ()
    assert numa_cpus([0], None) == ((), None)


def test_a_rank_spanning_nodes_gets_both_nodes_cpus_and_no_node():
    topo = fixture("topo-pcie-4gpu-bridges.json").topology
    cpus, node = numa_cpus([1, 2], topo)
    assert node is None and cpus == tuple(
        sorted(set(range(16)) | set(range(32, 48)) | set(range(16, 32)) | set(range(48, 64)))
    )


def test_binding_keeps_to_the_cpus_this_process_may_use():
    topo = fixture("topo-pcie-4gpu-bridges.json").topology
    bound, notes = cpu_binding([(0,), (2,)], topo, {0, 1, 2})
    assert bound == {0: (0, 1, 2)}
    assert notes == (
        (
            "local rank 1 left unbound: the CPUs of NUMA node 1 (16-31,48-63) are not available to this "
            "process (it may use 0-2)."
        ),
    )


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0), reason="hardware: needs CPUs 0 and 1"
)
def test_launch_binds_each_worker_to_its_gpus_node():
    topo = Topology(gpus=(0, 1), links=(("X", "SYS"), ("SYS", "X")), cpu_affinity=("0", "1"), numa_affinity=(0, 1))
    out = io.StringIO()
    code = launcher.launch(
        [sys.executable, "-c", "import os; print('cpus', sorted(os.sched_getaffinity(0)))"],
        launcher.LaunchConfig(2, gpus=(0, 1), topology=topo, all_ranks=True),
        out=out,
    )
    text = out.getvalue()
    assert code == 0, text
    assert "[0] cpus [0]" in text and "[1] cpus [1]" in text
    assert "worker 0: CPUs 0 (its GPUs' NUMA node)" in text
    assert os.sched_getaffinity(0) >= {0, 1}  # the launcher's own thread is restored


def test_cpu_affinity_numa_without_a_topology_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "inv.json"
    path.write_text(Inventory.load(os.path.join(DATA, "node-8gpu.json")).to_json())
    monkeypatch.setenv("TFDEVICES_INVENTORY", str(path))
    with pytest.raises(Exception, match=r"^--cpu-affinity numa: the GPUs' topology is unknown"):
        launch_command._affinity_topology("numa", (0,))
    assert (
        launch_command._affinity_topology(None, (0,)) is None
        and launch_command._affinity_topology("none", (0,)) is None
    )
    path.write_text(fixture("topo-pcie-4gpu-bridges.json").to_json())
    assert launch_command._affinity_topology(None, (0, 2)).numa_nodes == (0, 1)
