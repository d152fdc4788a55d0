"""What the launchers' rendezvous costs as a job grows to 512 machines (4,096 ranks, 8 each), and what breaks first.

Node 0's launcher runs its real rendezvous (``rendezvous()`` of jobs/rendezvous.py with node rank 0: its listen
socket on 127.0.0.1, a greeting thread a connection, the job formed and told to every node); the N-1 other
launchers are the real client code (``rendezvous()`` with node ranks 1..N-1: connect, greeting, hello, the cluster
read and checked), over real TCP connections on loopback, a thread each in 4 processes, released together the
moment node 0 listens (a burst: srun starts them at once). Every launcher is real; none is simulated at the wire.
Each then plans its 8 workers as the launcher does (``plan_workers``: every worker's TF_CONFIG). Each launcher says
its address as a data centre's would (``--node-addr 10.128.X.Y``: text in the plan, which no socket here binds).

Each case runs in a fresh process (node 0 in it, the launchers' processes forked from it). Measured: the wall
time from the first hello to every launcher joined, to node 0 having told every launcher (its replies: every
worker's address, to each), and to every launcher holding its plan; node 0's CPU for its rendezvous (process
time, the sampler's own taken out); the bytes into and out of node 0 (its sockets counted); its peak open file
descriptors and threads (sampled every 10 ms) during the rendezvous, and once the job runs (the launcher's thread
a connection, and node 0's idle CPU then, over 2 s); the connections node 0 turned away (more than
``MAX_PENDING`` saying hello at once) and the kernel's listen-queue overflows (``/proc/net/netstat``, the whole
machine's); the launchers' connect attempts; node 0's console lines; the largest message each way and each
worker's TF_CONFIG against the bound each meets (the parser's line limits, ``tfconfig.MAX_CHARS``, and the
kernel's 128 KiB for one variable of a process started: ``execve`` fails with E2BIG past it). Last, a process is
started with a TF_CONFIG of the largest case's ranks in three address forms, to see where that bound falls.

The launchers share 2 cores with node 0 here (each checks 4,096 addresses twice, 50 to 100 ms of CPU): the wall
time to every plan is this machine's, not a cluster's, where each launcher has its own; node 0's "told every
launcher" and its CPU are the figures a cluster would see (plus one launcher's check).

Run: ``.venv/bin/python benchmarks/bench_rendezvous.py`` (8, 64 and 512 launchers, and 512 with node 0's listen
backlog held to 64 as it was before it became the job's size, ``512/64``: about 1.5 minutes on a 2-core machine;
``--sizes 8,64`` to try it; ``--json FILE`` keeps the figures).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

RANKS_PER_NODE = 8
CLIENT_PROCS = 4
TIMEOUT_S = 120.0  # the launchers' --rdzv-timeout
JOB_S = 2.0  # how long the job "runs" after the rendezvous (node 0's threads a connection, its idle CPU)
MAX_ARG_STRLEN = 32 * 4096  # the kernel's bound on one argument or variable of execve (E2BIG past it)
SOFT_NOFILE = 1024  # the usual soft limit of open files (systemd's, and most clusters')


def node_addr(rank: int) -> str:
    """Node ``rank``'s ``--node-addr``: a data centre's address (text; no socket binds it)."""
    return f"10.128.{rank // 200}.{rank % 200 + 10}"


# --------------------------------------------------------------------------- the sockets, counted


class _Wire:
    """What this process's sockets carried; in a launchers' process, each launcher thread's own (``local.rec``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent = self.received = self.largest_sent = self.largest_received = 0
        self.local = threading.local()
        self.on_listen: Any = None
        self.backlog: int | None = None
        self.cap: int | None = None  # a case "N/64": node 0's listen backlog held to 64, as before


WIRE = _Wire()


