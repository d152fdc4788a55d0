"""XSpaces built with the XSpace schema in the shapes TensorFlow's profiler writes (no GPU, no TensorFlow needed).

Shapes follow TensorFlow's and XLA's writers: the host plane ``/host:CPU`` (``EagerExecute``
with ``eager_op``/``is_func``, ``FunctionRun`` producing ``_p``, ``ExecutorState::Process``
consuming ``_c``, kernels as ``name:Kernel`` events whose display name is the kernel), and one
``/device:GPU:N`` plane per GPU as XLA's CUPTI collector writes it (lines ``Stream #N(...)``,
kernels with ``kernel_details``/``correlation_id``/``tf_op``/``group_id``, memcpys with
``memcpy_details``; string stats stored by reference as the collector does, or inline as older
versions did), optionally with the derived ``TensorFlow Ops`` line of post-processed traces.
Times are given in microseconds.
"""

from __future__ import annotations

from typing import Any

US = 1_000_000  # picoseconds per microsecond


def xplane_pb2() -> Any:
    """The project's own XSpace schema (``tfdevices.verify.xplane``): no TensorFlow needed."""
    from tfdevices.verify.xplane import xplane_module

    return xplane_module()


class Plane:
    """One XPlane being built: metadata made on first use, lines by name."""

    def __init__(self, plane: Any, *, refs: bool = True) -> None:
        self.plane = plane
        self.refs = refs  # string stats by reference (current TensorFlow) or inline (older)
        self._stats: dict[str, int] = {}
        self._events: dict[tuple[str, str], int] = {}
        self._lines: dict[str, Any] = {}

    def stat_id(self, name: str) -> int:
        if name not in self._stats:
            key = len(self.plane.stat_metadata) + 1
            self.plane.stat_metadata[key].id = key
            self.plane.stat_metadata[key].name = name
            self._stats[name] = key
        return self._stats[name]

    def event_id(self, name: str, display: str = "") -> int:
        if (name, display) not in self._events:
            key = len(self.plane.event_metadata) + 1
            self.plane.event_metadata[key].id = key
            self.plane.event_metadata[key].name = name
            self.plane.event_metadata[key].display_name = display
            self._events[(name, display)] = key
        return self._events[(name, display)]

    def line(self, name: str, timestamp_ns: int = 0) -> Any:
        if name not in self._lines:
            line = self.plane.lines.add()
            line.id = len(self._lines) + 1
            line.name = name
            line.timestamp_ns = timestamp_ns
            self._lines[name] = line
        return self._lines[name]

    def event(self, line: str, name: str, start_us: float, duration_us: float, display: str = "", **stats: Any) -> Any:
        event = self.line(line).events.add()
        event.metadata_id = self.event_id(name, display)
        event.offset_ps = round(start_us * US)
        event.duration_ps = round(duration_us * US)
        for key, value in stats.items():
            self._stat(event, key.replace("__", " "), value)
        return event

    def _stat(self, holder: Any, key: str, value: Any) -> None:
        stat = holder.stats.add()
        stat.metadata_id = self.stat_id(key)
        if isinstance(value, bool):
            stat.uint64_value = int(value)
        elif isinstance(value, int):
            stat.int64_value = value
        elif isinstance(value, float):
            stat.double_value = value
        elif self.refs:
            stat.ref_value = self.stat_id(value)
        else:
            stat.str_value = value


class Space:
    """An XSpace being built."""

    def __init__(self) -> None:
        self.space = xplane_pb2().XSpace()
        self.planes: dict[str, Plane] = {}

    def plane(self, name: str, *, refs: bool = True) -> Plane:
        if name not in self.planes:
            plane = self.space.planes.add()
            plane.id = len(self.planes)
            plane.name = name
            self.planes[name] = Plane(plane, refs=refs)
        return self.planes[name]

    def bytes(self) -> bytes:
        return self.space.SerializeToString()

    def write(self, path: str) -> str:
        with open(path, "wb") as f:
            f.write(self.bytes())
        return path


def host_call(
    space: Space,
    function: str,
    start_us: float,
    end_us: float,
    context: int,
    kernels: list[tuple[str, str, float, float]],
) -> None:
    """One ``tf.function`` call on the host plane: its eager call, partition run, executor step and kernels.

    ``kernels`` are ``(op name, kernel, start_us, duration_us)``: on a GPU, their launches.
    """
    host = space.plane("/host:CPU")
    host.event("python", "EagerExecute", start_us, end_us - start_us, eager_op=function, is_func=True)
    host.event("python", "FunctionRun", start_us + 1, end_us - start_us - 2, _p=context)
    first = min((k[2] for k in kernels), default=start_us + 2)
    last = max((k[2] + k[3] for k in kernels), default=start_us + 3)
    host.event(f"tf_Compute/{context}", "ExecutorState::Process", first - 0.5, last - first + 1, _c=context)
    for op, kernel, start, duration in kernels:
        host.event(f"tf_Compute/{context}", f"{op}:{kernel}", start, duration, display=kernel)


