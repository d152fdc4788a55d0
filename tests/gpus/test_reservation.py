"""reserve: real processes racing for fake GPUs through real lock files."""

from __future__ import annotations

import contextlib
import doctest
import os
import select as select_mod
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import REPO, subprocess_env
from tfdevices.core.errors import InputError, ReservationError, SelectionError, SpecError
from tfdevices.gpus.gpuinfo import GpuInfo
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.reservation import DEFAULT_LOCK_DIR, Reservation, default_lock_dir, holders, reserve
from tfdevices.gpus.selection import Selection, select

WORKER = os.path.join(REPO, "tests", "scripts", "reserve_worker.py")
RACERS, GPUS, ROUNDS = 16, 4, 50


def fake_inventory(n: int = GPUS) -> Inventory:
    return Inventory(
        gpus=tuple(
            GpuInfo(
                index=i,
                name="Fake GPU",
                uuid=f"GPU-fake-{i}",
                memory_total=16 << 30,
                memory_free=(16 - i) << 30,
                cuda_ordinal=i,
                tf_name=f"/GPU:{i}",
            )
            for i in range(n)
        ),
        source="nvml",
    )


@pytest.fixture
def setup(tmp_path):
    inv = fake_inventory()
    path = tmp_path / "inventory.json"
    path.write_text(inv.to_json())
    locks = tmp_path / "locks"
    return inv, str(path), str(locks)


