"""Placement in TensorBoard: write a :class:`~tfdevices.verify.PlacementReport`, read it back.

:func:`write_placement` writes, into a normal TensorBoard run (a log directory):

* each captured function's graph (the ops the program wrote) merged into one
  GraphDef, every node carrying the device it really ran on, so the Graphs
  dashboard's "color by device" shows where ops ran;
* text summaries: the per-device table and transfer list (``NAME/report``) and
  the report as JSON (``NAME/json``, what :func:`read_placement` reads);
* scalars: ops per device (``NAME/ops/CPU:1``), busy microseconds per device
  (``NAME/busy_us/CPU:1``), transfers and bytes per device
  pair (``NAME/transfers/CPU:0 -> CPU:1``, ``NAME/transfer_bytes/...``).

:func:`read_placement` reads the report back with TensorBoard's own event loading,
without a server; ``tfdevices placement LOGDIR`` (:func:`format_placement`) prints it.

>>> import tempfile, tensorflow as tf
>>> from tfdevices.verify import capture
>>> from tfdevices.tensorboard import read_placement, write_placement
>>> report = capture(lambda: tf.reduce_sum(tf.ones([3])))
>>> logdir = write_placement(report, tempfile.mkdtemp())
>>> read_placement(logdir).op_counts == report.op_counts
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import re
import socket
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from tfdevices.core.errors import InputError
from tfdevices.core.paths import check_directory
from tfdevices.core.tf_door import import_tf
from tfdevices.tensorboard.events import EVENTS, run_strings
from tfdevices.tensorboard.metadata import summary_metadata
from tfdevices.verify import PlacementReport, read_profile
from tfdevices.verify.profiles import find_profiles
from tfdevices.verify.records import gc_paused

_EVENTS = EVENTS
_FILES = itertools.count()  # event files this process wrote: zero-padded, their names sort in the order they were made


def merged_graph_def(report: PlacementReport) -> Any:
    """One GraphDef of every captured function's graph, each call under its own namespace.

    Node names repeat across calls, so each call's nodes sit under a namespace
    named after what was called and its place in the step: ``train_step_000/<name>``
    for a ``tf.function`` named ``train_step``, ``eager_001/<name>`` for an eager op.
    Every node carries the device it ran on (from the report's ops: a fused kernel's ops
    all carry its device); a node that did not run as written (folded away by
    TensorFlow's optimizer, or plumbing) has no device.
    An eager op is one node under its own namespace.

    Args:
        report: a report from :func:`tfdevices.verify.capture`.

    Returns:
        A ``tensorboard.compat.proto.graph_pb2.GraphDef``.
    """
    from tensorboard.compat.proto import graph_pb2  # noqa: PLC0415 (lazy tensorboard)

    ran_on = {(f"call_{op.call:03d}", op.name): _tf_device(op.device) for op in report.ops}
    merged = graph_pb2.GraphDef()
    for call, source in report.graphs:
        serialized = source if isinstance(source, bytes) else source.as_graph_def().SerializeToString()
        graph = graph_pb2.GraphDef.FromString(serialized)
        if not merged.HasField("versions"):
            merged.versions.CopyFrom(graph.versions)
        namespace = _namespace(getattr(source, "name", None), call)
        for node in graph.node:
            node.device = ran_on.get((call, node.name), "")
            node.name = f"{namespace}/{node.name}"
            inputs = [
                f"^{namespace}/{source[1:]}" if source.startswith("^") else f"{namespace}/{source}"
                for source in node.input
            ]
            del node.input[:]
            node.input.extend(inputs)
        merged.node.extend(graph.node)
    with_graph = {call for call, _ in report.graphs}
    for op in report.ops:  # eager ops have no graph: one node each, under its own call's namespace
        call = f"call_{op.call:03d}"
        if call not in with_graph:
            merged.node.add(name=f"{_namespace('eager', call)}/{op.name}", op=op.type, device=_tf_device(op.device))
    return merged


def _namespace(function: object, call: str) -> str:
    """``train_step_003`` for call 3 of a function named ``train_step``; ``call_003`` when it has no name."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", function).strip("_") if isinstance(function, str) else ""
    return f"{name or 'call'}_{call.rpartition('_')[2]}"


