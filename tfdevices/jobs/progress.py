"""Where each rank of a job is: one small shared-memory record per rank, written at a cost users never see.

Each worker maps ``rank{R}.progress`` (:data:`RECORD_SIZE` bytes) in the job's progress directory and
updates it in place (a seqlock: an odd sequence number while writing), about a microsecond per
update: the step it began, the steps it finished, its phase (starting, building the strategy, in
a step, between steps, in a callback and which one, done), when that last changed, the last
step's duration, and what the slow-rank report needs (:mod:`tfdevices.jobs.straggler`): the last
:data:`RING` steps' time between steps, in callbacks and in the step (:class:`StepTimes`), running sums
(:class:`Totals`), and the time its steps waited in the collectives and for their input, as last read
(:class:`Waits`, :meth:`ProgressWriter.record_waits`). Whoever watches the job (the launcher, or rank 0
where there is none) reads every record without locks (:func:`read_records`); a record's bytes travel to
another machine's watcher as they are (:func:`parse_record`). TensorFlow-free.

The directory is ``TFDEVICES_PROGRESS_DIR`` (``tfdevices launch`` sets it per attempt); under
``srun`` it is derived from the step (:func:`progress_dir`). Ranks on other machines write on theirs.

>>> import tempfile
>>> directory = tempfile.mkdtemp()
>>> writer = ProgressWriter(directory, rank=1)
>>> writer.begin_step(); writer.end_step(0.25); writer.enter("callback", "ModelCheckpoint.on_epoch_end")
>>> [(r.rank, r.started, r.done, r.phase, r.detail) for r in read_records(directory)]
[(1, 1, 1, 'callback', 'ModelCheckpoint.on_epoch_end')]
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from tfdevices.core.errors import EnvVarError
from tfdevices.jobs.kubernetes import POD_CLUSTER, pod_cluster
from tfdevices.jobs.tfconfig import read_tf_config

#: Where the records of a job's ranks live (a directory every local rank can write).
PROGRESS_DIR_ENV = "TFDEVICES_PROGRESS_DIR"
PHASES = ("starting", "strategy", "step", "between", "callback", "done")
RECORD_SIZE = 512
_HEAD = struct.Struct("<QIIqqBxxxxxxxdd")  # seq, pid, rank, started, done, phase, changed_at, last_step_s
_SEQ = struct.Struct("<Q")
_DETAIL = 64
#: Steps whose split each record keeps (the latest, oldest overwritten).
RING = 16
#: The first steps leave the ring and the sums alone: the first call traces and compiles the step.
WARMUP_STEPS = 2
# at 128: steps timed, sums of between/step/callback seconds; the waits: step read at, then sums since the rank's
# first step of its steps' seconds, their wait in collectives, their wait for input, and what the reads cost
_TIMES = struct.Struct("<qdddqdddd")
_TIMES_AT = 128
_RING = struct.Struct(f"<{3 * RING}f")  # (between, in a callback, in the step) per slot: slot = step's index % RING
_RING_AT = _TIMES_AT + _TIMES.size
_SLOT = struct.Struct("<fff")
_NAME = re.compile(r"rank(\d{1,7})\.progress")


class StepTimes(NamedTuple):
    """One timed step of a rank: the time from the previous step's end to its beginning outside ``fit``'s named
    callbacks (``between_s``), inside them (``callback_s``), and its own wall time (``step_s``).
    """

    between_s: float
    callback_s: float
    step_s: float


class Totals(NamedTuple):
    """A rank's sums over its timed steps (every step past the first :data:`WARMUP_STEPS`)."""

    between_s: float
    step_s: float
    callback_s: float


class Waits(NamedTuple):
    """What a rank's steps waited for, as read after step ``step``: sums over every step up to it.

    Attributes:
        step: the step after which they were read.
        step_s: the steps' own wall time in all.
        wait_s: the time they spent in the collectives (the ranks that arrive first wait longest).
        input_s: the time they waited for their input inside the step (``fit`` reads its batch there).
        cost_s: what the reads cost this rank in all.
    """

    step: int
    step_s: float
    wait_s: float
    input_s: float
    cost_s: float


_NO_TOTALS = Totals(0.0, 0.0, 0.0)


