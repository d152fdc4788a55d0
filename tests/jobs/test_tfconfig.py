"""TF_CONFIG parsing: good inputs to their ranks, bad inputs to a TfConfigError naming TF_CONFIG."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tfdevices.core.errors import TfConfigError
from tfdevices.jobs.tfconfig import TfConfig, make_tf_config, parse_tf_config, read_tf_config

W2 = {"worker": ["localhost:2222", "localhost:2223"]}
CW2 = {"chief": ["h0:1000"], "worker": ["h1:1000", "h2:1000"]}


def cfg(cluster, task_type="worker", index=0, **extra) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}, **extra})


GOOD = [
    # text, (task_type, task_index, rank, num_workers, address, is_chief)
    (cfg(W2, "worker", 0), ("worker", 0, 0, 2, "localhost:2222", True)),
    (cfg(W2, "worker", 1), ("worker", 1, 1, 2, "localhost:2223", False)),
    (cfg(CW2, "chief", 0), ("chief", 0, 0, 3, "h0:1000", True)),
    (cfg(CW2, "worker", 0), ("worker", 0, 1, 3, "h1:1000", False)),
    (cfg(CW2, "worker", 1), ("worker", 1, 2, 3, "h2:1000", False)),
    (cfg({**W2, "ps": ["p:1"]}, "ps", 0), ("ps", 0, None, 2, "p:1", False)),
    (cfg(W2, "evaluator", 0), ("evaluator", 0, None, 2, None, False)),
    (cfg({"worker": ["[::1]:2222", "10.0.0.2:65535"]}, "worker", 1), ("worker", 1, 1, 2, "10.0.0.2:65535", False)),
    (cfg(W2, "worker", 0, rpc_layer="grpc", environment="cloud"), ("worker", 0, 0, 2, "localhost:2222", True)),
    (
        json.dumps({"cluster": W2, "task": {"type": "worker", "index": 1, "trial": "1"}}),
        ("worker", 1, 1, 2, "localhost:2223", False),
    ),
]


@pytest.mark.parametrize("text, expected", GOOD)
def test_good_tf_config(text, expected):
    c = parse_tf_config(text)
    assert (c.task_type, c.task_index, c.rank, c.num_workers, c.address, c.is_chief) == expected
    assert parse_tf_config(c.to_json()).cluster == c.cluster


@pytest.mark.parametrize("text", [None, "", "   ", "\n"])
def test_unset_tf_config_is_none(text):
    assert parse_tf_config(text) is None


BAD = [
    # text, words the message must contain
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object, got an array"),
    ('"worker"', "expected a JSON object, got a string"),
    ("42", "expected a JSON object, got a number"),
    (json.dumps({"task": {"type": "worker", "index": 0}}), "lacks ['cluster']"),
    (json.dumps({"cluster": W2}), "lacks ['task']"),
    (
        json.dumps({"cluster": W2, "task": {"type": "worker", "index": 0}, "clusters": {}}),
        "1 unknown key(s) in TF_CONFIG; known keys: ['cluster', 'task', 'environment', 'rpc_layer']",
    ),
    (cfg({}), "'cluster' is empty"),
    (
        json.dumps({"cluster": ["localhost:2222"], "task": {"type": "worker", "index": 0}}),
        "'cluster' must be an object",
    ),
    (cfg({"workers": ["a:1"]}), "an unknown job in 'cluster'; known jobs: ['chief', 'worker', 'ps', 'evaluator']."),
    (cfg({"worker": []}), "must be a non-empty list"),
    (cfg({"worker": "a:1,b:2"}), "must be a non-empty list"),
    (cfg({"worker": [2222]}), "cluster address worker[0]: not HOST:PORT: it is int, not text."),
    (cfg({"worker": ["localhost"]}), "cluster address worker[0]: not HOST:PORT: it has no ':PORT'."),
    (cfg({"worker": ["localhost:0"]}), "worker[0]: not HOST:PORT: its port is not in 1..65535."),
    (cfg({"worker": ["localhost:70000"]}), "worker[0]: not HOST:PORT: its port is not in 1..65535."),
    (cfg({"worker": [":2222"]}), "worker[0]: not HOST:PORT: it is empty."),
    (cfg({"worker": ["local host:2222"]}), "worker[0]: not HOST:PORT: it is no IPv4 address, [IPv6] address or"),
    (cfg({"worker": ["a:1", "a:1"]}), "cluster address worker[1] repeats worker[0]."),
    (cfg({"chief": ["a:1"], "worker": ["a:1"]}), "cluster address worker[0] repeats chief[0]."),
    (cfg({"chief": ["a:1", "b:1"]}, "chief", 0), "2 chiefs"),
    (cfg({"ps": ["a:1"]}, "ps", 0), "no 'chief' or 'worker' job"),
    (cfg(W2, "master", 0), "an unknown task type; known types: ['chief', 'worker', 'ps', 'evaluator']."),
    (cfg(W2, "chief", 0), "task type 'chief' is not a job of the cluster"),
    (
        cfg(W2, "worker", 2),
        "the task index is past the last address of job 'worker', which has 2 address(es) (indices ",
    ),
    (cfg(W2, "worker", -1), "the task index must be a whole number >= 0; it is negative."),
    (cfg(W2, "worker", "0"), "the task index must be a whole number >= 0; it is a string."),
    (cfg(W2, "worker", True), "the task index must be a whole number >= 0; it is a boolean."),
    (cfg(W2, "worker", 1.0), "the task index must be a whole number >= 0; it is a number."),
    (cfg(W2, "evaluator", 1), "task type 'evaluator' is not a job"),
    (json.dumps({"cluster": W2, "task": {"type": "worker"}}), "'task' lacks ['index']"),
    (
        json.dumps({"cluster": W2, "task": {"type": "worker", "index": 0, "rank": 0}}),
        "1 unknown key(s) in 'task'; known keys: ['type', 'index', 'trial'].",
    ),
    (json.dumps({"cluster": W2, "task": "worker:0"}), "'task' must be an object"),
    (cfg(W2, rpc_layer=""), "rpc_layer must be a non-empty string such as 'grpc'; it is empty."),
]


@pytest.mark.parametrize("text, words", BAD)
def test_bad_tf_config(text, words):
    with pytest.raises(TfConfigError) as info:
        parse_tf_config(text)
    message = str(info.value)
    assert message.startswith("TF_CONFIG: ")
    assert words in message
    assert "HINT:" in message


def test_bad_tf_config_names_its_source():
    with pytest.raises(TfConfigError, match=r"^TF_CONFIG \(job\.json\): not valid JSON"):
        parse_tf_config("{", source="job.json")


def test_there_are_at_least_15_bad_inputs():
    assert len(BAD) >= 15


@pytest.mark.parametrize("n", [1, 2, 5])
def test_make_tf_config_round_trips_every_rank(n):
    addresses = [f"localhost:{3000 + i}" for i in range(n)]
    for task_type in ("worker", "chief"):
        configs = [parse_tf_config(make_tf_config(addresses, i, task_type)) for i in range(n)]
        assert [c.rank for c in configs] == list(range(n))
        assert [c.address for c in configs] == addresses
        assert {c.num_workers for c in configs} == {n}
        assert [c.is_chief for c in configs] == [True] + [False] * (n - 1)


@pytest.mark.parametrize(
    "workers, index, task_type, words",
    [
        (["a:1", "a:1"], 0, "worker", "TF_CONFIG (make_tf_config): cluster address worker[1] repeats worker[0]."),
        (
            ["a:1"],
            1,
            "worker",
            "TF_CONFIG (make_tf_config): the task index is past the last address of job 'worker', which",
        ),
        (
            ["a:1", "b:2"],
            2,
            "chief",
            "TF_CONFIG (make_tf_config): the task index is past the last address of job 'worker', which",
        ),
        (["nohost"], 0, "worker", "cluster address worker[0]: not HOST:PORT: it has no ':PORT'."),
        ([], 0, "worker", "non-empty list"),
        (["a:1"], 0, "ps", "make_tf_config(task_type='ps') is not supported"),
    ],
)
def test_make_tf_config_bad(workers, index, task_type, words):
    with pytest.raises(TfConfigError, match="^TF_CONFIG") as info:
        make_tf_config(workers, index, task_type)
    assert words in str(info.value)


def test_read_tf_config_reads_the_given_env_only():
    text = make_tf_config(["localhost:1", "localhost:2"], 1)
    assert read_tf_config({"TF_CONFIG": text}).rank == 1
    assert read_tf_config({}) is None
    assert isinstance(read_tf_config({"TF_CONFIG": text}), TfConfig)


def test_tf_config_is_frozen():
    c = parse_tf_config(cfg(W2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.task_index = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        c.cluster["worker"] = ()  # type: ignore[index]


# ---------------------------------------------------------------- hostile TF_CONFIG: digits, depth, size, fuzzing

from hypothesis import (  # noqa: E402
    given,
    settings,
    strategies as st,
)

from tfdevices.core.errors import TfDevicesError  # noqa: E402


def _one_worker(address: str) -> str:
    return json.dumps({"cluster": {"worker": [address]}, "task": {"type": "worker", "index": 0}})


@pytest.mark.parametrize(
    "text, words",
    [
        (_one_worker("h:\u0662\u0662\u0662\u0662"), "cluster address worker[0]: not HOST:PORT: its port is not 1 to 5"),
        (_one_worker("h:\uff12\uff12"), "worker[0]: not HOST:PORT: its port is not 1 to 5 digits."),
        (_one_worker("h:" + "9" * 5000), "worker[0]: not HOST:PORT: it is 5,002 characters long; an address is at"),
        (_one_worker("h:65536"), "worker[0]: not HOST:PORT: its port is not in 1..65535."),
        (_one_worker("h:0"), "worker[0]: not HOST:PORT: its port is not in 1..65535."),
        (_one_worker("h\u0663st:2222"), "worker[0]: not HOST:PORT: it is no IPv4 address, [IPv6] address or host"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
        ('{"cluster": ' + "[" * 100_000, "JSON nested too deeply"),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": ' + "9" * 5000 + "}}",
            "holds a number thousands of digits long",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 10000000000000000000000}}',
            "the task index is past the last address of job 'worker', which has 1 address(es) (indices ",
        ),
        (
            json.dumps({"cluster": {"worker": ["h:1"] * 50_000}, "task": {"type": "worker", "index": 0}}),
            "cluster address worker[1] repeats worker[0].",
        ),
        (
            json.dumps({"cluster": {"w" * 10_000: ["h:1"]}, "task": {"type": "worker", "index": 0}}),
            "an unknown job in 'cluster'; known jobs: ['chief', 'worker', 'ps', 'evaluator'].",
        ),
    ],
)
def test_hostile_tf_config(text, words):
    with pytest.raises(TfConfigError) as err:
        parse_tf_config(text)
    message = str(err.value)
    assert words in message and message.startswith("TF_CONFIG:") and "HINT:" in message
    assert len(message) < 700 and "\n" not in message


def test_a_16000_worker_tf_config_is_read():
    workers = [f"node{i:05d}:2222" for i in range(16_000)]
    cfg = parse_tf_config(make_tf_config(workers, 15_999))
    assert (cfg.num_workers, cfg.rank, cfg.address) == (16_000, 15_999, "node15999:2222")


_ADDRESS = st.builds(
    lambda h, p: f"{h}:{p}",
    st.text(alphabet="ab1.-[]:\u0663", max_size=6),
    st.one_of(st.integers(-1, 70000).map(str), st.text(alphabet="0123456789\u0662", max_size=6)),
)
_TASK = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["worker", "chief", "ps", "evaluator", "boss", 3]),
        "index": st.one_of(st.integers(-2, 10**20), st.text(max_size=3), st.none()),
    }
)
_CONFIG = st.fixed_dictionaries(
    {
        "cluster": st.dictionaries(
            st.sampled_from(["worker", "chief", "ps", "evaluator", "x"]), st.lists(_ADDRESS, max_size=3), max_size=3
        ),
        "task": _TASK,
    },
    optional={"rpc_layer": st.one_of(st.none(), st.text(max_size=4), st.integers())},
)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        _CONFIG.map(json.dumps),
        st.text(max_size=40),
        st.recursive(st.integers() | st.text(max_size=4), lambda c: st.lists(c, max_size=3), max_leaves=10).map(
            json.dumps
        ),
    )
)
def test_fuzz_tf_config(text):
    try:
        cfg = parse_tf_config(text)
    except TfDevicesError as err:
        assert isinstance(err, TfConfigError) and "HINT:" in str(err) and "\n" not in str(err)
    else:
        if cfg is not None:
            assert parse_tf_config(cfg.to_json()).cluster == cfg.cluster
            for addresses in cfg.cluster.values():
                assert all(a.rpartition(":")[2].isascii() for a in addresses)