class Lines:
    """Reads lines from a child's stdout with a deadline (never blocks forever)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.buffer = proc, b""

    def readline(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"pid {self.proc.pid}: no line within {timeout} s (got {self.buffer!r})")
            ready, _, _ = select_mod.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    err = self.proc.stderr.read().decode() if self.proc.poll() is not None else ""
                    raise AssertionError(f"pid {self.proc.pid} ended early ({self.proc.returncode}): {err}")
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
        cwd=REPO,
    )


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait(timeout=30)
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream:
                stream.close()


def test_race_16_processes_4_gpus_50_rounds(setup) -> None:
    inv, inv_path, locks = setup
    procs = [start("race", locks, inv_path) for _ in range(RACERS)]
    readers = [Lines(p) for p in procs]
    try:
        for round_ in range(ROUNDS):
            for p in procs:
                p.stdin.write(b"go\n")
                p.stdin.flush()
            answers = [r.readline() for r in readers]
            winners = {p.pid: int(a.split()[1]) for p, a in zip(procs, answers) if a.startswith("got")}
            assert all(a == "busy" or a.startswith("got ") for a in answers), answers
            gpus = sorted(winners.values())
            assert gpus == sorted(set(gpus)), f"round {round_}: a GPU was given twice: {answers}"
            assert gpus == list(range(GPUS)), f"round {round_}: free GPUs were left unclaimed: {answers}"
            # the lock files name the winners
            assert {int(h.gpu): h.pid for h in holders(inv, lock_dir=locks)} == {g: pid for pid, g in winners.items()}
            for p in procs:
                p.stdin.write(b"release\n")
                p.stdin.flush()
            assert [r.readline() for r in readers] == ["released"] * RACERS
        assert holders(inv, lock_dir=locks) == ()
    finally:
        stop(procs)


def test_killed_holder_is_free_within_a_second(setup) -> None:
    inv, inv_path, locks = setup
    proc = start("hold", locks, inv_path, "2")
    try:
        got, gpu, pid = Lines(proc).readline().split()
        assert (got, gpu, int(pid)) == ("got", "2", proc.pid)
        with pytest.raises(
            ReservationError,
            match=rf"reserve '2': 0 of 1 GPU\(s\) 2 asked for free .*"
            rf"held: GPU 2 by pid {proc.pid} on ",
        ):
            reserve("2", inv, lock_dir=locks)
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        res = reserve("2", inv, lock_dir=locks, timeout=1.0)  # fails if the lock outlives its process by 1 s
        elapsed = time.monotonic() - killed
        assert res.indices == (2,) and res.held
        assert [h.pid for h in res.cleaned] == [proc.pid], "the dead holder's stale note was not cleaned"
        print(f"released {elapsed * 1000:.1f} ms after kill -9 (waited {res.waited * 1000:.1f} ms)")
        res.release()
    finally:
        stop([proc])


def test_wait_until_holder_releases(setup, tmp_path) -> None:
    inv, inv_path, locks = setup
    release_file = tmp_path / "release"
    proc = start("hold", locks, inv_path, "auto:4", str(release_file))
    try:
        assert Lines(proc).readline().startswith("got 0,1,2,3 ")
        result: dict[str, object] = {}

        def wait() -> None:
            try:
                result["res"] = reserve("auto:2", inv, lock_dir=locks, timeout=30)
            except Exception as err:  # noqa: BLE001 - reported below
                result["err"] = err

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)
        assert "res" not in result and "err" not in result, result  # still waiting: all 4 are held
        release_file.write_text("")
        waiter.join(timeout=30)
        assert not waiter.is_alive() and "err" not in result, result
        res = result["res"]
        assert isinstance(res, Reservation) and len(res.indices) == 2
        assert res.waited >= 0.3 and res.cleaned == ()  # a clean release leaves nothing stale
        assert res.indices == (0, 1)  # the most free memory first, as select's auto:N orders
        res.release()
    finally:
        stop([proc])


def test_in_process_semantics(tmp_path) -> None:
    inv, locks = fake_inventory(3), str(tmp_path)
    with reserve("auto:2", inv, lock_dir=locks) as a:
        assert a.indices == (0, 1) and a.cuda_visible_devices == "0,1"
        assert a.env() == {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        assert [h.gpu for h in holders(inv, lock_dir=locks)] == ["0", "1"]
        assert holders(inv, lock_dir=locks)[0].pid == os.getpid()
        b = reserve("all", inv, lock_dir=locks)  # every free one
        assert b.indices == (2,)
        with pytest.raises(ReservationError, match=r"reserve 'all': 0 of 3 GPU\(s\) free"):
            reserve("all", inv, lock_dir=locks)
        b.release()
        b.release()  # idempotent
        sel = select("2", inv)
        c = reserve(sel, inv, lock_dir=locks)
        assert c.selection is sel and c.indices == (2,)
        c.release()
    assert not a.held and holders(inv, lock_dir=locks) == ()
    none = reserve("none", inv, lock_dir=locks)
    assert none.indices == () and none.cuda_visible_devices == "-1"
    cpu_only = reserve("all", Inventory(), lock_dir=locks)
    assert cpu_only.indices == ()


def test_requests_that_can_never_be_met_fail_at_once(tmp_path) -> None:
    inv = fake_inventory(2)
    with pytest.raises(SelectionError):
        reserve("auto:3", inv, lock_dir=str(tmp_path), timeout=None)  # would otherwise wait forever
    with pytest.raises(SpecError):
        reserve("7", inv, lock_dir=str(tmp_path))
    with pytest.raises(InputError, match=r"timeout=-1 must be seconds"):
        reserve("auto:1", inv, lock_dir=str(tmp_path), timeout=-1)


def test_unusable_lock_dir(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ReservationError, match=r"lock directory .*file/locks' cannot be created") as caught:
        reserve("auto:1", fake_inventory(1), lock_dir=str(blocker / "locks"))
    assert "TFDEVICES_LOCK_DIR" in str(caught.value)


def test_default_lock_dir() -> None:
    assert default_lock_dir({"TFDEVICES_LOCK_DIR": "/x"}) == "/x"
    assert default_lock_dir({}) == DEFAULT_LOCK_DIR == "/tmp/tfdevices-locks"
    assert default_lock_dir({"TMPDIR": "/tmp/job-42"}) == DEFAULT_LOCK_DIR  # SLURM's per-job TMPDIR is not it


def test_package_name_stays_the_function_after_the_module_is_imported(tmp_path) -> None:
    import tfdevices
    import tfdevices.gpus.reservation

    assert tfdevices.reserve("auto:1", fake_inventory(1), lock_dir=str(tmp_path)).indices == (0,)


def test_docstring_examples() -> None:
    failed, tried = doctest.testmod(sys.modules["tfdevices.gpus.reservation"])
    assert tried >= 6 and failed == 0


# ---------------------------------------------------------------- hostile input, faults and races

import fcntl  # noqa: E402
import math  # noqa: E402
import uuid  # noqa: E402

from tfdevices.gpus import reservation as reservation_mod  # noqa: E402


def unique_inventory(n: int) -> Inventory:
    """Fake GPUs with UUIDs no other test or user shares, so the machine's default lock directory can be used."""
    tag = uuid.uuid4().hex[:12]
    return Inventory(
        gpus=tuple(
            GpuInfo(
                index=i,
                name="Fake GPU",
                uuid=f"GPU-test-{tag}-{i}",
                memory_free=1 << 30,
                cuda_ordinal=i,
                tf_name=f"/GPU:{i}",
            )
            for i in range(n)
        ),
        source="nvml",
    )


