"""Launchers on several machines meet: ``tfdevices launch --nnodes N --node-rank R --master-addr HOST``.

Node 0's launcher listens on ``--master-addr:--master-port``; every other launcher
connects, proves it belongs to the job (:mod:`tfdevices.jobs.handshake`: the same
rendezvous id, and the shared secret when one is set), says how many workers it runs
and where they are reached, and gets the whole cluster back (every worker's
``host:port`` in global rank order, and its own first rank). Anything else that
connects is dropped and counted; the rendezvous goes on until its deadline. The
connections stay open for the job's life, so a failure or a dead launcher on one
machine stops the others (:class:`_Peers`). A signal ends every wait at once
(``stopped``). No TensorFlow here.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import resource
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfdevices.core.addresses import address_problem, host_problem, port_problem
from tfdevices.core.errors import LaunchError
from tfdevices.core.units import short_repr
from tfdevices.jobs.console import say
from tfdevices.jobs.handshake import (
    HELLO_TIMEOUT,
    POLL_S,
    VERSION,
    LineReader,
    Stopped,
    Stray,
    Strays,
    job_hash,
    nonce,
    proof,
    proven,
    send,
    where,
)
from tfdevices.jobs.node_exchange import Node, node_names

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
        rdzv_id: the job's identity; launchers of another job are refused (at most 256 characters;
            ``""``: none, unless ``id_source`` is ``--rdzv-id``, the user's own).
        token: the job's shared secret (``None``: none; never shown).
        id_source: where ``rdzv_id`` came from, for messages (which never show it).
    """

    nnodes: int
    node_rank: int
    master: tuple[str, int]
    node_addr: str | None = None
    timeout: float = 300.0
    rdzv_id: str = ""
    token: bytes | None = dataclasses.field(default=None, repr=False)
    id_source: str = "Nodes.rdzv_id"


MAX_PENDING = 64  # connections saying hello at once; more are dropped at once ("busy")
MAX_CLUSTER = 64 << 20  # bytes of node 0's reply (every worker's address), read by a joiner only
_SEND_TIMEOUT_S = 30.0
_PEER_POLL_S = 5.0


