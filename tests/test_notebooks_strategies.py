"""The devices-and-strategies notebook runs top to bottom (nbclient, a fresh kernel) so it cannot rot."""

from __future__ import annotations

import os

import nbformat
from nbclient import NotebookClient

from tests.helpers import REPO, subprocess_env

NOTEBOOK = os.path.join(REPO, "notebooks", "01_devices_and_strategies.ipynb")


def test_notebook_01_runs_and_shows_replicas(monkeypatch):
    for name, value in subprocess_env().items():  # the kernel inherits this environment
        monkeypatch.setenv(name, value)
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_CONFIG", "TFDEVICES_INVENTORY"):
        monkeypatch.delenv(name, raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": REPO}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert "strategy: mirrored (MirroredStrategy), 4 replica(s)" in text
    assert "loss per epoch:" in text and "cross-device transfers" in text
    assert "matmul0: CPU:0" in text and "matmul1: CPU:1" in text
