"""A stuck rank, named: ranks that disagree about the next step while none moves.

A collective waits for every rank, for ever (TensorFlow's gRPC collectives: no error, no output).
From the ranks' progress records (:mod:`tfdevices.jobs.progress`) a *stall* is when some rank waits
in step N (it began it: its collectives need everyone), another has not begun step N, and no record
changed for the stall window: by default the larger of 60 s and 20x the median step so far, and
:data:`STARTUP_S` before every rank finished a step (first-step compilation). Ranks that are slow
together never disagree; a slow input pipeline still moves. A rank that is late because it is in a
callback (a chief-only checkpoint) is reported as a phase, not as stuck.

:func:`detect_stall` is pure; :class:`StallWatch` polls a board, says each stall once and again at
growing intervals, asks every local rank for its Python stack (``SIGUSR1``: the ``stack_dumps``
mend's ``faulthandler``), prints the stuck rank's top frames, and after ``timeout_s`` more says the
job should stop. TensorFlow-free.

>>> from tfdevices.jobs.progress import RankProgress
>>> waiting = RankProgress(0, 10, 5, 4, "step", "", 100.0, 0.1)
>>> stuck = RankProgress(1, 11, 4, 4, "between", "", 99.0, 0.1)
>>> stall = detect_stall([waiting, stuck], now=200.0, policy=StallPolicy(window_s=60))
>>> stall.reason()
'rank 1 did not arrive at step 5: rank 0 has waited in it for 100 s; rank 1 is after step 4'
"""

from __future__ import annotations

import dataclasses
import os
import signal
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from tfdevices.core.errors import EnvVarError
from tfdevices.core.units import parse_seconds, shown
from tfdevices.jobs import straggler
from tfdevices.jobs.progress import RankProgress, read_board
from tfdevices.jobs.rank_report import write_ranks
from tfdevices.jobs.straggler import SlowRankPolicy, SlowRankWatch

STALL_WINDOW_ENV = "TFDEVICES_STALL_WINDOW"
_ON = SlowRankPolicy()
STALL_TIMEOUT_ENV = "TFDEVICES_STALL_TIMEOUT"
STACKS_DIR_ENV = "TFDEVICES_STACKS_DIR"
MIN_WINDOW_S = 60.0
STEPS_IN_WINDOW = 20
STARTUP_S = 600.0
#: A record last written this long before the watch began is a past job's (SLURM reuses a job's directory
#: name when a cluster restarts its job ids).
STALE_S = 300.0
_MAX_S = 7 * 86400.0


@dataclasses.dataclass(frozen=True)
class StallPolicy:
    """When ranks that disagree count as stalled, and when a stall stops the job.

    Attributes:
        window_s: quiet time that makes a stall (``None``: max(60 s, 20x the median step)).
        startup_s: the window before every rank finished a step (compilation, data loading).
        timeout_s: stop the job when a stall lasts this much past its window (``None``: report only).
        slow_rank: when a rank counts as the slow one, the rank the others wait for
            (:mod:`tfdevices.jobs.straggler`; on by default).
    """

    window_s: float | None = None
    startup_s: float = STARTUP_S
    timeout_s: float | None = None
    slow_rank: SlowRankPolicy = _ON

    def window(self, median_step_s: float | None, warmed_up: bool) -> float:
        """The quiet time that makes a stall now."""
        if self.window_s is not None:
            return self.window_s if warmed_up else max(self.window_s, min(self.startup_s, 5 * self.window_s))
        if not warmed_up:
            return self.startup_s
        return max(MIN_WINDOW_S, STEPS_IN_WINDOW * (median_step_s or 0.0))


def _seconds(env: Mapping[str, str], name: str) -> float | None:
    text = env.get(name)
    if text is None or not text.strip():
        return None
    value = parse_seconds(text, most=_MAX_S)
    if value is None:
        raise EnvVarError(
            f"{name}={shown(text)} is not a number of seconds in (0, {_MAX_S:g}].",
            hint=f"e.g. {name}=120; unset it for the default.",
        )
    return value


def policy_from_env(env: Mapping[str, str]) -> StallPolicy:
    """``TFDEVICES_STALL_WINDOW`` and ``TFDEVICES_STALL_TIMEOUT`` (seconds) and ``TFDEVICES_SLOW_RANK``
    (``0``/``off`` turns the slow-rank report off) as a :class:`StallPolicy`.

    Raises:
        EnvVarError: a window or timeout is not a number of seconds in (0, one week], or the slow-rank
            switch is not one of 1, on, 0, off.
    """
    return StallPolicy(
        window_s=_seconds(env, STALL_WINDOW_ENV),
        timeout_s=_seconds(env, STALL_TIMEOUT_ENV),
        slow_rank=straggler.policy_from_env(env),
    )