class _Peers:
    """The launchers' open connections: a failure or a death on one machine stops the others.

    Each connection carries ``done 0`` or ``stop CODE`` lines, and the lines of the job's watch across the
    machines (:mod:`tfdevices.jobs.node_exchange`: ``record``, ``want``, ``frames``), given to the handler of
    their first word; another line is ignored (said once), and a connection that drops without ``done`` is a
    failure.

    Attributes:
        node_ranks: the node rank at the other end of each connection (node 0's: ``[0]`` on another node).
        nodes: on node 0, every node of the job with its ranks and name; else empty.
    """

    def __init__(self, readers: Sequence[LineReader], is_master: bool) -> None:
        self.readers = list(readers)
        self.socks = [r.sock for r in self.readers]
        self.is_master = is_master
        self.node_ranks: list[int] = list(range(1, len(self.readers) + 1)) if is_master else [0]
        self.nodes: list[Node] = []
        self.handlers: dict[str, Callable[[int, str, str], None]] = {}
        self._send_locks = [threading.Lock() for _ in self.socks]
        self._done: dict[int, int] = {}
        self._cond = threading.Condition()
        self._on_stop: Callable[[int], None] | None = None
        self._finished = False
        self._ignored = 0
        for sock in self.socks:
            _keepalive(sock)

    def watch(self, on_stop: Callable[[int], None]) -> None:
        """Calls ``on_stop(code)`` when another machine fails or goes away."""
        self._on_stop = on_stop
        for i, reader in enumerate(self.readers):
            threading.Thread(target=self._listen, args=(i, reader), daemon=True).start()

    def send(self, i: int, text: str) -> None:
        """Sends one line on connection ``i`` (one line at a time: lines from two threads never interleave)."""
        with self._send_locks[i]:
            _send_line(self.socks[i], text)

    def _listen(self, i: int, reader: LineReader) -> None:
        code = 1
        while True:
            try:
                raw = reader.line(math.inf, poll=_PEER_POLL_S)
            except Stray as stray:
                if stray.kind == "long":
                    self._ignore()
                    continue
                break  # the connection dropped without "done"
            word, _, value = raw.decode("ascii", "replace").strip().partition(" ")
            if word in self.handlers:
                self.handlers[word](self.node_ranks[i], word, value)
                continue
            if word not in ("done", "stop") or not value.isdigit():
                self._ignore()
                continue
            code = int(value[:4]) or (1 if word == "stop" else 0)
            if word == "done" and code == 0:
                with self._cond:
                    self._done[i] = 0
                    self._cond.notify_all()
                return
            break  # "stop", or "done" with a failure
        with self._cond:  # a failure, or the connection dropped without "done"
            self._done[i] = code or 1
            self._cond.notify_all()
            finished = self._finished
        if not (finished and not self.is_master):
            self._stop(code or 1, skip=i)

    def _ignore(self) -> None:
        self._ignored += 1
        if self._ignored == 1:
            say("ignored a malformed line from another machine's launcher (more are counted)")

    def _stop(self, code: int, skip: int | None = None) -> None:
        if self.is_master:  # tell the other machines
            for j in range(len(self.socks)):
                if j != skip:
                    self.send(j, f"stop {code}")
        if self._on_stop is not None:
            self._on_stop(code)

    def finish(self, code: int, stopped: Callable[[], bool] = lambda: False) -> int:
        """This machine's job ended with ``code``: tell the others; node 0 waits for every machine
        (until ``stopped()``: a signal ends the wait).

        Returns:
            The job's status: this machine's, or the first failure elsewhere.
        """
        with self._cond:
            self._finished = True
        if code != 0:
            for j in range(len(self.socks)):
                self.send(j, f"stop {code}")
            return code
        if not self.is_master:
            self.send(0, "done 0")
            return 0
        with self._cond:
            while len(self._done) < len(self.socks) and not stopped():
                self._cond.wait(POLL_S)
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


