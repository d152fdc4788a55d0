"""Kubernetes pods as a launch source (tfdevices.jobs.kubernetes): tables of pods good and bad, the shipped
manifests' pods as their controllers and the kubelet make them, the errors (named, never a value), the names'
bounded wait, tfdevices launch's options from the pod, a fuzzed parser, and each manifest validated against the
published schema of its kind (tests/data/kubernetes/README.rst says where each came from).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import subprocess
import sys

import jsonschema
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from tests.helpers import REPO, subprocess_env
from tests.jobs.kubernetes_pods import command, container_env, downward_files, load, pods_of
from tfdevices.core.errors import LaunchError
from tfdevices.jobs import kubernetes as k8s
from tfdevices.jobs.cluster import cluster_from_env
from tfdevices.jobs.env import launch_info
from tfdevices.jobs.launch_command import with_pod_defaults
from tfdevices.jobs.progress import progress_dir

SCHEMAS = os.path.join(REPO, "tests", "data", "kubernetes")
JOBSET = {
    "TFDEVICES_POD_CLUSTER": "port=2222,pods=1",
    "JOBSET_NAME": "tfd",
    "JOBSET_REPLICATED_JOB": "workers",
    "JOBSET_REPLICAS": "2",
    "JOBSET_JOB_INDEX": "1",
    "JOB_COMPLETION_INDEX": "0",
    "HOSTNAME": "tfd-workers-1-0",
}
INDEXED = {"TFDEVICES_POD_CLUSTER": "port=2222,pods=3,subdomain=svc", "JOB_COMPLETION_INDEX": "2", "HOSTNAME": "j-2"}
LWS = {
    "TFDEVICES_POD_CLUSTER": "port=2222",
    "LWS_LEADER_ADDRESS": "tfd-lws-0.tfd-lws.default",
    "LWS_GROUP_SIZE": "3",
    "LWS_WORKER_INDEX": "1",
    "HOSTNAME": "tfd-lws-0-1",
}
VOLCANO = {
    "TFDEVICES_POD_CLUSTER": "port=2222",
    "VC_TASK_INDEX": "1",
    "VK_TASK_INDEX": "1",
    "VC_PS_HOSTS": "vj-ps-0.vj",
    "VC_PS_NUM": "1",
    "VC_WORKER_HOSTS": "vj-worker-0.vj,vj-worker-1.vj",
    "VC_WORKER_NUM": "2",
    "HOSTNAME": "vj-worker-1",
}

# name, env, (kind, index, hosts)
GOOD = [
    ("jobset, one pod a Job", JOBSET, ("JobSet", 1, ("tfd-workers-0-0.tfd", "tfd-workers-1-0.tfd"))),
    (
        "jobset, two pods a Job, own subdomain",
        {
            **JOBSET,
            "TFDEVICES_POD_CLUSTER": "port=1,pods=2,subdomain=net",
            "JOB_COMPLETION_INDEX": "1",
            "HOSTNAME": "tfd-workers-1-1",
        },
        ("JobSet", 3, ("tfd-workers-0-0.net", "tfd-workers-0-1.net", "tfd-workers-1-0.net", "tfd-workers-1-1.net")),
    ),
    ("indexed job", INDEXED, ("Indexed Job", 2, ("j-0.svc", "j-1.svc", "j-2.svc"))),
    (
        "lws worker",
        LWS,
        (
            "LeaderWorkerSet",
            1,
            ("tfd-lws-0.tfd-lws.default", "tfd-lws-0-1.tfd-lws.default", "tfd-lws-0-2.tfd-lws.default"),
        ),
    ),
    ("lws leader", {**LWS, "LWS_WORKER_INDEX": "0", "HOSTNAME": "tfd-lws-0"}, ("LeaderWorkerSet", 0, None)),
    ("volcano worker", VOLCANO, ("Volcano", 1, ("vj-worker-0.vj", "vj-worker-1.vj"))),
]


@pytest.mark.parametrize("name, env, expected", GOOD, ids=[g[0] for g in GOOD])
def test_a_pod_knows_its_job(name: str, env: dict[str, str], expected: tuple) -> None:
    pod = k8s.pod_cluster(env)
    assert pod is not None
    kind, index, hosts = expected
    assert (pod.kind, pod.index) == (kind, index)
    if hosts is not None:
        assert pod.hosts == hosts
    info = launch_info(env)
    assert (info.source, info.rank, info.world_size, info.local_rank, info.local_world_size) == (
        "kubernetes", index, len(pod.hosts), 0, 1,
    )  # fmt: skip
    assert info.tf_config is not None and info.tf_config.cluster["worker"] == pod.addresses
    assert info.nodes == pod.names and info.node_rank == index


def _env(**changes: str | None) -> dict[str, str]:
    return {k: v for k, v in {**JOBSET, **changes}.items() if v is not None}


# name, env, the message's first words
BAD = [
    ("no port", _env(TFDEVICES_POD_CLUSTER="pods=1"), "TFDEVICES_POD_CLUSTER names no port"),
    (
        "port out of range",
        _env(TFDEVICES_POD_CLUSTER="port=70000,pods=1"),
        "TFDEVICES_POD_CLUSTER's port=: not a port in 1..65535.",
    ),
    ("unknown key", _env(TFDEVICES_POD_CLUSTER="port=1,prots=2"), "TFDEVICES_POD_CLUSTER: entry 2 is not one of"),
    ("repeated key", _env(TFDEVICES_POD_CLUSTER="port=1,port=2"), "TFDEVICES_POD_CLUSTER: port= is given twice"),
    ("not key=value", _env(TFDEVICES_POD_CLUSTER="port=1,pods"), "TFDEVICES_POD_CLUSTER: entry 2 is not one of"),
    (
        "jobset without pods=",
        _env(TFDEVICES_POD_CLUSTER="port=1"),
        "a JobSet pod, but TFDEVICES_POD_CLUSTER gives no pods=",
    ),
    ("jobset without replicas", _env(JOBSET_REPLICAS=None), "a JobSet pod, but JOBSET_REPLICAS is not set"),
    ("jobset, bad job index", _env(JOBSET_JOB_INDEX="2"), "JOBSET_JOB_INDEX is not a whole number in 0..1"),
    ("jobset, completion index past pods=", _env(JOB_COMPLETION_INDEX="1"), "JOB_COMPLETION_INDEX is out of range"),
    ("jobset, no completion index", _env(JOB_COMPLETION_INDEX=None), "JOB_COMPLETION_INDEX is not set"),
    ("jobset, hostname set by hand", _env(HOSTNAME="trainer"), "this pod's host name (HOSTNAME) is not the one"),
    ("indexed job without subdomain", {**INDEXED, "TFDEVICES_POD_CLUSTER": "port=1,pods=3"}, "an Indexed Job pod, but"),
    ("indexed job, other hostname", {**INDEXED, "HOSTNAME": "j-1"}, "this pod's host name (HOSTNAME) is not <job"),
    ("lws without size", {k: v for k, v in LWS.items() if k != "LWS_GROUP_SIZE"}, "a LeaderWorkerSet pod (LWS_"),
    (
        "lws pods= contradicts",
        {**LWS, "TFDEVICES_POD_CLUSTER": "port=1,pods=2"},
        "TFDEVICES_POD_CLUSTER's pods= contra",
    ),
    ("volcano without svc", {k: v for k, v in VOLCANO.items() if "HOSTS" not in k}, "a Volcano pod (VC_TASK_INDEX is"),
    ("volcano index elsewhere", {**VOLCANO, "VC_TASK_INDEX": "0"}, "VC_TASK_INDEX does not point at this pod"),
    ("not a pod", {"TFDEVICES_POD_CLUSTER": "port=1", "HOSTNAME": "box"}, "TFDEVICES_POD_CLUSTER is set, but this pod"),
    ("bad gpus", {**JOBSET, "NVIDIA_VISIBLE_DEVICES": "0,secret;rm"}, "NVIDIA_VISIBLE_DEVICES is not all, none"),
]


@pytest.mark.parametrize("name, env, first", BAD, ids=[b[0] for b in BAD])
def test_a_missing_or_bad_piece_is_named_with_its_fix(name: str, env: dict[str, str], first: str) -> None:
    with pytest.raises(LaunchError) as err:
        launch_info(env)
    message = str(err.value)
    assert message.startswith(first) and "HINT:" in message, message
    for variable, value in env.items():  # names, never values (a value that is also a name is one)
        if variable in ("TFDEVICES_POD_CLUSTER", "NVIDIA_VISIBLE_DEVICES") and len(value) > 6:
            assert value not in message, message


def test_the_manifest_line_that_gives_a_missing_label_is_in_the_hint() -> None:
    with pytest.raises(LaunchError) as err:
        launch_info(_env(JOBSET_JOB_INDEX=None))
    assert "fieldPath: \"metadata.labels['jobset.sigs.k8s.io/job-index']\"" in err.value.hint  # type: ignore[operator]


def test_a_pod_without_the_variable_is_one_process_and_says_how_to_join() -> None:
    info = launch_info({k: v for k, v in JOBSET.items() if k != "TFDEVICES_POD_CLUSTER"})
    assert (info.source, info.world_size) == ("none", 1)
    assert info.reason == "a JobSet pod without TFDEVICES_POD_CLUSTER: a single process", info.reason
    assert any("set TFDEVICES_POD_CLUSTER" in n for n in info.notes)
    assert cluster_from_env({"JOB_COMPLETION_INDEX": "0"}).num_workers == 1


def test_an_inner_launcher_wins_over_the_pod() -> None:
    env = {
        **JOBSET,
        "TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}),
    }
    info = launch_info(env)
    assert info.source == "TF_CONFIG" and "kubernetes" in info.ignored
    bad = {**env, "TFDEVICES_POD_CLUSTER": "nonsense"}  # the pod's variable is not read under a launcher
    assert launch_info(bad).source == "TF_CONFIG"


@pytest.mark.parametrize(
    "value, gpus",
    [(None, None), ("all", None), ("none", ()), ("void", ()), ("", ()), ("3", (0,)), ("2,3", (0, 1)),
     ("GPU-5e4a3c1b-7f1d-4c59-9d15-2f6b9c3c6a10,GPU-1", (0, 1)), ("MIG-GPU-abc/1/0", (0,))],
)  # fmt: skip
def test_the_gpus_a_pod_sees_are_numbered_as_on_a_node(value: str | None, gpus: tuple[int, ...] | None) -> None:
    env = dict(JOBSET) if value is None else {**JOBSET, "NVIDIA_VISIBLE_DEVICES": value}
    info = launch_info(env)
    assert info.gpus == gpus
    assert info.gpus_variable == (None if value is None else "NVIDIA_VISIBLE_DEVICES")


def test_the_strategy_and_the_watch_get_the_pods_cluster() -> None:
    cluster = cluster_from_env(JOBSET)
    assert (cluster.source, cluster.num_workers, cluster.task_index) == ("kubernetes", 2, 1)
    assert cluster.addresses == ("tfd-workers-0-0.tfd:2222", "tfd-workers-1-0.tfd:2222") and cluster.wait_s == 300
    other = progress_dir({**JOBSET, "JOBSET_JOB_INDEX": "0", "HOSTNAME": "tfd-workers-0-0"})
    assert progress_dir(JOBSET) == other and other.startswith("/tmp/tfdevices-progress/")  # one per job


def test_podinfo_files_stand_in_for_env_entries(tmp_path) -> None:
    (pod,) = [p for p in pods_of("jobset-launch.yaml") if p.hostname == "tfd-launch-nodes-1-0"]
    (mount, files), *_ = downward_files(pod).items()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = container_env(pod)
    env["TFDEVICES_POD_CLUSTER"] = env["TFDEVICES_POD_CLUSTER"].replace(mount, str(tmp_path))
    cluster = k8s.pod_cluster(env)
    assert cluster is not None and (cluster.index, cluster.hosts[0]) == (1, "tfd-launch-nodes-0-0.tfd-launch")
    assert k8s.parse_podinfo('a="1"\nnot a line\nb="x \\"y\\""\n') == {"a": "1", "b": 'x "y"'}


# ---------------------------------------------------------------- the shipped manifests' pods

MANIFESTS = ["jobset.yaml", "jobset-launch.yaml", "indexed-job.yaml", "lws.yaml"]


def pod_env(pod, where) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The pod's container env, its downward API files written under ``where`` (for their mountPath)."""
    env = container_env(pod)
    for mount, files in downward_files(pod).items():
        folder = where / pod.hostname / mount.strip("/")
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text)
        env["TFDEVICES_POD_CLUSTER"] = env["TFDEVICES_POD_CLUSTER"].replace(f"podinfo={mount}", f"podinfo={folder}")
    return env


