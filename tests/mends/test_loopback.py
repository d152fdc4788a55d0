"""One-machine jobs stay on the machine: the workers' TensorFlow servers accept connections on 127.0.0.1
and on no other local address (their listening sockets read from /proc/net/tcp and /proc/net/tcp6)."""

from __future__ import annotations

import doctest
import os
import re
import socket
import struct
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, kill_all, subprocess_env
from tfdevices.mends import loopback
from tfdevices.mends.loopback import loopback_address

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and ELF: Linux")

TINY = os.path.join(REPO, "tests", "scripts", "tiny_train.py")


def test_docstring_examples() -> None:
    result = doctest.testmod(loopback)
    assert result.attempted > 0 and result.failed == 0


def _v4(host: str) -> bytes:
    return struct.pack("=HH4s8x", socket.AF_INET, 0x1F90, socket.inet_aton(host))


def _v6(host: str) -> bytes:
    return struct.pack("=HHI16sI", socket.AF_INET6, 0x1F90, 0, socket.inet_pton(socket.AF_INET6, host), 0)


@pytest.mark.parametrize(
    "raw, v6only, host",
    [
        (_v4("0.0.0.0"), False, "127.0.0.1"),
        (_v4("10.1.2.3"), False, None),
        (_v4("127.0.0.1"), False, None),
        (_v6("::"), False, "::ffff:127.0.0.1"),  # dual-stack: IPv4 clients of 127.0.0.1 still reach it
        (_v6("::"), True, "::1"),
        (_v6("fe80::1"), False, None),
    ],
)
def test_only_a_wildcard_address_becomes_the_loopback_one(raw: bytes, v6only: bool, host: str | None) -> None:
    got = loopback_address(raw, lambda: v6only)
    if host is None:
        assert got is None
        return
    family = struct.unpack_from("=H", raw)[0]
    assert len(got) == len(raw) and got[:4] == raw[:4]  # family and port kept
    at = slice(4, 8) if family == socket.AF_INET else slice(8, 24)
    assert socket.inet_ntop(family, got[at]) == host and got[at.stop :] == raw[at.stop :]


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket ``pid`` listens on, from /proc/net/tcp and /proc/net/tcp6."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            match = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if match:
            inodes.add(match.group(1))
    found = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(table, encoding="ascii") as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in inodes:  # 0A: LISTEN
                    continue
                hexaddr, hexport = local.split(":")
                raw = bytes.fromhex(hexaddr)  # the kernel writes each 32-bit word in host order
                raw = (
                    b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)) if sys.byteorder == "little" else raw
                )
                found.add((socket.inet_ntop(family, raw), int(hexport, 16)))
    return found


def test_the_workers_of_a_one_machine_job_listen_on_127_0_0_1_only(tmp_path) -> None:
    """tfdevices launch -n 2 with TensorFlow workers (MultiWorkerMirroredStrategy, 3 steps): while they hold,
    each listens on its TF_CONFIG port on 127.0.0.1 only; 127.0.0.1 reaches it, 127.0.0.2 does not."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdevices", "launch", "-n", "2", "--", sys.executable, TINY, str(tmp_path)],
        env=subprocess_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    pids: dict[int, int] = {}
    try:
        ready = set()
        deadline = time.monotonic() + 240
        while len(ready) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if match := re.match(r"\[launcher\] worker (\d): pid (\d+), 127\.0\.0\.1:(\d+)", line):
                pids[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
            if match := re.match(r"\[(\d)\] ready \d", line):
                ready.add(int(match.group(1)))
        assert ready == {0, 1}, "".join(lines)
        for rank, (pid, port) in pids.items():
            sockets = _listening(pid)
            assert ("::ffff:127.0.0.1", port) in sockets or ("127.0.0.1", port) in sockets, (rank, sockets)
            assert {host for host, _ in sockets} <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, (rank, sockets)
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.2", port), timeout=10)
    finally:
        (tmp_path / "go").touch()
        try:
            rest, _ = proc.communicate(timeout=120)
        finally:
            kill_all([proc.pid] + [pid for pid, _ in pids.values()])
    lines.append(rest)
    assert proc.returncode == 0, "".join(lines)
    assert "cannot keep this worker's TensorFlow server" not in "".join(lines)
