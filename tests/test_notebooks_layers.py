"""notebooks/03_layer_placement.ipynb runs top to bottom in a fresh kernel of this Python, without errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env

NOTEBOOK = os.path.join(REPO, "notebooks", "03_layer_placement.ipynb")


def _kernel_manager(tmp_path):
    """A KernelManager whose 'python3' kernel is this interpreter (kernelspec installed under tmp_path)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(tmp_path), "--name", "python3"],
                   check=True, capture_output=True, timeout=120)
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    return KernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))


def test_layer_placement_notebook_runs(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "outputs must be cleared"
    for name, value in subprocess_env().items():
        monkeypatch.setenv(name, value)  # the kernel inherits PYTHONPATH=REPO and quiet TensorFlow logs
    client = NotebookClient(nb, km=_kernel_manager(tmp_path), timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as err:
        pytest.fail(f"a notebook cell failed:\n{err}")
    out = "".join(o.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                  for o in cell.outputs if o.get("output_type") == "stream")
    assert "optimal plan" in out and "bottleneck" in out
    assert int(re.search(r"weights read across devices: (\d+)", out).group(1)) > 0  # before
    assert "weights read across devices: 0\n" in out  # after
    moved = re.search(r"activation transfers: (\d+) expected by the plan: (\d+)", out)
    assert moved and moved.group(1) == moved.group(2)
    assert "every op of every layer ran on its planned device" in out and "same outputs: True" in out
    assert "True True" in out