class _CountedSocket(socket.socket):
    """A real socket that counts what it carries (installed as ``socket.socket``: ``accept`` and
    ``create_connection`` make these too)."""

    def sendall(self, data: Any, *flags: int) -> None:
        size = len(data)
        with WIRE.lock:
            WIRE.sent += size
            WIRE.largest_sent = max(WIRE.largest_sent, size)
        rec = getattr(WIRE.local, "rec", None)
        if rec is not None:
            rec["sent"] += size
            rec["largest_sent"] = max(rec["largest_sent"], size)
            if rec["hello_at"] is None:  # node 0 speaks first: a launcher's first send is its hello
                rec["hello_at"] = time.monotonic()
        return super().sendall(data, *flags)

    def recv(self, bufsize: int, *flags: int) -> bytes:
        data = super().recv(bufsize, *flags)
        if not (flags and flags[0] & socket.MSG_PEEK):
            with WIRE.lock:
                WIRE.received += len(data)
            rec = getattr(WIRE.local, "rec", None)
            if rec is not None:
                rec["received"] += len(data)
        return data

    def connect(self, address: Any) -> None:
        rec = getattr(WIRE.local, "rec", None)
        if rec is not None:
            rec["connects"] += 1
        try:
            super().connect(address)
        except OSError as err:
            if rec is not None:
                kind = type(err).__name__
                rec["connect_errors"][kind] = rec["connect_errors"].get(kind, 0) + 1
            raise

    def listen(self, backlog: int = 0, /) -> None:
        WIRE.backlog = backlog if WIRE.cap is None else min(backlog, WIRE.cap)
        super().listen(WIRE.backlog)
        if WIRE.on_listen is not None:
            WIRE.on_listen()


def listen_overflows() -> dict[str, int]:
    """The kernel's counts of connections its listen queues dropped (the whole machine's)."""
    with open("/proc/net/netstat", encoding="ascii") as f:
        lines = [line.split() for line in f if line.startswith("TcpExt:")]
    counts = dict(zip(lines[0][1:], map(int, lines[1][1:])))
    return {k: counts.get(k, 0) for k in ("ListenOverflows", "ListenDrops")}


# --------------------------------------------------------------------------- the other launchers


def _launcher(rank: int, nnodes: int, port: int, start: threading.Event, out: dict, peers: dict) -> None:
    """One launcher of node ``rank``: the real client code, then its workers' plan, as ``tfdevices launch`` does."""
    from tfdevices.core.addresses import split_address
    from tfdevices.jobs.rendezvous import Nodes, rendezvous
    from tfdevices.jobs.worker_plan import plan_workers

    rec: dict[str, Any] = {"sent": 0, "received": 0, "largest_sent": 0, "hello_at": None, "connects": 0}
    rec["connect_errors"] = {}
    WIRE.local.rec = rec
    out[rank] = rec
    start.wait()
    rec["began"] = time.monotonic()
    cpu = time.thread_time()
    host = node_addr(rank)
    try:
        nodes = Nodes(nnodes, rank, ("127.0.0.1", port), node_addr=host, timeout=TIMEOUT_S, rdzv_id="bench")
        cluster, peers[rank] = rendezvous(nodes, RANKS_PER_NODE)
        rec["cluster_at"], rec["cluster_cpu_ms"] = time.monotonic(), (time.thread_time() - cpu) * 1e3
        mine = cluster.addresses[cluster.first_rank : cluster.first_rank + RANKS_PER_NODE]
        assert len(cluster.addresses) == nnodes * RANKS_PER_NODE and all(a.startswith(host + ":") for a in mine)
        cpu = time.thread_time()
        plans = plan_workers(RANKS_PER_NODE, [split_address(a)[1] for a in mine], (), host=host, job=cluster)
        rec["tf_config_bytes"] = max(len(p.env["TF_CONFIG"]) for p in plans)
        rec["plan_at"], rec["plan_cpu_ms"] = time.monotonic(), (time.thread_time() - cpu) * 1e3
    except Exception as err:  # noqa: BLE001 (a launcher that failed is a figure: what broke, said in the table)
        rec["error"] = f"{type(err).__name__}: {err}"


