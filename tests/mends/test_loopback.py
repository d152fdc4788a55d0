"""Launched workers' TensorFlow servers listen where the launcher asks, and nowhere else: the ``loopback`` mend
moves the server's own wildcard bind, and the listen checks (the worker's own and the launcher's, whichever looks
first) stop the job when the server listens on more (the listening sockets read from /proc), with the mend on,
undone or off."""

from __future__ import annotations

import doctest
import re
import socket
import struct
import sys

import pytest

from tests.jobs.launching import held, launch_listen
from tfdevices.core.errors import EnvVarError
from tfdevices.jobs.listen_check import LISTEN_STATUS, listening
from tfdevices.mends import loopback
from tfdevices.mends.loopback import Listen, confined_address, parse_listen

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platform: /proc and ELF: Linux")

LOCAL = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
EVERY = {"0.0.0.0", "::"}


def test_docstring_examples() -> None:
    result = doctest.testmod(loopback)
    assert result.attempted > 0 and result.failed == 0


def _v4(host: str, port: int = 8080) -> bytes:
    return struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton(host))


def _v6(host: str, port: int = 8080) -> bytes:
    return struct.pack("=HHI16sI", socket.AF_INET6, socket.htons(port), 0, socket.inet_pton(socket.AF_INET6, host), 0)


@pytest.mark.parametrize(
    "raw, target, v6only, host",
    [
        (_v4("0.0.0.0"), "127.0.0.1", False, "127.0.0.1"),
        (_v4("0.0.0.0"), "10.1.2.3", False, "10.1.2.3"),  # a node's own address
        (_v4("0.0.0.0", 8081), "127.0.0.1", False, None),  # another port: not the worker's server
        (_v4("10.1.2.3"), "127.0.0.1", False, None),  # a host named already
        (_v4("127.0.0.1"), "127.0.0.1", False, None),
        (_v6("::"), "127.0.0.1", False, "::ffff:127.0.0.1"),  # dual-stack: IPv4 clients of 127.0.0.1 reach it
        (_v6("::"), "10.1.2.3", False, "::ffff:10.1.2.3"),
        (_v6("::"), "127.0.0.1", True, "::1"),
        (_v6("::"), "10.1.2.3", True, None),  # an IPv6-only socket cannot hold it: the listen check sees it
        (_v6("::", 8081), "127.0.0.1", False, None),
        (_v6("fe80::1"), "127.0.0.1", False, None),
        (_v4("0.0.0.0"), None, False, None),  # --listen all: nothing moves
    ],
)
def test_only_a_wildcard_bind_of_the_workers_port_moves(
    raw: bytes, target: str | None, v6only: bool, host: str | None
) -> None:
    got = confined_address(raw, Listen(target, 8080), lambda: v6only)
    if host is None:
        assert got is None
        return
    family = struct.unpack_from("=H", raw)[0]
    assert got is not None and len(got) == len(raw) and got[:4] == raw[:4]  # family and port kept
    at = slice(4, 8) if family == socket.AF_INET else slice(8, 24)
    assert socket.inet_ntop(family, got[at]) == host and got[at.stop :] == raw[at.stop :]


@pytest.mark.parametrize(
    "value, want",
    [
        ("127.0.0.1:41234", Listen("127.0.0.1", 41234)),
        ("10.0.0.5:1", Listen("10.0.0.5", 1)),
        ("all:65535", Listen(None, 65535)),
        ("", None),
        ("127.0.0.1", None),
        ("127.0.0.1:0", None),
        ("127.0.0.1:65536", None),
        ("127.0.0.1:+1", None),
        ("0.0.0.0:80", None),  # every interface is said as all
        ("[::1]:80", None),
        ("localhost:80", None),
        ("ALL:80", None),
        ("127.0.0.1:٣", None),  # a digit, but not ASCII
        ("1" * 100 + ":80", None),
    ],
)
def test_the_listen_variable_is_read_strictly(value: str, want: Listen | None) -> None:
    if want is not None:
        assert parse_listen(value) == want and parse_listen(want.value()) == want
        return
    asked = r"^TFDEVICES_LISTEN: not ADDRESS:PORT \(an IPv4 address\) or all:PORT: "
    with pytest.raises(EnvVarError, match=asked) as err:
        parse_listen(value)
    assert "HINT: tfdevices launch sets it" in str(err.value)
    assert repr(value) not in str(err.value)  # the variable's value is not quoted


