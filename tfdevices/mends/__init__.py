"""Every change tfdevices makes to code it does not own, in one place.

Each module here is one mend (:class:`~tfdevices.mends.base.Mend`): what it changes and why, how it
detects that it applies, how to turn it off, and what it did.

====================  ==========================================================================
``runtime_start``     TensorFlow's ``Context.ensure_initialized``: notes the line that started the
                      runtime, for "Visible devices cannot be modified after being initialized"
``keras_fit``         Keras 3's TensorFlow trainer: ``fit`` under ``MultiWorkerMirroredStrategy``
                      (keras-team/keras#20585)
``uneven_batch``      Keras 3's TensorFlow trainer: ``fit`` under a mirrored strategy with a batch
                      the replicas do not divide (keras-team/keras#19246)
``exit_barrier``      ``atexit`` and ``sys.excepthook``: the workers of a job leave together
``fork_sockets``      ``os.register_at_fork``: a forked child lets go of its parent's GPU names
``loopback``          the ``bind`` GOT entries of TensorFlow's libraries: a launched worker's
                      server listens on the address ``tfdevices launch --listen`` asks
                      (127.0.0.1 on one machine), not every interface
``step_progress``     TensorFlow's ``Function.__call__``: a custom loop's step says which step a
                      rank is in (the stall detector)
``fit_progress``      Keras' ``CallbackList``: ``fit`` says which step and which callback
``collective_wait``   TensorFlow's ``CollectiveReplicaLauncher``: each step's collectives, and its
                      wait for its input, measure how long the rank waited (the slow-rank report)
``fit_end``           Keras' ``fit``: when it raises, a PlacementLogger lets go of what it held
                      (Keras calls no ``on_train_end`` then)
``stack_dumps``       the ``SIGUSR1`` handler (``faulthandler``): a stalled rank shows its frames
``at_exit``           ``atexit``: tfdevices' own clean-ups (a PlacementLogger's pending writes,
                      captures' scratch directories) run at exit
``quiet_import``      file descriptor 2 (stderr) while TensorFlow is first imported: its C++ start-up
                      lines dropped when ``TF_CPP_MIN_LOG_LEVEL`` hides INFO
``autograph_skip``    AutoGraph's ``CONVERSION_RULES``: tfdevices' own functions are never converted
                      (AutoGraph logs what it cannot convert: ``os.environ`` is the environment)
``capture_calls``     TensorFlow's ``AtomicFunction.call_flat`` and ``func_graph_from_py_func``, while a
                      capture runs only: each called function's graph and each trace
====================  ==========================================================================

Each finds first whether what it fixes is here, then says whether the release in use is one it
was checked against (:mod:`tfdevices.mends.base`); the Keras mends share their look at Keras'
trainer (:mod:`tfdevices.mends.keras_trainer`, a probe that starts no TensorFlow runtime).

Turn mends off with ``TFDEVICES_MENDS`` (a comma list of names, or ``all``), from Python with
:func:`turn_off`, or for a launched job with ``tfdevices launch --mends-off``. :func:`applied`
lists each mend and what it did in this process; ``tfdevices doctor`` prints it.

>>> [status.name for status in applied()][:5]
['runtime_start', 'keras_fit', 'uneven_batch', 'exit_barrier', 'fork_sockets']

No TensorFlow import here: each mend imports what it changes when it applies.
"""

from __future__ import annotations

from tfdevices.mends import (
    at_exit,
    capture_calls,
    collective_wait,
    exit_barrier,
    fit_end,
    fit_progress,
    fork_sockets,
    keras_fit,
    loopback,
    runtime_start,
    stack_dumps,
    step_progress,
    tf_import,
    uneven_batch,
)
from tfdevices.mends.base import MENDS_ENV, Mend, MendStatus, names, turn_off, turned_off

#: Every mend, in the order listed.
MENDS = (
    runtime_start.MEND,
    keras_fit.MEND,
    uneven_batch.MEND,
    exit_barrier.MEND,
    fork_sockets.MEND,
    loopback.MEND,
    step_progress.MEND,
    fit_progress.MEND,
    collective_wait.MEND,
    fit_end.MEND,
    stack_dumps.MEND,
    at_exit.MEND,
    tf_import.QUIET,
    tf_import.AUTOGRAPH,
    capture_calls.MEND,
)


def applied() -> tuple[MendStatus, ...]:
    """Every mend and what it did in this process: applied, not needed, skipped (and why), off or not reached."""
    return tuple(mend.status() for mend in MENDS)


def table() -> str:
    """:func:`applied` as lines for people."""
    return "\n".join(status.line() for status in applied())


__all__ = ["applied", "table", "turn_off", "turned_off", "names", "MendStatus", "Mend", "MENDS", "MENDS_ENV"]
