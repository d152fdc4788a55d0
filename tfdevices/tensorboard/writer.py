"""Placement in TensorBoard: write a :class:`~tfdevices.verify.PlacementReport`, read it back.

:func:`write_placement` writes, into a normal TensorBoard run (a log directory):

* the executed partition graphs merged into one GraphDef, with the real device
  of every node and an edge from each ``_Send`` to its ``_Recv``, so the Graphs
  dashboard's "color by device" shows where ops really ran;
* text summaries: the per-device table and transfer list (``NAME/report``) and
  the report as JSON (``NAME/json``, what :func:`read_placement` reads);
* scalars: ops per device (``NAME/ops/CPU:1``), transfers and bytes per device
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

import os
from typing import Any

from tfdevices.core._tf import import_tf
from tfdevices.core.errors import InputError
from tfdevices.core.paths import check_directory
from tfdevices.verify import PlacementReport

__all__ = ["format_placement", "merged_graph_def", "read_placement", "write_placement"]

_EVENTS = "events.out.tfevents"


def merged_graph_def(report: PlacementReport) -> Any:
    """One GraphDef of every executed partition graph, each compiled function under its own namespace.

    Node names repeat across functions and eager calls, so each call's nodes are
    renamed ``call_NNN/<name>``; devices stay as TensorFlow assigned them, and each
    ``_Recv`` gets its ``_Send`` as an input so the transfer shows as an edge.

    Args:
        report: a report from :func:`tfdevices.verify.capture`.

    Returns:
        A ``tensorboard.compat.proto.graph_pb2.GraphDef``.
    """
    from tensorboard.compat.proto import graph_pb2  # noqa: PLC0415 (lazy tensorboard)

    merged = graph_pb2.GraphDef()
    sender = {(f"call_{t.call:03d}", t.recv_op): t.send_op for t in report.copies if t.send_op and t.recv_op}
    for namespace, serialized in report.graphs:
        partition = graph_pb2.GraphDef.FromString(serialized)
        if not merged.HasField("versions"):
            merged.versions.CopyFrom(partition.versions)
        for node in partition.node:
            new = merged.node.add()
            new.CopyFrom(node)
            new.name = f"{namespace}/{node.name}"
            del new.input[:]
            for source in node.input:
                control = source.startswith("^")
                new.input.append(("^" if control else "") + f"{namespace}/{source.lstrip('^')}")
            send = sender.get((namespace, node.name))
            if send is not None:
                new.input.append(f"{namespace}/{send}")
    return merged


def write_placement(report: PlacementReport, logdir: str | os.PathLike[str], step: int = 0,
                    name: str = "placement") -> str:
    """Writes a placement report into the TensorBoard run ``logdir``.

    Args:
        report: a report from :func:`tfdevices.verify.capture`.
        logdir: the run's directory (created if missing).
        step: the step the summaries are recorded at.
        name: the prefix of every summary tag.

    Returns:
        ``logdir`` as a string.

    Raises:
        InputError: ``report`` is not a PlacementReport, ``name`` is empty, ``step`` is negative,
            or ``logdir`` is a file or lies under one.
    """
    if not isinstance(report, PlacementReport):
        raise InputError(f"write_placement(report=...): expected a PlacementReport, got {type(report).__name__}.",
                         hint="pass what tfdevices.verify.capture(fn, ...) returns.")
    if not name or not isinstance(name, str):
        raise InputError(f"write_placement(name={name!r}): expected a non-empty tag prefix.",
                         hint="e.g. name='placement'.")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InputError(f"write_placement(step={step!r}): expected a step >= 0.", hint="e.g. step=0.")
    logdir = check_directory(logdir, what="write_placement(logdir=...)")
    tf = import_tf()
    writer = tf.summary.create_file_writer(logdir)
    try:
        with writer.as_default():
            if report.graphs:
                graph_def = tf.compat.v1.GraphDef.FromString(merged_graph_def(report).SerializeToString())
                tf.summary.graph(graph_def)
            tf.summary.text(f"{name}/report", f"{_code(report.summary())}\n\n{report.to_markdown()}", step=step)
            tf.summary.text(f"{name}/json", report.to_json(), step=step)
            for device, count in report.op_counts.items():
                tf.summary.scalar(f"{name}/ops/{device}", float(count), step=step)
            pairs: dict[str, list[int]] = {}
            for t in report.copies:
                entry = pairs.setdefault(f"{t.src} -> {t.dst}", [0, 0])
                entry[0] += 1
                entry[1] += t.bytes or 0
            for pair, (count, size) in sorted(pairs.items()):
                tf.summary.scalar(f"{name}/transfers/{pair}", float(count), step=step)
                tf.summary.scalar(f"{name}/transfer_bytes/{pair}", float(size), step=step)
            tf.summary.scalar(f"{name}/collectives", float(len(report.collectives)), step=step)
    finally:
        writer.flush()
        writer.close()
    return logdir


def _code(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _event_dirs(logdir: str) -> list[str]:
    return sorted(root for root, _, files in os.walk(logdir) if any(_EVENTS in f for f in files))


def read_placement(logdir: str | os.PathLike[str], name: str = "placement") -> PlacementReport:
    """Reads the latest placement report stored under ``logdir`` (searched recursively).

    Uses TensorBoard's event loading (``EventAccumulator``); no server is needed.

    Args:
        logdir: a log directory holding a run written by :func:`write_placement`, or runs below it.
        name: the tag prefix it was written with.

    Returns:
        The report (without its graphs), from the run and step written last.

    Raises:
        InputError: ``logdir`` does not exist, holds no event files, or none with a placement.
    """
    logdir = os.fspath(logdir)
    if not os.path.isdir(logdir):
        raise InputError(f"log directory {logdir!r} does not exist.",
                         hint="pass the directory given to write_placement or PlacementLogger.")
    dirs = _event_dirs(logdir)
    if not dirs:
        listing = ", ".join(sorted(os.listdir(logdir))[:10]) or "nothing"
        raise InputError(f"log directory {logdir!r} holds no TensorBoard event files; it contains: {listing}.",
                         hint="pass the directory given to write_placement or PlacementLogger.")
    from tensorboard.backend.event_processing import event_accumulator  # noqa: PLC0415 (lazy tensorboard)

    found: list[tuple[float, int, str]] = []
    tags: set[str] = set()
    for run in dirs:
        acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.TENSORS: 0})
        acc.Reload()
        run_tags = acc.Tags().get(event_accumulator.TENSORS, [])
        tags.update(run_tags)
        if f"{name}/json" in run_tags:
            event = acc.Tensors(f"{name}/json")[-1]
            found.append((event.wall_time, event.step, event.tensor_proto.string_val[0].decode()))
    if not found:
        shown = ", ".join(sorted(tags)[:10]) or "no tensor or text summaries"
        raise InputError(
            f"log directory {logdir!r} holds {len(dirs)} run(s) but no placement summary "
            f"'{name}/json'; its tags: {shown}.",
            hint="write one with tfdevices.tensorboard.write_placement or the PlacementLogger callback "
                 "(or pass the name= it was written with).")
    return PlacementReport.from_json(max(found)[2])


def format_placement(logdir: str | os.PathLike[str], name: str = "placement", *, as_json: bool = False) -> str:
    """What ``tfdevices placement LOGDIR [--name NAME] [--json]`` prints: the stored report.

    Raises:
        InputError: no placement named ``name`` is stored under ``logdir``.
    """
    report = read_placement(logdir, name=name)
    return report.to_json() if as_json else f"{report.summary()}\n\n{report.to_markdown()}"