def test_on_the_workers_of_a_one_machine_job_listen_on_127_0_0_1_only(tmp_path) -> None:
    """tfdevices launch -n 2 with TensorFlow workers (MultiWorkerMirroredStrategy): while they hold, each
    listens on its TF_CONFIG port on 127.0.0.1 only; 127.0.0.1 reaches it, 127.0.0.2 does not; the mend says
    which port it moved where, in which libraries."""

    def check(pids: dict[int, tuple[int, int]]) -> None:
        for rank, (pid, port) in pids.items():
            sockets = listening(port, str(pid))
            assert sockets and {host for host, _ in sockets} <= LOCAL, (rank, sockets)
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.2", port), timeout=10)

    out, pids = held(launch_listen(tmp_path), tmp_path, check)
    assert "[launcher] the workers' TensorFlow servers listen on 127.0.0.1 only" in out, out
    for rank, (_, port) in pids.items():
        assert re.search(
            rf"\[{rank}\] mend applied: a wildcard bind of port {port} goes to 127\.0\.0\.1 \(bind in "
            rf"libtensorflow.*; moved: \[::\]:{port} -> \[::ffff:127\.0\.0\.1\]:{port}\n",
            out,
        ), out
    assert "sum 3" in out and "listen check" not in out


def _stopped(out: str, code: int) -> str:
    """The job stopped by a listen check: the worker's own or the launcher's, whichever looked first (the launcher
    kills the worker it finds at once). Returns what the check's line says in brackets: why the worker's server
    could listen there, or that the launcher saw it."""
    assert code == LISTEN_STATUS, out
    said = re.findall(
        r"^\[(\d|launcher)\] tfdevices: listen check: rank (\d)'s TensorFlow server listens on \[::\]:(\d+) \(every "
        r"interface\), not 127\.0\.0\.1 as tfdevices launch asked \((.*)\)\. It has no authentication: whoever "
        r"reaches this machine's port \3 could run graphs in this worker; stopping it\. HINT: launch with --listen all",
        out,
        re.MULTILINE,
    )
    assert said, out
    ended = re.findall(
        r"^\[launcher\] worker (\d) (stopped: the launcher's|exited with status 86: its) listen check found its "
        r"TensorFlow server listening on more than --listen asked; stopping the others$",
        out,
        re.MULTILINE,
    )
    assert len(ended) == 1, out
    rank, by = ended[0]
    # the line of the check that stopped the job: the launcher's, or the worker's own (both may have looked)
    who = "launcher" if by.startswith("stopped") else rank
    whys = [why for line_of, line_rank, _, why in said if line_of == who and line_rank == rank]
    assert whys, out
    return whys[0]


def test_a_bind_the_mend_misses_stops_the_job(tmp_path) -> None:
    """The worker undoes the mend after importing TensorFlow (its server then binds as TensorFlow has it, a path
    the mend does not catch): its listen check says where it listens and why that is a risk, and the launcher
    stops the job with the check's status, saying so."""
    proc = launch_listen(tmp_path, "undo")
    out, _ = proc.communicate(timeout=240)
    why = _stopped(out, proc.returncode)
    assert re.fullmatch(r"the loopback mend is undone: taken back|seen by the launcher in /proc/\d+", why), out


def test_off_the_server_listens_as_tensorflow_has_it_and_the_check_still_stops_the_job(tmp_path) -> None:
    """TFDEVICES_MENDS=loopback: nothing moves TensorFlow's bind (every interface, as TensorFlow has it), and a job
    asked to stay on 127.0.0.1 is stopped all the same."""
    proc = launch_listen(tmp_path, env={"TFDEVICES_MENDS": "loopback"})
    out, _ = proc.communicate(timeout=240)
    why = _stopped(out, proc.returncode)
    assert re.match(
        r"the loopback mend is off: turned off \(TFDEVICES_MENDS|seen by the launcher in /proc/\d+$", why
    ), out


def test_listen_all_runs_on_every_interface_and_says_so(tmp_path) -> None:
    """--listen all (the worker undoing the mend too): no bind moves, nothing stops, each worker says once what it
    exposes, and its socket is TensorFlow's own wildcard."""

    def check(pids: dict[int, tuple[int, int]]) -> None:
        for rank, (pid, port) in pids.items():
            assert {host for host, _ in listening(port, str(pid))} & EVERY, rank

    out, pids = held(launch_listen(tmp_path, "undo", options=("--listen", "all")), tmp_path, check)
    assert "[launcher] --listen all: the workers' TensorFlow servers listen on every interface" in out, out
    assert sorted(pids) == [0, 1], out
    for rank, (_, port) in pids.items():
        said = re.findall(
            rf"^\[{rank}\] tfdevices: rank {rank}'s TensorFlow server listens on every interface, port {port} "
            r"\(--listen all\): whoever reaches this machine on that port can run graphs in this worker$",
            out,
            re.MULTILINE,
        )
        assert len(said) == 1, out
        assert re.search(rf"\[{rank}\] mend not_needed: --listen all: port {port} listens on every interface", out)
    assert "sum 3" in out and "listen check" not in out
