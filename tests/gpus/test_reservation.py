"""reserve: real processes racing for fake GPUs through real lock files."""

from __future__ import annotations

import doctest
import os
import select as select_mod
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import REPO, subprocess_env
from tfdevices.core.errors import ReservationError, SelectionError, SpecError
from tfdevices.gpus.inventory import GpuInfo, Inventory
from tfdevices.gpus.reservation import Reservation, default_lock_dir, holders, reserve
from tfdevices.gpus.selection import select

WORKER = os.path.join(REPO, "tests", "scripts", "reserve_worker.py")
RACERS, GPUS, ROUNDS = 16, 4, 50


def fake_inventory(n: int = GPUS) -> Inventory:
    return Inventory(gpus=tuple(GpuInfo(index=i, name="Fake GPU", uuid=f"GPU-fake-{i}", memory_total=16 << 30,
                                        memory_free=(16 - i) << 30, cuda_ordinal=i, tf_name=f"/GPU:{i}")
                                for i in range(n)), source="nvml")


@pytest.fixture()
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
    return subprocess.Popen([sys.executable, WORKER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=subprocess_env(), cwd=REPO)


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
        with pytest.raises(ReservationError, match=rf"reserve '2': 0 of 1 GPU\(s\) 2 asked for free .*"
                                                   rf"held: GPU 2 by pid {proc.pid} on "):
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
    with pytest.raises(ReservationError, match=r"timeout=-1 must be seconds"):
        reserve("auto:1", inv, lock_dir=str(tmp_path), timeout=-1)


def test_unusable_lock_dir(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ReservationError, match=r"lock directory .*file/locks' cannot be created") as caught:
        reserve("auto:1", fake_inventory(1), lock_dir=str(blocker / "locks"))
    assert "TFDEVICES_LOCK_DIR" in str(caught.value)


def test_default_lock_dir() -> None:
    assert default_lock_dir({"TFDEVICES_LOCK_DIR": "/x"}) == "/x"
    assert default_lock_dir({}).endswith("tfdevices-locks")


def test_package_name_stays_the_function_after_the_module_is_imported(tmp_path) -> None:
    import tfdevices
    import tfdevices.gpus.reservation  # noqa: F401

    assert tfdevices.reserve("auto:1", fake_inventory(1), lock_dir=str(tmp_path)).indices == (0,)


def test_docstring_examples() -> None:
    failed, tried = doctest.testmod(sys.modules["tfdevices.gpus.reservation"])
    assert tried >= 6 and failed == 0
