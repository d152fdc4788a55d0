"""Stalls: a rank that stays alive but stops before a collective is named, with its frame; ranks slow together,
a chief-only checkpoint, a slow dataset and the first step are not stalls; --stall-timeout stops the job and
--max-restarts restarts it; a dead rank keeps the launcher's own report. Progress records: written in place,
read without locks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.engines import slurm_cluster
from tests.helpers import REPO, run_shown, subprocess_env
from tfdevices.core.errors import EnvVarError
from tfdevices.jobs.end_files import write_job_files
from tfdevices.jobs.progress import RECORD_SIZE, ProgressWriter, RankProgress, progress_dir, read_record, read_records
from tfdevices.jobs.stacks import ask_stacks, top_frames
from tfdevices.jobs.stall import StallPolicy, detect_stall, policy_from_env
from tfdevices.jobs.watch import JobState, JobWatch

SCRIPT = os.path.join(REPO, "tests", "scripts", "stuck_rank.py")
WINDOW = 6  # seconds: the stall window the launch tests ask for (the default is 60 s or more)


def _rec(rank: int, started: int, done: int, phase: str, at: float = 100.0, detail: str = "") -> RankProgress:
    return RankProgress(rank, 1000 + rank, started, done, phase, detail, at, 0.01)


# --------------------------------------------------------------------------- what a stall is (pure)

POLICY = StallPolicy(window_s=60)


@pytest.mark.parametrize(
    "records, now, expected, want",
    [
        # rank 1 stopped before step 5 while rank 0 waits in it: a stall, after the window only
        ([_rec(0, 5, 4, "step"), _rec(1, 4, 4, "between", 99)], 161, (), ("stall", 5, (0,), (1,))),
        ([_rec(0, 5, 4, "step"), _rec(1, 4, 4, "between", 99)], 150, (), None),
        # both slow together, in the same place: no disagreement
        ([_rec(0, 4, 4, "between"), _rec(1, 4, 4, "between")], 1000, (), None),
        ([_rec(0, 5, 4, "step"), _rec(1, 5, 4, "step")], 1000, (), None),
        # the chief in a callback while the other waits: a phase, not a stuck rank
        (
            [_rec(0, 40, 40, "callback", detail="ModelCheckpoint.on_epoch_end"), _rec(1, 41, 40, "step")],
            200,
            (),
            ("phase", 41, (1,), (0,)),
        ),
        # the chief in a callback while the other waits at the epoch's end (a collective outside the steps)
        (
            [_rec(0, 6, 6, "callback", detail="SlowCheckpoint.on_epoch_end"), _rec(1, 6, 6, "between")],
            200,
            (),
            ("phase", 6, (1,), (0,)),
        ),
        # every rank in a callback (each saves its own checkpoint): slow together
        ([_rec(0, 6, 6, "callback"), _rec(1, 6, 6, "callback")], 1000, (), None),
        # a rank that never reported, while the others wait in step 1 (before every rank finished a step,
        # the start-up window applies: 5 x 60 s)
        ([_rec(0, 1, 0, "step"), _rec(1, 1, 0, "step")], 350, (0, 1, 2), None),
        ([_rec(0, 1, 0, "step"), _rec(1, 1, 0, "step")], 401, (0, 1, 2), ("stall", 1, (0, 1), (2,))),
        # a rank done early while the other still waits in the next step: it will never arrive
        ([_rec(0, 11, 10, "step"), _rec(1, 10, 10, "done")], 200, (), ("stall", 11, (0,), (1,))),
        ([], 1000, (), None),
    ],
)
def test_a_stall_is_disagreement_with_no_one_moving(records, now, expected, want) -> None:
    stall = detect_stall(records, now=now, policy=POLICY, expected=expected)
    if want is None:
        assert stall is None
        return
    _, step, _, missing = want
    assert ("phase" if stall.phase_only else "stall", stall.step, stall.waiting, stall.missing) == want
    assert f"step {step}" in stall.reason() and f"rank {missing[0]}" in stall.reason()


@pytest.mark.parametrize(
    "policy, median, warmed, window",
    [
        (StallPolicy(), None, True, 60.0),
        (StallPolicy(), 10.0, True, 200.0),  # 20 x the median step
        (StallPolicy(), 1.0, False, 600.0),  # before every rank finished a step
        (StallPolicy(window_s=5), 10.0, True, 5.0),
        (StallPolicy(window_s=5), None, False, 25.0),
    ],
)
def test_the_window_follows_the_step(policy, median, warmed, window) -> None:
    assert policy.window(median, warmed) == window


def test_the_phase_report_says_where_the_late_rank_is() -> None:
    stall = detect_stall(
        [_rec(0, 40, 40, "callback", 10, "ModelCheckpoint.on_epoch_end"), _rec(1, 41, 40, "step", 5)],
        now=105,
        policy=POLICY,
    )
    assert stall.reason() == "rank 0 is in ModelCheckpoint.on_epoch_end (after step 40) for 95 s; rank 1 is in step 41"
    assert stall.text().startswith("tfdevices: slow phase: rank 0 is in ModelCheckpoint.on_epoch_end")


@pytest.mark.parametrize(
    "env, window, timeout",
    [({}, None, None), ({"TFDEVICES_STALL_WINDOW": "30", "TFDEVICES_STALL_TIMEOUT": " 90 "}, 30.0, 90.0)],
)
def test_policy_from_the_environment(env, window, timeout) -> None:
    policy = policy_from_env(env)
    assert (policy.window_s, policy.timeout_s) == (window, timeout)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1e12", "\u0665", "ten"])
def test_a_bad_stall_setting_is_refused(value: str) -> None:
    with pytest.raises(EnvVarError, match="^TFDEVICES_STALL_TIMEOUT is not a number of seconds"):
        policy_from_env({"TFDEVICES_STALL_TIMEOUT": value})


# --------------------------------------------------------------------------- many ranks: counted and grouped (pure)


def _at(rank: int, started: int, done: int, phase: str, detail: str = "") -> RankProgress:
    """A rank of a job of 512 nodes of 8, its record last changed at 100 s."""
    return RankProgress(rank, 1000 + rank, started, done, phase, detail, 100.0, 0.01, node=f"node{rank // 8}")


def test_a_stuck_rank_among_4096_is_named_with_its_node_and_the_others_counted() -> None:
    records = [_at(r, 21, 20, "step") for r in range(4095)] + [_at(4095, 20, 20, "between")]
    stall = detect_stall(records, now=160.0, policy=POLICY)
    assert stall.reason() == (
        "rank 4095 on node node511 did not arrive at step 21: 4,095 ranks (0-4094) have waited in it for 60 s; "
        "rank 4095 on node node511 is after step 20"
    )
    assert stall.text().splitlines()[1:] == [
        "  (no rank moved for 60 s; the stall window is 60 s)",
        "  in step 21: 4,095 ranks (0-4094) on 512 nodes",
        "  after step 20: rank 4095 on node node511",
        "  rank 4095 on node node511 (pid 5095): after step 20",
    ]


def test_many_missing_ranks_are_grouped_by_place_and_listed_16_at_most() -> None:
    records = [_at(r, 21, 20, "step") for r in range(2048)]
    records += [_at(r, 20, 20, "between") for r in range(2048, 4096, 2)]
    records += [_at(r, 20, 19, "step") for r in range(2049, 4096, 4)]
    records += [_at(r, 20, 19, "callback", "X.on_epoch_end") for r in range(2051, 4096, 4)]
    stall = detect_stall(records, now=1000.0, policy=POLICY, expected=range(4100))
    line = stall.reason()
    assert line.startswith("2,052 ranks (2048-4099) did not arrive at step 21: 2,048 ranks (0-2047) have waited")
    assert "; 1,024 ranks (2048, 2050, 2052, 2054 and 1,020 more) on 256 nodes are after step 20; " in line
    assert line.endswith("; ranks 4096, 4097, 4098, 4099 never reported") and len(line) < 500
    lines = stall.text().splitlines()
    assert lines[2:7] == [
        "  in step 21: 2,048 ranks (0-2047) on 256 nodes",
        "  after step 20: 1,024 ranks (2048, 2050, 2052, 2054 and 1,020 more) on 256 nodes",
        "  in step 20: 512 ranks (2049, 2053, 2057, 2061 and 508 more) on 256 nodes",
        "  in X.on_epoch_end (after step 19): 512 ranks (2051, 2055, 2059, 2063 and 508 more) on 256 nodes",
        "  never reported: ranks 4096, 4097, 4098, 4099",
    ]
    assert lines[7] == "  rank 2048 on node node256 (pid 3048): after step 20" and len(lines) == 7 + 16 + 1
    assert lines[-1] == "  and 2,032 ranks (2064-4095)"


def test_ranks_in_many_places_leave_the_line_and_the_report_bounded() -> None:
    records = [_at(r, 100, 99, "step") for r in range(2048)] + [
        _at(r, r % 90, r % 90, "between") for r in range(2048, 4096)
    ]
    stall = detect_stall(records, now=1000.0, policy=POLICY)
    assert len(stall.missing) == 2048 and len(stall.reason()) < 700
    assert stall.reason().endswith(" are elsewhere")
    lines = stall.text().splitlines()
    assert lines[6].startswith("  elsewhere: ") and len(lines) == 2 + 4 + 1 + 16 + 1
    assert max(len(line) for line in lines[1:]) < 200


def test_a_chiefs_checkpoint_among_4096_ranks_is_a_phase_with_the_others_counted() -> None:
    records = [_at(0, 40, 40, "callback", "ModelCheckpoint.on_epoch_end")]
    stall = detect_stall(records + [_at(r, 41, 40, "step") for r in range(1, 4096)], now=200.0, policy=POLICY)
    assert stall.phase_only and stall.reason() == (
        "rank 0 on node node0 is in ModelCheckpoint.on_epoch_end (after step 40) for 100 s; "
        "4,095 ranks (1-4095) are in step 41"
    )
    assert len(stall.text().splitlines()) == 5


def test_a_job_of_16_ranks_is_reported_rank_by_rank_and_9_waiting_are_counted() -> None:
    records = [_at(r, 21, 20, "step") for r in range(8)] + [_at(8, 20, 20, "between")]
    nine = detect_stall(records, now=160.0, policy=POLICY)
    assert nine.reason().startswith("rank 8 on node node1 did not arrive at step 21: ranks 0, 1, 2, 3, 4, 5, 6, 7 have")
    records = [_at(r, 21, 20, "step") for r in range(15)] + [_at(15, 20, 20, "between")]
    sixteen = detect_stall(records, now=160.0, policy=POLICY)
    assert "did not arrive at step 21: 15 ranks (0-14) have waited in it for 60 s" in sixteen.reason()
    lines = sixteen.text().splitlines()
    assert len(lines) == 18 and lines[2] == "  rank 0 on node node0 (pid 1000): in step 21"


# --------------------------------------------------------------------------- progress records


def test_records_are_written_in_place_and_read_back(tmp_path) -> None:
    clock = iter(range(100, 200)).__next__
    writer = ProgressWriter(str(tmp_path), rank=3, clock=lambda: float(clock()))
    writer.begin_step()
    writer.begin_step()
    writer.end_step(step=1)  # a late end (Keras 3 runs batch ends on another thread): step 2 still runs
    (record,) = read_records(str(tmp_path))
    assert (record.rank, record.started, record.done, record.phase) == (3, 2, 1, "step")
    writer.end_step(0.5)
    writer.enter("callback", "Sleeper.on_train_batch_begin" + "x" * 100)
    record = read_record(writer.path)
    assert (record.done, record.phase, record.last_step_s, record.pid) == (2, "callback", 0.5, os.getpid())
    assert record.detail.startswith("Sleeper.on_train_batch_begin") and len(record.detail) == 64
    assert os.path.getsize(writer.path) == RECORD_SIZE


def test_a_record_being_written_or_foreign_is_not_read(tmp_path) -> None:
    writer = ProgressWriter(str(tmp_path), rank=0)
    writer._map[0:8] = (7).to_bytes(8, "little")  # odd: a write in progress that never ends
    assert read_record(writer.path) is None
    (tmp_path / "rank1.progress").write_bytes(b"\0" * 10)
    (tmp_path / "rank2.progress").write_bytes(b"\0" * 8 + b"\xff" * (RECORD_SIZE - 8))
    (tmp_path / "notes.txt").write_text("x")
    assert read_records(str(tmp_path)) == ()


def test_a_record_an_earlier_run_left_is_not_signalled_nor_judged(tmp_path) -> None:
    """A directory derived from a SLURM step or a TF_CONFIG cluster outlives its job: rank 0's watch sends no
    signal to a pid a left record names (another program has it now), and judges no rank past the job's size.
    """
    from tfdevices.jobs.rank_hooks import rank_zero_loop

    directory = str(tmp_path)
    mine = ProgressWriter(directory, rank=0)
    for rank in (1, 2):  # an earlier run's records: written, then left
        ProgressWriter(directory, rank=rank)._map.close()
    other = subprocess.Popen(["sleep", "60"])  # the pid the left records now name: not a rank
    try:
        for rank in (1, 2):
            with open(os.path.join(directory, f"rank{rank}.progress"), "r+b") as f:
                f.seek(8)
                f.write(other.pid.to_bytes(4, "little"))
        assert {r.rank: r.pid for r in read_records(directory)} == {0: os.getpid(), 1: other.pid, 2: other.pid}
        look = rank_zero_loop(directory, str(tmp_path / "stacks"), "", None, world_size=2)
        assert [r.rank for r in look.records()] == [0, 1]
        assert [r.rank for r in look.signalled(read_records(directory))] == [0]
    finally:
        other.kill()
        other.wait()
    mine._map.close()


@pytest.mark.parametrize(
    "env, want",
    [
        ({"TFDEVICES_PROGRESS_DIR": "/run/job"}, "/run/job"),
        ({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "3"}, "/tmp/tfdevices-progress/slurm-42.3"),
        ({"SLURM_JOB_ID": "4\u0662", "SLURM_STEP_ID": "3"}, None),
        (  # Ray Train and other TF_CONFIG orchestrators: one directory per cluster, the same in every rank
            {"TF_CONFIG": '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}'},
            progress_dir(
                {"TF_CONFIG": '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 0}}'}
            ),
        ),
        ({}, None),
    ],
)
def test_where_the_records_live(env, want) -> None:
    assert progress_dir(env) == want


def test_a_relative_progress_dir_is_refused() -> None:
    with pytest.raises(EnvVarError, match="^TFDEVICES_PROGRESS_DIR is not an absolute path"):
        progress_dir({"TFDEVICES_PROGRESS_DIR": "job"})


def test_the_watch_reports_once_then_at_growing_intervals_and_asks_for_stacks(tmp_path) -> None:
    now = [100.0]
    w0, w1 = ProgressWriter(str(tmp_path), 0, clock=lambda: now[0]), ProgressWriter(str(tmp_path), 1, lambda: now[0])
    for w in (w0, w1):
        w.begin_step()
        w.end_step(1.0)
    w0.begin_step()  # rank 0 waits in step 2; rank 1 never comes
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    dump = 'Current thread 0x1 (most recent call first):\n  File "train.py", line 9 in loop\n'
    signalled = []

    def signal_pid(pid: int, sig: int) -> None:  # what faulthandler does in the rank: append a dump
        signalled.append(sig)
        with open(stacks / f"rank{(len(signalled) - 1) % 2}.txt", "a") as f:  # records come by rank
            f.write(dump)

    def frames(stall):
        return ask_stacks(stall.records, str(stacks), stall.missing, signal_pid=signal_pid)

    watch = JobWatch(
        [0, 1], StallPolicy(window_s=10, timeout_s=30), frames=frames, stacks_where="here", clock=lambda: now[0]
    )
    reports, said = [], []
    for t in (105, 111, 115, 125, 139, 141):  # window 10 s: said at 11 s quiet, then at 22, 50 ...
        now[0] = t
        snapshot = watch.poll(read_records(str(tmp_path)))
        said += snapshot.said
        reports.append((t, sum(line.startswith("tfdevices: stall: ") for line in said), snapshot.stop))
    assert [(t, n) for t, n, _ in reports] == [(105, 0), (111, 1), (115, 1), (125, 2), (139, 2), (141, 2)]
    assert [r is None for _, _, r in reports] == [True] * 5 + [False]  # stopped at window + timeout: 40 s
    assert reports[-1][2].startswith("stopping the job: rank 1 did not arrive at step 2")
    assert '    File "train.py", line 9 in loop' in said and len(signalled) == 4  # each report asks both ranks
    assert "  every rank's Python stack: here" in said
    assert watch.latest.state is JobState.STALLED and watch.latest.stalls == 1
    assert [(row.rank, row.stalled) for row in watch.latest.rows] == [(0, False), (1, True)]


def test_a_stuck_rank_on_another_machine_is_named_with_its_node() -> None:
    waiting = RankProgress(0, 10, 5, 4, "step", "", 100.0, 0.1, node="gpu01")
    stuck = RankProgress(1, 11, 4, 4, "between", "", 99.0, 0.1, node="gpu07")
    stall = detect_stall([waiting, stuck], now=200.0, policy=StallPolicy(window_s=60))
    assert stall.reason() == (
        "rank 1 on node gpu07 did not arrive at step 5: rank 0 has waited in it for 100 s; "
        "rank 1 on node gpu07 is after step 4"
    )
    assert "  rank 1 on node gpu07 (pid 11): after step 4" in stall.text().splitlines()


def test_top_frames_takes_the_main_threads_latest_dump(tmp_path) -> None:
    path = tmp_path / "rank1.txt"
    old = 'Current thread 0x1 (most recent call first):\n  File "a.py", line 1 in <module>\n\n'
    new = (
        'Thread 0x2 (most recent call first):\n  File "threading.py", line 5 in wait\n\n'
        'Current thread 0x1 (most recent call first):\n  File "b.py", line 7 in step\n'
        '  File "b.py", line 9 in <module>\n'
    )
    path.write_text(old + new)
    assert top_frames(str(path), offset=len(old)) == ['File "b.py", line 7 in step', 'File "b.py", line 9 in <module>']


# --------------------------------------------------------------------------- real jobs under tfdevices launch


def _launch(*args: str, timeout: float = 420) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tfdevices", "launch", "-n", "2", "--stall-window", str(WINDOW), *args],
        env=subprocess_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, time.monotonic() - start


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, frame",
    [("loop", "in loop"), ("fit", "in on_train_batch_begin")],
)
def test_a_rank_stuck_alive_before_step_5_is_named_with_its_frame(mode: str, frame: str) -> None:
    proc, _ = _launch("--", sys.executable, SCRIPT, mode, "1", str(4 * WINDOW))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]  # it reports, and the job goes on when rank 1 comes back
    assert re.search(r"tfdevices: (stall: rank 1 did not arrive at step 5|slow phase: rank 1 is in Sleeper)", out), out
    assert "rank 1's stack, innermost first:" in out and frame in out.split("innermost first:")[1][:400]
    assert "rank 0 done" in out and "rank 1 done" in out


@pytest.mark.slow
def test_stall_timeout_stops_the_job_and_max_restarts_restarts_it() -> None:
    proc, _ = _launch("--stall-timeout", "8", "--max-restarts", "1", "--", sys.executable, SCRIPT, "loop", "1", "600")
    out = proc.stdout + proc.stderr
    stops = re.findall(r"stopping the job: rank 1 did not arrive at step 5.*past the stall timeout, 8 s", out)
    assert proc.returncode == 3 and len(stops) == 2, out[-3000:]
    assert "restarting all 2 workers (restart 1 of 1)" in out


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, ranks, seconds, steps",
    [
        ("loop", "0,1", 3 * WINDOW, 6),  # both ranks sleep at step 5: slow together
        ("dataset", "", 1.5, 12),  # every rank's input is slow (18 s in all), but every step moves
        ("checkpoint", "0", 3 * WINDOW, 6),  # the chief alone writes a slow checkpoint: a phase report only
    ],
)
def test_no_false_alarm_from_work_done_on_purpose(mode: str, ranks: str, seconds: float, steps: int, tmp_path) -> None:
    proc, _ = _launch(
        "--stall-timeout", "600", "--log-dir", str(tmp_path), "--tee", "--", sys.executable, SCRIPT, mode, ranks,
        str(seconds), str(steps),
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "rank 0 done" in out and "rank 1 done" in out, out[-3000:]
    assert "tfdevices: stall:" not in out and "stopping the job" not in out, out[-3000:]
    if mode == "checkpoint":
        assert "tfdevices: slow phase: rank 0 is in SlowCheckpoint.on_epoch_end" in out, out[-3000:]
    else:
        assert "slow phase" not in out
    # the watch looked at both ranks past their first step (not at a job still importing TensorFlow) more often
    # than its window holds looks (about a second apart): each sleep was under watch long enough to be judged
    looks = json.loads((tmp_path / "steps.json").read_text())["looks_every_rank"]
    assert looks > WINDOW, looks


@pytest.mark.slow
def test_a_dead_rank_keeps_the_launchers_report() -> None:
    proc, _ = _launch("--", sys.executable, os.path.join(REPO, "tests", "scripts", "crash_rank1.py"), timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "worker 1 exited with status" in out and "stall" not in out, out[-3000:]


# --------------------------------------------------------------------------- srun: rank 0 watches


@pytest.mark.slow
@pytest.mark.xdist_group("engines")
@pytest.mark.parametrize("mode, frame", [("loop", "in loop"), ("fit", "in on_train_batch_begin")])
def test_under_srun_rank_0_names_the_stuck_rank_and_stops_the_step(tmp_path, mode: str, frame: str) -> None:
    with slurm_cluster(str(tmp_path / "slurm")) as slurm:
        proc = run_shown(
            ["srun", "-n", "2", sys.executable, SCRIPT, mode, "1", "600"],
            env=subprocess_env({**slurm, "TFDEVICES_STALL_WINDOW": str(WINDOW), "TFDEVICES_STALL_TIMEOUT": "8"}),
            cwd=REPO,
            timeout=420,
        )
        out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    named = r"(stall: rank 1 did not arrive at step 5|slow phase: rank 1 is in Sleeper.on_train_batch_begin)"
    assert re.search(f"tfdevices: {named}", out), out[-3000:]
    assert "rank 1's stack, innermost first:" in out and frame in out.split("innermost first:")[1][:400]
    assert re.search(r"stopping the job: rank 1 .*past the stall timeout, 8 s", out), out[-3000:]


def test_the_timeline_shows_the_straggler_below_the_others(tmp_path) -> None:
    timeline = [(100.0, 0, 0, "starting"), (100.0, 1, 0, "starting"), (101.0, 0, 5, "step"), (101.0, 1, 4, "between")]
    summary = JobWatch([0, 1], StallPolicy()).summary()  # no split seen: the picture is each rank's steps
    written = write_job_files(summary, timeline, str(tmp_path), end=130.0)
    assert [os.path.basename(p) for p in written] == ["steps.json", "steps.png"]
    data = json.loads((tmp_path / "steps.json").read_text())
    assert data["ranks"] == {
        "0": [[0.0, 0, "starting"], [1.0, 5, "step"]],
        "1": [[0.0, 0, "starting"], [1.0, 4, "between"]],
    }
    assert (tmp_path / "steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert write_job_files(summary, [], str(tmp_path / "none")) == []
    # ranks that started and ended without a step (a program that never trained): nothing to show
    idle = [(100.0, 0, 0, "starting"), (100.5, 1, 0, "starting"), (101.0, 0, 0, "done"), (101.0, 1, 0, "done")]
    assert write_job_files(summary, idle, str(tmp_path / "idle")) == []
    assert not (tmp_path / "idle").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("engines")
def test_under_ray_train_rank_0_names_the_stuck_rank(tmp_path) -> None:
    """Ray Train writes TF_CONFIG in each worker: the ranks meet in one progress directory per cluster."""
    try:
        import ray.train.tensorflow  # noqa: F401
    except ImportError as err:
        pytest.fail(f"Ray Train is not installed ({err}; pip install 'ray[train]', the test extra)")
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "scripts", "ray_stuck.py"), str(tmp_path), str(4 * WINDOW)],
        env=subprocess_env({"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "TFDEVICES_STALL_WINDOW": str(WINDOW)}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ray stuck done" in out, out[-3000:]
    assert "tfdevices: stall: rank 1 did not arrive at step 5" in out, out[-3000:]
    assert "rank 1's stack, innermost first:" in out and "in loop" in out, out[-3000:]
