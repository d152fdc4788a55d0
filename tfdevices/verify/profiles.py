"""Placement from a profile TensorFlow already wrote: :func:`read_profile`.

Keras' ``TensorBoard(profile_batch=...)`` callback, ``tf.profiler.experimental.start/stop``
and TensorBoard's capture button write one XSpace per host as
``LOGDIR/<run>/plugins/profile/<session>/<host>.xplane.pb``. :func:`read_profile` reads
such a file, or the newest session under a log directory, into a
:class:`~tfdevices.verify.PlacementReport`: every op by device, with GPU ops timed by
the GPU's clock, transfers with their bytes, collectives, busy time per device and the
steps the profile marks. A profile does not hold the program's graph nor the devices
it asked for: op types are the kernels' (a fused kernel is one op, named after its last
op), ``requested`` is empty, and the report's notes say so once.

>>> import tempfile, tensorflow as tf
>>> from tfdevices.verify import read_profile
>>> logdir = tempfile.mkdtemp()
>>> tf.profiler.experimental.start(logdir)
>>> _ = tf.function(lambda x: tf.reduce_sum(x * 2.0))(tf.ones([4]))
>>> tf.profiler.experimental.stop()
>>> "CPU:0" in read_profile(logdir).devices
True
"""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass
from typing import Any

from tfdevices.core.errors import InputError
from tfdevices.core.units import format_bytes, short_repr
from tfdevices.verify.building import build_report
from tfdevices.verify.hlo import HloModules
from tfdevices.verify.host import HOST_PLANE, parse_space, read_trace
from tfdevices.verify.report import PlacementReport

#: The largest profile file read by default (about 40 million events); ``max_bytes=`` raises it.
DEFAULT_MAX_BYTES = 1 << 30
_SUFFIX = ".xplane.pb"
_MAX_DEPTH = 8  # below the directory given
_MAX_ENTRIES = 100_000  # files and directories looked at while searching
_HINT = (
    "pass a '.xplane.pb' file, or a log directory that holds LOGDIR/<run>/plugins/profile/<session>/"
    "<host>.xplane.pb (what Keras' TensorBoard(profile_batch=...) and tf.profiler.experimental write)."
)


@dataclass(frozen=True)
class ProfileFile:
    """One host's profile file: its path, the run and session it belongs to, and the host's name."""

    path: str
    run: str
    session: str
    host: str
    mtime: float


def find_profiles(logdir: str | os.PathLike[str]) -> list[ProfileFile]:
    """Every ``*.xplane.pb`` under ``logdir`` (bounded: 8 levels, 100,000 entries), oldest session first.

    ``run`` is the directory that holds ``plugins/profile`` relative to ``logdir`` (``"train"``,
    ``"."`` for ``logdir`` itself); ``session`` the directory the file is in.

    Raises:
        InputError: ``logdir`` is not a directory, or is too large to search.
    """
    root = os.fspath(logdir)
    if not os.path.isdir(root):
        raise InputError(f"profile directory {short_repr(root, 200)} is not a directory.", hint=_HINT)
    found: list[ProfileFile] = []
    seen = 0
    for here, dirs, files in os.walk(root):
        depth = os.path.relpath(here, root).count(os.sep) + (here != root)
        seen += len(dirs) + len(files)
        if seen > _MAX_ENTRIES:
            raise InputError(
                f"{short_repr(root, 200)} holds more than {_MAX_ENTRIES:,} files and directories to search for "
                "profiles.",
                hint="pass the run's directory, or the .xplane.pb file itself.",
            )
        dirs[:] = sorted(dirs) if depth < _MAX_DEPTH else []
        for name in sorted(files):
            path = os.path.join(here, name)
            if name.endswith(_SUFFIX) and stat.S_ISREG(os.lstat(path).st_mode):
                found.append(_profile_file(root, path))
    return sorted(found, key=lambda p: (p.session, p.mtime, p.run, p.host))