@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifests_pods_work_out_one_cluster_and_every_index(name: str, tmp_path) -> None:
    pods = pods_of(name)
    clusters = [k8s.pod_cluster(pod_env(pod, tmp_path)) for pod in pods]
    assert [c.index for c in clusters if c] == list(range(len(pods)))
    assert len({c.addresses for c in clusters if c}) == 1  # every pod the same cluster
    assert [h.split(".")[0] for h in clusters[0].hosts] == [p.hostname for p in pods]  # type: ignore[union-attr]
    ports = {p["containerPort"] for p in pods[0].container["ports"]}
    assert clusters[0].port in ports  # type: ignore[union-attr]  # the port the manifest declares


def test_launch_takes_its_options_from_the_pod_and_an_explicit_option_wins(monkeypatch) -> None:
    import tfdevices.jobs.launch_command as launch_command

    pod = pods_of("jobset-launch.yaml")[1]
    env = container_env(pod)
    env["TFDEVICES_POD_CLUSTER"] = env["TFDEVICES_POD_CLUSTER"].replace(",podinfo=/etc/podinfo", "")
    for variable, label in k8s.JOBSET_ENV[:4]:  # the labels as env entries here, not as the volume's files
        env[variable] = pod.labels[label]
    unset = argparse.Namespace(nnodes=None, node_rank=None, master_addr=None, master_port=None, num_workers=2)
    resolved: list[list[str]] = []
    monkeypatch.setattr(launch_command, "wait_for_names", lambda hosts, timeout: resolved.append(list(hosts)))
    args = with_pod_defaults(unset, env)
    given = with_pod_defaults(argparse.Namespace(**{**vars(unset), "master_port": 3000, "nnodes": 1}), env)
    assert (args.nnodes, args.node_rank, args.master_addr, args.master_port) == (
        2,
        1,
        "tfd-launch-nodes-0-0.tfd-launch",
        29400,
    )
    assert resolved == [["tfd-launch-nodes-0-0.tfd-launch"]]  # pod 0's name, waited for
    assert (given.nnodes, given.master_port) == (1, 3000)
    plain = with_pod_defaults(unset, {})
    assert (plain.nnodes, plain.node_rank, plain.master_addr, plain.master_port) == (1, 0, None, 29400)