def lock_files(inv: Inventory, directory: str) -> list[str]:
    return [os.path.join(directory, reservation_mod._lock_name(g)) for g in inv.gpus]


@pytest.mark.parametrize(
    "kwargs, first_words",
    [
        (dict(timeout=math.nan), "timeout=nan must be seconds >= 0 or None"),
        (dict(timeout=-0.5), "timeout=-0.5 must be seconds"),
        (dict(timeout="5"), "timeout='5' must be seconds"),
        (dict(timeout=True), "timeout=True must be seconds"),
        (dict(poll_interval=math.nan), "poll_interval=nan must be seconds > 0"),
        (dict(poll_interval=-1), "poll_interval=-1 must be seconds > 0"),
        (dict(poll_interval=0), "poll_interval=0 must be seconds > 0"),
        (dict(poll_interval=math.inf), "poll_interval=inf must be seconds > 0"),
        (dict(poll_interval=None), "poll_interval=None must be seconds > 0"),
    ],
)
def test_timeout_and_poll_interval_are_validated(tmp_path, kwargs, first_words) -> None:
    with pytest.raises(InputError) as err:
        reserve("auto:1", fake_inventory(1), lock_dir=str(tmp_path), **kwargs)
    assert str(err.value).startswith(first_words) and "HINT:" in str(err.value)
    assert os.listdir(tmp_path) == []  # refused before any lock was taken


def test_infinite_timeout_waits_like_none(tmp_path) -> None:
    inv = fake_inventory(1)
    with reserve("0", inv, lock_dir=str(tmp_path), timeout=math.inf) as res:
        assert res.indices == (0,)


@pytest.mark.parametrize("spec", ["0,GPU-fake-0", "GPU-fake-1,1", [2, "GPU-fake-2"]])
def test_one_gpu_named_twice_is_refused_and_takes_no_lock(tmp_path, spec) -> None:
    inv = fake_inventory()
    with pytest.raises(SpecError, match="one GPU is one GPU"):
        reserve(spec, inv, lock_dir=str(tmp_path))
    with reserve("all", inv, lock_dir=str(tmp_path)) as res:  # every GPU is still free
        assert res.indices == (0, 1, 2, 3)


def test_a_selection_holding_one_gpu_twice_is_refused(tmp_path) -> None:
    inv = fake_inventory()
    sel = select("0", inv)
    doubled = Selection(spec="0,0", gpus=sel.gpus * 2)
    with pytest.raises(SpecError, match="holds GPU 0 and GPU 0, which are one GPU"):
        reserve(doubled, inv, lock_dir=str(tmp_path))
    assert holders(inv, lock_dir=str(tmp_path)) == ()


