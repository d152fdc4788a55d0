"""tune(): candidates in fresh processes; out of memory, failures, hangs and Ctrl-C; the command."""

from __future__ import annotations

import collections
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from tests.helpers import REPO, run_cli, subprocess_env
from tfdevices import InputError
from tfdevices.decide.candidates import Link, Profile
from tfdevices.decide.messages import Captured, Failed, Ready, TimeWindow, Window
from tfdevices.decide.results import CandidateResult, TuneResult
from tfdevices.decide.ties import Comparison
from tfdevices.decide.tune import _with_round, tune

# the module: tfdevices.decide.tune, as an attribute, is the function tune (the public name)
tune_module = importlib.import_module("tfdevices.decide.tune")

ONE = ["one_device:CPU:0"]


# ----------------------------------------------------------------------------- inputs, without processes


def build_here():
    return None


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"steps": 1}, "steps=1: expected a whole number >= 2"),
        ({"steps": 2.5}, "steps=2.5"),
        ({"warmup": -1}, "warmup=-1"),
        ({"budget_s": 0}, "budget_s=0: expected a number of seconds > 0 or None"),
        ({"budget_s": "1h"}, "budget_s='1h'"),
        ({"timeout_s": None}, "timeout_s=None"),
        ({"candidates": ["mirrored:9"]}, "candidates=['mirrored:9']"),
        ({"virtual_devices": 0}, "virtual_devices=0"),
        ({"rounds": 0}, "rounds=0: expected a whole number >= 1"),
        ({"rounds": 3, "max_rounds": 2}, "max_rounds=2: expected a whole number >= 3"),
    ],
)
def test_bad_arguments_are_refused_before_any_process_starts(kwargs, words):
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace("[", r"\[")):
        tune("tests.decide.models:tiny_mlp", devices=["CPU:0", "CPU:1"], **kwargs)


@pytest.mark.parametrize("fn", [lambda: None, "not a spec", 3])
def test_a_model_function_must_be_importable_by_the_children(fn):
    with pytest.raises(InputError, match="model"):
        tune(fn)


def result(*rows):
    return TuneResult(tuple(rows), rows[0])


def test_flags_and_settings_reproduce_the_winner():
    mirrored = CandidateResult("mirrored:2", "mirrored", ("CPU:0", "CPU:1"), "ok", 0.01, 0.009, 0.011, 3200.0, 0.012)
    r = result(mirrored)
    assert r.flags() == "--gpus=none --virtual_devices=2 --strategy=mirrored"
    assert r.settings() == {
        "configure": {"gpus": "none", "virtual_devices": 2},
        "build_strategy": {"kind": "mirrored", "devices": ["CPU:0", "CPU:1"]},
        "layers": None,
    }
    gpus = CandidateResult("mirrored:2", "mirrored", ("GPU:0", "GPU:2"), "ok", 0.01, 0.01, 0.01, 3200.0)
    assert result(gpus).flags() == "--gpus=0,2 --strategy=mirrored"
    one = CandidateResult("one_device:CPU:0", "one_device", ("CPU:0",), "ok", 0.01, 0.01, 0.01, 3200.0)
    assert result(one).flags() == "--gpus=none --strategy=one_device"
    split = CandidateResult("split:2", "split", ("CPU:0", "CPU:1"), "ok", 0.01, 0.01, 0.01, 3200.0)
    assert result(split).settings()["layers"] == {
        "devices": ["CPU:0", "CPU:1"],
        "balance_by": "time",
        "every_device": True,
    }
    assert json.loads(result(split).to_json())["winner"] == "split:2"


def test_the_flags_are_accepted_by_configure_from_flags_parser():
    from absl import flags

    from tfdevices.flags import define_flags

    mirrored = CandidateResult("mirrored:2", "mirrored", ("CPU:0", "CPU:1"), "ok", 0.01, 0.01, 0.01, 3200.0)
    fv = flags.FlagValues()
    define_flags(fv)
    fv(["prog", *result(mirrored).flags().split()])
    assert (fv.gpus, fv.virtual_devices, fv.strategy) == ("none", 2, "mirrored")


