"""What node 0's watch, the console, the end files and a Prometheus scrape cost as a job grows to 4,096 ranks.

A job of ``--sizes`` ranks (nodes of 8 ranks), **simulated** on a simulated clock: every rank's progress record is
written by the package's own writer (:class:`~tfdevices.jobs.progress.ProgressWriter`, as the ``step_progress``
and ``collective_wait`` mends fill it: a step begun, a step ended, the waits read every 16 steps) at a real job's
pace, one step a second or 20. The ranks step together (the all-reduce ends every rank's step at once, as a
collective does); the last rank (on the last node: its records cross the wire) is slow between its steps from
step ``at`` on (its cycle 1.5x: the others wait 0.5 of a step in the all-reduce for it), or stuck after step
``at`` (the others begin the next step and wait in it for ever).

Node 0's 8 ranks are records in a directory; every other node's ranks come as the ``record`` lines its launcher
sends (``MachineLink.send_records``: ``record_line`` of each record's bytes), handed to node 0's
``RemoteRecords.take`` as the launcher's reader hands them (the wire simulated: no socket, no ``LineReader``;
``benchmarks/bench_exchange.py`` measures those). Node 0's watch is the launcher's own ``WatchLoop``, its
``JobWatch`` on the simulated clock, looked once a simulated second; the frames a stall asks another node for
are answered at once by a simulated launcher (``frames_line``).

Each case runs in a fresh process (its memory its own). Measured per size: the CPU (``time.process_time``) of
each look (``WatchLoop.look``: the records read, ``JobWatch.poll``, ``job.json`` written, the lines said) and of
each second's ``take`` of the lines, medians over the looks; the bytes a second into node 0; the RSS growth from
before the watch to the job's end; the simulated seconds from the imbalance to the first line naming the rank;
the console (the lines each look says, the end table's lines and bytes); the end files (the pieces
``write_job_files`` writes, each timed, in a forked child with a time limit); a scrape (``generate_latest`` of a
registry holding the launcher's ``JobCollector``, 8 GPUs on node 0): its time, bytes, series and label sets, as
served and with every rank's series (as before a job over ``EVERY_RANK_UP_TO`` ranks was aggregated), side by side.

Run: ``.venv/bin/python benchmarks/bench_job_scale.py`` (all sizes and cases: about 5.5 minutes on a 2-core
machine, 2 of them for ``steps.png`` at 4,096 ranks; ``--sizes 8,64`` to try it; ``--json FILE`` keeps the
figures, ``--tables FILE`` prints them again). ``--only-scrape --sizes 64,512,4096`` runs the slow case up to its
scrape and prints the scrape's table only (no breakdown, profile or end files: about a minute).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

#: case -> (steps a second, what the odd rank does, simulated seconds, the step it begins at)
CASES = {
    "slow@1": (1, "slow", 50, 20),
    "slow@20": (20, "slow", 14, 40),
    "stuck@1": (1, "stuck", 85, 20),
    "stuck@20": (20, "stuck", 70, 40),
}
RANKS_PER_NODE = 8


class SimClock:
    """The simulated clock every writer, the channel and the watch read."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class SimJob:
    """Every rank's record, written by the package's writer at the job's pace, one rank slow or stuck."""

    def __init__(self, root: str, ranks: int, rate: int, kind: str, at: int, clock: SimClock) -> None:
        from tfdevices.jobs.progress import ProgressWriter

        self.nodes = max(1, ranks // RANKS_PER_NODE)
        self.dirs = [os.path.join(root, f"node{k}") for k in range(self.nodes)]
        self.writers = [ProgressWriter(self.dirs[r // RANKS_PER_NODE], r, clock=clock) for r in range(ranks)]
        self.odd, self.rate, self.kind, self.at, self.clock = ranks - 1, rate, kind, at, clock
        self.waited = [0.0] * ranks  # each rank's seconds in the all-reduce, as collective_wait sums them
        self.imbalance_at: float | None = None
        self._events = self._steps()
        self._next = next(self._events, None)

    def _steps(self) -> Iterator[tuple[float, str, int, float]]:
        """(when, what, step, the cycle): the ranks' begins and the all-reduce's end, in time order."""
        c, t0, step = 1.0 / self.rate, self.clock.now, 0
        while True:
            step += 1
            if self.kind == "stuck" and step > self.at:
                self.imbalance_at = t0  # the stuck rank's last step ended here
                yield t0 + 0.1 * c, "others", step, c  # they begin the next step and wait in it for ever
                return
            late = self.kind == "slow" and step >= self.at
            if late and self.imbalance_at is None:
                self.imbalance_at = t0  # the slow rank's first slow step begins after this end
            cycle = 1.5 * c if late else c
            yield t0 + 0.1 * c, "others", step, cycle
            yield t0 + (0.6 if late else 0.1) * c, "odd", step, cycle
            yield t0 + cycle, "end", step, cycle
            t0 += cycle

    def _act(self, what: str, step: int, cycle: float) -> None:
        if what in ("others", "odd"):
            for w in self.writers[: self.odd] if what == "others" else self.writers[self.odd :]:
                w.begin_step()
            return
        c = 1.0 / self.rate
        for w in self.writers:
            w.end_step()
            self.waited[w.rank] += 0.0 if w.rank == self.odd else cycle - c
            if step >= 16 and step % 16 == 0:  # collective_wait's read, every 16 steps at these paces
                w.record_waits(step, w.steps_s, self.waited[w.rank], 0.0, 2e-5 * step / 16)

    def run_until(self, t: float) -> None:
        """Every write of the ranks up to ``t`` (simulated)."""
        while self._next is not None and self._next[0] <= t:
            self.clock.now = self._next[0]
            self._act(*self._next[1:])
            self._next = next(self._events, None)
        self.clock.now = t

    def lines(self) -> list[tuple[int, str]]:
        """What every other node's launcher sends node 0 this second: a ``record`` line per rank."""
        from tfdevices.jobs.node_exchange import record_line
        from tfdevices.jobs.progress import record_bytes, record_paths

        out = []
        for k in range(1, self.nodes):
            for path in record_paths(self.dirs[k]):
                raw = record_bytes(path)
                if raw is not None:
                    out.append((k, record_line(raw)))
        return out


def node_zero(job: SimJob, ranks: int, root: str, said: list[str]) -> tuple:
    """Node 0's launcher's watch loop and channel, the watch on the simulated clock."""
    from tfdevices.jobs.node_exchange import Node, RemoteRecords, frames_line
    from tfdevices.jobs.stall import StallPolicy
    from tfdevices.jobs.watch import JobWatch
    from tfdevices.jobs.watch_loop import WatchLoop, WatchPlace

    channel = None
    if job.nodes > 1:
        nodes = [Node(k, f"node{k}", tuple(range(8 * k, 8 * k + 8))) for k in range(1, job.nodes)]

        def answer(node_rank: int, wanted: list[int]) -> None:  # the other launcher sends the frames at once
            for rank in wanted:
                word, _, value = frames_line(rank, [f'File "train.py", line 40 in step ({rank})']).partition(" ")
                channel.take(node_rank, word, value)  # type: ignore[union-attr]

        channel = RemoteRecords(nodes, clock=job.clock, ask=answer)
    stacks = os.path.join(root, "stacks")
    os.makedirs(stacks, exist_ok=True)
    place = WatchPlace(job.dirs[0], stacks, "node0" if channel else "", stacks_where=stacks + "/rank<R>.txt")
    loop = WatchLoop(place, StallPolicy(), list(range(ranks)), channel, said.append)
    loop.watch = JobWatch(loop.watch.expected, StallPolicy(), frames=loop.frames, stacks_where=place.stacks_where,
                          clock=job.clock)  # fmt: skip
    return loop, channel


def rss_mb() -> float:
    """This process' resident memory now (MB)."""
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def names(line: str, kind: str, rank: int) -> bool:
    """Whether ``line`` is the one that names the odd rank: the slow one, or the one the others wait for."""
    if kind == "slow":
        return line.startswith(f"tfdevices: rank {rank} ") and "is the slow one" in line
    return line.startswith("tfdevices: stall: ") and f"rank {rank} " in line.split(" did not arrive")[0] + " "


def deliver(job: SimJob, channel: object) -> tuple[float, int]:
    """This second's lines from every other node, taken by node 0's channel: the take's CPU, the bytes."""
    lines = job.lines()
    began = time.process_time()
    for k, line in lines:
        word, _, value = line.partition(" ")
        channel.take(k, word, value)  # type: ignore[attr-defined]
    return time.process_time() - began, sum(len(line) + 1 for _, line in lines)


def simulate(ranks: int, case: str, only_scrape: bool = False) -> dict:
    """One case at one size: the job simulated, node 0 watching; what each look and each second cost."""
    rate, kind, seconds, at = CASES[case]
    root = tempfile.mkdtemp(prefix="bench-job-scale-")
    clock = SimClock(time.time())
    job = SimJob(root, ranks, rate, kind, at, clock)
    signal.signal(signal.SIGUSR1, lambda *_: None)  # the simulated ranks are this process: a stack asked is a no-op
    said: list[str] = []
    rss = [rss_mb()]
    loop, channel = node_zero(job, ranks, root, said)
    looks, takes, per_look, wire, named = [], [], [], 0, None
    for second in range(1, seconds + 1):
        job.run_until(clock.now + 1.0)
        take_s, sent = deliver(job, channel) if channel is not None else (0.0, 0)
        takes.append(take_s)
        wire += sent
        before, began = len(said), time.process_time()
        loop.look()
        looks.append(time.process_time() - began)
        per_look.append(said[before:])
        hit = next((x for x in said[before:] if names(x, kind, job.odd)), None)
        if hit is not None and named is None:
            named = {"after_s": clock.now - job.imbalance_at, "look": second, "line": hit}
        if second in (seconds // 2, seconds):
            rss.append(rss_mb())
    out = {"ranks": ranks, "case": case, "looks": seconds, "named": named}
    out.update(cpu_figures(looks, takes, per_look, wire / seconds, rss, seconds - seconds // 2))
    out["job_json_bytes"] = os.path.getsize(os.path.join(job.dirs[0], "job.json"))
    full = case == "slow@1" and not only_scrape
    out["breakdown"] = breakdown(job, loop, channel) if full else {}
    out["profile"] = profile_look(loop) if ranks >= 512 and full else []
    out.update(the_end(loop, said, root, ranks, case if not only_scrape else "scrape"))
    shutil.rmtree(root, ignore_errors=True)
    return out


def breakdown(job: SimJob, loop: object, channel: object) -> dict:
    """A look's parts, each timed alone over 5 more simulated seconds: the records read, the poll, job.json written
    (and a worker's read of its row there).
    """
    from tfdevices.jobs.watch import read_snapshot_row, write_snapshot

    parts: dict[str, list[float]] = {"records_ms": [], "poll_ms": [], "job_json_ms": [], "row_read_ms": []}
    for _ in range(5):
        job.run_until(job.clock.now + 1.0)
        if channel is not None:
            deliver(job, channel)
        began = time.process_time()
        records = loop.records()  # type: ignore[attr-defined]
        middle = time.process_time()
        snapshot = loop.watch.poll(records)  # type: ignore[attr-defined]
        after = time.process_time()
        write_snapshot(snapshot, job.dirs[0], frozenset(loop.local))  # type: ignore[attr-defined]
        done = time.process_time()
        read_snapshot_row(job.dirs[0], 0)  # what a worker's JobMetricsLogger reads for its TensorBoard scalars
        row = time.process_time()
        for key, spent in zip(parts, (middle - began, after - middle, done - after, row - done)):
            parts[key].append(spent * 1e3)
    return {key: statistics.median(values) for key, values in parts.items()}


def cpu_figures(
    looks: list[float], takes: list[float], per_look: list[list[str]], wire: float, rss: list[float], later: int
) -> dict:
    """The looks' and takes' CPU (medians and the largest), the lines they said, the bytes in, the memory."""
    counts = [len(x) for x in per_look]
    return {
        "look_ms": statistics.median(looks) * 1e3,
        "look_max_ms": max(looks) * 1e3,
        "take_ms": statistics.median(takes) * 1e3,
        "bytes_per_s": wire,
        "rss_growth_mb": rss[-1] - rss[0],
        "rss_kb_a_look": (rss[-1] - rss[1]) * 1024 / later,  # over the second half of the looks
        "lines_said": sum(counts),
        "most_lines_a_look": max(counts),
        "most_bytes_a_look": max(sum(len(x) + 1 for x in lines) for lines in per_look),
    }


def profile_look(loop: object) -> list[str]:
    """Where one more look's time goes: the top functions by own time."""
    profile = cProfile.Profile()
    profile.runcall(loop.look)  # type: ignore[attr-defined]
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    top = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:8]
    return [f"{v[2] * 1e3:.1f} ms own, {v[3] * 1e3:.1f} ms in all, {v[1]} calls: {k[2]} ({os.path.basename(k[0])})"
            for k, v in top]  # fmt: skip


def the_end(loop: object, said: list[str], root: str, ranks: int, case: str) -> dict:
    """The job's end: its summary table on the console, a scrape of the last look, the end files."""
    before, began = len(said), time.process_time()
    summary = loop.end(last_look=True)  # type: ignore[attr-defined]
    out = {"end_ms": (time.process_time() - began) * 1e3}
    table = said[before:]
    out.update(table_lines=len(table), table_bytes=sum(len(x) + 1 for x in table))
    out.update(scrape(loop.watch))  # type: ignore[attr-defined]
    if case == "slow@1":
        out["files"] = end_files(loop.watch, summary, os.path.join(root, "log"), 60 if ranks < 4096 else 240)  # type: ignore[attr-defined]
    return out


def scrape(watch: object) -> dict[str, float]:
    """A scrape of the launcher's registry: the render's CPU (median of 5), its bytes, its series and label sets;
    as served (``scrape_*``) and with every rank's series (``every_rank_*``: as before the aggregates).
    """
    from tfdevices.jobs.metrics import EVERY_RANK_UP_TO

    out = _scrape(watch, EVERY_RANK_UP_TO)
    out.update({f"every_rank_{k}": v for k, v in _scrape(watch, sys.maxsize).items()})
    return out


def _scrape(watch: object, every_rank_up_to: int) -> dict[str, float]:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from tfdevices.jobs.metrics import Attempt, GpuReading, JobCollector

    gpus = {i: GpuReading(i, 0.87, 3 << 30, 141 << 30, 690.0, 64.0, 1.98e9) for i in range(RANKS_PER_NODE)}
    collector = JobCollector("train.py", "node0", lambda: gpus, every_rank_up_to=every_rank_up_to)
    collector.start(Attempt(watch, {r: (r,) for r in range(RANKS_PER_NODE)}, lambda: dict.fromkeys(range(8))))  # type: ignore[arg-type]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    times = []
    for _ in range(5):
        began = time.process_time()
        text = generate_latest(registry)
        times.append(time.process_time() - began)
    samples = [s for f in text_string_to_metric_families(text.decode()) for s in f.samples]
    label_sets = {tuple(sorted(s.labels.items())) for s in samples}
    return {
        "scrape_ms": statistics.median(times) * 1e3,
        "scrape_bytes": len(text),
        "series": len(samples),
        "label_sets": len(label_sets),
        "rank_label_values": len({dict(ls).get("rank") for ls in label_sets} - {None}),
    }


def end_files(watch: object, summary: object, log_dir: str, limit_s: float) -> dict:
    """The pieces ``write_job_files`` writes, each timed, in a forked child (``limit_s`` in all: a picture of
    thousands of ranks may take long or fail); what each wrote.
    """
    ctx = multiprocessing.get_context("fork")
    reader, writer = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_write_pieces, args=(watch, summary, log_dir, writer))
    child.start()
    writer.close()
    got, deadline = {}, time.monotonic() + limit_s
    while child.is_alive() or reader.poll():
        if not reader.poll(max(0.0, deadline - time.monotonic())):
            break
        try:
            piece = reader.recv()
        except EOFError:
            break
        got[piece["file"]] = piece
    child.join(max(1.0, deadline - time.monotonic()))
    if child.is_alive():
        os.kill(child.pid, signal.SIGKILL)
        got["timed_out"] = {"file": "timed_out", "after_s": limit_s}
    child.join()
    return got


def _write_pieces(watch: object, summary: object, log_dir: str, pipe: object) -> None:
    from tfdevices.jobs import end_files as ef

    os.makedirs(log_dir, exist_ok=True)
    latest = watch.latest  # type: ignore[attr-defined]

    def ranks_json() -> str:  # what write_job_files does for ranks.json
        path = os.path.join(log_dir, ef.RANKS_FILE)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(ef.ranks_data(summary), f, indent=1)  # type: ignore[arg-type]
        return path

    pieces: list[tuple[str, Callable[[], object]]] = [
        ("steps.json", lambda: ef.write_steps(watch.timeline, log_dir, latest.number,  # type: ignore[attr-defined]
                                              looks_every_rank=watch.looks_every_rank)),  # type: ignore[attr-defined]
        ("ranks.json", ranks_json),
        ("TensorBoard runs", lambda: ef.write_rank_runs(summary, os.path.join(log_dir, "ranks"))),  # type: ignore[arg-type]
        ("steps.png", lambda: ef.draw_ranks(ef.ranks_data(summary), os.path.join(log_dir, "steps.png"))),  # type: ignore[arg-type]
    ]  # fmt: skip
    for name, call in pieces:
        began, cpu = time.perf_counter(), time.process_time()
        try:
            result, error = call(), None
        except Exception as err:  # noqa: BLE001 (said in the table: what failed at this size)
            result, error = None, f"{type(err).__name__}: {str(err)[:160]}"
        piece = {"file": name, "wall_s": time.perf_counter() - began, "cpu_s": time.process_time() - cpu}
        piece.update(bytes=_bytes(result), error=error, written=result is not None and result != [])
        pipe.send(piece)  # type: ignore[attr-defined]
    pipe.send({"file": "timeline", "entries": len(watch.timeline), "history": len(summary.history)})  # type: ignore[attr-defined]


def _bytes(result: object) -> int:
    paths = result if isinstance(result, list) else [result] if isinstance(result, str) else []
    total = 0
    for path in paths:
        if os.path.isdir(path):
            total += sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
        elif os.path.exists(path):
            total += os.path.getsize(path)
    return total


# --------------------------------------------------------------------------- the parent: one process per case


def run_case(ranks: int, case: str, timeout_s: float, only_scrape: bool = False) -> dict:
    """One case in a fresh process: its figures."""
    cmd = [sys.executable, os.path.abspath(__file__), "--one", str(ranks), case] + (["scrape"] if only_scrape else [])
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, "PYTHONPATH": REPO}
    )
    for line in proc.stdout.splitlines():
        if line.startswith("CASE "):
            return json.loads(line[5:])
    raise SystemExit(f"case {ranks} {case} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _named(r: dict) -> str:
    return "not named" if r["named"] is None else f"{r['named']['after_s']:.1f}"


def _core(cases: dict) -> str:
    return _f((cases["slow@1"]["look_ms"] + cases["slow@1"]["take_ms"]) / 10, 1)  # ms a second / 10: a percentage


def _parts(cases: dict) -> str:
    parts = cases["slow@1"]["breakdown"]
    return " / ".join(_f(parts[k], 1) for k in ("records_ms", "poll_ms", "job_json_ms"))


COLUMNS = (
    ("look CPU ms, 1 step/s", lambda c: _f(c["slow@1"]["look_ms"], 2)),
    ("look CPU ms, 20 steps/s", lambda c: _f(c["slow@20"]["look_ms"], 2)),
    ("stall look CPU ms (the largest)", lambda c: _f(c["stuck@1"]["look_max_ms"], 1)),
    ("take CPU ms a second", lambda c: _f(c["slow@1"]["take_ms"], 2)),
    ("node 0's watch, % of a core (look + take, 1 step/s)", _core),
    ("look parts ms: records / poll / job.json", _parts),
    ("bytes/s into node 0", lambda c: _f(c["slow@1"]["bytes_per_s"], 0)),
    ("RSS growth MB (50 looks)", lambda c: _f(c["slow@1"]["rss_growth_mb"], 1)),
    ("RSS KB a look (looks 25 to 50)", lambda c: _f(c["slow@1"]["rss_kb_a_look"], 0)),
    ("slow named after s (1, 20 steps/s)", lambda c: f"{_named(c['slow@1'])}, {_named(c['slow@20'])}"),
    ("stuck named after s (1, 20 steps/s)", lambda c: f"{_named(c['stuck@1'])}, {_named(c['stuck@20'])}"),
    ("summary at the end, CPU ms", lambda c: _f(c["slow@1"]["end_ms"], 1)),
    ("end table lines / KB", lambda c: f"{c['slow@1']['table_lines']:,} / {c['slow@1']['table_bytes'] / 1e3:,.1f}"),
    ("stall look lines / KB", lambda c: f"{c['stuck@1']['most_lines_a_look']:,} / "
                                         f"{c['stuck@1']['most_bytes_a_look'] / 1e3:,.1f}"),
    ("job.json KB a look", lambda c: _f(c["slow@1"]["job_json_bytes"] / 1e3, 1)),
    ("a worker's read of its row in job.json, CPU ms", lambda c: _f(c["slow@1"]["breakdown"]["row_read_ms"], 1)),
    ("scrape CPU ms", lambda c: _f(c["slow@1"]["scrape_ms"], 1)),
    ("scrape KB", lambda c: _f(c["slow@1"]["scrape_bytes"] / 1e3, 1)),
    ("series / label sets", lambda c: f"{c['slow@1']['series']:,} / {c['slow@1']['label_sets']:,}"),
)  # fmt: skip


def _cell(cell: Callable[[dict], str], cases: dict) -> str:
    try:
        return cell(cases)
    except KeyError:  # a case not run (--cases)
        return "-"


def print_tables(results: dict[int, dict[str, dict]]) -> None:
    """The one table (a row per size), the growth from each size to the next, the end files, the lines."""
    print("| ranks (nodes) | " + " | ".join(name for name, _ in COLUMNS) + " |")
    print("|---:|" + "---:|" * len(COLUMNS))
    for ranks, cases in results.items():
        print(f"| {ranks:,} ({max(1, ranks // 8)}) | " + " | ".join(_cell(cell, cases) for _, cell in COLUMNS) + " |")
    sizes = list(results)
    print("\n## growth from one size to the next (8x the ranks)\n")
    grown = (("look CPU, 1 step/s", "slow@1", "look_ms"), ("look CPU, 20 steps/s", "slow@20", "look_ms"),
             ("stall look CPU", "stuck@1", "look_max_ms"), ("take CPU", "slow@1", "take_ms"),
             ("bytes/s", "slow@1", "bytes_per_s"), ("RSS growth", "slow@1", "rss_growth_mb"),
             ("scrape CPU", "slow@1", "scrape_ms"), ("scrape bytes", "slow@1", "scrape_bytes"),
             ("end table bytes", "slow@1", "table_bytes"))  # fmt: skip
    print("| measure | " + " | ".join(f"{a:,} -> {b:,}" for a, b in zip(sizes, sizes[1:])) + " |")
    print("|---|" + "---:|" * (len(sizes) - 1))
    for label, case, key in grown:
        ratios = []
        for a, b in zip(sizes, sizes[1:]):
            x, y = results[a].get(case, {}).get(key), results[b].get(case, {}).get(key)
            ratios.append(f"{y / x:.1f}x" if x and y is not None else "-")
        print(f"| {label} | " + " | ".join(ratios) + " |")
    print_files(results)
    print_lines(results)


def print_scrapes(results: dict[int, dict[str, dict]]) -> None:
    """The scrape at each size and case: with every rank's series (before) and as served (after)."""
    print("| ranks (nodes) | case | series before / after | label sets before / after | KB before / after "
          "| CPU ms before / after | rank values before / after |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|")
    for ranks, cases in results.items():
        for case, r in cases.items():
            cells = [f"{r['every_rank_' + k]:,} / {r[k]:,}" for k in ("series", "label_sets")]
            cells.append(f"{r['every_rank_scrape_bytes'] / 1e3:,.1f} / {r['scrape_bytes'] / 1e3:,.1f}")
            cells.append(f"{r['every_rank_scrape_ms']:,.1f} / {r['scrape_ms']:,.1f}")
            cells.append(f"{r['every_rank_rank_label_values']:,} / {r['rank_label_values']:,}")
            print(f"| {ranks:,} ({max(1, ranks // 8)}) | {case} | " + " | ".join(cells) + " |")


def print_files(results: dict[int, dict[str, dict]]) -> None:
    """The end files at each size: each piece's wall time and bytes (or why not)."""
    print("\n## the end files (the pieces write_job_files writes, 50 looks; wall s / MB)\n")
    names = ("steps.json", "ranks.json", "TensorBoard runs", "steps.png")
    print("| ranks | " + " | ".join(names) + " | steps.json timeline entries (the watch keeps 100,000) |")
    print("|---:|" + "---|" * (len(names) + 1))
    for ranks, cases in results.items():
        files = cases.get("slow@1", {}).get("files", {})
        cells = []
        for name in names:
            piece = files.get(name)
            if piece is None:
                cells.append("not reached: " + ("timed out" if "timed_out" in files else "-"))
            elif piece["error"]:
                cells.append(f"{piece['wall_s']:.1f} s, failed: {piece['error']}")
            elif not piece["written"]:
                cells.append(f"{piece['wall_s']:.1f} s, not written (no matplotlib or TensorBoard)")
            else:
                cells.append(f"{piece['wall_s']:.2f} / {piece['bytes'] / 1e6:.2f}")
        timeline = files.get("timeline", {})
        cells.append(f"{timeline.get('entries', '-'):,}" if timeline else "-")
        print(f"| {ranks:,} | " + " | ".join(cells) + " |")


def print_lines(results: dict[int, dict[str, dict]]) -> None:
    """The line that named the odd rank at the largest size, and where a look's time goes there."""
    largest = list(results)[-1]
    for case in CASES:
        r = results[largest].get(case)
        if r is None or r["named"] is None:
            print(f"\n{case} at {largest:,} ranks: the rank was not named in {r and r['looks']} looks")
            continue
        line = r["named"]["line"]
        shown = line if len(line) <= 400 else line[:300] + f" ... [{len(line):,} characters] ... " + line[-200:]
        print(f"\n{case} at {largest:,} ranks: named {r['named']['after_s']:.1f} s after the imbalance "
              f"(look {r['named']['look']}):\n    {shown}")  # fmt: skip
    for ranks, cases in results.items():
        if cases.get("slow@1", {}).get("profile"):
            print(f"\none look at {ranks:,} ranks (slow, 1 step/s), cProfile's top functions by own time:")
            for line in cases["slow@1"]["profile"]:
                print("    " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,512,4096")
    parser.add_argument("--cases", help=f"of {','.join(CASES)} (all; slow@1 with --only-scrape)")
    parser.add_argument("--only-scrape", action="store_true",
                        help="run each case up to its scrape only, and print the scrape's table")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=900, help="seconds a case may take")
    parser.add_argument("--json", help="also write every case's figures here")
    parser.add_argument(
        "--tables",
        help="print the tables of a --json file written before (with --only-scrape: the scrape's), and run nothing",
    )
    args = parser.parse_args()
    if args.tables:
        with open(args.tables, encoding="utf-8") as f:
            loaded = {int(k): v for k, v in json.load(f).items()}
        (print_scrapes if args.only_scrape else print_tables)(loaded)
        return
    cases = args.cases or ("slow@1" if args.only_scrape else ",".join(CASES))
    load = os.getloadavg()
    print(f"# bench_job_scale, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {load[0]:.1f} "
          f"{load[1]:.1f} {load[2]:.1f}, {os.cpu_count()} CPUs\n")  # fmt: skip
    results: dict[int, dict[str, dict]] = {}
    for ranks in (int(x) for x in args.sizes.split(",")):
        results[ranks] = {}
        for case in cases.split(","):
            began = time.perf_counter()
            results[ranks][case] = run_case(ranks, case, args.timeout, args.only_scrape)
            print(f"- {ranks} ranks, {case}: {time.perf_counter() - began:.0f} s, load {os.getloadavg()[0]:.1f}",
                  flush=True)  # fmt: skip
    print(f"\nload at the end {os.getloadavg()[0]:.1f}\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    if args.only_scrape:
        print_scrapes(results)
        return
    print_tables(results)
    print("\n## the scrape: with every rank's series (before) and as served (after)\n")
    print_scrapes({ranks: {"slow@1": c["slow@1"]} for ranks, c in results.items() if "slow@1" in c})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print("CASE " + json.dumps(simulate(int(sys.argv[2]), sys.argv[3], sys.argv[4:] == ["scrape"])), flush=True)
    else:
        main()
