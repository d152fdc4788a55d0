"""mends: each change to code tfdevices does not own changes behaviour when on, and leaves it as the
owner made it when turned off (TFDEVICES_MENDS); the switch itself is validated and reported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings, strategies as st

from tests.helpers import REPO, run_cli, run_py, subprocess_env
from tfdevices import mends
from tfdevices.core.errors import EnvVarError, InputError
from tfdevices.mends.base import MENDS_ENV, parse_mends_off, turned_off, use_environment
from tfdevices.mends.exit_barrier import DEFAULT_EXIT_WAIT_S, exit_wait_s

NAMES = (
    "runtime_start",
    "keras_fit",
    "uneven_batch",
    "exit_barrier",
    "fork_sockets",
    "loopback",
    "step_progress",
    "fit_progress",
    "collective_wait",
    "fit_end",
    "stack_dumps",
    "at_exit",
    "quiet_import",
    "autograph_skip",
    "capture_calls",
)


# --------------------------------------------------------------------------- the switch


@pytest.mark.parametrize(
    "value, off",
    [
        ("", set()),
        (" , ", set()),
        ("keras_fit", {"keras_fit"}),
        ("Keras_Fit , loopback", {"keras_fit", "loopback"}),
        ("all", set(NAMES)),
        ("loopback,all", set(NAMES)),
    ],
)
def test_mends_off_names(value: str, off: set[str]) -> None:
    assert parse_mends_off(value) == off


@pytest.mark.parametrize(
    "value, words",
    [
        ("kerasfit", "TFDEVICES_MENDS: entry 1 names no mend; the mends are"),
        ("keras_fit,nope", "TFDEVICES_MENDS: entry 2 names no mend;"),
        ("nope, keras_fit,x", "TFDEVICES_MENDS: entries 1, 3 name no mend;"),
        ("keras_fit\u0660", "not a short ASCII list"),
        ("x" * 5000, "not a short ASCII list"),
        ("keras_fit\n", "not a short ASCII list"),
    ],
)
def test_a_bad_mends_list_names_what_exists(value: str, words: str) -> None:
    with pytest.raises(EnvVarError) as err:
        parse_mends_off(value)
    assert words in str(err.value) and "HINT: name mends from: " in str(err.value)
    assert all(name in str(err.value) for name in NAMES[:2])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_any_text_is_a_set_of_names_or_one_clear_error(value: str) -> None:
    try:
        off = parse_mends_off(value)
    except EnvVarError as err:
        assert str(err).startswith(f"{MENDS_ENV}: ") and len(str(err)) < 1000
    else:
        assert off <= set(NAMES)


def test_python_beats_the_environment_and_turning_on_again_restores(monkeypatch) -> None:
    monkeypatch.setenv(MENDS_ENV, "keras_fit")
    try:
        assert mends.turn_off("loopback", "exit_barrier") == {"loopback", "exit_barrier"}
        assert turned_off() == {"loopback", "exit_barrier"}
        assert {s.name: s.state for s in mends.applied()}["loopback"] == "off"
        assert mends.turn_off() == frozenset()  # none off from Python: nothing, whatever the environment says
        assert turned_off() == frozenset()
    finally:
        use_environment()
    assert turned_off() == {"keras_fit"}  # back to the environment
    with pytest.raises(InputError, match=r"turn_off\('nope'\): no mend is called 'nope'"):
        mends.turn_off("nope")


def test_every_mend_is_declared_and_listed() -> None:
    statuses = mends.applied()
    assert tuple(s.name for s in statuses) == NAMES and set(mends.names()) == set(NAMES)
    for status in statuses:
        scoped = ("undone",) if status.name == "capture_calls" else ()  # undone at the end of each capture
        assert (
            status.changes and status.why and status.state in ("not_reached", "off", "applied", "not_needed", *scoped)
        )
        assert status.line().startswith(status.name)


@pytest.mark.parametrize(
    "value, seconds", [(None, DEFAULT_EXIT_WAIT_S), ("30", 30.0), (" 0.5 ", 0.5), ("86400", 86400.0)]
)
def test_exit_wait_is_the_jobs_own(value: str | None, seconds: float) -> None:
    assert exit_wait_s({} if value is None else {"TFDEVICES_EXIT_WAIT": value}) == seconds


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "1e9", "\u0663", "", "5 s"])
def test_a_bad_exit_wait_is_refused(value: str) -> None:
    with pytest.raises(EnvVarError, match="^TFDEVICES_EXIT_WAIT is not a number of seconds"):
        exit_wait_s({"TFDEVICES_EXIT_WAIT": value})


# --------------------------------------------------------------------------- each mend, on and off

_RUNTIME_START = """
    import json
    import tfdevices
    from tensorflow.python.eager import context
    original = context.Context.ensure_initialized
    import tensorflow as tf
    tfdevices.runtime.trace_runtime_start()
    wrapped = context.Context.ensure_initialized is not original
    tf.constant(1.0)  # starts the runtime
    try:
        tfdevices.configure(virtual_devices=2)
    except tfdevices.RuntimeInitializedError as err:
        message = str(err)
    status = {s.name: s.state for s in tfdevices.mends.applied()}["runtime_start"]
    print(json.dumps({"wrapped": wrapped, "message": message, "state": status}))