def _tf_device(device: str) -> str:
    """A report's device name as TensorFlow writes it.

    ``"CPU:1"`` -> ``"/job:localhost/replica:0/task:0/device:CPU:1"``.
    """
    task, _, short = device.rpartition("/")
    job, _, index = task.partition(":") if task else ("localhost", "", "0")
    return f"/job:{job}/replica:0/task:{index or 0}/device:{short}"


def write_placement(
    report: PlacementReport,
    logdir: str | os.PathLike[str],
    step: int = 0,
    name: str = "placement",
    *,
    graphs: bool = True,
) -> str:
    """Writes a placement report into the TensorBoard run ``logdir``.

    Args:
        report: a report from :func:`tfdevices.verify.capture`.
        logdir: the run's directory (created if missing).
        step: the step the summaries are recorded at.
        name: the prefix of every summary tag.
        graphs: whether to write the captured functions' graphs (the Graphs dashboard); a
            logger that captures the same functions again writes them once.

    Returns:
        ``logdir`` as a string.

    Raises:
        InputError: ``report`` is not a PlacementReport, ``name`` is empty, ``step`` is negative,
            or ``logdir`` is a file or lies under one.
    """
    if not isinstance(report, PlacementReport):
        raise InputError(
            f"write_placement(report=...): expected a PlacementReport, got {type(report).__name__}.",
            hint="pass what tfdevices.verify.capture(fn, ...) returns.",
        )
    if not name or not isinstance(name, str):
        raise InputError(
            f"write_placement(name={name!r}): expected a non-empty tag prefix.", hint="e.g. name='placement'."
        )
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InputError(f"write_placement(step={step!r}): expected a step >= 0.", hint="e.g. step=0.")
    logdir = check_directory(logdir, what="write_placement(logdir=...)")
    with summary_writer(logdir) as writer:
        write_summaries(writer, report, step, name, graphs=graphs)
    return logdir


class EventWriter:
    """Summaries written as TensorBoard events, with no TensorFlow op: one event file.

    Each summary is the protocol buffer ``tf.summary`` would write (a float32 scalar
    tensor, a string tensor with its plugin's metadata, the graph), built in Python and
    appended as a record by TensorFlow's ``TFRecordWriter`` (an event file is a file of
    such records): no eager op runs per summary, which is most of what a capture's
    summaries cost through ``tf.summary``.
    """

    def __init__(self, logdir: str) -> None:
        from tensorboard.compat.proto import event_pb2  # noqa: PLC0415 (lazy tensorboard)

        tf = import_tf()
        tf.io.gfile.makedirs(logdir)
        stamp = f"{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILES):09d}"
        name = f"events.out.tfevents.{stamp}.tfdevices"
        self.path = os.path.join(logdir, name)
        self._file = tf.io.TFRecordWriter(self.path)
        self._file.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def _add(self, step: int, value: Any) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: PLC0415 (lazy tensorboard)

        self._file.write(
            event_pb2.Event(
                wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])
            ).SerializeToString()
        )

    def scalar(self, tag: str, value: float, step: int) -> None:
        """What ``tf.summary.scalar(tag, value, step=step)`` writes."""
        from tensorboard.compat.proto import summary_pb2, tensor_pb2, types_pb2  # noqa: PLC0415
        from tensorboard.plugins.scalar import metadata  # noqa: PLC0415

        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[float(value)])
        tensor.tensor_shape.SetInParent()
        self._add(
            step, summary_pb2.Summary.Value(tag=tag, metadata=metadata.create_summary_metadata("", ""), tensor=tensor)
        )

    def text(self, tag: str, text: str, step: int) -> None:
        """What ``tf.summary.text(tag, text, step=step)`` writes."""
        from tensorboard.plugins.text import metadata  # noqa: PLC0415 (lazy tensorboard)

        self.write(tag, text, step, metadata.create_summary_metadata("", ""))

    def write(self, tag: str, text: str, step: int, summary_metadata: Any) -> None:
        """What ``tf.summary.write(tag, text, step=step, metadata=summary_metadata)`` writes for a string."""
        from tensorboard.compat.proto import summary_pb2, tensor_pb2, types_pb2  # noqa: PLC0415

        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode("utf-8")])
        tensor.tensor_shape.SetInParent()
        self._add(step, summary_pb2.Summary.Value(tag=tag, metadata=summary_metadata, tensor=tensor))

    def graph(self, graph_def: Any) -> None:
        """What ``tf.summary.graph(graph_def)`` writes: the GraphDef, serialized, in an event of its own."""
        from tensorboard.compat.proto import event_pb2  # noqa: PLC0415 (lazy tensorboard)

        self._file.write(
            event_pb2.Event(wall_time=time.time(), step=0, graph_def=graph_def.SerializeToString()).SerializeToString()
        )

    def flush(self) -> None:
        """Writes what was given so far to the file (readers see it)."""
        self._file.flush()

    def close(self) -> None:
        """Flushes and closes the file."""
        self._file.close()


