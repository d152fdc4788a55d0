"""CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER: syntax, CUDA order, ordinals, TF names, refusals."""

from __future__ import annotations

import pytest

from tests import fake_nvml as fk
from tfdevices.core.errors import EnvVarError
from tfdevices.gpus import visibility as vis
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory

FAKES = fk.eight_gpus()


def _gpus() -> tuple[list[GpuInfo], dict[str, vis.MigIds]]:
    """The 8 fake GPUs as GpuInfo, GPU 5 followed by its 2 MIG instances."""
    gpus, ids = [], {}
    for n, f in enumerate(FAKES):
        gpus.append(GpuInfo(index=n, name=f.name, uuid=f.uuid, pci_bus_id=f.pci_bus_id, compute_capability=f.cc))
        for m in f.mig or ():
            g = GpuInfo(
                index=n, name=m.name, uuid=m.uuid, pci_bus_id=f.pci_bus_id, compute_capability=f.cc, mig_index=m.slot
            )
            gpus.append(g)
            ids[g.key] = vis.MigIds(f.uuid, m.gi, m.ci)
    return gpus, ids


GPUS, MIG_IDS = _gpus()
PCI_ORDER = ["0", "1", "2", "3", "4", "5:1", "5:2", "6", "7"]  # GPU 5 is enumerated as its MIG instances
FAST_ORDER = ["7", "0", "1", "5:1", "5:2", "4", "6", "2", "3"]  # cc 9.0, 8.0, 7.5, 7.0; then PCI bus id
MIG5 = [m.uuid for m in FAKES[5].mig]


def _mapping(env: dict[str, str]) -> dict[str, int]:
    out = vis.resolve(GPUS, env, mig_ids=MIG_IDS)
    for g in out.gpus:
        assert g.tf_name == (None if g.cuda_ordinal is None else f"/GPU:{g.cuda_ordinal}")
    return {g.key: g.cuda_ordinal for g in out.gpus if g.cuda_ordinal is not None}


@pytest.mark.parametrize(
    "value, kinds",
    [
        ("0", ["index"]),
        ("0,2", ["index", "index"]),
        (" 3 ,  1 ", ["index", "index"]),
        ("GPU-8f2a", ["gpu"]),
        ("GPU-8F2A-11c0", ["gpu"]),
        ("MIG-5b1c0d2e-aaaa", ["mig"]),
        ("MIG-GPU-8f2a0000/1/0", ["mig-legacy"]),
        ("1,GPU-8f2a,MIG-5b1c", ["index", "gpu", "mig"]),
    ],
)
def test_mask_syntax(value: str, kinds: list[str]) -> None:
    tokens = vis.parse_visible_devices(value)
    assert [t.kind for t in tokens] == kinds
    assert [t.text for t in tokens] == [p.strip() for p in value.split(",")]


@pytest.mark.parametrize("value, expected", [(None, None), ("", ()), ("-1", ()), ("  ", ()), (" -1 ", ())])
def test_unset_shows_all_and_empty_or_minus_one_hide_all(value: str | None, expected: tuple | None) -> None:
    assert vis.parse_visible_devices(value) == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, "FASTEST_FIRST"),
        ("", "FASTEST_FIRST"),
        ("FASTEST_FIRST", "FASTEST_FIRST"),
        ("PCI_BUS_ID", "PCI_BUS_ID"),
        (" PCI_BUS_ID ", "PCI_BUS_ID"),
    ],
)
def test_device_order(value: str | None, expected: str) -> None:
    assert vis.parse_device_order(value) == expected


@pytest.mark.parametrize(
    "order, expected", [("PCI_BUS_ID", PCI_ORDER), (None, FAST_ORDER), ("FASTEST_FIRST", FAST_ORDER)]
)
def test_cuda_enumeration_order(order: str | None, expected: list[str]) -> None:
    env = {} if order is None else {"CUDA_DEVICE_ORDER": order}
    out = vis.resolve(GPUS, env, mig_ids=MIG_IDS)
    assert list(out.enumeration) == expected
    assert _mapping(env) == {k: n for n, k in enumerate(expected)}
    estimated = [n for n in out.notes if "estimated" in n]
    assert bool(estimated) == (out.order == "FASTEST_FIRST")
    assert all("CUDA_DEVICE_ORDER=PCI_BUS_ID" in n for n in estimated)
    assert any("GPU 5 is in MIG mode" in n for n in out.notes)


