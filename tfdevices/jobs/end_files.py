"""The job's end, written where people look: each rank's steps over time, their split, the slow rank.

At the end of a job the launcher (with ``--log-dir``) renders the watch's summary of the job
(:meth:`~tfdevices.jobs.watch.JobWatch.summary`) and its timeline into:

- ``steps.json``: each rank's steps begun and its phase at each change, over time;
- ``ranks.json``: each rank's split of its step (ms between steps, in ``fit``'s callbacks, waiting for its
  input, computing, waiting in the collectives), its score, the slow rank and why, the lines said while
  the job ran, and each rank's split at each look (for tools; :func:`read_ranks` reads it);
- ``steps.png`` (with matplotlib): one stacked bar per rank of its step's parts and, over two looks or
  more, each rank's own work and wait over time (the rank everyone waits for is the one with the longest
  work and the shortest wait); before any split, each rank's steps over time;
- ``ranks/rank<R>/``: a TensorBoard run per rank with the parts as scalars (``step/wait_ms``, ...), its
  event files written here with protobuf alone (no TensorFlow, no TensorBoard writer).

TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tfdevices.core.errors import InputError
from tfdevices.core.units import short_repr
from tfdevices.jobs.straggler import RankSplit, rank_table
from tfdevices.jobs.watch import JobSummary

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


def ranks_data(summary: JobSummary) -> dict[str, Any]:
    """What ``ranks.json`` holds (plain JSON types), from the watch's summary of the job."""
    slow = summary.slow
    start = summary.history[0][0] if summary.history else 0.0
    over: dict[str, list[list[float]]] = {}
    for when, polled in summary.history:
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
                "node": s.node,
                "steps": s.steps,
                **{f"{p}_ms": round(s.component(p) * 1e3, 3) for p in (*PARTS, "step")},
                "score": s.score,
                "measured": s.measured,
            }
            for s in summary.splits
        ],
        "looks": summary.looks,
        "slow_rank": None if slow is None else slow.rank,
        "slow_part": None if slow is None else slow.component,
        "reason": None if slow is None else slow.reason(),
        "link_bound": summary.link_bound,
        "said": list(summary.said),
        "over_time_columns": ["seconds", *(f"{p}_ms" for p in PARTS)],
        "over_time": over,
    }


