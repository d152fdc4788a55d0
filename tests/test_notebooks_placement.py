"""notebooks/02_placement.ipynb runs top to bottom in a fresh kernel of this Python, without errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env

NOTEBOOK = os.path.join(REPO, "notebooks", "02_placement.ipynb")


def _kernel_manager(tmp_path):
    """A KernelManager whose 'python3' kernel is this interpreter (kernelspec installed under tmp_path)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(tmp_path), "--name", "python3"],
                   check=True, capture_output=True, timeout=120)
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    return KernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))


def test_placement_notebook_runs(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "outputs must be cleared"
    for name, value in subprocess_env().items():
        monkeypatch.setenv(name, value)  # the kernel inherits PYTHONPATH=REPO and quiet TensorFlow logs
    km = _kernel_manager(tmp_path)
    client = NotebookClient(nb, km=km, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as err:
        pytest.fail(f"a notebook cell failed:\n{err}")
    outputs = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                      for out in cell.outputs if out.get("output_type") == "stream")
    assert "transfer(s)" in outputs and "CPU:0 -> CPU:1" in outputs
    assert "expected no cross-device transfers" in outputs