@dataclasses.dataclass(frozen=True)
class RankProgress:
    """One rank's record, as read.

    Attributes:
        rank: the rank.
        pid: its process (on the machine whose directory this is).
        started: steps it began.
        done: steps it finished.
        phase: one of :data:`PHASES`.
        detail: what the phase is about (``"ModelCheckpoint.on_epoch_end"``), or ``""``.
        changed_at: when the record last changed (``time.time()`` of its machine).
        last_step_s: the last finished step's duration (0 before the first).
        recent: the latest timed steps (up to :data:`RING`, oldest first). The first :data:`WARMUP_STEPS`
            steps are not timed.
        timed: steps timed so far.
        totals: the sums over the timed steps.
        waits: the last reading of its steps' waits; ``None`` before one.
        node: the machine it runs on, as the watch names it (``""``: the watch's own).
    """

    rank: int
    pid: int
    started: int
    done: int
    phase: str
    detail: str
    changed_at: float
    last_step_s: float
    recent: tuple[StepTimes, ...] = ()
    timed: int = 0
    totals: Totals = _NO_TOTALS
    waits: Waits | None = None
    node: str = ""

    def where(self) -> str:
        """``"in step 5"``, ``"after step 4"``, ``"in ModelCheckpoint.on_epoch_end (after step 40)"``."""
        if self.phase == "step":
            return f"in step {self.started}"
        if self.phase == "between":
            return f"after step {self.done}" if self.done else "before its first step"
        if self.phase == "callback":
            return f"in {self.detail or 'a callback'} (after step {self.done})"
        if self.phase == "strategy":
            return "building its strategy"
        return {"starting": "starting", "done": f"done (after step {self.done})"}.get(self.phase, self.phase)


class ProgressWriter:
    """This rank's record: mapped once, updated in place.

    Args:
        directory: the job's progress directory (created if missing).
        rank: this process's rank.
        clock: ``time.time``-like (tests).
    """

    def __init__(self, directory: str, rank: int, clock: Callable[[], float] = time.time) -> None:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = record_path(directory, rank)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, RECORD_SIZE)
            self._map = mmap.mmap(fd, RECORD_SIZE)
        finally:
            os.close(fd)
        self.path = path
        self.rank = rank
        self._pid = os.getpid()
        self._clock = clock
        self._seq = 0
        self.started = self.done = 0
        self._phase = 0
        self._detail = b""
        self._step_began = 0.0
        self._last_step_s = 0.0
        self._last_end = 0.0  # when the last step ended (0: none yet)
        self._between = 0.0  # the running step's time before it began (see RankProgress.recent)
        self._callback_began = 0.0
        self._callback_s = 0.0  # time in named callbacks since the last step ended
        self._timed = 0
        self._sums = [0.0, 0.0, 0.0]
        self._all_steps_s = 0.0  # every finished step's duration, summed (the waits' step time)
        self._waits = Waits(0, 0.0, 0.0, 0.0, 0.0)
        self._slot: tuple[int, float, float, float] | None = None  # a ring slot to write: (offset, its 3 times)
        self._in_callbacks = 0.0  # the running step's time in named callbacks before it began
        self._lock = threading.Lock()  # Keras 3 may run batch-end callbacks on another thread
        self.in_fit = False  # fit's callbacks mark its steps (fit_progress); step functions leave them
        self._write(detail=True)

    @property
    def phase(self) -> str:
        """The phase now (one of :data:`PHASES`)."""
        return PHASES[self._phase]

    @property
    def last_step_s(self) -> float:
        """The last finished step's duration (0 before the first)."""
        return self._last_step_s

    @property
    def last_cycle_s(self) -> float:
        """The last timed step's whole duration: between steps, in callbacks and in the step."""
        return self._between + self._in_callbacks + self._last_step_s

    @property
    def detail(self) -> str:
        """What the phase is about."""
        return self._detail.decode("utf-8", "replace")

    def _write(self, detail: bool = False) -> None:
        """Writes the record: the sequence number odd while the fields change, even after (a seqlock)."""
        self._seq += 2
        _HEAD.pack_into(
            self._map,
            0,
            self._seq - 1,
            self._pid,
            self.rank,
            self.started,
            self.done,
            self._phase,
            self._clock(),
            self._last_step_s,
        )
        if detail:
            self._map[_HEAD.size : _HEAD.size + _DETAIL] = self._detail.ljust(_DETAIL, b"\0")
        _TIMES.pack_into(self._map, _TIMES_AT, self._timed, *self._sums, *self._waits)
        if self._slot is not None:
            _SLOT.pack_into(self._map, *self._slot)
            self._slot = None
        _SEQ.pack_into(self._map, 0, self._seq)

    def enter(self, phase: str, detail: str = "") -> None:
        """Sets the phase (one of :data:`PHASES`) and what it is about."""
        with self._lock:
            new = PHASES.index(phase)
            if new == 4 and self._phase != 4:  # a named callback begins: its time is not "between steps"
                self._callback_began = self._clock()
            elif new != 4 and self._phase == 4 and self._callback_began:
                spent = max(0.0, self._clock() - self._callback_began)
                self._callback_s += spent
                self._sums[2] += spent
                self._callback_began = 0.0
            self._phase = new
            self._detail = detail.encode("utf-8", "replace")[:_DETAIL]
            self._write(detail=True)

    def begin_step(self) -> None:
        """A step begins (its number: :attr:`started`)."""
        with self._lock:
            self.started += 1
            cleared, self._phase, self._detail = bool(self._detail), 2, b""
            self._step_began = self._clock()
            ended = self._last_end and self.done == self.started - 1  # not pipelined behind a late end
            self._between = max(0.0, self._step_began - self._last_end - self._callback_s) if ended else 0.0
            self._in_callbacks = self._callback_s if ended else 0.0
            self._callback_s = 0.0
            self._write(detail=cleared)

    def end_step(self, seconds: float | None = None, *, step: int | None = None) -> None:
        """Step ``step`` (default: the one that began last) has finished; a late end leaves a newer step be."""
        with self._lock:
            step = self.started if step is None else min(step, self.started)
            if step <= self.done:
                return
            self.done = step
            self._last_end = self._clock()
            self._last_step_s = seconds if seconds is not None else self._last_end - self._step_began
            self._all_steps_s += self._last_step_s
            if step > WARMUP_STEPS and step == self.started:
                self._time_step(self._between, self._in_callbacks, self._last_step_s)
            cleared = False
            if step == self.started:
                cleared, self._phase, self._detail = bool(self._detail), 3, b""
            self._write(detail=cleared)

    def _time_step(self, between: float, callbacks: float, seconds: float) -> None:
        """Puts a finished step in the ring (written with the record, inside the seqlock)."""
        self._slot = (_RING_AT + _SLOT.size * (self._timed % RING), between, callbacks, seconds)
        self._timed += 1
        self._sums[0] += between
        self._sums[1] += seconds

    @property
    def steps_s(self) -> float:
        """Every finished step's duration, summed."""
        return self._all_steps_s

    def record_waits(self, step: int, step_s: float, wait_s: float, input_s: float, cost_s: float) -> None:
        """What the steps waited for, as read after step ``step``: sums over the same steps of their own time, their
        wait in the collectives and for their input, and what the reads cost (:class:`Waits`).
        """
        with self._lock:
            self._waits = Waits(step, step_s, wait_s, input_s, cost_s)
            self._write()

    def close(self) -> None:
        """Says ``done`` and unmaps the record (the file stays for the reader)."""
        if not self._map.closed:
            self.enter("done")
            self._map.close()


