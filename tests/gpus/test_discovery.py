"""discover(): NVML (through the fake), saved listings with masks, TensorFlow, and no GPU."""

from __future__ import annotations

import ctypes.util
import json

import pytest

from tests import fake_nvml as fk
from tests.helpers import run_py
from tfdevices.core.errors import EnvVarError, InputError, InventoryFileError
from tfdevices.core.record_class import replace
from tfdevices.gpus import discovery, nvml, visibility
from tfdevices.gpus.inventory import Inventory

FAKES = fk.eight_gpus()
_PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _discover(env: dict[str, str], gpus: list[fk.FakeGpu] = FAKES, **kwargs: object) -> Inventory:
    return discovery.discover(env=env, nvml_module=fk.FakeNvml(gpus, **kwargs))


def test_nvml_inventory_has_every_gpu_and_mig_instance() -> None:
    inv = _discover(_PCI)
    n_mig = sum(len(f.mig or ()) for f in FAKES)
    assert (inv.source, inv.reason, inv.driver_version, len(inv)) == (
        "nvml",
        None,
        fk.FakeNvml().driver,
        len(FAKES) + n_mig,
    )
    for f, n in zip(FAKES, range(len(FAKES))):
        g = inv.get(str(n))
        assert (g.name, g.uuid, g.memory_total, g.memory_free, g.compute_capability) == (
            f.name,
            f.uuid,
            f.memory_total,
            f.memory_total - f.memory_used,
            f.cc,
        )
        assert g.visible == (f.mig is None)  # a MIG-mode GPU is used through its instances
        for m in f.mig or ():
            mig = inv.get(f"{n}:{m.slot}")
            assert (mig.uuid, mig.memory_total, mig.utilization, mig.pci_bus_id) == (
                m.uuid,
                m.memory_total,
                None,
                f.pci_bus_id,
            )
            assert mig.visible


@pytest.mark.parametrize(
    "env",
    [
        {},
        _PCI,
        {**_PCI, "CUDA_VISIBLE_DEVICES": "2,0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
        {**_PCI, "CUDA_VISIBLE_DEVICES": f"{fk.mig_uuid(5, 2)},{fk.uuid(7)}"},
        {"CUDA_VISIBLE_DEVICES": "-1"},
    ],
)
def test_json_round_trip(env: dict[str, str]) -> None:
    inv = _discover(env)
    back = Inventory.from_json(inv.to_json())
    assert back == replace(inv, cuda_visible_devices=None, cuda_device_order=None)  # the variables are not saved
    assert json.loads(back.to_json()) == json.loads(inv.to_json())
    assert "cuda_visible_devices" not in json.loads(inv.to_json())


@pytest.mark.parametrize("saved_env", [{}, _PCI, {"CUDA_VISIBLE_DEVICES": "0"}])
@pytest.mark.parametrize(
    "env",
    [
        {},
        _PCI,
        {**_PCI, "CUDA_VISIBLE_DEVICES": "3,1"},
        {"CUDA_VISIBLE_DEVICES": "0,5"},
        {**_PCI, "CUDA_VISIBLE_DEVICES": fk.mig_uuid(5, 1)},
        {"CUDA_VISIBLE_DEVICES": ""},
    ],
)
def test_saved_listing_plus_mask_gives_what_nvml_gives(
    tmp_path, saved_env: dict[str, str], env: dict[str, str]
) -> None:
    path = tmp_path / "node.json"
    path.write_text(_discover(saved_env).to_json())
    loaded = discovery.discover(env={**env, "TFDEVICES_INVENTORY": str(path)})
    live = _discover(env)
    assert [(g.key, g.cuda_ordinal, g.tf_name) for g in loaded] == [(g.key, g.cuda_ordinal, g.tf_name) for g in live]
    assert (loaded.reason, loaded.notes, loaded.cuda_visible_devices, loaded.loaded_from) == (
        live.reason,
        live.notes,
        live.cuda_visible_devices,
        str(path),
    )


@pytest.mark.parametrize("n_gpus, mask", [(4, "-1"), (4, ""), (1, "-1"), (2, " ")])
def test_everything_masked_says_why(n_gpus: int, mask: str) -> None:
    inv = _discover({"CUDA_VISIBLE_DEVICES": mask}, [fk.FakeGpu(uuid=fk.uuid(n)) for n in range(n_gpus)])
    what = "the GPU is" if n_gpus == 1 else f"all {n_gpus} GPUs are"
    hidden = f"{what} hidden: CUDA_VISIBLE_DEVICES is set to hide every GPU"
    assert (inv.source, inv.reason, inv.visible) == ("nvml", hidden, ())


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(init_error=fk.NVML_ERROR_LIBRARY_NOT_FOUND), "no NVIDIA driver"),
        (dict(init_error=fk.NVML_ERROR_DRIVER_NOT_LOADED), "driver is not loaded"),
        (dict(init_error=fk.NVML_ERROR_NO_PERMISSION), "insufficient permissions"),
        (dict(count_error=fk.NVML_ERROR_UNKNOWN), "NVML error"),
        (dict(), "NVML reports no GPU"),
    ],
)
@pytest.mark.parametrize("mask", [None, "0,3", "GPU-1234"])
def test_no_gpu_is_an_empty_inventory_with_a_reason(kwargs: dict, words: str, mask: str | None) -> None:
    env = {} if mask is None else {"CUDA_VISIBLE_DEVICES": mask}
    inv = _discover(env, [], **kwargs)
    assert (inv.gpus, inv.source, inv.cuda_visible_devices) == ((), "none", mask)
    assert words in inv.reason


