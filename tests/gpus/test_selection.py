from __future__ import annotations

import itertools as _it
import os as _os

import pytest

from tests import inventories as inv
from tfdevices import InputError, Selection, SelectionError, SpecError, select
from tfdevices.core.record_class import FrozenRecordError
from tfdevices.gpus import selection as _sel, wiring as _wiring
from tfdevices.gpus.inventory import Inventory as _Inventory


@pytest.mark.parametrize(
    "spec, kwargs, chosen",
    [
        ("all", {}, ["0", "1", "2", "3", "4", "5", "6", "7"]),
        ("none", {}, []),
        ("cpu", {}, []),
        ("0,2", {}, ["0", "2"]),
        ("2,0", {}, ["2", "0"]),  # the mask keeps the order named: GPU 2 is TensorFlow's GPU:0
        (5, {}, ["5"]),
        ([7, 6], {}, ["7", "6"]),
        ("GPU-03aa", {}, ["3"]),
        ("auto:1", {}, ["0"]),  # most free memory
        ("auto:3", {}, ["0", "2", "4"]),
        ("auto:2", {"order": "utilization"}, ["0", "4"]),  # 0% busy, then the freest
        ("auto:2", {"order": "index"}, ["0", "1"]),
        ("auto:2", {"min_free_memory": "35GiB"}, ["0", "2"]),
        ("auto:2", {"max_utilization": 0.2}, ["0", "2"]),
        ("auto:3", {"max_utilization": 0.2, "order": "index"}, ["0", "2", "4"]),
        ("auto:2", {"exclude": "0"}, ["2", "4"]),
        ("auto:2", {"exclude": [0, 2]}, ["3", "4"]),
        ("all", {"min_free_memory": "30GiB"}, ["0", "2", "4"]),
        ("all", {"max_utilization": 0.1}, ["0", "2", "4", "6"]),  # GPU 7's utilization is unknown
        ("all", {"exclude": "0-5"}, ["6", "7"]),
        ("0,4", {"min_free_memory": 30 << 30}, ["0", "4"]),
    ],
)
def test_selection_table(spec, kwargs, chosen):
    sel = select(spec, inv.eight(), **kwargs)
    assert [g.key for g in sel.gpus] == chosen
    assert sel.cuda_visible_devices == (",".join(chosen) or "-1")
    assert sel.tf_names == tuple(f"GPU:{i}" for i in range(len(chosen)))
    assert [d.key for d in sel.decisions] == [str(i) for i in range(8)]
    assert {d.key for d in sel.decisions if d.taken} == set(chosen)


def test_every_decision_says_why():
    sel = select("auto:2", inv.eight(), min_free_memory="16GiB", max_utilization=0.5, exclude="4")
    reasons = {d.key: d.reason for d in sel.decisions}
    assert reasons["0"].startswith("taken")
    assert reasons["1"].startswith("10.0 GiB free < 16.0 GiB")
    assert reasons["4"].startswith("excluded")
    assert reasons["5"].startswith("2.0 GiB free")
    assert reasons["6"].startswith("15.0 GiB free < 16.0 GiB")
    assert reasons["3"].startswith("not among the best 2")
    assert "GPU 0     -> GPU:0" in sel.table()


def test_masked_gpus_are_never_candidates():
    masked = inv.eight(visible=[6, 2])  # CUDA_VISIBLE_DEVICES=6,2 set by a scheduler
    sel = select("all", masked)
    assert [g.key for g in sel.gpus] == ["6", "2"]  # the scheduler's order: GPU 6 stays GPU:0
    assert sel.cuda_visible_devices == "6,2"
    assert select("auto:1", masked).gpus[0].key == "2"
    reasons = {d.key: d.reason for d in sel.decisions}
    assert reasons["0"].startswith("hidden by CUDA_VISIBLE_DEVICES")
    with pytest.raises(SelectionError, match=r"^GPU spec '0': GPU 0 is hidden by CUDA_VISIBLE_DEVICES"):
        select("0", masked)
    with pytest.raises(SelectionError, match=r"^GPU spec 'auto:3': only 2 of 8 GPUs qualify"):
        select("auto:3", masked)


def test_mig_instances_are_selected_by_key_or_uuid():
    mig = inv.mig()
    sel = select("0:1,1", mig)
    assert sel.cuda_visible_devices == "MIG-bbbb-1111,1"
    assert sel.tf_names == ("GPU:0", "GPU:1")
    assert select("MIG-aaaa", mig).gpus[0].key == "0:0"
    assert [g.key for g in select("auto:1", mig).gpus] == ["1"]  # 30 GiB free beats 19 GiB
    with pytest.raises(SpecError, match=r"'0' names no GPU; this machine has 0:0 \(MIG-aaaa-0000\)"):
        select("0", mig)