"""


@pytest.mark.parametrize("off", [False, True])
def test_runtime_start_names_the_line_only_when_on(off: bool) -> None:
    out = json.loads(run_py(_RUNTIME_START, env={MENDS_ENV: "runtime_start"} if off else {}).stdout.splitlines()[-1])
    assert out["wrapped"] is not off and out["state"] == ("off" if off else "applied")
    if off:
        assert "something in this process started it" in out["message"]
    else:
        assert "it was started by <string>:9 " in out["message"]  # the tf.constant line of the script


def test_runtime_start_is_undone_by_turning_it_off() -> None:
    out = run_py("""
        import tfdevices
        from tensorflow.python.eager import context
        original = context.Context.ensure_initialized
        tfdevices.runtime.trace_runtime_start()
        assert context.Context.ensure_initialized is not original
        tfdevices.mends.turn_off("runtime_start")
        print(context.Context.ensure_initialized is original, tfdevices.mends.applied()[0].state)
    """).stdout.split()
    assert out[-2:] == ["True", "undone"]


_KERAS_FIT = """
    import json
    from keras.src.backend.tensorflow import trainer
    from tfdevices import training
    from tfdevices.mends.keras_trainer import trainer_class
    def functions():  # Keras 3.5 on has _maybe_symbolic_build; every Keras 3 the mend covers, reduce_per_replica
        return (getattr(trainer_class(trainer), "_maybe_symbolic_build", None), trainer.reduce_per_replica)

    originals = functions()
    adapter = training.install_fit_adapter()
    same = [a is b and a is not None for a, b in zip(originals, functions())]
    class Fake:
        kind = "multi_worker"
    try:
        training.check_fit_supported(Fake())
        error = None
    except training.StrategyError as err:
        error = str(err)
    print(json.dumps({"state": adapter.state, "same": same, "error": error, "symbolic": originals[0] is not None}))
"""


@pytest.mark.parametrize("off", [False, True])
def test_keras_fit_wraps_the_trainer_only_when_on(off: bool) -> None:
    out = json.loads(run_py(_KERAS_FIT, env={MENDS_ENV: "keras_fit"} if off else {}).stdout.splitlines()[-1])
    if off:
        assert (out["state"], out["same"]) == ("off", [out["symbolic"], True])
        assert "the keras_fit mend is turned off" in out["error"]
    else:
        assert (out["state"], out["same"], out["error"]) == ("install", [False, False], None)


_EXIT_BARRIER = """
    import atexit, sys
    import tensorflow
    import tfdevices
    from tfdevices.mends import exit_barrier
    atexit.register(lambda: print("barrier ran", exit_barrier.MEND.exits))  # runs after the barrier's hook
    hook = sys.excepthook
    exit_barrier.leave_together()
    print("excepthook wrapped", sys.excepthook is not hook)
    if sys.argv[-1] == "undo":
        tfdevices.mends.turn_off("exit_barrier")
        print("excepthook restored", sys.excepthook is hook)
    print("state", exit_barrier.MEND.status().state)