@pytest.mark.parametrize("order", [None, "PCI_BUS_ID"])
def test_identical_gpus_fastest_first_is_pci_order_without_note(order: str | None) -> None:
    same = [
        GpuInfo(
            index=n, name="A100", uuid=fk.uuid(n), pci_bus_id=f"0000:{0x40 - n:02x}:00.0", compute_capability=(8, 0)
        )
        for n in range(4)
    ]
    env = {} if order is None else {"CUDA_DEVICE_ORDER": order}
    out = vis.resolve(same, env)
    assert list(out.enumeration) == [g.key for g in sorted(same, key=lambda g: g.pci_bus_id)]
    assert out.notes == ()


_PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@pytest.mark.parametrize(
    "env, visible",
    [
        ({}, FAST_ORDER),
        (_PCI, PCI_ORDER),
        ({**_PCI, "CUDA_VISIBLE_DEVICES": "0"}, ["0"]),
        ({"CUDA_VISIBLE_DEVICES": "0"}, ["7"]),  # index 0 in FASTEST_FIRST = the H100
        ({**_PCI, "CUDA_VISIBLE_DEVICES": "2,0"}, ["2", "0"]),  # CUDA ordinals follow the mask's order
        ({**_PCI, "CUDA_VISIBLE_DEVICES": " 3 , 1 "}, ["3", "1"]),
        ({**_PCI, "CUDA_VISIBLE_DEVICES": "5,6"}, ["5:1", "5:2"]),  # indices count MIG instances
        ({**_PCI, "CUDA_VISIBLE_DEVICES": fk.uuid(4)}, ["4"]),
        ({**_PCI, "CUDA_VISIBLE_DEVICES": fk.uuid(4)[:12]}, ["4"]),  # a uuid prefix
        ({"CUDA_VISIBLE_DEVICES": f"{fk.uuid(6)},{fk.uuid(1)[:12]}"}, ["6", "1"]),
        ({**_PCI, "CUDA_VISIBLE_DEVICES": MIG5[1]}, ["5:2"]),
        ({**_PCI, "CUDA_VISIBLE_DEVICES": f"MIG-GPU-{fk.uuid(5)[4:]}/1/0,0"}, ["5:1", "0"]),
        ({**_PCI, "CUDA_VISIBLE_DEVICES": f"8,{MIG5[0]},{fk.uuid(2)}"}, ["7", "5:1", "2"]),  # CUDA 8 = NVML 7
        ({**_PCI, "CUDA_VISIBLE_DEVICES": MIG5[0].upper()}, ["5:1"]),
        ({**_PCI, "CUDA_VISIBLE_DEVICES": ""}, []),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, []),
    ],
)
def test_mask_gives_cuda_ordinals_and_tf_names(env: dict[str, str], visible: list[str]) -> None:
    assert _mapping(env) == {k: n for n, k in enumerate(visible)}


@pytest.mark.parametrize("mask", ["", "-1"])
def test_all_hidden_says_so(mask: str) -> None:
    out = vis.resolve(GPUS, {"CUDA_VISIBLE_DEVICES": mask}, mig_ids=MIG_IDS)
    assert out.hidden_reason == f"all {len(PCI_ORDER)} GPUs are hidden: CUDA_VISIBLE_DEVICES is set to hide every GPU"


@pytest.mark.parametrize("mask", ["0", "0,9", fk.uuid(3), "MIG-GPU-abcd/1/0", ""])
def test_without_gpus_only_syntax_is_checked(mask: str) -> None:
    out = vis.resolve([], {"CUDA_VISIBLE_DEVICES": mask})
    assert (out.gpus, out.enumeration, out.hidden_reason) == ((), (), None)