@dataclasses.dataclass(frozen=True)
class Stall:
    """Ranks that did not arrive at the step the others wait in.

    Attributes:
        step: the step the others wait in.
        waiting: ranks in that step.
        missing: ranks that have not begun it.
        quiet_s: how long no record changed.
        window_s: the window it passed.
        records: every rank's record.
        phase_only: every missing rank is in a callback: deliberate work, reported as a phase.
    """

    step: int
    waiting: tuple[int, ...]
    missing: tuple[int, ...]
    quiet_s: float
    window_s: float
    records: tuple[RankProgress, ...]
    phase_only: bool

    def reason(self) -> str:
        """One line: who did not arrive, where the others wait, where the missing ones are."""
        by_rank = {r.rank: r for r in self.records}
        where = "; ".join(
            f"rank {m} is {by_rank[m].where()}" if m in by_rank else f"rank {m} never reported" for m in self.missing
        )
        waiting = _ranks(self.waiting)
        if self.phase_only:  # deliberate work on some ranks: say where each is
            others = "; ".join(f"rank {w} is {by_rank[w].where()}" for w in self.waiting if w in by_rank)
            return f"{where} for {self.quiet_s:.0f} s; {others}"
        return (
            f"{_ranks(self.missing)} did not arrive at step {self.step}: {waiting} "
            f"{'have' if len(self.waiting) > 1 else 'has'} waited in it for {self.quiet_s:.0f} s; {where}"
        )

    def text(self) -> str:
        """The report: the reason, then each rank's place."""
        head = "tfdevices: " + ("slow phase: " if self.phase_only else "stall: ") + self.reason()
        lines = [head, f"  (no rank moved for {self.quiet_s:.0f} s; the stall window is {self.window_s:.0f} s)"]
        for record in self.records:
            lines.append(f"  rank {record.rank} (pid {record.pid}): {record.where()}")
        return "\n".join(lines)