def test_no_gpu_machine():
    empty = inv.empty()
    assert select("all", empty).is_cpu_only
    assert select("none", empty).cuda_visible_devices == "-1"
    assert select("all", empty, min_free_memory="1GiB").gpus == ()
    with pytest.raises(
        SelectionError,
        match=r"^GPU spec 'auto:1': only 0 of 0 GPUs qualify. This machine has no GPU "
        r"\(NVML library not found",
    ):
        select("auto:1", empty)
    with pytest.raises(SpecError, match=r"^GPU spec '0': '0' names no GPU; this machine has no GPU"):
        select("0", empty)


@pytest.mark.parametrize(
    "spec, kwargs, error, first_words",
    [
        ("9", {}, SpecError, "GPU spec '9': '9' names no GPU; this machine has 0 (GPU-00aa00-0000), 1"),
        ("0,9", {}, SpecError, "GPU spec '0,9': '9' names no GPU"),
        ("GPU-ff", {}, SpecError, "GPU spec 'GPU-ff': 'GPU-ff' names no GPU"),
        ("GPU-0", {}, SpecError, "GPU spec 'GPU-0': 'GPU-0' matches several GPUs"),
        ("auto:9", {}, SelectionError, "GPU spec 'auto:9': only 8 of 8 GPUs qualify"),
        (
            "auto:4",
            {"min_free_memory": "35GiB"},
            SelectionError,
            (
                "GPU spec 'auto:4' with min_free_memory=35.0 GiB: only 2 of 8 GPUs qualify. GPUs: GPU 0: ok; "
                "GPU 1: 10.0 GiB"
            ),
        ),
        ("1", {"max_utilization": 0.5}, SelectionError, "GPU spec '1': GPU 1 is utilization 95% > 50%"),
        (
            "1,5",
            {"min_free_memory": "16GiB"},
            SelectionError,
            "GPU spec '1,5': GPU 1 is 10.0 GiB free < 16.0 GiB; GPU 5 is 2.0 GiB free < 16.0 GiB",
        ),
        ("7", {"max_utilization": 0.5}, SelectionError, "GPU spec '7': GPU 7 is utilization unknown"),
        ("0", {"exclude": "0"}, SelectionError, "GPU spec '0': GPU 0 is excluded"),
        ("all", {"min_free_memory": "100GiB"}, SelectionError, "GPU spec 'all' with min_free_memory=100.0 GiB: no GPU"),
        ("all", {"min_free_memory": "100"}, InputError, "min_free_memory '100': a bare number is ambiguous"),
        ("all", {"min_free_memory": "lots"}, InputError, "min_free_memory 'lots': not a size"),
        ("all", {"max_utilization": 50}, InputError, "max_utilization=50: must be a fraction"),
        ("all", {"max_utilization": "0.5"}, InputError, "max_utilization='0.5': must be a fraction"),
        ("all", {"max_utilization": -0.1}, InputError, "max_utilization=-0.1: must be a fraction"),
        ("all", {"order": "memory"}, InputError, "order='memory': unknown order; known orders: links, free_memory"),
        ("all", {"exclude": "all"}, SpecError, "exclude 'all': must name GPUs"),
        ("all", {"exclude": "auto:1"}, SpecError, "exclude 'auto:1': must name GPUs"),
        ("all", {"exclude": "12"}, SpecError, "exclude '12': '12' names no GPU"),
        ("all", {"exclude": "x"}, SpecError, "exclude 'x': 'x' is not a GPU index"),
    ],
)
def test_bad_requests(spec, kwargs, error, first_words):
    with pytest.raises(error) as err:
        select(spec, inv.eight(), **kwargs)
    assert str(err.value).startswith(first_words), str(err.value)
    assert "HINT:" in str(err.value)