def test_the_table_marks_the_winner_and_scaling():
    one = CandidateResult(
        "one_device:CPU:0",
        "one_device",
        ("CPU:0",),
        "ok",
        0.010,
        0.009,
        0.011,
        3200.0,
        0.010,
        {"host": 1 << 20},
        {"copies": 0.0, "all_reduce": 0.0, "idle": {"CPU:0": 0.25}},
        rounds=3,
        round_step_s=(0.011, 0.010, 0.0105),
    )
    two = CandidateResult(
        "mirrored:2",
        "mirrored",
        ("CPU:0", "CPU:1"),
        "ok",
        0.008,
        0.007,
        0.009,
        4000.0,
        0.012,
        {"host": 1 << 20},
        {"copies": 0.1, "all_reduce": 0.05, "idle": {"CPU:0": 0.2, "CPU:1": 0.3}},
        rounds=3,
        round_step_s=(0.008, 0.0085, 0.009),
    )
    oom = CandidateResult(
        "split:2", "split", ("CPU:0", "CPU:1"), "out_of_memory", detail="ResourceExhaustedError: x HINT: y"
    )
    comparison = Comparison("one_device:CPU:0", "mirrored:2", 1.24, 1.10, 1.40, 3, False)
    r = TuneResult((one, two, oom), two, comparisons=(comparison,), took_s=41.2)
    lines = r.table().splitlines()
    assert lines[1].split() == [
        "one_device:CPU:0",
        "ok",
        "10.00",
        "(9.00-11.00)",
        "+24%",
        "(+10%",
        "to",
        "+40%)",
        "3",
        "10.00",
        "3,200",
        "100%",
        "host",
        "1.0",
        "MiB",
        "0%",
        "0%",
        "25%",
    ]
    assert lines[2].split()[:9] == ["*", "mirrored:2", "ok", "8.00", "(7.00-9.00)", "fastest", "3", "12.00", "4,000"]
    assert lines[2].split()[9] == "62%"
    assert lines[3].split()[:5] == ["split:2", "out_of_memory", "-", "-", "0"]
    assert "  split:2: ResourceExhaustedError: x HINT: y" in lines
    assert "mirrored:2 is 24% faster than one_device:CPU:0 (95% interval +10% to +40%, 3 rounds)" in lines
    assert lines[-3].startswith("step: the median of each candidate's rounds (q1-q3 of them), up to 3 rounds")
    assert lines[-2:] == [
        "took 41 s",
        "winner: mirrored:2; reproduce with --gpus=none --virtual_devices=2 --strategy=mirrored",
    ]
    data = json.loads(r.to_json())
    assert data["comparisons"][0]["line"] == lines[lines.index("  split:2: ResourceExhaustedError: x HINT: y") + 1]
    assert data["candidates"][2]["detail"] == "ResourceExhaustedError: x HINT: y" and data["took_s"] == 41.2


