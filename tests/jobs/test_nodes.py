"""A job over several machines is watched from node 0: two launchers as two nodes (each its own temporary directory,
workers on 127.0.0.1 and 127.0.0.2, one worker each). The rank on node 1 slow between its steps, slow inside its
step, or stuck alive is named on node 0's console while the job runs, with its node and reason (the stuck one with
its frame); --stall-timeout stops both nodes; the same job balanced names nobody over at least three looks.
Node 0's view of the other nodes' records: stamped on its own clock, bad lines counted, a silent or older node said
once.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import tempfile

import pytest

from tests.helpers import REPO
from tests.jobs.launching import NODE1, together, two_nodes
from tfdevices.jobs.node_exchange import (
    Node,
    RemoteRecords,
    frames_line,
    node_names,
    record_line,
)
from tfdevices.jobs.progress import ProgressWriter, record_bytes, record_paths
from tfdevices.jobs.rendezvous import free_ports

SLOW = os.path.join(REPO, "tests", "scripts", "slow_rank.py")
STUCK = os.path.join(REPO, "tests", "scripts", "stuck_rank.py")
#: Seconds the jobs that must be named or must name nobody last at the least: three looks past the first
#: timed steps and waits read, on a fast machine as on a slow one.
MIN_S = 12


# --------------------------------------------------------------------------- node 0's view (pure, and real records)


def _raw(tmp_path, rank: int, steps: int) -> bytes:
    writer = ProgressWriter(str(tmp_path), rank)
    for _ in range(steps):
        writer.begin_step()
        writer.end_step(0.01)
    (path,) = [p for p in record_paths(str(tmp_path)) if p.endswith(f"rank{rank}.progress")]
    return record_bytes(path)


def test_node_0_stamps_another_nodes_records_on_its_own_clock(tmp_path) -> None:
    now = [500.0]
    remote = RemoteRecords([Node(1, "gpu07", (1,))], clock=lambda: now[0])
    line = record_line(_raw(tmp_path, 1, 3)).split(" ", 1)[1]
    remote.take(1, "record", line)
    now[0] = 510.0
    remote.take(1, "record", line)  # unchanged: it keeps the time it last changed
    (record,) = remote.records()
    assert (record.rank, record.node, record.done, record.changed_at) == (1, "gpu07", 3, 500.0)
    now[0] = 520.0
    remote.take(1, "record", record_line(_raw(tmp_path / "later", 1, 4)).split(" ", 1)[1])
    assert [(r.done, r.changed_at) for r in remote.records()] == [(4, 520.0)]


def test_lines_that_are_not_what_they_say_are_counted_and_left_out(tmp_path) -> None:
    remote = RemoteRecords([Node(1, "gpu07", (1,))])
    remote.take(1, "record", "not base64!")
    remote.take(1, "record", base64.b64encode(b"short").decode())
    remote.take(1, "record", record_line(_raw(tmp_path, 2, 1)).split(" ", 1)[1])  # rank 2 is not node 1's
    remote.take(1, "frames", "1 notbase64")
    remote.take(7, "record", "whatever")  # no such node
    assert remote.records() == [] and remote.bad == 4


def test_a_stuck_ranks_frames_are_asked_from_its_node() -> None:
    asked = []

    def ask(node_rank: int, ranks: list[int]) -> None:  # what node 1's launcher answers
        asked.append((node_rank, ranks))
        for rank in ranks:
            remote.take(
                node_rank, "frames", frames_line(rank, [f'File "train.py", line {rank} in loop']).split(" ", 1)[1]
            )

    remote = RemoteRecords([Node(1, "gpu07", (1, 2)), Node(2, "gpu08", (3,))], ask=ask)
    assert remote.frames([2]) == {2: ['File "train.py", line 2 in loop']} and asked == [(1, [2])]


def test_a_node_that_is_not_heard_is_said_once() -> None:
    now = [100.0]
    remote = RemoteRecords([Node(2, "gpu08", (2, 3))], clock=lambda: now[0])
    assert remote.unheard() == []  # not yet silent for 30 s
    now[0] = 140.0  # node 2 never sent a record
    silent = "node 2 (gpu08): no progress record came from it for 30 s; left out of the slow-rank and stall reports: "
    assert remote.unheard() == [silent + "ranks 2..3"]
    assert remote.unheard() == []  # once


def test_nodes_are_named_by_host_unless_two_share_one() -> None:
    assert node_names({0: "a", 1: "b", 2: "a"}, {0: "10.0.0.1", 1: "10.0.0.2", 2: "10.0.0.3"}) == {
        0: "10.0.0.1",
        1: "b",
        2: "10.0.0.3",
    }


# --------------------------------------------------------------------------- two launchers as two nodes


def _timed(sync: str) -> dict[str, str]:
    """The jobs last at least MIN_S seconds (tests/scripts/slow_rank.py: rank 0 names the last step)."""
    return {"SLOW_RANK_MIN_S": str(MIN_S), "SLOW_RANK_SYNC": sync}


def _named_while_running(out: str, line: str) -> str:
    lines = out.splitlines()
    named = [n for n, text in enumerate(lines) if text.startswith(line)]
    done = [n for n, text in enumerate(lines) if text == "[0] rank 0 done"]
    assert named and done and named[0] < done[0], out[-3000:]  # said while the job ran
    return lines[named[0]]


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
@pytest.mark.parametrize(
    "kind, reason",
    [
        ("between", r"rank 1 spends \d+ ms between steps \(its input pipeline or its own code\)$"),
        (
            "compute",
            (
                r"rank 1's step takes [\d.]+ ms before the all-reduce, rank 0's [\d.]+ ms "
                r"\(its device is slower or busier: see `tfdevices list`\)$"
            ),
        ),
    ],
)
def test_a_slow_rank_on_another_node_is_named_on_node_0s_console(tmp_path, kind: str, reason: str) -> None:
    out0, out1, codes = two_nodes(SLOW, "loop", kind, "1", "200", env=_timed(str(tmp_path)))
    assert codes == [0, 0], out0[-3000:] + out1[-3000:]
    line = _named_while_running(out0, f"[launcher] tfdevices: rank 1 on node {NODE1} is the slow one: ")
    assert re.search(r"rank 0 waits [\d.]+ ms of each [\d.]+ ms step for it in the all-reduce; " + reason, line), line
    table = out0[out0.index("each rank's step, ms") :].splitlines()
    assert table[1].split()[-1] == "node" and table[3].split()[-1] == NODE1, table
    assert "slow one" not in out1 and "this node's ranks report to node 0's launcher" in out1, out1[-3000:]


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
def test_a_balanced_job_over_two_nodes_names_nobody_over_three_looks_or_more(tmp_path) -> None:
    out0, out1, codes = two_nodes(SLOW, "loop", "balanced", "", "200", env=_timed(str(tmp_path)))
    assert codes == [0, 0], out0[-3000:] + out1[-3000:]
    assert "slow one" not in out0 + out1 and "stall" not in out0 + out1, out0[-3000:]
    looks = re.search(r"each rank's step, ms \(median of (\d+) looks; waits measured\)", out0)
    assert looks and int(looks.group(1)) >= 3, out0[-3000:]  # the watch looked, with both nodes' waits, 3 times
    # on this CPU the 128 x 128 all-reduce over gRPC is most of a balanced step: the link, which it is, or nobody
    ends = ("no slow rank: the ranks wait alike", "the link is the bottleneck, not a rank")
    assert any(line.endswith(ends) for line in out0.splitlines()), out0[-3000:]


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
def test_a_stuck_rank_on_another_node_is_named_with_its_frame_and_the_timeout_stops_both_nodes() -> None:
    out0, out1, codes = two_nodes(STUCK, "loop", "1", "600", launcher=("--stall-window", "6", "--stall-timeout", "8"))
    named = f"[launcher] tfdevices: stall: rank 1 on node {NODE1} did not arrive at step 5: rank 0 has waited"
    assert named in out0, out0[-3000:]
    frames = out0.split(f"rank 1's stack (node {NODE1}), innermost first:")
    assert len(frames) > 1 and "in loop" in frames[1][:400], out0[-3000:]
    assert re.search(r"stopping the job: rank 1 on node 127\.0\.0\.2 .*past the stall timeout, 8 s", out0), out0
    assert "another machine's job stopped; stopping this one" in out1, out1[-3000:]
    assert codes == [3, 3], (codes, out0[-2000:], out1[-2000:])


# ------------------------------------------------------------------- no launcher: TensorFlow's coordination service


def _without_launcher(*script: str, env: dict[str, str] | None = None) -> tuple[str, str, list]:
    """Two workers started with TF_CONFIG alone, as srun or Ray Train start them, rank 1's address 127.0.0.2, each
    with its own progress directory (two machines): rank 0's watch sees rank 1 only through the coordination
    service. Returns both ranks' output and exit statuses.
    """
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{ports[0]}", f"{NODE1}:{ports[1]}"]}
    with tempfile.TemporaryDirectory() as tmp0, tempfile.TemporaryDirectory() as tmp1:
        runs = []
        for rank, tmp in ((0, tmp0), (1, tmp1)):
            config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": rank}})
            rank_env = {**(env or {}), "TF_CONFIG": config, "TFDEVICES_PROGRESS_DIR": tmp}
            runs.append(([sys.executable, *script], rank_env))
        outs, codes = together(runs)
    return outs[0], outs[1], codes


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
def test_without_a_launcher_rank_0_names_a_slow_rank_on_another_machine(tmp_path) -> None:
    out0, out1, codes = _without_launcher(SLOW, "loop", "between", "1", "200", env=_timed(str(tmp_path)))
    assert codes == [0, 0], out0[-3000:] + out1[-3000:]
    lines = out0.splitlines()
    named = [n for n, line in enumerate(lines) if line.startswith(f"tfdevices: rank 1 on node {NODE1} is the slow one")]
    assert named and named[0] < lines.index("rank 0 done"), out0[-3000:]  # said while the job ran
    assert re.search(r"rank 1 spends \d+ ms between steps \(its input pipeline or its own code\)$", lines[named[0]])


@pytest.mark.slow
@pytest.mark.xdist_group("slow_rank")
def test_without_a_launcher_a_stuck_rank_on_another_machine_is_named_with_its_frame_and_stopped() -> None:
    env = {"TFDEVICES_STALL_WINDOW": "6", "TFDEVICES_STALL_TIMEOUT": "8"}
    out0, out1, codes = _without_launcher(STUCK, "loop", "1", "600", env=env)
    assert f"tfdevices: stall: rank 1 on node {NODE1} did not arrive at step 5" in out0, out0[-3000:]
    frames = out0.split(f"rank 1's stack (node {NODE1}), innermost first:")
    assert len(frames) > 1 and "in loop" in frames[1][:400], out0[-3000:]
    assert "tfdevices: rank 0 stopped the job (a stall past the stall timeout)" in out1, out1[-3000:]
    assert codes == [3, 3], (codes, out0[-2000:], out1[-2000:])
