"""Where each rank of a job is: one small shared-memory record per rank, written at a cost users never see.

Each worker maps ``rank{R}.progress`` (:data:`RECORD_SIZE` bytes) in the job's progress directory and
updates it in place (a seqlock: an odd sequence number while writing), about a microsecond per
update: the step it began, the steps it finished, its phase (starting, building the strategy, in
a step, between steps, in a callback and which one, done), when that last changed, and the last
step's duration, and what a straggler detector needs (:mod:`tfdevices.jobs.straggler`): the last
:data:`RING` steps' time between steps and in the step, running sums, and the last sampled step's split
(:meth:`ProgressWriter.sample`). Whoever watches the job (the launcher, or rank 0 where there is none) reads every
record without locks (:func:`read_board`). TensorFlow-free.

The directory is ``TFDEVICES_PROGRESS_DIR`` (``tfdevices launch`` sets it per attempt); under
``srun`` it is derived from the step (:func:`progress_dir`). Ranks on other machines write on theirs.

>>> import tempfile
>>> board = tempfile.mkdtemp()
>>> writer = ProgressWriter(board, rank=1)
>>> writer.begin_step(); writer.end_step(0.25); writer.enter("callback", "ModelCheckpoint.on_epoch_end")
>>> [(r.rank, r.started, r.done, r.phase, r.detail) for r in read_board(board)]
[(1, 1, 1, 'callback', 'ModelCheckpoint.on_epoch_end')]
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Mapping

from tfdevices.core.errors import EnvVarError
from tfdevices.core.units import shown
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
# at 128: steps timed, sums of between/step/callback seconds; the sample: step, its seconds, wait, input, cost
_TIMES = struct.Struct("<qdddqdddd")
_TIMES_AT = 128
_RING = struct.Struct(f"<{3 * RING}f")  # (between, in a callback, in the step) per slot: slot = step's index % RING
_RING_AT = _TIMES_AT + _TIMES.size
_SLOT = struct.Struct("<fff")
_NAME = re.compile(r"rank(\d{1,7})\.progress")


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
        changed_at: when the record last changed (``time.time()``).
        last_step_s: the last finished step's duration (0 before the first).
        recent: the latest timed steps (up to :data:`RING`, oldest first), each
            ``(between_s, callback_s, step_s)``: the time from the previous step's end to its beginning
            outside named callbacks, inside them (``fit``'s hooks), and its own wall time. The first
            :data:`WARMUP_STEPS` steps are not timed.
        timed: steps timed so far.
        totals: the sums over the timed steps: ``(between_s, step_s, callback_s)``.
        sample: the last sampled step, ``(step, step_s, wait_s, input_s, cost_s)``: its wall time, its
            time waiting in collectives and in the input pipeline's ops (the profiler's), what the
            sample cost; ``None`` before one.
    """

    rank: int
    pid: int
    started: int
    done: int
    phase: str
    detail: str
    changed_at: float
    last_step_s: float
    recent: tuple[tuple[float, float, float], ...] = ()
    timed: int = 0
    totals: tuple[float, float, float] = (0.0, 0.0, 0.0)
    sample: tuple[int, float, float, float, float] | None = None

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
        path = os.path.join(directory, f"rank{rank}.progress")
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
        self._sample: tuple[int, float, float, float, float] = (0, 0.0, 0.0, 0.0, 0.0)
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
        _TIMES.pack_into(self._map, _TIMES_AT, self._timed, *self._sums, *self._sample)
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

    def sample(self, step: int, seconds: float, wait_s: float, input_s: float, cost_s: float) -> None:
        """Step ``step`` was sampled: its wall time, its time waiting in collectives and in input ops, the cost."""
        with self._lock:
            self._sample = (step, seconds, wait_s, input_s, cost_s)
            self._write()

    def close(self) -> None:
        """Says ``done`` and unmaps the record (the file stays for the reader)."""
        if not self._map.closed:
            self.enter("done")
            self._map.close()


def read_record(path: str) -> RankProgress | None:
    """One rank's record; ``None`` when it is not one (a foreign file, or one rewritten on every try)."""
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
        seq, pid, rank, started, done, phase, changed, last = _HEAD.unpack_from(raw)
        if seq % 2 == 0 and raw[:8] == again:  # not being written, and not rewritten while read
            if phase >= len(PHASES):
                return None
            detail = raw[_HEAD.size : _HEAD.size + _DETAIL].rstrip(b"\0").decode("utf-8", "replace")
            timed, between, stepped, callback, *sample = _TIMES.unpack_from(raw, _TIMES_AT)
            slots = _RING.unpack_from(raw, _RING_AT)
            kept = min(max(timed, 0), RING)
            order = [(timed - kept + i) % RING for i in range(kept)]
            recent = tuple(slots[3 * i : 3 * i + 3] for i in order)
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
                (between, stepped, callback),
                tuple(sample) if sample[0] > 0 else None,
            )
        time.sleep(0.001)
    return None


def read_board(directory: str) -> tuple[RankProgress, ...]:
    """Every rank's record in ``directory``, by rank (unreadable ones left out)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return ()
    found = []
    for name in names[:100_000]:
        if _NAME.fullmatch(name):
            record = read_record(os.path.join(directory, name))
            if record is not None:
                found.append(record)
    return tuple(sorted(found, key=lambda r: r.rank))


def progress_dir(env: Mapping[str, str]) -> str | None:
    """The job's progress directory: ``TFDEVICES_PROGRESS_DIR``, else one per SLURM step, else one per
    ``TF_CONFIG`` cluster (Ray Train and other orchestrators write the same cluster in every rank's);
    ``None`` elsewhere.

    Raises:
        EnvVarError: ``TFDEVICES_PROGRESS_DIR`` is not an absolute path.
        TfConfigError: ``TF_CONFIG`` is set but invalid.

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
                f"{PROGRESS_DIR_ENV}={shown(given)} is not an absolute path.",
                hint="tfdevices launch sets it; unset it, or name a directory every local rank can write.",
            )
        return given
    job, step = env.get("SLURM_JOB_ID", ""), env.get("SLURM_STEP_ID", "")
    if job.isascii() and job.isdigit() and step.isascii() and step.isdigit() and len(job + step) < 40:
        return f"/tmp/tfdevices-progress/slurm-{job}.{step}"
    config = read_tf_config(env)
    if config is not None:
        cluster = json.dumps({k: list(v) for k, v in config.cluster.items()}, sort_keys=True)
        return f"/tmp/tfdevices-progress/tfconfig-{hashlib.sha256(cluster.encode()).hexdigest()[:16]}"
    return None


__all__ = [
    "PHASES",
    "PROGRESS_DIR_ENV",
    "RECORD_SIZE",
    "RING",
    "WARMUP_STEPS",
    "ProgressWriter",
    "RankProgress",
    "progress_dir",
    "read_board",
    "read_record",
]