def test_the_table_says_who_is_tied_and_why_the_winner_won():
    def ok(name, devices, *rounds_ms):
        steps = tuple(r / 1000 for r in rounds_ms)
        return CandidateResult(
            name,
            name.partition(":")[0],
            devices,
            "ok",
            min(steps),
            min(steps),
            min(steps),
            32 / min(steps),
            rounds=len(steps),
            round_step_s=steps,
        )

    split2, split4 = ok("split:2", ("CPU:0", "CPU:1"), 9.5, 9.8), ok("split:4", ("CPU:0",) * 4, 9.3, 9.9)
    mirrored = ok("mirrored:2", ("CPU:0", "CPU:1"), 16.0, 16.2)
    links = (Link("CPU:0", "CPU:1", 0.5e-6, None), Link("CPU:0", "CPU:2", 2e-6, 2e12))
    reason = "the rounds cannot tell it from split:4 by more than 3%; picked by the rule: the fewest devices (2)"
    r = TuneResult((mirrored, split2, split4), split2, 4, ("split:4", "split:2"), reason, links, 0.4)
    lines = r.table().splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["mirrored:2", "*", "="]
    assert lines[-3] == "tied: split:4, split:2"
    assert lines[-2] == (
        "predicted: from the one-device capture and the copy cost probed between each pair of devices "
        "(2 pairs in 0.4 s: latency 0.5-2.0 us, 2,000.0 GB/s (else none measured))"
    )
    assert lines[-1] == f"winner: split:2 ({reason}); reproduce with --gpus=none --virtual_devices=2 --strategy=default"
    data = json.loads(r.to_json())
    # the keys an older reader knows stay; the tie, the reason and the probe are added
    assert {"candidates", "winner", "settings", "flags"} <= set(data) and data["winner"] == "split:2"
    assert (data["tied"], data["reason"], data["probe_s"], data["margin"]) == (
        ["split:4", "split:2"],
        reason,
        0.4,
        0.03,
    )
    assert data["links"][0] == {"a": "CPU:0", "b": "CPU:1", "latency_s": 0.5e-6, "bytes_per_s": None}
    assert data["candidates"][1]["round_step_s"] == pytest.approx([0.0095, 0.0098])
    assert "predicted_uncalibrated_s" in data["candidates"][1]


def test_each_round_adds_a_round_and_the_step_is_the_median_of_the_rounds():
    kept = CandidateResult("split:2", "split", ("CPU:0", "CPU:1"), "ok", 0.012, batch=32, predicted_step_s=0.011)
    for step in (0.010, 0.020, 0.008):
        kept = replace(kept, **_with_round(kept, [step]))
    assert (kept.rounds, kept.round_step_s, kept.step_s) == (3, (0.010, 0.020, 0.008), 0.010)
    assert kept.process_step_s == ((0.010, 0.020, 0.008),)
    assert (kept.step_q1_s, kept.step_q3_s) == (0.008, 0.020) and kept.examples_per_s == pytest.approx(3200)
    assert kept.predicted_step_s == 0.011  # what the rounds do not measure stays
    kept = replace(kept, **_with_round(kept, [0.012]))
    assert kept.step_s == pytest.approx(0.011)  # an even count: the mean of the middle two


def test_a_round_of_two_processes_is_the_median_of_their_windows_and_each_keeps_its_own():
    kept = CandidateResult("split:2", "split", ("CPU:0", "CPU:1"), "ok", 0.012, batch=32)
    for windows in ([0.010, 0.012], [0.020, 0.024], [0.008, 0.010]):
        kept = replace(kept, **_with_round(kept, windows))
    assert kept.round_step_s == pytest.approx((0.011, 0.022, 0.009)) and kept.rounds == 3
    assert kept.process_step_s == ((0.010, 0.020, 0.008), (0.012, 0.024, 0.010))


# ----------------------------------------------------------------------------- real children


@pytest.mark.slow
def test_out_of_memory_is_reported_as_such():
    r = tune("tests.decide.models:huge", candidates=ONE, steps=2, warmup=0, processes=1)
    (c,) = r.candidates
    assert c.status == "out_of_memory" and "OOM when allocating" in c.detail and r.winner is None


@pytest.mark.slow
def test_a_failing_model_function_is_reported_with_its_error():
    (c,) = tune("tests.decide.models:raises", candidates=ONE, steps=2, warmup=0).candidates
    assert (c.status, c.detail) == ("failed", "RuntimeError: no model today")


