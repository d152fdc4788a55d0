"""Launchers on several machines meet: ``tfdevices launch --nnodes N --node-rank R --master-addr HOST``.

Node 0's launcher listens on ``--master-addr:--master-port``; every other launcher
connects, says how many workers it runs and where they are reached, and gets the
whole cluster back (every worker's ``host:port`` in global rank order, and its own
first rank). The connections stay open for the job's life, so a failure or a dead
launcher on one machine stops the others (:class:`_Peers`). Messages are one JSON
line each, bounded in size and in time. No TensorFlow here.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tfdevices.core.errors import LaunchError
from tfdevices.core.units import shown

MASTER_PORT = 29400
MAX_WORKERS = 1024  # per machine, even with --oversubscribe: ports, pipes and threads are finite


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports free on ``host`` right now (bound together, then released)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclasses.dataclass(frozen=True)
class NodeJob:
    """This machine's part of a job over several machines (from :func:`rendezvous`).

    Attributes:
        addresses: every worker's ``host:port``, in global rank order.
        first_rank: the global rank of this machine's first worker.
    """

    addresses: tuple[str, ...]
    first_rank: int


@dataclasses.dataclass(frozen=True)
class Nodes:
    """Where this launcher is in a job over several machines.

    Attributes:
        nnodes: machines (launchers) in the job.
        node_rank: this machine's place.
        master: ``(host, port)`` of node 0's launcher.
        node_addr: the address this machine's workers are reached at (``None``: found when joining).
        timeout: seconds to wait for every launcher.
    """

    nnodes: int
    node_rank: int
    master: tuple[str, int]
    node_addr: str | None = None
    timeout: float = 300.0


_MAX_MESSAGE = 1 << 20


class _Peers:
    """The launchers' open connections: a failure or a death on one machine stops the others."""

    def __init__(self, socks: Sequence[socket.socket], is_master: bool) -> None:
        self.socks = list(socks)
        self.is_master = is_master
        self._done: dict[int, int] = {}
        self._cond = threading.Condition()
        self._on_stop: Callable[[int], None] | None = None
        self._finished = False

    def watch(self, on_stop: Callable[[int], None]) -> None:
        """Calls ``on_stop(code)`` when another machine fails or goes away."""
        self._on_stop = on_stop
        for i, sock in enumerate(self.socks):
            threading.Thread(target=self._listen, args=(i, sock), daemon=True).start()

    def _listen(self, i: int, sock: socket.socket) -> None:
        reader = sock.makefile("rb")
        code = 1
        try:
            for raw in iter(lambda: reader.readline(256), b""):
                word, _, value = raw.decode("ascii", "replace").strip().partition(" ")
                code = int(value) if value.isdigit() else 1
                if word == "done" and code == 0:
                    with self._cond:
                        self._done[i] = 0
                        self._cond.notify_all()
                    return
                break  # "stop" or "done" with a failure
        except OSError:
            pass
        with self._cond:  # a failure, or the connection dropped without "done"
            self._done[i] = code or 1
            self._cond.notify_all()
            finished = self._finished
        if not (finished and not self.is_master):
            self._stop(code or 1, skip=i)

    def _stop(self, code: int, skip: int | None = None) -> None:
        if self.is_master:  # tell the other machines
            for j, sock in enumerate(self.socks):
                if j != skip:
                    _send_line(sock, f"stop {code}")
        if self._on_stop is not None:
            self._on_stop(code)

    def finish(self, code: int) -> int:
        """This machine's job ended with ``code``: tell the others; node 0 waits for every machine.

        Returns:
            The job's status: this machine's, or the first failure elsewhere.
        """
        with self._cond:
            self._finished = True
        if code != 0:
            for sock in self.socks:
                _send_line(sock, f"stop {code}")
            return code
        if not self.is_master:
            _send_line(self.socks[0], "done 0")
            return 0
        with self._cond:
            self._cond.wait_for(lambda: len(self._done) == len(self.socks))
            failures = [c for c in self._done.values() if c]
        return failures[0] if failures else 0

    def close(self) -> None:
        for sock in self.socks:
            try:
                sock.close()
            except OSError:
                pass


def _send_line(sock: socket.socket, text: str) -> None:
    try:
        sock.sendall(f"{text}\n".encode())
    except OSError:
        pass


def _read_json(sock: socket.socket, deadline: float) -> Any:
    sock.settimeout(max(0.1, deadline - time.monotonic()))
    line = sock.makefile("rb").readline(_MAX_MESSAGE)
    sock.settimeout(None)
    if not line.endswith(b"\n"):
        raise LaunchError("a launcher sent no complete message while the machines met.",
                          hint="start the same tfdevices version on every machine, with the same --nnodes.")
    try:
        return json.loads(line)
    except ValueError:
        raise LaunchError("a launcher sent a malformed message while the machines met.",
                          hint="check that nothing else listens on --master-port.") from None


