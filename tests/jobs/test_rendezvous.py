"""Launchers on several machines meet: real launchers on 127.0.0.1 forming one job, failures, timeouts,
strangers at the door (stray connections, another job, no or a wrong secret, a replayed exchange), signals."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import REPO, kill_all, subprocess_env
from tests.jobs.launching import WORKER, reports
from tfdevices.jobs.handshake import KINDS, TOKEN_ENV, Stopped
from tfdevices.jobs.listen_check import listening
from tfdevices.jobs.rendezvous import MAX_PENDING, Nodes, free_ports, rendezvous
from tfdevices.jobs.tfconfig import parse_tf_config

TINY = os.path.join(REPO, "tests", "scripts", "tiny_train.py")


def test_free_ports_are_distinct_and_bindable_on_loopback() -> None:
    ports = free_ports(4)
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def _node(
    rank: int,
    port: int,
    *command: str,
    n: int = 2,
    timeout: str = "60",
    nnodes: int = 2,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    node_addr: bool = True,
) -> subprocess.Popen:
    """One launcher of an NNODES-machine job on this machine: node R's workers listen on 127.0.0.(R+1), its own host
    (``node_addr=False``: no --node-addr)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdevices",
            "launch",
            "-n",
            str(n),
            "--nnodes",
            str(nnodes),
            "--node-rank",
            str(rank),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            *(["--node-addr", f"127.0.0.{rank + 1}"] if node_addr else []),
            "--rdzv-timeout",
            timeout,
            *options,
            "--",
            *command,
        ],
        env=subprocess_env(env),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class _Lines:
    """A launcher's stdout, read as it comes (so a test can wait for a line), kept whole for the end."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_for(self, text: str, timeout: float = 60) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: any(text in line for line in self.lines), timeout):
                raise AssertionError(f"no line with {text!r} in {self.lines}")

    def text(self) -> str:
        self._thread.join(timeout=60)
        return "\n".join(self.lines)


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
    same = ("--rdzv-id", "one-job")  # the commands differ: the default id (derived from them) would too
    first = _node(0, port, sys.executable, WORKER, "exit", "wait,wait,wait,wait", options=same)
    second = _node(1, port, sys.executable, WORKER, "exit", "wait,wait,6,wait", options=same)
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert second.returncode == 6, outs[1]
    assert first.returncode == 6 and "another machine's job stopped; stopping this one" in outs[0][0], outs[0]


def test_a_missing_launcher_is_one_line_after_the_timeout() -> None:
    port = free_ports(1)[0]
    alone = _node(0, port, "true", timeout="1")
    out, err = alone.communicate(timeout=60)
    assert alone.returncode == 2, out + err
    assert err.strip() == (
        "tfdevices launch: error: node(s) [1] did not join within 1 s. HINT: start the launcher "
        "on every machine with the same --nnodes, --master-addr and --master-port."
    )


def _dropped(out: str, kind: str) -> list[str]:
    return [
        line for line in out.splitlines() if "rendezvous: dropped a connection from" in line and KINDS[kind] in line
    ]


def _stray(port: int, data: bytes) -> None:
    """Connects to node 0, sends ``data`` and closes (node 0 may close first: it reads only so much)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            s.recv(1 << 16)
        except OSError:
            pass


def _trained(stdout: str, world: int) -> list[float]:
    """Each worker's w (tiny_train.py): 3 steps of w -= 0.5 (w - mean(r + 1)) over the whole cluster."""
    got = [json.loads(line.split("] ", 1)[1]) for line in stdout.splitlines() if '"w":' in line]
    expected = 0.0
    for _ in range(3):
        expected -= 0.5 * (expected - sum(r + 1 for r in range(world)) / world)
    assert [g["w"] for g in got] == pytest.approx([expected] * len(got)), stdout
    return [g["w"] for g in got]


