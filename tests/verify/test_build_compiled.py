"""The compiled build loop (``_hostwalk.add_kernels``) makes what the Python loop of ``_add_kernels`` makes.

:func:`tfdevices.verify.building._add_kernels` hands its kernels to the compiled loop where
``host._compiled`` has it, and runs its own loop where ``host._compiled`` is ``None`` or the
compiled loop declines (``OpPlacement`` not laid out as it writes records). Every report here
is built both ways and compared: its JSON, and each record's type, fields, hash and repr.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import pickle
import sys
import tracemalloc
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from tests.compiled import needs_compiled
from tests.graphs import eager_ops, split_and_nested, train_step
from tests.verify import test_gpu_time
from tests.verify.test_host_compiled import _capture, _cases
from tests.xspaces import Space, host_call
from tfdevices.verify import building, host
from tfdevices.verify.building import build_report
from tfdevices.verify.records import OpPlacement, _make_op

COMPILED = host._compiled
pytestmark = needs_compiled
SKIPPED = building._SKIPPED


class _Counting:
    """``host._compiled`` that counts the builds the compiled loop made (and those it declined).

    With ``stand_in``, the loop is given that class as the record type.
    """

    def __init__(self, stand_in: Any = OpPlacement) -> None:
        self.walk, self.planes = COMPILED.walk, COMPILED.planes
        self.stand_in = stand_in
        self.built = self.declined = 0

    def add_kernels(self, *args: Any) -> Any:
        assert args[-1] is OpPlacement
        handed = COMPILED.add_kernels(*args[:-1], self.stand_in)
        if handed is None:
            self.declined += 1
        else:
            self.built += 1
        return handed


def _build(trace: host._Trace, recorder: Any, compiled: Any) -> Any:
    host._compiled = compiled
    try:
        return build_report(trace, recorder)
    finally:
        host._compiled = COMPILED


def _same_records(a: Any, b: Any) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert type(x) is type(y)
        assert x == y and hash(x) == hash(y) and repr(x) == repr(y)
        for f in dataclasses.fields(x):
            u, v = getattr(x, f.name), getattr(y, f.name)
            assert type(u) is type(v) and u == v, f.name


def _both(trace: host._Trace, recorder: Any = None, *, functions: bool = True) -> Any:
    """The report built with the compiled loop and with the Python loop (asserted the same); the compiled one."""
    assert COMPILED is not None and host._compiled is COMPILED, "tfdevices.verify._hostwalk is not built"
    counting = _Counting()
    compiled = _build(trace, recorder, counting)
    python = _build(trace, recorder, None)
    assert counting.declined == 0
    assert counting.built > 0 or not functions
    assert compiled.to_json() == python.to_json()
    _same_records(compiled.ops, python.ops)
    _same_records(compiled.transfers, python.transfers)
    _same_records(compiled.collectives, python.collectives)
    assert compiled.busy_us == python.busy_us and compiled.notes == python.notes
    for op in compiled.ops:
        assert type(op) is OpPlacement
        assert op.start_us is None or type(op.start_us) is float
        assert op.duration_us is None or type(op.duration_us) is float
    return compiled


def test_the_extension_has_the_build_loop():
    assert COMPILED is not None, "tfdevices.verify._hostwalk is not built (setup.py build_ext --inplace builds it)"
    assert callable(COMPILED.add_kernels)


# ---------------------------------------------------------------- built XSpaces, read as profiles

TIMESTAMP_NS = 1_800_000_000_000_000_000  # ns since the epoch: times in ps are past 64 bits
SEND_KEY = "/job:localhost/replica:0/task:0/device:CPU:0;0;/job:localhost/replica:0/task:0/device:CPU:1;edge_5_x;0:0"


def _profile_space(timestamp_ns: int = 0) -> Space:
    space = Space()
    host_call(
        space,
        "__inference_step_1",
        0,
        100,
        7,
        [
            ("x", "_Arg", 2, 0.5),  # plumbing: no op, no span
            ("m/MatMul", "MatMul", 3, 2.0001),
            ("m/BiasAdd", "BiasAdd", 5.25, 1),
            ("r/CollectiveReduceV2", "CollectiveReduceV2", 7, 3.0),
            ("n/NcclAllReduce", "_NcclAllReduce", 11, 1.5),
            ("y", "_Retval", 13, 0.1),
        ],
    )
    plane = space.plane("/host:CPU")
    send = {"key": SEND_KEY, "from": "m/BiasAdd", "to": "s/Sum"}
    plane.event("tf_Compute/7", "m/BiasAdd/_1:_Send", 6.5, 0.25, display="_Send", **send)
    plane.event("python", "FunctionRun", 20, 60, _p=8)
    plane.event("tf_Compute/8", "ExecutorState::Process", 21, 40, _c=8)
    plane.event("tf_Compute/8", "m/BiasAdd/_2:_Recv", 22, 1, display="_Recv")
    plane.event("tf_Compute/8", "s/Sum:Sum", 24, 3.333333, display="Sum")
    plane.event("python", "EagerExecute", 150, 5, eager_op="AddV2", is_func=False)
    if timestamp_ns:
        for line in plane.plane.lines:
            line.timestamp_ns = timestamp_ns + line.id * 1_234_567
    return space


@pytest.mark.parametrize("timestamp_ns", [0, TIMESTAMP_NS, 2**62 + 3])
def test_a_profile_with_transfers_collectives_and_unplaced_kernels_builds_the_same_both_ways(timestamp_ns):
    trace = host.read_trace(_profile_space(timestamp_ns).bytes())
    if timestamp_ns:
        assert max(k[host.START] for k in trace.kernels) > 2**63
    report = _both(trace)
    assert [c.type for c in report.collectives] == ["CollectiveReduceV2", "_NcclAllReduce"]
    assert ("m/BiasAdd/_1", "CPU:0", "CPU:1") in [(t.send_op, t.src, t.dst) for t in report.transfers]
    kinds = {op.kernel: op.device for op in report.ops}
    assert kinds["MatMul"] == "CPU:0" and kinds["Sum"] == "CPU:1"
    assert "_Arg" not in kinds and "_Retval" not in kinds


@pytest.mark.parametrize(("case", "kwargs"), _cases(test_gpu_time))
def test_the_built_xspaces_of_the_gpu_tests_build_the_same_both_ways(case, kwargs, monkeypatch):
    built = []

    def build_both(trace: host._Trace, recorder: Any = None) -> Any:
        built.append(trace)
        return _both(trace, recorder, functions=False)

    monkeypatch.setattr(inspect.getmodule(case), "build_report", build_both)
    case(**kwargs)
    assert built or "build_report" not in inspect.getsource(case)


# ---------------------------------------------------------------- real captures


def _same_capture(tf: Any, run: Any, *, functions: bool = True) -> Any:
    run()  # traced and warm before the capture
    (data,), recorder = _capture(tf, run)
    return _both(host.read_trace(data), recorder, functions=functions)


def test_a_keras_train_step_builds_the_same_both_ways(tf4):
    report = _same_capture(tf4, train_step(tf4))
    assert len(report.ops) > 100


def test_a_function_split_across_devices_with_nested_functions_builds_the_same_both_ways(tf4):
    report = _same_capture(tf4, split_and_nested(tf4))
    assert report.transfers
    assert {"CPU:0", "CPU:1", "CPU:2"} <= {op.device for op in report.ops}


def test_eager_ops_build_the_same_both_ways(tf4):
    report = _same_capture(tf4, eager_ops(tf4), functions=False)
    assert {"CPU:1", "CPU:3"} <= {op.device for op in report.ops}


# ---------------------------------------------------------------- the loop, called directly


def _reference(
    kernels: Any, known: Any, miss: Any, device: Any, index: Any, origin: Any, spans: Any, ops: list[Any]
) -> tuple[list[Any], list[Any]]:
    """``_add_kernels``' loop, as add_kernels is asked to run it."""
    transfers, collectives = [], []
    for kernel in kernels:
        key, begin, length, _, stats = kernel
        placed = known.get(key)
        if placed is None:
            placed = miss(key)
        names, collective = placed
        if names is SKIPPED and stats is None:
            continue
        start, duration = (begin - origin) // 1000 / 1000, length // 1000 / 1000
        if spans is not None:
            spans.append((begin, begin + length))
        if stats is not None:
            transfers.append((kernel, start, duration))
            continue
        name, kind = key
        for op_name, model_op, asked in names:
            ops.append(_make_op(op_name, model_op, device, asked, index, kind, name, start, duration))
        if collective:
            collectives.append(kernel)
    return transfers, collectives


