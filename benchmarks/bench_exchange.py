"""What seeing every machine of a job costs, and how soon a slow rank on another machine is named.

1. The launchers' exchange (``tfdevices launch --nnodes``): another node's launcher reads its ranks' records,
   sends one ``record`` line each over a real TCP connection, node 0's launcher reads the lines and keeps
   the records (jobs/node_exchange.py) -- what one look costs each side in CPU time, for 8 and 64 ranks on a
   node, and the bytes a rank sends a second.
2. The coordination service (``srun``, Ray Train over machines): a real two-worker job started with TF_CONFIG,
   no launcher; rank 1 times its publications of its record (a delete and an insert in TensorFlow's key-value
   store, which runs in rank 0's process) and rank 0 its reads of rank 1's record, 200 of each.
3. How soon: two launchers as two nodes on this machine (workers on 127.0.0.1 and 127.0.0.2), one worker each,
   rank 1 sleeping 10x the balanced step before each step (slow between steps) or doing 32 more matmuls (slow
   inside its step): seconds from the first timed step to node 0's line naming it, and the steps by then.

Run: ``.venv/bin/python benchmarks/bench_exchange.py`` (about 4 minutes on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def launcher_exchange(ranks: int, looks: int) -> dict:
    """Part 1: ``looks`` looks of ``ranks`` records sent and kept over a real TCP connection (CPU seconds)."""
    from tfdevices.jobs.handshake import LineReader
    from tfdevices.jobs.node_exchange import Node, RemoteRecords, record_line
    from tfdevices.jobs.progress import ProgressWriter, record_bytes, record_paths

    directory = tempfile.mkdtemp(prefix="bench-exchange-")
    writers = [ProgressWriter(directory, rank) for rank in range(ranks)]
    remote = RemoteRecords([Node(1, "node1", tuple(range(ranks)))])
    server = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(server.getsockname())
    receiver, _ = server.accept()
    taken = threading.Semaphore(0)
    cpu = {"receive": 0.0}

    def receive() -> None:
        reader = LineReader(receiver)
        for _ in range(ranks * looks):
            line = reader.line(time.monotonic() + 60)
            began = time.thread_time()
            word, _, value = line.decode("ascii").partition(" ")
            remote.take(1, word, value)
            cpu["receive"] += time.thread_time() - began
        taken.release()

    thread = threading.Thread(target=receive)
    thread.start()
    sent_bytes, send_cpu = 0, 0.0
    for _ in range(looks):
        for writer in writers:  # the ranks step between two looks: every record changed
            writer.begin_step()
            writer.end_step(0.01)
        began = time.thread_time()
        for path in record_paths(directory):
            raw = record_bytes(path)
            if raw is not None:
                line = (record_line(raw) + "\n").encode()
                sender.sendall(line)
                sent_bytes += len(line)
        send_cpu += time.thread_time() - began
    taken.acquire()
    thread.join()
    assert len(remote.records()) == ranks
    for s in (sender, receiver, server):
        s.close()
    return {
        "ranks": ranks,
        "send_ms_per_look": send_cpu / looks * 1e3,
        "receive_ms_per_look": cpu["receive"] / looks * 1e3,
        "bytes_per_rank_look": sent_bytes / (looks * ranks),
    }


def store_worker(calls: int) -> None:
    """Part 2's worker: rank 1 publishes its record ``calls`` times, rank 0 reads it ``calls`` times."""
    import tfdevices
    from tfdevices.jobs import rank_hooks
    from tfdevices.jobs.coordination_keys import KeyPublisher, KeyReader
    from tfdevices.strategy import _coordination_store

    tfdevices.build_strategy("multi_worker")
    rank = tfdevices.launch_info().rank
    store = _coordination_store()
    writer = rank_hooks.THIS_RANK.writer
    times = []
    if rank == 1:
        publisher = KeyPublisher(store, 1, "bench", writer.path, "/dev/null", 1.0, lambda status: None)
        for _ in range(calls):
            writer.begin_step()  # a new record each time: every publication deletes and inserts
            writer.end_step(0.01)
            began = time.perf_counter()
            publisher.publish()
            times.append(time.perf_counter() - began)
    else:
        reader = KeyReader(store, [0, 1])
        time.sleep(3)  # rank 1's first publications
        for _ in range(calls):
            began = time.perf_counter()
            reader.records([0])
            times.append(time.perf_counter() - began)
    what = "publish" if rank == 1 else "read"
    print("STORE " + json.dumps({"rank": rank, "what": what, "median_ms": statistics.median(times) * 1e3}), flush=True)
    store.set(f"tfdevices-bench/done{rank}", "1")  # neither leaves before the other is done
    store.get(f"tfdevices-bench/done{1 - rank}", 60_000)


