"""The records' channel: what a job's ranks on other machines tell its one watch, and what the watch asks of them.

The channel carries four messages, whatever carries them:

* a rank's **record**: its progress record's bytes (:mod:`tfdevices.jobs.progress`), about once a second;
* **want** and **frames**: the watch asks for the top frames of stuck ranks, their side answers with them;
* **stop**: a stall past the stall timeout stops every rank, with a status;
* **not heard**: the watch says, once, which ranks' records do not come.

Two transports carry them: the launchers' connections of a ``--nnodes`` job
(:mod:`tfdevices.jobs.node_exchange`, node 0's launcher watching) and the key-value store of TensorFlow's
coordination service where no launcher watches (:mod:`tfdevices.jobs.coordination_keys`, rank 0 watching). What
they share is here, once: each message's encoding, the keeping of the records received (:class:`Received`:
stamped on the watcher's clock, since the machines' clocks need not agree), the wait for frames, who is not
heard (each said once) and the lines that say so, and the one interface the watch loop reads either transport
through (:class:`Channel`; :mod:`tfdevices.jobs.watch_loop`). A transport only moves the encoded text. No
TensorFlow here.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Protocol, TypeVar

from tfdevices.jobs.progress import RECORD_SIZE, RankProgress, parse_record

#: Records not heard for this long (seconds) are said not to come.
SILENT_S = 30.0
#: How long the watch waits for the frames of a stuck rank on another machine (its ranks get 2 s to dump).
FRAMES_WAIT_S = 4.0
#: The most frames of a rank the channel carries, and the most characters of each.
MAX_FRAMES = 16
MAX_FRAME_CHARS = 500

_Source = TypeVar("_Source", bound=Hashable)


class Channel(Protocol):
    """The watching side of a transport: what the job's watch loop reads the other machines' ranks through."""

    @property
    def ranks(self) -> Sequence[int]:
        """The ranks whose records this channel may carry (those the watch sees on its own machine are read there)."""

    def records(self, local: Sequence[int]) -> list[RankProgress]:
        """The latest record of each rank it carries, but those of ``local`` (the watcher's own machine's)."""

    def frames(self, wanted: Sequence[int]) -> dict[int, list[str]]:
        """Asks for the top frames of the ranks ``wanted``; returns rank -> frames of those that came in time."""

    def stop(self, status: int) -> None:
        """Says every rank stops with ``status`` (a stall past the stall timeout)."""

    def unheard(self, local: Sequence[int]) -> list[str]:
        """Lines to say, once each, about ranks whose records do not come."""


# --------------------------------------------------------------------------- the encoding


def encode_record(raw: bytes) -> str:
    """A record's bytes as text (base64)."""
    return base64.b64encode(raw).decode("ascii")


def decode_record(text: str, node: str) -> tuple[bytes, RankProgress] | None:
    """The bytes and the record ``text`` carries, read as node ``node``'s; ``None`` for text that is no record."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeError):
        return None
    record = parse_record(raw, node) if len(raw) == RECORD_SIZE else None
    return None if record is None else (raw, record)


def bounded_frames(frames: Iterable[object]) -> list[str]:
    """At most :data:`MAX_FRAMES` frames of at most :data:`MAX_FRAME_CHARS` characters each."""
    return [str(f)[:MAX_FRAME_CHARS] for f in list(frames)[:MAX_FRAMES]]


def encode_frames(frames: Sequence[str]) -> str:
    """A rank's top frames as text (bounded: :func:`bounded_frames`)."""
    return base64.b64encode(json.dumps(bounded_frames(frames)).encode()).decode("ascii")


def decode_frames(text: str) -> list[str] | None:
    """The frames ``text`` carries (bounded); ``None`` for text that is no list of frames."""
    try:
        frames = json.loads(base64.b64decode(text.encode("ascii"), validate=True))
    except (ValueError, UnicodeError, binascii.Error):
        return None
    return bounded_frames(frames) if isinstance(frames, list) else None


def encode_want(ranks: Iterable[int]) -> str:
    """The ranks whose frames are wanted, as text.

    >>> encode_want([1, 3])
    '1,3'
    """
    return ",".join(map(str, ranks))


def parse_want(value: str) -> list[int]:
    """The ranks of a ``want`` (``"1,3"``); bad ones left out (at most 1024).

    >>> parse_want("1,3,x,-2")
    [1, 3]
    """
    return [int(p) for p in value.split(",")[:1024] if p.isascii() and p.isdigit() and len(p) < 8]


