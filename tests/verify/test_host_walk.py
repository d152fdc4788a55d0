"""The host plane's walk: kernels tied to their executor steps, across threads when a step's span is missing.

Built XSpaces in the shapes TensorFlow's profiler writes (``tests/xspaces.py``): the thread
pool's ``ThreadpoolListener::Record`` (a closure given to the pool, its id in ``_p``) inside a
step, then ``StartRegion``/``StopRegion`` (its run, the same id in ``_c``) on a worker thread.
Then the corners of protobuf's messages the walk reads (a oneof, a stat repeated, every value
type, a damaged profile) and random host planes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from tests.xspaces import Space, gpu_kernel, host_call
from tfdevices.verify.building import build_report
from tfdevices.verify.host import CONTEXT, KEY, START, STATS, parse_space, read_trace


def _contexts(trace) -> dict[str, int]:
    return {k[KEY][0]: k[CONTEXT] for k in trace.kernels}


def _one_call(space: Space, context: int = 7) -> None:
    host_call(space, "f", 0, 100, context, [("a", "MatMul", 3, 2), ("b", "Relu", 6, 1)])


def test_kernels_inside_their_step_are_read_in_one_pass():
    space = Space()
    _one_call(space)
    host = space.plane("/host:CPU")
    host.event("tf_Compute/7", "ThreadpoolListener::Record", 4, 0, _p=55)  # its id decoded only when a kernel needs it
    trace = read_trace(space.bytes())
    assert _contexts(trace) == {"a": 7, "b": 7}
    assert [e.contexts for e in trace.executions] == [[7]]
    assert not trace.unplaced


def test_a_kernel_whose_step_span_is_missing_takes_the_step_that_scheduled_its_closure():
    space = Space()
    _one_call(space)
    host = space.plane("/host:CPU")
    host.event("tf_Compute/7", "ThreadpoolListener::Record", 4, 0, _p=55)
    host.event("worker", "ThreadpoolListener::StartRegion", 20, 0, _c=55)
    host.event("worker", "c:MatMul", 21, 3, display="MatMul")  # its ExecutorState::Process was not written
    host.event("worker", "ThreadpoolListener::StopRegion", 25, 0)
    host.event("worker", "d:MatMul", 30, 1, display="MatMul")  # after the closure: nothing ties it
    trace = read_trace(space.bytes())
    assert _contexts(trace) == {"a": 7, "b": 7, "c": 7, "d": 0}
    assert [k[KEY][0] for k in trace.unplaced] == ["d"]
    assert [e.contexts for e in trace.executions] == [[7]]  # each call read once
    assert trace.host_events == 10


def test_work_an_asynchronous_kernel_schedules_when_it_completes_continues_its_step():
    space = Space()
    _one_call(space)
    host = space.plane("/host:CPU")
    start = host.event("tf_Compute/7", "ExecutorState::ProcessAsync::Start", 4, 0.5)
    for stat, value in (("name", "r"), ("kernel_type", "_Recv"), ("_p", 9)):  # "name" is event()'s own argument
        host._stat(start, stat, value)
    host.event("rpc", "ExecutorState::ProcessAsync::Done", 40, 5, _c=9)
    host.event("rpc", "ThreadpoolListener::Record", 41, 0, _p=66)
    host.event("worker", "ThreadpoolListener::StartRegion", 50, 0, _c=66)
    host.event("worker", "e:Relu", 51, 2, display="Relu")
    host.event("worker", "ThreadpoolListener::StopRegion", 54, 0)
    trace = read_trace(space.bytes())
    assert _contexts(trace) == {"a": 7, "b": 7, "r": 7, "e": 7}
    assert not trace.unplaced


def test_a_closure_that_schedules_itself_ends_the_search():
    space = Space()
    _one_call(space)
    host = space.plane("/host:CPU")
    host.event("worker", "ThreadpoolListener::StartRegion", 20, 0, _c=55)
    host.event("worker", "ThreadpoolListener::Record", 20.5, 0, _p=55)  # a loop of links, not a step
    host.event("worker", "c:MatMul", 21, 3, display="MatMul")
    trace = read_trace(space.bytes())
    assert _contexts(trace)["c"] == 0
    assert [k[KEY][0] for k in trace.unplaced] == ["c"]


def test_names_are_read_as_kernels_only_with_the_display_name_tensorflow_gives_kernels():
    space = Space()
    _one_call(space)
    host = space.plane("/host:CPU")
    host.event("tf_Compute/7", "user:annotation", 4, 0.5)  # a TraceMe of the program's, no display name
    trace = read_trace(space.bytes())
    assert set(_contexts(trace)) == {"a", "b"}
    again = read_trace(space.bytes())  # what each name means is remembered: read the same way twice
    assert _contexts(again) == _contexts(trace)


def _async(host, line: str, event: str, at: float, name: str, **ids: int) -> None:
    made = host.event(line, event, at, 0.5)
    for stat, value in (("name", name), ("kernel_type", "CollectiveReduceV2"), *ids.items()):
        host._stat(made, stat, value)  # "name" is event()'s own argument


def test_an_asynchronous_kernel_whose_start_the_trace_lost_is_read_from_its_completion():
    # A span is written when it ends: a ProcessAsync::Start whose thread was descheduled until after
    # the profiler stopped is lost (seen under load: 3 captures in 40), its Done is not.
    space = Space()
    _one_call(space)
    host = space.plane("/host:CPU")
    _async(host, "tf_Compute/7", "ExecutorState::ProcessAsync::Start", 4, "kept", _p=9)
    _async(host, "collective_ops/1", "ExecutorState::ProcessAsync::Done", 40, "kept", _c=9)
    _async(host, "collective_ops/2", "ExecutorState::ProcessAsync::Done", 42, "lost", _c=11)
    _async(host, "collective_ops/2", "ExecutorState::ProcessAsync::Done", 60, "untied")  # no _c: nothing to pair
    trace = read_trace(space.bytes())
    assert _contexts(trace) == {"a": 7, "b": 7, "kept": 7, "lost": 0}
    (lost,) = trace.unplaced
    assert lost == (("lost", "CollectiveReduceV2"), 42_000_000, 0, 0, None)  # at its completion, no time of its own
    assert trace.lost_starts == ["lost"]


def test_each_steps_done_callback_is_kept_by_its_context_the_first_one():
    # A step's done callback runs after its last kernel: the build ties a kernel of no step to the
    # one step of its call not yet done (TensorFlow 2.16 writes no thread-pool links).
    space = Space()
    _one_call(space)
    host = space.plane("/host:CPU")
    host.event("tf_Compute/7", "ExecutorDoneCallback", 8, 0.5, _c=7)
    host.event("worker", "ExecutorDoneCallback", 9, 0.5, _c=7)  # not TensorFlow's way: the first counts
    host.event("worker", "ExecutorDoneCallback", 20, 0.5, _c=8)
    trace = read_trace(space.bytes())
    assert trace.done_at == {7: 8_000_000, 8: 20_000_000}


# ---------------------------------------------------------------- protobuf's corners, as the walk reads them


def _corners() -> Space:
    space = Space()
    plane = space.plane("/host:CPU")
    plane.event("l", "ExecutorState::Process", 0, 100, _c=5)
    plane.event("l", "FunctionRun", 10, 5, _p=9)
    plane.event("l", "a:MatMul", 15, 1, display="MatMul")  # starts where the run ends: the step's
    plane.event("l", "b:MatMul", 14, 1, display="MatMul")  # the run's span was closed by the one before
    return space


def test_a_kernel_starting_where_a_span_ends_is_outside_it():
    trace = read_trace(_corners().bytes())
    assert [(k[KEY][0], k[CONTEXT]) for k in trace.kernels] == [("a", 5), ("b", 5)]


def test_num_occurrences_clears_the_offset_and_the_last_stat_of_an_id_counts():
    space = _corners()
    line = space.space.planes[0].lines[0]
    line.events[2].num_occurrences = 3  # the oneof: offset_ps now reads 0, inside the run
    run = line.events[1]
    run.stats.add().CopyFrom(run.stats[0])
    run.stats[-1].int64_value = 6  # the last _p holds
    moved = space.plane("/host:CPU").event("l", "c:Relu", 20, 1, display="Relu")
    moved.offset_ps = -(2**63)  # the most negative offset
    trace = read_trace(space.bytes())
    assert [(k[KEY][0], k[START], k[CONTEXT]) for k in trace.kernels] == [
        ("a", 0, 6),
        ("b", 14_000_000, 6),
        ("c", -(2**63), 6),
    ]


def _add_stat(plane: Any, event: Any, name: str, value: Any) -> None:
    stat = event.stats.add()
    stat.metadata_id = plane.stat_id(name)
    if value is None:
        return
    if isinstance(value, tuple):
        if value[0] == "uint":
            stat.uint64_value = value[1]
        else:
            stat.ref_value = value[1]
    elif isinstance(value, bytes):
        stat.bytes_value = value
    elif isinstance(value, bool):
        stat.uint64_value = int(value)
    elif isinstance(value, int):
        stat.int64_value = value
    elif isinstance(value, float):
        stat.double_value = value
    else:
        stat.str_value = value


def test_a_transfers_stats_of_every_type_are_read():
    space = Space()
    plane = space.plane("/host:CPU")
    plane.event("l", "ExecutorState::Process", 0, 100, _c=5)
    send = plane.event("l", "s:_Send", 1, 1, display="_Send")
    for name, value in (("d", 1.5), ("u", ("uint", 2**64 - 1)), ("i", -3), ("s", "é"), ("b", b"\x00\xff")):
        _add_stat(plane, send, name, value)
    _add_stat(plane, send, "r", ("ref", plane.stat_id("d")))
    _add_stat(plane, send, "r2", ("ref", 2**63 + 5))  # no such stat: the int
    _add_stat(plane, send, "n", None)
    (kernel,) = read_trace(space.bytes()).kernels
    assert kernel[STATS] == {
        "d": 1.5,
        "u": 2**64 - 1,
        "i": -3,
        "s": "é",
        "b": b"\x00\xff",
        "r": "d",
        "r2": 2**63 + 5,
        "n": None,
    }


def test_a_stat_whose_metadata_the_plane_lacks_is_left_out():
    """A damaged profile: a call's stat names metadata the plane does not hold; the rest of the call is read."""
    space = Space()
    host_call(space, "f", 0, 100, 7, [("a", "MatMul", 3, 2)])
    plane = space.space.planes[0]
    call = next(e for line in plane.lines for e in line.events if plane.event_metadata[e.metadata_id].name)
    call.stats.add(metadata_id=max(plane.stat_metadata) + 50, int64_value=1)
    trace = read_trace(space.bytes())
    assert [k[KEY] for k in trace.kernels] == [("a", "MatMul")]
    assert [(e.name, e.contexts) for e in trace.executions] == [("f", [7])]


