"""TF_CONFIG: read, validate and write TensorFlow's cluster description.

``TF_CONFIG`` is the JSON TensorFlow's multi-worker runtime reads to learn the
cluster and which task this process is::

    {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
     "task": {"type": "worker", "index": 0}}

TensorFlow reports a malformed ``TF_CONFIG`` late and obscurely (a hang, a
``KeyError`` deep in a resolver). :func:`parse_tf_config` checks it up front and
answers every fault with a :class:`~tfdevices.core.errors.TfConfigError` that names
``TF_CONFIG``, what it found and how to fix it. It is pure: it reads the text it
is given, never the environment (:func:`read_tf_config` does that).

Ranks: the chief (if any) is rank 0, then the workers in order, as in
``MultiWorkerMirroredStrategy``. ``ps`` and ``evaluator`` tasks have no rank.

>>> cfg = parse_tf_config(make_tf_config(["localhost:2222", "localhost:2223"], 1))
>>> cfg.task_type, cfg.task_index, cfg.rank, cfg.num_workers, cfg.address
('worker', 1, 1, 2, 'localhost:2223')
>>> parse_tf_config("") is None
True
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
from collections.abc import Mapping, Sequence
from typing import Any

from tfdevices.core.addresses import parse_host_port
from tfdevices.core.errors import TfConfigError

TF_CONFIG = "TF_CONFIG"
TASK_TYPES = ("chief", "worker", "ps", "evaluator")
TRAINING_TASK_TYPES = ("chief", "worker")
_TOP_KEYS = ("cluster", "task", "environment", "rpc_layer")
_TASK_KEYS = ("type", "index", "trial")
_EXAMPLE = '{"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", "index": 0}}'
_HINT = f"TF_CONFIG must look like {_EXAMPLE}."
MAX_CHARS = 32 << 20
"""The longest TF_CONFIG text read (16,000 workers take about 400 KB)."""


@dataclasses.dataclass(frozen=True)
class TfConfig:
    """A validated ``TF_CONFIG``.

    Attributes:
        cluster: job name -> addresses (``"host:port"``), read-only.
        task_type: this process's job: ``"chief"``, ``"worker"``, ``"ps"`` or ``"evaluator"``.
        task_index: this process's index within its job.
        rpc_layer: the ``rpc_layer`` field (``None``: TensorFlow's default, gRPC).
        source: where the text came from (for messages), usually ``"TF_CONFIG"``.
    """

    cluster: Mapping[str, tuple[str, ...]]
    task_type: str
    task_index: int
    rpc_layer: str | None = None
    source: str = TF_CONFIG

    @property
    def num_workers(self) -> int:
        """Training processes: the chief (if any) plus the workers."""
        return sum(len(self.cluster.get(job, ())) for job in TRAINING_TASK_TYPES)

    @property
    def rank(self) -> int | None:
        """This process's rank: chief 0, then workers in order; ``None`` for ``ps``/``evaluator``."""
        if self.task_type == "chief":
            return self.task_index
        if self.task_type == "worker":
            return len(self.cluster.get("chief", ())) + self.task_index
        return None

    @property
    def address(self) -> str | None:
        """This process's ``host:port``; ``None`` for an evaluator outside the cluster."""
        addresses = self.cluster.get(self.task_type, ())
        return addresses[self.task_index] if self.task_index < len(addresses) else None

    @property
    def is_chief(self) -> bool:
        """Whether this process writes checkpoints and summaries: the chief, or worker 0 without one."""
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    def to_json(self) -> str:
        """The ``TF_CONFIG`` text for this configuration."""
        data: dict[str, Any] = {
            "cluster": {job: list(addrs) for job, addrs in self.cluster.items()},
            "task": {"type": self.task_type, "index": self.task_index},
        }
        if self.rpc_layer is not None:
            data["rpc_layer"] = self.rpc_layer
        return json.dumps(data)


def parse_tf_config(text: str | None, *, source: str = TF_CONFIG) -> TfConfig | None:
    """Validates ``TF_CONFIG`` text.

    Args:
        text: the JSON text; ``None``, empty or blank means "not set".
        source: the input's name in messages (``"TF_CONFIG"``, or a file name).

    Returns:
        A :class:`TfConfig`, or ``None`` when ``text`` is unset or blank.

    Raises:
        TfConfigError: the text is not JSON, not an object, has missing or unknown
            keys, an unknown task type, an index out of range, a malformed or
            duplicate address, or an empty cluster. The message names ``TF_CONFIG``.

    >>> parse_tf_config('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}')
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.TfConfigError: TF_CONFIG: the task index is past the last address of job 'worker', ...
    """
    if text is None or not text.strip():
        return None
    where = source if source == TF_CONFIG else f"TF_CONFIG ({source})"
    if len(text) > MAX_CHARS:
        raise TfConfigError(f"{where}: {len(text):,} characters; TF_CONFIG is read up to {MAX_CHARS:,}.", hint=_HINT)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise TfConfigError(
            f"{where}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}).", hint=_HINT
        ) from None
    except RecursionError:
        raise TfConfigError(f"{where}: JSON nested too deeply.", hint=_HINT) from None
    except ValueError:  # a number past Python's 4300-digit limit
        raise TfConfigError(f"{where}: holds a number thousands of digits long.", hint=_HINT) from None
    if not isinstance(data, dict):
        raise TfConfigError(f"{where}: expected a JSON object, got {_json_type(data)}.", hint=_HINT)
    _check_keys(data, _TOP_KEYS, ("cluster", "task"), where, "TF_CONFIG")
    cluster = _parse_cluster(data["cluster"], where)
    task_type, task_index = _parse_task(data["task"], cluster, where)
    rpc_layer = data.get("rpc_layer")
    if rpc_layer is not None and not (isinstance(rpc_layer, str) and rpc_layer):
        raise TfConfigError(
            f"{where}: rpc_layer must be a non-empty string such as 'grpc'; it is "
            f"{'empty' if rpc_layer == '' else _json_type(rpc_layer)}.",
            hint="remove rpc_layer to use TensorFlow's default, gRPC.",
        )
    return TfConfig(
        cluster=types.MappingProxyType(cluster),
        task_type=task_type,
        task_index=task_index,
        rpc_layer=rpc_layer,
        source=source,
    )


def read_tf_config(env: Mapping[str, str] | None = None) -> TfConfig | None:
    """Validates ``TF_CONFIG`` from ``env`` (default ``os.environ``); ``None`` when unset.

    Raises:
        TfConfigError: ``TF_CONFIG`` is set but invalid.
    """
    return parse_tf_config((os.environ if env is None else env).get(TF_CONFIG))


def make_tf_config(workers: Sequence[str], index: int, task_type: str = "worker") -> str:
    """Returns ``TF_CONFIG`` text for one process of a cluster.

    Args:
        workers: every training process's ``host:port``, in rank order.
        index: the rank of the process this text is for.
        task_type: ``"worker"`` (default): every address is a worker and ``index`` is
            the worker index. ``"chief"``: the first address is the chief and the
            rest are workers; ``index`` is the rank (0 is the chief).

    Returns:
        JSON text, validated by :func:`parse_tf_config`.

    Raises:
        TfConfigError: an address is malformed or repeated, ``index`` is out of
            range, or ``task_type`` is neither ``"worker"`` nor ``"chief"``.

    >>> make_tf_config(["h0:2222", "h1:2222"], 0, task_type="chief")
    '{"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222"]}, "task": {"type": "chief", "index": 0}}'
    """
    workers = list(workers)
    if task_type == "worker":
        data = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    elif task_type == "chief":
        if isinstance(index, int) and not isinstance(index, bool) and index >= 1:
            task = {"type": "worker", "index": index - 1}
        else:
            task = {"type": "chief", "index": index}
        cluster = {"chief": workers[:1], "worker": workers[1:]} if len(workers) > 1 else {"chief": workers}
        data = {"cluster": cluster, "task": task}
    else:
        raise TfConfigError(
            f"TF_CONFIG: make_tf_config(task_type={task_type!r}) is not supported.",
            hint="use task_type='worker' (all workers) or 'chief' (the first address is the chief).",
        )
    text = json.dumps(data)
    parse_tf_config(text, source="make_tf_config")
    return text


def _json_type(value: Any) -> str:
    return {
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def _task_index_words(index: Any) -> str:
    """What a bad task index is, in words: ``"negative"``, ``"a string"``."""
    if isinstance(index, int) and not isinstance(index, bool):
        return "negative"
    return _json_type(index)


def _check_keys(data: Mapping[str, Any], known: Sequence[str], required: Sequence[str], where: str, what: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise TfConfigError(f"{where}: {len(unknown)} unknown key(s) in {what}; known keys: {list(known)}.", hint=_HINT)
    missing = [k for k in required if k not in data]
    if missing:
        raise TfConfigError(f"{where}: {what} lacks {missing}.", hint=_HINT)


def _parse_cluster(value: Any, where: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        raise TfConfigError(
            f"{where}: 'cluster' must be an object of job -> addresses, got {_json_type(value)}.", hint=_HINT
        )
    if not value:
        raise TfConfigError(f"{where}: 'cluster' is empty.", hint="list at least one worker address.")
    cluster: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for job, addresses in value.items():
        if job not in TASK_TYPES:
            raise TfConfigError(f"{where}: an unknown job in 'cluster'; known jobs: {list(TASK_TYPES)}.", hint=_HINT)
        if not isinstance(addresses, list) or not addresses:
            raise TfConfigError(
                f"{where}: cluster job {job!r} must be a non-empty list of 'host:port' "
                f"strings; it is {'an empty array' if addresses == [] else _json_type(addresses)}.",
                hint=_HINT,
            )
        for i, address in enumerate(addresses):
            _check_address(address, f"{job}[{i}]", where)
            if address in seen:
                raise TfConfigError(
                    f"{where}: cluster address {job}[{i}] repeats {seen[address]}.",
                    hint="give every task its own host:port.",
                )
            seen[address] = f"{job}[{i}]"
        cluster[job] = tuple(addresses)
    if len(cluster.get("chief", ())) > 1:
        raise TfConfigError(
            f"{where}: cluster has {len(cluster['chief'])} chiefs; there can be one.",
            hint="move the other addresses to 'worker'.",
        )
    if not any(job in cluster for job in TRAINING_TASK_TYPES):
        raise TfConfigError(
            f"{where}: cluster {sorted(cluster)} has no 'chief' or 'worker' job.",
            hint="list the training processes under 'worker'.",
        )
    return cluster


def _check_address(address: Any, name: str, where: str) -> None:
    """One cluster entry, checked by the one address parser; the message names the entry, never its value."""
    parse_host_port(
        address,
        f"{where}: cluster address {name}",
        error=TfConfigError,
        show=False,
        hint="write each as 'host:port', e.g. 'localhost:2222' or '10.0.0.2:2222' (a port 1..65535 in ASCII digits).",
    )


def _parse_task(value: Any, cluster: Mapping[str, tuple[str, ...]], where: str) -> tuple[str, int]:
    if not isinstance(value, dict):
        raise TfConfigError(
            f'{where}: \'task\' must be an object like {{"type": "worker", "index": 0}}, got {_json_type(value)}.',
            hint=_HINT,
        )
    _check_keys(value, _TASK_KEYS, ("type", "index"), where, "'task'")
    task_type, index = value["type"], value["index"]
    if task_type not in TASK_TYPES:
        raise TfConfigError(
            f"{where}: an unknown task type; known types: {list(TASK_TYPES)}.",
            hint=f"set task.type to one of the cluster's jobs: {sorted(cluster)}.",
        )
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise TfConfigError(
            f"{where}: the task index must be a whole number >= 0; it is {_task_index_words(index)}.",
            hint='write e.g. "index": 0 (a number, not a string).',
        )
    if task_type not in cluster:
        if task_type == "evaluator" and index == 0:
            return task_type, index  # a side-car evaluator need not be in the cluster
        raise TfConfigError(
            f"{where}: task type {task_type!r} is not a job of the cluster {sorted(cluster)}.",
            hint=f"set task.type to one of {sorted(cluster)} or add '{task_type}' to the cluster.",
        )
    size = len(cluster[task_type])
    if index >= size:
        raise TfConfigError(
            f"{where}: the task index is past the last address of job {task_type!r}, which has "
            f"{size} address(es) (indices 0..{size - 1}).",
            hint=f"set task.index to 0..{size - 1}.",
        )
    return task_type, index
