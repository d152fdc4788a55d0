"""A stuck rank, named: ranks that disagree about the next step while none moves.

A collective waits for every rank, for ever (TensorFlow's gRPC collectives: no error, no output).
From the ranks' progress records (:mod:`tfdevices.jobs.progress`) a *stall* is when some rank waits
in step N (it began it: its collectives need everyone), another has not begun step N, and no record
changed for the stall window: by default the larger of 60 s and 20x the median step so far, and
:data:`STARTUP_S` before every rank finished a step (first-step compilation). Ranks that are slow
together never disagree; a slow input pipeline still moves. A rank that is late because it is in a
callback (a chief-only checkpoint) is reported as a phase, not as stuck.

:func:`detect_stall` is pure; the job's watch (:mod:`tfdevices.jobs.watch`) says each stall once and
again at growing intervals, with the stuck rank's top frames (:mod:`tfdevices.jobs.stacks`), and after
``timeout_s`` more says the job should stop. TensorFlow-free.

>>> from tfdevices.jobs.progress import RankProgress
>>> waiting = RankProgress(0, 10, 5, 4, "step", "", 100.0, 0.1)
>>> stuck = RankProgress(1, 11, 4, 4, "between", "", 99.0, 0.1)
>>> stall = detect_stall([waiting, stuck], now=200.0, policy=StallPolicy(window_s=60))
>>> stall.reason()
'rank 1 did not arrive at step 5: rank 0 has waited in it for 100 s; rank 1 is after step 4'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tfdevices.core.errors import EnvVarError
from tfdevices.core.units import parse_seconds
from tfdevices.jobs import straggler
from tfdevices.jobs.progress import RankProgress
from tfdevices.jobs.straggler import LISTED, SlowRankPolicy, on_node, ranks_text

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
#: Over this many ranks the stall report groups the ranks by where they are and lists only the missing ones.
REPORT_RANKS = 16
#: The most places (``in step 21``) a stall's line and report give before the rest (``elsewhere``).
PLACES = 4
#: Where a rank with no record is.
_NEVER = "never reported"


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
            f"{name} is not a number of seconds in (0, {_MAX_S:g}].",
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
        where = _places(self.missing, by_rank, nodes=True)
        waiting = ranks_text(self.waiting)
        if self.phase_only:  # deliberate work on some ranks: say where each is
            others = _places([w for w in self.waiting if w in by_rank], by_rank, nodes=False)
            return f"{where} for {self.quiet_s:.0f} s; {others}"
        missing = self._named(self.missing[0]) if len(self.missing) == 1 else ranks_text(self.missing)
        return (
            f"{missing} did not arrive at step {self.step}: {waiting} "
            f"{'have' if len(self.waiting) > 1 else 'has'} waited in it for {self.quiet_s:.0f} s; {where}"
        )

    def _named(self, rank: int) -> str:
        """``"rank 1"``, or ``"rank 1 on node gpu07"`` where the records name their machines."""
        return on_node(rank, next((r.node for r in self.records if r.rank == rank), ""))

    def text(self) -> str:
        """The report: the reason, then each rank's place; over :data:`REPORT_RANKS` ranks, the ranks in each
        place, then the place of each missing rank (at most :data:`REPORT_RANKS` of them).
        """
        head = "tfdevices: " + ("slow phase: " if self.phase_only else "stall: ") + self.reason()
        lines = [head, f"  (no rank moved for {self.quiet_s:.0f} s; the stall window is {self.window_s:.0f} s)"]
        if len(self.records) > REPORT_RANKS:
            return "\n".join(lines + self._grouped())
        for record in self.records:
            lines.append(_line(record))
        return "\n".join(lines)

    def _grouped(self) -> list[str]:
        """The report's lines for many ranks: each place with its ranks, then the missing ranks one by one."""
        by_rank = {r.rank: r for r in self.records}
        everyone = [r.rank for r in self.records] + [m for m in self.missing if m not in by_rank]
        groups, rest = _by_place(everyone, by_rank)
        lines = [f"  {place}: {ranks_text(ranks)}{_on_nodes(ranks, by_rank)}" for place, ranks in groups]
        if rest:
            lines.append(f"  elsewhere: {ranks_text(rest)}")
        late = [m for m in self.missing if m in by_rank]
        lines += [_line(by_rank[m]) for m in late[:REPORT_RANKS]]
        if late[REPORT_RANKS:]:
            lines.append(f"  and {ranks_text(late[REPORT_RANKS:])}")
        return lines


def _line(record: RankProgress) -> str:
    """A rank's line in the report: ``"  rank 1 on node gpu07 (pid 11): after step 4"``."""
    return f"  {on_node(record.rank, record.node)} (pid {record.pid}): {record.where()}"


def _by_place(
    ranks: Sequence[int], by_rank: Mapping[int, RankProgress]
) -> tuple[list[tuple[str, list[int]]], list[int]]:
    """``ranks`` by where each is (:meth:`RankProgress.where`; a rank with no record never reported), the place
    with the most ranks first, at most :data:`PLACES` places; and the ranks of the other places (sorted).
    """
    groups: dict[str, list[int]] = {}
    for rank in ranks:
        groups.setdefault(by_rank[rank].where() if rank in by_rank else _NEVER, []).append(rank)
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), min(item[1])))
    if len(ordered) <= PLACES + 1:  # a place more is said, not put "elsewhere"
        return ordered, []
    return ordered[:PLACES], sorted(r for _, group in ordered[PLACES:] for r in group)


def _on_nodes(ranks: Sequence[int], by_rank: Mapping[int, RankProgress]) -> str:
    """``" on node gpu07"``, ``" on nodes a, b"``, ``" on 512 nodes"``; ``""`` where the records name no node."""
    nodes = list(dict.fromkeys(by_rank[r].node for r in ranks if r in by_rank and by_rank[r].node))
    if not nodes:
        return ""
    if len(nodes) == 1:
        return f" on node {nodes[0]}"
    return f" on nodes {', '.join(nodes)}" if len(nodes) <= 3 else f" on {len(nodes):,} nodes"


def _places(ranks: Sequence[int], by_rank: Mapping[int, RankProgress], *, nodes: bool) -> str:
    """Where each of ``ranks`` is, for a line: one by one up to :data:`LISTED` ranks (with its node when
    ``nodes``), else the ranks in each place, at most :data:`PLACES` places.
    """
    if len(ranks) <= LISTED:
        named = {r: on_node(r, by_rank[r].node) if nodes and r in by_rank else f"rank {r}" for r in ranks}
        return "; ".join(
            f"{named[r]} is {by_rank[r].where()}" if r in by_rank else f"{named[r]} {_NEVER}" for r in ranks
        )
    groups, rest = _by_place(ranks, by_rank)
    parts = []
    for place, group in groups:
        verb = "" if place == _NEVER else ("is " if len(group) == 1 else "are ")
        parts.append(f"{ranks_text(group)}{_on_nodes(group, by_rank) if nodes else ''} {verb}{place}")
    if rest:
        parts.append(f"{ranks_text(rest)} are elsewhere")
    return "; ".join(parts)


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
        records: every rank's record (:func:`~tfdevices.jobs.progress.read_records`).
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
