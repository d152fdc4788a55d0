"""Where each rank spent its steps, written where people look: ranks.json and its reader, the picture, and a
TensorBoard run per rank read back with TensorBoard's own loader."""

from __future__ import annotations

import json
import os

import pytest

from tests.jobs.test_straggler import _polls, _rec
from tfdevices.core.errors import InputError
from tfdevices.jobs.rank_report import read_ranks, write_ranks
from tfdevices.jobs.stall import write_timeline
from tfdevices.jobs.straggler import SlowRankPolicy, SlowRankWatch


def _watch() -> SlowRankWatch:
    said: list[str] = []
    watch = SlowRankWatch(SlowRankPolicy(), said.append)
    _polls(watch, [[_rec(0, 1, 55), _rec(1, 51, 5)]] * 5)  # rank 1 sleeps 50 ms between steps
    return watch


def test_ranks_json_and_its_reader(tmp_path) -> None:
    written = write_ranks(_watch(), str(tmp_path))
    assert [os.path.relpath(p, tmp_path) for p in written] == ["ranks.json", "steps.png", "ranks/rank0", "ranks/rank1"]
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

    write_ranks(_watch(), str(tmp_path))
    for rank, wait in ((0, 50.0), (1, 0.0)):
        events = EventAccumulator(str(tmp_path / "ranks" / f"rank{rank}"))
        events.Reload()
        tags = events.Tags()["scalars"]
        assert sorted(tags) == sorted(
            ["step/between_ms", "step/callback_ms", "step/input_ms", "step/compute_ms", "step/wait_ms", "step/score"]
        )
        waits = events.Scalars("step/wait_ms")
        assert [round(e.value) for e in waits] == [round(wait)] * 5 and [e.step for e in waits] == list(range(40, 45))


def test_the_timeline_picture_is_the_split_when_the_watch_saw_one(tmp_path) -> None:
    timeline = [(100.0, 0, 0, "starting"), (101.0, 0, 5, "step")]
    written = write_timeline(timeline, str(tmp_path), end=130.0, slow=_watch())
    assert [os.path.basename(p) for p in written][:3] == ["steps.json", "ranks.json", "steps.png"]
    quiet = SlowRankWatch(SlowRankPolicy(), print)
    assert write_ranks(quiet, str(tmp_path / "none")) == []


@pytest.mark.parametrize("content", [None, "{", '{"version": 1}'])
def test_a_missing_or_foreign_ranks_json_is_refused(tmp_path, content) -> None:
    if content is not None:
        (tmp_path / "ranks.json").write_text(content)
    with pytest.raises(InputError, match="ranks.json" if content else "cannot read") as err:
        read_ranks(str(tmp_path))
    assert "HINT: name the --log-dir" in str(err.value)
