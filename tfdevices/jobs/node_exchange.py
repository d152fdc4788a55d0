"""A job over several machines, while it runs: each node's ranks reach node 0's launcher, which watches them all.

The launchers of a ``--nnodes`` job keep their rendezvous connections open for the job's life
(:mod:`tfdevices.jobs.rendezvous`). Over them, about once a second, every other node's launcher sends the
progress records of its own ranks as they are (one ``record`` line each: the record's bytes, base64), and
node 0's launcher keeps them (:class:`RemoteRecords`): it stamps each record with its own clock when it
changed (the machines' clocks need not agree) and hands them, with its own machine's, to the job's one
watch (:mod:`tfdevices.jobs.watch`). A stuck rank on another node is named with its frames: node 0 asks that
node's launcher (``want``), which asks its ranks for their stacks and sends back the top frames (``frames``).
A stall past ``--stall-timeout`` stops node 0's job, and its ``stop`` line stops every other node's.

A node whose launcher does not send records (an older tfdevices, which says nothing of them in its hello) is
said once, with its ranks; so is a node whose records stop coming. No TensorFlow here.

What it costs: one line of about 700 bytes per rank a second, and node 0's parse of it
(benchmarks/RESULTS.md).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from tfdevices.jobs.progress import RECORD_SIZE, RankProgress, parse_record

#: A node's records not heard from for this long (seconds) are said to have stopped coming.
SILENT_S = 30.0
#: How long node 0 waits for another node's frames of a stuck rank (its ranks are given 2 s to dump).
FRAMES_WAIT_S = 4.0
_MAX_FRAMES = 16
_MAX_FRAME_CHARS = 500


@dataclasses.dataclass(frozen=True)
class Node:
    """One machine of the job, as node 0 knows it from the rendezvous.

    Attributes:
        node_rank: its place (``--node-rank``).
        name: how the job's lines name it: its host name, or its address where two nodes share a host name.
        ranks: its ranks (global).
        reports: its launcher said it sends its ranks' records (an older one does not).
    """

    node_rank: int
    name: str
    ranks: tuple[int, ...]
    reports: bool = True


def node_names(hostnames: Mapping[int, str], addresses: Mapping[int, str]) -> dict[int, str]:
    """Each node's name for the job's lines: its host name, or its address where host names repeat (pure).

    >>> node_names({0: "gpu01", 1: "gpu07"}, {0: "10.0.0.1", 1: "10.0.0.7"})
    {0: 'gpu01', 1: 'gpu07'}
    >>> node_names({0: "box", 1: "box"}, {0: "127.0.0.1", 1: "127.0.0.2"})
    {0: '127.0.0.1', 1: '127.0.0.2'}
    """
    seen = list(hostnames.values())
    return {n: (name if name and seen.count(name) == 1 else addresses.get(n, str(n))) for n, name in hostnames.items()}


def record_line(raw: bytes) -> str:
    """The line that carries one record's bytes to node 0."""
    return "record " + base64.b64encode(raw).decode("ascii")


def frames_line(rank: int, frames: Sequence[str]) -> str:
    """The line that carries a rank's top frames to node 0 (bounded: 16 frames of 500 characters)."""
    kept = [str(f)[:_MAX_FRAME_CHARS] for f in list(frames)[:_MAX_FRAMES]]
    return f"frames {rank} " + base64.b64encode(json.dumps(kept).encode()).decode("ascii")


def parse_want(value: str) -> list[int]:
    """The ranks of a ``want`` line (``"1,3"``); bad ones left out (at most 1024).

    >>> parse_want("1,3,x,-2")
    [1, 3]
    """
    return [int(p) for p in value.split(",")[:1024] if p.isascii() and p.isdigit() and len(p) < 8]


