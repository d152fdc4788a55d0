"""The Placement tab in a real headless Chromium, served by a real ``tensorboard``.

Chromium comes from the system packages (Debian: ``apt-get install chromium``). Without
it the test is skipped on a developer's machine and FAILS in CI (``CI=true``). The
screenshot is kept in ``build/test-artifacts/`` (or ``$TFDEVICES_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.helpers import REPO, subprocess_env, unavailable
from tests.tensorboard.browser import Browser, find_chromium
from tests.tensorboard.conftest import tensorboard

# one worker builds the captures and the tensorboard server these tests share
pytestmark = pytest.mark.xdist_group("dashboard")

# The dashboard lives in an iframe that TensorBoard's app puts inside shadow roots: find it anywhere.
FRAME = """(() => {
  const walk = (root) => {
    for (const node of root.querySelectorAll('*')) {
      if (node.tagName === 'IFRAME' && node.contentDocument && node.contentDocument.getElementById('placement'))
        return node.contentDocument;
      if (node.shadowRoot) { const found = walk(node.shadowRoot); if (found) return found; }
    }
    return null;
  };
  return walk(document);
})()"""


def artifacts_dir() -> str:
    path = os.environ.get("TFDEVICES_TEST_ARTIFACTS") or os.path.join(REPO, "build", "test-artifacts")
    os.makedirs(path, exist_ok=True)
    return path


@pytest.fixture
def browser():
    executable = find_chromium()
    if executable is None:
        unavailable("Chromium is not installed (Debian: apt-get install chromium)")
    with Browser(executable, width=1400, height=1900) as running:
        yield running


def _in_frame(expression: str) -> str:
    return f"(() => {{ const doc = {FRAME}; if (!doc) return null; return ({expression}); }})()"


def _choose(browser: Browser, select_id: str, text: str) -> None:
    """Picks the option of a <select> in the dashboard whose label starts with ``text``."""
    browser.wait_for(_in_frame(f"!!doc.getElementById('{select_id}')"))
    browser.evaluate(
        _in_frame(f"""(() => {{ const s = doc.getElementById('{select_id}');
        s.value = [...s.options].find((o) => o.textContent.startsWith('{text}')).value;
        s.dispatchEvent(new Event('change')); return true; }})()""")
    )


def test_placement_tab_shows_devices_transfers_mismatch_and_timeline(browser, server, to_device_report, tmp_path):
    browser.goto(f"{server}/#placement")
    tab = browser.wait_for("""(() => { const walk = (root) => { for (const n of root.querySelectorAll('*')) {
        if (n.shadowRoot) { const f = walk(n.shadowRoot); if (f) return f; }
        if (n.children.length === 0 && /^placement$/i.test(n.textContent.trim())) return n.textContent.trim(); }
        return null; }; return walk(document); })()""")
    assert tab.lower() == "placement"
    _choose(browser, "run", "to_device")

    devices = browser.wait_for(
        _in_frame(
            "doc.querySelectorAll('.device-name').length > 1 && "
            "[...doc.querySelectorAll('.device-name')].map((e) => e.textContent)"
        )
    )
    assert devices == ["CPU:0", "CPU:1", "CPU:2"]
    ops = browser.evaluate(
        _in_frame(
            "Object.fromEntries([...doc.querySelectorAll('.device')].map((d) => "
            "[d.dataset.device, Number(d.querySelector('.ops').textContent)]))"
        )
    )
    assert ops == to_device_report.op_counts

    pairs = browser.evaluate(
        _in_frame(
            "[...doc.querySelectorAll('#matrix td.pair')].map((td) => [td.dataset.src, td.dataset.dst, td.textContent])"
        )
    )
    expected = {(t.src, t.dst) for t in to_device_report.transfers}
    assert {(src, dst) for src, dst, _ in pairs} == expected
    for src, dst, text in pairs:
        count = len(to_device_report.transfers_between(src, dst))
        assert text.startswith(f"{count} transfer"), (src, dst, text)
    browser.evaluate(_in_frame('doc.querySelector(\'#matrix td.pair[data-src="CPU:0"][data-dst="CPU:1"]\').click()'))
    listed = browser.wait_for(_in_frame("[...doc.querySelectorAll('#matrix-detail code')].map((c) => c.textContent)"))
    assert set(listed) == {t.tensor for t in to_device_report.transfers_between("CPU:0", "CPU:1")}

    mismatched = browser.wait_for(
        _in_frame(
            "doc.querySelectorAll('#layers .row.mismatch').length && "
            "[...doc.querySelectorAll('#layers .row.mismatch')].map((r) => r.dataset.path)"
        )
    )
    layer = next(p for p in mismatched if p.rsplit("/", 1)[-1].startswith("to_b"))
    row = browser.evaluate(
        _in_frame(
            f"(() => {{ const r = doc.querySelector('#layers .row[data-path=\"{layer}\"]');"
            " return [r.querySelector('.asked').textContent, r.querySelector('.ran').textContent]; })()"
        )
    )
    assert row == ["CPU:1", "CPU:0, CPU:1"]  # asked for CPU:1, its weights still read on CPU:0
    first = browser.evaluate(_in_frame("doc.querySelector('#layers .vrow').dataset.path"))
    assert first in mismatched  # mismatches first

    timeline = browser.evaluate(
        _in_frame("""(() => {
        const c = doc.getElementById('timeline-canvas');
        const g = c.getContext('2d');
        const lanes = c.dataset.lanes.split(',');
        const inked = lanes.map((_, i) => {
          const y = Math.round((i * 30 + 15) * (window.devicePixelRatio || 1));
          const left = Math.round(92 * (window.devicePixelRatio || 1));
          const row = g.getImageData(left, y, c.width - left, 1).data;
          let n = 0;
          for (let k = 0; k < row.length; k += 4) if (row[k + 2] > row[k] + 40 || row[k + 1] > row[k] + 40) n++;
          return n;
        });
        return {lanes, ops: Number(c.dataset.ops), transfers: Number(c.dataset.transfers), inked};
      })()""")
    )
    assert timeline["lanes"] == ["CPU:0", "CPU:1", "CPU:2"]
    assert timeline["ops"] == len(to_device_report.ops)
    assert timeline["transfers"] == len(to_device_report.transfers)
    assert all(n > 0 for n in timeline["inked"]), timeline  # every lane has drawn ops
    critical = browser.wait_for(
        _in_frame(
            "doc.querySelectorAll('#critical .critical-list .row').length && "
            "[doc.querySelector('#critical .hint').textContent, doc.querySelectorAll('#critical .row').length]"
        )
    )
    assert "from first to last" in critical[0] and critical[1] >= 1, critical  # where the step's time went

    shot = browser.screenshot(str(tmp_path / "placement_dashboard.png"))
    kept = shutil.copy(shot, os.path.join(artifacts_dir(), "placement_dashboard.png"))
    assert os.path.getsize(kept) > 10_000


def test_layer_search_and_diff_in_the_page(browser, server):
    browser.goto(f"{server}/#placement")
    _choose(browser, "run", "to_device")
    browser.wait_for(_in_frame("doc.querySelectorAll('.device-name').length > 1"))
    browser.wait_for(_in_frame("!!doc.querySelector('#layer-search')"))
    browser.evaluate(
        _in_frame(
            "(() => { const s = doc.getElementById('layer-search'); s.value = 'to_c';"
            " s.dispatchEvent(new Event('input')); return true; })()"
        )
    )
    found = browser.wait_for(
        _in_frame(
            "/match/.test(doc.querySelector('#layers .count').textContent) && "
            "[...doc.querySelectorAll('#layers .vrow')].map((r) => r.dataset.path)"
        )
    )
    assert found and all("to_c" in path for path in found)

    widths = browser.evaluate(
        _in_frame("""(() => {
        const canvas = doc.getElementById('timeline-canvas');
        const before = canvas.clientWidth;
        canvas.parentElement.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, ctrlKey: true, clientX: 400,
                                                                     bubbles: true, cancelable: true}));
        const zoomed = canvas.clientWidth;
        doc.querySelector('#timeline button:nth-of-type(3)').click();  // fit
        return [before, zoomed, canvas.clientWidth]; })()""")
    )
    assert widths[1] == 2 * widths[0] and widths[2] == widths[0], widths  # ctrl + wheel zooms, 'fit' undoes it

    _choose(browser, "diff-run", "plain")
    _choose(browser, "diff-run2", "to_device")
    browser.evaluate(_in_frame("doc.getElementById('diff-go').click() || true"))
    summary = browser.wait_for(
        _in_frame(
            "doc.querySelector('#diff-out p') && "
            "!/Comparing/.test(doc.querySelector('#diff-out p').textContent) && "
            "doc.querySelector('#diff-out p').textContent"
        )
    )
    moved = int(summary.split(" op(s) moved")[0])
    assert moved >= 2, summary  # layers b and c moved off CPU:0


def test_changes_over_the_run_sit_on_a_step_axis_and_open_their_step(browser, server):
    browser.goto(f"{server}/#placement")
    _choose(browser, "run", "retrace")
    marks = browser.wait_for(
        _in_frame(
            "doc.querySelectorAll('#changes .change-mark').length && "
            "[...doc.querySelectorAll('#changes .change-mark')].map((m) => [m.style.left, m.title])"
        )
    )
    assert len(marks) == 1 and marks[0][0] == "100%" and marks[0][1].startswith("step 4 (since step 2)"), marks
    ticks = browser.evaluate(_in_frame("[...doc.querySelectorAll('#changes .tick')].map((t) => t.style.left)"))
    assert ticks == ["0%", "100%"]  # the captured steps 2 and 4
    _choose(browser, "step", "step 2")
    browser.wait_for(_in_frame("doc.getElementById('step').value === '2' && !!doc.querySelector('#changes')"))
    browser.evaluate(_in_frame("doc.querySelector('#changes .change-mark').click() || true"))
    opened = browser.wait_for(
        _in_frame(
            "doc.getElementById('step').value === '4' && "
            "doc.querySelector('#changes .change span:last-child')?.textContent"
        )
    )
    assert "switch" in opened
    _choose(browser, "run", "plain")
    browser.wait_for(_in_frame("doc.querySelectorAll('.device-name').length > 0"))
    assert browser.evaluate(_in_frame("doc.querySelector('#changes') === null")) is True


def test_placement_tab_shows_a_logdir_that_holds_only_a_profile(browser, profile_server, profile_logdir, tmp_path):
    from tfdevices.verify import read_profile

    report = read_profile(profile_logdir)
    browser.goto(f"{profile_server}/#placement")
    devices = browser.wait_for(
        _in_frame(
            "doc.querySelectorAll('.device-name').length > 0 && "
            "[...doc.querySelectorAll('.device-name')].map((e) => e.textContent)"
        )
    )
    assert devices == ["CPU:0"]
    chosen = browser.evaluate(
        _in_frame(
            "[doc.getElementById('run').selectedOptions[0].textContent, "
            "doc.getElementById('step').selectedOptions[0].textContent]"
        )
    )
    assert chosen[0].startswith("train · profile/") and chosen[1] == "the whole profile", chosen
    timeline = browser.wait_for(
        _in_frame("""(() => { const c = doc.getElementById('timeline-canvas');
        return c && c.dataset.lanes && {lanes: c.dataset.lanes.split(','), ops: Number(c.dataset.ops)}; })()""")
    )
    assert timeline == {"lanes": ["CPU:0"], "ops": len(report.ops)}
    notes = browser.evaluate(_in_frame("[...doc.querySelectorAll('#notes .note')].map((n) => n.textContent)"))
    assert any("read from a profile" in n for n in notes), notes
    shot = browser.screenshot(str(tmp_path / "placement_from_profile.png"))
    assert os.path.getsize(shutil.copy(shot, os.path.join(artifacts_dir(), "placement_from_profile.png"))) > 10_000


TRANSFORMER = os.path.join(REPO, "tests", "data", "profiles", "h200_jax_transformer.xplane.pb")


@pytest.fixture(scope="module")
def xla_server(tmp_path_factory):
    """A real ``tensorboard`` over a log directory holding the real H200 transformer profile (command buffers)."""
    from unittest import mock

    session = tmp_path_factory.mktemp("xla") / "logs" / "transformer" / "plugins" / "profile" / "2026_11_28_06_00_00"
    session.mkdir(parents=True)
    shutil.copy(TRANSFORMER, session / "h200.xplane.pb")
    # this checkout's tfdevices in TensorBoard's process, whatever the environment installed
    with mock.patch.dict(os.environ, {"PYTHONPATH": subprocess_env()["PYTHONPATH"]}):
        with tensorboard(str(session.parents[3])) as url:
            yield url


def _stretches(browser: Browser, y: int, color: tuple[int, int, int]) -> int:
    """How many separate stretches of ``color`` the timeline's canvas has along the row ``y`` (CSS pixels)."""
    return browser.evaluate(
        _in_frame(f"""(() => {{
        const c = doc.getElementById('timeline-canvas');
        const ratio = window.devicePixelRatio || 1;
        const row = c.getContext('2d').getImageData(0, Math.round({y} * ratio), c.width, 1).data;
        let n = 0, inside = false;
        for (let k = 0; k < row.length; k += 4) {{
          const hit = Math.abs(row[k] - {color[0]}) < 8 && Math.abs(row[k + 1] - {color[1]}) < 8
                      && Math.abs(row[k + 2] - {color[2]}) < 8;
          if (hit && !inside) n++;
          inside = hit;
        }}
        return n; }})()""")
    )