def test_stray_connections_never_stop_the_job_which_forms_and_trains() -> None:
    """Garbage, an HTTP request, an over-long line and a half-open connection during the rendezvous of a
    2-machine job (TensorFlow workers): each dropped and said once, the job forms and trains."""
    port = free_ports(1)[0]
    first = _node(0, port, sys.executable, TINY, n=1)
    out0 = _Lines(first)
    out0.wait_for("meeting the other machines' launchers")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until node 0 listens (these probes are strays too: closed at once)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    half_open = socket.create_connection(("127.0.0.1", port))
    half_open.sendall(b'{"node_rank": 1, "host": ')  # and then nothing, for as long as the job forms
    try:
        _stray(port, b"\x00\xff\xfe garbage\n")
        _stray(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        _stray(port, b"{" + b" " * (100 << 10) + b"}\n")  # a JSON object over 64 KiB
        for kind in ("garbage", "http", "long"):
            out0.wait_for(KINDS[kind])
        second = _node(1, port, sys.executable, TINY, n=1)
        out1, err1 = second.communicate(timeout=240)
        first.wait(timeout=60)
    finally:
        half_open.close()
    text0 = out0.text()
    assert (first.returncode, second.returncode) == (0, 0), (text0, out1, err1)
    assert len(_trained(text0 + "\n" + out1, world=2)) == 2
    for kind in ("closed", "garbage", "http", "long"):
        assert len(_dropped(text0, kind)) == 1, text0  # one line per kind, however many came
    assert "rendezvous: node 1 joined from 127.0.0.1" in text0 and "stray connection(s) dropped (" in text0


def test_a_hello_without_records_an_older_launchers_is_dropped_and_the_right_one_joins() -> None:
    """Since 0.4.0 every launcher sends its ranks' records: a hello that does not say so (the protocol of an
    older tfdevices) is a stray, dropped and said; the job forms with the launcher that does."""
    port = free_ports(1)[0]
    first = _node(0, port, sys.executable, WORKER, "report", n=1)
    out0 = _Lines(first)
    out0.wait_for("meeting the other machines' launchers")
    deadline = time.monotonic() + 60
    while True:  # until node 0 listens
        try:
            older = socket.create_connection(("127.0.0.1", port), timeout=10)
            break
        except OSError:
            assert time.monotonic() < deadline, out0.lines
            time.sleep(0.1)
    with older:
        greeting = json.loads(older.makefile("rb").readline())
        hello = {"node_rank": 1, "host": "127.0.0.2", "ports": [free_ports(1)[0]], "job": "x", "nonce": "n" * 16}
        older.sendall(json.dumps({**hello, "proof": None}).encode() + b"\n")  # no "name", no "reports"
        out0.wait_for(KINDS["garbage"])
    assert greeting["tfdevices"] == "rendezvous"
    second = _node(1, port, sys.executable, WORKER, "report", n=1)
    out1, err1 = second.communicate(timeout=120)
    first.wait(timeout=60)
    text0 = out0.text()
    assert (first.returncode, second.returncode) == (0, 0), (text0, out1, err1)
    assert sorted({**reports(text0), **reports(out1)}) == [0, 1]
    assert len(_dropped(text0, "garbage")) == 1, text0


def test_a_launcher_of_another_job_is_refused_and_the_right_one_joins() -> None:
    port = free_ports(1)[0]
    first = _node(0, port, sys.executable, WORKER, "report", options=("--rdzv-id", "job-a"))
    out0 = _Lines(first)
    other = _node(1, port, sys.executable, WORKER, "report", options=("--rdzv-id", "job-b"))
    out, err = other.communicate(timeout=60)
    assert other.returncode == 2 and "[1]" not in out, out + err
    assert err.startswith(
        f"tfdevices launch: error: the node-0 launcher at '127.0.0.1':{port} runs another job: "
        "its rendezvous id differs from this launcher's (which comes from --rdzv-id). HINT: "
    ), err
    right = _node(1, port, sys.executable, WORKER, "report", options=("--rdzv-id", "job-a"))
    out1, err1 = right.communicate(timeout=120)
    first.wait(timeout=60)
    text0 = out0.text()
    assert (first.returncode, right.returncode) == (0, 0), (text0, out1, err1)
    assert sorted({**reports(text0), **reports(out1)}) == [0, 1, 2, 3]
    assert len(_dropped(text0, "job")) == 1, text0
    assert "job-b" not in text0 + out + err and "job-a" not in text0 + out1 + err1


class _Recorder:
    """A relay between one launcher and node 0 that keeps every byte that crosses it, both ways."""

    def __init__(self, target: int) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sent = bytearray()  # joiner -> node 0
        self.received = bytearray()  # node 0 -> joiner
        threading.Thread(target=self._relay, args=(target,), daemon=True).start()

    def _relay(self, target: int) -> None:
        conn, _ = self.server.accept()
        upstream = socket.create_connection(("127.0.0.1", target))
        threading.Thread(target=self._pipe, args=(upstream, conn, self.received), daemon=True).start()
        self._pipe(conn, upstream, self.sent)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, keep: bytearray) -> None:
        try:
            while data := src.recv(1 << 16):
                keep += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_a_token_refuses_launchers_without_it_with_a_wrong_one_and_a_replayed_exchange(tmp_path) -> None:
    """Node 0 of 3 with TFDEVICES_RDZV_TOKEN: no token and a wrong one are refused (both sides say so); node 1
    joins through a relay that records its exchange, which, replayed, is refused; node 2 joins; the job runs.
    The secret never crosses the network and is never printed."""
    secret = f"s3cret-{os.getpid()}-{time.monotonic_ns()}"
    good, wrong = tmp_path / "good", tmp_path / "wrong"
    good.write_text(secret + "\n")
    wrong.write_text("not-the-secret\n")
    port = free_ports(1)[0]
    job = ("--rdzv-id", "exp-7")  # node 1 meets node 0 through the relay's port: the derived id would differ
    node = lambda rank, *options, env=None, at=port: _node(
        rank, at, sys.executable, WORKER, "report", n=1, nnodes=3, options=job + options, env=env
    )
    first = node(0, env={TOKEN_ENV: secret})
    out0 = _Lines(first)
    refused = {}
    for name, options in (("none", ()), ("wrong", ("--rdzv-token-file", str(wrong)))):
        proc = node(1, *options)
        refused[name] = proc.communicate(timeout=60)
        assert proc.returncode == 2, refused[name]
    assert "needs the job's rendezvous token, and this launcher has none. HINT:" in refused["none"][1]
    assert "refused this launcher's rendezvous token: the secrets differ. HINT:" in refused["wrong"][1]
    relay = _Recorder(port)
    second = node(1, "--rdzv-token-file", str(good), at=relay.port)
    out0.wait_for("rendezvous: node 1 joined")
    hello = bytes(relay.sent).split(b"\n")[0] + b"\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as replay:  # the recorded hello, replayed
        replay.sendall(hello)
        answer = replay.makefile("rb").read()
    assert answer.splitlines()[-1] == b'{"refused":"token"}', answer
    third = node(2, env={TOKEN_ENV: secret})
    outs = [p.communicate(timeout=120) for p in (second, third)]
    first.wait(timeout=60)
    text0 = out0.text()
    assert [p.returncode for p in (first, second, third)] == [0, 0, 0], (text0, outs)
    assert sorted({**reports(text0), **reports(outs[0][0]), **reports(outs[1][0])}) == [0, 1, 2]
    assert len(_dropped(text0, "token")) == 1 and "(3 no or wrong token)" in text0, text0
    shown = text0 + "".join(o + e for o, e in outs) + "".join(o + e for o, e in refused.values())
    assert secret not in shown
    assert b'"proof":"' in relay.sent and secret.encode() not in relay.sent + relay.received


