"""What ``tfdevices launch`` does with its workers' output (TensorFlow-free).

Each worker's byte stream is cut into :class:`Record` s by :class:`Splitter`: a line
ends at ``\\n``; a piece that ends at ``\\r`` is a progress update (Keras' progress
bar, ``tqdm``), shown as progress, not glued into one long line. :class:`Console`
decides what reaches the launcher's console:

* progress of rank 0 only (every rank's with ``all_ranks``): redrawn in place on a
  terminal, its final state only in a pipe or a file; Keras' ``Epoch N/M`` header
  above a bar counts as progress;
* a warning (``WARNING:...``, ``...Warning: ...`` and its indented source line) that
  another rank already printed identically once: the same warning on every rank
  prints once (other lines are every rank's own, and all shown);
* TensorFlow's C++ start-up log lines (``I0000 ... cuda_platform.cc:52] ...``) hidden,
  and counted, unless ``tf_logs``;
* with ``ranks`` set, only those ranks' lines (``--log-dir`` without ``--tee``: rank 0).

The per-rank logs (``--log-dir``) get every line of their rank, progress by its final state.

tfdevices speaks through :mod:`logging`, under the logger ``tfdevices``: :func:`say` logs the jobs' lines at INFO
to the caller's module's logger (``tfdevices.jobs.rendezvous``, ...), and where they land is a handler's choice.
While a launch runs, :func:`on_console` installs a :class:`ConsoleHandler` (``[launcher] ...`` on its console).
Where the application configured no handler of its own, :class:`StderrFallback` writes each line alone on stderr,
as :data:`logging.lastResort` would (it shows the jobs' INFO lines too); where it did (``logging.basicConfig``,
absl, pytest), the fallback steps aside: no line twice. In a worker ``tfdevices launch`` started,
:func:`worker_lines` keeps them plain on its stderr, which the launcher reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import re
import sys
import threading
from collections.abc import Collection, Iterator
from typing import IO

LINE, PROGRESS, PROGRESS_END = "line", "progress", "progress_end"
TF_LOG = re.compile(r"^[IWE]\d{4} [\d:.]+\s+\d+ [\w.\-]+:\d+\] ")
WARNING = re.compile(r"^WARNING\b|\b\w*Warning: ")
EPOCH = re.compile(r"^Epoch \d+/\d+$")  # Keras' header above each epoch's progress bar
TF_LOG_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
#: The lines an absl status adds below a TensorFlow log line (tf-nightly's failed cuInit on a machine without a
#: driver): ``=== Source Location Trace: ===``, then ``external/xla/.../cuda_status.cc:50``, then a blank line.
TF_LOG_TRACE = re.compile(r"^(=== Source Location Trace: ===|[\w./\-]+\.(cc|h):\d+|)\s*$")
MAX_SEEN = 20_000
_CLEAR = "\r\x1b[K"


@dataclasses.dataclass(frozen=True)
class Record:
    """One piece of a worker's output.

    Attributes:
        text: the text, without its line end or backspaces.
        kind: ``"line"``; ``"progress"`` (ended by ``\\r``: to be overwritten by the next);
            ``"progress_end"`` (a line that ends a run of progress updates: the bar's final state).
    """

    text: str
    kind: str = LINE


class Splitter:
    """Cuts one worker's output into records (bytes in any chunking give the same records).

    >>> s = Splitter()
    >>> s.feed(b"Epoch 1/2\\n\\r1/3 =\\b\\b\\r2/3 ==\\r3/3 ===\\nnext")
    [Record(text='Epoch 1/2', kind='line'), Record(text='1/3 =', kind='progress'), \
Record(text='2/3 ==', kind='progress'), Record(text='3/3 ===', kind='progress_end')]
    >>> s.close()
    [Record(text='next', kind='line')]
    """

    def __init__(self, max_line: int = 1 << 16) -> None:
        self._pending = b""
        self._in_progress = False
        self._max_line = max_line

    def feed(self, data: bytes) -> list[Record]:
        """The records completed by ``data``."""
        data = self._pending + data
        records: list[Record] = []
        start = 0
        for match in re.finditer(rb"[\r\n]", data):
            records += self._record(data[start : match.start()], match.group() == b"\r")
            start = match.end()
        self._pending = data[start:]
        if len(self._pending) > self._max_line:  # a line without end: cut it, memory stays bounded
            records += self._record(self._pending, False)
            self._pending = b""
        return records

    def close(self) -> list[Record]:
        """The unfinished last piece, if any."""
        pending, self._pending = self._pending, b""
        return self._record(pending, False) if pending else []

    def _record(self, raw: bytes, transient: bool) -> list[Record]:
        text = raw.decode("utf-8", "replace").replace("\b", "")
        if transient:
            if not text.strip():
                return []
            self._in_progress = True
            return [Record(text, PROGRESS)]
        kind = PROGRESS_END if self._in_progress else LINE
        self._in_progress = False
        return [Record(text, kind)]


class Console:
    """The launcher's console: one place all ranks' records and the launcher's own lines go through.

    Args:
        out: the stream (the launcher's stdout).
        tty: whether ``out`` is a terminal (progress redrawn in place).
        ranks: the ranks whose lines are shown (``None``: all).
        progress_ranks: the ranks whose progress is shown.
        dedupe: print a warning that another rank printed identically only once.
        tf_logs: show TensorFlow's C++ log lines.
    """

    def __init__(
        self,
        out: IO[str],
        *,
        tty: bool = False,
        ranks: Collection[int] | None = None,
        progress_ranks: Collection[int] | None = (0,),
        dedupe: bool = True,
        tf_logs: bool = False,
    ) -> None:
        self.out = out
        self.tty = tty
        self.ranks = None if ranks is None else frozenset(ranks)
        self.progress_ranks = None if progress_ranks is None else frozenset(progress_ranks)
        self.dedupe = dedupe
        self.tf_logs = tf_logs
        self.hidden_tf_logs = 0
        self.closed = False
        self._lock = threading.Lock()
        self._open: str | None = None  # the progress line shown in place (terminal)
        self._seen: dict[str, dict[int, int]] = {}
        self._in_warning: set[int] = set()  # ranks whose last line was a warning (its source line follows)
        self._in_tf_log: set[int] = set()  # ranks whose last line was a hidden TensorFlow log line

    def say(self, text: str) -> None:
        """A line of the launcher's own (always shown)."""
        with self._lock:
            self._line(f"[launcher] {text}")

    def echo(self, text: str) -> None:
        """A line shown as it is (always)."""
        with self._lock:
            self._line(text)

    def show(self, rank: int, record: Record) -> None:
        """Shows one worker record, if it is to be shown."""
        with self._lock:
            if not self._wanted(rank, record):
                return
            text = f"[{rank}] {record.text}"
            if record.kind == PROGRESS:
                self._open = text
                self._write(_CLEAR + text)
            elif record.kind == PROGRESS_END and self.tty and self._open is not None:
                self._open = None
                self._write(_CLEAR + text + "\n")
            else:
                self._line(text)

    def finish(self) -> None:
        """Ends an open progress line."""
        with self._lock:
            if self._open is not None:
                self._open = None
                self._write("\n")

    def _wanted(self, rank: int, record: Record) -> bool:
        if not self.tf_logs and (TF_LOG.match(record.text) or record.text == TF_LOG_BANNER):
            self.hidden_tf_logs += 1
            self._in_tf_log.add(rank)
            return False
        if rank in self._in_tf_log and record.kind == LINE and TF_LOG_TRACE.match(record.text):
            return False  # the hidden line's own trace
        self._in_tf_log.discard(rank)
        progress_rank = self.progress_ranks is None or rank in self.progress_ranks
        if record.kind != LINE:
            return progress_rank and (record.kind == PROGRESS_END or self.tty)
        if EPOCH.match(record.text) and not progress_rank:
            return False
        if self.ranks is not None and rank not in self.ranks:
            return False
        return not self.dedupe or not self._is_warning(rank, record.text) or self._first_time(rank, record.text)

    def _is_warning(self, rank: int, text: str) -> bool:
        continued = rank in self._in_warning and text[:1].isspace()
        if WARNING.search(text) or continued:
            self._in_warning.add(rank)
            return True
        self._in_warning.discard(rank)
        return False

    def _first_time(self, rank: int, text: str) -> bool:
        """Whether no other rank printed this warning as often as ``rank`` now does."""
        if len(self._seen) > MAX_SEEN:
            self._seen.clear()
        counts = self._seen.setdefault(text, {})
        counts[rank] = counts.get(rank, 0) + 1
        return all(n < counts[rank] for r, n in counts.items() if r != rank)

    def _line(self, text: str) -> None:
        if self._open is not None and self.tty:  # keep the progress line last: clear, print, redraw
            self._write(_CLEAR + text + "\n" + self._open)
        else:
            self._write(text + "\n")

    def _write(self, text: str) -> None:
        if self.closed:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except OSError as err:  # the reader went away (``| head``): stop writing, the launcher stops the job
            if not isinstance(err, BrokenPipeError) and err.errno not in (errno.EPIPE, errno.EINVAL):
                raise
            self.closed = True
        except ValueError:  # the stream was closed
            self.closed = True


# --------------------------------------------------------------------------- the one reporting path: logging

#: The jobs' logger: :func:`say`'s lines, each under its caller's module (``tfdevices.jobs.metrics``, ...).
LOGGER = logging.getLogger("tfdevices.jobs")
#: The lowest level :class:`StderrFallback` shows, by logger (and the loggers below it): the jobs' INFO lines,
#: which tfdevices always showed; every other logger of tfdevices from WARNING, as :data:`logging.lastResort`.
FALLBACK_LEVELS = {LOGGER.name: logging.INFO}
_CONSOLES: list[ConsoleHandler] = []  # the handlers of the consoles of the launches this process runs, latest last
_CONSOLES_LOCK = threading.Lock()


class ConsoleHandler(logging.Handler):
    """Writes each record of the jobs' loggers to a launch's console as ``[launcher] MESSAGE``
    (:meth:`Console.say`). :func:`on_console` installs it on :data:`LOGGER` while the launch runs.

    Args:
        console: the launch's console.
    """

    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        """Says the record's message (and its exception, if any) on the console."""
        try:
            self.console.say(self.format(record))
        except Exception:  # noqa: BLE001 (logging's contract: a handler that fails says so, never raises)
            self.handleError(record)


class StderrFallback(logging.Handler):
    """tfdevices' lines on stderr, each as its message alone, where nothing else handles them: no handler of the
    application's (or a console's) on the record's way up the loggers, as :data:`logging.lastResort` decides. It
    shows a record from its logger's level in :data:`FALLBACK_LEVELS` (WARNING for the rest). Installed once on the
    ``tfdevices`` logger; it writes to ``sys.stderr`` as it is at each line (pytest's capture, a redirect).
    """

    tfdevices_fallback = True  # how another copy of this module (a reload) knows one, and steps aside for none

    def emit(self, record: logging.LogRecord) -> None:
        """Writes the record, unless it is below its level here or another handler has it."""
        if record.levelno < fallback_level(record.name) or handled_elsewhere(record):
            return
        stream = sys.stderr
        if stream is None:  # pythonw, a closed stderr: nowhere to write
            return
        try:
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 (a reader gone, a closed stream: logging's contract, never raise)
            self.handleError(record)


def fallback_level(name: str) -> int:
    """The lowest level :class:`StderrFallback` shows from the logger ``name`` (pure).

    >>> fallback_level("tfdevices.jobs.rendezvous") == logging.INFO, fallback_level("tfdevices.mends.loopback")
    (True, 30)
    """
    for prefix, level in FALLBACK_LEVELS.items():
        if name == prefix or name.startswith(prefix + "."):
            return level
    return logging.WARNING


def handled_elsewhere(record: logging.LogRecord) -> bool:
    """Whether a handler other than the fallback gets ``record``: one on its logger or above, as far as the
    loggers propagate (the root's included; Python's own test for its last resort).
    """
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        if any(not getattr(h, "tfdevices_fallback", False) for h in logger.handlers):
            return True
        logger = logger.parent if logger.propagate else None
    return False


def _install_fallback() -> None:
    """The ``tfdevices`` logger: the fallback on it, once, and INFO where nothing set its level (the root's
    WARNING would drop the jobs' lines before any handler saw them).
    """
    top = logging.getLogger("tfdevices")
    if not any(getattr(h, "tfdevices_fallback", False) for h in top.handlers):
        top.addHandler(StderrFallback())
    if top.level == logging.NOTSET:
        top.setLevel(logging.INFO)


_install_fallback()


def worker_lines() -> None:
    """In a worker that ``tfdevices launch`` started: tfdevices' lines go to the worker's stderr as they are
    (the launcher reads them: the listen check's mark, the rank's notes), whatever handlers the program gives
    the root logger (``basicConfig``, absl's, whose ``I1202 ...]`` lines the console hides as TensorFlow's): the
    ``tfdevices`` logger stops propagating to the root, and the fallback writes them. A handler the program adds
    to ``tfdevices`` itself still gets them; levels apply as everywhere.
    """
    top = logging.getLogger("tfdevices")
    top.propagate = False


@contextlib.contextmanager
def on_console(console: Console) -> Iterator[Console]:
    """While a launch runs: what :func:`say` says goes to ``console`` (the latest of nested launches), through a
    :class:`ConsoleHandler` on :data:`LOGGER`.
    """
    handler = ConsoleHandler(console)
    with _CONSOLES_LOCK:
        if _CONSOLES:
            LOGGER.removeHandler(_CONSOLES[-1])
        _CONSOLES.append(handler)
        LOGGER.addHandler(handler)
    try:
        yield console
    finally:
        with _CONSOLES_LOCK:
            latest = _CONSOLES[-1] is handler
            _CONSOLES.remove(handler)
            if latest:
                LOGGER.removeHandler(handler)
                if _CONSOLES:
                    LOGGER.addHandler(_CONSOLES[-1])


def say(text: str) -> None:
    """A line of tfdevices' own for people: logged at INFO to the caller's module's logger under
    :data:`LOGGER` (``tfdevices.jobs`` for a caller outside it). Its handlers place it: the launcher's console
    (``[launcher] ...``) where this process runs a launch, the application's handlers where it has some, else
    stderr (a worker, rank 0's watch). The one path the jobs' messages take.
    """
    name = sys._getframe(1).f_globals.get("__name__", "")  # the caller's module
    logger = logging.getLogger(name if name.startswith(LOGGER.name + ".") else LOGGER.name)
    logger.info(text, stacklevel=2)
