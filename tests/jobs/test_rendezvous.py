"""Launchers on several machines meet: two real launchers on 127.0.0.1 forming one job, failures, timeouts."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from tests.helpers import REPO, subprocess_env
from tests.jobs.launching import WORKER, reports
from tfdevices.jobs.rendezvous import free_ports
from tfdevices.jobs.tfconfig import parse_tf_config


def test_free_ports_are_distinct_and_bindable_on_loopback() -> None:
    ports = free_ports(4)
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def _node(rank: int, port: int, *command: str, n: int = 2, timeout: str = "60") -> subprocess.Popen:
    """One launcher of a 2-machine job on this machine: node R's workers listen on 127.0.0.(R+1), its own host."""
    return subprocess.Popen([sys.executable, "-m", "tfdevices", "launch", "-n", str(n), "--nnodes", "2",
                             "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
                             "--node-addr", f"127.0.0.{rank + 1}", "--rdzv-timeout", timeout, "--", *command],
                            env=subprocess_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_launchers_form_one_job() -> None:
    """Two launchers meeting on 127.0.0.1 (node 1 first: it waits for node 0), 2 workers each: one 4-worker cluster."""
    port = free_ports(1)[0]
    second = _node(1, port, sys.executable, WORKER, "report")
    first = _node(0, port, sys.executable, WORKER, "report")
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert (first.returncode, second.returncode) == (0, 0), outs
    got = {**reports(outs[0][0]), **reports(outs[1][0])}
    assert sorted(got) == [0, 1, 2, 3]
    clusters = {json.dumps(json.loads(r["tf_config"])["cluster"], sort_keys=True) for r in got.values()}
    assert len(clusters) == 1  # every worker has the same cluster ...
    workers = list(parse_tf_config(got[0]["tf_config"]).cluster["worker"])
    assert len(set(workers)) == 4 and [got[r]["address"] for r in range(4)] == workers  # ... and its own place in it
    assert [(got[r]["world"], got[r]["local_rank"]) for r in range(4)] == [(4, 0), (4, 1), (4, 0), (4, 1)]
    assert "[launcher] node 0 of 2: ranks 0..1 of 4" in outs[0][0] and "node 1 of 2: ranks 2..3 of 4" in outs[1][0]


def test_a_failure_on_one_machine_stops_the_other() -> None:
    port = free_ports(1)[0]
    first = _node(0, port, sys.executable, WORKER, "exit", "wait,wait,wait,wait")
    second = _node(1, port, sys.executable, WORKER, "exit", "wait,wait,6,wait")
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert second.returncode == 6, outs[1]
    assert first.returncode == 6 and "another machine's job stopped; stopping this one" in outs[0][0], outs[0]


def test_a_missing_launcher_is_one_line_after_the_timeout() -> None:
    port = free_ports(1)[0]
    alone = _node(0, port, "true", timeout="1")
    out, err = alone.communicate(timeout=60)
    assert alone.returncode == 2, out + err
    assert err.strip() == ("tfdevices launch: error: node(s) [1] did not join within 1 s. HINT: start the launcher "
                           "on every machine with the same --nnodes, --master-addr and --master-port.")