def read_record(path: str, node: str = "") -> RankProgress | None:
    """One rank's record; ``None`` when it is not one (a foreign file, or one rewritten on every try)."""
    raw = record_bytes(path)
    return None if raw is None else parse_record(raw, node)


def parse_record(raw: bytes, node: str = "") -> RankProgress | None:
    """A record from its :data:`RECORD_SIZE` bytes (read whole, as :func:`read_record` does, or sent from another
    machine); ``None`` when they are not one: another size, a record being written, an unknown phase.
    """
    if len(raw) != RECORD_SIZE:
        return None
    seq, pid, rank, started, done, phase, changed, last = _HEAD.unpack_from(raw)
    if seq % 2 or phase >= len(PHASES) or rank < 0:
        return None
    detail = raw[_HEAD.size : _HEAD.size + _DETAIL].rstrip(b"\0").decode("utf-8", "replace")
    timed, between, stepped, callback, *waits = _TIMES.unpack_from(raw, _TIMES_AT)
    slots = _RING.unpack_from(raw, _RING_AT)
    kept = min(max(timed, 0), RING)
    order = [(timed - kept + i) % RING for i in range(kept)]
    recent = tuple(StepTimes(*slots[3 * i : 3 * i + 3]) for i in order)
    return RankProgress(
        rank,
        pid,
        started,
        done,
        PHASES[phase],
        detail,
        changed,
        last,
        recent,
        timed,
        Totals(between, stepped, callback),
        Waits(*waits) if waits[0] > 0 else None,
        node,
    )