@pytest.mark.parametrize("mask, entry", [("abc", 1), ("0,,1", 2), ("-3", 1)])
def test_no_gpu_still_checks_mask_syntax(mask: str, entry: int) -> None:
    with pytest.raises(EnvVarError, match=f"^entry {entry} of CUDA_VISIBLE_DEVICES is "):
        _discover({"CUDA_VISIBLE_DEVICES": mask}, [])


def _write(tmp_path, name: str, text: str | None) -> str:
    path = tmp_path / name
    if text is None:
        return str(path)  # missing
    if text == "<dir>":
        path.mkdir()
    else:
        path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "name, text, words",
    [
        ("missing.json", None, "No such file"),
        ("adir", "<dir>", "is a directory, not a file"),
        ("bad.json", "{not json", "not valid JSON"),
        ("list.json", "[]", "expected a JSON object for an inventory, not a list"),
        ("field.json", '{"gpus": [], "colour": 1}', "unknown field"),
        ("gpu.json", '{"gpus": [{"index": 0}]}', "lacks"),
        ("source.json", '{"source": "cuda"}', "known sources"),
        (
            "dupe.json",
            '{"gpus": [{"index": 0, "name": "a", "uuid": "GPU-a"}, {"index": 0, "name": "b", "uuid": "GPU-b"}]}',
            "more than once",
        ),
    ],
)
def test_bad_inventory_file_names_the_variable(tmp_path, name: str, text: str | None, words: str) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(InventoryFileError) as info:
        discovery.discover(env={"TFDEVICES_INVENTORY": path})
    assert str(info.value).startswith("the file TFDEVICES_INVENTORY names")
    assert words in str(info.value) and "unset TFDEVICES_INVENTORY" in info.value.hint
    assert path not in str(info.value)  # a variable's value is not printed


def test_saved_listing_with_mask_naming_a_missing_gpu(tmp_path) -> None:
    path = tmp_path / "node.json"
    path.write_text(_discover({}, FAKES[:2]).to_json())
    with pytest.raises(EnvVarError) as info:
        discovery.discover(env={"TFDEVICES_INVENTORY": str(path), "CUDA_VISIBLE_DEVICES": "0,7"})
    assert str(info.value).startswith(
        "entry 2 of CUDA_VISIBLE_DEVICES is past the last GPU (CUDA's indices here run 0 to 1); "
        f"this machine has GPUs 0 ({fk.uuid(0)[:12]}), 1 ({fk.uuid(1)[:12]}) "
        "(saved listing the file TFDEVICES_INVENTORY names)"
    )