@pytest.mark.parametrize(
    "env, first_words, also",
    [
        # CUDA_VISIBLE_DEVICES: syntax
        ({"CUDA_VISIBLE_DEVICES": "0,,1"}, "entry 2 of CUDA_VISIBLE_DEVICES is empty", "stray comma"),
        ({"CUDA_VISIBLE_DEVICES": "0,"}, "entry 2 of CUDA_VISIBLE_DEVICES is empty", "CUDA stops"),
        ({"CUDA_VISIBLE_DEVICES": ",0"}, "entry 1 of CUDA_VISIBLE_DEVICES is empty", "hides the rest"),
        ({"CUDA_VISIBLE_DEVICES": "-2"}, "entry 1 of CUDA_VISIBLE_DEVICES is a negative number", "lone '-1'"),
        ({"CUDA_VISIBLE_DEVICES": "0,-1"}, "entry 2 of CUDA_VISIBLE_DEVICES is a negative number", "lone '-1'"),
        ({"CUDA_VISIBLE_DEVICES": "abc"}, "entry 1 of CUDA_VISIBLE_DEVICES is neither", "GPU-<uuid>"),
        (
            {"CUDA_VISIBLE_DEVICES": "gpu-00000001"},
            "entry 1 of CUDA_VISIBLE_DEVICES is neither",
            "",
        ),
        ({"CUDA_VISIBLE_DEVICES": "GPU-"}, "entry 1 of CUDA_VISIBLE_DEVICES is neither", ""),
        ({"CUDA_VISIBLE_DEVICES": "GPU-xyz"}, "entry 1 of CUDA_VISIBLE_DEVICES is neither", ""),
        ({"CUDA_VISIBLE_DEVICES": "1.5"}, "entry 1 of CUDA_VISIBLE_DEVICES is neither", ""),
        ({"CUDA_VISIBLE_DEVICES": "0 1"}, "entry 1 of CUDA_VISIBLE_DEVICES is neither", ""),
        ({"CUDA_VISIBLE_DEVICES": "0;1"}, "entry 1 of CUDA_VISIBLE_DEVICES is neither", ""),
        (
            {"CUDA_VISIBLE_DEVICES": "MIG-GPU-abcd/1"},
            "entry 1 of CUDA_VISIBLE_DEVICES is neither",
            "",
        ),
        ({"CUDA_VISIBLE_DEVICES": "1,1"}, "entry 2 of CUDA_VISIBLE_DEVICES repeats entry 1", "once"),
        # CUDA_VISIBLE_DEVICES: names nothing that exists
        (
            {"CUDA_VISIBLE_DEVICES": "0,9"},
            "entry 2 of CUDA_VISIBLE_DEVICES is past the last GPU (CUDA's indices here run 0 to 8); this machine",
            "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "GPU-ffff"},
            "entry 1 of CUDA_VISIBLE_DEVICES names no GPU; this machine has",
            "nvidia-smi -L",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "GPU-0000000"},
            "entry 1 of CUDA_VISIBLE_DEVICES is the start of 7",
            "more of the uuid",
        ),
        ({"CUDA_VISIBLE_DEVICES": "MIG-ffff"}, "entry 1 of CUDA_VISIBLE_DEVICES names no GPU", ""),
        (
            {"CUDA_VISIBLE_DEVICES": f"MIG-GPU-{fk.uuid(5)[4:]}/3/0"},
            "entry 1 of CUDA_VISIBLE_DEVICES names no MIG",
            "MIG-<uuid>",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": fk.uuid(5)},
            "entry 1 of CUDA_VISIBLE_DEVICES is GPU 5, which is in MIG mode",
            "MIG-<uuid>",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": f"1,{fk.uuid(1)}"},
            "entry 2 of CUDA_VISIBLE_DEVICES names GPU 1 again (entry 1 named it)",
            "once",
        ),
        # CUDA_DEVICE_ORDER
        (
            {"CUDA_DEVICE_ORDER": "pci_bus_id"},
            "CUDA_DEVICE_ORDER is set to something other than a CUDA device order",
            "PCI_BUS_ID",
        ),
        (
            {"CUDA_DEVICE_ORDER": "PCI"},
            "CUDA_DEVICE_ORDER is set to something other than a CUDA device order",
            "nvidia-smi",
        ),
        (
            {"CUDA_DEVICE_ORDER": "FASTEST"},
            "CUDA_DEVICE_ORDER is set to something other than a CUDA device order",
            "FASTEST_FIRST",
        ),
        (
            {"CUDA_DEVICE_ORDER": "1"},
            "CUDA_DEVICE_ORDER is set to something other than a CUDA device order",
            "silently",
        ),
    ],
)
def test_malformed_environment_is_refused_naming_the_variable(env: dict[str, str], first_words: str, also: str) -> None:
    with pytest.raises(EnvVarError) as info:
        vis.resolve(GPUS, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **env}, mig_ids=MIG_IDS)
    assert str(info.value).startswith(first_words)
    assert also in str(info.value)
    assert info.value.hint