def _profile_file(root: str, path: str) -> ProfileFile:
    """``path``'s run is the directory above its ``plugins/profile/<session>/`` (else its own directory)."""
    session_dir = os.path.dirname(os.path.abspath(path))
    parts = session_dir.split(os.sep)
    run_dir = os.sep.join(parts[:-3]) if parts[-3:-1] == ["plugins", "profile"] else session_dir
    inside = os.path.commonpath([run_dir, os.path.abspath(root)]) == os.path.abspath(root)
    run = os.path.relpath(run_dir, root) if inside else os.path.basename(run_dir)
    host = os.path.basename(path)[: -len(_SUFFIX)]
    return ProfileFile(path, run, os.path.basename(session_dir), host, os.stat(path).st_mtime)


def read_profile(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> PlacementReport:
    """Reads where every op ran, and for how long, from a profile TensorFlow wrote.

    Args:
        path: a ``<host>.xplane.pb`` file, or a log directory; from a directory the newest
            profile session found is read (the report's notes name it and the others).
            Several hosts in one session are one report, each host's devices prefixed
            with ``host:K/`` (the notes say which host is which).
        max_bytes: the largest file read (default 1 GiB).

    Returns:
        A :class:`~tfdevices.verify.PlacementReport` (without graphs).

    Raises:
        InputError: the path does not exist or is not a regular file or directory; no profile
            is found; a file is larger than ``max_bytes``, empty, truncated or corrupt; or it
            holds no CPU or GPU plane tfdevices reads (TPU-only), or no event it knows.
    """
    text = os.fspath(path)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise InputError(
            f"read_profile(max_bytes={max_bytes!r}): expected a positive number of bytes.",
            hint=f"e.g. max_bytes={DEFAULT_MAX_BYTES}.",
        )
    if not os.path.lexists(text):
        raise InputError(f"profile {short_repr(text, 200)} does not exist.", hint=_HINT)
    if os.path.isdir(text):
        files, notes = _newest_session(text)
    else:
        files, notes = (
            [
                ProfileFile(
                    text,
                    ".",
                    os.path.basename(os.path.dirname(os.path.abspath(text))),
                    os.path.basename(text).removesuffix(_SUFFIX),
                    0.0,
                )
            ],
            [],
        )
    reports = [_read_file(f.path, max_bytes) for f in files]
    if len(reports) == 1:
        report = reports[0]
    else:
        report = _merged(reports, [f.host for f in files])
        notes.append("one report of " + ", ".join(f"host:{i} = {f.host!r}" for i, f in enumerate(files)))
    notes.append(
        "read from a profile: the devices asked for and the program's graph are not recorded there "
        "(requested is empty; op types are the kernels', a fused kernel is one op)"
    )
    return dataclasses.replace(report, notes=tuple(notes) + report.notes)


def _newest_session(logdir: str) -> tuple[list[ProfileFile], list[str]]:
    profiles = find_profiles(logdir)
    if not profiles:
        raise InputError(f"{short_repr(logdir, 200)} holds no profile ({_SUFFIX} file).", hint=_HINT)
    sessions: dict[tuple[str, str], list[ProfileFile]] = {}
    for p in profiles:
        sessions.setdefault((p.run, p.session), []).append(p)
    (run, session), files = max(sessions.items(), key=lambda item: (item[0][1], max(f.mtime for f in item[1])))
    notes = [f"profile session {session!r} of run {run!r}"]
    if len(sessions) > 1:
        others = [f"{r}/{s}" for r, s in sorted(sessions) if (r, s) != (run, session)]
        notes[0] += (
            f" (the newest of {len(sessions)}; the others: {', '.join(others[:5])}"
            f"{', ...' if len(others) > 5 else ''}: pass one's file to read it)"
        )
    return files, notes


def _read_file(path: str, max_bytes: int) -> PlacementReport:
    try:
        info = os.stat(path)
    except OSError as err:
        raise InputError(f"profile {short_repr(path, 200)} cannot be read: {err.strerror}.", hint=_HINT) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(
            f"profile {short_repr(path, 200)} is not a regular file (a directory, FIFO or device).", hint=_HINT
        )
    if info.st_size > max_bytes:
        raise InputError(
            f"profile {short_repr(path, 200)} is {format_bytes(info.st_size)}, more than the "
            f"{format_bytes(max_bytes)} read at most.",
            hint=f"profile fewer steps, or pass max_bytes={info.st_size} to read it anyway.",
        )
    if info.st_size == 0:
        raise InputError(
            f"profile {short_repr(path, 200)} is empty (0 bytes): the profiler did not finish writing it.",
            hint="profile again and let the profiler stop (tf.profiler.experimental.stop()).",
        )
    trace = _trace_of(path, info.st_size, max_bytes)  # the file's bytes and the parsed XSpace are freed here
    report = build_report(trace)
    if not (report.ops or report.transfers or report.collectives):
        raise InputError(
            f"profile {short_repr(path, 200)} holds {trace.host_events:,} host event(s) and "
            f"{sum(g.events for g in trace.gpus.values()):,} GPU event(s), but none that tfdevices "
            f"reads as an op (ExecutorState::Process, EagerExecute, 'name:Kernel', GPU kernels): {_found(trace)}.",
            hint=_found_hint(trace),
        )
    skipped = [
        f"plane {short_repr(name, 60)} not read (tfdevices reads /host:CPU and /device:GPU:N)" for name in trace.skipped
    ]
    return dataclasses.replace(report, notes=tuple(skipped) + report.notes)


def _found(trace: Any) -> str:
    """What a profile read as no ops holds, in a few words."""
    if trace.metadata is not None and len(HloModules(trace.metadata)):
        return f"an XLA or JAX profile ({len(HloModules(trace.metadata))} HLO module(s)) whose devices ran no kernel"
    if any(name.startswith("/device:TPU:") for name in trace.skipped):
        return "a TPU profile: its TPU planes are not read, its host plane holds no TensorFlow op"
    if not trace.host_events and not trace.gpus:
        return "an empty profile: no event on its host plane and no GPU plane"
    return "a host plane of events from no TensorFlow executor (another framework, or TensorFlow before 2.4)"


def _found_hint(trace: Any) -> str:
    if not trace.host_events and not trace.gpus:
        return "profile again around the steps to read (the profiler stopped before they ran, or started after)."
    return "profile with TensorFlow 2.4 or later, or open it in TensorBoard's Profile tab."


def _trace_of(path: str, size: int, max_bytes: int) -> Any:
    """The trace a profile file holds: read, parsed and walked once."""
    from google.protobuf.message import DecodeError  # noqa: PLC0415 (lazy protobuf)

    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as err:
        raise InputError(f"profile {short_repr(path, 200)} cannot be read: {err.strerror}.", hint=_HINT) from None
    try:
        space = parse_space(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise InputError(
            f"profile {short_repr(path, 200)} ({format_bytes(size)}) is truncated or is not an XSpace "
            f"({short_repr(str(err), 120)}).",
            hint="profile again; " + _HINT,
        ) from None
    names = [plane.name for plane in space.planes]
    readable = [n for n in names if n == HOST_PLANE or n.startswith("/device:GPU:")]
    if not readable:
        listing = ", ".join(short_repr(n, 60) for n in names[:8]) or "none"
        what = " (a TPU profile)" if any(n.startswith("/device:TPU:") for n in names) else ""
        raise InputError(
            f"profile {short_repr(path, 200)} holds no host CPU or GPU plane{what}; its planes: {listing}.",
            hint="tfdevices reads the profiles of CPUs and NVIDIA GPUs (TPU profiles: use TensorBoard's Profile tab).",
        )
    return read_trace(space)


def _merged(reports: list[PlacementReport], hosts: list[str]) -> PlacementReport:
    """One report of several hosts' reports, each host's devices under ``host:K/``."""
    ops, transfers, collectives, busy, notes = [], [], [], {}, []
    steps: set[int] = set()
    for k, report in enumerate(reports):

        def on(device: str, k: int = k) -> str:
            return device if device == "?" else f"host:{k}/{device}"

        ops += [dataclasses.replace(op, device=on(op.device)) for op in report.ops]
        transfers += [dataclasses.replace(t, src=on(t.src), dst=on(t.dst)) for t in report.transfers]
        collectives += [dataclasses.replace(c, device=on(c.device)) for c in report.collectives]
        busy.update({on(d): us for d, us in report.busy_us.items()})
        notes += [f"host:{k}: {note}" for note in report.notes]
        steps.update(report.steps)
    return PlacementReport(
        tuple(ops),
        tuple(transfers),
        tuple(collectives),
        busy_us=dict(sorted(busy.items())),
        notes=tuple(notes),
        steps=tuple(sorted(steps)),
    )
