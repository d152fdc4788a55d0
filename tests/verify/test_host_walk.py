"""The host plane's walk: kernels tied to their executor steps, across threads when a step's span is missing.

Built XSpaces in the shapes TensorFlow's profiler writes (``tests/xspaces.py``): the thread
pool's ``ThreadpoolListener::Record`` (a closure given to the pool, its id in ``_p``) inside a
step, then ``StartRegion``/``StopRegion`` (its run, the same id in ``_c``) on a worker thread.
"""

from __future__ import annotations

from tests.xspaces import Space, host_call
from tfdevices.verify.host import CONTEXT, KEY, read_trace


def _contexts(trace) -> dict[str, int]:
    return {k[KEY][0]: k[CONTEXT] for k in trace.kernels}


def _one_call(space: Space, context: int = 7) -> None:
    host_call(space, "f", 0, 100, context, [("a", "MatMul", 3, 2), ("b", "Relu", 6, 1)])


def test_kernels_inside_their_step_are_read_in_one_pass_and_the_thread_pool_is_not_read():
    space = Space()
    _one_call(space)
    host = space.plane("/host:CPU")
    host.event("tf_Compute/7", "ThreadpoolListener::Record", 4, 0, _p=55)  # read only when a kernel needs it
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
    assert [e.contexts for e in trace.executions] == [[7]]  # read once: the second pass starts afresh
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
