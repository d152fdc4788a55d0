"""The dashboard's views, from real captures and from small reports with times."""

from __future__ import annotations

import json
import os

import pytest

from tests.graphs import one_then_four
from tests.helpers import REPO
from tfdevices.tensorboard import views

# one worker builds the captures and the tensorboard server these tests share
pytestmark = pytest.mark.xdist_group("dashboard")


def _timed_report() -> dict:
    """Two devices; CPU:1 does 4x the work of CPU:0; one copy between them."""
    ops = [
        {
            "name": "m/a/MatMul",
            "type": "MatMul",
            "kernel": "_MklMatMul",
            "device": "CPU:0",
            "requested": "CPU:0",
            "call": 1,
            "start_us": 100.0,
            "duration_us": 10.0,
        },
        {
            "name": "m/a/Relu",
            "type": "Relu",
            "device": "CPU:0",
            "requested": "",
            "call": 1,
            "start_us": 105.0,
            "duration_us": 10.0,
        },  # overlaps the MatMul: busy counts the union
        {
            "name": "m/b/MatMul",
            "type": "MatMul",
            "device": "CPU:1",
            "requested": "CPU:1",
            "call": 1,
            "start_us": 130.0,
            "duration_us": 60.0,
        },
    ]
    copies = [
        {
            "src": "CPU:0",
            "dst": "CPU:1",
            "tensor": "m/a/Relu:0",
            "dtype": "float32",
            "shape": [4, 4],
            "bytes": 64,
            "call": 1,
            "start_us": 116.0,
            "duration_us": 12.0,
        }
    ]
    return {"ops": ops, "transfers": copies, "collectives": []}


def test_busy_time_is_the_union_of_op_times():
    assert views.busy_us(_timed_report()) == {"CPU:0": 15.0, "CPU:1": 60.0}


def test_busy_time_prefers_the_reports_own_device_figures():
    report = {**_timed_report(), "busy_us": {"CPU:0": 7.5}}
    assert views.busy_us(report) == {"CPU:0": 7.5, "CPU:1": 60.0}


def test_timeline_positions_ops_and_copies_from_the_first_event():
    line = views.timeline(_timed_report())
    assert line["timed"] and line["lanes"] == ["CPU:0", "CPU:1"]
    assert [(lane, start, dur, run) for lane, start, dur, _, _, run in line["ops"]] == [
        (0, 0.0, 10.0, -1),
        (0, 5.0, 10.0, -1),
        (1, 30.0, 60.0, -1),
    ]
    assert line["runs"] == []  # no XLA cluster
    assert line["transfers"] == [[0, 1, 16.0, 12.0, "m/a/Relu:0"]]
    assert line["end"] == 90.0
    assert line["types"][line["ops"][0][4]] == "_MklMatMul"  # the kernel when known, else the type


def _untimed(report) -> dict:
    """The report as an older tfdevices stored it: no op or copy times, no busy time."""
    data = json.loads(report.to_json())
    data.pop("busy_us", None)
    for record in data["ops"] + data["transfers"]:
        record.pop("start_us", None)
        record.pop("duration_us", None)
    return data


def test_views_without_times_degrade_to_order_and_unknowns(to_device_report):
    report = _untimed(to_device_report)
    line = views.timeline(report)
    assert not line["timed"]
    for lane in range(len(line["lanes"])):
        starts = [start for on, start, *_ in line["ops"] if on == lane]
        assert starts == [float(i) for i in range(len(starts))]
    assert views.busy_us(report) == {}
    assert all(d["busy_us"] is None for d in views.device_table(report))
    assert all(c["us"] is None for c in views.transfer_matrix(report)["cells"])


def test_transfer_matrix_counts_bytes_and_lists_tensors(to_device_report):
    report = json.loads(to_device_report.to_json())
    matrix = views.transfer_matrix(report)
    assert matrix["devices"] == list(to_device_report.devices)
    for cell in matrix["cells"]:
        copies = to_device_report.transfers_between(cell["src"], cell["dst"])
        assert cell["count"] == len(copies)
        assert cell["bytes"] == sum(t.bytes or 0 for t in copies)
        assert [t["tensor"] for t in cell["tensors"]] == [t.tensor for t in copies]


