"""Every notebook runs top to bottom in a fresh kernel of this Python, without errors, and shows what it should."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env

NOTEBOOKS = os.path.join(REPO, "notebooks")


def run_notebook(name: str, tmp_path, monkeypatch, cwd: str | None = None) -> str:
    """Executes ``notebooks/NAME`` with nbclient and returns what its cells printed."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    executed = os.environ.get("TFDEVICES_EXECUTED_NOTEBOOKS")  # make test: where make docs reads them
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "outputs must be cleared"
    for key, value in subprocess_env().items():  # the kernel inherits PYTHONPATH=REPO, quiet TensorFlow logs,
        monkeypatch.setenv(key, value)  # and no CUDA_VISIBLE_DEVICES / TF_CONFIG / TFDEVICES_INVENTORY
    for key in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_CONFIG", "TFDEVICES_INVENTORY"):
        monkeypatch.delenv(key, raising=False)
    # a 'python3' kernel that is this interpreter, whatever kernels the machine has
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--prefix", str(tmp_path), "--name", "python3"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    kernels = KernelSpecManager(kernel_dirs=[str(tmp_path / "share" / "jupyter" / "kernels")])
    client = NotebookClient(
        nb,
        km=KernelManager(kernel_name="python3", kernel_spec_manager=kernels),
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": cwd or str(tmp_path)}},
    )
    try:
        client.execute()
    except CellExecutionError as err:
        pytest.fail(f"a cell of {name} failed:\n{err}")
    if executed:  # the API pages show these outputs and plots instead of running the notebook again
        os.makedirs(executed, exist_ok=True)
        nbformat.write(nb, os.path.join(executed, name))
    return "".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.get("output_type") == "stream"
    )


def test_every_notebook_has_a_test():
    assert sorted(os.listdir(NOTEBOOKS)) == [
        "01_devices_and_strategies.ipynb",
        "02_placement.ipynb",
        "03_layer_placement.ipynb",
        "04_tune_and_advise.ipynb",
    ]


def test_devices_and_strategies(tmp_path, monkeypatch):
    out = run_notebook("01_devices_and_strategies.ipynb", tmp_path, monkeypatch, cwd=REPO)
    assert "strategy: mirrored (MirroredStrategy), 4 replica(s)" in out
    assert "loss per epoch:" in out and "cross-device transfers" in out
    assert "matmul0: CPU:0" in out and "matmul1: CPU:1" in out
    assert "INFO:tensorflow" not in out  # quiet by default


def test_placement(tmp_path, monkeypatch):
    out = run_notebook("02_placement.ipynb", tmp_path, monkeypatch)
    assert "transfer(s)" in out and "CPU:0 -> CPU:1" in out
    assert "expected no cross-device transfers" in out
    assert re.search(r"moved_1/dense_2_1/MatMul: MatMul on CPU:1 \(kernel \w+\)", out)  # model op, any kernel
    assert re.search(r"CPU:1: \d+ ops, \d+ kernels, busy [\d.]+ us", out)  # the pictures' figures


def test_layer_placement(tmp_path, monkeypatch):
    out = run_notebook("03_layer_placement.ipynb", tmp_path, monkeypatch)
    assert "optimal plan" in out and "bottleneck" in out
    assert int(re.search(r"weights read across devices: (\d+)", out).group(1)) > 0  # before: by hand
    assert "weights read across devices: 0\n" in out  # after: placed
    moved = re.search(r"activation transfers: (\d+) expected by the plan: (\d+)", out)
    assert moved and moved.group(1) == moved.group(2)
    assert "every op of every layer ran on its planned device" in out and "same outputs: True" in out
    assert "True True" in out
    assert re.search(r"copies per forward pass: \{'by hand': \d+, 'place_layers': \d+\}", out)


def test_tune_and_advise(tmp_path, monkeypatch):
    out = run_notebook("04_tune_and_advise.ipynb", tmp_path, monkeypatch, cwd=REPO)
    assert "one_device:CPU:0" in out and "split:2" in out and "winner:" in out
    assert "idle_devices (" in out and "weights_across_devices (" in out and "FIX:" in out