def write_job_files(
    summary: JobSummary,
    timeline: Sequence[tuple[float, int, int, str]],
    directory: str,
    end: float | None = None,
    looks: int = 0,
    *,
    looks_every_rank: int = 0,
    timeline_every: int = 1,
) -> list[str]:
    """Writes the job's end into ``directory``: ``steps.json``; then, where the watch saw every rank's split,
    ``ranks.json``, the picture of the split and a TensorBoard run per rank, else the picture of the steps.
    ``timeline``: (time, rank, steps begun, phase) at each change; ``end``: when the watch last looked, where the
    picture's lines end; ``looks``: how many times it looked; ``looks_every_rank``: of those, how many read every
    rank past its first step; ``timeline_every``: the timeline keeps each rank's every N-th step (a long or large
    job's, thinned). Returns the paths written: none when no rank began a step.
    """
    if not any(begun for _, _, begun, _ in timeline):
        return []  # no rank began a step (a job that never trained): there are no steps to show
    written = [write_steps(timeline, directory, looks, looks_every_rank=looks_every_rank, every=timeline_every)]
    if not summary.history:
        picture = draw_steps(timeline, os.path.join(directory, "steps.png"), end)
        return written + ([picture] if picture else [])
    data = ranks_data(summary)
    written.append(os.path.join(directory, RANKS_FILE))
    with open(written[-1], "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    picture = draw_ranks(data, os.path.join(directory, "steps.png"))
    return written + ([picture] if picture else []) + write_rank_runs(summary, os.path.join(directory, "ranks"))


def write_steps(
    timeline: Sequence[tuple[float, int, int, str]],
    directory: str,
    looks: int = 0,
    *,
    looks_every_rank: int = 0,
    every: int = 1,
) -> str:
    """``steps.json``: each rank's steps begun and phase at each change, in seconds since the first record, how
    many times the watch looked, how many of those looks read every rank past its first step, and which steps the
    changes are kept for (``steps_kept_every``: 1, every step; N, the steps begun a multiple of N, and the end).
    """
    start = min(t for t, *_ in timeline)
    ranks: dict[int, list[tuple[float, int, str]]] = {}
    for t, rank, begun, phase in sorted(timeline):
        ranks.setdefault(rank, []).append((round(t - start, 3), begun, phase))
    path = os.path.join(directory, "steps.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(
            {
                "start": start,
                "looks": looks,
                "looks_every_rank": looks_every_rank,
                "steps_kept_every": every,
                "columns": ["seconds", "steps begun", "phase"],
                "ranks": ranks,
            },
            f,
        )
    return path


def _pyplot() -> Any:
    """Matplotlib's pyplot on the Agg backend, or ``None`` where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: PLC0415 (pictures are optional)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    return plt


def draw_steps(timeline: Sequence[tuple[float, int, int, str]], path: str, end: float | None = None) -> str | None:
    """The picture of each rank's steps over time (a shaded span: a rank in a callback); past
    :data:`DRAWN_RANKS` ranks, those furthest behind at the end. ``None`` without matplotlib.
    """
    plt = _pyplot()
    if plt is None:
        return None
    start = min(t for t, *_ in timeline)
    ranks: dict[int, list[tuple[float, int, str]]] = {}
    for t, rank, begun, phase in sorted(timeline):
        ranks.setdefault(rank, []).append((t - start, begun, phase))
    last = max([p[0] for points in ranks.values() for p in points] + [(end or start) - start])
    title = "each rank's steps (shaded: in a callback)"
    if len(ranks) > DRAWN_RANKS:
        title = f"the {DRAWN_RANKS} of {len(ranks):,} ranks furthest behind (shaded: in a callback)"
        ranks = dict(sorted(ranks.items(), key=lambda kv: (kv[1][-1][1], kv[0]))[:DRAWN_RANKS])
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for rank, points in sorted(ranks.items()):
        (line,) = ax.step([p[0] for p in points] + [last], [p[1] for p in points] + [points[-1][1]], where="post")
        line.set_label(f"rank {rank}")
        for (t, _, phase), after in zip(points, [*points[1:], (last, 0, "")]):
            if phase == "callback":
                ax.axvspan(t, after[0], color=line.get_color(), alpha=0.2)
    ax.set(xlabel="seconds since the first record", ylabel="steps begun")
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def draw_ranks(data: Mapping[str, Any], path: str) -> str | None:
    """The picture of ``ranks.json``'s data at ``path``: a bar per rank and, over two looks or more, each rank's
    work and wait over time; past :data:`DRAWN_RANKS` ranks, the bars of the :data:`SLOWEST` slowest (the slow
    rank among them) and one of the others' median with their range, and the lines of the slowest few and the
    median of every rank. ``None`` without matplotlib.
    """
    plt = _pyplot()
    if plt is None:
        return None
    ranks, over = _drawn(data)
    bars_height = 1.2 + 0.3 * len(ranks)
    if all(len(points) >= 2 for points in over.values()) and over:
        fig, (bars, lines) = plt.subplots(2, 1, figsize=(9, bars_height + 4.2), height_ratios=(bars_height, 2.6))
        _draw_over_time(lines, over)
    else:  # one look: no line to draw over time
        fig, bars = plt.subplots(1, 1, figsize=(9, bars_height + 1.6))
    _draw_bars(bars, ranks, data)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


#: Past this many ranks, the picture draws the slowest ranks and the others' spread, not a bar per rank.
DRAWN_RANKS = 16
#: The ranks a large job's picture draws a bar for (the slowest by their own work; the slow rank among them).
SLOWEST = 10


def _drawn(data: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], Mapping[str, Sequence[Sequence[float]]]]:
    """The bars and the lines over time the picture draws: every rank's, or past :data:`DRAWN_RANKS` the slowest
    ranks', a bar of the others' median (its range: the others' least and most total) and the median's line.
    """
    ranks, over = list(data["ranks"]), data["over_time"]
    if len(ranks) <= DRAWN_RANKS:
        return ranks, over
    work = {r["rank"]: sum(r[f"{p}_ms"] for p in PARTS[:-1]) for r in ranks}
    slowest = sorted(ranks, key=lambda r: (r["rank"] != data.get("slow_rank"), -work[r["rank"]]))[:SLOWEST]
    kept = {r["rank"] for r in slowest}
    others = [r for r in ranks if r["rank"] not in kept]
    totals = [sum(r[f"{p}_ms"] for p in PARTS) for r in others]
    median = {f"{p}_ms": statistics.median([r[f"{p}_ms"] for r in others]) for p in PARTS}
    band = {"rank": f"the other {len(others):,}", **median, "range": (min(totals), max(totals))}
    lines = {str(r["rank"]): over[str(r["rank"])] for r in slowest[:3] if str(r["rank"]) in over}
    looks = min((len(points) for points in over.values()), default=0)
    lines["median"] = [[next(iter(over.values()))[i][0], *_column_medians(over, i)] for i in range(looks)]
    return sorted(slowest, key=lambda r: r["rank"]) + [band], lines


def _column_medians(over: Mapping[str, Sequence[Sequence[float]]], i: int) -> list[float]:
    return [statistics.median([points[i][c] for points in over.values()]) for c in range(1, 1 + len(PARTS))]


def _draw_bars(bars: Any, ranks: Sequence[Mapping[str, Any]], data: Mapping[str, Any]) -> None:
    for row, rank in enumerate(ranks):
        left = 0.0
        for part in PARTS:
            width = rank[f"{part}_ms"]
            bars.barh(row, width, left=left, color=_COLORS[part], label=part if row == 0 else None)
            left += width
        if "range" in rank:  # the others' median: their range of totals as a whisker
            low, high = rank["range"]
            bars.errorbar(left, row, xerr=[[left - low], [high - left]], color="black", capsize=3)
            bars.text(high, row, "  median, least to most", va="center", fontsize=8)
        else:
            bars.text(left, row, f"  score {rank['score']:.2f}", va="center", fontsize=8)
    names = [f"rank {r['rank']}" if isinstance(r["rank"], int) else str(r["rank"]) for r in ranks]
    bars.set_yticks(range(len(ranks)), names)
    bars.invert_yaxis()
    bars.set_xlabel("ms per step")
    slow = data.get("slow_rank")
    title = f"rank {slow} is the slow one: the others wait for it" if slow is not None else "no slow rank"
    if data.get("link_bound"):
        title += " (every rank waits in the all-reduce: the link is the bottleneck)"
    bars.set_title(f"where each rank spends its step: {title}", fontsize=10)
    bars.legend(loc="upper center", bbox_to_anchor=(0.5, -0.32), fontsize=8, ncol=len(PARTS), frameon=False)
    ends = [sum(r[f"{p}_ms"] for p in PARTS) for r in ranks] + [r["range"][1] for r in ranks if "range" in r]
    bars.set_xlim(0, 1.15 * max([*ends, 1e-3]))


def _draw_over_time(lines: Any, over: Mapping[str, Sequence[Sequence[float]]]) -> None:
    for rank, points in sorted(
        over.items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0)
    ):
        t = [p[0] for p in points]
        name = f"rank {rank}" if rank.isdigit() else "every rank's median"
        (line,) = lines.plot(t, [sum(p[1:5]) for p in points], label=f"{name}: own work")
        lines.plot(t, [p[5] for p in points], linestyle="--", color=line.get_color(), label=f"{name}: wait")
    lines.set(xlabel="seconds since the first look", ylabel="ms per step")
    lines.set_title("each rank's own work (between + callback + input + compute) and wait, over time", fontsize=10)
    lines.legend(loc="upper right", fontsize=8)


def write_rank_runs(summary: JobSummary, directory: str) -> list[str]:
    """A TensorBoard run per rank, each part as a scalar (ms per step) at each look (its step: the rank's steps
    done); the event files are written with TensorBoard's own messages and record writer (no TensorFlow);
    none without TensorBoard installed.
    """
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: PLC0415 (TensorBoard is optional)
        from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: PLC0415
    except ImportError:
        return []
    files: dict[int, _EventFile] = {}
    try:
        for when, polled in summary.history:
            for s in polled:
                if s.rank not in files:
                    files[s.rank] = _EventFile(os.path.join(directory, f"rank{s.rank}"), event_pb2, when, RecordWriter)
                values = [
                    summary_pb2.Summary.Value(tag=f"step/{p}_ms", simple_value=s.component(p) * 1e3) for p in PARTS
                ]
                values.append(summary_pb2.Summary.Value(tag="step/score", simple_value=s.score))
                event = event_pb2.Event(wall_time=when, step=s.steps, summary=summary_pb2.Summary(value=values))
                files[s.rank].write(event.SerializeToString())
    finally:
        for file in files.values():
            file.close()
    return [os.path.join(directory, f"rank{rank}") for rank in sorted(files)]


class _EventFile:
    """One TensorBoard event file, framed by TensorBoard's own ``RecordWriter`` (TFRecord: length, masked
    CRC-32C of it, data, masked CRC-32C of it), first a ``file_version`` event, as TensorFlow's and
    TensorBoard's writers write; it imports no TensorFlow.
    """

    def __init__(self, directory: str, event_pb2: Any, when: float, record_writer: Any) -> None:
        os.makedirs(directory, exist_ok=True)
        name = f"events.out.tfevents.{int(when or time.time())}.{socket.gethostname()[:64]}.{os.getpid()}.0"
        self._records = record_writer(open(os.path.join(directory, name), "wb"))  # noqa: SIM115 (closed by close())
        self.write(event_pb2.Event(wall_time=when, file_version="brain.Event:2").SerializeToString())

    def write(self, data: bytes) -> None:
        self._records.write(data)

    def close(self) -> None:
        self._records.close()


def read_ranks(log_dir: str | os.PathLike[str]) -> JobRanks:
    """A job's ranks from its ``--log-dir`` (or the ``ranks.json`` path itself), for notebooks and tools.

    Raises:
        InputError: there is no ``ranks.json`` there, or it is not one ``tfdevices launch`` wrote.

    >>> import json, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> row = {"between_ms": 1.0, "callback_ms": 0.0, "input_ms": 0.0, "compute_ms": 5.0, "wait_ms": 50.0,
    ...        "step_ms": 55.0, "steps": 300, "score": 1.0, "measured": False}
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
                f"{short_repr(path)} is over {_MAX_BYTES >> 20} MiB: not a ranks.json.",
                hint="name the job's --log-dir.",
            )
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return _job_ranks(data)
    except OSError as err:
        raise InputError(
            f"cannot read {short_repr(path)} ({err.strerror}).",
            hint="name the --log-dir of a job run by `tfdevices launch` (it writes ranks.json at the job's end).",
        ) from None
    except (ValueError, KeyError, TypeError) as err:
        raise InputError(
            f"{short_repr(path)} is not a ranks.json tfdevices wrote ({type(err).__name__}: {err}).",
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
        bool(row.get("measured", row.get("sampled"))),  # "sampled" in files written before 0.4
        float(row["score"]),
        str(row.get("node", "")),
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