def test_index_error_lists_cuda_order_when_it_differs_from_nvml() -> None:
    with pytest.raises(EnvVarError) as info:
        vis.resolve(GPUS, {"CUDA_VISIBLE_DEVICES": "9"}, mig_ids=MIG_IDS)
    assert f"CUDA indices 0..8 are, in order, {', '.join(FAST_ORDER)}" in info.value.message


def test_legacy_mig_form_needs_instance_ids() -> None:
    with pytest.raises(EnvVarError, match="a saved listing does not keep MIG instance ids"):
        vis.resolve(GPUS, {"CUDA_VISIBLE_DEVICES": f"MIG-GPU-{fk.uuid(5)[4:]}/1/0"})


@pytest.mark.parametrize("env", [{"CUDA_VISIBLE_DEVICES": "1"}, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, {}])
def test_apply_replaces_old_visibility_notes_and_keeps_others(env: dict[str, str]) -> None:
    stale = Inventory(
        gpus=tuple(GPUS),
        source="nvml",
        notes=("GPU 9 left out: lost.", "CUDA order estimated: old"),
        reason="all 9 GPUs are hidden: CUDA_VISIBLE_DEVICES is set to hide every GPU",
        cuda_visible_devices="-1",
    )
    fresh = vis.apply(stale, env, mig_ids=MIG_IDS)
    expected = vis.resolve(GPUS, env, mig_ids=MIG_IDS)
    assert fresh.notes == ("GPU 9 left out: lost.",) + expected.notes
    assert (fresh.gpus, fresh.reason) == (expected.gpus, None)
    assert (fresh.cuda_visible_devices, fresh.cuda_device_order) == (
        env.get("CUDA_VISIBLE_DEVICES"),
        env.get("CUDA_DEVICE_ORDER"),
    )


# ---------------------------------------------------------------- hostile masks: digits, sizes, fuzzing

from hypothesis import (  # noqa: E402
    given,
    settings,
    strategies as st,
)

from tfdevices.core.errors import TfDevicesError  # noqa: E402


@pytest.mark.parametrize(
    "mask, first_words",
    [
        ("\u0663", "entry 1 of CUDA_VISIBLE_DEVICES is neither a GPU index nor"),  # CUDA would not see GPU 3
        ("0,\uff11", "entry 2 of CUDA_VISIBLE_DEVICES is neither"),
        ("\u00b2", "entry 1 of CUDA_VISIBLE_DEVICES is neither"),
        ("-\u0661", "entry 1 of CUDA_VISIBLE_DEVICES is neither"),
        ("9" * 5000, "entry 1 of CUDA_VISIBLE_DEVICES is a number too large"),
        (",".join(["0"] * 100_000), "CUDA_VISIBLE_DEVICES lists more than 1024 entries"),
        ("MIG-GPU-8f2a/\u0661/0", "entry 1 of CUDA_VISIBLE_DEVICES is neither"),
    ],
)
def test_hostile_masks_are_refused_shortly(mask: str, first_words: str) -> None:
    with pytest.raises(EnvVarError) as err:
        vis.parse_visible_devices(mask)
    text = str(err.value)
    assert text.startswith(first_words) and "HINT:" in text and len(text) < 500


def test_non_ascii_digit_never_selects_a_gpu() -> None:
    with pytest.raises(EnvVarError):
        vis.resolve(GPUS, {"CUDA_VISIBLE_DEVICES": "\u0663"}, mig_ids=MIG_IDS)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789,- GPUMIabcdef/\u0663\uff11", max_size=30),
        st.lists(st.integers(-2, 10**12).map(str), max_size=20).map(",".join),
        st.text(max_size=20),
    )
)
def test_fuzz_masks_raise_only_our_errors(mask: str) -> None:
    try:
        tokens = vis.parse_visible_devices(mask)
        out = vis.resolve(GPUS, {"CUDA_VISIBLE_DEVICES": mask}, mig_ids=MIG_IDS)
    except TfDevicesError as err:
        assert isinstance(err, EnvVarError) and "HINT:" in str(err) and len(str(err)) < 1500
    else:
        assert tokens is not None and len(tokens) <= vis.MAX_TOKENS
        assert all(t.text.isascii() for t in tokens)
        ordinals = [g.cuda_ordinal for g in out.gpus if g.cuda_ordinal is not None]
        assert sorted(ordinals) == list(range(len(ordinals)))  # each visible device once