def parse_stop(value: str) -> int:
    """The status a ``stop`` says: its number (never 0: a stop is a failure), 1 when it is none.

    >>> parse_stop("3"), parse_stop("0"), parse_stop("x")
    (3, 1, 1)
    """
    return (int(value[:4]) if value[:4].isascii() and value[:4].isdigit() else 0) or 1


# --------------------------------------------------------------------------- the watching side's keeping


class Received:
    """What the watching side received: each rank's latest record, stamped on its own clock when it changed, when
    each source (a node, a rank) was last heard, and the frames that came.

    Args:
        clock: ``time.time``-like (tests).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Condition()
        self._raw: dict[int, bytes] = {}  # rank -> its last record's bytes
        self._records: dict[int, RankProgress] = {}
        self._heard: dict[Hashable, float] = {}  # source -> when it last sent a record
        self._frames: dict[int, list[str]] = {}
        self._said: set[Hashable] = set()
        self.started = clock()

    def keep(self, raw: bytes, record: RankProgress, source: Hashable = None) -> None:
        """Keeps a rank's record (read from ``raw``), stamped with this clock when its bytes changed; ``source`` (a
        node, a rank) is heard now.
        """
        now = self._clock()
        with self._lock:
            if source is not None:
                self._heard[source] = now
            if self._raw.get(record.rank) == raw:
                return  # unchanged: it keeps the time it last changed, on this clock
            self._raw[record.rank] = raw
            self._records[record.rank] = dataclasses.replace(record, changed_at=now)

    def records(self) -> list[RankProgress]:
        """Every rank's latest record, stamped when it last changed."""
        with self._lock:
            return list(self._records.values())

    def forget_frames(self, ranks: Iterable[int]) -> None:
        """Before a question: the frames of ``ranks`` that came earlier are not the answer."""
        with self._lock:
            for rank in ranks:
                self._frames.pop(rank, None)

    def put_frames(self, rank: int, frames: list[str]) -> None:
        """A rank's frames came."""
        with self._lock:
            self._frames[rank] = bounded_frames(frames)
            self._lock.notify_all()

    def wait_frames(
        self, asked: Sequence[int], fetch: Callable[[list[int]], None] | None = None, wait_s: float = FRAMES_WAIT_S
    ) -> dict[int, list[str]]:
        """Waits up to ``wait_s`` for the frames of every rank ``asked`` (``fetch(missing)``, when given, looks for
        them each round); returns rank -> frames of those that came.
        """
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                missing = [r for r in asked if r not in self._frames]
                if not missing or time.monotonic() >= deadline:
                    return {r: self._frames[r] for r in asked if r in self._frames}
                if fetch is None:
                    self._lock.wait(0.1)
            if fetch is not None:
                fetch(missing)

    def once(self, source: Hashable) -> bool:
        """Whether ``source`` is to be said now: true the first time only."""
        with self._lock:
            first = source not in self._said
            self._said.add(source)
        return first

    def silent(self, sources: Iterable[_Source], *, ever: bool = False) -> list[_Source]:
        """The ``sources`` not heard for :data:`SILENT_S` (since they were last, or since the start; with ``ever``,
        only those never heard), not said before: each is returned once.
        """
        now = self._clock()
        with self._lock:
            found = [
                s
                for s in sources
                if s not in self._said
                and not (ever and s in self._heard)
                and now - self._heard.get(s, self.started) > SILENT_S
            ]
            self._said.update(found)
        return found


# --------------------------------------------------------------------------- the lines that say who is not heard


def node_unheard_line(node_rank: int, name: str, ranks: Sequence[int]) -> str:
    """The line for a machine whose records stopped coming (or never came).

    >>> node_unheard_line(1, "gpu07", (2, 3))  # doctest: +NORMALIZE_WHITESPACE
    'node 1 (gpu07): no progress record came from it for 30 s; left out of the slow-rank and stall reports: ranks 2..3'
    """
    why = f"no progress record came from it for {SILENT_S:.0f} s"
    return f"node {node_rank} ({name}): {why}; left out of the slow-rank and stall reports: {_ranks(ranks)}"


def ranks_unheard_line(ranks: Sequence[int]) -> str:
    """The line for ranks whose records never came through TensorFlow's coordination service."""
    return (
        f"tfdevices: no progress record came from ranks {', '.join(map(str, ranks))} through TensorFlow's "
        f"coordination service for {SILENT_S:.0f} s (a rank without tfdevices, or a store that refuses): left out "
        "of the slow-rank and stall reports"
    )


def _ranks(ranks: Sequence[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {ranks[0]}..{ranks[-1]}" if list(ranks) == list(range(ranks[0], ranks[-1] + 1)) else "its ranks"
