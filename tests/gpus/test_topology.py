"""Topology: the published matrices served by the fake NVML come back as nvidia-smi prints them,
round-trip through JSON, and bad shapes are refused with a clear message."""

from __future__ import annotations

import glob
import json
import os

import pytest

from tests import fake_nvml as fk
from tfdevices.core.errors import InventoryFileError
from tfdevices.gpus import topology as tp
from tfdevices.gpus.discovery import discover
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.nvml import Nvml, NvmlDevice, NvmlSnapshot

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
FIXTURES = sorted(glob.glob(os.path.join(DATA, "topo-*.json")))
SWITCHES = {"topo-dgx-a100-nvswitch.json": 6}


def load(name: str) -> Inventory:
    return Inventory.load(os.path.join(DATA, name))


def served(name: str, **kwargs) -> Inventory:
    """The fixture served by the fake NVML and read back through the adapter and discovery."""
    fake = fk.from_inventory(load(name), switches=SWITCHES.get(name, 0), **kwargs)
    return discover(env={}, nvml_module=fake)


def test_there_are_four_topology_fixtures_each_naming_its_source():
    names = [os.path.basename(f) for f in FIXTURES]
    assert names == [
        "topo-dgx-a100-nvswitch.json",
        "topo-dgx1-v100-cubemesh.json",
        "topo-mig-a100.json",
        "topo-pcie-4gpu-bridges.json",
    ]
    for name in names:
        assert "github.com" in load(name).topology.origin or "issue" in load(name).topology.origin


@pytest.mark.parametrize("name", [os.path.basename(f) for f in FIXTURES])
def test_nvml_shapes_rebuild_the_published_matrix(name):
    want, got = load(name), served(name)
    assert got.topology.links == want.topology.links
    assert got.topology.cpu_affinity == want.topology.cpu_affinity
    assert got.topology.numa_affinity == want.topology.numa_affinity
    assert got.topology.origin == "nvml"
    keep = (
        "index",
        "name",
        "uuid",
        "pci_bus_id",
        "memory_total",
        "memory_used",
        "temperature",
        "fan_speed",
        "power_draw_mw",
        "power_limit_mw",
        "performance_state",
        "clock_sm_mhz",
        "clock_memory_mhz",
        "ecc_errors",
        "mig_enabled",
        "mig_index",
    )
    assert [{k: getattr(g, k) for k in keep} for g in got.gpus] == [{k: getattr(g, k) for k in keep} for g in want.gpus]


def test_nvswitch_links_count_the_links_each_gpu_has_to_the_switches():
    # a DGX A100: 12 links per GPU, 2 to each of 6 NVSwitches; nvidia-smi shows NV12 for every pair
    fake = fk.from_inventory(load("topo-dgx-a100-nvswitch.json"), switches=6)
    dev = Nvml(fake).snapshot(topology=True).devices[0]
    assert len(dev.nvlinks) == 12 and {b for b, _ in dev.nvlinks} == {fk.switch_bus_id(k).lower() for k in range(6)}
    assert {k for _, k in dev.nvlinks} == {"switch"}


def test_an_unnamed_far_end_that_is_no_gpu_is_an_invisible_nvswitch():
    # in a VM NVML may not name the far end; NCCL takes such links as NVSwitches, so does tfdevices
    devs = tuple(
        NvmlDevice(
            GpuInfo(i, "A100", f"GPU-{i}", f"00000000:0{i}:00.0"), nvlinks=(("00000000:c4:00.0", "unknown"),) * 12
        )
        for i in range(2)
    )
    topo = tp.from_nvml(NvmlSnapshot(devices=devs, ancestors=((None, 50), (50, None))))
    assert topo.links[0][1] == "NV12"


def test_pcie_levels_map_to_nvidia_smi_codes():
    levels = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS", None: None}
    for level, code in levels.items():
        devs = tuple(NvmlDevice(GpuInfo(i, "T4", f"GPU-{i}", f"00000000:0{i}:00.0")) for i in range(2))
        assert tp.from_nvml(NvmlSnapshot(devices=devs, ancestors=((None, level), (level, None)))).links[0][1] == code


def test_topology_is_not_read_unless_asked():
    fake = fk.from_inventory(load("topo-pcie-4gpu-bridges.json"))
    snap = Nvml(fake).snapshot()
    assert snap.ancestors == () and snap.devices[0].nvlinks is None
    assert "nvmlDeviceGetTopologyCommonAncestor" not in fake.calls
    assert discover(env={}, nvml_module=fake, topology=False).topology is None


def test_unreadable_wiring_is_none_not_an_exception():
    inv = load("topo-pcie-4gpu-bridges.json")
    fake = fk.from_inventory(inv)
    fake.gpus[0] = fk.replace(
        fake.gpus[0],
        fail=tuple(
            (f, fk.NVML_ERROR_NO_PERMISSION)
            for f in (
                "nvmlDeviceGetCpuAffinity",
                "nvmlDeviceGetMemoryAffinity",
                "nvmlDeviceGetTopologyCommonAncestor",
                "nvmlDeviceGetNvLinkState",
            )
        ),
    )
    topo = discover(env={}, nvml_module=fake).topology
    assert topo.cpu_affinity[0] is None and topo.numa_affinity[0] is None
    assert topo.links[0] == ("X", "NV4", None, None)  # GPU 1 still sees its bridge to GPU 0
    assert topo.links[2] == (None, "SYS", "X", "NV4")