def _compiled_loop(*args: Any) -> Any:
    return COMPILED.add_kernels(*args, OpPlacement)


def _run(
    loop: Any, kernels: list[Any], placed: dict[Any, Any], origin: Any, spans: bool = True, device: str = "CPU:1"
) -> Any:
    """``(outcome, what it handed back or the error it raised, ops, spans, known)``."""
    known: dict[Any, Any] = {}
    ops: list[Any] = []
    span_list: list[Any] | None = [] if spans else None

    def miss(key: Any) -> Any:
        value = placed[key]  # a KeyError for a key not given
        known[key] = value
        return value

    try:
        transfers, collectives = loop(kernels, known, miss, device, 3, origin, span_list, ops)
    except Exception as error:  # noqa: BLE001  (the outcome compared is the error)
        # the messages of unpacking (3.14 says how many values there were): compared before 3.14
        return ("raised", (type(error), str(error) if sys.version_info < (3, 14) else ""), ops, span_list, known)
    return ("made", (transfers, collectives), ops, span_list, known)


def _assert_same(
    kernels: list[Any], placed: dict[Any, Any], origin: Any, spans: bool = True, device: str = "CPU:1"
) -> Any:
    """The outcome of the compiled loop (asserted the Python loop's): made records, appended spans, errors."""
    compiled = _run(_compiled_loop, kernels, placed, origin, spans, device)
    python = _run(_reference, kernels, placed, origin, spans, device)
    assert compiled[:2] == python[:2]
    _same_records(compiled[2], python[2])
    assert compiled[3:] == python[3:]
    for a, b in zip(compiled[3] or [], python[3] or [], strict=True):
        assert [type(x) for x in a] == [type(x) for x in b]
    return compiled


