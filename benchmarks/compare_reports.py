"""Whether the placement reports read the same before and after a change to the reader: every field, one by one.

Two copies of the reader are imported side by side in one process: this tree's ``tfdevices.verify`` and the
one at a git revision (``--base``), written under ``build/compare-base/<revision>/verify_base/`` with its
imports renamed (its ``__init__`` left empty: the copy reads and builds, it captures nothing). The same bytes
go to both; each report is dumped (:func:`dump`: ``to_json()``, every field of every record with its class,
the graphs' namespaces and objects, the summary, the tables and the derived counts) and the dumps compared
field by field. Any difference is printed and makes the exit status 1. Three sources:

* ``profiles``: every real GPU profile given (default ``../shared/real-gpu/*.xplane.pb``), with ``read_profile``;
* ``captures``: fresh captures of traced steps (forward and train, 100 and 1,000 layers; a step split over
  two CPUs, with transfers; eager ops), each XSpace saved under ``--save`` (``<step>-<round>.xplane.pb``)
  and read by both builders with the same recorder, then each saved file read by both as a profile;
  ``--from DIR`` reads saved files again as profiles only;
* the test suite: as a pytest plugin (``PYTHONPATH=benchmarks pytest -p compare_reports ...``), every
  ``build_report`` a test runs in process is compared with the base's reading of the same XSpace (a trace a
  test changes after reading it is counted as skipped); the results go to ``$COMPARE_REPORTS_OUT`` (one JSON
  line per report). Tests that capture in a subprocess are not seen.

Run: ``.venv/bin/python benchmarks/compare_reports.py profiles captures --base REV --save build/captures``.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib
import json
import os
import re
import subprocess
import sys
import weakref
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
DEFAULT_BASE = "7a6acc6"  # main before issue 55's first part


def base_package(revision: str) -> Any:
    """The reader at ``revision``, imported as ``verify_base`` (written once per revision)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", revision], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    where = os.path.join(ROOT, "build", "compare-base", sha)
    package = os.path.join(where, "verify_base")
    if not os.path.isdir(package):
        os.makedirs(package + ".tmp", exist_ok=True)
        names = subprocess.run(
            ["git", "ls-tree", "--name-only", sha, "tfdevices/verify/"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        for name in names:
            if not name.endswith(".py"):
                continue
            text = subprocess.run(
                ["git", "show", f"{sha}:{name}"], cwd=ROOT, check=True, capture_output=True, text=True
            ).stdout
            if name.endswith("__init__.py"):
                text = '"""The reader at a revision, for compare_reports.py."""\n'
            text = re.sub(r"\btfdevices\.verify\b", "verify_base", text)
            with open(os.path.join(package + ".tmp", os.path.basename(name)), "w") as f:
                f.write(text)
        os.rename(package + ".tmp", package)
    if where not in sys.path:
        sys.path.insert(0, where)
    return importlib.import_module("verify_base")


def _record(record: Any) -> list[Any]:
    return [type(record).__name__] + [[f.name, repr(getattr(record, f.name))] for f in dataclasses.fields(record)]


def dump(report: Any) -> dict[str, Any]:
    """Every field of a report, as comparable values."""
    return {
        "json": json.loads(report.to_json()),
        "ops": [_record(op) for op in report.ops],
        "transfers": [_record(t) for t in report.transfers],
        "collectives": [_record(c) for c in report.collectives],
        "graphs": [[name, id(graph)] for name, graph in report.graphs],
        "busy_us": repr(report.busy_us),
        "notes": list(report.notes),
        "steps": list(report.steps),
        "cold": report.cold,
        "devices": list(report.devices),
        "op_counts": repr(report.op_counts),
        "kernel_counts": repr(report.kernel_counts),
        "variables": [repr(v) for v in report.variables_on()],
        "summary": report.summary(),
        "text": report.to_text(all_transfers=True),
    }


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Each field that differs, as ``"field[i]: before != after"`` (the first 10)."""
    out = []
    for key in before.keys() | after.keys():
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                out.append(f"{key}: {len(a)} entries != {len(b)}")
            out += [f"{key}[{i}]: {x!r} != {y!r}" for i, (x, y) in enumerate(zip(a, b)) if x != y][:10]
        else:
            out.append(f"{key}: {str(a)[:300]!r} != {str(b)[:300]!r}")
    return out


def fields_of(d: dict[str, Any]) -> int:
    """How many values a dump holds (each record's field counted)."""
    return sum(sum(len(r) - 1 for r in d[k]) for k in ("ops", "transfers", "collectives")) + len(d) - 3


class Tally:
    """Comparisons made and differences found."""

    def __init__(self) -> None:
        self.reports = self.fields = self.failed = 0

    def compare(self, what: str, before: Any, after: Any) -> None:
        a, b = dump(before), dump(after)
        found = differences(a, b)
        self.reports += 1
        self.fields += fields_of(a)
        if found:
            self.failed += 1
            print(f"DIFFERENT {what}:", *found[:20], sep="\n  ")
        else:
            print(f"same: {what} ({len(before.ops)} ops, {len(before.transfers)} transfers, {fields_of(a)} values)")


def compare_profiles(base: Any, paths: list[str], tally: Tally) -> None:
    from tfdevices.verify import read_profile

    old = importlib.import_module("verify_base.profiles").read_profile
    for path in paths:
        tally.compare(os.path.basename(path), old(path), read_profile(path))


def _steps(tf: Any, keras: Any) -> dict[str, Any]:
    import bench_placement

    steps = {
        f"{kind}{n}": maker(keras, tf, n)
        for n in (100, 1000)
        for kind, maker in (
            ("forward", bench_placement._forward),
            ("train", bench_placement._train),
        )
    }
    with tf.device("/CPU:0"):
        w = tf.Variable(tf.ones([32, 32]))

    @tf.function
    def split():
        x = tf.ones([8, 32])
        with tf.device("/CPU:0"):
            y = tf.nn.relu(tf.matmul(x, w))
        with tf.device("/CPU:1"):
            z = tf.matmul(y, w) + 1.0
        return tf.reduce_sum(z)

    steps["split"] = split
    steps["eager"] = lambda: tf.reduce_sum(tf.ones([4, 4]) * 2.0)
    return steps


def compare_captures(base: Any, save: str, rounds: int, tally: Tally) -> None:
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras

    from tfdevices.verify import profiling, recording
    from tfdevices.verify.building import build_report
    from tfdevices.verify.host import read_trace

    old_build = importlib.import_module("verify_base.building").build_report
    old_read = importlib.import_module("verify_base.host").read_trace
    os.makedirs(save, exist_ok=True)
    for name, step in _steps(tf, keras).items():
        placed: dict[str, str] = {}
        with profiling._placements(placed, True):
            step()
        for k in range(rounds):
            recorder, spaces = recording.Recorder(placed=dict(placed)), []
            with profiling._profiling(tf, spaces), recording.record_calls(recorder):
                step()
            path = os.path.join(save, f"{name}-{k}.xplane.pb")
            with open(path, "wb") as f:
                f.write(spaces[0])
            tally.compare(
                f"capture {name}-{k}",
                old_build(old_read(spaces[0]), recorder),
                build_report(read_trace(spaces[0]), recorder),
            )
    compare_profiles(base, sorted(glob.glob(os.path.join(save, "*.xplane.pb"))), tally)


# ----------------------------------------------------------------------------- the pytest plugin

_OUT = os.environ.get("COMPARE_REPORTS_OUT")
_spaces: dict[int, tuple[Any, bytes, int]] = {}


def _fingerprint(trace: Any) -> int:
    """What a trace holds, hashed: a test that changes a trace after reading it (to make a shape the
    profiler rarely writes) builds a report of no XSpace, which is not compared.
    """
    return hash(repr([(k, v) for k, v in sorted(vars(trace).items()) if k != "metadata"]))


def _install() -> None:
    """Wraps ``read_trace`` and ``build_report`` wherever tfdevices holds them: each build is compared."""
    base_package(os.environ.get("COMPARE_REPORTS_BASE", DEFAULT_BASE))
    import tfdevices.verify  # noqa: F401
    from tfdevices.verify import building, host

    old_build = importlib.import_module("verify_base.building").build_report
    old_read = importlib.import_module("verify_base.host").read_trace
    read, build = host.read_trace, building.build_report

    def read_trace(data: Any) -> Any:
        raw = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else data.SerializeToString()
        trace = read(data)
        _spaces[id(trace)] = (weakref.ref(trace), raw, _fingerprint(trace))
        return trace

    def build_report(trace: Any, recorder: Any = None) -> Any:
        report = build(trace, recorder)
        ref, raw, fingerprint = _spaces.get(id(trace), (None, b"", 0))
        if ref is not None and ref() is trace:
            test = os.environ.get("PYTEST_CURRENT_TEST", "?")
            row: dict[str, Any] = {"test": test, "ops": len(report.ops)}
            if _fingerprint(trace) != fingerprint:
                row["skipped"] = "the trace was changed after it was read"
            else:
                a, b = dump(old_build(old_read(raw), recorder)), dump(report)
                row.update(values=fields_of(a), diff=differences(a, b))
            with open(_OUT or os.devnull, "a") as f:
                f.write(json.dumps(row) + "\n")
        return report

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("tfdevices."):
            if getattr(module, "read_trace", None) is read:
                module.read_trace = read_trace
            if getattr(module, "build_report", None) is build:
                module.build_report = build_report


if _OUT and __name__ != "__main__":
    _install()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="+", choices=("profiles", "captures"))
    parser.add_argument("--base", default=DEFAULT_BASE, help="the git revision to compare with")
    parser.add_argument(
        "--files", nargs="*", default=sorted(glob.glob(os.path.join(ROOT, "..", "shared", "real-gpu", "*.xplane.pb")))
    )
    parser.add_argument("--save", default=os.path.join(ROOT, "build", "captures"), help="where captures are saved")
    parser.add_argument("--from", dest="saved", default="", help="read the captures saved here as profiles only")
    parser.add_argument("--rounds", type=int, default=3, help="captures of each step")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(20000)
    base = base_package(args.base)
    tally = Tally()
    if "profiles" in args.what:
        compare_profiles(base, args.files, tally)
    if "captures" in args.what:
        if args.saved:
            compare_profiles(base, sorted(glob.glob(os.path.join(args.saved, "*.xplane.pb"))), tally)
        else:
            compare_captures(base, args.save, args.rounds, tally)
    print(f"{tally.reports} report(s) compared, {tally.fields:,} values; {tally.failed} different")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