@pytest.mark.slow
def test_a_hanging_candidate_times_out_and_its_process_is_gone(tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    monkeypatch.setenv("TFDEVICES_TEST_PIDFILE", str(pidfile))
    (c,) = tune("tests.decide.models:hang", candidates=ONE, steps=2, timeout_s=20, processes=1).candidates
    assert (c.status, c.detail) == ("timeout", "no answer within 20 s: stopped. HINT: raise timeout_s")
    assert not _alive(int(pidfile.read_text()))


@pytest.mark.slow
def test_candidates_run_measure_and_go_on_after_one_fails(tmp_path, monkeypatch):
    # without the uneven_batch mend a batch of 32 does not split over 3 replicas in Keras 3.5+: mirrored:3
    # fails (Keras 3.3-3.4 split it: it runs), and the others still run
    monkeypatch.setenv("TFDEVICES_MENDS", "uneven_batch")
    r = tune(
        "tests.decide.models:tiny_mlp",
        candidates=["mirrored:3", "split:2"],
        steps=4,
        warmup=1,
        virtual_devices=3,
        logdir=tmp_path,
        rounds=2,
        max_rounds=2,
    )
    by_name = {c.name: c for c in r.candidates}
    assert list(by_name) == ["one_device:CPU:0", "mirrored:3", "split:2"]
    keras_version = tuple(int(p) for p in importlib.import_module("keras").__version__.split(".")[:2])
    if keras_version >= (3, 5):
        mirrored = by_name["mirrored:3"]
        assert (mirrored.status, mirrored.rounds) == ("failed", 0)
        assert mirrored.detail.startswith("InvalidArgumentError: Inputs to operation AddN"), mirrored.detail
        assert "HINT: the replicas got batches of different sizes" in mirrored.detail
        assert f"  mirrored:3: {mirrored.detail}" in r.table().splitlines()
    for name in ("one_device:CPU:0", "split:2"):
        c = by_name[name]
        assert c.status == "ok" and c.step_s > 0 and c.examples_per_s == pytest.approx(32 / c.step_s)
        assert c.predicted_step_s is not None and "host" in c.peak_memory
        assert c.rounds == 2 and len(c.round_step_s) == 2  # one window of each process each round
        assert c.processes == 2 and [len(rounds) for rounds in c.process_step_s] == [2, 2]
        assert set(c.shares) == {"step_us", "copies", "all_reduce", "idle"}
        assert os.path.isdir(c.logdir) and c.logdir.startswith(str(tmp_path))
    assert set(by_name["split:2"].shares["idle"]) >= {"CPU:0", "CPU:1"}
    assert r.winner in (by_name["one_device:CPU:0"], by_name["split:2"])
    # the copy probe ran once, over the devices the candidates use: one link per pair
    assert [(link.a, link.b) for link in r.links] == [("CPU:0", "CPU:1"), ("CPU:0", "CPU:2"), ("CPU:1", "CPU:2")]
    assert all(link.latency_s >= 0 for link in r.links) and r.probe_s is not None
    assert by_name["split:2"].predicted_uncalibrated_s is not None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(path, proc, limit=120.0):
    deadline = time.monotonic() + limit
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the child never started"
        time.sleep(0.2)
    return int(path.read_text())


def _gone(pid, limit=30.0):
    deadline = time.monotonic() + limit
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def _as_from_a_terminal():
    # pytest-xdist's workers ignore SIGINT, and an ignored SIGINT is inherited: a shell gives tune Ctrl-C
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 130), (signal.SIGKILL, -9)])
def test_stopping_tune_leaves_no_child(tmp_path, sig, code):
    pidfile = tmp_path / "pid"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdevices",
            "tune",
            "tests.decide.models:hang",
            "--candidates",
            ONE[0],
            "--timeout",
            "300",
        ],
        cwd=REPO,
        env=subprocess_env({"TFDEVICES_TEST_PIDFILE": str(pidfile)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        _wait_for(pidfile, proc)
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("pid.*"))) < 2 and time.monotonic() < deadline:  # both of its processes
            time.sleep(0.2)
        children = [int(path.read_text()) for path in tmp_path.glob("pid.*")]
        assert len(children) == 2, children
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == code
        assert all(_gone(child) for child in children), "a candidate's process outlived tune"
    finally:
        proc.kill()
        proc.wait()
    assert "Traceback" not in proc.stderr.read()