def test_partial_failure_releases_everything_taken(tmp_path, monkeypatch) -> None:
    inv = fake_inventory()
    calls = []

    def failing_write(fd, gpu):
        calls.append(gpu.key)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(reservation_mod, "_write_holder", failing_write)
    with pytest.raises(OSError, match="No space left"):
        reserve("auto:3", inv, lock_dir=str(tmp_path))
    monkeypatch.undo()
    with reserve("all", inv, lock_dir=str(tmp_path)) as res:  # nothing leaked: all four are free
        assert res.indices == (0, 1, 2, 3)


def test_interrupted_probe_releases_what_it_locked(tmp_path, monkeypatch) -> None:
    inv = fake_inventory()
    real = reservation_mod._bind_name
    seen = []

    def interrupted(directory, gpu):
        seen.append(gpu.key)
        if len(seen) == 3:
            raise KeyboardInterrupt
        return real(directory, gpu)

    monkeypatch.setattr(reservation_mod, "_bind_name", interrupted)
    with pytest.raises(KeyboardInterrupt):
        reserve("auto:1", inv, lock_dir=str(tmp_path))
    monkeypatch.undo()
    with reserve("all", inv, lock_dir=str(tmp_path)) as res:
        assert res.indices == (0, 1, 2, 3)


def test_lock_file_deleted_while_held_is_not_granted_again(tmp_path) -> None:
    inv = fake_inventory(2)
    locks = str(tmp_path)
    first = reserve("0", inv, lock_dir=locks)
    for path in lock_files(inv, locks):
        os.unlink(path)  # a /tmp cleaner
    assert first.lost() == ("0",)
    with pytest.raises(ReservationError, match=r"held: GPU 0 by an unknown process \(its lock file was deleted"):
        reserve("0", inv, lock_dir=locks)
    assert reserve("auto:1", inv, lock_dir=locks).indices == (1,)  # the other GPU is still given
    assert [h.gpu for h in holders(inv, lock_dir=locks)] == ["0", "1"]
    first.release()
    with reserve("0", inv, lock_dir=locks) as again:
        assert again.indices == (0,)


def test_restore_recreates_deleted_lock_files_with_the_holder_note(tmp_path) -> None:
    inv = fake_inventory(2)
    locks = str(tmp_path / "locks")
    res = reserve("all", inv, lock_dir=locks)
    assert res.restore() == ()
    shutil.rmtree(locks)  # the cleaner took the lock files and the directory
    assert res.lost() == ("0", "1")
    assert res.restore() == ("0", "1") and res.lost() == ()
    assert [(h.gpu, h.pid) for h in holders(inv, lock_dir=locks)] == [("0", os.getpid()), ("1", os.getpid())]
    with pytest.raises(ReservationError, match=rf"held: GPU 0 by pid {os.getpid()}"):
        reserve("0", inv, lock_dir=locks)
    res.release()
    with reserve("all", inv, lock_dir=locks) as again:
        assert again.indices == (0, 1)


def test_lock_file_replaced_between_open_and_flock_is_reopened(tmp_path, monkeypatch) -> None:
    inv = fake_inventory(1)
    path = lock_files(inv, str(tmp_path))[0]
    real_flock = fcntl.flock
    swapped = []

    def swap_then_lock(fd, op):
        if not swapped and os.path.exists(path) and os.fstat(fd).st_ino == os.stat(path).st_ino:
            swapped.append(True)
            os.unlink(path)
            open(path, "w").close()  # another file now has the name
        return real_flock(fd, op)

    monkeypatch.setattr(reservation_mod.fcntl, "flock", swap_then_lock)
    res = reserve("0", inv, lock_dir=str(tmp_path))
    monkeypatch.undo()
    assert swapped and res.lost() == ()  # the lock is on the file the path names now
    assert holders(inv, lock_dir=str(tmp_path))[0].pid == os.getpid()
    res.release()


