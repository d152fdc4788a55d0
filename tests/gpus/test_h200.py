"""Memory as nvidia-smi counts it, on the real H200's figures (tests/data/h200-*), and NVML's two memory queries.

The H200 said (``nvidia-smi --query-gpu``, tests/data/h200-nvidia-smi.txt): idle, 0 MiB used and
143,156 MiB free of 143,771; under load, 101,093 MiB used and 42,064 MiB free. tfdevices 0.2.0 listed
615.1 MiB used on the idle card (h200-list-idle.json): NVML's first memory query counts the memory
the driver reserves as used; the versioned one, which nvidia-smi reads, shows it apart.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest

from tests import fake_nvml as fk
from tfdevices.cli import main
from tfdevices.core.errors import InventoryFileError
from tfdevices.gpus import discovery, nvml as nvml_mod
from tfdevices.gpus.inventory import Inventory

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1 << 20
STATES = ("idle", "busy")


def _listing(state: str) -> dict:
    """What tfdevices 0.2.0 listed on the H200 (``tfdevices list --json``, NVML's first memory query)."""
    with open(os.path.join(DATA, f"h200-list-{state}.json"), encoding="utf-8") as f:
        return json.load(f)


def _smi(state: str) -> dict[str, int]:
    """nvidia-smi's memory figures in MiB, read from its query lines in h200-nvidia-smi.txt."""
    with open(os.path.join(DATA, "h200-nvidia-smi.txt"), encoding="utf-8") as f:
        text = f.read()
    section = text.split(f"# {state}\n", 1)[1].split("\n# ", 1)[0]
    lines = [line for line in section.splitlines() if "memory.used [MiB]" in line]
    header = lines[0].split(", ")
    values = section.splitlines()[section.splitlines().index(lines[0]) + 1].split(", ")
    row = dict(zip(header, values))
    figures = {k.split(" ")[0]: int(v.split(" ")[0]) for k, v in row.items() if k.startswith("memory.")}
    if "memory.total" not in figures:  # the busy lines leave the total out: the same card's listing under load has it
        total = _listing(state)["gpus"][0]["memory_total"]
        assert total % MiB == 0, total  # a whole number of MiB, as nvidia-smi prints it
        figures["memory.total"] = total // MiB
    return figures


def _smi_mib(n_bytes: int) -> int:
    """Bytes in MiB as nvidia-smi prints them: rounded up (its busy 42,063.1 MiB free reads 42064)."""
    return -(-n_bytes // MiB)


@pytest.fixture(params=STATES)
def state(request) -> str:
    return request.param


@pytest.fixture
def h200(state, monkeypatch) -> fk.FakeNvml:
    """The process-wide NVML adapter serving the fake H200, nothing masked."""
    fake = fk.h200(busy=state == "busy")
    monkeypatch.setattr(nvml_mod, "_DEFAULT", nvml_mod.Nvml(fake))
    for name in ("TFDEVICES_INVENTORY", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    return fake


def test_the_log_says_what_the_issue_says():
    # the parser reads the log's lines, so the comparisons below compare with the card
    assert _smi("idle") == {"memory.total": 143771, "memory.used": 0, "memory.free": 143156}
    assert _smi("busy") == {"memory.total": 143771, "memory.used": 101093, "memory.free": 42064}


def test_the_fake_h200_is_the_real_listing_through_the_first_query(state):
    """Served through NVML's first memory query, as tfdevices 0.2.0 read it, the fake lists what the card listed."""
    fake = fk.h200(busy=state == "busy", old_pynvml=True)
    listed = discovery.discover(env={}, nvml_module=fake).to_dict()
    variables = ("cuda_visible_devices", "cuda_device_order")  # saved before a listing left the variables out
    real = {k: v for k, v in _listing(state).items() if k not in variables}
    assert listed["notes"] and "first memory query" in listed["notes"][0]
    gpu = listed["gpus"][0]
    assert gpu.pop("memory_reserved") is None
    gpu["process_list"] = [{**p, "user": "root", "command": "python3 -"} for p in gpu["process_list"]]
    assert {**listed, "notes": []} == real


def test_list_json_gives_nvidia_smis_memory(h200, state, capsys):
    assert main(["list", "--json"]) == 0
    gpu = json.loads(capsys.readouterr().out)["gpus"][0]
    smi = _smi(state)
    shown = {f"memory.{k}": _smi_mib(gpu[f"memory_{k}"]) for k in ("total", "used", "free")}
    assert shown == smi
    assert gpu["memory_reserved"] == fk.H200_RESERVED == _listing("idle")["gpus"][0]["memory_used"] - 0 * MiB
    assert gpu["memory_used"] + gpu["memory_free"] + gpu["memory_reserved"] == gpu["memory_total"]


@pytest.mark.parametrize(
    "state, used, free",
    [("idle", "0 B / 140.4 GiB", "139.8 GiB"), ("busy", "98.7 GiB / 140.4 GiB", "41.1 GiB")],
)
def test_list_table_shows_what_nvidia_smi_and_nvitop_show(h200, used, free, capsys):
    # nvitop showed 98.72GiB / 140.4GiB under load; tfdevices 0.2.0 showed 99.3 GiB (idle: 615.1 MiB)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    row = " ".join(out.splitlines()[3].split())
    assert f"NVIDIA H200 {used} {free} " in row
    assert "note:" not in out  # the versioned query was read: nothing to say


def test_list_as_a_whole_process_through_the_fake_pynvml():
    """tests/pynvml_fake, which the benchmarks use: nvidia-ml-py's own module answering from the fake."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "TFDEVICES_"))},
        "PYTHONPATH": os.pathsep.join([os.path.join(REPO, "tests", "pynvml_fake"), REPO]),
        "FAKE_NVML": "h200-busy",
    }
    out = subprocess.run(
        [sys.executable, "-m", "tfdevices", "list", "--json"], env=env, capture_output=True, text=True, check=True
    ).stdout
    gpu = Inventory.from_json(out).gpus[0]
    assert (_smi_mib(gpu.memory_used), _smi_mib(gpu.memory_free)) == (101093, 42064)
    assert gpu.memory_reserved == fk.H200_RESERVED


# --- NVML's two memory queries: the versioned one where it answers, the first one where it cannot -------------------

FIRST_QUERY = (fk.H200_RESERVED, None)  # (used, reserved) read by the first query on the idle card
CASES = [
    # (what, fake changes, (used, reserved), words of the note; None: no note)
    ("versioned query answers", {}, (0, fk.H200_RESERVED), None),
    ("nvidia-ml-py too old", {"old_pynvml": True}, FIRST_QUERY, "this nvidia-ml-py has no versioned one"),
    (
        "driver lacks it",
        {"fail": (("nvmlDeviceGetMemoryInfo_v2", fk.NVML_ERROR_FUNCTION_NOT_FOUND),)},
        FIRST_QUERY,
        "answered 'Function Not Found'",
    ),
    (
        "not supported",
        {"fail": (("nvmlDeviceGetMemoryInfo_v2", fk.NVML_ERROR_NOT_SUPPORTED),)},
        FIRST_QUERY,
        "answered 'Not Supported'",
    ),
    (
        "version mismatch",
        {"fail": (("nvmlDeviceGetMemoryInfo_v2", fk.NVML_ERROR_ARGUMENT_VERSION_MISMATCH),)},
        FIRST_QUERY,
        "answered 'Argument version mismatch'",
    ),
    (
        "other error",
        {"fail": (("nvmlDeviceGetMemoryInfo_v2", fk.NVML_ERROR_UNKNOWN),)},
        FIRST_QUERY,
        "answered 'Unknown Error'",
    ),
    (
        "both fail",
        {"fail": (("nvmlDeviceGetMemoryInfo_v2", fk.NVML_ERROR_UNKNOWN), ("nvmlDeviceGetMemoryInfo", 3))},
        (0, None),
        None,
    ),
]


@pytest.mark.parametrize("what, changes, expected, note", CASES, ids=[c[0] for c in CASES])
def test_memory_query_table(what, changes, expected, note):
    snap = nvml_mod.Nvml(fk.h200(**changes)).snapshot()
    gpu = snap.devices[0].gpu
    assert (gpu.memory_used, gpu.memory_reserved) == expected
    if expected != (0, None):
        assert (gpu.memory_total, gpu.memory_free) == (fk.H200_TOTAL, fk.H200_TOTAL - fk.H200_RESERVED)
    notes = [n for n in snap.notes if "memory" in n]
    if note is None:
        assert notes == []
    else:
        assert len(notes) == 1 and notes[0].startswith("GPU 0: memory used counts what the driver reserves")
        assert note in notes[0]


def test_a_driver_without_the_versioned_query_is_asked_once_per_adapter():
    gpus = [
        fk.replace(g, fail=(("nvmlDeviceGetMemoryInfo_v2", fk.NVML_ERROR_FUNCTION_NOT_FOUND),)) for g in fk.eight_gpus()
    ]
    fake = fk.FakeNvml(gpus)
    adapter = nvml_mod.Nvml(fake)
    snap = adapter.snapshot()
    adapter.snapshot()
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 2 * (len(gpus) + 2)  # each GPU and each MIG instance, twice
    assert [n for n in snap.notes if "memory" in n] == [
        (
            "GPU 0, 1, 2, 3, 4, 5, 5:1, 5:2, 6, 7: memory used counts what the driver reserves, so it reads "
            "higher than nvidia-smi's (NVML's first memory query: NVML's versioned memory query answered "
            "'Function Not Found')."
        )
    ]


def test_a_gpu_that_does_not_support_it_leaves_the_others_on_it():
    gpus = fk.eight_gpus()[:3]
    gpus[1] = fk.replace(gpus[1], fail=(("nvmlDeviceGetMemoryInfo_v2", fk.NVML_ERROR_NOT_SUPPORTED),))
    snap = nvml_mod.Nvml(fk.FakeNvml([fk.replace(g, memory_reserved=512 * MiB) for g in gpus])).snapshot()
    assert [d.gpu.memory_reserved for d in snap.devices] == [512 * MiB, None, 512 * MiB]
    assert snap.devices[1].gpu.memory_used == gpus[1].memory_used + 512 * MiB
    assert [n.split(":")[0] for n in snap.notes] == ["GPU 1"]


def test_mig_instances_are_read_with_the_versioned_query():
    snap = nvml_mod.Nvml(fk.FakeNvml(fk.eight_gpus())).snapshot()
    migs = [m.gpu for m in snap.devices[5].mig]
    assert [(m.key, m.memory_used, m.memory_reserved) for m in migs] == [("5:1", 1 << 30, 0), ("5:2", 0, 0)]


def test_the_fake_asks_as_nvidia_ml_py_does():
    """The fake's memory query and error codes are nvidia-ml-py's (the installed one)."""
    import pynvml  # nvidia-ml-py: an install requirement, not optional (no skip where it is missing)

    assert "version" in inspect.signature(pynvml.nvmlDeviceGetMemoryInfo).parameters
    assert pynvml.nvmlMemory_v2 == fk.NVML_MEMORY_V2
    assert [f for f, _ in pynvml.c_nvmlMemory_v2_t._fields_] == ["version", "total", "reserved", "free", "used"]
    assert (
        pynvml.NVMLError_FunctionNotFound().value,
        pynvml.NVMLError_NotSupported().value,
        pynvml.NVMLError_ArgumentVersionMismatch().value,
    ) == (fk.NVML_ERROR_FUNCTION_NOT_FOUND, fk.NVML_ERROR_NOT_SUPPORTED, fk.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)


@pytest.mark.parametrize(
    "value, words",
    [(-1, "memory_reserved=-1 must be"), (True, "memory_reserved=True must be"), ("1", "memory_reserved='1' must be")],
)
def test_a_saved_listings_reserved_memory_is_checked(value, words):
    data = _listing("idle")
    data["gpus"][0]["memory_reserved"] = value
    with pytest.raises(InventoryFileError, match=words):
        Inventory.from_dict(data)


def test_a_listing_saved_before_reserved_memory_reads_as_unknown():
    inv = Inventory.from_dict(_listing("busy"))
    assert inv.gpus[0].memory_reserved is None and inv.gpus[0].memory_used == 106_648_436_736