def test_the_command_refuses_a_bad_target_in_one_line():
    proc = run_cli("tune", "not-a-spec")
    assert proc.returncode == 2
    assert proc.stderr.startswith("tfdevices tune: error: model function 'not-a-spec' is not MODULE:FUNCTION")
    assert "HINT:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "medians, kept, ran",
    [
        ([9.0, 9.1], 9.0, 2),  # steady at once: two windows
        ([9.0, 8.8], 8.8, 2),  # faster, but by less than 5%: settled, the faster kept
        ([38.0, 9.8, 9.7], 9.7, 3),  # a burst of load in the first window
        ([9.0, 8.0, 7.0, 6.6, 6.5], 6.5, 5),  # still speeding up after the first windows
        ([100 * 0.9**k for k in range(12)], 100 * 0.9**7, 8),  # 10% faster every window: bounded at 8
    ],
)
def test_a_candidate_is_timed_until_its_step_time_settles(medians, kept, ran):
    from tfdevices.decide.child import _steady_window

    windows = iter([[m - 1, m, m + 5] for m in medians])  # each window's step times, its median m
    times, count = _steady_window(lambda: next(windows))
    assert (sorted(times)[1], count) == (pytest.approx(kept), ran)


def test_a_module_that_is_not_there_is_refused_before_any_process_starts():
    proc = run_cli("tune", "nosuchmod_for_tfdevices.models:build")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(
        "tfdevices tune: error: model function 'nosuchmod_for_tfdevices.models:build': there is no module "
        "'nosuchmod_for_tfdevices' on this Python's path."
    ), proc.stderr
    assert proc.stderr.count("\n") == 1 and "HINT: run tune from the directory that holds it" in proc.stderr


# ----------------------------------------------------------------------------- rounds, with scripted children


class ScriptedChild:
    """A candidate's process replaced by a script: its step time in each window, in order.

    ``steps_ms[name]``: a list (every process of the candidate times it), or a tuple of lists, one per
    process (``None``: that process does not start).
    """

    def __init__(self, spec, steps_ms, asked, process):
        self.spec, self.asked, self.process = spec, asked, process
        devices = spec.devices
        self.name = f"one_device:{devices[0]}" if spec.strategy == "one_device" else f"{spec.strategy}:{len(devices)}"
        script = steps_ms[self.name]
        self.script = script[process] if isinstance(script, tuple) else script
        self.windows = iter(self.script or ())

    def ask(self, command, timeout_s):
        self.asked.append((self.name if self.process == 0 else f"{self.name}#{self.process}", command))
        if command is None:
            if self.script is None:
                return Failed("out_of_memory", "ResourceExhaustedError: OOM when allocating. HINT: y")
            return Ready(batch=32, startup_s=5.0, windows=2, step_s=0.010)
        if isinstance(command, TimeWindow):
            step = next(self.windows, None)
            return Failed("failed", "RuntimeError: gone. HINT: x") if step is None else Window(step / 1000, 0, 0)
        links = tuple(Link(a, b, 0.0, None) for a, b in (("CPU:0", "CPU:1"), ("CPU:0", "CPU:2"), ("CPU:1", "CPU:2")))
        if not command.profile:
            return Captured(peak_memory={"host": 1}, shares={"copies": 0.0})
        profile = Profile(
            compute_s=0.008,
            grad_bytes=1_000_000,
            variables=4,
            activation_bytes=10_000,
            copy_latency_s=0.0001,
            copy_bytes_per_s=1e9,
            links=links,
        )
        return Captured(profile=profile, probe_s=0.3)

    def stop(self):
        pass

    def close(self):
        pass