"""


@pytest.mark.parametrize(
    "how, want",
    [
        ("on", ["excepthook wrapped True", "state applied", "barrier ran 1"]),
        ("undo", ["excepthook wrapped True", "excepthook restored True", "state undone", "barrier ran 0"]),
        ("off", ["excepthook wrapped False", "state off", "barrier ran 0"]),
    ],
)
def test_exit_barrier_hooks_exit_and_excepthook_only_when_on(how: str, want: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_EXIT_BARRIER), how],
        env=subprocess_env({MENDS_ENV: "exit_barrier"} if how == "off" else {}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.splitlines() == want, proc.stderr[-2000:]


@pytest.mark.parametrize("off", [False, True])
def test_fork_sockets_frees_a_released_gpu_only_when_on(tmp_path, off: bool) -> None:
    out = run_py(
        f"""
        import os
        import tfdevices
        from tests.gpus.test_reservation import fake_inventory
        inv = fake_inventory(1)
        res = tfdevices.reserve("0", inv, lock_dir={str(tmp_path)!r})
        read, write = os.pipe()
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(write)
            os.write(ready_write, b"r")
            os.read(read, 1)
            os._exit(0)
        os.read(ready_read, 1)
        res.release()
        try:
            with tfdevices.reserve("0", inv, lock_dir={str(tmp_path)!r}):
                print("free")
        except tfdevices.ReservationError as err:
            print("held:", str(err)[:200])
        finally:
            os.close(write)
            os.waitpid(pid, 0)
        print([s.state for s in tfdevices.mends.applied() if s.name == "fork_sockets"][0])
        """,
        env={MENDS_ENV: "fork_sockets"} if off else {},
    ).stdout.splitlines()
    if off:  # the child's copy of the bound name keeps the GPU held, as Python's fork leaves it
        assert out[-2].startswith("held:") and out[-1] == "off"
    else:
        assert out[-2:] == ["free", "applied"]


@pytest.mark.slow
def test_exit_barrier_off_leaves_the_crash_message_tensorflow_prints(tmp_path) -> None:
    """The counterpart of test_multiworker's skewed exit: without the barrier, rank 0 sees rank 1 as gone."""
    script = os.path.join(REPO, "tests", "scripts", "skewed_exit.py")
    proc = run_cli(
        "launch",
        "-n",
        "2",
        "--tf-logs",
        "--mends-off",
        "exit_barrier",
        "--",
        sys.executable,
        script,
        str(tmp_path),
        "15",
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert "rank 1 done" in output
    # TensorFlow 2.21 says "have crashed" or "unhealthy"; 2.16, "heartbeat timeout ... crashed unexpectedly"
    assert re.search(r"have crashed|unhealthy|heartbeat timeout", output) or proc.returncode != 0, output[-3000:]


_PROGRESS = """
    import json, os, signal, sys, tempfile, time
    import keras
    import tensorflow as tf
    from tfdevices.jobs.progress import ProgressWriter, read_records
    from tfdevices.mends import fit_progress, stack_dumps, step_progress
    from tfdevices.mends.base import when_imported

    board = tempfile.mkdtemp()
    writer = step_progress.MEND.writer = fit_progress.MEND.writer = ProgressWriter(board, 0)
    step_progress.MEND.apply()
    fit_progress.MEND.apply()
    stacks = os.path.join(board, "stacks", "rank0.txt")
    stack_dumps.dump_stacks_to(stacks)
    v = tf.Variable(0.0)

    @tf.function
    def step():
        v.assign_add(1.0)

    step()
    step_progress.MEND.step_functions.add(id(step))  # what a tfdevices strategy's run notes while traced
    for _ in range(3):
        step()
    after_loop = writer.started

    class Late(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(read_records(board)[0].detail)

    seen = []
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(tf.ones((8, 2)), tf.ones((8, 1)), batch_size=2, epochs=1, verbose=0, callbacks=[Late()])
    if stack_dumps.MEND.applied:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.2)
    dumped = os.path.exists(stacks) and "most recent call first" in open(stacks).read()
    states = {m.name: m.status().state for m in (step_progress.MEND, fit_progress.MEND, stack_dumps.MEND)}
    print(json.dumps({"loop": after_loop, "fit": writer.started - after_loop, "seen": seen, "dumped": dumped,
                      "states": states}))
"""


@pytest.mark.parametrize("off", [False, True])
def test_progress_mends_mark_steps_callbacks_and_stacks_only_when_on(off: bool) -> None:
    env = {MENDS_ENV: "step_progress,fit_progress,stack_dumps"} if off else {}
    out = json.loads(run_py(_PROGRESS, env=env).stdout.splitlines()[-1])
    if off:  # TensorFlow's, Keras' and Python's own: nothing marked, SIGUSR1 never asked for
        off_states = dict.fromkeys(out["states"], "off")
        assert out == {"loop": 0, "fit": 0, "seen": [""], "dumped": False, "states": off_states}
    else:
        assert (out["loop"], out["fit"], out["seen"], out["dumped"]) == (3, 4, ["Late.on_epoch_end"], True)
        assert set(out["states"].values()) == {"applied"}


@pytest.mark.parametrize("off", [False, True])
def test_at_exit_runs_tfdevices_clean_ups_only_when_on(tmp_path, off: bool) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    run_py(
        f"""
        import shutil
        from tfdevices.mends.at_exit import MEND, call_at_exit
        call_at_exit(shutil.rmtree, {str(scratch)!r}, True)
        print(MEND.status().state)
        """,
        env={MENDS_ENV: "at_exit"} if off else {},
    )
    assert scratch.exists() is off  # removed at exit when on; left as it was when off


def test_when_imported_runs_after_the_real_import_not_after_a_look_up() -> None:
    # is_installed() looks tensorflow up (importlib.util.find_spec) before the program imports it: that
    # look-up once took the hook, and a launched custom loop's steps were never reported (step_progress
    # not reached). Two hooks on one module run once each, after the module ran.
    code = textwrap.dedent(
        """
        import sys
        from tfdevices.mends.base import is_installed, when_imported
        ran = []
        when_imported("json.tool", lambda: ran.append(("first", "json.tool" in sys.modules)))
        when_imported("json.tool", lambda: ran.append(("second", "json.tool" in sys.modules)))
        looked = [is_installed("json.tool") for _ in range(3)]
        before = list(ran)
        import json.tool
        import importlib; importlib.reload(json.tool)
        print(looked, before, sorted(ran))
        """
    )
    out = run_py(code).stdout
    assert out.strip() == "[True, True, True] [] [('first', True), ('second', True)]", out


def test_the_loopback_mends_wait_is_not_taken_by_a_look_up_of_tensorflow() -> None:
    # The loopback mend once kept a finder of its own that removed itself at the first look-up of tensorflow
    # (a mend's detection asks importlib.util.find_spec): the program's import then ran no hook, and a launched
    # worker listened on every interface. Its wait is when_imported's now: looked up three times, it still runs
    # once, after the import; a second call waits on the same hook.
    code = textwrap.dedent(
        """
        import importlib.util, sys
        from tfdevices.mends import loopback
        ran = []
        target = loopback.Listen("127.0.0.1", 1)
        loopback.confine_when_imported(target, then=lambda: ran.append(("first", "tensorflow" in sys.modules)))
        loopback.confine_when_imported(target, then=lambda: ran.append(("second", "tensorflow" in sys.modules)))
        looked = [importlib.util.find_spec("tensorflow") is not None for _ in range(3)]
        before = list(ran)
        import tensorflow
        print(looked, before, ran, loopback.MEND.status().state)
        """
    )
    out = run_py(code, env={"TFDEVICES_MENDS": "loopback"}).stdout
    assert out.strip() == "[True, True, True] [] [('first', True), ('second', True)] off", out


def test_one_import_hook_in_the_package() -> None:
    # One of each mechanism: every wait for an import goes through mends.base.when_imported, the one module that
    # touches sys.meta_path (a second finder is where the look-up fix was forgotten).
    import ast
    import pathlib

    import tfdevices

    package = pathlib.Path(tfdevices.__file__).parent
    users = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if any(
            isinstance(node, ast.Attribute) and node.attr == "meta_path"
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert users == ["mends/base.py"], users
