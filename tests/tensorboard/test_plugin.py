"""The Placement plugin served by a real ``tensorboard`` process: listing, data routes, static files."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.tensorboard.conftest import get, get_json, placement_entry_point, tensorboard

# one worker builds the captures and the tensorboard server these tests share
pytestmark = pytest.mark.xdist_group("dashboard")


def test_entry_point_names_the_plugin_class():
    from tfdevices.tensorboard.plugin import PlacementPlugin

    module, _, name = placement_entry_point().partition(":")
    assert (module, name) == (PlacementPlugin.__module__, PlacementPlugin.__name__)


def test_plugins_listing_enables_placement_only_with_placement_data(server, tf4, tmp_path):
    listing = get_json(f"{server}/data/plugins_listing")
    assert listing["placement"]["enabled"] is True
    assert listing["placement"]["tab_name"] == "Placement"
    assert listing["placement"]["loading_mechanism"] == {
        "type": "IFRAME",
        "module_path": "/data/plugin/placement/static/index.js",
    }

    other = tmp_path / "logs"
    with tf4.summary.create_file_writer(str(other / "train")).as_default():
        tf4.summary.scalar("loss", 1.0, step=0)
        tf4.summary.text("notes", "no placement here", step=0)
    with tensorboard(str(other), expect_run="train") as url:
        listing = get_json(f"{url}/data/plugins_listing")
        assert listing["placement"]["enabled"] is False
        assert listing["scalars"]["enabled"] is True  # the server did read the run
        assert get_json(f"{url}/data/plugin/placement/runs") == {"runs": []}


def test_runs_route_lists_runs_tags_and_steps(server):
    runs = get_json(f"{server}/data/plugin/placement/runs")["runs"]
    assert runs == [
        {"run": "fit", "tag": "placement/json", "steps": [1]},
        {"run": "plain", "tag": "placement/json", "steps": [0]},
        {"run": "retrace", "tag": "placement/json", "steps": [2, 4]},
        {"run": "to_device", "tag": "placement/json", "steps": [0, 5]},
    ]


def test_a_run_written_by_placement_logger_in_fit_shows_its_training_step(server):
    view = _view(server, run="fit")
    assert view["step"] == 1 and view["summary"]["timed"]
    names = [d["name"] for d in view["devices"]]
    # A kernel the profiler's trace ties to no executor step is on "?" with a note saying so, never on a guessed
    # device (verify's rule): once in a CI run at load, one kernel of fit's captured step was (oneDNN on)
    assert [n for n in names if n != "?"] == ["CPU:0", "CPU:1", "CPU:2"], names
    if "?" in names:
        assert any("does not tie" in note for note in view["summary"]["notes"]), view["summary"]["notes"]
    nodes = view["scopes"]["nodes"]
    assert any(n[5] and n[0].startswith("to_b") for n in nodes)  # the .to(device) layer: asked CPU:1, ran on two
    assert view["weights"], "the moved layers' weights are read from CPU:0 every step"


def _view(server: str, **params: object) -> dict:
    return get_json(f"{server}/data/plugin/placement/view?{urllib.parse.urlencode(params)}")


def test_view_route_matches_the_report(server, to_device_report):
    view = _view(server, run="to_device", step=5)
    assert (view["run"], view["step"], view["steps"]) == ("to_device", 5, [0, 5])
    assert [d["name"] for d in view["devices"]] == ["CPU:0", "CPU:1", "CPU:2"]
    assert {d["name"]: d["ops"] for d in view["devices"]} == to_device_report.op_counts
    cells = {(c["src"], c["dst"]): c for c in view["matrix"]["cells"]}
    for t in to_device_report.transfers:
        assert t.tensor in [x["tensor"] for x in cells[(t.src, t.dst)]["tensors"]]
    assert sum(c["count"] for c in cells.values()) == len(to_device_report.transfers)
    crossing = {r.op for r in to_device_report.variables_on() if r.crosses_devices}
    assert crossing and {w["op"] for w in view["weights"]} == crossing
    nodes = view["scopes"]["nodes"]
    assert nodes[0][1] == -1 and nodes[0][5]  # the model's scope: a mismatch
    assert nodes[1][1] == 0 and nodes[1][0].startswith("to_b") and nodes[1][5]  # mismatches first
    assert view["timeline"]["lanes"] == ["CPU:0", "CPU:1", "CPU:2"]
    assert len(view["timeline"]["ops"]) == len(to_device_report.ops)


def test_view_shows_the_memory_logged_beside_the_report(server):
    devices = {d["name"]: d["memory"] for d in _view(server, run="plain")["devices"]}
    # the host allocator's figures, shown on the card of the CPU that shares it
    assert devices == {"CPU:0": {"current_bytes": 1024.0, "peak_bytes": 4096.0, "shared": 1.0}}
    assert all(d["memory"] is None for d in _view(server, run="to_device")["devices"])


def test_view_defaults_to_the_last_step_and_names_what_exists(server):
    assert _view(server, run="to_device")["step"] == 5
    with pytest.raises(urllib.error.HTTPError) as err:
        _view(server, run="to_device", step=7)
    assert err.value.code == 404 and "has no step 7; it has [0, 5]" in err.value.read().decode()
    with pytest.raises(urllib.error.HTTPError) as err:
        _view(server, run="nope")
    assert (
        err.value.code == 404 and "runs with one: ['fit', 'plain', 'retrace', 'to_device']" in err.value.read().decode()
    )


def test_changes_route_lists_the_steps_whose_placement_changed(server):
    changes = get_json(f"{server}/data/plugin/placement/changes?run=retrace&tag=placement/json")["changes"]
    assert [c["step"] for c in changes] == [4]
    summary = changes[0]["summary"]
    assert summary.startswith("step 4 (since step 2): a new traced function"), summary
    assert "switch" in summary and "CPU:0 -> CPU:1" in summary, summary
    for run in ("plain", "fit"):  # written without a change: nothing to list
        assert get_json(f"{server}/data/plugin/placement/changes?run={run}&tag=placement/json")["changes"] == []


def test_diff_route_between_runs_and_between_steps(server):
    query = urllib.parse.urlencode({"run": "plain", "run2": "to_device"})
    diff = get_json(f"{server}/data/plugin/placement/diff?{query}")
    assert not diff["unchanged"]
    assert any("to_b" in name and (a, b) == ("CPU:0", "CPU:1") for name, a, b in diff["moved"]), diff["moved"]
    assert {p["pair"]: (p["before"], p["after"]) for p in diff["transfers"]}["CPU:0 -> CPU:1"][0] == 0
    assert {d["name"] for d in diff["devices"]} == {"CPU:0", "CPU:1", "CPU:2"}
    query = urllib.parse.urlencode({"run": "to_device", "step": 0, "run2": "to_device", "step2": 5})
    same = get_json(f"{server}/data/plugin/placement/diff?{query}")
    assert same["unchanged"] and same["moved"] == []


def test_trace_route_downloads_the_step_as_a_chrome_trace(server, to_device_report):
    with urllib.request.urlopen(f"{server}/data/plugin/placement/trace?run=to_device&step=0", timeout=30) as response:
        disposition = response.headers["Content-Disposition"]
        trace = json.loads(response.read())
    assert disposition == 'attachment; filename="to_device-0.trace.json"'
    tracks = sorted(e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name")
    assert tracks == list(to_device_report.devices)


def test_static_route_serves_only_the_frontend(server):
    script = get(f"{server}/data/plugin/placement/static/index.js").decode()
    assert "export async function render" in script
    assert "http://" not in script and "https://" not in script  # no network fetches
    for bad in ("../plugin.py", "..%2Fplugin.py", "nope.js"):
        with pytest.raises(urllib.error.HTTPError) as err:
            get(f"{server}/data/plugin/placement/static/{bad}")
        assert err.value.code == 404


def test_plugin_module_is_not_imported_by_tfdevices(tmp_path):
    from tests.helpers import run_py

    out = run_py("""
        import sys, tfdevices, tfdevices.tensorboard
        print(sorted(m for m in ("tensorboard", "tfdevices.tensorboard.plugin", "werkzeug") if m in sys.modules))
    """).stdout
    assert json.loads(out.strip().replace("'", '"')) == []


def test_reports_stored_under_the_plugins_own_name_enable_and_fill_the_tab(tf4, to_device_report, tmp_path):
    """The way a writer can keep the JSON out of the Text tab: a tensor summary of the placement plugin."""
    from tfdevices.tensorboard.metadata import summary_metadata

    logdir = tmp_path / "logs"
    with tf4.summary.create_file_writer(str(logdir / "native")).as_default():
        for step in (1, 2):
            tf4.summary.write("placement/json", to_device_report.to_json(), step=step, metadata=summary_metadata())
    with tensorboard(str(logdir), expect_run="native", expect_placement={"native": [1, 2]}) as url:
        assert get_json(f"{url}/data/plugins_listing")["placement"]["enabled"] is True
        assert get_json(f"{url}/data/plugin/placement/runs") == {
            "runs": [{"run": "native", "tag": "placement/json", "steps": [1, 2]}]
        }
        view = _view(url, run="native", step=2)
        assert {d["name"]: d["ops"] for d in view["devices"]} == to_device_report.op_counts
        assert get_json(f"{url}/data/plugins_listing")["text"]["enabled"] is False  # no JSON blob in Text


def test_a_logdir_holding_only_a_keras_profile_enables_the_tab_and_lists_it(profile_server):
    listing = get_json(f"{profile_server}/data/plugins_listing")
    assert listing["placement"]["enabled"] is True
    runs = get_json(f"{profile_server}/data/plugin/placement/runs")["runs"]
    assert [(r["run"], r["tag"].split("/")[0], r["steps"], r["kind"]) for r in runs] == [
        ("train", "profile", [0], "profile")
    ]
    query = urllib.parse.urlencode({"run": "train", "tag": runs[0]["tag"]})
    view = get_json(f"{profile_server}/data/plugin/placement/view?{query}")
    assert [d["name"] for d in view["devices"]] == ["CPU:0"] and view["kind"] == "profile"
    assert view["summary"]["timed"] and view["timeline"]["ops"]
    assert any("read from a profile" in note for note in view["summary"]["notes"])
    trace = get_json(f"{profile_server}/data/plugin/placement/trace?{query}")
    assert any("/hidden" in e.get("name", "") for e in trace["traceEvents"])


def test_an_unknown_profile_tag_is_not_found(profile_server):
    query = urllib.parse.urlencode({"run": "train", "tag": "profile/no_such_session"})
    with pytest.raises(urllib.error.HTTPError) as err:
        get(f"{profile_server}/data/plugin/placement/view?{query}")
    assert err.value.code == 404