def test_empty_inventory_variable_means_read_the_machine() -> None:
    inv = discovery.discover(env={"TFDEVICES_INVENTORY": ""}, nvml_module=fk.FakeNvml(FAKES[:3]))
    assert (inv.source, len(inv), inv.loaded_from) == ("nvml", 3, None)


@pytest.mark.parametrize("source", ["gpu", "NVML", "", "none"])
def test_unknown_source_lists_the_known_ones(source: str) -> None:
    with pytest.raises(
        InputError, match=f"^discovery source {source!r} is unknown; known sources: 'nvml', 'tensorflow'"
    ):
        discovery.discover(env={}, source=source)


def test_real_nvml_on_this_machine_gives_a_reason_not_an_error() -> None:
    inv = discovery.discover(env={})
    if ctypes.util.find_library("nvidia-ml") is None:
        assert (inv.gpus, inv.source) == ((), "none")
        assert inv.reason == nvml.snapshot().reason and "NVML" in inv.reason
    else:
        assert inv.source in ("nvml", "none") and bool(inv.reason) == (not inv.visible)


def test_public_discover_reads_the_environment_without_tensorflow(tmp_path) -> None:
    path = tmp_path / "node.json"
    path.write_text(_discover({}, FAKES[:4]).to_json())
    proc = run_py(
        """
        import sys, tfdevices
        inv = tfdevices.discover()
        print([(g.key, g.tf_name) for g in inv], inv.loaded_from is not None, "tensorflow" in sys.modules)
    """,
        env={"TFDEVICES_INVENTORY": str(path), "CUDA_VISIBLE_DEVICES": "3,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    assert proc.stdout.strip() == str([("0", None), ("1", "/GPU:1"), ("2", None), ("3", "/GPU:0")]) + " True False"


@pytest.mark.parametrize("env", [{}, {"CUDA_VISIBLE_DEVICES": "-1"}])
def test_tensorflow_source_on_this_machine(env: dict[str, str]) -> None:
    proc = run_py(
        """
        import json, sys, tfdevices
        inv = tfdevices.discover(source="tensorflow")
        import tensorflow as tf
        print(json.dumps([inv.source, inv.reason, len(tf.config.list_physical_devices("GPU")),
                          tf.__version__, inv.cuda_visible_devices]))
    """,
        env=env,
    )
    source, reason, tf_gpus, version, mask = json.loads(proc.stdout.strip().splitlines()[-1])
    assert mask == env.get("CUDA_VISIBLE_DEVICES")
    if tf_gpus == 0:
        assert source == "none" and reason.startswith(f"TensorFlow {version} lists no GPU")
        assert ("CUDA_VISIBLE_DEVICES is set" in reason) == bool(env)
    else:
        assert source == "tensorflow" and reason is None


@pytest.mark.parametrize("env", [{"CUDA_DEVICE_ORDER": "pci"}, {"CUDA_VISIBLE_DEVICES": "x"}])
def test_tensorflow_source_checks_the_variables_before_importing_tensorflow(env: dict[str, str]) -> None:
    proc = run_py(
        """
        import sys, tfdevices
        try:
            tfdevices.discover(source="tensorflow")
        except tfdevices.EnvVarError as err:
            named = [n for n in ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES") if n in str(err)]
            print(",".join(named), "tensorflow" in sys.modules)
    """,
        env=env,
    )
    assert proc.stdout.split() == [next(iter(env)), "False"]


def test_visibility_notes_come_from_one_place() -> None:
    inv = _discover({})
    assert inv.notes == visibility.resolve(inv.gpus, {}).notes