def _keepalive(sock: socket.socket) -> None:
    """A machine that vanishes without closing (power, network) is noticed in about two minutes."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    except OSError:
        pass


def rendezvous(nodes: Nodes, n: int, *, stopped: Callable[[], bool] = lambda: False) -> tuple[NodeJob, _Peers]:
    """Agrees with the other launchers on the cluster: node 0 gathers every machine's workers, tells all.

    Every other node connects to node 0 (retrying until ``nodes.timeout``), proves it belongs to
    the job, says its node rank, its address and its workers' ports, and gets back every worker's
    address in global rank order. On node 0, a connection that is not a launcher of this job is
    dropped and counted (the launcher's console says the first of each kind), and the rendezvous goes on.

    Args:
        nodes: this launcher's place, the job's identity and secret.
        n: this machine's workers.
        stopped: true once the launcher got a signal: every wait ends at once.

    Raises:
        LaunchError: a launcher did not come within the timeout, node 0 refused this launcher
            (another job, no or a wrong secret, its node rank taken), or what answers is not a launcher.
        Stopped: ``stopped()`` became true while waiting.
    """
    deadline = time.monotonic() + nodes.timeout
    if nodes.node_rank == 0:
        return _serve(nodes, n, deadline, stopped)
    return _join(nodes, n, deadline, stopped)


def _enough_files(nnodes: int) -> None:
    """Raises this process's open-file limit (its soft one, to its hard one) to what node 0 holds for the job: a
    connection to each other launcher, and what the job's own workers and files take (64 and 8 a node kept aside).
    Past the hard limit a join would fail at ``accept`` (EMFILE): the job is refused at once, saying how to fix it.
    """
    need = 64 + 2 * nnodes
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise LaunchError(
                f"--nnodes {nnodes}: node 0 holds a connection to each other node, about {need} open files, "
                f"over this process's limit of {hard}.",
                hint=f"raise it before the launch (ulimit -n {need}), or run fewer, larger nodes.",
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


@dataclasses.dataclass(frozen=True)
class _Hello:
    reader: LineReader
    host: str
    ports: list[int]
    nonces: tuple[str, str]  # node 0's, the joiner's
    name: str  # its host name (what the job's lines call it)


def _serve(nodes: Nodes, n: int, deadline: float, stopped: Callable[[], bool]) -> tuple[NodeJob, _Peers]:
    _enough_files(nodes.nnodes)
    host, port = nodes.master
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    joined: dict[int, _Hello] = {}
    closing = threading.Event()
    try:
        try:
            server.bind((host, port))
        except OSError as err:
            raise LaunchError(
                f"--master-addr {short_repr(host)} --master-port {port}: cannot listen there ({err.strerror}).",
                hint="run --node-rank 0 on the machine --master-addr names, with a free --master-port.",
            ) from None
        # the whole job may connect at once (srun starts every launcher together): the kernel holds each
        # connection until it is taken, where a backlog of MAX_PENDING dropped the rest's SYNs (at 512 nodes,
        # 350 to 430 of the 511 launchers waited out a 1 s connect and tried again, up to 6 times: 4 to 6 s
        # to join, not 0.5 s; benchmarks/bench_rendezvous.py)
        server.listen(max(MAX_PENDING, nodes.nnodes))
        server.settimeout(POLL_S)
        strays = _gather(server, nodes, joined, deadline, closing, stopped)
        cluster, peers = _form(nodes, n, joined)
        if strays.summary():
            say(str(strays.summary()))
        return cluster, peers
    except BaseException:
        for h in joined.values():
            h.reader.sock.close()
        raise
    finally:
        closing.set()
        server.close()


def _gather(
    server: socket.socket,
    nodes: Nodes,
    joined: dict[int, _Hello],
    deadline: float,
    closing: threading.Event,
    stopped: Callable[[], bool],
) -> Strays:
    """Node 0 takes launchers until every node rank has joined (``joined``); strays are dropped and counted."""
    strays = Strays()
    results: queue.Queue[tuple[socket.socket, str, Any]] = queue.Queue()
    slots = threading.BoundedSemaphore(MAX_PENDING)
    job = job_hash(nodes.rdzv_id)
    while len(joined) < nodes.nnodes - 1:
        if stopped():
            raise Stopped()
        if time.monotonic() >= deadline:
            if strays.summary():
                say(str(strays.summary()))
            missing = sorted(set(range(1, nodes.nnodes)) - set(joined))
            raise LaunchError(
                f"node(s) {short_repr(missing)} did not join within {nodes.timeout:g} s.",
                hint="start the launcher on every machine with the same --nnodes, --master-addr and --master-port.",
            )
        try:
            conn, _ = server.accept()
        except TimeoutError:
            conn = None
        if conn is not None:
            if slots.acquire(blocking=False):
                threading.Thread(
                    target=_greet, args=(conn, nodes, job, deadline, results, slots, closing), daemon=True
                ).start()
            else:
                strays.drop("busy", where(conn))
                conn.close()
        _take(results, joined, strays, nodes.nnodes)
        _forget_leavers(joined)
    closing.set()
    _take(results, joined, strays, nodes.nnodes)  # late ones: every node rank has joined
    return strays


def _form(nodes: Nodes, n: int, joined: Mapping[int, _Hello]) -> tuple[NodeJob, _Peers]:
    """Node 0 forms the job: every worker's address in node order, told to each node with its first rank."""
    own_host = nodes.node_addr or nodes.master[0]
    parts = {0: (own_host, free_ports(n, "0.0.0.0"))}
    parts.update({r: (h.host, h.ports) for r, h in joined.items()})
    addresses: list[str] = []
    firsts: dict[int, int] = {}
    for r in range(nodes.nnodes):
        firsts[r] = len(addresses)
        addresses += [f"{parts[r][0]}:{p}" for p in parts[r][1]]
    job = job_hash(nodes.rdzv_id)
    for r, h in joined.items():
        h.reader.sock.settimeout(_SEND_TIMEOUT_S)
        made = proof(nodes.token, "serve", *h.nonces, job, addresses, firsts[r])
        send(h.reader.sock, {"addresses": addresses, "first_rank": firsts[r], "proof": made, "reports": 1})
    peers = _Peers([joined[r].reader for r in sorted(joined)], True)
    peers.node_ranks = sorted(joined)
    names = node_names(
        {0: socket.gethostname()[:64], **{r: h.name for r, h in joined.items()}},
        {r: host for r, (host, _) in parts.items()},
    )
    ranks = {r: tuple(range(firsts[r], firsts[r] + len(parts[r][1]))) for r in parts}
    peers.nodes = [Node(r, names[r], ranks[r]) for r in sorted(parts)]  # every node sends its records
    return NodeJob(tuple(addresses), 0), peers


def _greet(
    conn: socket.socket,
    nodes: Nodes,
    job: str,
    deadline: float,
    results: queue.Queue[tuple[socket.socket, str, Any]],
    slots: threading.BoundedSemaphore,
    closing: threading.Event,
) -> None:
    """One connection to node 0 (its own thread, so a slow one holds up no other): who is it?"""
    try:
        ours = nonce()
        send(conn, {"tfdevices": "rendezvous", "version": VERSION, "nonce": ours, "token": nodes.token is not None})
        reader = LineReader(conn)
        hello = reader.message(min(deadline, time.monotonic() + HELLO_TIMEOUT), closing.is_set)
        rank, host, ports = _hello(hello, nodes.nnodes)
        if hello.get("job") != job:
            raise Stray("job")
        theirs = hello["nonce"]
        if not proven(nodes.token, hello.get("proof"), "join", ours, theirs, job, rank, host, ports):
            raise Stray("token")
        results.put((conn, "hello", (rank, _Hello(reader, host, ports, (ours, theirs), hello["name"]))))
    except Stray as stray:
        results.put((conn, "stray", stray.kind))
    except (OSError, ValueError, TypeError, KeyError):  # whatever else a stranger sends: dropped, counted
        results.put((conn, "stray", "garbage"))
    except Stopped:
        conn.close()
    finally:
        slots.release()


def _take(
    results: queue.Queue[tuple[socket.socket, str, Any]],
    joined: dict[int, _Hello],
    strays: Strays,
    nnodes: int,
) -> None:
    """Node 0 takes the launchers that said hello, and drops the strays (refused ones are told why)."""
    while True:
        try:
            conn, what, value = results.get_nowait()
        except queue.Empty:
            return
        if what == "hello" and value[0] in joined:
            what, value = "stray", "taken"
        if what == "stray":
            strays.drop(value, where(conn))
            if value in ("job", "token", "taken"):
                send(conn, {"refused": value})
            conn.close()
            continue
        rank, hello = value
        joined[rank] = hello
        if _said_join(len(joined) + 1, nnodes):
            say(f"rendezvous: node {rank} joined from {where(conn)} ({len(joined) + 1} of {nnodes})")


#: Up to this many nodes, each join is said; past it, every eighth of the job and the last.
SAID_JOINS = 16


def _said_join(count: int, nnodes: int) -> bool:
    """Whether node 0 says the join that makes ``count`` of ``nnodes`` nodes (a large job's, at each eighth)."""
    return nnodes <= SAID_JOINS or count == nnodes or count * 8 // nnodes != (count - 1) * 8 // nnodes


def _forget_leavers(joined: dict[int, _Hello]) -> None:
    """A launcher that left before the job formed (stopped, killed) is waited for again."""
    if not joined:
        return
    poller = select.poll()
    for hello in joined.values():
        poller.register(hello.reader.sock, select.POLLIN)
    readable = {fd for fd, _ in poller.poll(0)}
    for rank, hello in list(joined.items()):
        if hello.reader.sock.fileno() in readable:
            try:
                gone = hello.reader.sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                hello.reader.sock.close()
                del joined[rank]
                say(f"rendezvous: node {rank}'s launcher left before the job formed; waiting for node {rank} again")


def _hello(message: Any, nnodes: int) -> tuple[int, str, list[int]]:
    ok = (
        isinstance(message.get("node_rank"), int)
        and host_problem(message.get("host")) is None
        and isinstance(message.get("ports"), list)
        and 0 < len(message["ports"]) <= MAX_WORKERS
        and all(isinstance(p, int) and port_problem(p) is None for p in message["ports"])
        and isinstance(message.get("nonce"), str)
        and 0 < len(message["nonce"]) <= 64
        and isinstance(message.get("name"), str)
        and len(message["name"]) <= 64
        and message["name"].isprintable()
        and message.get("reports") == 1  # it sends its ranks' records: every launcher of this version does
    )
    if not ok or not 0 < message["node_rank"] < nnodes:
        raise Stray("garbage")
    return message["node_rank"], message["host"], message["ports"]


def _join(nodes: Nodes, n: int, deadline: float, stopped: Callable[[], bool]) -> tuple[NodeJob, _Peers]:
    master = f"{short_repr(nodes.master[0])}:{nodes.master[1]}"
    while True:
        reader, greeting = _connect(nodes, deadline, stopped)
        if greeting is not None:
            break
        reader.sock.close()
        _pause(stopped)
    sock = reader.sock
    try:
        job, ours, theirs = job_hash(nodes.rdzv_id), nonce(), greeting["nonce"]
        host = nodes.node_addr or sock.getsockname()[0]
        ports = free_ports(n, "0.0.0.0")
        made = proof(nodes.token, "join", theirs, ours, job, nodes.node_rank, host, ports)
        hello = {"node_rank": nodes.node_rank, "host": host, "ports": ports, "job": job, "nonce": ours, "proof": made}
        send(sock, {**hello, "name": socket.gethostname()[:64], "reports": 1})
        reply = _reply(reader, nodes, master, deadline, stopped, bool(greeting.get("token")))
        addresses, first = reply.get("addresses"), reply.get("first_rank")
        if not (
            isinstance(addresses, list)
            and all(address_problem(a) is None for a in addresses)
            and isinstance(first, int)
            and first >= 0
            and first + n <= len(addresses)
            and reply.get("reports") == 1  # node 0 takes this node's records: every launcher of this version does
        ):
            raise LaunchError(
                "the node-0 launcher sent a malformed cluster.",
                hint="start the same tfdevices version on every machine.",
            )
        if not proven(nodes.token, reply.get("proof"), "serve", theirs, ours, job, addresses, first):
            raise LaunchError(
                f"the node-0 launcher at {master} did not prove it holds the job's rendezvous token.",
                hint="give every machine the same secret (TFDEVICES_RDZV_TOKEN or --rdzv-token-file).",
            )
        peers = _Peers([reader], False)
        return NodeJob(tuple(addresses), first), peers
    except BaseException:
        sock.close()
        raise


def _reply(
    reader: LineReader, nodes: Nodes, master: str, deadline: float, stopped: Callable[[], bool], token: bool
) -> Any:
    """Node 0's reply to this launcher's hello: the cluster, or why it refused."""
    try:
        reply = reader.message(deadline, stopped)
    except Stray as stray:
        raise LaunchError(
            f"the node-0 launcher at {master} "
            + (
                "closed the connection before the job formed."
                if stray.kind == "closed"
                else f"did not form the job within {nodes.timeout:g} s."
                if stray.kind == "slow"
                else "sent a malformed reply."
            ),
            hint="see node 0's console; start the launcher on every machine with the same "
            "--nnodes, --master-addr and --master-port.",
        ) from None
    if "refused" in reply:
        raise _refusal(reply["refused"], nodes, master, token)
    return reply


def _connect(nodes: Nodes, deadline: float, stopped: Callable[[], bool]) -> tuple[LineReader, Any]:
    """Connects to node 0 (retrying until the deadline) and reads its greeting (``None``: try again)."""
    master = f"{short_repr(nodes.master[0])}:{nodes.master[1]}"
    while True:
        if stopped():
            raise Stopped()
        left = deadline - time.monotonic()
        try:
            sock = socket.create_connection(nodes.master, timeout=max(POLL_S, min(1.0, left)))
            break
        except OSError:
            if left <= 0:
                raise LaunchError(
                    f"cannot reach the node-0 launcher at {short_repr(nodes.master[0])}:"
                    f"{nodes.master[1]} within {nodes.timeout:g} s.",
                    hint="start --node-rank 0 on the --master-addr machine; check the address, port and firewall.",
                ) from None
            _pause(stopped)
    reader = LineReader(sock, MAX_CLUSTER)
    try:
        greeting = reader.message(min(deadline, time.monotonic() + HELLO_TIMEOUT), stopped)
    except Stray as stray:
        if stray.kind in ("closed", "slow") and time.monotonic() < deadline:
            return reader, None  # node 0 was busy, or is starting: try again
        sock.close()
        raise LaunchError(
            f"what answers at --master-addr {short_repr(nodes.master[0])} --master-port "
            f"{nodes.master[1]} is not a tfdevices launcher ({stray}).",
            hint="check --master-addr and --master-port; another program may use that port.",
        ) from None
    except BaseException:
        sock.close()
        raise
    if greeting.get("tfdevices") != "rendezvous" or not isinstance(greeting.get("nonce"), str):
        sock.close()
        raise LaunchError(
            f"what answers at {master} is not a tfdevices launcher of this version.",
            hint="start the same tfdevices version on every machine; check --master-port.",
        )
    return reader, greeting


def _pause(stopped: Callable[[], bool], seconds: float = 0.2) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stopped():
        time.sleep(0.05)


def _refusal(kind: object, nodes: Nodes, master: str, wants_token: bool) -> LaunchError:
    """Why node 0 refused this launcher, in the user's terms."""
    if kind == "job":
        return LaunchError(
            f"the node-0 launcher at {master} runs another job: its rendezvous id differs "
            f"from this launcher's (which comes from {nodes.id_source}).",
            hint="start every machine's launcher with the same command, --nnodes and --master-port, "
            "or the same --rdzv-id; another job needs another --master-port.",
        )
    if kind == "taken":
        return LaunchError(
            f"--node-rank {nodes.node_rank}: another machine has joined as node {nodes.node_rank}.",
            hint="give every machine its own --node-rank.",
        )
    if kind == "token" and wants_token and nodes.token is None:
        return LaunchError(
            f"the node-0 launcher at {master} needs the job's rendezvous token, and this launcher has none.",
            hint="set TFDEVICES_RDZV_TOKEN, or pass --rdzv-token-file, with the same secret on every machine.",
        )
    if kind == "token" and not wants_token:
        return LaunchError(
            f"this launcher has a rendezvous token, and the node-0 launcher at {master} has none.",
            hint="give every machine the same secret (TFDEVICES_RDZV_TOKEN or --rdzv-token-file), or none.",
        )
    return LaunchError(
        f"the node-0 launcher at {master} refused this launcher's rendezvous token: the secrets differ.",
        hint="give every machine the same secret (TFDEVICES_RDZV_TOKEN or --rdzv-token-file).",
    )
