"""A launched worker's start-up: its listen check reads this process's listening sockets, says where they
listen, and stops the worker when that is more than asked; a malformed TFDEVICES_LISTEN stops it at once."""

from __future__ import annotations

import doctest
import socket
import sys

import pytest

from tests.helpers import run_py
from tfdevices.jobs import workersite
from tfdevices.jobs.workersite import LISTEN_MARK, LISTEN_STATUS, listen_verdict, listening, watch_listen
from tfdevices.mends.loopback import Listen

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")


def test_docstring_examples() -> None:
    result = doctest.testmod(workersite)
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


def test_a_malformed_listen_variable_stops_the_worker_naming_it() -> None:
    proc = run_py(
        """
        from tfdevices.jobs.workersite import start_worker
        start_worker({"TFDEVICES_LISTEN": "0.0.0.0:80", "RANK": "2"})
        print("went on")
        """,
        check=False,
        timeout=60,
    )
    assert proc.returncode == LISTEN_STATUS and "went on" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"{LISTEN_MARK} TFDEVICES_LISTEN='0.0.0.0:80': not ADDRESS:PORT"), proc.stderr
