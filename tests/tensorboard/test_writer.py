"""Placement written to TensorBoard and read back: by TensorBoard's event loading and by a real server."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import pytest

from tests.tensorboard.conftest import tensorboard
from tfdevices.core.errors import InputError
from tfdevices.tensorboard import format_placement, merged_graph_def, read_placement, write_placement
from tfdevices.verify import PlacementReport, capture


@pytest.fixture(scope="module")
def report(tf4) -> PlacementReport:
    tf = tf4

    @tf.function
    def step(x):
        with tf.name_scope("left"), tf.device("/CPU:1"):
            y = tf.matmul(x, x)
        with tf.name_scope("right"), tf.device("/CPU:2"):
            z = tf.nn.relu(y)
        return tf.reduce_sum(z)

    x = tf.ones([4, 4])
    step(x)
    eager_and_function = capture(lambda: (step(x), tf.math.square(x)))
    return eager_and_function


@pytest.fixture(scope="module")
def logdir(report, tmp_path_factory) -> str:
    run = tmp_path_factory.mktemp("tb") / "run1"
    return write_placement(report, run, step=3)


def _ns(report, call: int) -> str:
    """The namespace of call ``call``: named after the function called (``step``), or ``eager``."""
    traced = {name for name, _ in report.graphs}
    return f"{'step' if f'call_{call:03d}' in traced else 'eager'}_{call:03d}"


def _devices_by_suffix(graph_def) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for node in graph_def.node:
        found.setdefault(node.name.split("/", 1)[1], set()).add(node.device)
    return found


def test_merged_graph_keeps_devices_namespaces_and_senders(report):
    merged = merged_graph_def(report)
    names = [n.name for n in merged.node]
    assert len(names) == len(set(names)), "merged node names must be unique"
    devices = _devices_by_suffix(merged)
    assert devices["left/MatMul"] == {"/job:localhost/replica:0/task:0/device:CPU:1"}
    assert devices["right/Relu"] == {"/job:localhost/replica:0/task:0/device:CPU:2"}
    by_name = {n.name: n for n in merged.node}
    ran = {f"{_ns(report, op.call)}/{op.name}" for op in report.ops}
    sources = [f"{_ns(report, t.call)}/{t.tensor.rsplit(':', 1)[0]}" for t in report.transfers]
    assert any(name in ran for name in sources)
    for t, name in zip(report.transfers, sources):
        if name in ran:  # a copied tensor's op (that ran as written) shows on the sending device
            assert by_name[name].device.endswith(f"device:{t.src}")
    # namespaces are named after what was called: the function 'step', then the eager Square
    assert {n.name.split("/")[0] for n in merged.node} == {"step_000", "eager_001"}
    # the eager Square ran as its own call: its own namespace
    square = [n for n in merged.node if n.op == "Square"]
    assert (
        len(square) == 1
        and square[0].name.split("/")[0]
        != by_name[next(n for n in by_name if n.endswith("/left/MatMul"))].name.split("/")[0]
    )


def test_event_accumulator_reads_graph_text_and_scalars(report, logdir):
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    def value(event):
        return tensor_util.make_ndarray(event.tensor_proto).item()

    acc = ea.EventAccumulator(logdir, size_guidance={ea.TENSORS: 0})
    acc.Reload()
    graph = acc.Graph()
    on = {n.name.split("/", 1)[1]: n.device for n in graph.node}
    assert on["left/MatMul"].endswith("device:CPU:1")
    assert on["right/Relu"].endswith("device:CPU:2")
    tensors = acc.Tags()[ea.TENSORS]
    for device, count in report.op_counts.items():
        (event,) = acc.Tensors(f"placement/ops/{device}")
        assert (event.step, value(event)) == (3, count)
    pairs = {f"{t.src} -> {t.dst}" for t in report.transfers}
    assert {"CPU:0 -> CPU:1", "CPU:1 -> CPU:2"} <= pairs
    for pair in pairs:
        count = len([t for t in report.transfers if f"{t.src} -> {t.dst}" == pair])
        (event,) = acc.Tensors(f"placement/transfers/{pair}")
        assert value(event) == count
        (event,) = acc.Tensors(f"placement/transfer_bytes/{pair}")
        assert value(event) == sum(t.bytes for t in report.transfers if f"{t.src} -> {t.dst}" == pair)
    assert "placement/collectives" in tensors
    (text,) = acc.Tensors("placement/report")
    assert "| CPU:1 |" in text.tensor_proto.string_val[0].decode()
    (stored,) = acc.Tensors("placement/json")
    assert json.loads(stored.tensor_proto.string_val[0])["ops"][0]["name"] == report.ops[0].name


def test_read_placement_round_trip(report, logdir):
    again = read_placement(os.path.dirname(logdir))  # found recursively below the parent
    assert again.ops == report.ops and again.transfers == report.transfers


@pytest.mark.parametrize(
    "make, first_words",
    [
        (lambda tmp: str(tmp / "missing"), "log directory '{path}' does not exist"),
        (
            lambda tmp: (tmp / "notes.txt").write_text("x") and str(tmp),
            "log directory '{path}' holds no TensorBoard event files; it contains: notes.txt",
        ),
    ],
)
def test_read_placement_bad_logdirs(tmp_path, make, first_words):
    path = make(tmp_path)
    with pytest.raises(InputError) as err:
        read_placement(path)
    assert str(err.value).startswith(first_words.format(path=path))


def test_read_placement_in_a_run_without_placement(tf4, tmp_path):
    tf = tf4
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        tf.summary.scalar("loss", 1.0, step=0)
    with pytest.raises(InputError, match=r"holds 1 run\(s\) but no placement summary 'placement/json'; its tags: loss"):
        read_placement(tmp_path)


def test_format_placement_gives_the_stored_report(report, logdir):
    assert format_placement(logdir).startswith(report.summary())
    assert PlacementReport.from_json(format_placement(logdir, as_json=True)) == report
    with pytest.raises(InputError, match="holds 1 run\\(s\\) but no placement summary 'other/json'"):
        format_placement(logdir, name="other")


@pytest.mark.parametrize(
    "bad, first_words",
    [
        ({"report": "text"}, "write_placement(report=...): expected a PlacementReport, got str"),
        ({"step": -1}, "write_placement(step=-1): expected a step >= 0"),
        ({"name": ""}, "write_placement(name=''): expected a non-empty tag prefix"),
    ],
)
def test_write_placement_bad_arguments(report, tmp_path, bad, first_words):
    kwargs = {"report": report, "logdir": tmp_path, **bad}
    with pytest.raises(InputError) as err:
        write_placement(**kwargs)
    assert str(err.value).startswith(first_words)


@pytest.fixture
def tensorboard_server(logdir):
    """A real ``tensorboard --logdir`` on a free localhost port, listing run1; stopped at teardown."""
    with tensorboard(os.path.dirname(logdir), expect_run="run1") as url:
        yield url


def test_tensorboard_server_graph_endpoint_shows_real_devices(tensorboard_server, report):
    from google.protobuf import text_format
    from tensorboard.compat.proto import graph_pb2

    with urllib.request.urlopen(f"{tensorboard_server}/data/plugin/graphs/graph?run=run1", timeout=30) as response:
        body = response.read().decode()
    graph = text_format.Parse(body, graph_pb2.GraphDef())
    served = {n.name: n.device for n in graph.node}
    expected = {f"{_ns(report, op.call)}/{op.name}": op.device for op in report.ops}
    assert expected and set(expected) <= set(served)
    for name, device in expected.items():
        assert served[name].endswith(f"device:{device}"), (name, served[name], device)


@pytest.mark.parametrize("where, words", [("file", "is a file, not a directory"), ("file/run1", "lies under")])
def test_write_placement_into_a_file_path_is_an_input_error(report, tmp_path, where, words):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(InputError) as err:
        write_placement(report, tmp_path / where)
    assert str(err.value).startswith("write_placement(logdir=...)=") and words in str(err.value)
    assert (tmp_path / "file").read_text() == "not a directory"


def test_event_files_of_one_run_are_read_in_the_order_they_were_written(report, tmp_path):
    for step in range(12):  # more files than one digit numbers: names must still sort in writing order
        write_placement(report, tmp_path, step=step)
    assert read_placement(tmp_path).notes[0].startswith("stored in run '.' at step 11: the latest of 12 step(s)")


def test_read_placement_says_which_run_and_step_it_shows_among_several(report, tmp_path):
    write_placement(report, tmp_path / "a", step=1)
    write_placement(report, tmp_path / "a", step=5)
    only = read_placement(tmp_path / "a")
    assert only.notes[0].startswith("stored in run '.' at step 5: the latest of 2 step(s) there; pass a run")
    write_placement(report, tmp_path / "b", step=0)  # written last: the latest of the two runs
    both = read_placement(tmp_path)
    assert both.notes[0].startswith(
        "stored in run 'b' at step 0: the latest of 1 step(s) there and of 2 runs (the others: a)"
    )
    assert both.ops == report.ops
