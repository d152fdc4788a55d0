"""Who am I in a Kubernetes job? The cluster a pod of a JobSet, an Indexed Job, a LeaderWorkerSet or a Volcano job
belongs to, worked out from what the pod carries, for TensorFlow (no Kubeflow ``TFJob`` needed).

Pure: :func:`pod_cluster` reads the environment mapping it is given, the pod's host name, and (where the manifest
mounts them) the downward API's ``labels`` and ``annotations`` files. It imports no TensorFlow and asks no
Kubernetes API: a pod needs no service account.

What a pod knows, and from where:

=================  ==============================================================  ===========================
kind               this pod's place, and the job's size                            set by
=================  ==============================================================  ===========================
JobSet             ``JOBSET_NAME``, ``JOBSET_REPLICATED_JOB``, ``JOBSET_REPLICAS``,  the downward API (the
                   ``JOBSET_JOB_INDEX`` (or the labels file), ``JOB_COMPLETION_INDEX``  manifest), the Job controller
Indexed Job        ``JOB_COMPLETION_INDEX``, the host name ``<job>-<index>``        the Job controller
LeaderWorkerSet    ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX``  the LWS controller
Volcano            ``VC_TASK_INDEX``, ``VC_<TASK>_HOSTS``                           the ``env`` and ``svc`` plugins
=================  ==============================================================  ===========================

What no pod can know (how many pods each Job runs, the port the job listens on) comes from one variable the
manifest sets, :data:`POD_CLUSTER`: ``TFDEVICES_POD_CLUSTER="port=2222,pods=1"``. Its keys:

* ``port`` (required): the port of the job: the workers' TensorFlow servers when each pod runs the script
  alone, the launchers' meeting point under ``tfdevices launch --nnodes``. The ``containerPort`` to declare.
* ``pods``: pods per Job (a JobSet's ``parallelism``, an Indexed Job's ``completions``); required there.
* ``subdomain``: the headless Service (a JobSet's ``spec.network.subdomain``, else its name; an Indexed
  Job's ``spec.template.spec.subdomain``, required there).
* ``podinfo``: the directory of a downward API volume holding ``labels`` and ``annotations``.
* ``wait``: seconds to wait for every pod's name to resolve (default 300).

A pod's address is ``<host name>.<subdomain>``, which the cluster's DNS answers for once the headless Service
publishes it. Without :data:`POD_CLUSTER` a pod runs as a single process (and ``tfdevices doctor`` says what it
recognised). Errors name the variable, label or key, never its value.

>>> pod = pod_cluster({"TFDEVICES_POD_CLUSTER": "port=2222,pods=1", "JOBSET_NAME": "tfd",
...                    "JOBSET_REPLICATED_JOB": "workers", "JOBSET_REPLICAS": "2", "JOBSET_JOB_INDEX": "1",
...                    "JOB_COMPLETION_INDEX": "0"}, hostname="tfd-workers-1-0")
>>> pod.kind, pod.index, pod.addresses
('JobSet', 1, ('tfd-workers-0-0.tfd:2222', 'tfd-workers-1-0.tfd:2222'))
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import time
import types
from collections.abc import Callable, Mapping, Sequence

from tfdevices.core.addresses import check_port
from tfdevices.core.errors import LaunchError
from tfdevices.core.units import parse_count
from tfdevices.jobs.tfconfig import TfConfig

POD_CLUSTER = "TFDEVICES_POD_CLUSTER"
"""The one variable a manifest sets: ``port=P[,pods=N][,subdomain=S][,podinfo=DIR][,wait=SECONDS]``."""
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
KINDS = ("JobSet", "Indexed Job", "LeaderWorkerSet", "Volcano")
MAX_PODS = 100_000
"""The most pods one job's cluster is read for (as many as SLURM's host lists)."""
MAX_TEXT = 1 << 20
"""The longest variable or downward API file read."""
DEFAULT_WAIT_S = 300.0
_SPEC_KEYS = ("port", "pods", "subdomain", "podinfo", "wait")
_SPEC_EXAMPLE = f'- {{name: {POD_CLUSTER}, value: "port=2222,pods=1"}}'
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_TASK_HOSTS = re.compile(r"VC_([A-Z0-9_]{1,63})_HOSTS")
_INDEX = "batch.kubernetes.io/job-completion-index"

#: The downward API env entries a JobSet manifest declares: (variable, the pod label it comes from).
JOBSET_ENV = (
    ("JOBSET_NAME", "jobset.sigs.k8s.io/jobset-name"),
    ("JOBSET_REPLICATED_JOB", "jobset.sigs.k8s.io/replicatedjob-name"),
    ("JOBSET_REPLICAS", "jobset.sigs.k8s.io/replicatedjob-replicas"),
    ("JOBSET_JOB_INDEX", "jobset.sigs.k8s.io/job-index"),
    ("JOBSET_RESTART_ATTEMPT", "jobset.sigs.k8s.io/restart-attempt"),
)
_JOBSET = dict(JOBSET_ENV)


@dataclasses.dataclass(frozen=True)
class PodSpec:
    """:data:`POD_CLUSTER`, validated (see the module's docstring for each key)."""

    port: int
    pods: int | None = None
    subdomain: str | None = None
    podinfo: str | None = None
    wait_s: float = DEFAULT_WAIT_S


@dataclasses.dataclass(frozen=True)
class PodCluster:
    """The job a pod belongs to.

    Attributes:
        kind: one of :data:`KINDS`.
        hosts: every pod's address name (``<host name>.<subdomain>``), in rank order.
        index: this pod's place in :attr:`hosts`.
        port: the job's port (:data:`POD_CLUSTER`'s ``port``).
        reason: what was read, for people (names, never values).
        variables: the variables read, by name.
        restart_attempt: a JobSet's ``restart-attempt`` label (``None``: not given).
        wait_s: seconds to wait for every name to resolve.
    """

    kind: str
    hosts: tuple[str, ...]
    index: int
    port: int
    reason: str
    variables: tuple[str, ...] = ()
    restart_attempt: int | None = None
    wait_s: float = DEFAULT_WAIT_S

    @property
    def names(self) -> tuple[str, ...]:
        """Every pod's host name (its first label), as ``kubectl get pods`` starts it."""
        return tuple(h.split(".", 1)[0] for h in self.hosts)

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every pod's ``host:port``, in rank order: what ``TF_CONFIG`` would list."""
        return tuple(f"{h}:{self.port}" for h in self.hosts)

    def tf_config(self) -> TfConfig:
        """The ``TF_CONFIG`` this pod would be given (every pod a worker; the source names the kind)."""
        cluster = types.MappingProxyType({"worker": self.addresses})
        return TfConfig(cluster=cluster, task_type="worker", task_index=self.index, source=f"{self.kind} pod")


# ---------------------------------------------------------------- the manifest's variable and files


def parse_pod_spec(text: str) -> PodSpec:
    """Validates :data:`POD_CLUSTER`'s text: comma-separated ``key=value`` entries.

    Raises:
        LaunchError: an entry that is not ``key=value``, an unknown or repeated key, no ``port``, or a value
            out of its range. The message names the key, never the value.

    >>> parse_pod_spec("port=2222,pods=2,subdomain=tfd")
    PodSpec(port=2222, pods=2, subdomain='tfd', podinfo=None, wait_s=300.0)
    >>> parse_pod_spec("pods=2")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.LaunchError: TFDEVICES_POD_CLUSTER names no port: ...
    """
    if len(text) > 4096:
        raise _spec_error(f"{POD_CLUSTER} is {len(text):,} characters long; it is read up to 4,096.")
    entries: dict[str, str] = {}
    for n, entry in enumerate(text.split(","), 1):
        key, sep, value = entry.strip().partition("=")
        if not entry.strip() and n > 1:
            continue  # a trailing comma
        if not sep or key not in _SPEC_KEYS:
            raise _spec_error(f"{POD_CLUSTER}: entry {n} is not one of {', '.join(_SPEC_KEYS)} as key=value.")
        if key in entries:
            raise _spec_error(f"{POD_CLUSTER}: {key}= is given twice.")
        entries[key] = value.strip()
    if "port" not in entries:
        raise _spec_error(
            f"{POD_CLUSTER} names no port: the pods cannot tell where the job's workers listen "
            "(no Kubernetes object says it to a pod)."
        )
    port = check_port(
        entries["port"], f"{POD_CLUSTER}'s port=", hint="give the job's port, e.g. port=2222 (its value is not shown)."
    )
    pods = _count(entries["pods"], f"{POD_CLUSTER}'s pods=", 1, MAX_PODS) if "pods" in entries else None
    subdomain = entries.get("subdomain")
    if subdomain is not None and not _LABEL.fullmatch(subdomain):
        raise _spec_error(f"{POD_CLUSTER}'s subdomain= is not a DNS label (a-z, 0-9 and '-', 1 to 63 characters).")
    podinfo = entries.get("podinfo")
    if podinfo is not None and not (podinfo.startswith("/") and len(podinfo) < 1024 and "\0" not in podinfo):
        raise _spec_error(f"{POD_CLUSTER}'s podinfo= is not an absolute path (the downward API volume's mountPath).")
    wait_s = DEFAULT_WAIT_S
    if "wait" in entries:
        wait_s = float(_count(entries["wait"], f"{POD_CLUSTER}'s wait=", 0, 86400))
    return PodSpec(port, pods, subdomain, podinfo, wait_s)


def _spec_error(message: str) -> LaunchError:
    return LaunchError(message, hint=f"set it in the container's env, e.g. {_SPEC_EXAMPLE} (docs: kubernetes guide).")


def parse_podinfo(text: str) -> dict[str, str]:
    """A downward API ``labels`` or ``annotations`` file (``key="value"`` lines, as the kubelet writes them).

    Lines that are not ``key="value"`` are left out; at most 10,000 lines are read.

    >>> parse_podinfo('jobset.sigs.k8s.io/job-index="1"\\napp="a \\\\"b\\\\""\\n')
    {'jobset.sigs.k8s.io/job-index': '1', 'app': 'a "b"'}
    """
    found: dict[str, str] = {}
    for line in text[:MAX_TEXT].splitlines()[:10_000]:
        key, sep, quoted = line.partition("=")
        if not sep or not key or len(key) > 317 or len(quoted) < 2 or quoted[0] != '"' or quoted[-1] != '"':
            continue
        found[key] = re.sub(r'\\(["\\])', r"\1", quoted[1:-1])
    return found


def read_podinfo(directory: str) -> dict[str, str]:
    """The labels and annotations of a downward API volume mounted at ``directory`` (missing files: none).

    The only effect of this module besides :func:`wait_for_names`: two small files read, each up to 1 MiB.
    """
    found: dict[str, str] = {}
    for name in ("annotations", "labels"):  # labels win where both hold a key (JobSet writes both alike)
        try:
            with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
                found.update(parse_podinfo(f.read(MAX_TEXT)))
        except OSError:
            continue
    return found


# ---------------------------------------------------------------- which pod is this


def pod_kind(env: Mapping[str, str], podinfo: Mapping[str, str] | None = None) -> str | None:
    """Which kind of pod ``env`` describes (one of :data:`KINDS`), ``None`` outside a recognised pod. Never raises.

    >>> pod_kind({"LWS_LEADER_ADDRESS": "x"}), pod_kind({"JOB_COMPLETION_INDEX": "0"}), pod_kind({})
    ('LeaderWorkerSet', 'Indexed Job', None)
    """
    info = podinfo or {}
    if "JOBSET_NAME" in env or _JOBSET["JOBSET_NAME"] in info:
        return "JobSet"
    if "LWS_LEADER_ADDRESS" in env:
        return "LeaderWorkerSet"
    if "VC_TASK_INDEX" in env or "VK_TASK_INDEX" in env:
        return "Volcano"
    if "JOB_COMPLETION_INDEX" in env or _INDEX in info:
        return "Indexed Job"
    return None


def pod_cluster(
    env: Mapping[str, str], *, hostname: str | None = None, podinfo: Mapping[str, str] | None = None
) -> PodCluster | None:
    """The job this pod belongs to, from ``env`` and :data:`POD_CLUSTER`; ``None`` when that is not set.

    Args:
        env: the pod's environment.
        hostname: the pod's host name (default ``HOSTNAME``, as every container has, else this machine's).
        podinfo: the downward API's labels and annotations (default: read from ``podinfo=``'s directory).

    Raises:
        LaunchError: :data:`POD_CLUSTER` is malformed, the pod is none of :data:`KINDS`, or a variable, label
            or key the kind needs is missing or malformed (named with the manifest line that gives it).
    """
    text = env.get(POD_CLUSTER)
    if text is None:
        return None
    spec = parse_pod_spec(text)
    if podinfo is None:
        podinfo = read_podinfo(spec.podinfo) if spec.podinfo else {}
    host = hostname if hostname is not None else env.get("HOSTNAME") or socket.gethostname()
    if not _LABEL.fullmatch(host):
        raise LaunchError(
            "this pod's host name (HOSTNAME) is not a DNS label: the other pods could not reach it by name.",
            hint="leave the pod template's hostname unset: the controller names each pod.",
        )
    kind = pod_kind(env, podinfo)
    if kind is None:
        raise LaunchError(
            f"{POD_CLUSTER} is set, but this pod is none of a JobSet's (JOBSET_NAME), an Indexed Job's "
            "(JOB_COMPLETION_INDEX), a LeaderWorkerSet's (LWS_LEADER_ADDRESS) or a Volcano job's (VC_TASK_INDEX).",
            hint="run it as one of those (see the kubernetes guide's manifests), or unset it.",
        )
    reader = {"JobSet": _jobset, "Indexed Job": _indexed_job, "LeaderWorkerSet": _lws, "Volcano": _volcano}[kind]
    return reader(env, spec, host, podinfo)


def _jobset(env: Mapping[str, str], spec: PodSpec, host: str, info: Mapping[str, str]) -> PodCluster:
    name = _label(env, info, "JOBSET_NAME")
    rjob = _label(env, info, "JOBSET_REPLICATED_JOB")
    replicas = _count(_label(env, info, "JOBSET_REPLICAS"), "JOBSET_REPLICAS", 1, MAX_PODS)
    job = _count(_label(env, info, "JOBSET_JOB_INDEX"), "JOBSET_JOB_INDEX", 0, replicas - 1)
    pods = _pods(spec, "JobSet", "the replicated job's template.spec.parallelism")
    pod = _completion_index(env, info, pods)
    _check_total(replicas * pods, "JOBSET_REPLICAS times pods=")
    subdomain = spec.subdomain or name
    expected = f"{name}-{rjob}-{job}-{pod}"
    _check_host(host, expected, "JobSet", "<jobset>-<replicated job>-<job index>-<pod index>")
    hosts = tuple(f"{name}-{rjob}-{j}-{p}.{subdomain}" for j in range(replicas) for p in range(pods))
    restart = env.get("JOBSET_RESTART_ATTEMPT", info.get(_JOBSET["JOBSET_RESTART_ATTEMPT"]))
    attempt = _count(restart, "JOBSET_RESTART_ATTEMPT", 0, 2**31 - 1) if restart is not None else None
    index = job * pods + pod
    read = [v for v, _ in JOBSET_ENV if v in env] + (["JOB_COMPLETION_INDEX"] if "JOB_COMPLETION_INDEX" in env else [])
    again = "" if not attempt else f", restart attempt {attempt}"
    reason = (
        f"a JobSet started this pod as worker {index} of {len(hosts)}: Job {job} of {replicas} of its "
        f"replicated job, pod {pod} of {pods}{again}; {POD_CLUSTER} gives pods= and port="
    )
    return PodCluster("JobSet", hosts, index, spec.port, reason, (POD_CLUSTER, *read), attempt, spec.wait_s)


def _indexed_job(env: Mapping[str, str], spec: PodSpec, host: str, info: Mapping[str, str]) -> PodCluster:
    pods = _pods(spec, "Indexed Job", "the Job's spec.completions")
    index = _completion_index(env, info, pods)
    if not host.endswith(f"-{index}") or len(host) <= len(f"-{index}"):
        raise LaunchError(
            "this pod's host name (HOSTNAME) is not <job name>-<JOB_COMPLETION_INDEX>, as the Job controller "
            "names an Indexed Job's pods: the other pods' names cannot be worked out.",
            hint="set the Job's completionMode: Indexed, and leave the pod template's hostname unset.",
        )
    if spec.subdomain is None:
        raise LaunchError(
            f"an Indexed Job pod, but {POD_CLUSTER} gives no subdomain=: the headless Service the pods are "
            "reached through is named only in the Job's spec.template.spec.subdomain.",
            hint=f'add subdomain=<that Service\'s name> to {POD_CLUSTER}, e.g. "port=2222,pods=2,subdomain=tfd".',
        )
    job = host[: -len(f"-{index}")]
    hosts = tuple(f"{job}-{i}.{spec.subdomain}" for i in range(pods))
    reason = (
        f"an Indexed Job started this pod as worker {index} of {pods}: JOB_COMPLETION_INDEX; "
        f"{POD_CLUSTER} gives pods=, port= and subdomain="
    )
    return PodCluster(
        "Indexed Job", hosts, index, spec.port, reason, (POD_CLUSTER, "JOB_COMPLETION_INDEX"), None, spec.wait_s
    )


def _lws(env: Mapping[str, str], spec: PodSpec, host: str, info: Mapping[str, str]) -> PodCluster:
    names = ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")
    for name in names:
        if name not in env:
            raise LaunchError(
                f"a LeaderWorkerSet pod (LWS_LEADER_ADDRESS is set), but {name} is not.",
                hint="the LWS controller sets all three; run the pod under a LeaderWorkerSet.",
            )
    size = _count(env["LWS_GROUP_SIZE"], "LWS_GROUP_SIZE", 1, MAX_PODS)
    index = _count(env["LWS_WORKER_INDEX"], "LWS_WORKER_INDEX", 0, size - 1)
    if spec.pods is not None and spec.pods != size:
        raise LaunchError(
            f"{POD_CLUSTER}'s pods= contradicts LWS_GROUP_SIZE, which the LWS controller sets from "
            "spec.leaderWorkerTemplate.size.",
            hint=f"leave pods= out of {POD_CLUSTER} in a LeaderWorkerSet.",
        )
    leader = env["LWS_LEADER_ADDRESS"]
    leader_host, dot, domain = leader.partition(".")
    if not (dot and len(leader) <= 253 and _LABEL.fullmatch(leader_host) and _NAME.fullmatch(domain)):
        raise LaunchError(
            "LWS_LEADER_ADDRESS is not <leader>.<subdomain>.<namespace> (DNS labels).",
            hint="the LWS controller sets it; do not set it in the manifest.",
        )
    expected = leader_host if index == 0 else f"{leader_host}-{index}"
    _check_host(host, expected, "LeaderWorkerSet", "<lws>-<group> for the leader, <lws>-<group>-<worker index>")
    hosts = (leader, *(f"{leader_host}-{i}.{domain}" for i in range(1, size)))
    reason = (
        f"a LeaderWorkerSet group started this pod as worker {index} of {size}: "
        f"LWS_WORKER_INDEX, LWS_GROUP_SIZE; {POD_CLUSTER} gives port="
    )
    return PodCluster("LeaderWorkerSet", hosts, index, spec.port, reason, (POD_CLUSTER, *names), None, spec.wait_s)


def _volcano(env: Mapping[str, str], spec: PodSpec, host: str, info: Mapping[str, str]) -> PodCluster:
    index_var = "VC_TASK_INDEX" if "VC_TASK_INDEX" in env else "VK_TASK_INDEX"
    index = _count(env[index_var], index_var, 0, MAX_PODS - 1)
    for var in sorted(env)[:10_000]:
        task = _TASK_HOSTS.fullmatch(var)
        if task is None:
            continue
        hosts = tuple(env[var][:MAX_TEXT].split(",")[: MAX_PODS + 1])
        if not any(h.split(".", 1)[0] == host for h in hosts):
            continue
        _check_total(len(hosts), var)
        if any(not (len(h) <= 253 and _NAME.fullmatch(h)) for h in hosts):
            raise LaunchError(f"{var} holds a name that is not a DNS name.", hint="Volcano's svc plugin sets it.")
        if index >= len(hosts) or hosts[index].split(".", 1)[0] != host:
            raise LaunchError(
                f"{index_var} does not point at this pod's name in {var}.",
                hint="Volcano's env and svc plugins set both: list both under the job's spec.plugins.",
            )
        reason = (
            f"the Volcano job started this pod as task {task.group(1).lower()} {index} of {len(hosts)}: "
            f"{index_var}, {var}; {POD_CLUSTER} gives port="
        )
        return PodCluster("Volcano", hosts, index, spec.port, reason, (POD_CLUSTER, index_var, var), None, spec.wait_s)
    raise LaunchError(
        f"a Volcano pod ({index_var} is set), but no VC_<TASK>_HOSTS lists this pod's host name.",
        hint="add the svc plugin to the job's spec.plugins (svc: []): it lists every task's pods.",
    )


# ---------------------------------------------------------------- pieces


def _label(env: Mapping[str, str], info: Mapping[str, str], variable: str) -> str:
    """A JobSet label, from its downward API env entry or the labels file."""
    label = _JOBSET[variable]
    value = env.get(variable, info.get(label))
    if value is None:
        raise LaunchError(
            f"a JobSet pod, but {variable} is not set: it is the pod's label {label}.",
            hint=f"add to the container's env: - {{name: {variable}, valueFrom: {{fieldRef: {{fieldPath: "
            f"\"metadata.labels['{label}']\"}}}}}} (or mount the labels with a downward API volume and name "
            f"it in {POD_CLUSTER}'s podinfo=).",
        )
    if variable in ("JOBSET_NAME", "JOBSET_REPLICATED_JOB") and not _LABEL.fullmatch(value):
        raise LaunchError(f"{variable} is not a DNS label.", hint=f"it must be the pod's label {label}, unchanged.")
    return value


def _pods(spec: PodSpec, kind: str, where: str) -> int:
    if spec.pods is None:
        raise LaunchError(
            f"a {kind} pod, but {POD_CLUSTER} gives no pods=: how many pods each Job runs is in {where}, "
            "which no pod can read.",
            hint=f'add pods=<that number> to {POD_CLUSTER}, e.g. "port=2222,pods=1".',
        )
    return spec.pods


def _completion_index(env: Mapping[str, str], info: Mapping[str, str], pods: int) -> int:
    value = env.get("JOB_COMPLETION_INDEX", info.get(_INDEX))
    if value is None:
        raise LaunchError(
            "JOB_COMPLETION_INDEX is not set: this pod's place in its Job is unknown.",
            hint="set the Job's completionMode: Indexed (a JobSet's jobs are Indexed by default); the Job "
            "controller then sets JOB_COMPLETION_INDEX in every container.",
        )
    index = _count(value, "JOB_COMPLETION_INDEX", 0, MAX_PODS - 1)
    if index >= pods:
        raise LaunchError(
            f"JOB_COMPLETION_INDEX is out of range for {POD_CLUSTER}'s pods= (indices 0..{pods - 1}).",
            hint="pods= must be the Job's completions (a JobSet's parallelism): check the manifest.",
        )
    return index


def _count(text: str | None, name: str, low: int, high: int) -> int:
    number = parse_count((text or "").strip(), limit=max(high, 0)) if text is not None else None
    if number is None or number < low:
        span = f"{low}..{high}" if high >= low else f"at least {low}"
        raise LaunchError(
            f"{name} is not a whole number in {span} (its value is not shown).",
            hint="check the manifest line that sets it (the kubernetes guide lists them).",
        )
    return number


def _check_total(total: int, what: str) -> None:
    if total > MAX_PODS:
        raise LaunchError(f"{what} make {total:,} pods; at most {MAX_PODS:,} are read.", hint="check the manifest.")


def _check_host(host: str, expected: str, kind: str, form: str) -> None:
    if host != expected:
        raise LaunchError(
            f"this pod's host name (HOSTNAME) is not the one its {kind} labels give ({form}): the other pods "
            "would look for it under another name.",
            hint="leave the pod template's hostname unset, and check the labels' env entries (or podinfo=).",
        )


# ---------------------------------------------------------------- the GPUs a pod sees, and its peers' names


def pod_gpus(env: Mapping[str, str]) -> tuple[int, ...] | None:
    """The GPUs the NVIDIA device plugin gave this pod, as NVML indices inside it (``None``: it said nothing).

    The plugin sets :data:`NVIDIA_VISIBLE_DEVICES` (indices or UUIDs of the node's GPUs, never
    ``CUDA_VISIBLE_DEVICES``); the container runtime shows the pod those GPUs only, numbered from 0, as a node
    with that many GPUs: ``all`` is every GPU NVML sees, ``none`` and ``void`` none.

    >>> pod_gpus({"NVIDIA_VISIBLE_DEVICES": "GPU-0c1d,GPU-9af2"}), pod_gpus({"NVIDIA_VISIBLE_DEVICES": "void"})
    ((0, 1), ())

    Raises:
        LaunchError: an entry is neither a whole number nor a GPU or MIG UUID.
    """
    value = env.get(NVIDIA_VISIBLE_DEVICES)
    if value is None or value.strip() == "all":
        return None
    if value.strip() in ("", "none", "void"):
        return ()
    entries = value[:MAX_TEXT].split(",")
    if len(entries) > 1024 or any(
        not re.fullmatch(r"[0-9]{1,4}|(GPU|MIG)-[0-9A-Za-z/-]{1,80}", e.strip()) for e in entries
    ):
        raise LaunchError(
            f"{NVIDIA_VISIBLE_DEVICES} is not all, none, void or a comma list of GPU indices or UUIDs.",
            hint="the NVIDIA device plugin sets it; do not set it in the manifest (ask nvidia.com/gpu: N).",
        )
    return tuple(range(len(entries)))


def wait_for_names(
    hosts: Sequence[str],
    timeout_s: float,
    *,
    resolve: Callable[[str], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Waits up to ``timeout_s`` for every pod's name to resolve (the headless Service publishes each pod once it
    has an address); returns at once where they all do.

    Raises:
        LaunchError: names left unresolved at the end, said with what that means (the Service not published yet,
            or a subdomain that names no Service).
    """
    resolve = resolve or (lambda name: socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM))
    start, pause = clock(), 0.25
    missing = list(dict.fromkeys(hosts))
    while True:
        left = []
        for name in missing:
            try:
                resolve(name)
            except (OSError, UnicodeError):
                left.append(name)
        missing = left
        if not missing or clock() - start >= timeout_s:
            break
        sleep(min(pause, max(0.0, timeout_s - (clock() - start))))
        pause = min(pause * 2, 5.0)
    if missing:
        # the names are built from the pod's variables, so workers are named by their index, not their host
        gone = set(missing)
        workers = [i for i, h in enumerate(hosts) if h in gone]
        shown = ", ".join(map(str, workers[:4])) + (f" and {len(workers) - 4} more" if len(workers) > 4 else "")
        raise LaunchError(
            f"{len(missing)} of {len(set(hosts))} pod name(s) did not resolve in {timeout_s:g} s (worker(s) "
            f"{shown}). Either the headless Service (the names' subdomain) is not published yet (its pods are "
            "not all created, or it does not publish not-ready addresses), or the subdomain is wrong (no such "
            "Service in this namespace).",
            hint="kubectl get service <the subdomain> and kubectl get endpointslices; check the "
            f"subdomain (a JobSet's spec.network.subdomain, a pod template's subdomain, {POD_CLUSTER}'s "
            f"subdomain=), or wait longer with {POD_CLUSTER}'s wait=.",
        )