def test_selection_is_frozen_and_serialisable():
    sel = select("auto:2", inv.eight())
    with pytest.raises(FrozenRecordError):
        sel.spec = "all"  # type: ignore[misc]
    data = sel.to_dict()
    assert data["cuda_visible_devices"] == "0,2"
    assert [g["tf_name"] for g in data["gpus"]] == ["GPU:0", "GPU:1"]
    assert sel.env() == {"CUDA_VISIBLE_DEVICES": "0,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert isinstance(sel, Selection)


# ---------------------------------------------------------------- one GPU is one GPU

from tfdevices.gpus.inventory import Inventory  # noqa: E402
from tfdevices.gpus.selection import first_overlap, resolve_gpus  # noqa: E402


def _mig_machine() -> Inventory:
    """As NVML reports a MIG-mode GPU: the parent (masked: CUDA sees only its instances) and two instances."""
    parent = inv.gpu(0, "A100-SXM4-40GB", 40, 30, None, ordinal=-1, uuid="GPU-77aa0000-0000")
    return Inventory(gpus=(parent, *inv.mig().gpus[:2], inv.mig().gpus[2]), source="nvml")


@pytest.mark.parametrize(
    "spec, first_words",
    [
        (
            "0,GPU-00aa00-0000",
            (
                "GPU spec '0,GPU-00aa00-0000': 'GPU-00aa00-0000' is GPU 0 (GPU-00aa00-0000), named "
                "before as '0'; one GPU is one GPU"
            ),
        ),
        ("GPU-00aa00-0000,0", "GPU spec 'GPU-00aa00-0000,0': '0' is GPU 0"),
        ("GPU-03a,GPU-03aa03", "GPU spec 'GPU-03a,GPU-03aa03': 'GPU-03aa03' is GPU 3"),  # two prefixes of one UUID
        (
            "GPU-03A,GPU-03aa03",
            "GPU spec 'GPU-03A,GPU-03aa03': 'GPU-03aa03' is GPU 3",
        ),  # a UUID's case does not make it another GPU
        (["1", 1], "GPU spec ['1', 1]: GPU 1 named more than once"),
        ([2, "GPU-02aa02"], "GPU spec [2, 'GPU-02aa02']: 'GPU-02aa02' is GPU 2"),  # echoed as given
    ],
)
def test_one_gpu_named_twice_is_refused(spec, first_words):
    with pytest.raises(SpecError) as err:
        select(spec, inv.eight())
    assert str(err.value).startswith(first_words) and "HINT: name each GPU once" in str(err.value)


@pytest.mark.parametrize(
    "spec, first_words",
    [
        ("0:0,0", "GPU spec '0:0,0': '0' is GPU 0 (GPU-77aa0000-0000), the parent of MIG instance 0:0"),
        ("0,0:1", "GPU spec '0,0:1': '0:1' is MIG instance 0:1 (MIG-bbbb-1111) of GPU 0"),
        ("0:0,MIG-aaaa", "GPU spec '0:0,MIG-aaaa': 'MIG-aaaa' is GPU 0:0 (MIG-aaaa-0000), named before as '0:0'"),
    ],
)
def test_mig_instance_and_its_parent_are_one_gpu(spec, first_words):
    with pytest.raises(SpecError) as err:
        select(spec, _mig_machine())
    assert str(err.value).startswith(first_words)


def test_two_mig_instances_of_one_gpu_are_two_devices():
    assert select("0:0,0:1", _mig_machine()).cuda_visible_devices == "MIG-aaaa-0000,MIG-bbbb-1111"


def test_select_never_exports_one_gpu_twice():
    machine = inv.eight()
    for spec in ("0", "0,1", "GPU-00aa", [3, "GPU-04aa"], "7,0-2"):
        mask = select(spec, machine).cuda_visible_devices.split(",")
        assert len(mask) == len(set(mask))


def test_exclude_names_gpus_once_too():
    with pytest.raises(SpecError, match="^exclude '0,GPU-00aa': 'GPU-00aa' is GPU 0"):
        select("auto:1", inv.eight(), exclude="0,GPU-00aa")


def test_resolve_gpus_keeps_the_order_given_and_refuses_other_kinds():
    assert [g.key for g in resolve_gpus("5,GPU-01aa,3", inv.eight(), what="--gpus")] == ["5", "1", "3"]
    with pytest.raises(SpecError, match="^--gpus 'auto:2': must name GPUs"):
        resolve_gpus("auto:2", inv.eight(), what="--gpus")


def test_first_overlap_is_linear_and_exact():
    gpus = [inv.gpu(i, "A100", 80, 80, 0.0, uuid=f"GPU-{i:06d}") for i in range(1000)]
    assert first_overlap(gpus) is None
    (i, _), (j, _) = first_overlap(gpus + [gpus[500]])
    assert (i, j) == (500, 1000)


def test_errors_on_a_large_machine_stay_short():
    machine = Inventory(
        gpus=tuple(inv.gpu(i, "A100", 80, 1, 0.9, uuid=f"GPU-{i:04d}-big") for i in range(1000)), source="nvml"
    )
    for call in (
        lambda: select("auto:2", machine, min_free_memory="8GiB"),
        lambda: select("1023", machine),
        lambda: select("GPU-9999", machine),
    ):
        with pytest.raises((SpecError, SelectionError)) as err:
            call()
        assert "more" in str(err.value) and len(str(err.value)) < 1500


# --- choosing by wiring, on the published topologies (tests/data/topo-*.json) -------------------------------

_DATA = _os.path.join(_os.path.dirname(_os.path.dirname(__file__)), "data")
TOPOLOGIES = [
    "topo-dgx-a100-nvswitch.json",
    "topo-dgx1-v100-cubemesh.json",
    "topo-pcie-4gpu-bridges.json",
    "topo-mig-a100.json",
]


def _topo(name: str) -> _Inventory:
    return _Inventory.load(_os.path.join(_DATA, name))


def _brute_best(inventory: _Inventory, count: int) -> set[str]:
    """Every set of `count` qualifying GPUs, ranked by (weakest link, links in all, free memory, lowest indices)."""
    pool = [g for g in inventory.gpus if g.visible]
    link = lambda a, b: _sel._link(pool[a], pool[b], inventory.topology)
    best = max(
        _it.combinations(range(len(pool)), count), key=lambda s: _wiring.key(s, link, [g.memory_free for g in pool])
    )
    return {pool[i].key for i in best}


@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("count", [2, 4])
def test_auto_picks_the_best_linked_set_as_brute_force_does(name, count):
    inventory = _topo(name)
    if count > len(inventory.visible):  # the MIG node shows 3 devices: asking for 4 is a clear error
        with pytest.raises(SelectionError, match=f"auto:{count}"):
            select(f"auto:{count}", inventory)
        return
    sel = select(f"auto:{count}", inventory)
    assert {g.key for g in sel.gpus} == _brute_best(inventory, count)
    assert sel.table().splitlines()[1].startswith("  links: ")
    assert f"the best-linked of {len(list(_it.combinations(inventory.visible, count))):,} set" in sel.wiring


@pytest.mark.parametrize(
    "name, count, gpus, words",
    [
        ("topo-dgx-a100-nvswitch.json", 2, ["3", "5"], "all NVLink (weakest NV12"),  # all alike: the most free memory
        ("topo-dgx-a100-nvswitch.json", 4, ["1", "3", "5", "6"], "all NVLink (weakest NV12"),
        ("topo-dgx1-v100-cubemesh.json", 2, ["0", "4"], "all NVLink (weakest NV2, GPU 0-4)"),  # a doubled link
        ("topo-dgx1-v100-cubemesh.json", 4, ["0", "1", "2", "3"], "all NVLink (weakest NV1"),  # a fully linked quad
        ("topo-pcie-4gpu-bridges.json", 2, ["0", "1"], "all NVLink (weakest NV4, GPU 0-1)"),
        ("topo-pcie-4gpu-bridges.json", 4, ["0", "1", "2", "3"], "weakest link SYS (across CPU sockets"),
        ("topo-mig-a100.json", 2, ["0", "1:2"], "weakest link MIG (no peer-to-peer"),
    ],
)
def test_the_table_says_why(name, count, gpus, words):
    sel = select(f"auto:{count}", _topo(name))
    assert [g.key for g in sel.gpus] == gpus
    assert sel.wiring.startswith(words), sel.wiring
    assert f"  links: {sel.wiring}" in sel.table()
    taken = [d for d in sel.decisions if d.taken]
    assert all(" to GPU " in d.reason for d in taken)
    assert all(d.reason.startswith(("not among the best-linked", "hidden")) for d in sel.decisions if not d.taken)


def test_pcie_box_nvlink_pair_beats_two_emptier_gpus_on_different_sockets_unless_free_memory_is_asked():
    inventory = _topo("topo-pcie-4gpu-bridges.json")
    free = {g.key: g.memory_free for g in inventory.gpus}
    assert free["0"] == free["2"] > free["1"] > free["3"]  # GPUs 0 and 2 (different sockets) are the emptiest
    wired = select("auto:2", inventory)
    blind = select("auto:2", inventory, order="free_memory")
    assert [g.key for g in wired.gpus] == ["0", "1"] and wired.wiring.startswith("all NVLink (weakest NV4")
    assert [g.key for g in blind.gpus] == ["0", "2"]
    assert blind.wiring.startswith("weakest link SYS (across CPU sockets, GPU 0-2); order='free_memory' ignores")
    assert "SYS to GPU 2" in blind.decisions[0].reason


def test_filters_apply_before_the_wiring():
    inventory = _topo("topo-pcie-4gpu-bridges.json")
    sel = select("auto:2", inventory, exclude="1")
    assert [g.key for g in sel.gpus] == ["2", "3"]  # with GPU 1 out, the other bridged pair
    sel = select("auto:2", inventory, exclude="1,3")
    assert [g.key for g in sel.gpus] == ["0", "2"] and sel.wiring.startswith("weakest link SYS")


def test_without_topology_links_order_is_free_memory_order():
    for count in (1, 2, 3, 5):
        assert (
            select(f"auto:{count}", inv.eight()).gpus == select(f"auto:{count}", inv.eight(), order="free_memory").gpus
        )
    assert select("auto:2", inv.eight()).wiring == ""


def test_wiring_goes_into_json():
    data = select("auto:2", _topo("topo-pcie-4gpu-bridges.json")).to_dict()
    assert data["wiring"].startswith("all NVLink")


# --- a newcomer's inputs: the answer in the order asked, the input as typed, a hint that fits the case ---


def test_an_explicit_spec_keeps_the_order_named_as_a_mask_does():
    sel = select("7,6", inv.eight())
    assert sel.cuda_visible_devices == "7,6" and [g.key for g in sel.gpus] == ["7", "6"]
    assert "GPU 7     -> GPU:0" in sel.table() and "GPU 6     -> GPU:1" in sel.table()
    assert select("auto:2", inv.eight(), order="index").cuda_visible_devices == "0,1"  # chosen, not named: NVML order


@pytest.mark.parametrize("spec, typed", [("0-9", "'0-9'"), (" 9", "' 9'"), ([9, 0], "[9, 0]")])
def test_errors_echo_the_spec_as_typed(spec, typed):
    with pytest.raises(SpecError) as err:
        select(spec, inv.eight())
    assert str(err.value).startswith(f"GPU spec {typed}: "), str(err.value)


def test_an_inventory_from_a_file_is_named_not_called_this_machine(tmp_path):
    path = tmp_path / "node.json"
    path.write_text(inv.eight().to_json())
    with pytest.raises(SpecError) as err:
        select("9", _Inventory.load(str(path)))
    assert f"the inventory {path} has 0 (" in str(err.value)
    assert "this machine" not in str(err.value) and "source:" not in str(err.value)


@pytest.mark.parametrize(
    "spec, kwargs, inventory, hint",
    [
        ("auto:10", {}, inv.eight(), "HINT: ask for at most 'auto:8'."),
        (
            "auto:9",
            {"min_free_memory": "30GiB"},
            inv.eight(),
            "HINT: ask for at most 'auto:3', or relax the filters, or wait for GPUs to free up.",
        ),
        (
            "auto:3",
            {},
            inv.eight(visible=[1, 2]),
            "HINT: ask for at most 'auto:2', or start without the CUDA_VISIBLE_DEVICES that hides the others",
        ),
        ("3", {}, inv.eight(visible=[1, 2]), "HINT: pick among the GPUs visible here (1, 2)"),
        ("3", {"exclude": "3"}, inv.eight(), "HINT: leave GPU 3 out of exclude; or use 'auto:N'"),
        ("1", {"max_utilization": 0.5}, inv.eight(), "HINT: choose other GPUs or relax the filters; or use 'auto:N'"),
        ("0,2", {}, inv.empty(), "HINT: run on the CPU: 'none' (or 'all', which falls back to the CPU)."),
        ("9", {}, inv.eight(), "HINT: name one of 0, 1, 2, 3, 4, 5, 6, 7 ('tfdevices list' shows them), or 'none'"),
    ],
)
def test_the_hint_is_the_fix_for_this_case(spec, kwargs, inventory, hint):
    with pytest.raises((SpecError, SelectionError)) as err:
        select(spec, inventory, **kwargs)
    assert hint in str(err.value), str(err.value)
    assert "relax the filters" not in str(err.value) or kwargs.get("min_free_memory") or kwargs.get("max_utilization")


def test_the_command_lines_terms_name_its_flags():
    from tfdevices.core.errors import CLI

    with pytest.raises(InputError, match=r"^--min-free-memory '8': a bare number"):
        select("all", inv.eight(), min_free_memory="8", terms=CLI)
    with pytest.raises(SpecError, match=r"^--exclude 'GPU:0': .* HINT: write '0'"):
        select("all", inv.eight(), exclude="GPU:0", terms=CLI)
    with pytest.raises(SelectionError, match=r"^GPU spec 'auto:4' with --min-free-memory 35.0 GiB: only 2"):
        select("auto:4", inv.eight(), min_free_memory="35GiB", terms=CLI)
