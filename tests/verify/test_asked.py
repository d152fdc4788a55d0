"""The device a partition's ops asked for: read once per traced graph, not at all when none asked."""

from __future__ import annotations

from tfdevices.verify import capture
from tfdevices.verify.graph import FunctionGraph


def test_a_graph_whose_ops_asked_for_no_device_reads_no_kernel_and_one_whose_callee_asked_does(tf4):
    tf = tf4

    @tf.function
    def plain(x):
        return tf.matmul(x, x)

    @tf.function
    def inner(x):
        with tf.device("/CPU:1"):
            return tf.matmul(x, x)

    @tf.function
    def outer(x):
        return inner(x) + 1

    x = tf.ones([2, 2])
    plain_graph, outer_graph = plain.get_concrete_function(x).graph, outer.get_concrete_function(x).graph
    assert FunctionGraph(plain_graph).asks_nothing() is True
    assert FunctionGraph(outer_graph).asks_nothing() is False  # not the caller's ops: the function it calls asked
    call = next(op.name for op in outer_graph.get_operations() if op.type.endswith("PartitionedCall"))
    assert FunctionGraph(outer_graph).asked_by([(f"{call}/MatMul", "MatMul")]).endswith("CPU:1")
    assert FunctionGraph(plain_graph).asked_by([("MatMul", "MatMul")]) == ""
    report = capture(outer, x)
    assert {op.device for op in report.ops if op.type == "MatMul"} == {"CPU:1"}
