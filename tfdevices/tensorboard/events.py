"""TensorBoard event files read without TensorFlow: each run's string summaries, by tag.

An event file is a file of records (TFRecord framing: an 8-byte little-endian length, its
4-byte CRC, the data, the data's CRC), each an ``Event`` of TensorBoard's own protos.
TensorBoard's ``EventAccumulator`` imports TensorFlow wherever it is installed (about 3.5 s);
this reader needs only the protos TensorBoard ships. CRCs are not checked: a record cut short
(a file still being written) ends the file, as TensorBoard's loader ends it. Reading is bounded
by each file's size.

>>> import tempfile
>>> from tensorboard.compat.proto import event_pb2
>>> from tensorboard.summary.writer.event_file_writer import EventFileWriter
>>> logdir = tempfile.mkdtemp()
>>> writer = EventFileWriter(logdir)
>>> event = event_pb2.Event(step=3)
>>> value = event.summary.value.add(tag="placement/json")
>>> value.tensor.string_val.append(b"{}")
>>> writer.add_event(event); writer.close()
>>> [(step, text) for _, step, text in run_strings(logdir)["placement/json"]]
[(3, '{}')]
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

#: What every event file's name holds.
EVENTS = "events.out.tfevents"
_HEADER = struct.Struct("<QI")


def run_strings(run: str) -> dict[str, list[tuple[float, int, str]]]:
    """Every summary value of the run directory ``run``'s event files, by tag, in file order.

    Returns:
        ``{tag: [(wall time, step, first string of its tensor, "" when none), ...]}``.
    """
    from tensorboard.compat.proto import event_pb2  # noqa: PLC0415 (lazy tensorboard)

    found: dict[str, list[tuple[float, int, str]]] = {}
    names = sorted(f for f in os.listdir(run) if EVENTS in f and os.path.isfile(os.path.join(run, f)))
    for name in names:
        for data in _records(os.path.join(run, name)):
            try:
                event = event_pb2.Event.FromString(data)
            except Exception:  # noqa: BLE001  (protobuf's DecodeError: a damaged record is skipped, as TensorBoard does)
                continue
            for value in event.summary.value:
                strings = value.tensor.string_val
                text = strings[0].decode("utf-8", "replace") if strings else ""
                found.setdefault(value.tag, []).append((event.wall_time, event.step, text))
    return found


def _records(path: str) -> Iterator[bytes]:
    """Each record's data; a record longer than what is left of the file ends it."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while True:
            header = f.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return
            (length, _) = _HEADER.unpack(header)
            if length > size - f.tell():
                return
            data = f.read(length)
            if len(data) < length or len(f.read(4)) < 4:
                return
            yield data