# ---------------------------------------------------------------- the names' bounded wait


def test_names_that_resolve_late_are_waited_for_and_those_that_never_do_are_said() -> None:
    now = [0.0]
    tries: dict[str, int] = {}

    def resolve(name: str) -> None:
        tries[name] = tries.get(name, 0) + 1
        if (name.startswith("late") and tries[name] < 3) or name.startswith("never"):
            raise OSError("no such name")

    def sleep(s: float) -> None:
        now[0] += s

    k8s.wait_for_names(["late-0.tfd", "ok-1.tfd"], 10, resolve=resolve, clock=lambda: now[0], sleep=sleep)
    assert tries["late-0.tfd"] == 3 and tries["ok-1.tfd"] == 1
    with pytest.raises(LaunchError) as err:
        k8s.wait_for_names(["ok-1.tfd", "never-1.tfd"], 10, resolve=resolve, clock=lambda: now[0], sleep=sleep)
    message = str(err.value)
    assert message.startswith("1 of 2 pod name(s) did not resolve in 10 s (worker(s) 1). Either the headless Service")
    assert "the subdomain is wrong" in message and "kubectl get service <the subdomain>" in message
    assert "never" not in message and ".tfd" not in message  # the names come from the pod's variables


@pytest.mark.tensorflow
def test_a_pod_whose_service_does_not_resolve_is_told_so_by_build_strategy() -> None:
    pod = {"TFDEVICES_POD_CLUSTER": "port=2222,pods=1,wait=1", "JOBSET_JOB_INDEX": "0", "HOSTNAME": "tfd-workers-0-0"}
    env = subprocess_env({**JOBSET, **pod})
    code = (
        "import tfdevices\ntry:\n    tfdevices.build_strategy('multi_worker')\n"
        "except tfdevices.TfDevicesError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert (
        "2 of 2 pod name(s) did not resolve in 1 s (worker(s) 0, 1)." in out.stdout and "tfd-workers" not in out.stdout
    ), out.stdout + out.stderr[-2000:]