def test_release_after_fork(tmp_path) -> None:
    inv = fake_inventory(1)
    locks = str(tmp_path)
    res = reserve("0", inv, lock_dir=locks)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its release says why it cannot, and closes its copies
        try:
            res.release()
            os.write(write, b"released")
        except ReservationError as err:
            os.write(write, str(err).encode()[:2000])
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    said = os.read(read, 4096).decode()
    os.close(read)
    assert said.startswith(f"release() in pid {pid}: GPU(s) 0 were reserved by pid {os.getpid()}")
    with pytest.raises(ReservationError):
        reserve("0", inv, lock_dir=locks)  # still held by this process
    res.release()
    with reserve("0", inv, lock_dir=locks) as again:
        assert again.indices == (0,)


def test_parent_release_frees_the_gpu_while_a_forked_child_lives(tmp_path) -> None:
    inv = fake_inventory(1)
    locks = str(tmp_path)
    res = reserve("0", inv, lock_dir=locks)
    read, write = os.pipe()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child that outlives the release (a DataLoader worker, a forked server ...)
        os.close(write)
        os.write(ready_write, b"r")  # after fork's child hooks ran
        os.read(read, 1)
        os._exit(0)
    os.read(ready_read, 1)
    os.close(ready_read)
    os.close(ready_write)
    try:
        res.release()
        with reserve("0", inv, lock_dir=locks) as again:  # not blocked by the child's inherited copies
            assert again.indices == (0,)
    finally:
        os.close(write)
        os.waitpid(pid, 0)
        os.close(read)


def test_symlinked_lock_file_is_refused(tmp_path) -> None:
    inv = fake_inventory(1)
    target = tmp_path / "elsewhere"
    target.write_text("precious")
    os.symlink(target, lock_files(inv, str(tmp_path))[0])
    with pytest.raises(ReservationError, match="it is a symbolic link"):
        reserve("0", inv, lock_dir=str(tmp_path))
    assert target.read_text() == "precious"


RACE_PROCS, RACE_GPUS, RACE_ROUNDS = 8, 3, 50


def test_race_across_tmpdirs_with_lock_files_deleted_mid_hold(tmp_path) -> None:
    """8 jobs with their own TMPDIR share the default lock directory; each round a cleaner deletes the lock
    files while they are held, and every loser tries again: no GPU is ever granted twice."""
    inv = unique_inventory(RACE_GPUS)
    path = tmp_path / "inventory.json"
    path.write_text(inv.to_json())
    env = {k: v for k, v in subprocess_env().items() if k != "TFDEVICES_LOCK_DIR"}
    procs = []
    for i in range(RACE_PROCS):
        tmpdir = tmp_path / f"job{i}"
        tmpdir.mkdir()
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, "race", "default", str(path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**env, "TMPDIR": str(tmpdir)},
                cwd=REPO,
            )
        )
    readers = [Lines(p) for p in procs]

    def ask(group):
        for p in group:
            p.stdin.write(b"go\n")
            p.stdin.flush()
        return {p.pid: readers[procs.index(p)].readline() for p in group}

    double_grants = 0
    try:
        for round_ in range(RACE_ROUNDS):
            answers = ask(procs)
            winners = {pid: int(a.split()[1]) for pid, a in answers.items() if a.startswith("got")}
            assert sorted(winners.values()) == list(range(RACE_GPUS)), f"round {round_}: {answers}"
            for lock in lock_files(inv, DEFAULT_LOCK_DIR):
                os.unlink(lock)  # the cleaner strikes while every GPU is held
            again = ask([p for p in procs if p.pid not in winners])
            regranted = [a for a in again.values() if a != "busy"]
            double_grants += len(regranted)
            assert not regranted, f"round {round_}: a held GPU was granted again: {again}"
            for p in procs:
                p.stdin.write(b"release\n")
                p.stdin.flush()
            assert [r.readline() for r in readers] == ["released"] * RACE_PROCS
        assert double_grants == 0
        print(
            f"{RACE_ROUNDS} rounds, {RACE_PROCS} processes with their own TMPDIR, lock files deleted "
            f"mid-hold every round: {double_grants} double grants"
        )
    finally:
        stop(procs)
        for lock in lock_files(inv, DEFAULT_LOCK_DIR):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
