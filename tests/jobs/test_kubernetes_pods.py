"""Pods simulated on one machine, started from the shipped manifests (docs/kubernetes/): each pod a process in its
own network, mount and UTS namespaces (as root): one interface, a veth pair to a bridge inside a namespace of the
test's own, an address from 192.0.2.0/24 (TEST-NET-1, never leaving those namespaces), the pod's host name, an
/etc/hosts naming every pod as the headless Service's DNS does, a /tmp of its own, the downward API's files at
their mountPath, and the environment the kubelet resolves from the manifest (tests/jobs/kubernetes_pods.py).

Both ways: each pod running the script alone (TF_CONFIG worked out from the pod) and `tfdevices launch` in each
pod (its options from the pod); Keras 3 fit to the end, one pod slow named on pod 0's console with its pod's
name (both ways); a stuck pod named and the job stopped (a failed pod has the others deleted, as JobSet's failure
policy does), then the JobSet's restart (a new restart-attempt) training to the end.
Where namespaces cannot be made the tests fail under CI=true with the reason (tests.helpers.unavailable).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

from tests.helpers import REPO, subprocess_env, unavailable
from tests.jobs.kubernetes_pods import Pod, command, container_env, downward_files, etc_hosts, pods_of
from tfdevices.jobs.env import launch_info

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("engines"), pytest.mark.timeout(900)]

SLOW = os.path.join(REPO, "tests", "scripts", "slow_rank.py")
STUCK = os.path.join(REPO, "tests", "scripts", "stuck_rank.py")
VENV_BIN = os.path.dirname(sys.executable)
#: Inside the pod's namespaces: its files bound where the kubelet mounts them, its host name, then its command.
_ENTER = """set -e
mount --bind "$1/hosts" /etc/hosts
mount --bind "$1/tmp" /tmp
if [ -d "$1/podinfo" ]; then mount --bind "$1/podinfo" "$2"; fi
hostname "$3"
shift 3
exec "$@"
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Network:
    """The pods' network: a bridge in a namespace of its own, and one namespace a pod with its veth end."""

    def __init__(self, count: int) -> None:
        self.tag = secrets.token_hex(2)
        self.bridge = f"tfk{self.tag}br"
        self.pods = [f"tfk{self.tag}p{i}" for i in range(count)]
        self.addresses = [f"192.0.2.{10 + i}" for i in range(count)]

    def create(self) -> None:
        _ip("netns", "add", self.bridge)
        _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge, "link", "set", "br0", "up")
        for i, (ns, address) in enumerate(zip(self.pods, self.addresses)):
            pod_end, bridge_end = f"tk{self.tag}{i}a", f"tk{self.tag}{i}b"
            _ip("netns", "add", ns)
            _ip("link", "add", pod_end, "type", "veth", "peer", "name", bridge_end)
            _ip("link", "set", pod_end, "netns", ns)
            _ip("link", "set", bridge_end, "netns", self.bridge)
            _ip("-n", self.bridge, "link", "set", bridge_end, "master", "br0", "up")
            _ip("-n", ns, "link", "set", pod_end, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def delete(self) -> None:
        for ns in [*self.pods, self.bridge]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


@contextlib.contextmanager
def cluster(pods: list[Pod]) -> Iterator[tuple[Network, str]]:
    """The pods' network and a root folder (outside /tmp, which each pod has of its own); all gone afterwards."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        unavailable("simulated pods need root, iproute2's ip and util-linux's unshare")
    network = Network(len(pods))
    root = tempfile.mkdtemp(prefix="tfd-pods-", dir="/var/tmp")
    made: list[str] = []
    try:
        try:
            network.create()
        except subprocess.CalledProcessError as err:
            unavailable(f"cannot make network namespaces here ({' '.join(err.cmd[:4])}: {err.stderr.strip()})")
        for pod in pods:
            for mount in downward_files(pod):
                if not os.path.isdir(mount):  # a mount point for the pod's own view; the host's is left empty
                    os.makedirs(mount)
                    made.append(mount)
        yield network, root
    finally:
        network.delete()
        for mount in made:
            with contextlib.suppress(OSError):
                os.rmdir(mount)
        shutil.rmtree(root, ignore_errors=True)


def start_pods(
    pods: list[Pod], network: Network, root: str, commands: list[list[str]], extra: dict[str, str] | None = None
) -> list[subprocess.Popen]:
    """Starts each pod's command in its namespaces, with its files and the environment the kubelet gives it."""
    procs = []
    for i, (pod, words) in enumerate(zip(pods, commands)):
        folder = os.path.join(root, pod.hostname)
        os.makedirs(os.path.join(folder, "tmp"), exist_ok=True)
        with open(os.path.join(folder, "hosts"), "w") as f:
            f.write(etc_hosts(pods, network.addresses, i))
        mount = "/nonexistent"
        for mount, files in downward_files(pod).items():  # noqa: B007 (the last mountPath is bound below)
            os.makedirs(os.path.join(folder, "podinfo"), exist_ok=True)
            for name, text in files.items():
                with open(os.path.join(folder, "podinfo", name), "w") as f:
                    f.write(text)
        env = subprocess_env({**container_env(pod), **(extra or {})}, drop=("TMPDIR", "TFDEVICES_PROGRESS_DIR"))
        env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
        enter = ["ip", "netns", "exec", network.pods[i], "unshare", "--mount", "--uts", "--propagation", "private"]
        procs.append(
            subprocess.Popen(
                [*enter, "sh", "-c", _ENTER, "pod", folder, mount, pod.hostname, *words],
                env=env,
                cwd=REPO,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return procs


def wait_pods(procs: list[subprocess.Popen], timeout: float) -> tuple[list[str], list[int | None]]:
    """Every pod's console and exit status (none outlives the call). As JobSet's failure policy does, a pod that
    fails has the others deleted: SIGTERM, then SIGKILL after a grace period of 10 s (their status is then the
    signal's, negative).
    """
    outs: dict[int, list[str]] = {i: [] for i in range(len(procs))}
    readers = [threading.Thread(target=lambda i=i: outs[i].append(procs[i].stdout.read()), daemon=True)
               for i in range(len(procs))]  # fmt: skip
    for reader in readers:
        reader.start()
    deadline, failed_at = time.monotonic() + timeout, None
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
                failed_at = time.monotonic()
                for proc in procs:
                    if proc.poll() is None:
                        with contextlib.suppress(OSError):
                            os.killpg(proc.pid, signal.SIGTERM)
            if failed_at is not None and time.monotonic() - failed_at > 10:
                break
            time.sleep(0.2)
    finally:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for reader in readers:
            reader.join(10)
    return ["".join(outs[i]) for i in range(len(procs))], [p.returncode for p in procs]


def run_pods(pods: list[Pod], commands: list[list[str]], extra: dict[str, str] | None = None, timeout: float = 600):
    with cluster(pods) as (network, root):
        shared = os.path.join(root, "shared")
        os.makedirs(shared)
        env = {k: v.replace("{shared}", shared) for k, v in (extra or {}).items()}
        return wait_pods(start_pods(pods, network, root, commands, env), timeout)


def _manifest_command(pod: Pod) -> list[str]:
    return command(pod, container_env(pod))


# --------------------------------------------------------------------------- each kind of pod: doctor's job rows


def _volcano_pods() -> list[Pod]:
    """A Volcano job's two worker pods as its env and svc plugins make them (no manifest of ours)."""
    pods = []
    for i in range(2):
        injected = {
            "VC_TASK_INDEX": str(i),
            "VK_TASK_INDEX": str(i),
            "VC_WORKER_HOSTS": "vj-worker-0.vj,vj-worker-1.vj",
            "VC_WORKER_NUM": "2",
            "TFDEVICES_POD_CLUSTER": "port=2222",
        }
        spec = {"containers": [{"name": "train", "command": ["tfdevices", "doctor", "--no-tensorflow"]}]}
        pods.append(Pod(f"vj-worker-{i}", "vj", {}, {}, spec, injected))
    return pods


KINDS = {
    "JobSet": lambda: pods_of("jobset.yaml"),
    "Indexed Job": lambda: pods_of("indexed-job.yaml"),
    "LeaderWorkerSet": lambda: pods_of("lws.yaml"),
    "Volcano": _volcano_pods,
}


@pytest.fixture(scope="module")
def doctor_rows() -> dict[str, str]:
    """``tfdevices doctor``'s job rows in pod 1 of each kind (run in that pod's namespaces)."""
    rows = {}
    for kind, make in KINDS.items():
        pods = make()
        outs, codes = run_pods(pods, [["tfdevices", "doctor", "--no-tensorflow"]] * len(pods), timeout=120)
        assert codes == [0] * len(pods), outs
        job = outs[1][outs[1].index("job:") :]
        rows[kind] = job[: job.index("\n\n")]
        print(f"--- {kind}, pod 1:\n{rows[kind]}")
    return rows


@pytest.mark.parametrize(
    "kind, rank",
    [
        ("JobSet", ("1 of 2, local rank 0 of 1: a JobSet started this pod as worker 1 of 2: Job 1 of 2 of its "
                    "replicated job, pod 0 of 1; TFDEVICES_POD_CLUSTER gives pods= and port=")),
        ("Indexed Job", "1 of 2, local rank 0 of 1: an Indexed Job started this pod as worker 1 of 2"),
        ("LeaderWorkerSet", "1 of 2, local rank 0 of 1: a LeaderWorkerSet group started this pod as worker 1 of 2"),
        ("Volcano", "1 of 2, local rank 0 of 1: the Volcano job started this pod as task worker 1 of 2"),
    ],
)  # fmt: skip
def test_doctor_says_each_kind_of_pods_place_and_its_pods(doctor_rows: dict[str, str], kind: str, rank: str) -> None:
    rows = doctor_rows[kind]
    assert re.search(r"^  rank +" + re.escape(rank), rows, re.M), rows
    assert re.search(r"^  pods +2 in the job \(launch_info\(\)\.tf_config names them\)$", rows, re.M), rows


# --------------------------------------------------------------------------- the script alone: stuck, then restarted


@pytest.fixture(scope="module")
def stuck_then_restarted() -> tuple[tuple[list[str], list[int | None]], tuple[list[str], list[int | None]]]:
    """docs/kubernetes/jobset.yaml's pods, the script alone in each: first pod 1 stuck before step 5 (the stall
    window 6 s, the timeout 8 s), which stops the job; then, as JobSet restarts every pod of a failed JobSet
    (the same names, a new restart-attempt label, fresh pods), the manifest's own command in each.
    """
    pods = pods_of("jobset.yaml")
    stalls = {"TFDEVICES_STALL_WINDOW": "6", "TFDEVICES_STALL_TIMEOUT": "8"}
    stuck = run_pods(pods, [[sys.executable, STUCK, "loop", "1", "600"]] * 2, stalls, timeout=300)
    again = pods_of("jobset.yaml", restart_attempt=1)
    return stuck, run_pods(again, [_manifest_command(p) for p in again])


def test_a_stuck_pod_is_named_on_pod_0_with_its_frame_and_the_job_stops(stuck_then_restarted) -> None:
    (outs, codes), _ = stuck_then_restarted
    named = "tfdevices: stall: rank 1 on node tfd-workers-1-0 did not arrive at step 5"
    assert named in outs[0], outs[0][-3000:]
    frames = outs[0].split("rank 1's stack (node tfd-workers-1-0), innermost first:")
    assert len(frames) > 1 and "in loop" in frames[1][:400], outs[0][-3000:]
    assert codes[0] == 3, (codes, outs[0][-2000:])
    # pod 1 reads rank 0's stop, or (rank 0 gone first) JobSet's failure policy deletes it as pod 0 fails
    stopped = "tfdevices: rank 0 stopped the job (a stall past the stall timeout)" in outs[1]
    assert (stopped and codes[1] == 3) or codes[1] in (-signal.SIGTERM, -signal.SIGKILL), (codes, outs[1][-3000:])
    lines = outs[0].splitlines()
    at = next(n for n, line in enumerate(lines) if named in line)
    print("\n".join(lines[at : at + 9]), "\nexit statuses:", codes)


def test_the_restarted_pods_rejoin_and_train_keras_fit_to_the_end_with_equal_weights(stuck_then_restarted) -> None:
    _, (outs, codes) = stuck_then_restarted
    assert codes == [0, 0], [o[-3000:] for o in outs]
    lines = [re.search(r"^rank (\d)/2 \(kubernetes\), .* (fit|custom)[^,]*, losses .*weights checksum (\S+)$", o, re.M)
             for o in outs]  # fmt: skip
    assert all(lines), [o[-2000:] for o in outs]
    assert [m.group(1) for m in lines] == ["0", "1"]  # type: ignore[union-attr]
    assert lines[0].group(3) == lines[1].group(3)  # type: ignore[union-attr]
    print("\n".join(m.group(0) for m in lines if m))
    attempt = launch_info(container_env(pods_of("jobset.yaml", restart_attempt=1)[1])).reason
    assert attempt.endswith(
        "Job 1 of 2 of its replicated job, pod 0 of 1, restart attempt 1; TFDEVICES_POD_CLUSTER gives pods= and port="
    ), attempt


# --------------------------------------------------------------------------- tfdevices launch in each pod, one slow


@pytest.fixture(scope="module")
def launched_slow() -> tuple[list[str], list[int | None]]:
    """docs/kubernetes/jobset-launch.yaml's pods, each `tfdevices launch` as the manifest has it (one worker a pod:
    no GPUs here), running the slow-rank script's Keras fit with rank 1 (pod 1) slow between its steps.
    """
    pods = pods_of("jobset-launch.yaml")
    commands = []
    for pod in pods:
        words = _manifest_command(pod)
        launcher = words[: words.index("--")]
        launcher[launcher.index("-n") + 1] = "1"
        commands.append([*launcher, "--", sys.executable, SLOW, "fit", "between", "1", "200"])
    return run_pods(pods, commands, {"SLOW_RANK_MIN_S": "12", "SLOW_RANK_SYNC": "{shared}"})


def test_launch_in_each_pod_takes_its_options_from_the_pod_and_names_the_slow_pod_on_pod_0(launched_slow) -> None:
    outs, codes = launched_slow
    assert codes == [0, 0], [o[-3000:] for o in outs]
    lines = outs[0].splitlines()
    prefix = "[launcher] tfdevices: rank 1 on node tfd-launch-nodes-1-0 is the slow one: "
    named = [n for n, line in enumerate(lines) if line.startswith(prefix)]
    done = [n for n, line in enumerate(lines) if line == "[0] rank 0 done"]
    assert named and done and named[0] < done[0], outs[0][-3000:]  # said while the job ran
    assert re.search(
        r"rank 0 waits [\d.]+ ms of each [\d.]+ ms step for it in the all-reduce; rank 1 spends \d+ ms "
        r"between steps in fit's callbacks",
        lines[named[0]],
    ), lines[named[0]]
    print(lines[named[0]])
    assert "slow one" not in outs[1], outs[1][-3000:]


@pytest.fixture(scope="module")
def alone_slow() -> tuple[list[str], list[int | None]]:
    """docs/kubernetes/jobset.yaml's pods, the slow-rank script's Keras fit alone in each, pod 1 slow between steps."""
    pods = pods_of("jobset.yaml")
    commands = [[sys.executable, SLOW, "fit", "between", "1", "200"]] * 2
    return run_pods(pods, commands, {"SLOW_RANK_MIN_S": "12", "SLOW_RANK_SYNC": "{shared}"})


def test_the_script_alone_names_the_slow_pod_on_pod_0_through_the_coordination_service(alone_slow) -> None:
    outs, codes = alone_slow
    assert codes == [0, 0], [o[-3000:] for o in outs]
    lines = outs[0].splitlines()
    named = [
        n for n, line in enumerate(lines) if line.startswith("tfdevices: rank 1 on node tfd-workers-1-0 is the slow")
    ]
    assert named and named[0] < lines.index("rank 0 done"), outs[0][-3000:]  # said while the job ran
    print(lines[named[0]])
