"""The real engines users launch with, started by the tests on this machine, on 127.0.0.1 only.

* :func:`slurm_cluster`: a one-node SLURM (Debian's ``slurmctld``, ``slurmd``, ``munge``) with its
  own configuration, key, sockets and state under a temporary directory; at the end the processes
  started under it (srun, its steps' tasks) are ended, then the daemons by pid. Its first job id is
  drawn at random, as a real cluster's ids are arbitrary: two tests' steps do not share a port block.
  Needs root (``slurmd`` launches the tasks).
* Ray: tests/scripts/ray_fit.py starts its own local cluster (``ray.init`` bound to 127.0.0.1).

Without the engine the test is skipped with the reason, except under ``CI=true``, where it fails:
``.ci/run`` installs what they need.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

from tests.helpers import unavailable
from tfdevices.jobs.rendezvous import free_ports

DAEMONS = ("munged", "slurmctld", "slurmd", "srun")


_CONF = """ClusterName=tfdevices
FirstJobId={first_job}
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=tests Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def _pid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _stop(pids: list[int]) -> None:
    for pid in reversed(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def slurm_cluster(root: str) -> Iterator[dict[str, str]]:
    """A one-node SLURM on this machine; yields the environment ``srun`` needs (``SLURM_CONF``)."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not os.path.exists(f"/usr/sbin/{d}")]
    if missing:
        unavailable(
            f"SLURM is not installed ({', '.join(missing)} missing; Debian: apt-get install slurmd slurmctld munge)"
        )
    if os.geteuid() != 0:
        unavailable("a one-node SLURM needs root here (slurmd starts the tasks)")
    for sub in ("state", "spool"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    ctld_port, slurmd_port = free_ports(2)
    conf = os.path.join(root, "slurm.conf")
    with open(conf, "w") as f:
        f.write(
            _CONF.format(
                host=socket.gethostname(),
                root=root,
                ctld_port=ctld_port,
                slurmd_port=slurmd_port,
                cpus=os.cpu_count() or 1,
                first_job=random.randrange(1, 1_000_000),
            )
        )
    key = os.path.join(root, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    env = dict(os.environ, SLURM_CONF=conf)
    pids: list[int] = []
    sbin = lambda name: shutil.which(name) or f"/usr/sbin/{name}"
    try:
        try:
            subprocess.run(
                [
                    sbin("munged"),
                    "--force",
                    f"--socket={root}/munge.socket",
                    f"--key-file={key}",
                    f"--pid-file={root}/munged.pid",
                    f"--log-file={root}/munged.log",
                    f"--seed-file={root}/munge.seed",
                ],
                check=True,
                capture_output=True,
                timeout=30,
            )
            _wait_for_pid(f"{root}/munged.pid", pids)
            subprocess.run([sbin("slurmctld"), "-c", "-f", conf], env=env, check=True, capture_output=True, timeout=30)
            _wait_for_pid(f"{root}/slurmctld.pid", pids)
            subprocess.run([sbin("slurmd"), "-f", conf], env=env, check=True, capture_output=True, timeout=30)
            _wait_for_pid(f"{root}/slurmd.pid", pids)
            _wait_idle(env)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, TimeoutError, OSError) as err:
            logs = "".join(_tail(os.path.join(root, n)) for n in ("munged.log", "slurmctld.log", "slurmd.log"))
            unavailable(f"the one-node SLURM did not start ({err}): {logs}")
        yield {"SLURM_CONF": conf}
    finally:
        _stop([p for p in _started_under(conf) if p not in pids])  # a job's processes first, then the daemons
        _stop(pids)


def _started_under(conf: str) -> list[int]:
    """The processes started under this cluster (its daemons, and srun, slurmstepd and the tasks): each has its
    ``SLURM_CONF`` in its environment. A task still running would hold its step's ports past the test.
    """
    mark = b"\0" + f"SLURM_CONF={conf}".encode() + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if mark in b"\0" + f.read() + b"\0":
                        found.append(int(name))
            except OSError:
                continue
    return found


def _wait_for_pid(path: str, pids: list[int]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pid = _pid(path)
        if pid:
            pids.append(pid)
            return
        time.sleep(0.1)
    raise TimeoutError(f"no pid in {path} after 20 s")


def _wait_idle(env: dict[str, str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, timeout=20)
        if out.stdout.strip() in ("idle", "mix", "alloc"):
            return
        time.sleep(0.5)
    raise TimeoutError("the SLURM node did not become idle within 60 s")


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f"\n--- {os.path.basename(path)}\n" + f.read()[-1500:]
    except OSError:
        return ""
