"""The records' channel: one encoding and one keeping of the four messages, over either transport.

The launchers' connections are tested over real launchers in ``test_nodes.py``; here the key-value store's
transport runs against a store held in a dict (TensorFlow's coordination service has the same three calls), and
both transports are checked to carry a record as the same text.
"""

from __future__ import annotations

import threading

from tfdevices.jobs.coordination_keys import PREFIX, KeyPublisher, KeyReader, KeyValue
from tfdevices.jobs.node_exchange import Node, RemoteRecords, frames_line, record_line
from tfdevices.jobs.progress import ProgressWriter, record_bytes
from tfdevices.jobs.record_channel import SILENT_S, decode_frames, decode_record, encode_frames, parse_stop


class _Store:
    """A key-value store like the coordination service's: an insert does not overwrite, a get waits for nothing."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.lock = threading.Lock()

    def set(self, key: str, value: str) -> None:
        with self.lock:
            if key in self.keys:
                raise RuntimeError(f"{key} exists")
            self.keys[key] = value

    def get(self, key: str, wait_ms: int) -> str:
        with self.lock:
            if key not in self.keys:
                raise KeyError(key)
            return self.keys[key]

    def delete(self, key: str) -> None:
        with self.lock:
            self.keys.pop(key)

    def kv(self) -> KeyValue:
        return KeyValue(self.set, self.get, self.delete)


def _writer(tmp_path, rank: int, steps: int) -> ProgressWriter:
    writer = ProgressWriter(str(tmp_path), rank)
    for _ in range(steps):
        writer.begin_step()
        writer.end_step(0.01)
    return writer


def test_both_transports_carry_a_record_as_the_same_text(tmp_path) -> None:
    store = _Store()
    writer = _writer(tmp_path, 1, 3)
    KeyPublisher(store.kv(), 1, "gpu07", writer.path, str(tmp_path / "s.txt"), 1.0, lambda s: None).publish()
    node, _, text = store.keys[f"{PREFIX}progress/rank1"].partition("|")
    raw = record_bytes(writer.path)
    assert (node, text) == ("gpu07", record_line(raw).split(" ", 1)[1])
    got = decode_record(text, node)
    assert got is not None and got[0] == raw and (got[1].rank, got[1].done, got[1].node) == (1, 3, "gpu07")
    assert decode_record("not base64!", "x") is None and decode_record("c2hvcnQ=", "x") is None


def test_frames_are_bounded_the_same_way_on_either_transport() -> None:
    frames = [f"frame {i} " + "x" * 600 for i in range(20)]
    carried = decode_frames(encode_frames(frames))
    assert carried is not None and len(carried) == 16 and all(len(f) == 500 for f in carried)
    assert decode_frames(frames_line(2, frames).split(" ", 2)[2]) == carried
    assert decode_frames("bm90IGEgbGlzdA==") is None  # "not a list"
    assert [parse_stop(v) for v in ("3", "0", "", "x")] == [3, 1, 1, 1]


def test_rank_0_reads_another_machines_rank_through_the_store_on_its_own_clock(tmp_path) -> None:
    store, now = _Store(), [100.0]
    writer = _writer(tmp_path, 1, 2)
    publisher = KeyPublisher(store.kv(), 1, "gpu07", writer.path, str(tmp_path / "s.txt"), 1.0, lambda s: None)
    reader = KeyReader(store.kv(), [0, 1], clock=lambda: now[0])
    publisher.publish()
    assert [(r.rank, r.done, r.node, r.changed_at) for r in reader.records([0])] == [(1, 2, "gpu07", 100.0)]
    now[0] = 105.0
    publisher.publish()  # unchanged: not published again, and kept with the time it changed
    assert [r.changed_at for r in reader.records([0])] == [100.0]
    writer.begin_step()
    publisher.publish()
    assert [(r.phase, r.changed_at) for r in reader.records([0])] == [("step", 105.0)]


def test_a_stuck_ranks_frames_and_the_stop_go_through_the_store(tmp_path) -> None:
    store, stopped = _Store(), threading.Event()
    writer = _writer(tmp_path, 1, 1)
    publisher = KeyPublisher(
        store.kv(), 1, "gpu07", writer.path, str(tmp_path / "s.txt"), 0.01, lambda status: stopped.set()
    )
    reader = KeyReader(store.kv(), [0, 1])
    publisher.start()  # its thread publishes, answers the question, obeys the stop
    try:
        frames = reader.frames([1], wait_s=60.0)
        assert list(frames) == [1] and any("test_record_channel.py" in f for f in frames[1])
        reader.stop(3)
        assert stopped.wait(60) and store.keys[f"{PREFIX}stop"] == "3"
    finally:
        publisher.close()


def test_ranks_never_heard_are_said_once_on_either_transport(tmp_path) -> None:
    now = [100.0]
    reader = KeyReader(_Store().kv(), [0, 1, 2], clock=lambda: now[0])
    assert reader.unheard([0]) == []
    now[0] += SILENT_S + 1
    said = (
        "tfdevices: no progress record came from ranks 1, 2 through TensorFlow's coordination service for 30 s (a "
        "rank without tfdevices, or a store that refuses): left out of the slow-rank and stall reports"
    )
    assert reader.unheard([0]) == [said]
    assert reader.unheard([0]) == []  # once
    remote = RemoteRecords([Node(1, "gpu07", (1,))], clock=lambda: now[0])
    remote.take(1, "record", record_line(record_bytes(_writer(tmp_path, 1, 1).path)).split(" ", 1)[1])
    assert remote.unheard() == []  # heard just now
    now[0] += SILENT_S + 1  # its records stopped coming
    assert len(remote.unheard()) == 1 and remote.unheard() == []