@contextlib.contextmanager
def summary_writer(logdir: str) -> Iterator[EventWriter]:
    """One :class:`EventWriter` for ``logdir``; what it was given is on disk when the block ends, even if it raised."""
    writer = EventWriter(logdir)
    try:
        with gc_paused():
            yield writer
    finally:
        writer.close()


def write_summaries(writer: EventWriter, report: PlacementReport, step: int, name: str, *, graphs: bool = True) -> None:
    """Writes the report's summaries with ``writer`` (see :func:`write_placement`)."""
    if graphs and report.graphs:
        writer.graph(merged_graph_def(report))
    writer.text(f"{name}/report", f"{_code(report.summary())}\n\n{report.to_markdown()}", step)
    # the data, for the Placement tab and read_placement; out of the Text tab, where the report leads
    writer.write(f"{name}/json", report.to_json(), step, summary_metadata())
    for device, count in report.op_counts.items():
        writer.scalar(f"{name}/ops/{device}", count, step)
    for device, busy in report.busy_us.items():
        writer.scalar(f"{name}/busy_us/{device}", busy, step)
    pairs: dict[str, list[int]] = {}
    for t in report.transfers:
        entry = pairs.setdefault(f"{t.src} -> {t.dst}", [0, 0])
        entry[0] += 1
        entry[1] += t.bytes or 0
    for pair, (count, size) in sorted(pairs.items()):
        writer.scalar(f"{name}/transfers/{pair}", count, step)
        writer.scalar(f"{name}/transfer_bytes/{pair}", size, step)
    writer.scalar(f"{name}/collectives", len(report.collectives), step)