def record_bytes(path: str) -> bytes | None:
    """A record's bytes as they are now, read whole while no write was under way (what :func:`read_record` parses,
    and what another machine's watcher is sent); ``None`` when the file is no record or is rewritten on every try.
    """
    for _ in range(5):
        try:
            with open(path, "rb") as f:
                raw = f.read(RECORD_SIZE + 1)
                f.seek(0)
                again = f.read(8)
        except OSError:
            return None
        if len(raw) != RECORD_SIZE:
            return None
        if raw[:8] == again and _SEQ.unpack_from(raw)[0] % 2 == 0:  # not being written, nor rewritten while read
            return raw
        time.sleep(0.001)
    return None


def record_path(directory: str, rank: int) -> str:
    """Where rank ``rank`` keeps its record in ``directory``."""
    return os.path.join(directory, f"rank{rank}.progress")


def writes_record(pid: int, path: str) -> bool:
    """Whether process ``pid`` is the rank that writes the record at ``path`` (it maps the file), on this machine.

    A directory derived from a SLURM step or a ``TF_CONFIG`` cluster outlives its job: a record left by an earlier
    run names a process that is gone, or a pid the system has since given to another program, which a signal
    meant for a rank must not reach. Where the system has no ``/proc`` it cannot tell: a live pid counts.

    >>> import tempfile
    >>> writer = ProgressWriter(tempfile.mkdtemp(), rank=0)
    >>> writes_record(os.getpid(), writer.path), writes_record(os.getpid(), writer.path + ".other")
    (True, False)
    """
    if pid <= 0:
        return False
    if not os.path.isdir("/proc/self"):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    ends = (f" {path}\n", f" {os.path.realpath(path)}\n")
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            # a TensorFlow process maps some thousands of files
            return any(line.endswith(ends) for line in itertools.islice(f, 200_000))
    except OSError:  # gone, or another user's
        return False


def record_paths(directory: str) -> list[str]:
    """The paths of the records in ``directory`` (at most 100,000 names looked at)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [os.path.join(directory, name) for name in names[:100_000] if _NAME.fullmatch(name)]


def read_records(directory: str, node: str = "") -> tuple[RankProgress, ...]:
    """Every rank's record in ``directory``, by rank (unreadable ones left out), each with ``node``."""
    found = [record for path in record_paths(directory) if (record := read_record(path, node)) is not None]
    return tuple(sorted(found, key=lambda r: r.rank))


def progress_dir(env: Mapping[str, str]) -> str | None:
    """The job's progress directory: ``TFDEVICES_PROGRESS_DIR``, else one per SLURM step, else one per
    ``TF_CONFIG`` cluster (Ray Train and other orchestrators write the same cluster in every rank's; a pod's
    job, the cluster worked out from its manifest); ``None`` elsewhere.

    Raises:
        EnvVarError: ``TFDEVICES_PROGRESS_DIR`` is not an absolute path.
        TfConfigError: ``TF_CONFIG`` is set but invalid.
        LaunchError: ``TFDEVICES_POD_CLUSTER`` is set but the pod's job cannot be worked out.

    >>> progress_dir({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0"})
    '/tmp/tfdevices-progress/slurm-42.0'
    >>> progress_dir({"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, '
    ...                            '"task": {"type": "worker", "index": 1}}'})
    '/tmp/tfdevices-progress/tfconfig-3951fef07571f633'
    """
    given = env.get(PROGRESS_DIR_ENV)
    if given is not None:
        if not given.startswith("/") or len(given) > 4096 or "\0" in given:
            raise EnvVarError(
                f"{PROGRESS_DIR_ENV} is not an absolute path.",
                hint="tfdevices launch sets it; unset it, or name a directory every local rank can write.",
            )
        return given
    job, step = env.get("SLURM_JOB_ID", ""), env.get("SLURM_STEP_ID", "")
    if job.isascii() and job.isdigit() and step.isascii() and step.isdigit() and len(job + step) < 40:
        return f"/tmp/tfdevices-progress/slurm-{job}.{step}"
    config = read_tf_config(env)
    if config is None and POD_CLUSTER in env:  # a pod's job (tfdevices.jobs.kubernetes): TF_CONFIG worked out
        pod = pod_cluster(env)
        config = pod.tf_config() if pod is not None else None
    if config is not None:
        cluster = json.dumps({k: list(v) for k, v in config.cluster.items()}, sort_keys=True)
        return f"/tmp/tfdevices-progress/tfconfig-{hashlib.sha256(cluster.encode()).hexdigest()[:16]}"
    return None
