"""What each event of the profiler's host plane is to capture, by its name: a kernel, an executor step, a call.

:func:`tfdevices.verify.host.read_trace` reads only the events named here (it looks names up in
:data:`_KINDS_BY_NAME`); what a name means is worked out once per process.
"""

from __future__ import annotations

from typing import Any

from tfdevices.verify.records import TRANSFER_OPS

#: Step markers written by ``tf.profiler.experimental.Trace(NAME, step_num=N)`` (tf_keras' fit, custom loops).
_STEP_EVENTS = frozenset({"train", "test", "predict"})

(KERNEL, PROCESS, ASYNC_START, EAGER, RUN, ASYNC_DONE, DONE_CALLBACK, SCHEDULED, REGION_START, REGION_STOP) = range(10)
STEP = 10  # a step marker (tf.profiler.experimental.Trace("train", step_num=N))
_EVENT_KINDS = {
    "ExecutorState::Process": PROCESS,
    "ExecutorState::ProcessAsync::Start": ASYNC_START,
    "EagerExecute": EAGER,
    "FunctionRun": RUN,
    "ExecutorState::ProcessAsync::Done": ASYNC_DONE,
    "ExecutorDoneCallback": DONE_CALLBACK,
    "ThreadpoolListener::Record": SCHEDULED,
    "ThreadpoolListener::StartRegion": REGION_START,
    "ThreadpoolListener::StopRegion": REGION_STOP,
}
#: The thread pool's events: read only when some kernel ran outside a recorded step (see :class:`_Links`).
_LINK_KINDS = frozenset({SCHEDULED, REGION_START, REGION_STOP})


def event_kinds(plane: Any, links: bool) -> dict[int, tuple[Any, ...]]:
    """``metadata id -> (kind, ...)`` for the events capture reads; other events are skipped.

    A kernel's is ``(KERNEL, (op name, kernel), whether its stats are read)``: its name is
    "op:Kernel", its display name "Kernel"; its stats are read for transfers only (their key
    names the devices). The others' are ``(kind, name)``; the thread pool's only with ``links``.
    Most metadata are kernels, one per kernel that ran (thousands a step): what a name means
    is worked out once per process (:func:`_kind_of_name`), only its name read each capture.
    """
    kinds: dict[int, tuple[Any, ...]] = {}
    metadata = plane.event_metadata
    known = _KINDS_BY_NAME
    for key in metadata:
        meta = metadata[key]
        name = meta.name
        kind = known.get(name)
        if kind is None:
            kind = _kind_of_name(name, meta.display_name)
        if kind is not _SKIPPED_KIND and (links or kind[0] not in _LINK_KINDS):
            kinds[key] = kind
    return kinds


#: What :func:`_kind_of_name` gives an event capture does not read.
_SKIPPED_KIND: tuple[Any, ...] = (-1,)
#: ``event name -> kind`` for the names seen by this process (bounded: cleared when full).
_KINDS_BY_NAME: dict[str, tuple[Any, ...]] = {}
_KINDS_LIMIT = 1 << 18


def _kind_of_name(name: str, display_name: str) -> tuple[Any, ...]:
    """What an event of this name is to capture (see :func:`event_kinds`), remembered by name.

    A kernel's name is "op:Kernel" with the display name "Kernel" (TensorFlow's executor names
    its kernel events so); names capture skips are not remembered.
    """
    known = _EVENT_KINDS.get(name)
    op, colon, kernel = name.rpartition(":")
    if known is not None:
        kind: tuple[Any, ...] = (known, name)
    elif colon and kernel and kernel == display_name:
        kind = (KERNEL, (op, kernel), kernel in TRANSFER_OPS)
    elif name in _STEP_EVENTS:
        kind = (STEP, name)
    else:
        return _SKIPPED_KIND
    if len(_KINDS_BY_NAME) >= _KINDS_LIMIT:
        _KINDS_BY_NAME.clear()
    _KINDS_BY_NAME[name] = kind
    return kind


# ----------------------------------------------------------------------------- reading an event's stats


def _stat_value(stat: Any, names: dict[int, str]) -> Any:
    kind = stat.WhichOneof("value")
    value: Any = getattr(stat, kind) if kind else None
    return names.get(value, value) if kind == "ref_value" else value


def int_stat(event: Any, stat_id: int) -> int:
    """The integer value of the event's stat ``stat_id`` (0 when absent).

    From the last stat back: the flow ids (``_c``, ``_p``) TensorFlow writes last.
    """
    for stat in reversed(event.stats):
        if stat.metadata_id == stat_id:
            return stat.uint64_value or stat.int64_value
    return 0


def stats_by_name(event: Any, names: dict[int, str]) -> dict[str, Any]:
    """The event's stats by name; a stat whose metadata the plane does not hold is left out (a damaged or
    trimmed profile: the rest of the event is still read).
    """
    return {names[s.metadata_id]: _stat_value(s, names) for s in event.stats if s.metadata_id in names}


def context_of(event: Any, consumed: int) -> int:
    """An executor step's context: its ``_c`` stat, written last (else searched for)."""
    stats = event.stats
    last = stats[-1] if stats else None
    if last is not None and last.metadata_id == consumed:
        return int(last.uint64_value or last.int64_value)
    return int_stat(event, consumed)