def launchers(ranks: list[int], nnodes: int, port: int, go: Any, finish: Any, pipe: Any) -> None:
    """A process of launchers (forked): a thread each, released at ``go``; their figures sent back; at
    ``finish``, each ends as a launcher of a finished job does (``done 0``)."""
    socket.socket = _CountedSocket  # type: ignore[misc]
    out: dict[int, dict] = {}
    peers: dict[int, Any] = {}
    start = threading.Event()
    threads = [threading.Thread(target=_launcher, args=(r, nnodes, port, start, out, peers)) for r in ranks]
    for t in threads:
        t.start()
    pipe.send("ready")
    go.wait()
    start.set()
    for t in threads:
        t.join()
    pipe.send(out)
    finish.wait(TIMEOUT_S)
    for p in peers.values():
        p.finish(0)
        p.close()


# --------------------------------------------------------------------------- node 0


class _Sampler(threading.Thread):
    """Node 0's open file descriptors and threads, every 10 ms; its own CPU kept to be taken out."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_fds = self.peak_threads = 0
        self.cpu = 0.0
        self.halt = threading.Event()

    def run(self) -> None:
        began = time.thread_time()
        while not self.halt.wait(0.01):
            self.peak_fds = max(self.peak_fds, len(os.listdir("/proc/self/fd")))
            self.peak_threads = max(self.peak_threads, threading.active_count())
            self.cpu = time.thread_time() - began


class _Lines(logging.Handler):
    """Node 0's console: the lines its rendezvous says."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.joined_at: list[float] = []  # when each "node R joined" line was said

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if " joined from " in self.lines[-1]:
            self.joined_at.append(time.monotonic())


