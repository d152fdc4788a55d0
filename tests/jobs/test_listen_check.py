"""The launcher's listen check, from outside the worker: it reads the sockets of every process a worker started (its
own and its children's, in its own network namespace) once the port listens, and stops a worker listening beyond
``--listen`` (every interface, IPv6's wildcard, another address), whatever the worker imported, mended or undid.

Real processes, real sockets: a child of a shell stands for a worker started through ``sh -c``; TensorFlow workers
under ``tfdevices launch`` with the worker's own check made blind, with ``python -I`` (no sitecustomize, so no mend
and no check inside the worker), and two launchers as two nodes.
"""

from __future__ import annotations

import doctest
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import kill_all
from tests.jobs.launching import LISTEN_WORKER, NODE1, held, launch_listen, two_nodes
from tfdevices.jobs import listen_check
from tfdevices.jobs.listen_check import (
    LISTEN_MARK,
    LISTEN_STATUS,
    OutsideCheck,
    listen_verdict,
    listening,
    process_tree,
    watch_listen,
)
from tfdevices.jobs.rendezvous import free_ports
from tfdevices.mends.loopback import Listen

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platform: /proc: Linux")

#: A child that binds HOST:PORT (IPv6 for an address with ':'), listens when told (a line on stdin), then holds.
_SERVER = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port))
print('bound', flush=True)
sys.stdin.readline()
s.listen()
print('listening', flush=True)
sys.stdin.readline()
"""


class _Worker:
    """A shell whose child binds, then listens on command: the shell's pid is the one the launcher knows."""

    def __init__(self, host: str, port: int) -> None:
        script = f'{sys.executable} -c "$0" {host} {port}; true'  # not exec'd: the server is the shell's child
        self.proc = subprocess.Popen(
            ["sh", "-c", script, _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline() == "bound\n"

    def listen(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "listening\n"

    def close(self) -> None:
        kill_all(int(pid) for pid in process_tree(self.proc.pid)[::-1])
        self.proc.wait(timeout=10)


@pytest.fixture
def worker():
    made: list[_Worker] = []

    def make(host: str, port: int) -> _Worker:
        made.append(_Worker(host, port))
        return made[-1]

    yield make
    for each in made:
        each.close()


def test_the_process_tree_holds_the_shells_child(worker) -> None:
    port = free_ports(1)[0]
    shell = worker("127.0.0.1", port)
    tree = process_tree(shell.proc.pid)
    assert len(tree) == 2 and tree[0] == str(shell.proc.pid), tree
    shell.listen()
    assert listening(port, shell.proc.pid) == []  # the shell itself holds no socket
    assert listening(port, shell.proc.pid, tree=True) == [("127.0.0.1", port)]


@pytest.mark.parametrize(
    "bound, asked, shown",
    [
        ("0.0.0.0", "127.0.0.1", r"0\.0\.0\.0:{port} \(every interface\)"),
        ("::", "127.0.0.1", r"\[::\]:{port} \(every interface\)"),
        ("127.0.0.1", "127.0.0.2", r"127\.0\.0\.1:{port}"),  # another address than asked
    ],
)
def test_a_worker_listening_beyond_its_address_is_stopped_once_it_listens(worker, bound, asked, shown) -> None:
    port = free_ports(1)[0]
    child = worker(bound, port)
    stops: list[tuple[int, str]] = []
    called = threading.Event()
    check = OutsideCheck([(3, child.proc.pid, Listen(asked, port))], lambda *a: (stops.append(a), called.set()))
    check.start()
    try:
        deadline = time.monotonic() + 30
        while check.looks < 3 and time.monotonic() < deadline:  # it has looked, the port bound, not listening
            time.sleep(0.01)
        assert check.looks >= 3 and stops == []
        child.listen()
        assert called.wait(30), check.looks
    finally:
        check.close()
    ((rank, line),) = stops
    assert rank == 3
    assert re.fullmatch(
        rf"{LISTEN_MARK} rank 3's TensorFlow server listens on {shown.format(port=port)}, not {re.escape(asked)} as "
        rf"tfdevices launch asked \(seen by the launcher in /proc/{child.proc.pid}\)\. It has no authentication: "
        rf"whoever reaches this machine's port {port} could run graphs in this worker; stopping it\. HINT: launch "
        r"with --listen all if every interface is intended \(then keep the port behind a firewall\)\.",
        line,
    ), line


def test_a_worker_on_its_address_is_left_alone_look_after_look(worker) -> None:
    port = free_ports(1)[0]
    child = worker("127.0.0.1", port)
    child.listen()
    stops: list[tuple[int, str]] = []
    check = OutsideCheck([(0, child.proc.pid, Listen("127.0.0.1", port))], lambda *a: stops.append(a)).start()
    try:
        deadline = time.monotonic() + 30
        while check.looks < 3 and time.monotonic() < deadline:  # the port listened at every one of these looks
            time.sleep(0.05)
    finally:
        check.close()
    assert check.looks >= 3 and check.all_listen and stops == []


def test_listen_all_is_not_read() -> None:
    check = OutsideCheck([(0, 1, Listen(None, 8000))], lambda *a: None)
    assert check.workers == [] and check.start().looks == 0


# --------------------------------------------------------------------------- the worker's own check


def test_docstring_examples() -> None:
    result = doctest.testmod(listen_check)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(
    "host, found, wrong",
    [
        ("127.0.0.1", [("127.0.0.1", 9)], None),
        ("127.0.0.1", [("::ffff:127.0.0.1", 9)], None),
        ("127.0.0.1", [("::1", 9)], None),  # an IPv6-only socket on the loopback address
        ("10.0.0.5", [("::ffff:10.0.0.5", 9)], None),
        ("10.0.0.5", [("::1", 9)], "[::1]:9"),  # local, but not the node's address
        ("127.0.0.1", [("::", 9)], "[::]:9 (every interface)"),
        ("127.0.0.1", [("0.0.0.0", 9)], "0.0.0.0:9 (every interface)"),
        ("127.0.0.1", [("127.0.0.1", 9), ("10.0.0.5", 9)], "10.0.0.5:9"),
        (None, [("::", 9)], None),  # --listen all
    ],
)
def test_the_verdict_names_each_socket_beyond_the_asked_address(
    host: str | None, found: list[tuple[str, int]], wrong: str | None
) -> None:
    said = listen_verdict(Listen(host, 9), found, rank="3")
    if wrong is None:
        assert said is None
        return
    assert said is not None and said.startswith(f"rank 3's TensorFlow server listens on {wrong}, not {host} as")
    assert "HINT: launch with --listen all if every interface is intended" in said


def test_the_check_waits_for_the_port_then_stops_a_worker_listening_elsewhere() -> None:
    """A socket of this process on 127.0.0.1 while 127.0.0.2 was asked: the check finds it once it listens
    (not before), says so, and ends the worker with LISTEN_STATUS; asked 127.0.0.1, it says nothing."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        assert listening(port) == []  # bound, not yet listening
        stops: list[int] = []
        lines: list[str] = []
        wrong = watch_listen(Listen("127.0.0.2", port), "0", stop=stops.append, out=lines.append)
        right = watch_listen(Listen("127.0.0.1", port), "0", stop=stops.append, out=lines.append)
        wrong.join(0.3)
        assert wrong.is_alive() and stops == []  # waiting for the server to listen
        server.listen()
        assert listening(port) == [("127.0.0.1", port)]
        for thread in (wrong, right):
            thread.join(10)
            assert not thread.is_alive()
    assert stops == [LISTEN_STATUS]
    assert len(lines) == 1 and lines[0].startswith(
        f"{LISTEN_MARK} rank 0's TensorFlow server listens on 127.0.0.1:{port}, not 127.0.0.2 as tfdevices launch"
    ), lines


def test_listen_all_says_where_it_listens_and_stops_nothing() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        stops: list[int] = []
        lines: list[str] = []
        watch_listen(Listen(None, port), "1", stop=stops.append, out=lines.append).join(10)
    assert stops == []
    assert lines == [f"tfdevices: rank 1's TensorFlow server listens on 127.0.0.1:{port} (--listen all)"]


# --------------------------------------------------------------------------- TensorFlow workers under the launcher


def _stopped_by_the_launcher(out: str, code: int) -> None:
    assert code == LISTEN_STATUS, out[-4000:]
    said = re.findall(
        r"^\[launcher\] tfdevices: listen check: rank (\d)'s TensorFlow server listens on \[::\]:(\d+) \(every "
        r"interface\), not (127\.0\.0\.[12]) as tfdevices launch asked \(seen by the launcher in /proc/\d+\)\. It has "
        r"no authentication: whoever reaches this machine's port \2 could run graphs in this worker; stopping it\.",
        out,
        re.MULTILINE,
    )
    assert said, out[-4000:]
    assert re.search(
        rf"^\[launcher\] worker {said[0][0]} stopped: the launcher's listen check found its TensorFlow server "
        "listening on more than --listen asked; stopping the others$",
        out,
        re.MULTILINE,
    ), out[-4000:]


@pytest.mark.slow
@pytest.mark.tensorflow
def test_with_the_workers_own_check_blind_the_launcher_stops_the_job(tmp_path) -> None:
    """The worker undoes the mend after importing TensorFlow and makes its own check read no socket: the server
    listens on every interface, and only the launcher can see it."""
    proc = launch_listen(tmp_path, "no_check")
    out, _ = held(proc, tmp_path, until_stopped=True)
    _stopped_by_the_launcher(out, proc.returncode)
    assert "[0] tfdevices: listen check" not in out and "[1] tfdevices: listen check" not in out, out[-4000:]


@pytest.mark.slow
@pytest.mark.tensorflow
def test_a_worker_that_runs_no_sitecustomize_is_stopped_by_the_launcher(tmp_path) -> None:
    """``python -I`` ignores PYTHONPATH, so the launcher's sitecustomize never runs there: no mend, no check inside
    the worker. The launcher's check stops the job all the same."""
    proc = launch_listen(tmp_path, "tensorflow", "-I")
    out, _ = held(proc, tmp_path, until_stopped=True)
    _stopped_by_the_launcher(out, proc.returncode)


@pytest.mark.slow
@pytest.mark.tensorflow
@pytest.mark.parametrize("blind", [0, 1])
def test_on_two_nodes_the_launcher_of_the_node_whose_worker_listens_everywhere_stops_it(tmp_path, blind: int) -> None:
    """Two launchers as two nodes (one worker each, node 1's on 127.0.0.2): the worker of node ``blind`` undoes the
    mend and makes its own check blind. That node's launcher finds it on every interface and stops it; the other
    node's job stops with it."""
    node0, node1, codes = two_nodes(LISTEN_WORKER, str(tmp_path), f"no_check:{blind}")
    consoles, statuses = {0: node0, 1: node1}, dict(enumerate(codes))
    shown = f"node 0:\n{node0[-3000:]}\nnode 1:\n{node1[-3000:]}"
    _stopped_by_the_launcher(consoles[blind], statuses[blind])
    asked = "127.0.0.1" if blind == 0 else NODE1
    assert f"not {asked} as tfdevices launch asked (seen by the launcher" in consoles[blind], shown
    other = 1 - blind
    assert statuses[other] != 0 and "seen by the launcher" not in consoles[other], shown