_OPS = {
    ("a", "MatMul"): ((("a", "MatMul", "CPU:0"),), False),
    ("b", "_FusedMatMul"): ((("b/m", "MatMul", ""), ("b/add", "BiasAdd", ""), ("b", "Relu", "CPU:2")), False),
    ("c", "CollectiveReduceV2"): ((("c", "CollectiveReduceV2", ""),), True),
    ("p", "_Arg"): (SKIPPED, False),
    ("s", "_Send"): (SKIPPED, False),
    ("e", "Empty"): ((), 1),  # no ops but a collective: the Python loop skips it (the empty tuple is _SKIPPED)
    ("l", "Listed"): ([["l", "Listed", "x"]], 0),  # any iterables, as the Python loop takes them
}
_times = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-(2**63), 2**63),
    st.integers(-(10**6), 10**6),
    st.integers(2**53 * 1000 - 3000, 2**53 * 1000 + 3000),
    st.sampled_from([0, 999, -999, 1000, -1000, 1001, -1001, 2**63 - 1, -(2**63), 2**64 + 7]),
)
_kernels = st.lists(
    st.tuples(
        st.sampled_from(sorted(_OPS)),
        _times,
        _times,
        st.integers(0, 3),
        st.one_of(st.none(), st.just({"key": SEND_KEY})),
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(kernels=_kernels, origin=_times, spans=st.booleans())
def test_times_records_and_hand_backs_are_the_python_loops(kernels, origin, spans):
    _assert_same(kernels, _OPS, origin, spans)


@settings(max_examples=100, deadline=None)
@given(
    begin=st.one_of(_times, st.floats(allow_nan=False, allow_infinity=False), st.booleans()),
    length=st.one_of(_times, st.floats(-1e30, 1e30)),
    origin=st.one_of(_times, st.floats(allow_nan=False, allow_infinity=False)),
)
def test_times_that_are_not_64_bit_ints_follow_pythons_arithmetic(begin, length, origin):
    _assert_same([(("a", "MatMul"), begin, length, 0, None)], _OPS, origin)


def test_times_match_pythons_division_exactly_at_the_edges():
    origin = TIMESTAMP_NS * 1000
    for begin, length in [
        (origin + 1, 999),
        (origin - 1, 1000),
        (origin - 10**15 - 1, 2**53 * 1000 + 999),
        (origin + 2**53 * 1000, 2**53 * 1000 + 1000),
        (origin - 2**53 * 1000 - 1, -1),
        (origin + 3 * 10**17 + 123_456, 10**12 + 1),
    ]:
        kernels = [(("a", "MatMul"), begin, length, 0, None)]
        (op,) = _assert_same(kernels, _OPS, origin)[2]
        assert op.start_us == (begin - origin) // 1000 / 1000 and type(op.start_us) is float
        assert op.duration_us == length // 1000 / 1000


@pytest.mark.parametrize(
    ("kernels", "placed"),
    [
        ([(("a", "MatMul"), 1, 2, 0)], _OPS),  # 4 fields
        ([(("a", "MatMul"), 1, 2, 0, None, 9)], _OPS),  # 6 fields
        ([42], _OPS),  # not iterable
        ([(("z", "Z"), 1, 2, 0, None)], _OPS),  # miss raises KeyError
        ([(("a", "MatMul"), 1, 2, 0, None)], {("a", "MatMul"): (((),), False)}),  # an op of no fields
        ([(("a", "MatMul"), 1, 2, 0, None)], {("a", "MatMul"): ((("a", "b", "c", "d"),), False)}),
        ([(("a", "MatMul"), 1, 2, 0, None)], {("a", "MatMul"): ((("a", "b", "c"),), False, 3)}),
        ([(("a", "MatMul"), 1, 2, 0, None)], {("a", "MatMul"): 7}),
        ([(("a", "MatMul"), "1", 2, 0, None)], _OPS),  # a str time
        ([(("a", "MatMul"), 1, None, 0, None)], _OPS),
        ([(("a",), 1, 2, 0, None)], {("a",): _OPS[("a", "MatMul")]}),  # a key of one name
        ([(["a", "MatMul"], 1, 2, 0, None)], _OPS),  # an unhashable key
        ([(("a", "MatMul"), 1, 2, 0, None), (("b", "_FusedMatMul"), 1, 2, 0, None), 5], _OPS),  # after records
    ],
)
def test_errors_are_the_python_loops_and_leak_nothing(kernels, placed):
    device, origin = "".join(["CPU", ":1"]), int("1" * 25)  # objects of this test's own
    gc.collect()
    before = (sys.getrefcount(device), sys.getrefcount(origin), sys.getrefcount(OpPlacement))
    for _ in range(50):
        outcome = _assert_same(kernels, placed, origin, device=device)
        assert outcome[0] == "raised"
        del outcome
    gc.collect()
    # the test's own objects exactly; the class, shared with the process's other threads (a logger's worker of
    # an earlier test may drop its records meanwhile), by no reference more: a leak only adds
    assert (sys.getrefcount(device), sys.getrefcount(origin)) == before[:2]
    assert sys.getrefcount(OpPlacement) <= before[2]


def test_a_none_in_known_is_a_miss_as_in_python():
    kernels = [(("a", "MatMul"), 1000, 2000, 0, None)]
    known = {("a", "MatMul"): None}
    asked = []

    def miss(key: Any) -> Any:
        asked.append(key)
        known[key] = _OPS[key]
        return _OPS[key]

    ops: list[Any] = []
    assert COMPILED.add_kernels(kernels, known, miss, "CPU:0", 0, 0, None, ops, OpPlacement) == ([], [])
    assert asked == [("a", "MatMul")] and known[("a", "MatMul")] is _OPS[("a", "MatMul")] and len(ops) == 1


def test_the_records_are_what_the_python_loop_makes_and_leak_nothing():
    key = ("b", "_FusedMatMul")
    kernels = [(key, 10**22 + 5_000, 2_500_000, 1, None), (("s", "_Send"), 10**22, 10, 1, {"k": 1})]
    known = {key: _OPS[key], ("s", "_Send"): _OPS[("s", "_Send")]}
    device, index, origin = "".join(["CPU", ":1"]), int("12345678901"), int("1" + "0" * 22)  # this test's own
    gc.collect()
    refs = [device, index, origin, key, OpPlacement, *_OPS[key][0][0][:2], kernels[0], kernels[1]]
    before = [sys.getrefcount(x) for x in refs]
    for _ in range(500):
        ops: list[Any] = []
        spans: list[Any] = []
        handed = COMPILED.add_kernels(kernels, known, None, device, index, origin, spans, ops, OpPlacement)
        assert len(ops) == 3 and len(spans) == 2 and handed == ([(kernels[1], 0.0, 0.0)], [])
        del ops, spans, handed
    after = [sys.getrefcount(x) for x in refs]
    assert after[:3] == before[:3]  # this test's own objects
    assert all(n <= m for n, m in zip(after[3:], before[3:], strict=True))  # shared ones: a leak only adds
    ops = []
    COMPILED.add_kernels(kernels[:1], known, None, device, index, origin, None, ops, OpPlacement)
    op = ops[0]
    made = OpPlacement("b/m", "MatMul", "CPU:1", "", index, "_FusedMatMul", "b", 0.005, 2.5, None, ())
    assert op == made and hash(op) == hash(made) and repr(op) == repr(made)
    assert op == _make_op("b/m", "MatMul", "CPU:1", "", index, "_FusedMatMul", "b", 0.005, 2.5)
    assert index in gc.get_referents(op) and gc.is_tracked(made)
    assert not gc.is_tracked(op)  # strings, numbers, None and (): in no cycle, left out of the collector's walks
    odd = []
    COMPILED.add_kernels(kernels[:1], known, None, [device], index, origin, None, odd, OpPlacement)
    assert gc.is_tracked(odd[0])  # a value that may hold references (a list as the device): the collector visits it
    assert dataclasses.asdict(op) == dataclasses.asdict(made)
    assert dataclasses.astuple(op) == dataclasses.astuple(made)
    moved = dataclasses.replace(op, device="CPU:3")
    assert type(moved) is OpPlacement and moved.device == "CPU:3" and moved.name == "b/m" and op.device == "CPU:1"
    assert pickle.loads(pickle.dumps(op)) == op
    assert {op: 1}[made] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.device = "CPU:0"  # type: ignore[misc]
    assert op.launch_us is None and op.kernels == () and op.call is index and op.device is device


def test_2000_builds_do_not_grow_memory():
    trace = host.read_trace(_profile_space(TIMESTAMP_NS).bytes())
    assert COMPILED.add_kernels is host._compiled.add_kernels
    tracemalloc.start()
    try:
        for _ in range(1000):  # the interpreter's free lists of floats and tuples fill (bounded caches)
            build_report(trace)
        gc.collect()
        first, objects = tracemalloc.get_traced_memory()[0], len(gc.get_objects())
        for _ in range(2000):
            build_report(trace)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - first
        # other threads of the process (a logger's worker of an earlier test) make a few objects meanwhile;
        # an object kept per build would be 2,000 of them
        assert len(gc.get_objects()) - objects < 100
    finally:
        tracemalloc.stop()
    assert grown < 16_384, grown  # an object kept per build would be 2000 of them (48 KB of floats)


# ---------------------------------------------------------------- a record laid out otherwise


@dataclasses.dataclass(frozen=True, slots=True)
class _Reordered:  # OpPlacement's fields, two swapped
    type: str
    name: str
    device: str
    requested: str = ""
    call: int = 0
    kernel: str = ""
    kernel_name: str = ""
    start_us: float | None = None
    duration_us: float | None = None
    launch_us: float | None = None
    kernels: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class _Longer:  # one field more
    name: str
    type: str
    device: str
    requested: str = ""
    call: int = 0
    kernel: str = ""
    kernel_name: str = ""
    start_us: float | None = None
    duration_us: float | None = None
    launch_us: float | None = None
    kernels: tuple[str, ...] = ()
    extra: int = 0


@dataclasses.dataclass(frozen=True)
class _Unslotted:  # OpPlacement's fields in an instance dict
    name: str
    type: str
    device: str
    requested: str = ""
    call: int = 0
    kernel: str = ""
    kernel_name: str = ""
    start_us: float | None = None
    duration_us: float | None = None
    launch_us: float | None = None
    kernels: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, weakref_slot=True)
class _Weak:  # a weak reference slot besides
    name: str
    type: str
    device: str
    requested: str = ""
    call: int = 0
    kernel: str = ""
    kernel_name: str = ""
    start_us: float | None = None
    duration_us: float | None = None
    launch_us: float | None = None
    kernels: tuple[str, ...] = ()


class _Plain:  # OpPlacement's slots, not a dataclass
    __slots__ = tuple(f.name for f in dataclasses.fields(OpPlacement))


class _Sub(OpPlacement):  # OpPlacement's layout, one class down
    __slots__ = ()


@pytest.mark.parametrize("stand_in", [_Reordered, _Longer, _Unslotted, _Weak, _Plain, _Sub, tuple, "OpPlacement", None])
def test_a_record_laid_out_otherwise_declines_and_the_python_loop_builds(stand_in, monkeypatch):
    assert not isinstance(stand_in, type) or dataclasses.is_dataclass(stand_in) or stand_in in (_Plain, tuple)
    ops: list[Any] = []
    kernels = [(("a", "MatMul"), 1, 2, 0, None)]
    assert COMPILED.add_kernels(kernels, dict(_OPS), None, "CPU:0", 0, 0, [], ops, stand_in) is None
    assert ops == []
    trace = host.read_trace(_profile_space().bytes())
    expected = _build(trace, None, None).to_json()
    made = []

    def make(*args: Any) -> Any:
        made.append(args)
        return _make_op(*args)

    monkeypatch.setattr(building, "_make_op", make)
    counting = _Counting(stand_in)
    report = _build(trace, None, counting)
    assert report.to_json() == expected
    assert counting.declined > 0 and counting.built == 0
    assert len(made) == len(report.ops) - 1  # each op but the eager op's: made by the Python loop


def test_the_real_record_is_built_compiled():
    counting = _Counting()
    _build(host.read_trace(_profile_space().bytes()), None, counting)
    assert counting.built > 0 and counting.declined == 0


def test_a_compiled_module_without_the_loop_builds_in_python():
    trace = host.read_trace(_profile_space().bytes())
    old = _build(trace, None, SimpleNamespace(walk=COMPILED.walk, planes=COMPILED.planes))
    assert old.to_json() == _build(trace, None, None).to_json()