def _code(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _event_dirs(logdir: str) -> list[str]:
    return sorted(root for root, _, files in os.walk(logdir) if any(_EVENTS in f for f in files))


def read_placement(logdir: str | os.PathLike[str], name: str = "placement") -> PlacementReport:
    """Reads the latest placement report stored under ``logdir`` (searched recursively).

    Reads the event files with TensorBoard's protos (:mod:`tfdevices.tensorboard.events`): no
    server, and no TensorFlow, is needed.

    Args:
        logdir: a log directory holding a run written by :func:`write_placement`, or runs below it.
        name: the tag prefix it was written with.

    Returns:
        The report (without its graphs), from the run and step written last.

    Raises:
        InputError: ``logdir`` does not exist, holds no event files, or none with a placement.
    """
    logdir = os.fspath(logdir)
    dirs = _run_dirs(logdir)
    found: list[_Stored] = []
    tags: set[str] = set()
    for run in dirs:
        values = run_strings(run)  # TensorBoard's own protos: TensorFlow is not imported (architecture, rule 9)
        tags.update(values)
        events = values.get(f"{name}/json")
        if events:
            wall_time, step, text = events[-1]
            found.append(_Stored(wall_time, step, text, os.path.relpath(run, logdir), len(events)))
    if not found:
        raise _no_placement(logdir, name, len(dirs), tags)
    latest = max(found)
    report = PlacementReport.from_json(latest.text)
    if len(found) == 1 and latest.steps == 1:
        return report
    others = sorted(f.run for f in found if f.run != latest.run)
    where = (
        f"stored in run {latest.run!r} at step {latest.step}: the latest of {latest.steps} step(s) there"
        + (f" and of {len(found)} runs (the others: {_first(others, 5)})" if others else "")
        + "; pass a run's directory to read it, or open the Placement tab to pick a step"
    )
    return dataclasses.replace(report, notes=(where, *report.notes))


class _Stored(NamedTuple):
    """The latest placement stored in one run (internal); ordered by when it was written, then its step."""

    wall_time: float
    step: int
    text: str  # the report's JSON
    run: str  # the run's directory, relative to the log directory read
    steps: int  # the steps stored in the run


def _first(names: list[str], count: int) -> str:
    return ", ".join(names[:count]) + (", ..." if len(names) > count else "")


def _run_dirs(logdir: str) -> list[str]:
    """The directories under ``logdir`` that hold event files; a directory that is missing or holds none raises."""
    if not os.path.isdir(logdir):
        raise InputError(
            f"log directory {logdir!r} does not exist.",
            hint="pass the directory given to write_placement or PlacementLogger.",
        )
    dirs = _event_dirs(logdir)
    if not dirs:
        listing = ", ".join(sorted(os.listdir(logdir))[:10]) or "nothing"
        raise InputError(
            f"log directory {logdir!r} holds no TensorBoard event files; it contains: {listing}.",
            hint="pass the directory given to write_placement or PlacementLogger.",
        )
    return dirs


def _no_placement(logdir: str, name: str, runs: int, tags: set[str]) -> InputError:
    """The error for a log directory whose runs hold no placement: what they hold, and why it may be so."""
    shown = ", ".join(sorted(tags)[:10]) or "no tensor or text summaries"
    # a PlacementLogger that captured no step: it says so in NAME/status (and logs memory where there is any)
    logger_ran = f"{name}/status" in tags or any(t.startswith(f"{name}/memory/") for t in tags)
    return InputError(
        f"log directory {logdir!r} holds {runs} run(s) but no placement summary '{name}/json'; its tags: {shown}.",
        hint="a PlacementLogger ran here but captured no step: its at_step never came in that run "
        "(training ran fewer steps); pass a step the run reaches, e.g. PlacementLogger(logdir, at_step=1)."
        if logger_ran
        else "write one with tfdevices.tensorboard.write_placement or the PlacementLogger callback "
        "(or pass the name= it was written with).",
    )


def load_placement(path: str | os.PathLike[str], name: str = "placement", *, profile: bool = False) -> PlacementReport:
    """What ``tfdevices placement PATH`` reads: a stored placement, or a profile TensorFlow wrote.

    ``PATH`` may be a log directory, one of its event files, or a profile (``*.xplane.pb``).
    A directory's placement summaries come first; a directory with none, but with
    profiles (Keras' ``TensorBoard(profile_batch=...)``), is read with
    :func:`tfdevices.verify.read_profile`, as it is with ``profile=True``.

    Raises:
        InputError: nothing readable is stored there.
    """
    text = os.fspath(path)
    if profile or text.endswith(".xplane.pb"):
        return read_profile(text)
    if os.path.isfile(text) and _EVENTS in os.path.basename(text):
        text = os.path.dirname(text) or "."
    try:
        return read_placement(text, name=name)
    except InputError as err:
        if not os.path.isdir(text) or not find_profiles(text):
            raise
        placement_missing = err
    try:
        return read_profile(text)
    except InputError:
        raise placement_missing from None


def format_placement(
    logdir: str | os.PathLike[str],
    name: str = "placement",
    *,
    as_json: bool = False,
    profile: bool = False,
    all_transfers: bool = False,
) -> str:
    """What ``tfdevices placement PATH [--name NAME] [--json] [--profile] [--all]`` prints (see :func:`load_placement`).

    Transfers are grouped by source, destination and tensor; ``all_transfers=True`` (``--all``) lists each.

    Raises:
        InputError: no placement named ``name`` and no profile is stored under ``logdir``.
    """
    report = load_placement(logdir, name=name, profile=profile)
    return report.to_json() if as_json else f"{report.summary()}\n\n{report.to_markdown(all_transfers=all_transfers)}"