def _node(tree: dict, path: str) -> dict:
    """The node at ``path`` as a dict, found by walking parents."""
    nodes = tree["nodes"]

    def path_of(i: int) -> str:
        name, parent = nodes[i][0], nodes[i][1]
        return name if parent < 0 else f"{path_of(parent)}/{name}"

    (i,) = [i for i in range(len(nodes)) if path_of(i) == path]
    _, parent, ops, asked, ran, mismatch, busy, op = nodes[i]
    names = tree["devices"]
    return {
        "index": i,
        "parent": parent,
        "ops": ops,
        "asked": [names[k] for k in asked],
        "ran": [names[k] for k in ran],
        "mismatch": mismatch,
        "busy_us": busy,
        "op": op,
    }


def test_scope_tree_puts_the_mismatched_layer_first(to_device_report):
    report = json.loads(to_device_report.to_json())
    tree = views.scope_tree(report)
    nodes = tree["nodes"]
    (root,) = [n for n in nodes if n[1] < 0]
    assert nodes[0] is root and root[2] == len(to_device_report.ops)
    children = [n[0] for n in nodes if n[1] == 0]
    assert children[0].startswith("to_b") and children[1].startswith("to_c") and children[2].startswith("a")
    to_b = _node(tree, f"{root[0]}/{children[0]}")
    assert (to_b["asked"], to_b["ran"], to_b["mismatch"]) == (["CPU:1"], ["CPU:0", "CPU:1"], True)
    assert to_b["index"] == 1  # depth first: the first mismatched layer comes right after the root
    a = _node(tree, f"{root[0]}/{children[2]}")
    assert (a["asked"], a["ran"], a["mismatch"]) == ([], ["CPU:0"], False)
    for i, op in enumerate(to_device_report.ops):  # every op is a node that names its type and device
        name, _, _, _, _, _, _, cell = nodes[tree["node_of_op"][i]]
        assert name == op.name.rsplit("/", 1)[-1] and cell[0] == op.type
        assert tree["devices"][cell[2]] == op.device


def test_scope_tree_sums_op_times_up_the_scopes():
    tree = views.scope_tree(_timed_report())
    assert _node(tree, "m")["busy_us"] == 80.0
    assert _node(tree, "m/a")["busy_us"] == 20.0
    assert _node(tree, "m/a/MatMul")["op"] == ["MatMul", "_MklMatMul", 0, "CPU:0", 10.0, 1]
    assert _node(tree, "m/b")["ops"] == 1


def test_weight_reads_are_the_crossing_variable_reads(to_device_report):
    report = json.loads(to_device_report.to_json())
    rows = views.weight_reads(report)
    expected = {r.op: r for r in to_device_report.variables_on() if r.crosses_devices}
    assert {r["op"] for r in rows} == set(expected)
    for row in rows:
        assert row["stored_on"] == "CPU:0" and row["read_on"] == [
            d for d in expected[row["op"]].read_on if d != "CPU:0"
        ]
        assert row["bytes"] == expected[row["op"]].bytes


def test_diff_view_matches_the_reports_diff(to_device_report, plain_report):
    before, after = json.loads(plain_report.to_json()), json.loads(to_device_report.to_json())
    view = views.diff_view(before, after)
    expected = plain_report.diff(to_device_report)
    assert [tuple(m) for m in view["moved"]] == list(expected.moved)
    assert [tuple(a) for a in view["added"]] == list(expected.added)
    assert [tuple(r) for r in view["removed"]] == list(expected.removed)
    assert views.diff_view(after, after)["unchanged"]


@pytest.mark.parametrize("report", [{}, {"ops": [], "transfers": []}])
def test_empty_reports_give_empty_views(report):
    view = views.dashboard_view(report)
    assert view["devices"] == [] and view["scopes"]["nodes"] == [] and view["timeline"]["ops"] == []
    assert view["summary"]["ops"] == 0 and not view["summary"]["timed"]


def test_real_capture_views_carry_its_times(to_device_report):
    report = json.loads(to_device_report.to_json())
    view = views.dashboard_view(report)
    assert view["summary"]["timed"] and view["timeline"]["timed"]
    assert {d["name"]: d["busy_us"] for d in view["devices"]} == to_device_report.busy_us
    assert all(d["busy_us"] > 0 for d in view["devices"])
    assert all(duration >= 0 for _, _, duration, *_ in view["timeline"]["ops"])
    root = view["scopes"]["nodes"][0]
    assert root[6] > 0  # the model's scope sums its kernels' time