@pytest.mark.parametrize("name", [os.path.basename(f) for f in FIXTURES])
def test_inventory_with_topology_round_trips_through_json(name):
    inv = load(name)
    again = Inventory.from_json(inv.to_json())
    assert again.topology == inv.topology and again.gpus == inv.gpus
    served_inv = served(name)
    assert Inventory.from_json(served_inv.to_json()).topology == served_inv.topology


def test_table_is_nvidia_smi_topo_m():
    lines = load("topo-dgx1-v100-cubemesh.json").topology.table().splitlines()
    assert lines[0].split() == [f"GPU{i}" for i in range(8)] + ["CPU", "Affinity", "NUMA", "Affinity"]
    assert lines[1].split() == ["GPU0", "X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS", "0-19,40-59", "0"]


def _bad(**change):
    data = json.loads(load("topo-pcie-4gpu-bridges.json").to_json())
    data["topology"].update(change)
    return json.dumps(data)


@pytest.mark.parametrize(
    "change, first_words",
    [
        (dict(links=[["X", "NV4"], ["NV4", "X"]]), "topology: links must be a 4 x 4 list of lists"),
        (dict(links="X"), "topology: links must be a 4 x 4"),
        (dict(gpus=[0, 1, 2, 9]), "topology: gpus names GPU(s) [9] that the inventory lacks"),
        (dict(gpus=[0, 1, 1, 2]), "topology: gpus=[0, 1, 1, 2] names a GPU twice"),
        (dict(gpus="0,1"), "topology: gpus='0,1' must be a list of NVML indices"),
        (
            dict(
                links=[
                    ["X", "NV4", "SYS", "SYS"],
                    ["NV4", "X", "SYS", "SYS"],
                    ["SYS", "SYS", "X", "NV4"],
                    ["SYS", "SYS", "NV4", "NVLINK"],
                ]
            ),
            "topology: links[3][3]='NVLINK' is not a link code",
        ),
        (
            dict(
                links=[
                    ["X", "NV4", "SYS", "SYS"],
                    ["NV2", "X", "SYS", "SYS"],
                    ["SYS", "SYS", "X", "NV4"],
                    ["SYS", "SYS", "NV4", "X"],
                ]
            ),
            "topology: links[1][0]='NV2' but links[0][1]='NV4'",
        ),
        (
            dict(
                links=[
                    ["SYS", "NV4", "SYS", "SYS"],
                    ["NV4", "X", "SYS", "SYS"],
                    ["SYS", "SYS", "X", "NV4"],
                    ["SYS", "SYS", "NV4", "X"],
                ]
            ),
            "topology: links[0][0]='SYS'; a GPU's link to itself is 'X'",
        ),
        (
            dict(
                links=[
                    ["X", "NV0", "SYS", "SYS"],
                    ["NV0", "X", "SYS", "SYS"],
                    ["SYS", "SYS", "X", "NV4"],
                    ["SYS", "SYS", "NV4", "X"],
                ]
            ),
            "topology: links[0][1]='NV0' is not a link code",
        ),
        (dict(cpu_affinity=["0-15", "15-0", "1", "2"]), "topology: cpu_affinity[1] '15-0': '15-0' is not a range"),
        (dict(cpu_affinity=["0-99999", "1", "1", "2"]), "topology: cpu_affinity[0] '0-99999'"),
        (dict(cpu_affinity=["0-3"]), "topology: cpu_affinity must be a list with one entry per GPU (4)"),
        (dict(numa_affinity=[0, 0, -1, 1]), "topology: numa_affinity[2]=-1 must be a NUMA node number"),
        (dict(numa_affinity=[0, 0, True, 1]), "topology: numa_affinity[2]=True must be a NUMA node number"),
        (dict(origin=7), "topology: origin=7 must be a string"),
        (dict(wires=[]), "topology: unknown field(s) ['wires']"),
    ],
)
def test_bad_topology_is_refused_clearly(change, first_words):
    with pytest.raises(InventoryFileError) as err:
        Inventory.from_json(_bad(**change), where="f.json")
    assert str(err.value).startswith(f"f.json: {first_words}"), str(err.value)
    assert "HINT:" in str(err.value)


def test_topology_that_is_not_an_object_is_refused():
    data = json.loads(load("topo-mig-a100.json").to_json())
    data["topology"] = [1, 2]
    with pytest.raises(
        InventoryFileError, match=r"^x: topology=\[1, 2\] must be an object \(a topology\) or null; it is a list"
    ):
        Inventory.from_json(json.dumps(data), where="x")


@pytest.mark.parametrize("cpus", [[0], [0, 1, 2, 3], [5, 7, 9], list(range(64, 130)) + [3]])
def test_cpu_lists_round_trip(cpus):
    assert tp.parse_cpus(tp.format_cpus(cpus)) == tuple(sorted(set(cpus)))