def case(nnodes: int, cap: int | None = None) -> dict:
    """One case (a fresh process): node 0's rendezvous here, ``nnodes - 1`` launchers in 4 forked processes
    (``cap``: node 0's listen backlog held to it)."""
    from tfdevices.core.addresses import split_address
    from tfdevices.jobs import rendezvous as rdzv
    from tfdevices.jobs.handshake import MAX_LINE
    from tfdevices.jobs.rendezvous import MAX_CLUSTER, MAX_PENDING, Nodes, free_ports, rendezvous
    from tfdevices.jobs.tfconfig import MAX_CHARS
    from tfdevices.jobs.worker_plan import plan_workers

    socket.socket = _CountedSocket  # type: ignore[misc]
    WIRE.cap = cap
    port = free_ports(1)[0]
    ctx = multiprocessing.get_context("fork")
    go, finish = ctx.Event(), ctx.Event()
    joiners = list(range(1, nnodes))
    groups = [joiners[i::CLIENT_PROCS] for i in range(CLIENT_PROCS) if joiners[i::CLIENT_PROCS]]
    pipes, procs = [], []
    for group in groups:
        here, there = ctx.Pipe()
        procs.append(ctx.Process(target=launchers, args=(group, nnodes, port, go, finish, there), daemon=True))
        procs[-1].start()
        pipes.append(here)
    for pipe in pipes:
        assert pipe.recv() == "ready"
    console = _Lines()
    logging.getLogger("tfdevices.jobs").addHandler(console)
    logging.getLogger("tfdevices.jobs").setLevel(logging.INFO)
    kept: list[Any] = []

    class KeptStrays(rdzv.Strays):
        def __init__(self) -> None:
            super().__init__()
            kept.append(self)

    rdzv.Strays = KeptStrays  # type: ignore[misc]  # to read its counts after
    before = listen_overflows()
    sampler = _Sampler()
    sampler.start()
    listened: list[float] = []
    WIRE.on_listen = lambda: (listened.append(time.monotonic()), go.set())
    cpu, sampled = time.process_time(), sampler.cpu
    nodes = Nodes(nnodes, 0, ("127.0.0.1", port), node_addr=node_addr(0), timeout=TIMEOUT_S, rdzv_id="bench")
    cluster, peers = rendezvous(nodes, RANKS_PER_NODE)
    told = time.monotonic()
    node0_cpu = time.process_time() - cpu - (sampler.cpu - sampled)
    in_bytes, out_bytes, largest_out = WIRE.received, WIRE.sent, WIRE.largest_sent
    fds, threads = sampler.peak_fds, sampler.peak_threads
    after = listen_overflows()
    cpu = time.process_time()
    mine = [split_address(a)[1] for a in cluster.addresses[:RANKS_PER_NODE]]
    plans = plan_workers(RANKS_PER_NODE, mine, (), host=node_addr(0), job=cluster)
    node0_plan_ms = (time.process_time() - cpu) * 1e3
    tf_config = plans[0].env["TF_CONFIG"]
    recs: dict[int, dict] = {}
    for pipe in pipes:
        recs.update(pipe.recv())
    sampler.halt.set()  # the job's idle CPU is measured without it: one look at the fds and threads instead
    sampler.join()
    peers.watch(lambda code: None)  # as the launcher does once the job formed: a thread a connection
    job_fds, job_threads = len(os.listdir("/proc/self/fd")), threading.active_count()
    cpu = time.process_time()
    time.sleep(JOB_S)
    job_cpu = time.process_time() - cpu
    finish.set()
    code = peers.finish(0, stopped=lambda: time.monotonic() > told + TIMEOUT_S)
    peers.close()
    for p in procs:
        p.join(30)
    errors = sorted({r["error"] for r in recs.values() if "error" in r})
    good = [r for r in recs.values() if "plan_at" in r]
    first_hello = min(r["hello_at"] for r in recs.values() if r["hello_at"] is not None)
    connects = [r["connects"] for r in recs.values()]
    connect_errors: dict[str, int] = {}
    for r in recs.values():
        for kind, n in r["connect_errors"].items():
            connect_errors[kind] = connect_errors.get(kind, 0) + n
    strays = kept[0].counts if kept else {}
    return {
        "nnodes": nnodes,
        "ranks": len(cluster.addresses),
        "launchers_real": len(recs),
        "launchers_held_plan": len(good),
        "errors": errors,
        "finish_code": code,
        "listen_to_first_hello_s": first_hello - listened[0],
        "to_all_joined_s": console.joined_at[-1] - first_hello if console.joined_at else None,
        "replies_s": told - console.joined_at[-1] if console.joined_at else None,
        "to_node0_told_all_s": told - first_hello,
        "to_all_clusters_s": max(r["cluster_at"] for r in good) - first_hello if good else None,
        "to_all_plans_s": max(r["plan_at"] for r in good) - first_hello if good else None,
        "node0_cpu_s": node0_cpu,
        "node0_plan_ms": node0_plan_ms,
        "node0_in_bytes": in_bytes,
        "node0_out_bytes": out_bytes,
        "largest_out_bytes": largest_out,  # node 0's reply: every worker's address
        "largest_hello_bytes": max(r["largest_sent"] for r in recs.values()),
        "peak_fds": fds,
        "peak_threads": threads,
        "job_peak_fds": job_fds,
        "job_peak_threads": job_threads,
        "job_cpu_ms_per_s": job_cpu / JOB_S * 1e3,
        "busy_dropped": strays.get("busy", 0),
        "strays": strays,
        "listen_backlog": WIRE.backlog,
        "listen_overflows": after["ListenOverflows"] - before["ListenOverflows"],
        "listen_drops": after["ListenDrops"] - before["ListenDrops"],
        "connects_max": max(connects),
        "connects_mean": sum(connects) / len(connects),
        "launchers_retried": sum(1 for n in connects if n > 1),
        "connect_errors": connect_errors,
        "launcher_cluster_cpu_ms": max(r["cluster_cpu_ms"] for r in good) if good else None,
        "launcher_plan_cpu_ms": max(r["plan_cpu_ms"] for r in good) if good else None,
        "console_lines": len(console.lines),
        "console_bytes": sum(len(line) + 12 for line in console.lines),  # "[launcher] " and the newline
        "tf_config_bytes": max([len(tf_config)] + [r["tf_config_bytes"] for r in good]),
        "bounds": {
            "MAX_LINE": MAX_LINE,
            "MAX_CLUSTER": MAX_CLUSTER,
            "MAX_PENDING": MAX_PENDING,
            "tfconfig.MAX_CHARS": MAX_CHARS,
        },
    }