@pytest.mark.parametrize("rank, signum", [(1, signal.SIGTERM), (1, signal.SIGINT), (0, signal.SIGTERM)])
def test_a_signal_ends_a_launcher_waiting_at_the_rendezvous(rank: int, signum: int) -> None:
    """Node 1 waiting for an absent node 0 (or node 0 for an absent node 1), up to 300 s: a signal ends it now."""
    proc = _node(rank, free_ports(1)[0], "true", timeout="300")
    lines = _Lines(proc)
    lines.wait_for("meeting the other machines' launchers")
    time.sleep(0.3)  # well into the wait (connecting, or listening)
    proc.send_signal(signum)
    try:
        proc.wait(timeout=30)  # a liveness bound, far below --rdzv-timeout
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, lines.text()
    assert f"[launcher] signal {signum} while the machines met: stopping" in lines.text()


def test_a_launcher_that_leaves_before_the_job_forms_is_waited_for_again() -> None:
    """Node 1 of 3 joins, then gets SIGTERM while it waits for node 2: node 0 waits for a node 1 again."""
    port = free_ports(1)[0]
    node = lambda rank: _node(rank, port, sys.executable, WORKER, "report", n=1, nnodes=3)
    first = node(0)
    out0 = _Lines(first)
    leaver = node(1)
    out0.wait_for("rendezvous: node 1 joined")
    leaver.send_signal(signal.SIGTERM)
    assert leaver.wait(timeout=30) == 128 + signal.SIGTERM
    out0.wait_for("node 1's launcher left before the job formed; waiting for node 1 again")
    later = [node(1), node(2)]
    outs = [p.communicate(timeout=120) for p in later]
    first.wait(timeout=60)
    text0 = out0.text()
    assert [p.returncode for p in [first, *later]] == [0, 0, 0], (text0, outs)
    assert sorted({**reports(text0), **reports(outs[0][0]), **reports(outs[1][0])}) == [0, 1, 2]