def coordination_store(calls: int) -> list[dict]:
    """Part 2: a two-worker job, TF_CONFIG alone, rank 1's address 127.0.0.2, each its own progress directory."""
    from tfdevices.jobs.rendezvous import free_ports

    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{ports[0]}", f"127.0.0.2:{ports[1]}"]}
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        for rank in (0, 1):
            env = {
                **os.environ,
                "PYTHONPATH": REPO,
                "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": rank}}),
                "TFDEVICES_PROGRESS_DIR": os.path.join(tmp, str(rank)),
            }
            procs.append(
                subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--store", str(calls)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outs = [p.communicate(timeout=600)[0] for p in procs]
    found = [json.loads(m) for out in outs for m in re.findall(r"STORE (\{.*\})", out)]
    if len(found) != 2:
        raise SystemExit("store job failed:\n" + "\n".join(o[-2000:] for o in outs))
    return found


def how_soon(extra: int, sleep_s: float, steps: int) -> dict:
    """Part 3: two launchers as two nodes; seconds from rank 0's first timed step to node 0's line."""
    from tfdevices.jobs.rendezvous import free_ports

    port = free_ports(1)[0]
    worker = [sys.executable, os.path.join(REPO, "benchmarks", "bench_straggler.py"), "--slow", str(steps)]
    worker += [str(sleep_s), str(extra)]
    common = ["-n", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port), "--all-ranks"]
    procs, named, loop = [], None, None
    with tempfile.TemporaryDirectory() as tmp0, tempfile.TemporaryDirectory() as tmp1:
        for node, tmp in ((1, tmp1), (0, tmp0)):
            extra_args = ["--node-addr", "127.0.0.2"] if node == 1 else []
            cmd = [sys.executable, "-m", "tfdevices", "launch", *common, "--node-rank", str(node), *extra_args, "--"]
            env = {**os.environ, "PYTHONPATH": REPO, "TMPDIR": tmp}
            procs.append(
                subprocess.Popen(cmd + worker, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            )
        lines = []
        for line in procs[1].stdout:  # type: ignore[union-attr]  # node 0's console
            lines.append(line.rstrip("\n"))
            if "[launcher] tfdevices: rank 1 on node" in line and named is None:
                named = time.time()
            match = re.search(r"\[0\] LOOP ([\d.]+)", line)
            if match:
                loop = float(match.group(1))
        for p in procs:
            p.wait(timeout=300)
    timing = next((json.loads(m) for m in re.findall(r"\[0\] TIMING (\{.*\})", "\n".join(lines))), None)
    after = None if named is None or loop is None else named - loop
    per_step = timing["wall_s"] / timing["steps"] if timing else None
    said = next((x.split("tfdevices: ", 1)[1][:120] for x in lines if "is the slow one" in x), "not named")
    return {
        "named_after_s": after,
        "steps": None if after is None or not per_step else round(after / per_step),
        "line": said,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--looks", type=int, default=200)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--steps", type=int, default=1500, help="steps of each part-3 job")
    parser.add_argument("--balanced-ms", type=float, default=4.5, help="the balanced step, to make 10x of")
    args = parser.parse_args()
    print(f"# bench_exchange, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}\n")
    print(
        "## 1. the launchers' exchange, one look\n\n| ranks on the node | send CPU ms | receive CPU ms | bytes a rank |"
    )
    print("|---:|---:|---:|---:|")
    for ranks in (8, 64):
        r = launcher_exchange(ranks, args.looks)
        print(
            f"| {ranks} | {r['send_ms_per_look']:.3f} | {r['receive_ms_per_look']:.3f} "
            f"| {r['bytes_per_rank_look']:.0f} |"
        )
    print("\n## 2. the coordination service, median of", args.calls, "\n")
    for r in coordination_store(args.calls):
        print(f"- rank {r['rank']} {r['what']}: {r['median_ms']:.3f} ms")
    print("\n## 3. how soon a slow rank on another node is named (node 0's console)\n")
    print("| rank 1 | named after s (from the first timed step) | steps by then | line |\n|---|---:|---:|---|")
    for label, extra, sleep_s in (("sleeps 10x the step between steps", 0, 10 * args.balanced_ms / 1e3),
                                  ("32 more matmuls inside its step", 32, 0.0)):  # fmt: skip
        r = how_soon(extra, sleep_s, args.steps)
        after = "-" if r["named_after_s"] is None else f"{r['named_after_s']:.1f}"
        print(f"| {label} | {after} | {r['steps'] or '-'} | {r['line']} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--store":
        store_worker(int(sys.argv[2]))
    else:
        main()