# --------------------------------------------------------------------------- a worker started with it


def tf_config_exec(ranks: int) -> list[dict]:
    """A process started with a ``ranks``-rank TF_CONFIG of three address forms: where the kernel's bound falls."""
    from tfdevices.jobs.tfconfig import make_tf_config

    forms = {
        "10.128.X.Y:PORT (this run's)": lambda r: f"{node_addr(r // 8)}:{40000 + r % 8}",
        "the longest IPv4, 255.255.255.255:65535": lambda r: (
            f"{100 + r % 156}.{100 + r // 156 % 156}.255.255:{60000 + r % 5536}"
        ),
        "a host name, gpu-node-0123.cluster.example.com:45678": lambda r: (
            f"gpu-node-{r // 8:04d}.cluster.example.com:{45000 + r % 8}"
        ),
    }
    out = []
    for label, address in forms.items():
        text = make_tf_config([address(r) for r in range(ranks)], ranks - 1)
        per_rank = (len(text) - len(make_tf_config([address(0)], 0))) / (ranks - 1)
        try:
            subprocess.run(
                ["true"], env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TF_CONFIG": text}, check=True
            )
            started = "yes"
        except OSError as err:
            started = f"no: {errno.errorcode.get(err.errno, err.errno)} ({err.strerror})"
        most = int((MAX_ARG_STRLEN - len("TF_CONFIG=") - 1 - 80) // per_rank)  # 80: the braces and the task
        out.append({"form": label, "bytes": len(text), "started": started, "most_ranks": most})
    return out


# --------------------------------------------------------------------------- the parent: one process per case


def run_case(label: str, timeout_s: float) -> dict:
    """One case (``N`` launchers, or ``N/B``: node 0's listen backlog held to B) in a fresh process: its figures."""
    cmd = [sys.executable, os.path.abspath(__file__), "--one", *label.split("/")]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, "PYTHONPATH": REPO}
    )
    for line in proc.stdout.splitlines():
        if line.startswith("CASE "):
            return json.loads(line[5:])
    raise SystemExit(f"case {label} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


COLUMNS = (
    ("launchers (ranks)", lambda c: f"{c['nnodes']:,} ({c['ranks']:,})"),
    ("real launchers / holding the plan", lambda c: f"{c['launchers_real'] + 1} / {c['launchers_held_plan'] + 1}"),
    ("first hello -> every launcher joined, s", lambda c: _f(c["to_all_joined_s"], 3)),
    ("node 0's replies (the cluster, to each), s", lambda c: _f(c["replies_s"], 3)),
    ("first hello -> node 0 told all, s", lambda c: _f(c["to_node0_told_all_s"], 3)),
    ("first hello -> every plan, s", lambda c: _f(c["to_all_plans_s"], 3)),
    ("node 0 CPU s", lambda c: _f(c["node0_cpu_s"], 3)),
    ("node 0 in / out KB", lambda c: f"{c['node0_in_bytes'] / 1e3:,.1f} / {c['node0_out_bytes'] / 1e3:,.1f}"),
    ("peak fds / threads (rendezvous)", lambda c: f"{c['peak_fds']} / {c['peak_threads']}"),
    ("peak fds / threads (job)", lambda c: f"{c['job_peak_fds']} / {c['job_peak_threads']}"),
    ("node 0 idle CPU ms/s (job)", lambda c: _f(c["job_cpu_ms_per_s"], 1)),
    ("turned away busy / listen overflows", lambda c: f"{c['busy_dropped']} / {c['listen_overflows']}"),
    ("launchers that reconnected / most connects", lambda c: f"{c['launchers_retried']} / {c['connects_max']}"),
    ("a launcher's CPU ms: cluster / plan", lambda c: f"{_f(c['launcher_cluster_cpu_ms'], 1)} / "
                                                  f"{_f(c['launcher_plan_cpu_ms'], 1)}"),
    ("node 0 console lines", lambda c: f"{c['console_lines']:,}"),
)  # fmt: skip


def print_tables(results: dict[str, dict], execs: list[dict]) -> None:
    """The cases side by side, the bounds at the largest, the TF_CONFIG a worker is started with."""
    heads = [
        f"{c['nnodes']:,} launchers" + (f", backlog {c['listen_backlog']}" if "/" in n else "")
        for n, c in results.items()
    ]
    print("| measure | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(results))
    for name, cell in COLUMNS:
        print(f"| {name} | " + " | ".join(cell(c) for c in results.values()) + " |")
    for n, c in results.items():
        if c["errors"] or c["connect_errors"] or c["strays"]:
            print(f"\n{n} launchers: errors {c['errors']}, connect errors {c['connect_errors']}, strays {c['strays']}")
    n, c = max(((k, v) for k, v in results.items() if "/" not in k), key=lambda kv: kv[1]["nnodes"])
    b = c["bounds"]
    print(f"\n## the bounds at {c['nnodes']:,} launchers ({c['ranks']:,} ranks)\n")
    print("| what | largest here | its bound | headroom |\n|---|---:|---:|---:|")
    rows = (
        ("a hello into node 0 (LineReader, MAX_LINE)", c["largest_hello_bytes"], b["MAX_LINE"]),
        ("node 0's reply, every worker's address (the joiner's LineReader, MAX_CLUSTER)", c["largest_out_bytes"],
         b["MAX_CLUSTER"]),
        ("node 0's reply against MAX_LINE (the bound of what node 0 reads, not of this)", c["largest_out_bytes"],
         b["MAX_LINE"]),
        ("a worker's TF_CONFIG (tfconfig.MAX_CHARS)", c["tf_config_bytes"], b["tfconfig.MAX_CHARS"]),
        ("a worker's TF_CONFIG (the kernel's one variable, execve)", c["tf_config_bytes"] + 11, MAX_ARG_STRLEN),
        ("greeting threads at once (MAX_PENDING; peak threads but the main one and the sampler)",
         c["peak_threads"] - 2, b["MAX_PENDING"]),
        ("the listen backlog", c["nnodes"] - 1, c["listen_backlog"]),
        ("node 0's open fds, the job running (a soft limit of 1024)", c["job_peak_fds"], SOFT_NOFILE),
    )  # fmt: skip
    for what, value, bound in rows:
        print(f"| {what} | {value:,} | {bound:,} | {bound / value:,.2f}x |")
    if execs:
        print(f"\n## a worker started with a {execs[0].get('ranks', 4096):,}-rank TF_CONFIG\n")
        print("| addresses | TF_CONFIG bytes | started | most ranks that fit 128 KiB |\n|---|---:|---|---:|")
        for e in execs:
            print(f"| {e['form']} | {e['bytes']:,} | {e['started']} | {e['most_ranks']:,} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,512,512/64", help="launchers (nodes of 8 ranks); N/B: backlog B")
    parser.add_argument("--timeout", type=float, default=240, help="seconds a case may take")
    parser.add_argument("--json", help="also write every case's figures here")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"# bench_rendezvous, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs\n")  # fmt: skip
    results: dict[str, dict] = {}
    for label in args.sizes.split(","):
        began = time.perf_counter()
        results[label] = run_case(label, args.timeout)
        print(f"- {label} launchers: {time.perf_counter() - began:.0f} s, load {os.getloadavg()[0]:.2f}", flush=True)
    ranks = RANKS_PER_NODE * max(c["nnodes"] for c in results.values())
    execs = [{**e, "ranks": ranks} for e in tf_config_exec(ranks)]
    load = os.getloadavg()
    print(f"\nload at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cases": results, "tf_config_exec": execs, "load_end": load}, f, indent=1)
    print_tables(results, execs)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print("CASE " + json.dumps(case(*map(int, sys.argv[2:4]))), flush=True)
    else:
        main()