def test_a_command_buffer_profiles_steps_are_three_bars_with_their_ops_inside(browser, xla_server, tmp_path):
    from tfdevices.verify import read_profile
    from tfdevices.verify.clusters import fusion_times

    report = read_profile(TRANSFORMER)
    browser.goto(f"{xla_server}/#placement")
    runs = browser.wait_for(
        _in_frame("(() => { const c = doc.getElementById('timeline-canvas'); return c && c.dataset.runs; })()")
    )
    assert runs == "6"  # 3 compiled steps, each one run of its command buffer
    assert _stretches(browser, 5, (0x33, 0x33, 0x33)) == 3  # the command buffers' bands: one per step
    assert _stretches(browser, 2, (0x4E, 0x79, 0xA7)) == 3  # the steps' frames, side by side, not piled up
    tip = browser.evaluate(
        _in_frame("""(() => { const c = doc.getElementById('timeline-canvas'); const r = c.getBoundingClientRect();
        c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + 300, clientY: r.top + 15}));
        return doc.getElementById('timeline-tip').textContent; })()""")
    )
    assert tip.startswith("GPU:0 · XLA jit_step (a run of ") and "in command buffer command_buffer_1" in tip, tip
    module = browser.wait_for(
        _in_frame("doc.querySelector('.xla-module') && doc.querySelector('.xla-module').textContent")
    )
    busy = report.busy_us["GPU:0"]
    assert module.startswith("jit_step on GPU:0: 3 run(s) (1608 kernel runs), ") and "100.0% of GPU:0's busy" in module
    assert "100.0% of it inside command buffers" in module, module
    first = browser.wait_for(_in_frame("doc.querySelector('.row.xla[data-fusion]')?.dataset.fusion"))
    top = fusion_times(report.ops)[0]
    assert first == top.fusion
    share = browser.evaluate(_in_frame("doc.querySelector('.row.xla[data-fusion] .share-text').textContent"))
    assert share == f"{100 * top.us / busy:.1f}%"
    shot = browser.screenshot(str(tmp_path / "placement_xla_command_buffers.png"))
    kept = shutil.copy(shot, os.path.join(artifacts_dir(), "placement_xla_command_buffers.png"))
    assert os.path.getsize(kept) > 10_000
