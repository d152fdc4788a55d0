"""A job over several machines, while it runs: each node's ranks reach node 0's launcher, which watches them all.

The launchers of a ``--nnodes`` job keep their rendezvous connections open for the job's life
(:mod:`tfdevices.jobs.rendezvous`). Over them, about once a second, every other node's launcher sends the
progress records of its own ranks as they are (one ``record`` line each: the record's bytes, base64), and
node 0's launcher keeps them (:class:`RemoteRecords`): it stamps each record with its own clock when it
changed (the machines' clocks need not agree) and hands them, with its own machine's, to the job's one
watch (:mod:`tfdevices.jobs.watch`). A stuck rank on another node is named with its frames: node 0 asks that
node's launcher (``want``), which asks its ranks for their stacks and sends back the top frames (``frames``).
A stall past ``--stall-timeout`` stops node 0's job, and its ``stop`` line stops every other node's.

A node whose records stop coming (or never come) is said once, with its ranks.

The four messages' encoding, the keeping of what came, the wait for frames and the "not heard" lines are the
records' channel's (:mod:`tfdevices.jobs.record_channel`), shared with the key-value store's transport; here is
what the connections carry: one line each, its first word saying what it is. :class:`MachineLink` is a
launcher's part in it.

What it costs: one line of about 700 bytes per rank a second, and node 0's parse of it
(benchmarks/RESULTS.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfdevices.jobs.console import say
from tfdevices.jobs.progress import RankProgress, read_records, record_bytes, record_paths
from tfdevices.jobs.record_channel import (
    Received,
    decode_frames,
    decode_record,
    encode_frames,
    encode_record,
    encode_want,
    node_unheard_line,
    parse_want,
)
from tfdevices.jobs.stacks import ask_stacks


@dataclasses.dataclass(frozen=True)
class Node:
    """One machine of the job, as node 0 knows it from the rendezvous.

    Attributes:
        node_rank: its place (``--node-rank``).
        name: how the job's lines name it: its host name, or its address where two nodes share a host name.
        ranks: its ranks (global).
    """

    node_rank: int
    name: str
    ranks: tuple[int, ...]


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
    return "record " + encode_record(raw)


def frames_line(rank: int, frames: Sequence[str]) -> str:
    """The line that carries a rank's top frames to node 0 (bounded: 16 frames of 500 characters)."""
    return f"frames {rank} " + encode_frames(frames)


def want_line(ranks: Sequence[int]) -> str:
    """The line that asks a node's launcher for the top frames of ``ranks``."""
    return "want " + encode_want(ranks)


