"""What the launchers of one job say when they meet, and how a stranger is told apart.

The node-0 launcher speaks first, with a fresh random nonce; a joining launcher answers
with its node rank, its workers' ports and the job's identity (a hash of the rendezvous id:
``--rdzv-id``, else SLURM's job id, else derived from the command, ``--nnodes`` and
``--master-port``). When the launchers share a secret (``TFDEVICES_RDZV_TOKEN`` or
``--rdzv-token-file``) each proves it holds it by an HMAC over both nonces and what it says;
the secret never crosses the network, and a recorded exchange fails against a fresh nonce.

Every message is one JSON line, read with a length limit and a deadline
(:class:`LineReader`); a connection that breaks the rules raises :class:`Stray` with its
kind, and the rendezvous drops it and goes on (:class:`Strays` counts them). No TensorFlow here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfdevices.core.errors import LaunchError
from tfdevices.core.units import short_repr
from tfdevices.jobs.console import say

TOKEN_ENV = "TFDEVICES_RDZV_TOKEN"
MAX_LINE = 64 << 10  # bytes in one message to node 0 (a hello of 1024 ports takes 7 KiB)
HELLO_TIMEOUT = 10.0  # seconds a connection gets to say who it is
POLL_S = 0.1  # how often a wait looks at the stop flag (signals end a waiting launcher at once)
VERSION = 1

#: What a dropped connection was, as the console says it.
KINDS = {
    "closed": "closed before saying anything",
    "http": "an HTTP request",
    "garbage": "not a tfdevices launcher (a malformed message)",
    "long": f"a line longer than {MAX_LINE >> 10} KiB",
    "slow": f"no complete message within {HELLO_TIMEOUT:g} s (half-open or too slow)",
    "job": "a launcher of another job (its rendezvous id differs)",
    "token": "a launcher without the rendezvous token, with a wrong one, or a replayed exchange",
    "taken": "a second launcher for a node rank that has joined",
    "busy": "too many connections at once",
}

#: The same, in the one-line count at the end of a rendezvous.
SHORT = {
    "closed": "closed at once",
    "http": "HTTP",
    "garbage": "malformed",
    "long": "too long",
    "slow": "too slow",
    "job": "another job",
    "token": "no or wrong token",
    "taken": "rank taken",
    "busy": "too many",
}


class Stray(Exception):  # noqa: N818 (a stray connection, not an error of the program)
    """A connection that is not (or not yet) a launcher of this job; ``kind`` is a key of :data:`KINDS`."""

    def __init__(self, kind: str) -> None:
        super().__init__(KINDS[kind])
        self.kind = kind


class Stopped(Exception):  # noqa: N818 (a signal came: the launcher stops, no error)
    """The launcher got a signal while it waited: it stops at once."""


class LineReader:
    """Reads ``\\n``-terminated lines of at most ``limit`` bytes from a socket, by a deadline.

    A line past the limit raises :class:`Stray` (``long``) once; the rest of it is skipped.
    """

    def __init__(self, sock: socket.socket, limit: int = MAX_LINE) -> None:
        self.sock, self.limit = sock, limit
        self._buffer, self._skipping = b"", False

    def line(self, deadline: float, stopped: Callable[[], bool] = lambda: False, poll: float = POLL_S) -> bytes:
        """The next line (without its ``\\n``), waiting at most until ``deadline`` (``time.monotonic()``).

        Raises:
            Stray: ``long`` past the limit, ``slow`` at the deadline, ``closed`` when the other end
                closed first.
            Stopped: ``stopped()`` became true.
        """
        while True:
            if self._skipping and b"\n" in self._buffer:
                self._buffer, self._skipping = self._buffer.partition(b"\n")[2], False
            if not self._skipping and b"\n" in self._buffer:
                line, _, self._buffer = self._buffer.partition(b"\n")
                if len(line) <= self.limit:
                    return line
                raise Stray("long")
            if len(self._buffer) > self.limit:
                skipped, self._buffer, self._skipping = self._skipping, b"", True
                if not skipped:
                    raise Stray("long")
            now = time.monotonic()
            if now >= deadline:
                raise Stray("slow")
            if stopped():
                raise Stopped()
            self.sock.settimeout(min(poll, deadline - now))
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                data = b""
            if not data:
                raise Stray("closed")
            self._buffer += data

    def message(self, deadline: float, stopped: Callable[[], bool] = lambda: False) -> dict[str, Any]:
        """The next line as a JSON object.

        Raises:
            Stray: as :meth:`line`; ``http`` for an HTTP request line, ``garbage`` for anything else
                that is not a JSON object.
        """
        line = self.line(deadline, stopped)
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
        raise Stray("http" if re.match(rb"^[A-Z]+ \S+ HTTP/\d", line) else "garbage")


def send(sock: socket.socket, message: Mapping[str, Any]) -> bool:
    """Sends one message; ``False`` when the connection is gone."""
    try:
        sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- identity and secret


def rdzv_id(
    explicit: str | None, env: Mapping[str, str], command: Sequence[str], nnodes: int, port: int
) -> tuple[str, str]:
    """The job's rendezvous id and where it came from (for messages, which never show it).

    >>> rdzv_id("exp7", {}, ["python", "train.py"], 2, 29400)
    ('exp7', '--rdzv-id')
    >>> rdzv_id(None, {"SLURM_JOB_ID": "8812"}, ["python", "train.py"], 2, 29400)[1]
    'SLURM_JOB_ID'
    >>> a = rdzv_id(None, {}, ["python", "train.py"], 2, 29400)
    >>> a == rdzv_id(None, {}, ["python", "train.py"], 2, 29400), a == rdzv_id(None, {}, ["python", "x.py"], 2, 29400)
    (True, False)
    """
    if explicit:
        return explicit, "--rdzv-id"
    if env.get("SLURM_JOB_ID"):
        return env["SLURM_JOB_ID"], "SLURM_JOB_ID"
    text = json.dumps([list(command), nnodes, port])
    return hashlib.sha256(text.encode()).hexdigest()[:32], "the command, --nnodes and --master-port"


def read_token(path: str | None, env: Mapping[str, str]) -> bytes | None:
    """The shared secret: the file ``--rdzv-token-file`` names, else :data:`TOKEN_ENV`, else ``None``.

    Raises:
        LaunchError: the file cannot be read or is empty, or the variable is set but empty.
    """
    if path is not None:
        try:
            with open(path, "rb") as f:
                token = f.read(MAX_LINE).strip()
        except OSError as err:
            raise LaunchError(
                f"--rdzv-token-file {short_repr(path)}: cannot read it ({err.strerror}).",
                hint="name a file holding the job's secret, readable on every machine.",
            ) from None
        if not token:
            raise LaunchError(
                f"--rdzv-token-file {short_repr(path)} is empty.",
                hint="write a secret into it, e.g. python -c 'import secrets; print(secrets.token_hex(32))' > FILE.",
            )
        return token
    if TOKEN_ENV in env:
        token = env[TOKEN_ENV].strip().encode()
        if not token:
            raise LaunchError(f"{TOKEN_ENV} is set but empty.", hint="set it to the job's secret, or unset it.")
        return token
    return None


def job_hash(rdzv: str) -> str:
    """What travels of the rendezvous id: its hash (an id derived from a command never shows the command)."""
    return hashlib.sha256(f"tfdevices-rdzv|{rdzv}".encode()).hexdigest()[:32]


def nonce() -> str:
    """A fresh 128-bit challenge, hex: what a proof is bound to, so a recorded one cannot be replayed."""
    return secrets.token_hex(16)


def proof(token: bytes | None, *parts: object) -> str | None:
    """HMAC-SHA256 of ``parts`` under ``token`` (``None`` without a token)."""
    if token is None:
        return None
    return hmac.new(token, json.dumps(parts, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def proven(token: bytes | None, given: object, *parts: object) -> bool:
    """``given`` proves ``parts`` under ``token`` (with no token: nothing was to be proven, and nothing was)."""
    if token is None:
        return given is None
    expected = proof(token, *parts)
    return isinstance(given, str) and expected is not None and hmac.compare_digest(given, expected)


# --------------------------------------------------------------------------- counting strays


class Strays:
    """Dropped connections by kind: the first of each kind is said at once, the rest counted."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def drop(self, kind: str, where: str) -> None:
        """Counts one dropped connection of ``kind`` from ``where``; says it when it is the first of its kind."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.counts[kind] == 1:
            say(f"rendezvous: dropped a connection from {where}: {KINDS[kind]} (more of this kind are counted)")

    def summary(self) -> str | None:
        """One line of every dropped connection by kind, ``None`` when there was none."""
        if not self.counts:
            return None
        parts = ", ".join(f"{n} {SHORT[kind]}" for kind, n in self.counts.items())
        return f"rendezvous: {sum(self.counts.values())} stray connection(s) dropped ({parts})"


def where(sock: socket.socket) -> str:
    """The peer of ``sock`` as ``HOST:PORT`` ("a closed connection" when it is gone)."""
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "a closed connection"