def scripted(monkeypatch, steps_ms):
    """tune's children replaced by scripts: each candidate's step per window; returns what was asked of them."""
    asked, started = [], collections.Counter()

    def start(spec, orphan_guard):
        child = ScriptedChild(spec, steps_ms, asked, started[(spec.strategy, spec.devices)])
        started[(spec.strategy, spec.devices)] += 1
        return child

    monkeypatch.setattr(tune_module, "start_child", start)
    return asked


CPUS3 = ["CPU:0", "CPU:1", "CPU:2"]
WANTED = ["mirrored:2", "split:2", "split:3"]


def windows(asked):
    return [name for name, command in asked if isinstance(command, TimeWindow)]


def test_rounds_interleave_the_candidates_and_only_the_contenders_run_again(monkeypatch):
    asked = scripted(
        monkeypatch,
        {
            "one_device:CPU:0": [12.0] * 6,
            "mirrored:2": [15.0] * 6,
            "split:2": [9.0] * 9,  # 5% under split:3 in every round but the third: sure from round 9
            "split:3": [9.45, 9.45, 9.09, 9.45, 9.45, 9.45, 9.45, 9.45, 9.45],
        },
    )
    lines = []
    r = tune(
        "tests.decide.models:tiny_mlp",
        devices=CPUS3,
        candidates=WANTED,
        rounds=6,
        max_rounds=9,
        processes=1,
        echo=lines.append,
    )
    names = ["one_device:CPU:0", "mirrored:2", "split:2", "split:3"]
    # round 1 in plan order, round 2 starts one later, ...: A B C D, B C D A, C D A B, ...
    assert windows(asked)[:12] == names + names[1:] + names[:1] + names[2:] + names[:2]
    assert windows(asked)[24:] == ["split:2", "split:3", "split:3", "split:2", "split:2", "split:3"]
    assert "not told apart yet: split:2, split:3; timing them again, in turn" in lines
    assert {c.name: c.rounds for c in r.candidates} == dict(zip(names, [6, 6, 9, 9]))
    assert (r.winner.name, r.tied) == ("split:2", ("split:2",))
    assert r.reason == "the fastest, sure: split:2 is 5% faster than split:3 (95% interval +5% to +5%, 9 rounds)"
    # the probe ran once, in the first child, over the devices the candidates use
    profiled = [command for name, command in asked if getattr(command, "profile", False)]
    assert [c.probe for c in profiled] == [tuple(CPUS3)]
    assert r.probe_s == 0.3 and {(link.a, link.b) for link in r.links} >= {("CPU:0", "CPU:1")}


def test_candidates_that_stay_tied_stop_at_max_rounds_and_the_rule_picks(monkeypatch):
    scripted(
        monkeypatch,
        {
            "one_device:CPU:0": [10.0, 10.2],
            "mirrored:2": [15.0, 15.5],
            "split:2": [9.3, 9.5, 9.6, 9.4],
            "split:3": [9.0, 9.6, 9.5, 9.45],
        },
    )
    r = tune("tests.decide.models:tiny_mlp", devices=CPUS3, candidates=WANTED, rounds=2, max_rounds=4)
    assert {c.name: c.rounds for c in r.candidates} == {
        "one_device:CPU:0": 2,
        "mirrored:2": 2,
        "split:2": 4,
        "split:3": 4,
    }
    assert (r.winner.name, r.tied) == ("split:2", ("split:3", "split:2"))
    assert (
        r.reason == "the rounds cannot tell it from split:3 by more than 3%; picked by the rule: the fewest devices (2)"
    )
    assert "tied: split:3, split:2" in r.table()


