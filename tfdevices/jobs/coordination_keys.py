"""A job spread over machines with no launcher watching (``srun``, Ray Train): the ranks tell rank 0 through the
key-value store of TensorFlow's coordination service, which every multi-worker job already runs.

Where no ``tfdevices launch`` watches and a rank's machine does not hold every rank, each rank's
:class:`KeyPublisher` thread puts its progress record (its bytes, base64, after its machine's name) under
``tfdevices/progress/rank{R}`` about once a second (an insert does not overwrite: the key is deleted, then set),
and rank 0's watch reads the ranks it does not see on its own machine (:class:`KeyReader`), stamped on its own
clock when they change (:class:`~tfdevices.jobs.record_channel.Received`). A stuck rank's frames are asked
under ``tfdevices/want/{N}`` and answered under ``tfdevices/frames/{N}/rank{R}``; a stall past the timeout is
said under ``tfdevices/stop`` before rank 0 stops, and every rank that reads it stops too.

The store is handed in as three functions (:class:`KeyValue`: TensorFlow's ``context.context()``'s
``set_config_key_value``, ``get_config_key_value`` and ``delete_config_key_value``, given by
:func:`tfdevices.build_strategy`): this module imports no TensorFlow. A rank whose records never come (a rank
without tfdevices, a store that refuses) is said once. The messages' encoding, the keeping, the wait for
frames and the "not heard" line are the records' channel's (:mod:`tfdevices.jobs.record_channel`), shared with the
launchers' connections; here are the keys that carry them.

What it costs: each rank, about three small requests a second to the store (which runs in rank 0's process); rank
0, one read a second for each rank on another machine (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import threading
import time
from collections.abc import Callable, Sequence

from tfdevices.jobs.progress import RankProgress, record_bytes
from tfdevices.jobs.record_channel import (
    Received,
    decode_frames,
    decode_record,
    encode_frames,
    encode_record,
    encode_want,
    parse_stop,
    ranks_unheard_line,
)
from tfdevices.jobs.stacks import top_frames

PREFIX = "tfdevices/"
#: How long a read waits for a key (milliseconds): the request to rank 0's process and back, or a key not there yet
#: (a record being replaced, a question not asked).
_GET_MS = 100


@dataclasses.dataclass(frozen=True)
class KeyValue:
    """The job's key-value store: TensorFlow's coordination service, as three functions.

    Attributes:
        set: inserts a key (an existing key is not overwritten).
        get: a key's value, waiting up to a number of milliseconds; raises when it is not there by then.
        delete: deletes a key (and the keys under it).
    """

    set: Callable[[str, str], None]
    get: Callable[[str, int], str]
    delete: Callable[[str], None]


def interval_s(world_size: int) -> float:
    """Seconds between a rank's publications: one a second, slower past 32 ranks (rank 0 serves the store).

    >>> interval_s(8), interval_s(256)
    (1.0, 8.0)
    """
    return max(1.0, world_size / 32)


class KeyPublisher:
    """One rank's thread: its record to the store, rank 0's questions answered, its stop obeyed.

    Args:
        store: the job's key-value store.
        rank: this rank.
        node: this machine's name.
        record: the path of this rank's progress record.
        stacks: the path of this rank's stack file (``faulthandler`` writes there).
        every_s: seconds between publications.
        stop: called with the stall's status when rank 0 says the job stops.
    """

    def __init__(
        self,
        store: KeyValue,
        rank: int,
        node: str,
        record: str,
        stacks: str,
        every_s: float,
        stop: Callable[[int], None],
    ) -> None:
        self.store, self.rank, self.node = store, rank, node
        self._record, self._stacks, self._every, self._stop = record, stacks, every_s, stop
        self._done = threading.Event()
        self._last = b""
        self._asked = 0  # the questions seen
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="tfdevices-job-keys", daemon=True)

    def start(self) -> None:
        """Starts the thread."""
        self._thread.start()

    def close(self) -> None:
        """Stops publishing (at exit, before TensorFlow's context goes)."""
        self._done.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._done.wait(self._every):
            try:
                self.publish()
                self._answer()
            except Exception:  # noqa: BLE001 (a store that fails must never take the rank down)
                self.failures += 1
                if self.failures >= 30:
                    return  # the store is gone (rank 0 ended): rank 0 says which ranks it cannot see

    def publish(self) -> None:
        """This rank's record, when it changed, under its key."""
        raw = record_bytes(self._record)
        if raw is None or raw == self._last:
            return
        key = f"{PREFIX}progress/rank{self.rank}"
        try:
            self.store.delete(key)
        except Exception:  # noqa: BLE001 (not there yet: the first publication)
            pass
        self.store.set(key, f"{self.node}|{encode_record(raw)}")
        self._last = raw

    def _answer(self) -> None:
        """Rank 0's stop, and its questions about frames (each asked once, in order)."""
        try:
            status = self.store.get(f"{PREFIX}stop", _GET_MS)
        except Exception:  # noqa: BLE001 (no stop said)
            status = ""
        if status:
            self._stop(parse_stop(status))
        try:
            wanted = self.store.get(f"{PREFIX}want/{self._asked + 1}", _GET_MS)
        except Exception:  # noqa: BLE001 (no question)
            return
        self._asked += 1
        if str(self.rank) in wanted.split(","):
            offset = os.path.getsize(self._stacks) if os.path.exists(self._stacks) else 0
            with open(self._stacks, "a", encoding="utf-8") as f:
                faulthandler.dump_traceback(f, all_threads=True)
            frames = top_frames(self._stacks, offset)
            self.store.set(f"{PREFIX}frames/{self._asked}/rank{self.rank}", encode_frames(frames))


class KeyReader:
    """Rank 0's channel through the store (a :class:`~tfdevices.jobs.record_channel.Channel`): its reads of the other
    machines' ranks, its questions and its stop.

    Args:
        store: the job's key-value store.
        ranks: the ranks of the job (those rank 0 sees on its own machine are not read).
        clock: ``time.time``-like (tests).
    """

    def __init__(self, store: KeyValue, ranks: Sequence[int], clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.ranks = tuple(ranks)
        self._received = Received(clock)
        self._asked = 0

    def records(self, local: Sequence[int]) -> list[RankProgress]:
        """The latest record of each rank rank 0 does not see on its own machine (each read once)."""
        for rank in self.ranks:
            if rank in local:
                continue
            try:
                value = self.store.get(f"{PREFIX}progress/rank{rank}", _GET_MS)
            except Exception:  # noqa: BLE001 (not there yet, or being replaced: the last one is kept)
                continue
            node, _, data = value.partition("|")
            got = decode_record(data, node[:64])
            if got is not None and got[1].rank == rank:
                self._received.keep(*got, source=rank)
        return self._received.records()

    def frames(self, wanted: Sequence[int], wait_s: float = 4.0) -> dict[int, list[str]]:
        """Asks the ranks ``wanted`` for their top frames through the store; waits up to ``wait_s`` for them."""
        self._asked += 1
        asked = self._asked
        self.store.set(f"{PREFIX}want/{asked}", encode_want(wanted))
        self._received.forget_frames(wanted)
        return self._received.wait_frames(list(wanted), lambda missing: self._fetch_frames(asked, missing), wait_s)

    def _fetch_frames(self, asked: int, missing: Sequence[int]) -> None:
        """One round of reads of the answers to question ``asked`` not in yet."""
        for rank in missing:
            try:
                value = self.store.get(f"{PREFIX}frames/{asked}/rank{rank}", _GET_MS)
            except Exception:  # noqa: BLE001 (not answered yet)
                continue
            frames = decode_frames(value)
            if frames is not None:
                self._received.put_frames(rank, frames)

    def stop(self, status: int) -> None:
        """Says every rank stops (a stall past its timeout)."""
        self.store.set(f"{PREFIX}stop", str(status))

    def unheard(self, local: Sequence[int]) -> list[str]:
        """One line, once, for the ranks on other machines whose records never came within
        :data:`~tfdevices.jobs.record_channel.SILENT_S`.
        """
        missing = self._received.silent([r for r in self.ranks if r not in local], ever=True)
        return [ranks_unheard_line(missing)] if missing else []
