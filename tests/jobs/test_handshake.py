"""What launchers say when they meet: bounded lines, the job's identity, the secret's proofs, stray counts,
and the links that stay open during the job (real sockets on 127.0.0.1)."""

from __future__ import annotations

import doctest
import io
import socket
import time

import pytest

from tfdevices.core.errors import LaunchError
from tfdevices.jobs import handshake
from tfdevices.jobs.console import Console, on_console
from tfdevices.jobs.handshake import KINDS, TOKEN_ENV, LineReader, Stopped, Stray, Strays, proof, proven, read_token
from tfdevices.jobs.rendezvous import _Peers


def test_docstring_examples() -> None:
    result = doctest.testmod(handshake)
    assert result.attempted > 0 and result.failed == 0


@pytest.fixture
def pair():
    """Two ends of one TCP connection on 127.0.0.1."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    yield client, accepted
    client.close()
    accepted.close()


def soon(seconds: float = 30.0) -> float:
    return time.monotonic() + seconds


@pytest.mark.parametrize(
    "sent, kind",
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "http"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n", "garbage"),  # a TLS hello, then a newline
        (b"[1, 2]\n", "garbage"),  # JSON, but not an object
        (b"x" * (handshake.MAX_LINE + 10) + b"\n", "long"),
    ],
)
def test_a_stray_line_is_told_by_its_kind(pair, sent, kind) -> None:
    client, accepted = pair
    client.sendall(sent)
    with pytest.raises(Stray) as caught:
        LineReader(accepted).message(soon())
    assert caught.value.kind == kind


def test_silence_is_slow_and_a_close_is_closed(pair) -> None:
    client, accepted = pair
    client.sendall(b'{"node_rank": 1')  # half a message, then nothing: a slow or half-open connection
    with pytest.raises(Stray) as caught:
        LineReader(accepted).line(time.monotonic() + 0.3)
    assert caught.value.kind == "slow"
    client.close()
    with pytest.raises(Stray) as caught:
        LineReader(accepted).line(soon())
    assert caught.value.kind == "closed"


def test_a_long_line_is_skipped_and_the_next_one_read(pair) -> None:
    client, accepted = pair
    reader = LineReader(accepted, limit=100)
    client.sendall(b"y" * 250)  # longer than the limit before its end arrives ...
    with pytest.raises(Stray):
        reader.line(soon())
    client.sendall(b"y" * 250 + b"\ndone 0\n")  # ... its rest is skipped
    assert reader.line(soon()) == b"done 0"


def test_a_wait_ends_when_stopped(pair) -> None:
    _, accepted = pair
    with pytest.raises(Stopped):
        LineReader(accepted).line(soon(), stopped=lambda: True)


def test_a_proof_holds_for_its_nonce_only() -> None:
    token = b"s3cret"
    sent = proof(token, "join", "nonce-1", "nonce-j", "job", 1, "host", [5000])
    assert proven(token, sent, "join", "nonce-1", "nonce-j", "job", 1, "host", [5000])
    assert not proven(token, sent, "join", "nonce-2", "nonce-j", "job", 1, "host", [5000])  # replayed
    assert not proven(token, sent, "join", "nonce-1", "nonce-j", "job", 1, "host", [6000])  # altered
    assert not proven(b"other", sent, "join", "nonce-1", "nonce-j", "job", 1, "host", [5000])
    assert not proven(token, None, "join") and proven(None, None, "join") and not proven(None, sent, "join")
    assert b"s3cret" not in sent.encode()


def test_the_token_comes_from_the_file_then_the_variable(tmp_path) -> None:
    path = tmp_path / "token"
    path.write_text("from-file\n")
    assert read_token(str(path), {TOKEN_ENV: "from-env"}) == b"from-file"
    assert read_token(None, {TOKEN_ENV: "from-env"}) == b"from-env"
    assert read_token(None, {}) is None
    (tmp_path / "empty").write_text("\n")
    for args, first in [
        ((str(tmp_path / "empty"), {}), "--rdzv-token-file"),
        ((str(tmp_path / "missing"), {}), "--rdzv-token-file"),
        ((None, {TOKEN_ENV: " "}), f"{TOKEN_ENV} is set but empty"),
    ]:
        with pytest.raises(LaunchError) as caught:
            read_token(*args)
        assert str(caught.value).startswith(first) and "HINT:" in str(caught.value)
        assert "from-" not in str(caught.value)


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(out), out


def _said(out: io.StringIO) -> list[str]:
    """The launcher's lines on a console, without their ``[launcher] `` mark."""
    return [line.removeprefix("[launcher] ") for line in out.getvalue().splitlines()]


def test_strays_say_the_first_of_each_kind_and_count_the_rest() -> None:
    console, out = _console()
    strays = Strays()
    with on_console(console):  # the launcher's console, as while a launch runs
        for kind in ("http", "http", "garbage", "http"):
            strays.drop(kind, "127.0.0.1:5")
    assert _said(out) == [
        f"rendezvous: dropped a connection from 127.0.0.1:5: {KINDS[k]} (more of this kind are counted)"
        for k in ("http", "garbage")
    ]
    assert strays.summary() == "rendezvous: 4 stray connection(s) dropped (3 HTTP, 1 malformed)"


def test_the_open_links_ignore_malformed_lines(pair) -> None:
    """Node 0's side of a link: garbage and an over-long line are ignored (said once); 'done 0' still counts."""
    client, accepted = pair
    console, out = _console()
    with on_console(console):
        peers = _Peers([LineReader(accepted)], True)
        stops: list[int] = []
        peers.watch(stops.append)
        client.sendall(b"GET / HTTP/1.1\r\n" + b"z" * (handshake.MAX_LINE + 5) + b"\nstop x\ndone 0\n")
        assert peers.finish(0) == 0 and stops == []
    assert _said(out) == ["ignored a malformed line from another machine's launcher (more are counted)"]


def test_a_link_that_drops_stops_the_job(pair) -> None:
    client, accepted = pair
    peers = _Peers([LineReader(accepted)], True)
    stops: list[int] = []
    peers.watch(stops.append)
    client.close()
    assert peers.finish(0) == 1 and stops == [1]