def test_a_candidate_that_stops_mid_way_keeps_its_rounds_and_says_why(monkeypatch):
    scripted(
        monkeypatch,
        {"one_device:CPU:0": [12.0, 12.2, 12.1], "mirrored:2": [15.0], "split:2": [9.0, 9.6, 9.1], "split:3": []},
    )
    r = tune("tests.decide.models:tiny_mlp", devices=CPUS3, candidates=WANTED, rounds=3, max_rounds=3)
    by_name = {c.name: c for c in r.candidates}
    assert (by_name["mirrored:2"].status, by_name["mirrored:2"].rounds) == ("failed", 1)
    assert by_name["mirrored:2"].detail == "stopped after 1 rounds: RuntimeError: gone. HINT: x"
    assert (by_name["split:3"].status, by_name["split:3"].rounds) == ("failed", 0)
    # three rounds show nothing for sure: one device is tied, but measured 33% slower: the fastest is named
    assert (r.winner.name, r.tied) == ("split:2", ("split:2", "one_device:CPU:0"))
    assert r.reason == "the fastest; tied but measured more than 3% slower, so not named: one_device:CPU:0 (+33%)"


def test_the_budget_stops_the_rounds(monkeypatch):
    clock = iter(range(0, 10_000, 10))  # every reading of the clock: 10 s later
    monkeypatch.setattr(tune_module.time, "perf_counter", lambda: float(next(clock)))
    scripted(monkeypatch, {"one_device:CPU:0": [10.0] * 9, "mirrored:2": [15.0] * 9, "split:2": [9.0] * 9})
    lines = []
    r = tune(
        "tests.decide.models:tiny_mlp",
        devices=CPUS3,
        candidates=["mirrored:2", "split:2"],
        rounds=9,
        budget_s=100_000,
        echo=lines.append,
    )
    assert {c.rounds for c in r.candidates} == {9}
    r = tune(
        "tests.decide.models:tiny_mlp",
        devices=CPUS3,
        candidates=["mirrored:2", "split:2"],
        rounds=9,
        budget_s=150,
        echo=lines.append,
    )
    assert 0 < max(c.rounds for c in r.candidates) < 9
    assert any(line.endswith("not run, the budget (150 s) is spent") for line in lines)


def test_predictions_with_the_probed_copies_and_without(monkeypatch):
    scripted(
        monkeypatch,
        {"one_device:CPU:0": [10.0], "mirrored:2": [15.0], "split:2": [9.0], "split:3": [9.3]},
    )
    r = tune("tests.decide.models:tiny_mlp", devices=CPUS3, candidates=WANTED, rounds=1)
    by_name = {c.name: c for c in r.candidates}
    # logical CPUs: the probe saw free copies; the one copy cost of the one-device run charges each
    assert by_name["split:3"].predicted_step_s == pytest.approx(0.010)
    assert by_name["split:3"].predicted_uncalibrated_s == pytest.approx(0.010 + 4 * 0.0001 + 40_000 / 1e9)
    assert by_name["mirrored:2"].predicted_step_s == pytest.approx(0.002 + 0.008)
    assert by_name["mirrored:2"].predicted_uncalibrated_s == pytest.approx(0.010 + 8 * 0.0001 + 2e6 / 1e9)
    assert by_name["one_device:CPU:0"].predicted_uncalibrated_s == by_name["one_device:CPU:0"].predicted_step_s
    assert {c.rounds for c in r.candidates} == {1}


def test_tune_takes_a_config_record_and_options_over_it():
    from tfdevices.decide.config import TuneConfig

    with pytest.raises(InputError, match="tune got stepz: not an option of tune"):
        tune("tests.decide.models:tiny_mlp", TuneConfig(steps=4), stepz=3)
    with pytest.raises(InputError, match="steps=1"):
        tune("tests.decide.models:tiny_mlp", TuneConfig(steps=4), steps=1)
    assert TuneConfig(rounds=3).max_rounds == 12 and TuneConfig(devices="CPU:0").devices == ("CPU:0",)


