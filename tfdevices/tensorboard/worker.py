"""A bounded background worker: reading profiles, building reports and writing TensorBoard off the training thread.

:class:`Worker` runs jobs one at a time, in order, on one daemon thread. Its queue is
bounded: a training thread that submits faster than the worker writes waits for a
free place (nothing is dropped). :meth:`Worker.flush` waits until every job submitted
has run; at interpreter exit every worker still holding jobs is flushed. A job's error
is kept (``errors``) and handed to whoever calls :meth:`Worker.take_errors` next, never
dropped.

>>> worker = Worker("example")
>>> done = []
>>> worker.submit(lambda: done.append(1))
>>> worker.flush()
>>> done, worker.take_errors()
([1], [])
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from tfdevices.mends.at_exit import call_at_exit

_workers: weakref.WeakSet[Worker] = weakref.WeakSet()
_FLUSH_ASKED: list[bool] = []
_IDLE_S = 5.0  # an idle worker's thread ends after this


class Worker:
    """Runs jobs in order on one background thread, with at most ``bound`` waiting.

    Args:
        name: the thread's name (``tfdevices-NAME``).
        bound: how many jobs may wait; :meth:`submit` blocks while that many do.
    """

    def __init__(self, name: str, bound: int = 4) -> None:
        self.name = name
        self._jobs: queue.Queue[Callable[[], Any] | None] = queue.Queue(maxsize=bound)
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if not _FLUSH_ASKED:  # the first worker of the process asks for the flush at exit (mend at_exit)
            _FLUSH_ASKED.append(True)
            call_at_exit(_flush_all)
        _workers.add(self)

    def submit(self, job: Callable[[], Any]) -> None:
        """Queues ``job`` (waits while the queue is full); starts the thread when none runs."""
        self._jobs.put(job)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"tfdevices-{self.name}", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=_IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():  # idle: the thread ends; the next submit starts another
                        self._thread = None
                        return
                continue
            if job is None:  # close(): the thread ends here, unless jobs came in since
                self._jobs.task_done()
                with self._lock:
                    if self._jobs.empty():
                        self._thread = None
                        return
                continue
            try:
                job()
            except BaseException as err:  # noqa: BLE001 (kept and handed to the caller: never lost)
                with self._lock:
                    self._errors.append(err)
            finally:
                self._jobs.task_done()

    def flush(self) -> None:
        """Waits until every job submitted so far has run."""
        self._jobs.join()

    def close(self) -> None:
        """Runs every job submitted so far, then ends the thread now (a later :meth:`submit` starts another)."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        self._jobs.put(None)
        thread.join()

    def take_errors(self) -> list[BaseException]:
        """The errors of jobs that failed since the last call (then forgotten)."""
        with self._lock:
            errors, self._errors = self._errors, []
        return errors


def _flush_all() -> None:
    """At exit, every worker finishes what it was given; errors nobody took are logged, not lost."""
    for worker in list(_workers):
        worker.flush()
        for err in worker.take_errors():
            logging.getLogger(__name__).error(
                "tfdevices: a background %s job failed: %s: %s", worker.name, type(err).__name__, err
            )