def test_a_burst_of_every_launcher_at_once_is_held_until_node_0_takes_them() -> None:
    """Node 0 of a job larger than MAX_PENDING, not yet taking connections: every other node's connect still gets
    in (the kernel holds them all), none is dropped to wait out its connect and try again (bench_rendezvous)."""
    nnodes = 3 * MAX_PENDING
    try:
        with open("/proc/sys/net/core/somaxconn", encoding="ascii") as f:
            somaxconn = int(f.read())  # the kernel caps any backlog at it (128 before Linux 5.4, 4096 since)
    except OSError:
        somaxconn = 128
    burst = min(nnodes - 1, somaxconn)
    assert burst > MAX_PENDING + 1
    bound, filled = threading.Event(), threading.Event()
    ended: list[BaseException] = []

    def held() -> bool:  # node 0's first look at the stop flag is after it listens: it takes nothing till filled
        bound.set()
        filled.wait(30)
        return True

    def node0() -> None:
        try:
            rendezvous(Nodes(nnodes, 0, ("127.0.0.1", port), timeout=60), 1, stopped=held)
        except BaseException as err:  # noqa: BLE001 (the test reads what ended it)
            ended.append(err)

    port = free_ports(1)[0]
    thread = threading.Thread(target=node0)
    thread.start()
    assert bound.wait(30)
    conns = []
    try:
        for _ in range(burst):
            conns.append(socket.create_connection(("127.0.0.1", port), timeout=2))  # a dropped SYN: TimeoutError
    finally:
        filled.set()
        thread.join(30)
        for conn in conns:
            conn.close()
    assert len(conns) == burst and [type(e) for e in ended] == [Stopped]


LISTENER = os.path.join(REPO, "tests", "scripts", "listen_worker.py")