# ---------------------------------------------------------------- fuzzing: bounded, and only LaunchError

_TEXT = st.text(st.characters(codec="utf-8"), max_size=300)
_KEYS = st.sampled_from(["port", "pods", "subdomain", "podinfo", "wait", "x", ""])
_SPEC = st.lists(st.tuples(_KEYS, st.one_of(st.integers(-5, 70000).map(str), _TEXT)), max_size=6).map(
    lambda kv: ",".join(f"{k}={v}" for k, v in kv)
)


@settings(max_examples=400, deadline=None)
@given(spec=st.one_of(_SPEC, _TEXT), podinfo=_TEXT, env=st.dictionaries(
    st.sampled_from([n for n, _ in k8s.JOBSET_ENV] + ["JOB_COMPLETION_INDEX", "HOSTNAME", "LWS_LEADER_ADDRESS",
                    "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "VC_TASK_INDEX", "VC_WORKER_HOSTS",
                    "NVIDIA_VISIBLE_DEVICES"]),
    st.one_of(st.integers(-2, 5).map(str), _TEXT), max_size=8))  # fmt: skip
def test_the_parser_answers_any_input_with_a_cluster_or_a_launch_error(spec: str, podinfo: str, env: dict) -> None:
    env = {**env, "TFDEVICES_POD_CLUSTER": spec}
    info = k8s.parse_podinfo(podinfo)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.items())
    try:
        pod = k8s.pod_cluster(env, podinfo=info)
        k8s.pod_gpus(env)
    except LaunchError as err:
        for value in (spec, *env.values()):
            if len(value) >= 12 and not value.isalnum():  # a value (not a name or a short number) never shown
                assert value not in str(err), (value, str(err))
        return
    assert pod is not None and 0 <= pod.index < len(pod.hosts) <= k8s.MAX_PODS and 1 <= pod.port <= 65535


