"""Where each rank spent its steps, written where people look: ``ranks.json``, a picture, TensorBoard.

At the end of a job the launcher (with ``--log-dir``) writes, from what its slow-rank watch saw
(:class:`~tfdevices.jobs.straggler.SlowRankWatch`):

- ``ranks.json``: each rank's split of its step (ms between steps, in ``fit``'s callbacks, in its
  input, computing, waiting in the collectives), its score, the slow rank and why, the lines said
  while the job ran, and each rank's split at each look (for tools; :func:`read_ranks` reads it);
- ``steps.png`` (with matplotlib): one stacked bar per rank of its step's parts, and each rank's own
  work and wait over time: the rank everyone waits for is the one with the longest work and the
  shortest wait;
- ``ranks/rank<R>/``: a TensorBoard run per rank with the parts as scalars (``step/wait_ms``, ...),
  written with TensorBoard's own event writer (no TensorFlow).

TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from tfdevices.core.errors import InputError
from tfdevices.core.units import shown
from tfdevices.jobs.straggler import RankSplit, SlowRankWatch, rank_table

RANKS_FILE = "ranks.json"
#: The parts of a step, in the order the table, the picture and the JSON give them.
PARTS = ("between", "callback", "input", "compute", "wait")
_COLORS = {"between": "#e6a23c", "callback": "#b37feb", "input": "#5cb87a", "compute": "#409eff", "wait": "#c0c4cc"}
_MAX_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class JobRanks:
    """A job's ranks as its ``ranks.json`` has them (:func:`read_ranks`).

    Attributes:
        ranks: each rank's split of its step over the job (seconds; medians of the looks).
        slow_rank: the rank the others waited for, or ``None``.
        reason: why, in one line (``None`` without a slow rank).
        link_bound: every rank waited in the collectives most of its step: the link, not a rank.
        said: the slow-rank lines the launcher said while the job ran.
        over_time: rank -> its split at each look: ``(seconds since the first look, between_s,
            callback_s, input_s, compute_s, wait_s)``.
    """

    ranks: tuple[RankSplit, ...]
    slow_rank: int | None
    reason: str | None
    link_bound: bool
    said: tuple[str, ...]
    over_time: Mapping[int, tuple[tuple[float, ...], ...]]

    def table(self) -> str:
        """The table the launcher printed: ms per step in each part, the score, the steps."""
        return "\n".join(rank_table(self.ranks))


def ranks_data(watch: SlowRankWatch) -> dict[str, Any]:
    """What ``ranks.json`` holds (plain JSON types), from a watch."""
    splits, slow, link = watch.summary()
    start = watch.history[0][0] if watch.history else 0.0
    over: dict[str, list[list[float]]] = {}
    for when, polled in watch.history:
        for s in polled:
            over.setdefault(str(s.rank), []).append(
                [round(when - start, 3), *(round(s.component(p) * 1e3, 3) for p in PARTS)]
            )
    return {
        "version": 1,
        "units": "ms per step",
        "ranks": [
            {
                "rank": s.rank,
                "steps": s.steps,
                **{f"{p}_ms": round(s.component(p) * 1e3, 3) for p in (*PARTS, "step")},
                "score": s.score,
                "sampled": s.sampled,
            }
            for s in splits
        ],
        "slow_rank": None if slow is None else slow.rank,
        "slow_part": None if slow is None else slow.component,
        "reason": None if slow is None else slow.reason(),
        "link_bound": link,
        "said": list(watch.said),
        "over_time_columns": ["seconds", *(f"{p}_ms" for p in PARTS)],
        "over_time": over,
    }


def write_ranks(watch: SlowRankWatch, directory: str) -> list[str]:
    """Writes ``ranks.json``, the picture (``steps.png``, with matplotlib) and a TensorBoard run per rank
    (``ranks/rank<R>``, with TensorBoard installed) into ``directory``; returns the paths written (none when
    the watch saw no step split: a job too short, or the report turned off).
    """
    if not watch.history:
        return []
    data = ranks_data(watch)
    written = [os.path.join(directory, RANKS_FILE)]
    with open(written[0], "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    picture = draw_ranks(data, os.path.join(directory, "steps.png"))
    if picture:
        written.append(picture)
    written += _tensorboard(watch, os.path.join(directory, "ranks"))
    return written


def draw_ranks(data: Mapping[str, Any], path: str) -> str | None:
    """The picture of ``ranks.json``'s data at ``path``; ``None`` without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415 (pictures are optional)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    ranks = data["ranks"]
    fig, (bars, lines) = plt.subplots(
        2, 1, figsize=(9, 2.8 + 0.45 * len(ranks) + 2.6), height_ratios=(1.2 + 0.3 * len(ranks), 2.6)
    )
    for row, rank in enumerate(ranks):
        left = 0.0
        for part in PARTS:
            width = rank[f"{part}_ms"]
            bars.barh(row, width, left=left, color=_COLORS[part], label=part if row == 0 else None)
            left += width
        bars.text(left, row, f"  score {rank['score']:.2f}", va="center", fontsize=8)
    bars.set_yticks(range(len(ranks)), [f"rank {r['rank']}" for r in ranks])
    bars.invert_yaxis()
    bars.set_xlabel("ms per step")
    slow = data.get("slow_rank")
    title = f"rank {slow} is the slow one: the others wait for it" if slow is not None else "no slow rank"
    if data.get("link_bound"):
        title += " (every rank waits in the all-reduce: the link is the bottleneck)"
    bars.set_title(f"where each rank spends its step: {title}", fontsize=10)
    bars.legend(loc="upper center", bbox_to_anchor=(0.5, -0.32), fontsize=8, ncol=len(PARTS), frameon=False)
    bars.set_xlim(0, 1.15 * max([sum(r[f"{p}_ms"] for p in PARTS) for r in ranks] + [1e-3]))
    for rank, points in sorted(data["over_time"].items(), key=lambda kv: int(kv[0])):
        t = [p[0] for p in points]
        (line,) = lines.plot(t, [sum(p[1:5]) for p in points], label=f"rank {rank}: own work")
        lines.plot(t, [p[5] for p in points], linestyle="--", color=line.get_color(), label=f"rank {rank}: wait")
    lines.set(xlabel="seconds since the first look", ylabel="ms per step")
    lines.set_title("each rank's own work (between + callback + input + compute) and wait, over time", fontsize=10)
    lines.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _tensorboard(watch: SlowRankWatch, directory: str) -> list[str]:
    """A run per rank, each part as a scalar (ms per step) at each look (its step: the rank's steps done)."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: PLC0415 (TensorBoard is optional)
        from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: PLC0415
    except ImportError:
        return []
    writers: dict[int, Any] = {}
    for when, polled in watch.history:
        for s in polled:
            if s.rank not in writers:
                writers[s.rank] = EventFileWriter(os.path.join(directory, f"rank{s.rank}"))
            values = [summary_pb2.Summary.Value(tag=f"step/{p}_ms", simple_value=s.component(p) * 1e3) for p in PARTS]
            values.append(summary_pb2.Summary.Value(tag="step/score", simple_value=s.score))
            event = event_pb2.Event(wall_time=when, step=s.steps, summary=summary_pb2.Summary(value=values))
            writers[s.rank].add_event(event)
    for writer in writers.values():
        writer.close()
    return [os.path.join(directory, f"rank{rank}") for rank in sorted(writers)]


def read_ranks(log_dir: str | os.PathLike[str]) -> JobRanks:
    """A job's ranks from its ``--log-dir`` (or the ``ranks.json`` path itself), for notebooks and tools.

    Raises:
        InputError: there is no ``ranks.json`` there, or it is not one ``tfdevices launch`` wrote.

    >>> import json, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> row = {"between_ms": 1.0, "callback_ms": 0.0, "input_ms": 0.0, "compute_ms": 5.0, "wait_ms": 50.0,
    ...        "step_ms": 55.0, "steps": 300, "score": 1.0, "sampled": False}
    >>> slow = {**row, "between_ms": 51.0, "wait_ms": 0.0, "step_ms": 5.0, "score": 0.107}
    >>> with open(os.path.join(d, "ranks.json"), "w") as f:
    ...     json.dump({"version": 1, "ranks": [{"rank": 0, **row}, {"rank": 1, **slow}], "slow_rank": 1,
    ...                "reason": "rank 1 is the slow one", "link_bound": False, "said": [], "over_time": {}}, f)
    >>> job = read_ranks(d)
    >>> job.slow_rank, [round(r.score, 2) for r in job.ranks]
    (1, [1.0, 0.11])
    """
    path = os.fspath(log_dir)
    if os.path.isdir(path):
        path = os.path.join(path, RANKS_FILE)
    try:
        if os.path.getsize(path) > _MAX_BYTES:
            raise InputError(
                f"{shown(path)} is over {_MAX_BYTES >> 20} MiB: not a ranks.json.", hint="name the job's --log-dir."
            )
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return _job_ranks(data)
    except OSError as err:
        raise InputError(
            f"cannot read {shown(path)} ({err.strerror}).",
            hint="name the --log-dir of a job run by `tfdevices launch` (it writes ranks.json at the job's end).",
        ) from None
    except (ValueError, KeyError, TypeError) as err:
        raise InputError(
            f"{shown(path)} is not a ranks.json tfdevices wrote ({type(err).__name__}: {err}).",
            hint="name the --log-dir of a job run by `tfdevices launch`.",
        ) from None


def _split(row: Mapping[str, Any]) -> RankSplit:
    between, callback, step, got, compute, wait = (
        float(row[f"{p}_ms"]) / 1e3 for p in ("between", "callback", "step", "input", "compute", "wait")
    )
    return RankSplit(
        int(row["rank"]),
        int(row["steps"]),
        between,
        callback,
        step,
        got,
        compute,
        wait,
        bool(row["sampled"]),
        float(row["score"]),
    )


def _job_ranks(data: Mapping[str, Any]) -> JobRanks:
    ranks = tuple(_split(r) for r in data["ranks"])
    over = {
        int(k): tuple((float(p[0]), *(float(x) / 1e3 for x in p[1:])) for p in v)
        for k, v in dict(data["over_time"]).items()
    }
    slow = data["slow_rank"]
    return JobRanks(
        ranks,
        None if slow is None else int(slow),
        data.get("reason"),
        bool(data["link_bound"]),
        tuple(str(s) for s in data["said"]),
        over,
    )


__all__ = ["RANKS_FILE", "JobRanks", "draw_ranks", "ranks_data", "read_ranks", "write_ranks"]