class RemoteRecords:
    """Node 0's view of the other nodes' ranks: the latest record of each, stamped on node 0's clock.

    Args:
        nodes: the other nodes (their ranks, names, and whether they report).
        clock: ``time.time``-like (tests).
    """

    def __init__(self, nodes: Sequence[Node], clock: Callable[[], float] = time.time) -> None:
        self.nodes = {n.node_rank: n for n in nodes}
        self._clock = clock
        self._lock = threading.Condition()
        self._raw: dict[int, bytes] = {}  # rank -> its last record's bytes
        self._records: dict[int, RankProgress] = {}
        self._heard: dict[int, float] = {}  # node rank -> when it last sent a record
        self._frames: dict[int, list[str]] = {}
        self._said: set[int] = set()
        self.started = clock()
        self.bad = 0  # lines that were not what they say

    def take(self, node_rank: int, word: str, value: str) -> None:
        """A line from node ``node_rank``'s launcher: a ``record`` or the ``frames`` asked for."""
        node = self.nodes.get(node_rank)
        if node is None:
            return
        if word == "record":
            self._take_record(node, value)
        elif word == "frames":
            self._take_frames(node, value)

    def _take_record(self, node: Node, value: str) -> None:
        try:
            raw = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeError):
            raw = b""
        record = parse_record(raw, node.name) if len(raw) == RECORD_SIZE else None
        if record is None or record.rank not in node.ranks:
            self.bad += 1
            return
        with self._lock:
            self._heard[node.node_rank] = self._clock()
        self.keep(raw, record)

    def keep(self, raw: bytes, record: RankProgress) -> None:
        """Keeps a rank's record (read from ``raw``), stamped with this clock when its bytes changed."""
        now = self._clock()
        with self._lock:
            if self._raw.get(record.rank) == raw:
                return  # unchanged: it keeps the time it last changed, on this clock
            self._raw[record.rank] = raw
            self._records[record.rank] = dataclasses.replace(record, changed_at=now)

    def _take_frames(self, node: Node, value: str) -> None:
        rank_text, _, data = value.partition(" ")
        try:
            rank = int(rank_text)
            frames = json.loads(base64.b64decode(data.encode("ascii"), validate=True))
        except (ValueError, UnicodeError, binascii.Error):
            self.bad += 1
            return
        if rank not in node.ranks or not isinstance(frames, list):
            self.bad += 1
            return
        with self._lock:
            self._frames[rank] = [str(f)[:_MAX_FRAME_CHARS] for f in frames[:_MAX_FRAMES]]
            self._lock.notify_all()

    def records(self) -> list[RankProgress]:
        """Every other node's ranks' latest records, stamped when they last changed."""
        with self._lock:
            return list(self._records.values())

    def frames(self, ask: Callable[[int, list[int]], None], wanted: Iterable[int]) -> dict[int, list[str]]:
        """Asks each node owning a rank of ``wanted`` for its frames (``ask(node_rank, ranks)``) and waits up to
        :data:`FRAMES_WAIT_S` for them; returns rank -> frames of those that came.
        """
        by_node: dict[int, list[int]] = {}
        for rank in wanted:
            node = next((n for n in self.nodes.values() if rank in n.ranks and n.reports), None)
            if node is not None:
                by_node.setdefault(node.node_rank, []).append(rank)
        asked = [r for ranks in by_node.values() for r in ranks]
        with self._lock:
            for r in asked:
                self._frames.pop(r, None)
        for node_rank, ranks in by_node.items():
            ask(node_rank, ranks)
        deadline = time.monotonic() + FRAMES_WAIT_S
        with self._lock:
            while not all(r in self._frames for r in asked) and time.monotonic() < deadline:
                self._lock.wait(0.1)
            return {r: self._frames[r] for r in asked if r in self._frames}

    def unheard(self) -> list[str]:
        """Lines to say, once each, about nodes whose ranks are not seen: an older launcher, or records that
        stopped coming for :data:`SILENT_S` (or never came).
        """
        now = self._clock()
        lines = []
        for node in self.nodes.values():
            if node.node_rank in self._said:
                continue
            ranks = _ranks(node.ranks)
            if not node.reports:
                why = "its launcher sends no progress records (a tfdevices older than node 0's)"
            elif now - self._heard.get(node.node_rank, self.started) > SILENT_S:
                why = f"no progress record came from it for {SILENT_S:.0f} s"
            else:
                continue
            self._said.add(node.node_rank)
            lines.append(
                f"node {node.node_rank} ({node.name}): {why}; left out of the slow-rank and stall reports: {ranks}"
            )
        return lines


def _ranks(ranks: Sequence[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {ranks[0]}..{ranks[-1]}" if list(ranks) == list(range(ranks[0], ranks[-1] + 1)) else "its ranks"