def test_a_long_variable_is_refused_before_it_is_read() -> None:
    with pytest.raises(LaunchError, match="is 1,000,001 characters long"):
        k8s.parse_pod_spec("p" * 1_000_001)


# ---------------------------------------------------------------- the manifests against their kinds' schemas


def _crd_schema(name: str, version: str) -> dict:
    with gzip.open(os.path.join(SCHEMAS, name), "rt", encoding="utf-8") as f:
        crd = yaml.safe_load(f)
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return found["schema"]["openAPIV3Schema"]


def strict(schema: dict) -> dict:
    """``schema`` with every object that declares its properties closed to others (``kubectl --validate=strict``)."""
    schema = copy.deepcopy(schema)

    def close(node: object) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


def _job_schema() -> dict:
    """Kubernetes' batch/v1 Job: its JobTemplateSpec as JobSet's CRD embeds it (generated from k8s.io/api)."""
    template = _crd_schema("jobset.x-k8s.io_jobsets.yaml.gz", "v1alpha2")["properties"]["spec"]["properties"][
        "replicatedJobs"
    ]["items"]["properties"]["template"]
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"enum": ["batch/v1"]},
            "kind": {"enum": ["Job"]},
            "metadata": template["properties"]["metadata"],
            "spec": template["properties"]["spec"],
        },
    }