def test_an_event_metadata_key_given_twice_holds_its_last_entry_as_protobuf_reads_it():
    plane = _corners().space.planes[0]
    key = next(k for k, m in plane.event_metadata.items() if m.name == "a:MatMul")
    entry = type(plane)()
    entry.event_metadata[key].name = "a:Relu"  # the map's last entry holds: "a" ran Relu
    entry.event_metadata[key].display_name = "Relu"
    data = _message(1, plane.SerializeToString() + entry.SerializeToString())
    assert ("a", "Relu") in [k[KEY] for k in read_trace(data).kernels]


def _message(field: int, body: bytes) -> bytes:
    """A length-delimited field: its tag, its length (a varint), ``body``."""
    length, n = b"", len(body)
    while True:
        length += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return bytes([field << 3 | 2]) + length + body


# ---------------------------------------------------------------- random host planes

_KERNELS = ["MatMul", "Relu", "_Send", "_Recv", "_HostSend", "AddV2", "XlaLaunch"]
_CALLS = [
    "EagerExecute",
    "FunctionRun",
    "ExecutorState::Process",
    "ExecutorState::ProcessAsync::Start",
    "ExecutorState::ProcessAsync::Done",
    "ExecutorDoneCallback",
    "ThreadpoolListener::Record",
    "ThreadpoolListener::StartRegion",
    "ThreadpoolListener::StopRegion",
    "train",
    "test",
    "SomethingElse",
    "a:b",
]
_STAT_NAMES = ["_c", "_p", "step_num", "eager_op", "is_func", "name", "kernel_type", "other", "send key"]
_values = st.one_of(
    st.integers(0, 9),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.sampled_from(_STAT_NAMES),
    st.binary(max_size=4),
    st.tuples(st.just("uint"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("ref"), st.integers(0, 12)),
    st.just(None),
)
_event = st.tuples(
    st.sampled_from(["python", "tf_Compute/1", "tf_Compute/1", "worker"]),
    st.one_of(
        st.sampled_from([*_CALLS, "FunctionRun", "EagerExecute", "ExecutorState::Process"]),
        st.tuples(st.sampled_from(["a", "b", "f", "g/h"]), st.sampled_from(_KERNELS), st.booleans()),
    ),
    st.integers(0, 15),  # a small grid: events often start where a span ends
    st.one_of(st.integers(0, 8), st.just(0)),
    st.lists(st.tuples(st.sampled_from(_STAT_NAMES), _values), max_size=4),
)


def _random_space(events: list[Any], timestamps: list[int], gpu: bool, steps: list[int], ordered: bool) -> bytes:
    """A host plane of ``events``; each line opens with a step of context ``steps[i]`` (0: none) over all of it."""
    space = Space()
    plane = space.plane("/host:CPU")
    for index, (line, timestamp) in enumerate(zip(["python", "tf_Compute/1", "worker"], timestamps, strict=True)):
        plane.line(line, timestamp)
        if steps[index]:
            plane.event(line, "ExecutorState::Process", 0, 100, _c=steps[index])
    for line, what, start, duration, stats in sorted(events, key=lambda e: e[2]) if ordered else events:
        if isinstance(what, tuple):
            op, kernel, as_kernel = what  # a name has one display name (see kinds._kind_of_name)
            name, display = (f"{op}:{kernel}", kernel) if as_kernel else (f"not-{op}:{kernel}", "other")
        else:
            name, display = what, ""
        event = plane.line(line).events.add()
        event.metadata_id = plane.event_id(name, display)
        event.offset_ps = start * 1000
        event.duration_ps = duration * 1000
        for stat, value in stats:
            _add_stat(plane, event, stat, value)
    if gpu:
        gpu_kernel(space, 0, 7, "gemm", 10, 5, "a:MatMul")
    space.space.planes.add(name="Task Environment")
    return space.bytes()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_event, max_size=40),
    st.lists(st.sampled_from([0, 1, 1_800_000_000_000_000_000, -5, 2**62]), min_size=3, max_size=3),
    st.booleans(),
    st.lists(st.sampled_from([0, 5, 6, 2**63 - 1]), min_size=3, max_size=3),
    st.booleans(),
)
def test_random_host_planes_are_read_and_built_whole(events, timestamps, gpu, steps, ordered):
    """Any host plane is read (no error), each of its events counted once, the same from bytes as from
    protobuf's message, and built into a report; a kernel left unplaced has no step."""
    data = _random_space(events, timestamps, gpu, steps, ordered)
    trace, again = read_trace(data), read_trace(parse_space(data))
    assert dataclasses.astuple(trace) == dataclasses.astuple(again)
    assert trace.host_events == len(events) + sum(1 for s in steps if s)
    assert trace.skipped == [] and bool(trace.gpus) is gpu  # a plane with no line is not named
    assert all(type(k[CONTEXT]) is int and type(k[START]) is int for k in trace.kernels)
    assert all(kernel in trace.kernels and kernel[CONTEXT] == 0 for kernel in trace.unplaced)
    build_report(trace)