def test_each_devices_busy_time_in_the_views_is_the_reports(tf4):
    """CPU:0 runs one matmul, CPU:1 a chain of four of the same size after it: the report places them so, and the
    views' busy time and kernel counts are the report's, device by device. (That the device given four times the work
    shows about four times the time is measured, not asserted: benchmarks/bench_busy.py.)
    """
    from tfdevices.verify import capture

    step, x = one_then_four(tf4)
    report = capture(step, x)
    busy = views.busy_us(json.loads(report.to_json()))
    assert busy == report.busy_us and set(busy) == {"CPU:0", "CPU:1"} and all(t > 0 for t in busy.values()), busy
    matmuls = [(op.name, op.device) for op in report.ops if op.type == "MatMul"]
    assert sorted(device for _, device in matmuls) == ["CPU:0"] + ["CPU:1"] * 4, matmuls
    table = {d["name"]: d for d in views.device_table(json.loads(report.to_json()))}
    assert {name: row["busy_us"] for name, row in table.items()} == busy
    # the kernels by their type as this CPU runs them (MatMul, or _MklMatMul with oneDNN on)
    matmul_kernels = {name: sum(n for k, n in row["kernel_types"] if "MatMul" in k) for name, row in table.items()}
    assert matmul_kernels == {"CPU:0": 1, "CPU:1": 4}, table


def test_numbered_sibling_ops_fold_into_one_series_after_the_scopes():
    ops = [
        {"name": "Assign" + ("" if i == 0 else f"_{i}"), "type": "AssignVariableOp", "device": "CPU:0"}
        for i in range(12)
    ]
    ops += [
        {"name": "dense/MatMul", "type": "MatMul", "device": "CPU:1", "requested": "CPU:1"},
        {"name": "Sum", "type": "Sum", "device": "CPU:0"},
        {"name": "Sum_1", "type": "Sum", "device": "CPU:0"},
    ]
    tree = views.scope_tree({"ops": ops})
    roots = [(name, count) for name, parent, count, *_ in tree["nodes"] if parent < 0]
    assert roots == [("dense", 1), ("Assign_*", 12), ("Sum", 1), ("Sum_1", 1)]  # 2 Sums: too few to fold
    series = next(i for i, n in enumerate(tree["nodes"]) if n[0] == "Assign_*")
    members = [n[0] for n in tree["nodes"] if n[1] == series]
    assert len(members) == 12 and set(members) == {op["name"] for op in ops[:12]}
    assert all(tree["nodes"][tree["node_of_op"][i]][0] == op["name"].rsplit("/", 1)[-1] for i, op in enumerate(ops))


def test_the_critical_path_follows_what_each_event_waited_on():
    from tfdevices.tensorboard.views import critical_path

    report = {
        "ops": [
            {"name": "load", "device": "CPU:0", "start_us": 0, "duration_us": 10},
            {"name": "side", "device": "CPU:0", "start_us": 12, "duration_us": 30},  # ends last on CPU:0, feeds nothing
            {"name": "mm", "device": "CPU:1", "start_us": 13, "duration_us": 40},
            {"name": "mm", "device": "CPU:1", "start_us": 13, "duration_us": 40, "type": "BiasAdd"},  # fused: once
            {"name": "sum", "device": "CPU:1", "start_us": 55, "duration_us": 5},
        ],
        "transfers": [{"tensor": "load:0", "src": "CPU:0", "dst": "CPU:1", "start_us": 10, "duration_us": 3}],
    }
    path = critical_path(report)
    assert [e[1] for e in path["events"]] == ["load", "load:0", "mm", "sum"]
    assert path["count"] == 4 and path["us"] == 60.0
    assert path["by_device"] == {"CPU:0": 10.0, "CPU:1": 45.0} and path["transfers_us"] == 3.0
    assert critical_path({"ops": [{"name": "x", "device": "CPU:0"}]})["us"] is None  # no times: no path


def test_the_critical_path_of_a_real_capture_ends_the_step(to_device_report):
    from tfdevices.tensorboard.views import critical_path, dashboard_view

    report = json.loads(to_device_report.to_json())
    path = critical_path(report)
    starts = [e[3] for e in path["events"]]
    assert path["count"] >= 2 and starts == sorted(starts)
    last = max(float(o["start_us"]) + float(o["duration_us"]) for o in report["ops"] + report["transfers"])
    assert path["events"][-1][3] + path["events"][-1][4] == pytest.approx(last)
    assert sum(path["by_device"].values()) + path["transfers_us"] <= path["us"] + 1e-6
    assert dashboard_view(report)["critical_path"] == path


