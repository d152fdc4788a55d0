"""The job's end, written where people look: ranks.json and its reader, the pictures (no empty panel), and a
TensorBoard run per rank written without TensorFlow and read back with TensorBoard's own loader."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env
from tests.jobs.test_straggler import _looks, _rec, _watch
from tfdevices.core.errors import InputError
from tfdevices.jobs.end_files import read_ranks, write_job_files
from tfdevices.jobs.watch import JobSummary

TIMELINE = [(100.0, 0, 0, "starting"), (101.0, 0, 5, "step")]


def _summary(looks: int = 5) -> JobSummary:
    watch = _watch()
    _looks(watch, [[_rec(0, 1, 55), _rec(1, 51, 5)]] * looks)  # rank 1 sleeps 50 ms between steps
    return watch.summary()


def test_ranks_json_and_its_reader(tmp_path) -> None:
    written = write_job_files(_summary(), TIMELINE, str(tmp_path))
    assert [os.path.relpath(p, tmp_path) for p in written] == [
        "steps.json",
        "ranks.json",
        "steps.png",
        "ranks/rank0",
        "ranks/rank1",
    ]
    data = json.loads((tmp_path / "ranks.json").read_text())
    assert (data["slow_rank"], data["slow_part"], data["link_bound"]) == (1, "between", False)
    assert data["said"][0].startswith("tfdevices: rank 1 is the slow one: rank 0 waits 50 ms of each 55 ms step")
    job = read_ranks(str(tmp_path))
    assert job.slow_rank == 1 and job.reason.startswith("rank 1 is the slow one")
    assert [(r.rank, round(r.between_s * 1e3), round(r.wait_s * 1e3), r.score) for r in job.ranks] == [
        (0, 1, 50, 1.0),
        (1, 51, 0, round(6 / 56, 3)),
    ]
    assert len(job.over_time[1]) == 5 and job.over_time[1][0][1] == pytest.approx(0.051)
    assert job.table().splitlines()[2].split()[:2] == ["1", "51.0"]
    assert (tmp_path / "steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_per_rank_in_tensorboard(tmp_path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    code = (
        "import sys; from tests.jobs.test_end_files import _summary, TIMELINE; "
        "from tfdevices.jobs.end_files import write_job_files; "
        f"write_job_files(_summary(), TIMELINE, {str(tmp_path)!r}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr  # no TensorFlow imported
    for rank, wait in ((0, 50.0), (1, 0.0)):
        events = EventAccumulator(str(tmp_path / "ranks" / f"rank{rank}"))
        events.Reload()
        tags = events.Tags()["scalars"]
        assert sorted(tags) == sorted(
            ["step/between_ms", "step/callback_ms", "step/input_ms", "step/compute_ms", "step/wait_ms", "step/score"]
        )
        waits = events.Scalars("step/wait_ms")
        assert [round(e.value) for e in waits] == [round(wait)] * 5 and [e.step for e in waits] == list(range(40, 45))


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), bit by bit: the test's own, against which the writer's framing is checked."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_the_event_files_are_tfrecords_a_reader_of_the_format_reads(tmp_path) -> None:
    """Byte by byte: each record is its length, the masked CRC-32C of it, the event, the masked CRC-32C of
    that (the TFRecord format TensorFlow and TensorBoard read); the first event says the file's version.
    """
    from tensorboard.compat.proto import event_pb2

    assert _crc32c(b"123456789") == 0xE3069283  # the standard's check value: the test's CRC is right
    write_job_files(_summary(), TIMELINE, str(tmp_path))
    (name,) = os.listdir(tmp_path / "ranks" / "rank1")
    assert name.startswith("events.out.tfevents.")
    raw, at, events = (tmp_path / "ranks" / "rank1" / name).read_bytes(), 0, []
    while at < len(raw):
        header = raw[at : at + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", raw[at + 8 : at + 12])[0] == _masked(header)
        data = raw[at + 12 : at + 12 + length]
        assert len(data) == length and struct.unpack("<I", raw[at + 12 + length : at + 16 + length])[0] == _masked(data)
        events.append(event_pb2.Event.FromString(data))
        at += 16 + length
    assert at == len(raw) and events[0].file_version == "brain.Event:2"
    assert [e.step for e in events[1:]] == list(range(40, 45))


def test_one_look_draws_no_empty_panel(tmp_path) -> None:
    import matplotlib.image

    (tmp_path / "one").mkdir()
    (tmp_path / "five").mkdir()
    write_job_files(_summary(looks=1), TIMELINE, str(tmp_path / "one"))
    write_job_files(_summary(looks=5), TIMELINE, str(tmp_path / "five"))
    one = matplotlib.image.imread(str(tmp_path / "one" / "steps.png"))
    five = matplotlib.image.imread(str(tmp_path / "five" / "steps.png"))
    assert one.shape[0] < 0.6 * five.shape[0]  # the bars alone: no chart over time of a single point
    assert json.loads((tmp_path / "one" / "ranks.json").read_text())["looks"] == 1


@pytest.mark.parametrize("content", [None, "{", '{"version": 1}'])
def test_a_missing_or_foreign_ranks_json_is_refused(tmp_path, content) -> None:
    if content is not None:
        (tmp_path / "ranks.json").write_text(content)
    with pytest.raises(InputError, match="ranks.json" if content else "cannot read") as err:
        read_ranks(str(tmp_path))
    assert "HINT: name the --log-dir" in str(err.value)