def gpu_kernel(
    space: Space,
    gpu: int,
    stream: int,
    kernel: str,
    start_us: float,
    duration_us: float,
    op: str = "",
    *,
    group: int = 1,
    derived: bool = False,
    legacy: bool = False,
) -> None:
    """A kernel on GPU ``gpu``'s stream; ``op`` is the annotation (``"name:Type"``, ``""`` for none)."""
    plane = space.plane(f"/device:GPU:{gpu}", refs=not legacy)
    # the stats XLA's CUPTI collector writes on every kernel (context_id as "$$<id>", occupancy figures)
    stats: dict[str, Any] = {
        "correlation_id": 1000 + len(plane.plane.lines),
        "context_id": "$$1",
        "theoretical_occupancy_pct": 50.0,
        "occupancy_min_grid_size": 160,
        "occupancy_suggested_block_size": 1024,
        "group_id": group,
        "kernel_details": "regs:38 shm:0 grid:160,1,1 block:1024,1,1 occ_pct:50.0",
    }
    if op and legacy:
        stats["level__0"] = op + "#id=7#"
    elif op:
        stats["tf_op"] = op
    plane.event(f"Stream #{stream}(Kernel)", kernel, start_us, duration_us, **stats)


def gpu_copy(
    space: Space,
    gpu: int,
    stream: int,
    kind: str,
    start_us: float,
    duration_us: float,
    size: int,
    op: str = "",
    dest: int | None = None,
) -> None:
    """A memcpy (``kind`` ``"H2D"``, ``"D2H"``, ``"D2D"`` or ``"P2P"``) on GPU ``gpu``'s stream."""
    plane = space.plane(f"/device:GPU:{gpu}")
    kinds = {
        "H2D": ("pinned", "device"),
        "D2H": ("device", "pinned"),
        "D2D": ("device", "device"),
        "P2P": ("device", "device"),
    }[kind]
    details = f"kind_src:{kinds[0]} kind_dst:{kinds[1]} size:{size} dest:{gpu if dest is None else dest} async:1"
    stats: dict[str, Any] = {"correlation_id": 2000, "memcpy_details": details}
    if op:
        stats["tf_op"] = op
    plane.event(f"Stream #{stream}(Memcpy{kind})", f"Memcpy{kind}", start_us, duration_us, **stats)


def derived_op(space: Space, gpu: int, op: str, start_us: float, duration_us: float, group: int = 1) -> None:
    """An event of the derived ``TensorFlow Ops`` line (named ``op_name:OpType``, displayed as the type)."""
    plane = space.plane(f"/device:GPU:{gpu}")
    plane.event("TensorFlow Ops", op, start_us, duration_us, display=op.rpartition(":")[2], group_id=group)


#: The fields of XLA's ``HloProto`` a test edits (``xla/service/hlo.proto``'s numbers): the rest of a real
#: module's bytes round-trips through these classes as unknown fields, unchanged.
_HLO_EDITED = {
    "HloProto": (("hlo_module", 1, "OPTIONAL", "MESSAGE", "HloModuleProto", ""),),
    "HloModuleProto": (
        ("name", 1, "OPTIONAL", "STRING", "", ""),
        ("computations", 3, "REPEATED", "MESSAGE", "HloComputationProto", ""),
        ("entry_computation_id", 6, "OPTIONAL", "INT64", "", ""),
        ("schedule", 7, "OPTIONAL", "MESSAGE", "HloScheduleProto", ""),
    ),
    "HloScheduleProto": (("sequences", 1, "REPEATED", "MESSAGE", "HloScheduleProto.SequencesEntry", ""),),
    "HloScheduleProto.InstructionSequence": (("instruction_ids", 1, "REPEATED", "INT64", "", ""),),
    "HloScheduleProto.SequencesEntry": (
        ("key", 1, "OPTIONAL", "INT64", "", ""),
        ("value", 2, "OPTIONAL", "MESSAGE", "HloScheduleProto.InstructionSequence", ""),
    ),
    "HloComputationProto": (
        ("name", 1, "OPTIONAL", "STRING", "", ""),
        ("instructions", 2, "REPEATED", "MESSAGE", "HloInstructionProto", ""),
        ("id", 5, "OPTIONAL", "INT64", "", ""),
    ),
    "HloInstructionProto": (("name", 1, "OPTIONAL", "STRING", "", ""), ("id", 35, "OPTIONAL", "INT64", "", "")),
}
_hlo_classes: dict[str, Any] = {}


def hlo_pb2() -> Any:
    """Message classes to edit a profile's HLO (``HloProto``) in tests: the tests' own, not the reader's schema."""
    from types import SimpleNamespace

    from tfdevices.verify.xplane import build_messages

    if not _hlo_classes:
        _hlo_classes.update(build_messages("tests/hlo_edited.proto", "tests.hlo", _HLO_EDITED))
    return SimpleNamespace(**_hlo_classes)