def test_the_report_notes_reach_the_page(to_device_report):
    from tfdevices.tensorboard.views import dashboard_view

    report = json.loads(to_device_report.to_json())
    assert dashboard_view(report)["summary"]["notes"] == list(report.get("notes") or [])
    noted = {**report, "notes": ["1 kernel(s) could not be tied to a device: shown on '?'"]}
    assert dashboard_view(noted)["summary"]["notes"] == noted["notes"]


PROFILES = os.path.join(REPO, "tests", "data", "profiles")


def _profile_view(name: str) -> tuple[dict, dict]:
    from tfdevices.verify import read_profile

    report = json.loads(read_profile(f"{PROFILES}/{name}.xplane.pb").to_json())
    return report, views.dashboard_view(report)


def test_a_jit_compiled_clusters_run_is_one_bar_with_its_ops_inside():
    run = {"kernel": "XlaCluster", "kernel_name": "step", "device": "CPU:0", "requested": ""}
    ops = [  # a CPU capture of two calls: each of the cluster's ops carries its run's whole time
        dict(run, name=name, type=name.title(), call=call, start_us=start, duration_us=40.0)
        for call, start in ((0, 0.0), (1, 100.0))
        for name in ("matmul", "add", "relu")
    ]
    line = views.timeline({"ops": ops, "transfers": []})
    assert line["runs"] == [[0, 0.0, 40.0, "step", -1, 3], [0, 100.0, 40.0, "step", -1, 3]]
    assert [row[5] for row in line["ops"]] == [0, 0, 0, 1, 1, 1]  # each op drawn inside its run's bar
    (row,) = views.xla_table({"ops": ops, "transfers": [], "busy_us": {"CPU:0": 100.0}})
    assert (row["module"], row["runs"], row["us"], row["share"], row["instructions"]) == ("step", 2, 80.0, 0.8, [])


def test_a_command_buffer_profile_is_three_compiled_steps_each_one_graph_run():
    report, view = _profile_view("h200_jax_transformer")
    line = view["timeline"]
    steps = [r for r in line["runs"] if r[4] == -1]
    graphs = [r for r in line["runs"] if r[4] >= 0]
    assert [r[3] for r in steps] == ["jit_step"] * 3 and sum(r[5] for r in steps) == len(report["ops"])
    assert len({r[5] for r in steps}) == 1  # the same ops each step
    assert [r[3] for r in graphs] == ["command_buffer_1"] * 3
    assert [r[4] for r in graphs] == [line["runs"].index(step) for step in steps]  # each inside its step
    for a, b in zip(steps, steps[1:]):
        assert a[1] + a[2] <= b[1]  # one after the other, not piled on one another
    for step, graph in zip(steps, graphs):
        assert (graph[1], graph[2]) == (step[1], step[2])  # the whole step ran in its graph
    inside = {row[5] for row in line["ops"]}
    assert inside == {line["runs"].index(g) for g in graphs}  # every op drawn inside its graph's run


def test_the_xla_table_gives_each_module_and_instruction_its_share_of_the_device():
    from tfdevices.verify import PlacementReport
    from tfdevices.verify.clusters import fusion_times

    report, view = _profile_view("h200_jax_transformer")
    (module,) = view["xla"]
    busy = report["busy_us"]["GPU:0"]
    assert (module["device"], module["module"], module["runs"], module["kernel_runs"]) == ("GPU:0", "jit_step", 3, 1608)
    assert module["us"] == pytest.approx(busy) and module["share"] == 1.0 and module["graph_us"] == module["us"]
    expected = fusion_times(PlacementReport.from_json(json.dumps(report)).ops)
    shown = module["instructions"]
    assert len(shown) + module["more"] == len(expected) == 536
    assert [(i["fusion"], i["runs"]) for i in shown[:5]] == [(f.fusion, f.runs) for f in expected[:5]]
    assert shown[0]["us"] == pytest.approx(expected[0].us) and shown[0]["share"] == round(expected[0].us / busy, 4)
    cublas = next(i for i in shown if i["fusion"].startswith("custom-call"))
    assert "dot_general" in cublas["types"] and cublas["graph"] == "command_buffer_1"
    _, convnet = _profile_view("h200_jax_convnet")
    (module,) = convnet["xla"]
    assert 0 < module["graph_us"] < module["us"]  # the cuDNN convolutions ran outside the command buffers