def _ranks(ranks: Sequence[int]) -> str:
    """``"rank 1"``, ``"ranks 1, 3"``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def detect_stall(
    records: Sequence[RankProgress],
    *,
    now: float,
    policy: StallPolicy,
    median_step_s: float | None = None,
    expected: Sequence[int] = (),
) -> Stall | None:
    """A stall among ``records`` at ``now``, or ``None`` (pure).

    Args:
        records: every rank's record (:func:`~tfdevices.jobs.progress.read_board`).
        now: the time (``time.time()``).
        policy: the windows.
        median_step_s: the median step so far (``None``: not known yet).
        expected: ranks that should have a record (a rank with none has not begun any step).

    Returns:
        A :class:`Stall`, or ``None`` when the ranks agree, or one moved within the window.
    """
    if not records:
        return None
    front = max(r.started for r in records)
    waiting = tuple(r.rank for r in records if r.phase == "step" and r.started == front)
    seen = {r.rank for r in records}
    missing = tuple(sorted([r.rank for r in records if r.started < front] + [e for e in expected if e not in seen]))
    in_callback = tuple(r.rank for r in records if r.phase == "callback")
    if not (waiting and missing) and not (in_callback and len(in_callback) < len(records)):
        return None  # the ranks agree, and none is in a callback while the others wait: slow together
    warmed_up = all(r.done >= 1 for r in records) and len(seen) >= len(set(expected))
    window = policy.window(median_step_s, warmed_up)
    quiet = now - max(r.changed_at for r in records)
    if quiet < window:
        return None
    by_rank = {r.rank: r for r in records}
    if not (waiting and missing):  # a callback on some ranks (a chief's checkpoint), the others wait after it
        others = tuple(r.rank for r in records if r.rank not in in_callback)
        return Stall(front, others, in_callback, quiet, window, tuple(records), True)
    phase_only = all(m in by_rank and by_rank[m].phase == "callback" for m in missing)
    return Stall(front, waiting, missing, quiet, window, tuple(records), phase_only)


class StallWatch:
    """Watches a progress board: reports stalls, collects stacks, says when the job must stop.

    Args:
        directory: the job's progress directory.
        expected: the ranks whose records live there.
        policy: windows and timeout.
        say: prints a line for people (the launcher's console, or stderr).
        stacks_dir: where each rank's ``faulthandler`` writes its stack (``rank{R}.txt``).
        clock: ``time.time``-like (tests).
        signal_pid: sends a signal to a rank's process (tests).
    """

    def __init__(
        self,
        directory: str,
        expected: Sequence[int],
        policy: StallPolicy,
        say: Callable[[str], None],
        *,
        stacks_dir: str | None = None,
        clock: Callable[[], float] = time.time,
        signal_pid: Callable[[int, int], None] = os.kill,
    ) -> None:
        self.directory = directory
        self.expected = tuple(expected)
        self.policy = policy
        self.say = say
        self.stacks_dir = stacks_dir
        self._clock = clock
        self._signal = signal_pid
        self._steps: deque[float] = deque(maxlen=1000)
        self._done: dict[int, int] = {}
        self._reported: tuple[int, tuple[int, ...]] | None = None
        self._next_report = 0.0
        self._since = clock() - STALE_S
        self.stalls = 0
        self.timeline: list[tuple[float, int, int, str]] = []  # (time, rank, steps begun, phase) at each change
        self._last: dict[int, tuple[int, str]] = {}
        self.last_poll: float | None = None
        self.slow = SlowRankWatch(policy.slow_rank, say)

    def median_step_s(self) -> float | None:
        """The median step seen so far (``None`` before the first)."""
        return statistics.median(self._steps) if self._steps else None

    def poll(self) -> str | None:
        """Reads the board once; reports a stall when there is one; returns why to stop the job, or ``None``."""
        records = tuple(r for r in read_board(self.directory) if r.changed_at >= self._since)  # not a past job's
        self.last_poll = self._clock()
        for record in records:
            if record.done > self._done.get(record.rank, 0) and record.last_step_s > 0:
                self._steps.append(record.last_step_s)
            self._done[record.rank] = record.done
            if self._last.get(record.rank) != (record.started, record.phase) and len(self.timeline) < 100_000:
                self._last[record.rank] = (record.started, record.phase)
                self.timeline.append((record.changed_at, record.rank, record.started, record.phase))
        now = self._clock()
        self.slow.policy = self.policy.slow_rank
        try:
            self.slow.poll(records, now)
        except Exception as err:  # noqa: BLE001 (the slow-rank report must never stop the stall watch)
            self.slow.policy = dataclasses.replace(self.policy.slow_rank, enabled=False)
            self.say(f"tfdevices: the slow-rank report stopped: {type(err).__name__}: {err}")
        stall = detect_stall(
            records, now=now, policy=self.policy, median_step_s=self.median_step_s(), expected=self.expected
        )
        if stall is None:
            self._reported = None
            return None
        key = (stall.step, stall.missing)
        if key != self._reported:
            self._reported, self._next_report = key, stall.quiet_s
            self.stalls += 1
        if stall.quiet_s >= self._next_report:
            self._next_report = max(stall.quiet_s * 2, stall.quiet_s + stall.window_s)
            for line in stall.text().splitlines() + self._stacks(stall):
                self.say(line)
        if self.policy.timeout_s is not None and stall.quiet_s >= stall.window_s + self.policy.timeout_s:
            return f"stopping the job: {stall.reason()} (past the stall timeout, {self.policy.timeout_s:g} s)"
        return None

    def _stacks(self, stall: Stall) -> list[str]:
        """Asks every rank for its Python stack; returns lines for the missing ranks' top frames."""
        if not self.stacks_dir:
            return []
        sizes = {}
        for record in stall.records:  # where each file ends now: the dump asked for comes after
            path = os.path.join(self.stacks_dir, f"rank{record.rank}.txt")
            sizes[record.rank] = os.path.getsize(path) if os.path.exists(path) else 0
        for record in stall.records:
            try:
                self._signal(record.pid, signal.SIGUSR1)
            except OSError:
                continue
        paths = {rank: os.path.join(self.stacks_dir, f"rank{rank}.txt") for rank in stall.missing}
        deadline = time.monotonic() + 2.0  # faulthandler writes at once; the processes must be scheduled
        while time.monotonic() < deadline and not all(_grew(p, sizes.get(r, 0)) for r, p in paths.items()):
            time.sleep(0.1)
        lines = [f"  every rank's Python stack: {os.path.join(self.stacks_dir, 'rank<R>.txt')}"]
        for rank in stall.missing:
            frames = top_frames(paths[rank], sizes.get(rank, 0))
            if frames:
                lines.append(f"  rank {rank}'s stack, innermost first:")
                lines += [f"    {frame}" for frame in frames]
        return lines


def _grew(path: str, size: int) -> bool:
    try:
        return os.path.getsize(path) > size
    except OSError:
        return False


def write_timeline(
    timeline: Sequence[tuple[float, int, int, str]],
    directory: str,
    *,
    end: float | None = None,
    slow: SlowRankWatch | None = None,
) -> list[str]:
    """Writes each rank's steps over time: ``steps.json`` and, with matplotlib, ``steps.png``.

    With ``slow`` (the slow-rank watch) that saw steps split, ``steps.png`` shows where each rank spends
    its step, and ``ranks.json`` and a TensorBoard run per rank are written too
    (:func:`~tfdevices.jobs.rank_report.write_ranks`): a collective keeps every rank's step count
    together, so the rank the others wait for shows in the split, not in the steps. Without it, the
    picture is each rank's steps over time (a shaded span: a rank in a callback).
    ``end`` (a ``time.time()``): when the watch last looked, where the lines end. Returns the files written:
    none when no rank began a step.
    """
    import json  # noqa: PLC0415 (only at the end of a job)

    if not any(begun for _, _, begun, _ in timeline):
        return []  # no rank began a step (a job that never trained): there are no steps to show
    start = min(t for t, *_ in timeline)
    ranks: dict[int, list[tuple[float, int, str]]] = {}
    for t, rank, begun, phase in sorted(timeline):
        ranks.setdefault(rank, []).append((round(t - start, 3), begun, phase))
    written = [os.path.join(directory, "steps.json")]
    with open(written[0], "w", encoding="utf-8") as f:
        json.dump({"start": start, "columns": ["seconds", "steps begun", "phase"], "ranks": ranks}, f)
    if slow is not None and slow.history:  # where each rank spends its step: the picture is of that
        return written + write_ranks(slow, directory)
    try:
        import matplotlib  # noqa: PLC0415 (pictures are optional)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return written
    end = max([p[0] for points in ranks.values() for p in points] + [(end or start) - start])
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for rank, points in sorted(ranks.items()):
        (line,) = ax.step([p[0] for p in points] + [end], [p[1] for p in points] + [points[-1][1]], where="post")
        line.set_label(f"rank {rank}")
        for (t, _, phase), after in zip(points, [*points[1:], (end, 0, "")]):
            if phase == "callback":
                ax.axvspan(t, after[0], color=line.get_color(), alpha=0.2)
    ax.set(xlabel="seconds since the first record", ylabel="steps begun")
    ax.set_title("each rank's steps (shaded: in a callback)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    written.append(os.path.join(directory, "steps.png"))
    fig.savefig(written[-1], dpi=100)
    plt.close(fig)
    return written


def top_frames(path: str, offset: int = 0, limit: int = 6) -> list[str]:
    """The innermost frames of the program's own thread in the latest ``faulthandler`` dump past ``offset``.

    The program's thread is the one with a frame of the program's own code (not the standard library, an
    installed package or tfdevices): the main thread of a script, the training thread of a Ray worker.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            f.seek(offset)
            text = f.read(1 << 20)
    except OSError:
        return []
    blocks = [b for b in text.split("\n\n") if "most recent call first" in b]
    if not blocks:
        return []
    frames = [[line.strip() for line in b.splitlines() if line.strip().startswith("File ")] for b in blocks]
    own = [f for f in frames if any(_own_code(line) for line in f)]
    chosen = next((f for f in own if any("<module>" in line for line in f)), own[0] if own else frames[-1])
    return chosen[:limit]


_LIBRARY = (os.sep + "site-packages" + os.sep, os.sep + "lib" + os.sep + "python", os.sep + "tfdevices" + os.sep)


def _own_code(frame: str) -> bool:
    path = frame.split('"', 2)[1] if frame.count('"') >= 2 else ""
    return bool(path) and not any(part in path for part in _LIBRARY)


__all__ = [
    "STACKS_DIR_ENV",
    "STALL_TIMEOUT_ENV",
    "STALL_WINDOW_ENV",
    "Stall",
    "StallPolicy",
    "StallWatch",
    "detect_stall",
    "policy_from_env",
    "top_frames",
    "write_timeline",
]