def _schema_for(doc: dict) -> dict:
    kind = doc["kind"]
    if kind == "JobSet":
        schema = _crd_schema("jobset.x-k8s.io_jobsets.yaml.gz", doc["apiVersion"].split("/")[1])
    elif kind == "LeaderWorkerSet":
        schema = _crd_schema("leaderworkerset.x-k8s.io_leaderworkersets.yaml.gz", doc["apiVersion"].split("/")[1])
    elif kind == "Job":
        schema = _job_schema()
    else:
        with open(os.path.join(SCHEMAS, "service-v1.json"), encoding="utf-8") as f:
            schema = json.load(f)
    return strict(schema)


def _validate(doc: dict) -> list[str]:
    validator = jsonschema.Draft7Validator(_schema_for(doc))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifest_validates_against_its_kinds_published_schema(name: str) -> None:
    docs = load(name)
    assert docs
    for doc in docs:
        assert _validate(doc) == [], (name, doc["kind"])


def test_the_schemas_catch_a_mistyped_field_and_a_wrong_type() -> None:
    (doc,) = load("jobset.yaml")
    bad = copy.deepcopy(doc)
    bad["spec"]["replicatedJobs"][0]["replicas"] = "two"
    bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["enviroment"] = []
    errors = _validate(bad)
    assert any("replicas: 'two' is not of type 'integer'" in e for e in errors), errors
    assert any("'enviroment' was unexpected" in e for e in errors), errors


def test_the_indexed_jobs_service_selects_its_pods_and_names_its_subdomain() -> None:
    service, job = load("indexed-job.yaml")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["name"] == job["spec"]["template"]["spec"]["subdomain"]
    pods = pods_of("indexed-job.yaml")
    assert all(pod.labels[k] == v for pod in pods for k, v in service["spec"]["selector"].items())
    assert command(pods[0], container_env(pods[0]))[:3] == ["tfdevices", "demo", "workers"]


# ---------------------------------------------------------------- the guide's excerpts are the manifests' lines


def test_each_yaml_block_of_the_guide_is_a_manifests_lines_as_copied() -> None:
    import textwrap

    from tests.test_docs_text import code_blocks

    text = open(os.path.join(REPO, "docs", "guides", "kubernetes.rst"), encoding="utf-8").read()
    lines = text.splitlines()
    blocks = [
        b for first, b in code_blocks(text) if ".. code-block:: yaml" in "\n".join(lines[max(0, first - 4) : first])
    ]
    assert len(blocks) == 2
    manifests = [
        open(os.path.join(REPO, "docs", "kubernetes", m), encoding="utf-8").read().splitlines() for m in MANIFESTS
    ]
    for body in blocks:
        want = textwrap.dedent("\n".join(body)).strip("\n")
        found = any(textwrap.dedent("\n".join(m[i : i + len(body)])) == want for m in manifests for i in range(len(m)))
        assert found, want
