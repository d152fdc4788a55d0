"""The job's one watch loop: run by the launcher, or by rank 0 where no launcher watches.

About once a second a look reads this machine's ranks' records from the progress directory and, where the job spans
machines, the others' through the records' channel (:class:`~tfdevices.jobs.record_channel.Channel`: the launchers'
connections, :mod:`tfdevices.jobs.node_exchange`, or TensorFlow's coordination service,
:mod:`tfdevices.jobs.coordination_keys`); the job's :class:`~tfdevices.jobs.watch.JobWatch` turns them into a
snapshot, this machine's rows left in ``job.json`` for its workers' TensorBoard scalars; its lines, and the
channel's "not heard" lines, are said (:func:`tfdevices.jobs.console.say`: the launcher's console, or rank 0's
stderr). A stuck rank's frames are asked for on this machine (``SIGUSR1``, :mod:`tfdevices.jobs.stacks`) and through
the channel at once; a stall past the stall timeout is said, the channel told to stop every rank, and
:data:`STALL_STATUS` returned. At the job's end, one last look and the job's summary. :class:`WatchLoop` is the one
place either watcher does these; the launcher (:mod:`tfdevices.jobs.launcher`) calls :meth:`WatchLoop.look` from its
wait for the workers, rank 0 (:mod:`tfdevices.jobs.rank_hooks`) runs :meth:`WatchLoop.run` on a thread.
TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from tfdevices.jobs.console import say
from tfdevices.jobs.progress import RankProgress, read_records, record_path, writes_record
from tfdevices.jobs.record_channel import Channel
from tfdevices.jobs.stacks import ask_stacks
from tfdevices.jobs.stall import Stall, StallPolicy
from tfdevices.jobs.watch import JobSnapshot, JobSummary, JobWatch, write_snapshot

#: A job stopped for a stall by its watch ends with this status.
STALL_STATUS = 3


@dataclasses.dataclass(frozen=True)
class WatchPlace:
    """Where a watch loop runs: this machine's records and stacks, and how it speaks.

    Attributes:
        directory: the job's progress directory on this machine (its ranks' records; ``job.json`` goes there).
        stacks: where this machine's ranks write their stacks.
        node: this machine's name in the job's lines (``""``: a job on one machine).
        world_size: the job's size: a record of a rank past it (an earlier, larger job's) is not read; ``None``:
            every record is this job's (a directory of the launcher's own).
        only_running: signal a record's process only when it writes that record still (not a pid an earlier run
            left in a directory that outlives its job).
        prefix: before the stop's and the summary's lines (rank 0's, on a worker's stderr: ``"tfdevices: "``).
        stacks_where: where every rank's stack is written, said with the frames.
    """

    directory: str
    stacks: str
    node: str = ""
    world_size: int | None = None
    only_running: bool = False
    prefix: str = ""
    stacks_where: str = ""


class WatchLoop:
    """The job's one watch loop: its :class:`~tfdevices.jobs.watch.JobWatch`, its looks, what they say, its stop.

    Args:
        place: where it runs.
        policy: the stall windows and timeout, and the slow-rank policy (or a function that returns them).
        expected: the ranks that should report (``()``: those that do).
        channel: the other machines' ranks (``None``: a job on one machine).
        say: says a line (:func:`tfdevices.jobs.console.say`; the launcher's: its console's ``say``).
    """

    def __init__(
        self,
        place: WatchPlace,
        policy: StallPolicy | Callable[[], StallPolicy],
        expected: Sequence[int] = (),
        channel: Channel | None = None,
        say: Callable[[str], None] = say,
    ) -> None:
        self.place = place
        self.channel = channel
        self.say = say
        self.watch = JobWatch(expected, policy, frames=self.frames, stacks_where=place.stacks_where)
        self.local: tuple[int, ...] = ()  # the ranks whose records the last read found on this machine

    def records(self) -> list[RankProgress]:
        """Every rank's record this watch sees: this machine's, and the other machines' through the channel."""
        local = list(read_records(self.place.directory, self.place.node))
        if self.place.world_size is not None:  # a directory derived from the step or the cluster may hold an
            local = [r for r in local if r.rank < self.place.world_size]  # earlier, larger job's records
        self.local = tuple(r.rank for r in local)
        return local if self.channel is None else [*local, *self.channel.records(self.local)]

    def signalled(self, records: Iterable[RankProgress]) -> list[RankProgress]:
        """The records a signal may be sent on (with :attr:`WatchPlace.only_running`: those whose writers run)."""
        if not self.place.only_running:
            return list(records)
        return [r for r in records if writes_record(r.pid, record_path(self.place.directory, r.rank))]

    def _remote(self, rank: int) -> bool:
        return self.channel is not None and rank in self.channel.ranks and rank not in self.local

    def frames(self, stall: Stall) -> dict[int, list[str]]:
        """The stuck ranks' top frames: this machine's asked with a signal, the others' through the channel, at
        once.
        """
        remote = [m for m in stall.missing if self._remote(m)]
        found: dict[int, list[str]] = {}
        ask = None
        if self.channel is not None and remote:
            channel = self.channel
            ask = threading.Thread(target=lambda: found.update(channel.frames(remote)), daemon=True)
            ask.start()
        local = self.signalled(r for r in stall.records if not self._remote(r.rank))
        found.update(ask_stacks(local, self.place.stacks, [m for m in stall.missing if m not in remote]))
        if ask is not None:
            ask.join()
        return found

    def look(self, speak: bool = True) -> int | None:
        """One look: the snapshot left for the workers, its lines said (``speak``: this machine's watch speaks for
        the job); a stall past the timeout stops the job: :data:`STALL_STATUS`, else ``None``.
        """
        snapshot: JobSnapshot = self.watch.poll(self.records())
        write_snapshot(snapshot, self.place.directory, frozenset(self.local))  # read by this machine's workers
        if not speak:
            return None
        for line in [*snapshot.said, *(self.channel.unheard(self.local) if self.channel is not None else ())]:
            self.say(line)
        if snapshot.stop is None:
            return None
        self.say(self.place.prefix + snapshot.stop)
        if self.channel is not None:
            try:  # every rank that hears it stops too
                self.channel.stop(STALL_STATUS)
            except Exception:  # noqa: BLE001 (the channel is gone: the other ranks see this one go)
                pass
        return STALL_STATUS

    def run(self, every_s: float, on_stop: Callable[[int], None]) -> None:
        """Looks every ``every_s`` seconds until a stall stops the job (``on_stop(status)``) or a look fails (said:
        the watch must never take the process down).
        """
        while True:
            time.sleep(every_s)
            try:
                status = self.look()
            except Exception as err:  # noqa: BLE001 (the watch must never take the worker down)
                self.say(f"tfdevices: the job's watch stopped: {type(err).__name__}: {err}")
                return
            if status is not None:
                on_stop(status)
                return

    def end(self, last_look: bool = True, wait_s: float = 0.0) -> JobSummary:
        """The job's end: the other machines' last records waited for (up to ``wait_s``: they come once their
        ranks end), one last look (``last_look``), and the job's summary, its table said.
        """
        if self.channel is not None and wait_s > 0:
            channel, deadline = self.channel, time.monotonic() + wait_s
            while time.monotonic() < deadline and not all(r.phase == "done" for r in channel.records(())):
                time.sleep(0.1)
        if last_look:
            self.watch.poll(self.records())
        summary = self.watch.summary()
        for line in summary.lines():
            self.say(self.place.prefix + line)
        return summary