def test_the_command_refuses_fewer_max_rounds_than_rounds():
    proc = run_cli("tune", "tests.decide.models:tiny_mlp", "--rounds", "3", "--max-rounds", "2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("tfdevices tune: error: max_rounds=2: expected a whole number >= 3."), proc.stderr
    assert "HINT:" in proc.stderr


def test_each_round_times_every_process_of_every_candidate_in_turn(monkeypatch):
    asked = scripted(monkeypatch, {"one_device:CPU:0": [12.0] * 6, "split:2": [9.0] * 6})
    r = tune("tests.decide.models:tiny_mlp", devices=CPUS3, candidates=["split:2"], rounds=6, max_rounds=6)
    # process 0 of each candidate, then process 1 of each; the next round starts one candidate later
    assert windows(asked)[:8] == [
        "one_device:CPU:0", "split:2", "one_device:CPU:0#1", "split:2#1",
        "split:2", "one_device:CPU:0", "split:2#1", "one_device:CPU:0#1",
    ]  # fmt: skip
    assert {c.name: (c.processes, c.rounds, len(c.process_step_s)) for c in r.candidates} == {
        "one_device:CPU:0": (2, 6, 2),
        "split:2": (2, 6, 2),
    }
    line = "split:2 is 33% faster than one_device:CPU:0 (95% interval +33% to +33%, 6 rounds x 4 pairs of processes)"
    assert r.reason == f"the fastest, sure: {line}"
    assert "each one window of each candidate in each of its 2 processes in turn" in r.table()
    assert json.loads(r.to_json())["candidates"][1]["process_step_s"] == [[0.009] * 6] * 2


def test_a_second_process_that_runs_slower_makes_a_sure_win_a_tie(monkeypatch):
    # split:2's first process is 10% faster than one device's every round; its second one is 8% slower:
    # one process alone would name split:2 for sure, the next run's process may well be the slower one
    steps = {"one_device:CPU:0": [10.0] * 6, "split:2": ([9.0] * 6, [10.8] * 6)}
    scripted(monkeypatch, steps)
    one = tune("tests.decide.models:tiny_mlp", devices=CPUS3, candidates=["split:2"], rounds=6, processes=1)
    assert (one.winner.name, one.tied) == ("split:2", ("split:2",))
    scripted(monkeypatch, steps)
    two = tune("tests.decide.models:tiny_mlp", devices=CPUS3, candidates=["split:2"], rounds=6, max_rounds=6)
    assert (two.winner.name, two.tied) == ("one_device:CPU:0", ("split:2", "one_device:CPU:0"))
    (c,) = two.comparisons
    assert (c.name, c.pairs, round(c.low, 3), round(c.high, 3)) == ("one_device:CPU:0", 4, 0.926, 1.111)


def test_a_process_that_does_not_start_is_left_out_and_the_candidate_runs_in_the_others(monkeypatch):
    scripted(monkeypatch, {"one_device:CPU:0": [12.0] * 6, "split:2": ([9.0] * 6, None)})
    lines = []
    r = tune(
        "tests.decide.models:tiny_mlp", devices=CPUS3, candidates=["split:2"], rounds=6, max_rounds=6, echo=lines.append
    )
    split = {c.name: c for c in r.candidates}["split:2"]
    why = "timed in 1 of 2 processes, the others did not start: ResourceExhaustedError: OOM when allocating. HINT: y"
    assert (split.status, split.processes, split.rounds, split.detail) == ("ok", 1, 6, why)
    assert f"split:2: {why}" in lines and f"  split:2: {why}" in r.table().splitlines()
    assert r.winner.name == "split:2" and r.comparisons[0].pairs == 2


def test_processes_are_checked_before_any_process_starts(monkeypatch):
    scripted(monkeypatch, {})
    for bad in (0, 9, True, 2.0):
        with pytest.raises(InputError, match=rf"processes={bad!r}: expected a whole number from 1 to 8"):
            tune("tests.decide.models:tiny_mlp", devices=CPUS3, processes=bad)