class RemoteRecords:
    """Node 0's channel over the launchers' connections (a :class:`~tfdevices.jobs.record_channel.Channel`): the
    other nodes' ranks, the latest record of each stamped on node 0's clock.

    Args:
        nodes: the other nodes (their ranks, names, and whether they report).
        clock: ``time.time``-like (tests).
        ask: sends a node's launcher the question for frames: ``ask(node_rank, ranks)``.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        clock: Callable[[], float] = time.time,
        ask: Callable[[int, list[int]], None] | None = None,
    ) -> None:
        self.nodes = {n.node_rank: n for n in nodes}
        self.ranks = tuple(r for n in nodes for r in n.ranks)
        self.ask = ask
        self._received = Received(clock)
        self.bad = 0  # lines that were not what they say

    def take(self, node_rank: int, word: str, value: str) -> None:
        """A line from node ``node_rank``'s launcher: a ``record`` or the ``frames`` asked for."""
        node = self.nodes.get(node_rank)
        if node is None:
            return
        if word == "record":
            got = decode_record(value, node.name)
            if got is None or got[1].rank not in node.ranks:
                self.bad += 1
                return
            self._received.keep(*got, source=node.node_rank)
        elif word == "frames":
            rank_text, _, data = value.partition(" ")
            frames = decode_frames(data)
            if frames is None or not rank_text.isdigit() or int(rank_text) not in node.ranks:
                self.bad += 1
                return
            self._received.put_frames(int(rank_text), frames)

    def records(self, local: Sequence[int] = ()) -> list[RankProgress]:
        """Every other node's ranks' latest records, stamped when they last changed."""
        return [r for r in self._received.records() if r.rank not in local]

    def frames(self, wanted: Sequence[int]) -> dict[int, list[str]]:
        """Asks each node owning a rank of ``wanted`` for its frames and waits up to
        :data:`~tfdevices.jobs.record_channel.FRAMES_WAIT_S` for them; returns rank -> frames of those that came.
        """
        by_node: dict[int, list[int]] = {}
        for rank in wanted:
            node = next((n for n in self.nodes.values() if rank in n.ranks), None)
            if node is not None:
                by_node.setdefault(node.node_rank, []).append(rank)
        asked = [r for ranks in by_node.values() for r in ranks]
        self._received.forget_frames(asked)
        for node_rank, ranks in by_node.items():
            if self.ask is not None:
                self.ask(node_rank, ranks)
        return self._received.wait_frames(asked)

    def stop(self, status: int) -> None:
        """Nothing to send now: node 0's job ends with ``status``, and its end (``finish`` of
        :mod:`tfdevices.jobs.rendezvous`) says ``stop`` to every node.
        """

    def unheard(self, local: Sequence[int] = ()) -> list[str]:
        """Lines to say, once each, about nodes whose ranks are not seen: their records stopped coming
        for :data:`~tfdevices.jobs.record_channel.SILENT_S` (or never came).
        """
        silent = set(self._received.silent(n.node_rank for n in self.nodes.values()))
        return [node_unheard_line(n.node_rank, n.name, n.ranks) for n in self.nodes.values() if n.node_rank in silent]


class MachineLink:
    """A launcher's part in a job over several machines: on node 0, the channel its watch reads the other nodes'
    ranks through; on another node, its ranks' records sent to node 0 and node 0's questions answered.

    Args:
        peers: the launchers' open connections (:mod:`tfdevices.jobs.rendezvous`).
        say: says a line (the launcher's console's ``say``).
    """

    def __init__(self, peers: Any, say: Callable[[str], None] = say) -> None:
        self.peers = peers
        self.channel: RemoteRecords | None = None  # on node 0: the other nodes' ranks
        self.node_name = ""  # on node 0: how its lines name this machine
        self.progress = self.stacks = ""  # this attempt's records and stacks (set by the job at each attempt)
        if peers.is_master:
            others = [n for n in peers.nodes if n.node_rank != 0]
            self.channel = RemoteRecords(others, ask=self._ask_frames)
            self.node_name = next(n.name for n in peers.nodes if n.node_rank == 0)
            peers.handlers = {"record": self.channel.take, "frames": self.channel.take}
        else:
            peers.handlers = {"want": self._send_frames}
            say("this node's ranks report to node 0's launcher: the slow or stuck rank is named on its console")

    @property
    def reports_to_node_0(self) -> bool:
        """This launcher is another node's, and node 0 watches its ranks."""
        return not self.peers.is_master

    def send_records(self) -> None:
        """This machine's ranks' records, as they are, to node 0's launcher."""
        for path in record_paths(self.progress):
            raw = record_bytes(path)
            if raw is not None:
                self.peers.send(0, record_line(raw))

    def _ask_frames(self, node_rank: int, ranks: list[int]) -> None:
        self.peers.send(self.peers.node_ranks.index(node_rank), want_line(ranks))

    def _send_frames(self, node_rank: int, word: str, value: str) -> None:
        """Node 0 asked for the frames of ranks of this machine: their stacks asked for, the top frames sent."""
        frames = ask_stacks(read_records(self.progress), self.stacks, parse_want(value))
        for rank, lines in frames.items():
            self.peers.send(0, frames_line(rank, lines))