def test_listen_each_machines_workers_listen_on_its_own_address_only(tmp_path) -> None:
    """Two launchers (node R's address 127.0.0.(R+1)), one TensorFlow worker each, no --listen: each server
    listens on its node's address only (the other loopback address is refused), the job forms and runs."""
    port = free_ports(1)[0]
    procs = [_node(r, port, sys.executable, LISTENER, str(tmp_path), n=1, timeout="120") for r in (0, 1)]
    outs = [_Lines(p) for p in procs]
    try:
        for r, out in enumerate(outs):
            out.wait_for(f"[launcher] the workers' TensorFlow servers listen on 127.0.0.{r + 1} only", timeout=120)
            out.wait_for(f"[{r}] ready {r}", timeout=240)
        for r, out in enumerate(outs):
            (pid, port_r) = next(
                (int(m.group(1)), int(m.group(2)))
                for line in out.lines
                if (m := re.match(rf"\[launcher\] worker {r}: pid (\d+), 127\.0\.0\.{r + 1}:(\d+)", line))
            )
            assert {host for host, _ in listening(port_r, str(pid))} == {f"::ffff:127.0.0.{r + 1}"}, r
            socket.create_connection((f"127.0.0.{r + 1}", port_r), timeout=10).close()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((f"127.0.0.{2 - r}", port_r), timeout=10)
    finally:
        (tmp_path / "go").touch()
        try:
            for p in procs:
                p.wait(timeout=120)
        finally:
            kill_all(p.pid for p in procs)
    texts = [out.text() for out in outs]
    assert [p.returncode for p in procs] == [0, 0], texts
    assert all("sum 3" in text and "listen check" not in text for text in texts), texts


def test_listen_an_address_is_where_the_other_machines_reach_the_workers() -> None:
    """--listen 127.0.0.(R+1) without --node-addr: the cluster names each node's workers at that address."""
    port = free_ports(1)[0]
    procs = [
        _node(r, port, sys.executable, WORKER, "report", n=1, options=("--listen", f"127.0.0.{r + 1}"), node_addr=False)
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    got = {**reports(outs[0][0]), **reports(outs[1][0])}
    assert [got[r]["address"].rsplit(":", 1)[0] for r in (0, 1)] == ["127.0.0.1", "127.0.0.2"], got


def test_listen_that_contradicts_node_addr_is_refused_before_the_rendezvous() -> None:
    proc = _node(1, free_ports(1)[0], "true", options=("--listen", "127.0.0.3"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "meeting" not in out, out + err
    assert err.strip() == (
        "tfdevices launch: error: --listen 127.0.0.3 but the other machines reach this one's workers at "
        "'127.0.0.2' (--node-addr, 127.0.0.2): they could not. HINT: leave --listen out (the workers listen "
        "on --node-addr), or give the same address to both."
    )


@pytest.mark.parametrize("nnodes, said", [(2, [2]), (16, list(range(2, 17))), (512, list(range(64, 513, 64)))])
def test_node_0_says_each_join_of_a_small_job_and_a_large_jobs_at_each_eighth(nnodes, said) -> None:
    from tfdevices.jobs.rendezvous import _said_join

    assert [count for count in range(2, nnodes + 1) if _said_join(count, nnodes)] == said


def test_node_0_raises_its_open_file_limit_for_a_large_job_or_refuses_it_naming_the_fix() -> None:
    from tests.helpers import run_py

    proc = run_py(
        """
        import resource
        from tfdevices.core.errors import LaunchError
        from tfdevices.jobs.rendezvous import _enough_files
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))
        _enough_files(1000)
        print(resource.getrlimit(resource.RLIMIT_NOFILE))
        try:
            _enough_files(5000)
        except LaunchError as err:
            print(err)
        """,
        timeout=60,
    )
    lines = proc.stdout.splitlines()
    assert lines[0] == "(2064, 4096)"
    assert lines[1].startswith("--nnodes 5000: node 0 holds a connection to each other node, about 10064 open files")
    assert "ulimit -n 10064" in lines[1]