def rendezvous(nodes: Nodes, n: int) -> tuple[NodeJob, _Peers]:
    """Agrees with the other launchers on the cluster: node 0 gathers every machine's workers, tells all.

    Every other node connects to node 0 (retrying until ``nodes.timeout``), says its node rank,
    its address and its workers' ports, and gets back every worker's address in global rank order.

    Raises:
        LaunchError: a launcher did not come within the timeout, two claim one node rank, or
            a message is malformed.
    """
    deadline = time.monotonic() + nodes.timeout
    if nodes.node_rank == 0:
        return _serve(nodes, n, deadline)
    return _join(nodes, n, deadline)


def _serve(nodes: Nodes, n: int, deadline: float) -> tuple[NodeJob, _Peers]:
    host, port = nodes.master
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    joined: dict[int, tuple[socket.socket, str, list[int]]] = {}
    try:
        try:
            server.bind((host, port))
        except OSError as err:
            raise LaunchError(f"--master-addr {shown(host)} --master-port {port}: cannot listen there "
                              f"({err.strerror}).", hint="run --node-rank 0 on the machine --master-addr names, "
                                                         "with a free --master-port.") from None
        server.listen(nodes.nnodes)
        while len(joined) < nodes.nnodes - 1:
            server.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _ = server.accept()
            except socket.timeout:
                missing = sorted(set(range(1, nodes.nnodes)) - set(joined))
                raise LaunchError(f"node(s) {shown(missing)} did not join within {nodes.timeout:g} s.",
                                  hint="start the launcher on every machine with the same --nnodes, "
                                       "--master-addr and --master-port.") from None
            rank, addr, ports = _hello(_read_json(conn, deadline), nodes.nnodes)
            if rank in joined:
                conn.close()
                raise LaunchError(f"two launchers say --node-rank {rank}.", hint="give every machine its own --node-rank.")
            joined[rank] = (conn, addr, ports)
        own_host = nodes.node_addr or host
        parts = {0: (own_host, free_ports(n, "0.0.0.0"))}
        parts.update({r: (a, p) for r, (_, a, p) in joined.items()})
        addresses: list[str] = []
        firsts: dict[int, int] = {}
        for r in range(nodes.nnodes):
            firsts[r] = len(addresses)
            addresses += [f"{parts[r][0]}:{p}" for p in parts[r][1]]
        for r, (conn, _, _) in joined.items():
            _send_line(conn, json.dumps({"addresses": addresses, "first_rank": firsts[r]}))
        return NodeJob(tuple(addresses), 0), _Peers([joined[r][0] for r in sorted(joined)], is_master=True)
    except BaseException:
        for conn, _, _ in joined.values():
            conn.close()
        raise
    finally:
        server.close()


def _hello(message: Any, nnodes: int) -> tuple[int, str, list[int]]:
    ok = (isinstance(message, dict) and isinstance(message.get("node_rank"), int)
          and isinstance(message.get("host"), str) and isinstance(message.get("ports"), list)
          and 0 < len(message["ports"]) <= MAX_WORKERS
          and all(isinstance(p, int) and 0 < p < 65536 for p in message["ports"]))
    if not ok or not 0 < message["node_rank"] < nnodes:
        raise LaunchError(f"a launcher sent a malformed or out-of-range hello: {shown(message)}.",
                          hint="start the same tfdevices version on every machine, with the same --nnodes.")
    return message["node_rank"], message["host"], message["ports"]


def _join(nodes: Nodes, n: int, deadline: float) -> tuple[NodeJob, _Peers]:
    while True:
        try:
            sock = socket.create_connection(nodes.master, timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise LaunchError(f"cannot reach the node-0 launcher at {shown(nodes.master[0])}:"
                                  f"{nodes.master[1]} within {nodes.timeout:g} s.",
                                  hint="start --node-rank 0 on the --master-addr machine; check the address, "
                                       "port and firewall.") from None
            time.sleep(0.2)
    try:
        host = nodes.node_addr or sock.getsockname()[0]
        _send_line(sock, json.dumps({"node_rank": nodes.node_rank, "host": host,
                                     "ports": free_ports(n, "0.0.0.0")}))
        reply = _read_json(sock, deadline)
        addresses, first = reply.get("addresses"), reply.get("first_rank")
        if not (isinstance(addresses, list) and all(isinstance(a, str) for a in addresses)
                and isinstance(first, int) and 0 <= first and first + n <= len(addresses)):
            raise LaunchError("the node-0 launcher sent a malformed cluster.",
                              hint="start the same tfdevices version on every machine.")
        return NodeJob(tuple(addresses), first), _Peers([sock], is_master=False)
    except BaseException:
        sock.close()
        raise


__all__ = ["MASTER_PORT", "MAX_WORKERS", "NodeJob", "Nodes", "free_ports", "rendezvous"]
