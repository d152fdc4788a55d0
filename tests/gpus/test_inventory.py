"""Saved inventories under hostile input: any bytes, any size, any nesting; never a traceback or a hang."""

from __future__ import annotations

import json
import os
import threading

import pytest
from hypothesis import given, settings, strategies as st

from tests import inventories as inv
from tfdevices.core.errors import InventoryFileError, TfDevicesError
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import MAX_FILE_BYTES, Inventory, read_bounded

GOOD = inv.eight().to_json()


def _with_gpu0(**fields: object) -> str:
    data = json.loads(GOOD)
    data["gpus"][0].update(fields)
    return json.dumps(data)


def _load(tmp_path, data: bytes | str) -> Inventory:
    path = tmp_path / "inventory.json"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return Inventory.load(path)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32"])
def test_json_in_any_encoding_json_allows_is_read(tmp_path, encoding):
    assert _load(tmp_path, GOOD.encode(encoding)).gpus == inv.eight().gpus


@pytest.mark.parametrize(
    "data, words",
    [
        (bytes(range(256)) * 4, "not JSON text (byte"),
        (b"\xff\xfe\x00", "not JSON text"),
        (GOOD.replace("A100", "A100 \u00e9").encode("latin-1"), "not JSON text (byte 0xe9"),
        (GOOD.encode("cp1252")[:-1] + b"\x9d", "not JSON text"),
        (b"\x00" * 64, "not"),
        (b"", "not valid JSON"),
        (b"[" * 200_000 + b"]" * 200_000, "JSON nested too deeply"),
        (b'{"gpus": ' + b"[" * 100_000, "JSON nested too deeply"),
        (b'{"gpus": [{"index": ' + b"9" * 5000 + b', "name": "a", "uuid": "GPU-a"}]}', "thousands of digits"),
        (_with_gpu0(name="A\ud800"), "GPU field name='A\\ud800' holds a lone surrogate"),
        (_with_gpu0(uuid="GPU-\udfff"), "GPU field uuid='GPU-\\udfff' holds a lone surrogate"),
        (_with_gpu0(compute_capability="\u0668.\u0660"), "compute_capability='\u0668.\u0660' is not of the form '8.0'"),
        (_with_gpu0(compute_capability=["\u0668", "0"]), "is not of the form '8.0'"),
        (_with_gpu0(compute_capability="8888.0"), "is not of the form '8.0'"),
        (_with_gpu0(index=10**30), "GPU field index=1000000000000000000000000000000 must be a whole number from 0"),
        (_with_gpu0(memory_free=-1), "GPU field memory_free=-1 must be"),
        (_with_gpu0(name="x" * 100_000), "GPU field name='xxxx"),
        (
            json.dumps({"gpus": [{"index": i, "name": "a", "uuid": f"GPU-{i}"} for i in range(5000)]}),
            "5,000 GPU entries",
        ),
        (json.dumps({"gpus": [], "notes": ["\ud800"]}), "notes[0]='\\ud800' holds a lone surrogate"),
        (json.dumps({"gpus": [], "reason": 5}), "reason=5 must be a string"),
    ],
)
def test_hostile_files_are_one_line_errors(tmp_path, data, words):
    with pytest.raises(InventoryFileError) as err:
        _load(tmp_path, data)
    text = str(err.value)
    assert words in text, text
    assert text.startswith("inventory file '") and "HINT:" in text and "\n" not in text and len(text) < 600


def test_a_file_larger_than_the_bound_is_not_read_whole(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(MAX_FILE_BYTES * 50)  # sparse: 200 MiB of zeros
    with pytest.raises(InventoryFileError, match="is larger than 4.0 MiB"):
        Inventory.load(path)


@pytest.mark.parametrize("path, kind", [("/dev/zero", "a device"), ("/dev/null", "a device"), ("/", "a directory")])
def test_special_files_are_refused(path, kind):
    with pytest.raises(InventoryFileError, match=f"is {kind}, not a file"):
        Inventory.load(path)


def test_a_fifo_is_refused_even_with_a_writer_that_never_writes(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result: dict[str, object] = {}

    def load() -> None:
        try:
            Inventory.load(fifo)
        except InventoryFileError as err:
            result["error"] = str(err)

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "Inventory.load waited on a FIFO"
    assert "is a FIFO, not a file" in str(result["error"])


def test_read_bounded_reads_regular_files_exactly(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(b"abc" * 1000)
    assert read_bounded(path, what="x") == b"abc" * 1000
    with pytest.raises(InventoryFileError, match="larger than 2.0 KiB"):
        read_bounded(path, what="x", limit=2048)


def test_duplicate_gpus_are_found_with_a_set_in_a_large_inventory(tmp_path):
    gpus = [{"index": i % 1024, "name": "a", "uuid": f"GPU-{i}", "mig_index": i // 1024} for i in range(4000)]
    assert len(Inventory.from_dict({"gpus": gpus}).gpus) == 4000
    gpus.append(dict(gpus[7]))
    with pytest.raises(InventoryFileError, match=r"GPU index\(es\) \['7:0'\] appear more than once"):
        Inventory.from_dict({"gpus": gpus})


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)
_GPU_FIELDS = st.fixed_dictionaries(
    {"index": st.integers(-2, 2000), "name": st.text(max_size=6), "uuid": st.text(max_size=6)},
    optional={
        "compute_capability": st.text(alphabet="0123456789.\u0663", max_size=5),
        "memory_free": st.integers(-1, 2**70),
        "mig_index": st.integers(-1, 3) | st.none(),
        "utilization": st.floats() | st.integers(-1, 2),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        _JSONISH.map(lambda v: json.dumps(v).encode()),
        st.lists(_GPU_FIELDS, max_size=4).map(lambda gs: json.dumps({"gpus": gs, "source": "nvml"}).encode()),
    )
)
def test_fuzz_inventory_files(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "inventory.json"
    path.write_bytes(data)
    try:
        loaded = Inventory.load(path)
    except TfDevicesError as err:
        assert isinstance(err, InventoryFileError) and "HINT:" in str(err) and "\n" not in str(err)
    else:
        loaded.table().encode("utf-8")  # whatever loads can be printed
        assert Inventory.from_json(loaded.to_json()).gpus == loaded.gpus


def test_gpu_info_round_trips():
    g = GpuInfo(index=3, name="A100", uuid="GPU-3", compute_capability=(8, 0))
    assert GpuInfo.from_dict(g.to_dict()) == g
