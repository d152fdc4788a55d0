"""The pods the shipped manifests (``docs/kubernetes/``) make, as their controllers and the kubelet make them.

:func:`pods_of` reads a manifest and returns each pod's host name, labels, annotations, subdomain and container,
as JobSet's controller, the Job controller and LeaderWorkerSet's controller create them (the names and labels
their source writes); :func:`container_env` resolves the container's ``env`` as the kubelet does (``value``,
``valueFrom.fieldRef`` of the pod's metadata, ``$(VAR)`` references to earlier entries), adds what the
controllers and the container runtime inject (``JOB_COMPLETION_INDEX``, ``LWS_*``, ``HOSTNAME``), and
:func:`downward_files` writes the downward API volume's files as the kubelet writes them (``key="value"`` lines,
sorted). :func:`etc_hosts` is what a pod's ``/etc/hosts`` and the headless Service's DNS answer, together.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

import yaml

from tests.helpers import REPO

MANIFESTS = os.path.join(REPO, "docs", "kubernetes")
NAMESPACE = "default"


@dataclasses.dataclass(frozen=True)
class Pod:
    """One pod as its controller made it."""

    hostname: str
    subdomain: str
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]  # the pod template's spec
    injected: dict[str, str]  # env the controllers add (JOB_COMPLETION_INDEX, LWS_*)

    @property
    def container(self) -> dict[str, Any]:
        return self.spec["containers"][0]

    @property
    def address(self) -> str:
        return f"{self.hostname}.{self.subdomain}"


def load(name: str) -> list[dict[str, Any]]:
    """The documents of ``docs/kubernetes/NAME``."""
    with open(os.path.join(MANIFESTS, name), encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def pods_of(name: str, restart_attempt: int = 0) -> list[Pod]:
    """Every pod the manifest's training object makes, in the order its controller indexes them."""
    pods: list[Pod] = []
    for doc in load(name):
        kind = doc["kind"]
        if kind == "JobSet":
            pods += _jobset(doc, restart_attempt)
        elif kind == "Job":
            pods += _job(doc)
        elif kind == "LeaderWorkerSet":
            pods += _lws(doc)
    return pods


def _jobset(doc: dict[str, Any], attempt: int) -> list[Pod]:
    name = doc["metadata"]["name"]
    subdomain = (doc["spec"].get("network") or {}).get("subdomain") or name
    pods, global_index = [], 0
    for rjob in doc["spec"]["replicatedJobs"]:
        job_spec = rjob["template"]["spec"]
        for j in range(rjob.get("replicas", 1)):
            for p in range(job_spec.get("parallelism", 1)):
                labels = {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                    "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob.get("replicas", 1)),
                    "jobset.sigs.k8s.io/job-index": str(j),
                    "jobset.sigs.k8s.io/job-global-index": str(global_index),
                    "jobset.sigs.k8s.io/restart-attempt": str(attempt),
                    "batch.kubernetes.io/job-name": f"{name}-{rjob['name']}-{j}",
                    "batch.kubernetes.io/job-completion-index": str(p),
                }
                annotations = {**labels, "batch.kubernetes.io/job-completion-index": str(p)}
                hostname = f"{name}-{rjob['name']}-{j}-{p}"
                spec = job_spec["template"]["spec"]
                pods.append(Pod(hostname, subdomain, labels, annotations, spec, {"JOB_COMPLETION_INDEX": str(p)}))
            global_index += 1
    return pods


def _job(doc: dict[str, Any]) -> list[Pod]:
    name, spec = doc["metadata"]["name"], doc["spec"]
    template = spec["template"]["spec"]
    pods = []
    for i in range(spec["completions"]):
        labels = {"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/job-completion-index": str(i)}
        injected = {"JOB_COMPLETION_INDEX": str(i)}
        pods.append(Pod(f"{name}-{i}", template.get("subdomain", ""), labels, dict(labels), template, injected))
    return pods


def _lws(doc: dict[str, Any]) -> list[Pod]:
    name, spec = doc["metadata"]["name"], doc["spec"]
    size = spec["leaderWorkerTemplate"]["size"]
    template = spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    pods = []
    for group in range(spec.get("replicas", 1)):
        leader = f"{name}-{group}"
        for worker in range(size):
            labels = {
                "leaderworkerset.sigs.k8s.io/name": name,
                "leaderworkerset.sigs.k8s.io/group-index": str(group),
                "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
            }
            annotations = {"leaderworkerset.sigs.k8s.io/size": str(size)}
            injected = {
                "LWS_LEADER_ADDRESS": f"{leader}.{name}.{NAMESPACE}",
                "LWS_GROUP_SIZE": str(size),
                "LWS_WORKER_INDEX": str(worker),
            }
            hostname = leader if worker == 0 else f"{leader}-{worker}"
            pods.append(Pod(hostname, name, labels, annotations, template, injected))
    return pods


_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def container_env(pod: Pod, *, gpus: str = "void") -> dict[str, str]:
    """The container's environment as the kubelet gives it (the controllers' entries first, as they inject them),
    with ``HOSTNAME`` (the container runtime) and ``NVIDIA_VISIBLE_DEVICES`` (the device plugin; ``void``: none).
    """
    env: dict[str, str] = {"HOSTNAME": pod.hostname, "NVIDIA_VISIBLE_DEVICES": gpus, **pod.injected}
    for entry in pod.container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = _REF.sub(lambda m: env.get(m.group(1), m.group(0)), entry["value"])
        elif "fieldRef" in entry.get("valueFrom", {}):
            value = _field(pod, entry["valueFrom"]["fieldRef"]["fieldPath"])
            if value is not None:
                env[entry["name"]] = value
    return env


def command(pod: Pod, env: dict[str, str]) -> list[str]:
    """The container's command and args, ``$(VAR)`` expanded as the kubelet expands them."""
    words = list(pod.container.get("command", [])) + list(pod.container.get("args", []))
    return [_REF.sub(lambda m: env.get(m.group(1), m.group(0)), w) for w in words]


def _field(pod: Pod, path: str) -> str | None:
    if path == "metadata.name":
        return pod.hostname
    if path == "metadata.namespace":
        return NAMESPACE
    match = _FIELD.fullmatch(path)
    if match is None:
        raise AssertionError(f"a fieldPath the test's kubelet does not know: {path}")
    return (pod.labels if match.group(1) == "labels" else pod.annotations).get(match.group(2))


def downward_files(pod: Pod) -> dict[str, dict[str, str]]:
    """mountPath -> {file: text} for each downward API volume the container mounts, as the kubelet writes them."""
    volumes = {v["name"]: v for v in pod.spec.get("volumes", []) if "downwardAPI" in v}
    out: dict[str, dict[str, str]] = {}
    for mount in pod.container.get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        if volume is None:
            continue
        files = {}
        for item in volume["downwardAPI"]["items"]:
            field = item["fieldRef"]["fieldPath"]
            values = pod.labels if field == "metadata.labels" else pod.annotations
            files[item["path"]] = "".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(values.items()))
        out[mount["mountPath"]] = files
    return out


def etc_hosts(pods: list[Pod], addresses: list[str], me: int) -> str:
    """A pod's ``/etc/hosts`` (the kubelet's line for itself) with every pod's name under its headless Service,
    as the cluster's DNS answers them (``<host>.<subdomain>``)."""
    own = pods[me]
    lines = ["127.0.0.1\tlocalhost", f"{addresses[me]}\t{own.address}.{NAMESPACE}.svc.cluster.local\t{own.hostname}"]
    lines += [f"{address}\t{pod.address}" for pod, address in zip(pods, addresses)]
    return "\n".join(lines) + "\n"
