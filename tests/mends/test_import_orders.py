"""Every import order a script begins with, under ``tfdevices launch -n 2``: the workers' TensorFlow servers listen
on 127.0.0.1 only (read from /proc by the test, not from the mend's report), and every mend a worker's
sitecustomize arms for an import (loopback, step_progress, collective_wait on ``tensorflow``; keras_fit on Keras 3's
trainer; fit_progress on Keras' callbacks) is applied once that import happened, whichever came first.

The orders are the ones users write: TensorFlow first, tfdevices first then ``build_strategy`` (the guides'
worker), tfdevices then TensorFlow, Keras 3 first, tf_keras first, ``configure()`` first (the README's order),
``tfdevices.training`` first. Before the one import hook (the loopback mend kept a second finder that a look-up of
``tensorflow`` consumed), ``build_strategy`` first and ``configure()`` first listened on every interface.
"""

from __future__ import annotations

import json
import re
import socket
import sys

import pytest

from tests.jobs.launching import held, launch_listen
from tfdevices.jobs.listen_check import listening

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platform: /proc and ELF: Linux"),
    pytest.mark.slow,
    pytest.mark.tensorflow,
]

LOCAL = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
#: The mends each worker arms for an import, by the modules that import sets off.
ARMED = {
    "loopback": "tensorflow",
    "step_progress": "tensorflow",
    "collective_wait": "tensorflow",
    "keras_fit": "keras.src.backend.tensorflow.trainer",
    "fit_progress": "keras's callbacks",
}
ORDERS = ["tensorflow", "build_strategy", "tfdevices_tensorflow", "keras", "tf_keras", "configure", "training"]


def mends_of(out: str) -> dict[int, dict[str, dict]]:
    """Each rank's mends as its worker printed them (``mends JSON``)."""
    found = {}
    for match in re.finditer(r"^\[(\d)\] mends (\{.*\})$", out, re.MULTILINE):
        found[int(match.group(1))] = json.loads(match.group(2))
    return found


@pytest.mark.parametrize("order", ORDERS)
def test_every_import_order_listens_on_127_0_0_1_with_every_armed_mend_applied(tmp_path, order: str) -> None:
    seen: dict[int, list[tuple[str, int]]] = {}

    def check(pids: dict[int, tuple[int, int]]) -> None:
        for rank, (pid, port) in pids.items():
            seen[rank] = listening(port, pid)
            with pytest.raises(ConnectionRefusedError):  # the machine's other addresses do not reach it
                socket.create_connection(("127.0.0.2", port), timeout=10)

    env = {"TF_USE_LEGACY_KERAS": "1"} if order == "tf_keras" else None
    proc = launch_listen(tmp_path, order, env=env)
    out, _ = held(proc, tmp_path, check)
    code = proc.returncode
    assert code == 0, out[-4000:]
    assert sorted(seen) == [0, 1], out[-4000:]
    for rank, sockets in seen.items():
        assert sockets and {host for host, _ in sockets} <= LOCAL, (order, rank, sockets)
    mends = mends_of(out)
    assert sorted(mends) == [0, 1], out[-4000:]
    for rank, table in mends.items():
        for name in ARMED:
            row = table[name]
            if row["waits_for"]:  # what the mend waits for was imported: its hook ran, and it did what it found
                assert row["state"] in ("applied", "not_needed"), (order, rank, name, row)
                assert row["preview"] != "would_apply", (order, rank, name, row)
        for name in ("loopback", "step_progress", "collective_wait"):  # needed in every launched TensorFlow worker
            assert table[name]["state"] == "applied", (order, rank, name, table[name])
        assert "goes to 127.0.0.1" in table["loopback"]["detail"], table["loopback"]
    if order in ("keras", "build_strategy", "configure", "training"):  # Keras 3's trainer is imported there
        assert all(t["keras_fit"]["waits_for"] for t in mends.values()), (order, mends)
    assert "sum 3" in out and "listen check" not in out
