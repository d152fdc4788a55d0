"""Build: the right ``tf.distribute`` strategy for the devices this process has.

Two pure decisions, one effect:

* :func:`decide_strategy` picks the strategy kind and its devices from explicit
  inputs (the kind asked for, the TensorFlow devices, the number of workers);
* :func:`choose_cross_device_ops` picks how replicas reduce gradients (NCCL only
  where it can work) and says why;
* :func:`build_strategy` gathers those inputs from TensorFlow, the applied
  configuration and :func:`tfdevices.launch_info`, and builds the strategy. It reads
  the configuration and never makes one: GPUs named by NVML index with nothing
  configured are an error that says to call :func:`tfdevices.configure` first.

What :func:`build_strategy` returns is the ``tf.distribute`` strategy itself
(``scope()``, ``run``, ``reduce``, ``num_replicas_in_sync``,
``experimental_distribute_dataset``; ``isinstance(s, tf.distribute.MirroredStrategy)``
holds, for Keras too), built from a plain subclass that also explains itself
(:class:`Explained`; for ``kind="default"`` a strategy around TensorFlow's default,
which is left as it is): ``table()``,
its replicas named both ways, and why. Devices are named the tfdevices way: a
physical GPU by its NVML index (``1`` or ``"1"``, as ``nvidia-smi`` shows it), or a
TensorFlow logical device (``"CPU:1"``, ``"GPU:0"``).

Keras 3 ``model.fit`` under ``MultiWorkerMirroredStrategy`` (keras-team/keras#20585)
works once :func:`tfdevices.training.install_fit_adapter` mends it: building a
multi-worker strategy installs it.

>>> decide_strategy("auto", ["CPU:0", "GPU:0", "GPU:1"]).kind
'mirrored'
>>> choose_cross_device_ops("auto", "mirrored", ["GPU:0", "GPU:1"], platform="linux",
...                         nccl_available=True, virtual_gpus=False).name
'nccl'
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfdevices import runtime as rt
from tfdevices.core.addresses import split_address
from tfdevices.core.devices import is_logical_name, logical_devices, resolve_devices, short_name, tfdevices_name
from tfdevices.core.errors import StrategyError
from tfdevices.core.reduction import CrossDeviceOpsChoice, choose_cross_device_ops
from tfdevices.core.tf_door import import_tf
from tfdevices.gpus.discovery import discover
from tfdevices.jobs.cluster import ClusterEnv, cluster_from_env
from tfdevices.jobs.coordination_keys import KeyValue
from tfdevices.jobs.kubernetes import wait_for_names
from tfdevices.jobs.rank_hooks import start_reporting

if TYPE_CHECKING:  # the return type's name only: importing tfdevices never imports TensorFlow
    import tensorflow as tf
from tfdevices.mends.exit_barrier import leave_together
from tfdevices.mends.keras_fit import install_fit_adapter
from tfdevices.mends.step_progress import StepMarks
from tfdevices.mends.uneven_batch import mend_uneven_batches

__all__ = [
    "build_strategy",
    "StrategyInfo",
    "explanation",
    "Explained",
    "Explanation",
    "decide_strategy",
]

logger = logging.getLogger("tfdevices")

KINDS = ("auto", "default", "one_device", "mirrored", "multi_worker")


# --------------------------------------------------------------------------- decide


@dataclasses.dataclass(frozen=True)
class StrategyInfo:
    """How a strategy came about: what :func:`decide_strategy` chose, then what :func:`build_strategy` built.

    A decision fills the first fields (its devices named as TensorFlow names them; it knows no NVML
    index); :func:`build_strategy` the rest. :meth:`Explained.table` shows it.

    Attributes:
        kind: ``"default"``, ``"one_device"``, ``"mirrored"`` or ``"multi_worker"``.
        devices: this process's replica devices, tfdevices names (NVML index for a GPU, ``"CPU:1"``).
        tf_devices: the same devices, TensorFlow names (``"GPU:0"``).
        cross_device_ops: the reduction (``"nccl"``, ``"ring"``, ``"none"`` ...; ``""`` in a decision).
        reason: why this kind, these devices and this reduction.
        num_workers: processes in the job.
        cluster_source: where ``num_workers`` came from: ``"TF_CONFIG"``, ``"SLURM"`` or ``"none"``.
        warnings: what the user should know (running on the CPU ...).
        strategy_class: the ``tf.distribute`` class (``"MirroredStrategy"``; ``""`` in a decision).
        num_replicas: replicas in sync across the job (all workers).
    """

    kind: str
    devices: tuple[str, ...]
    tf_devices: tuple[str, ...]
    cross_device_ops: str
    reason: str
    num_workers: int = 1
    cluster_source: str = "none"
    warnings: tuple[str, ...] = ()
    strategy_class: str = ""
    num_replicas: int = 1

    def table(self) -> str:
        """The strategy, its replicas with both device names, and why."""
        lines = [
            f"strategy: {self.kind} ({self.strategy_class}), {self.num_replicas} replica(s)"
            + (f" on {self.num_workers} workers ({self.cluster_source})" if self.num_workers > 1 else ""),
            f"cross-device ops: {self.cross_device_ops}",
            f"why: {self.reason}",
        ]
        width = max([len("tfdevices")] + [len(d) for d in self.devices])
        lines.append(f"  replica  {'tfdevices'.ljust(width)}  TensorFlow")
        for i, (name, tf_name) in enumerate(zip(self.devices, self.tf_devices)):
            shown = f"GPU {name}" if not is_logical_name(name) else name
            lines.append(f"  {i:<7}  {shown.ljust(width)}  {tf_name}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _decided(
    kind: str,
    devices: tuple[str, ...],
    reason: str,
    warning: str | None = None,
    num_workers: int = 1,
    source: str = "none",
) -> StrategyInfo:
    """A decision: ``devices`` (TensorFlow names) under both names, no reduction yet, a replica on each."""
    replicas = 1 if kind == "default" else len(devices) * num_workers
    return StrategyInfo(
        kind, devices, devices, "", reason, num_workers, source, (warning,) if warning else (), "", replicas
    )


def decide_strategy(
    kind: str, devices: Sequence[str], num_workers: int = 1, *, explicit: bool = False, cluster_source: str = "none"
) -> StrategyInfo:
    """Chooses the strategy (pure).

    ``"auto"``: multi-worker when the job has several workers; otherwise mirrored over 2+ GPUs,
    one-device on a single GPU, and with no GPU the CPU, with a warning (mirrored over the logical
    CPUs when the CPU was split into several, one-device on ``CPU:0`` when not).

    Args:
        kind: one of :data:`KINDS`.
        devices: TensorFlow logical devices (``"GPU:0"``, ``"CPU:1"``): those asked for when
            ``explicit``, else every logical device TensorFlow has.
        num_workers: processes in the job (from :func:`~tfdevices.jobs.cluster.cluster_from_env`).
        explicit: whether ``devices`` were named by the user.
        cluster_source: where ``num_workers`` came from, for the reason.

    Returns:
        A :class:`StrategyInfo` holding the decision (its reduction is chosen when the strategy is built).

    Raises:
        StrategyError: unknown kind, or devices that the kind cannot use.

    >>> d = decide_strategy("auto", ["CPU:0", "CPU:1", "CPU:2"])
    >>> d.kind, d.tf_devices
    ('mirrored', ('CPU:0', 'CPU:1', 'CPU:2'))
    >>> decide_strategy("auto", ["CPU:0", "GPU:0"]).reason
    'one visible GPU: one-device strategy on GPU:0'
    """
    if kind not in KINDS:
        raise StrategyError(
            f"strategy kind {kind!r} is unknown; known kinds: {', '.join(KINDS)}.",
            hint="use 'auto' to choose from the visible devices.",
        )
    devices = tuple(short_name(d) for d in devices)
    if explicit and not devices:
        raise StrategyError(
            f"strategy {kind!r}: devices=[] names no device.",
            hint="name at least one device, or pass devices=None for every visible device.",
        )
    gpus = tuple(d for d in devices if d.startswith("GPU:"))
    cpus = tuple(d for d in devices if d.startswith("CPU:"))
    if kind == "multi_worker" or (kind == "auto" and num_workers > 1):
        return _decide_multi_worker(devices, gpus, num_workers, explicit, cluster_source)
    decide = {"auto": _decide_auto, "default": _decide_default, "one_device": _decide_one_device}.get(kind)
    decision = (decide or _decide_mirrored)(devices, gpus, cpus, explicit)
    return dataclasses.replace(decision, cluster_source=cluster_source)


def _cpu_warning(devices: Sequence[str]) -> str:
    if len(devices) > 1:
        return (
            f"no GPU visible: running on {len(devices)} logical CPU devices; they share the same cores, "
            "so this checks distribution, not speed."
        )
    return "no GPU visible: running on the CPU."


def _decide_auto(
    devices: tuple[str, ...], gpus: tuple[str, ...], cpus: tuple[str, ...], explicit: bool
) -> StrategyInfo:
    if explicit:
        if len(devices) == 1:
            return _decided(
                "one_device", devices, f"one device asked for: {devices[0]}", None if gpus else _cpu_warning(devices)
            )
        return _decide_mirrored(devices, gpus, cpus, explicit=True)
    if len(gpus) >= 2:
        return _decided("mirrored", gpus, f"{len(gpus)} visible GPUs: mirrored over all of them")
    if len(gpus) == 1:
        return _decided("one_device", gpus, f"one visible GPU: one-device strategy on {gpus[0]}")
    if len(cpus) >= 2:
        why = f"no GPU, the CPU split into {len(cpus)} logical devices: mirrored over them"
        return _decided("mirrored", cpus, why, _cpu_warning(cpus))
    chosen = cpus[:1] or ("CPU:0",)
    return _decided("one_device", chosen, "no GPU visible: one-device strategy on the CPU", _cpu_warning(chosen))


def _decide_default(
    devices: tuple[str, ...], gpus: tuple[str, ...], cpus: tuple[str, ...], explicit: bool
) -> StrategyInfo:
    if explicit:
        raise StrategyError(
            f"strategy 'default' takes no devices, got {list(devices)}.",
            hint="use 'one_device' or 'mirrored' to run on chosen devices.",
        )
    return _decided("default", gpus[:1] or cpus[:1], "asked for the default strategy: TensorFlow places ops itself")


def _decide_one_device(
    devices: tuple[str, ...], gpus: tuple[str, ...], cpus: tuple[str, ...], explicit: bool
) -> StrategyInfo:
    if explicit and len(devices) != 1:
        raise StrategyError(
            f"strategy 'one_device' takes one device, got {len(devices)}: {list(devices)}.",
            hint="use 'mirrored' for several devices.",
        )
    chosen = devices if explicit else (gpus or cpus)[:1]
    warning = None if explicit or gpus else _cpu_warning(chosen)
    return _decided("one_device", chosen, f"asked for one device: {chosen[0]}", warning)


def _decide_mirrored(
    devices: tuple[str, ...], gpus: tuple[str, ...], cpus: tuple[str, ...], explicit: bool
) -> StrategyInfo:
    chosen = devices if explicit else (gpus or cpus)
    warning = None
    if explicit and gpus and cpus:
        warning = (
            f"mirrored over CPU and GPU devices {list(chosen)}: every step waits for the slowest replica, the CPU."
        )
    elif not gpus:
        warning = _cpu_warning(chosen)
    how = "asked for" if explicit else "every visible " + ("GPU" if gpus else "CPU device")
    return _decided("mirrored", chosen, f"mirrored over {len(chosen)} device(s): {how}", warning)


def _decide_multi_worker(
    devices: tuple[str, ...], gpus: tuple[str, ...], num_workers: int, explicit: bool, cluster_source: str
) -> StrategyInfo:
    if explicit:
        raise StrategyError(
            f"strategy 'multi_worker' uses every visible GPU of each worker; it takes no devices, got {list(devices)}.",
            hint="choose each worker's GPUs before TensorFlow starts: configure(select(...)) or --gpus.",
        )
    chosen = gpus or ("CPU:0",)
    if cluster_source == "none" or num_workers <= 1:
        reason = "asked for multi_worker without TF_CONFIG or a SLURM step: one worker"
        warning: str | None = "multi_worker with a single worker: set TF_CONFIG or run under srun to add workers."
    else:
        reason = f"{cluster_source} describes {num_workers} workers: multi-worker mirrored"
        warning = None if gpus else "no GPU visible: each worker trains on its CPU."
    return _decided("multi_worker", chosen, reason, warning, num_workers, cluster_source)


# --------------------------------------------------------------------------- build


class _Read:
    """An attribute an explained strategy reads from one of its records: ``strategy.kind`` is
    ``strategy.info.kind`` (:class:`StrategyInfo`), ``strategy.logdir`` is ``strategy.setup.logdir``
    (:class:`~tfdevices.flags.FlagsSetup`; ``default`` when the strategy was not built from flags).
    """

    def __init__(self, record: str, default: Any = None) -> None:
        self.record, self.default, self.name = record, default, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.__doc__ = f"``{self.record}.{name}``"

    def __get__(self, strategy: Any, owner: type | None = None) -> Any:
        if strategy is None:
            return self
        return getattr(strategy.info if self.record == "info" else strategy.setup, self.name, self.default)


class Explained:
    """What tfdevices adds to the ``tf.distribute.Strategy`` it builds: how it came about.

    :func:`build_strategy` builds the strategy from a plain subclass of its own
    ``tf.distribute`` class and this one (defined once per class, before the object is
    made: no object's class is changed), so it is used exactly like the TensorFlow
    strategy, passes every ``isinstance`` check, and also answers :meth:`table`,
    :attr:`info` (a :class:`StrategyInfo`, whose fields it answers too: ``kind``, ``devices``
    (tfdevices names), ``tf_devices``, ``cross_device_ops``, ``reason``, ``num_workers``,
    ``cluster_source``, ``warnings``) and :attr:`setup` (from flags: its ``selection``, ``runtime``,
    ``logdir`` and ``log_placement``, also answered). The names here are none of
    ``tf.distribute.Strategy``'s (a test keeps it so). TensorFlow's default strategy
    (``kind="default"``) explains itself too: a ``DefaultStrategy``, a ``tf.distribute.Strategy``
    around TensorFlow's own default strategy, whose scope is the default's (TensorFlow's object is
    left as it is).
    """

    _tfdevices_info: StrategyInfo
    _tfdevices_setup: Any = None

    kind = _Read("info")
    devices = _Read("info")
    tf_devices = _Read("info")
    cross_device_ops = _Read("info")
    reason = _Read("info")
    num_workers = _Read("info")
    cluster_source = _Read("info")
    warnings = _Read("info")
    selection = _Read("setup")
    runtime = _Read("setup")
    logdir = _Read("setup")
    log_placement = _Read("setup", False)

    @property
    def info(self) -> StrategyInfo:
        """How this strategy came about."""
        return self._tfdevices_info

    @property
    def setup(self) -> Any:
        """What :func:`tfdevices.flags.configure_from_flags` did before building it (else ``None``)."""
        return self._tfdevices_setup

    @property
    def num_replicas(self) -> int:
        """Replicas in sync across the job (``num_replicas_in_sync``)."""
        return int(self.num_replicas_in_sync)  # type: ignore[attr-defined]

    @property
    def strategy(self) -> Any:
        """This strategy (code written for tfdevices 0.1's ``StrategyInfo.strategy`` keeps working)."""
        return self

    def table(self) -> str:
        """The selection and configuration (from flags), the strategy, its replicas named both ways, and why."""
        own = self._tfdevices_info.table()
        return own if self._tfdevices_setup is None else f"{self._tfdevices_setup.table()}\n\n{own}"


class _DefaultStrategy:
    """TensorFlow's default strategy (no distribution: TensorFlow places each op), explaining itself.

    What :func:`build_strategy` returns for ``kind="default"``: a ``tf.distribute.Strategy`` made,
    with TensorFlow's own constructor, around the default strategy's ``extended`` (its replica,
    ``run``, ``reduce`` and datasets), whose :meth:`scope` is the default strategy's scope. Inside it,
    ``tf.distribute.get_strategy()`` is TensorFlow's default, as it is with no scope at all; that
    object itself is left as TensorFlow made it (no class or attribute of its is changed).
    """

    def __init__(self, default: Any) -> None:
        super().__init__(default.extended)  # type: ignore[call-arg]  # tf.distribute.Strategy(extended)
        self._tfdevices_default = default

    def scope(self) -> Any:
        """TensorFlow's default strategy's scope (variables made in it are the default strategy's)."""
        return self._tfdevices_default.scope()

    def __deepcopy__(self, memo: Any) -> Any:
        raise RuntimeError("TensorFlow's default strategy is one per process: it is not copied")


class Explanation(Explained):
    """The explanation of a strategy tfdevices did not build itself, kept beside it (:func:`explain`).

    Answers everything :class:`Explained` does; :attr:`strategy` is TensorFlow's object.
    """

    def __init__(self, strategy: Any, info: StrategyInfo, setup: Any = None) -> None:
        self._strategy = strategy
        self._tfdevices_info = info
        self._tfdevices_setup = setup

    @property
    def strategy(self) -> Any:
        """TensorFlow's strategy object this explains."""
        return self._strategy

    @property
    def num_replicas(self) -> int:
        """Replicas in sync (``num_replicas_in_sync``)."""
        return int(self._strategy.num_replicas_in_sync)


_EXPLAINED: dict[tuple[type, bool], type] = {}
#: id -> the explanation of a strategy tfdevices did not build, kept beside it (the entry keeps the strategy alive).
_KEPT_EXPLANATIONS: dict[int, Explanation] = {}


def _explained_class(base: type, *, steps: bool = False, default: bool = False) -> type:
    """``base`` with :class:`Explained` (and, for many workers, :class:`StepMarks`; for TensorFlow's
    default strategy, :class:`_DefaultStrategy`) mixed in: a plain subclass, made once per class.
    """
    key = (base, default)
    cls = _EXPLAINED.get(key)
    if cls is None:
        name = "DefaultStrategy" if default else base.__name__
        doc = _DefaultStrategy.__doc__ if default else base.__doc__
        cls = _EXPLAINED[key] = type(
            name,
            ((StepMarks,) if steps else ()) + ((_DefaultStrategy,) if default else ()) + (base, Explained),
            {"__module__": __name__, "__qualname__": name, "__doc__": f"{doc or ''}\n\n(tfdevices: explains itself)"},
        )
    return cls


def explain(strategy: Any, info: StrategyInfo, setup: Any = None) -> Any:
    """Attaches how ``strategy`` came about; returns ``strategy``.

    A strategy tfdevices built (:class:`Explained`, every kind) keeps it on itself; any other is
    left unchanged, its explanation kept beside it (:func:`explanation`).
    """
    if isinstance(strategy, Explained):
        strategy._tfdevices_info = info
        strategy._tfdevices_setup = setup
    else:
        _KEPT_EXPLANATIONS[id(strategy)] = Explanation(strategy, info, setup)
    return strategy


def explanation(strategy: Any) -> Explained:
    """How ``strategy`` came about: the strategy itself when tfdevices built it, else what was kept beside it.

    Raises:
        StrategyError: ``strategy`` did not come from :func:`build_strategy`.
    """
    if isinstance(strategy, Explained):
        return strategy
    kept = _KEPT_EXPLANATIONS.get(id(strategy))
    if kept is None or kept.strategy is not strategy:
        raise StrategyError(
            f"{type(strategy).__name__} was not built by tfdevices, so there is nothing to explain.",
            hint="build it with tfdevices.build_strategy(...) (or configure_from_flags).",
        )
    return kept


def build_strategy(
    kind: str = "auto",
    devices: Sequence[int | str] | int | str | None = None,
    cross_device_ops: str = "auto",
    *,
    runtime: rt.RuntimeConfig | None = None,
    env: Mapping[str, str] | None = None,
) -> tf.distribute.Strategy:
    """Builds a ``tf.distribute`` strategy on the right devices; it explains itself.

    The result is the ``tf.distribute`` strategy (``with build_strategy().scope():``), an
    :class:`Explained` one too: ``table()``, ``devices`` / ``tf_devices``, ``reason``. A multi-worker
    strategy also installs the Keras 3 fit adapter (:func:`tfdevices.training.install_fit_adapter`).

    GPUs named by NVML index are translated to TensorFlow's names through the applied
    :class:`~tfdevices.runtime.RuntimeConfig`. When TensorFlow's runtime has not started, nothing was
    configured and TensorFlow would see other GPUs too, that is an error naming the
    ``configure(select(...))`` to call first, so a strategy on GPU 1 never fills GPU 0 (tensorflow#31410).

    Args:
        kind: one of :data:`KINDS`: ``"auto"`` (chosen from the devices and ``TF_CONFIG`` / SLURM:
            ``"multi_worker"`` in a job of many workers, else ``"mirrored"`` on several devices, else
            ``"one_device"``), ``"default"`` (TensorFlow's default strategy, explained),
            ``"one_device"``, ``"mirrored"`` (one process, several devices) or ``"multi_worker"``
            (``MultiWorkerMirroredStrategy``).
        devices: ``None`` for every visible device, or a device or a list of them: NVML indices
            (``[0, 1]``, ``"0:1"`` for a MIG instance) or TensorFlow logical names (``["CPU:0", "CPU:1"]``).
        cross_device_ops: one of :data:`CROSS_DEVICE_OPS`: ``"auto"``, ``"nccl"``,
            ``"hierarchical_copy"``, ``"reduction_to_one_device"``, ``"ring"`` or ``"none"``.
        runtime: the :class:`~tfdevices.runtime.RuntimeConfig` applied; default: the one
            :func:`tfdevices.configure` applied in this process, if any.
        env: environment to read ``TF_CONFIG`` / SLURM from (default ``os.environ``).

    Returns:
        The ``tf.distribute.Strategy``, :class:`Explained`.

    Raises:
        StrategyError: the kind, devices and reduction do not fit together.
        SpecError: a device name is malformed or names nothing TensorFlow sees.
        TfConfigError: ``TF_CONFIG`` is invalid.

    In a fresh process, on two logical CPUs (GPUs where there are: ``configure(select("auto:2"))``):

    >>> import tfdevices
    >>> config = tfdevices.configure("none", virtual_devices=2)  # doctest: +SKIP
    >>> strategy = tfdevices.build_strategy("mirrored")  # doctest: +SKIP
    >>> strategy.kind, strategy.num_replicas_in_sync, strategy.tf_devices  # doctest: +SKIP
    ('mirrored', 2, ('CPU:0', 'CPU:1'))
    """
    if kind not in KINDS:
        decide_strategy(kind, ())  # raises the StrategyError
    cluster = cluster_from_env(os.environ if env is None else env)
    if devices is None:
        _check_cuda_mask()
    runtime = _check_masked(devices, runtime)
    tf = import_tf()
    if kind == "multi_worker" or (kind == "auto" and cluster.num_workers > 1):
        return _build_multi_worker(tf, kind, devices, cross_device_ops, cluster)
    return _build_in_process(tf, kind, devices, cross_device_ops, cluster, runtime)


def _build_in_process(
    tf: Any, kind: str, devices: object, cross_device_ops: str, cluster: ClusterEnv, runtime: Any
) -> Any:
    """A strategy over this process's devices (one worker): ``devices`` named the tfdevices way, or ``None``."""
    rt.trace_runtime_start()  # a later configure() names the user's line that called this
    logical = logical_devices()
    gpu_map = rt.gpu_map(logical, runtime)
    explicit = devices is not None
    names, tf_names = (
        resolve_devices(devices, logical=logical, gpu_map=gpu_map, unseen=rt.unseen_gpu_hint)
        if explicit
        else ((), logical)
    )
    decision = decide_strategy(kind, tf_names, cluster.num_workers, explicit=explicit, cluster_source=cluster.source)
    if not explicit:
        names = tuple(tfdevices_name(d, gpu_map) for d in decision.tf_devices)
    ops = _reduction(tf, cross_device_ops, decision, virtual_gpus=_virtual_gpus(tf))
    warnings = _warn(*decision.warnings, _unused_gpus_warning(decision, logical))
    if decision.kind == "mirrored":
        install_fit_adapter()  # Keras 3.3-3.7's fit is wrong under one process's mirrored strategy too
        mend_uneven_batches()  # Keras 3 fit with a batch the replicas do not divide
    strategy = _make(tf, decision, ops.name, cluster)
    return explain(strategy, _built(decision, strategy, names, ops, f"{decision.reason}; {ops.reason}", warnings))


def _reduction(tf: Any, requested: str, decision: StrategyInfo, *, virtual_gpus: bool) -> CrossDeviceOpsChoice:
    """How the decided strategy's replicas reduce, from what this TensorFlow and platform can run."""
    return choose_cross_device_ops(
        requested,
        decision.kind,
        decision.tf_devices,
        platform=sys.platform,
        nccl_available=_nccl_available(tf),
        virtual_gpus=virtual_gpus,
    )


def _built(
    decision: StrategyInfo,
    strategy: Any,
    names: tuple[str, ...],
    ops: CrossDeviceOpsChoice,
    reason: str,
    warnings: tuple[str, ...],
) -> StrategyInfo:
    """The decision, completed with what was built: the devices' tfdevices names, the reduction, the class."""
    return dataclasses.replace(
        decision,
        devices=names,
        cross_device_ops=ops.name,
        reason=reason,
        warnings=warnings,
        strategy_class=type(strategy).__name__,
        num_replicas=int(strategy.num_replicas_in_sync),
    )


def _check_cuda_mask() -> None:
    """A ``CUDA_VISIBLE_DEVICES`` that names nothing valid is an error, not a silent run on the CPU (CUDA
    stops at the first entry it cannot use). Discovery reads NVML, not TensorFlow, and raises EnvVarError.
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() not in ("", "-1"):
        discover(env=os.environ)


def _build_multi_worker(tf: Any, kind: str, devices: object, cross_device_ops: str, cluster: ClusterEnv) -> Any:
    """MultiWorkerMirroredStrategy must exist before TensorFlow's runtime starts: decide from physical devices."""
    visible = [f"GPU:{i}" for i, _ in enumerate(tf.config.get_visible_devices("GPU"))] or ["CPU:0"]
    explicit = devices is not None
    decision = decide_strategy(
        kind,
        [str(d) for d in devices] if explicit else visible,  # type: ignore[attr-defined]
        cluster.num_workers,
        explicit=explicit,
        cluster_source=cluster.source,
    )
    if rt.runtime_started():
        raise StrategyError(
            "the multi_worker strategy must be built before TensorFlow's runtime starts, and it has started.",
            hint="call build_strategy() first thing after configure(), before creating tensors or models.",
        )
    ops = _reduction(tf, cross_device_ops, decision, virtual_gpus=False)
    warnings = _warn(*decision.warnings)
    adapter = install_fit_adapter()  # warns itself when it does not cover this Keras
    if not adapter.fit_works:
        warnings += (adapter.reason,)
    strategy = _make(tf, decision, ops.name, cluster)
    tf_devices = tuple(short_name(d) for d in strategy.extended.worker_devices)
    reason = f"{decision.reason}; {ops.reason}; {adapter.reason}"
    built = _built(decision, strategy, tf_devices, ops, reason, warnings)
    return explain(strategy, dataclasses.replace(built, tf_devices=tf_devices))


def _warn(*warnings: str | None) -> tuple[str, ...]:
    """Logs each warning once, and returns them."""
    kept = tuple(w for w in warnings if w)
    for warning in kept:
        logger.warning("tfdevices: %s", warning)
    return kept


def _check_masked(devices: object, runtime: Any) -> Any:
    """GPUs named by NVML index need a mask before TensorFlow starts, or TensorFlow fills the others too.

    The strategy reads the configuration; it does not make one (``configure`` does). When
    nothing was configured, TensorFlow has not started and it would see GPUs beyond those
    named, this is an error that says what to call first (tensorflow#31410: a strategy on
    GPU 1 that fills GPU 0's memory).
    """
    runtime = runtime if runtime is not None else rt.current()
    items = list(devices) if isinstance(devices, (list, tuple)) else [] if devices is None else [devices]
    keys = [
        str(d).strip()
        for d in items
        if (isinstance(d, int) and not isinstance(d, bool)) or (isinstance(d, str) and not is_logical_name(d))
    ]
    if runtime is None and keys and not rt.runtime_started():
        others = sorted(
            (g.key for g in discover().visible if g.key not in keys),
            key=lambda k: [int(p) if p.isdigit() else 0 for p in k.split(":")],
        )
        if others:
            spec = ",".join(keys)
            raise StrategyError(
                f"build_strategy(devices={_short(items)}) names GPU(s) {spec} by NVML index, but nothing was "
                f"configured: TensorFlow would start on GPU(s) {_short(others)} too and take their memory "
                "(tensorflow#31410).",
                hint=f"call tfdevices.configure(tfdevices.select('{spec}')) first (or start with --gpus={spec}).",
            )
    return runtime


def _short(value: object, limit: int = 60) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _unused_gpus_warning(decision: StrategyInfo, logical: Sequence[str]) -> str | None:
    if decision.kind == "default":
        return None
    unused = [d for d in logical if d.startswith("GPU:") and d not in decision.tf_devices]
    if not unused or not any(d.startswith("GPU:") for d in decision.tf_devices):
        return None
    return (
        f"TensorFlow also sees {', '.join(unused)}, which this strategy does not use but TensorFlow "
        "reserves memory on; mask them before TensorFlow starts (configure(select(...)) or --gpus)."
    )


def _nccl_available(tf: Any) -> bool:
    info = tf.sysconfig.get_build_info()
    return bool(info.get("is_cuda_build")) and sys.platform.startswith("linux")


def _virtual_gpus(tf: Any) -> bool:
    return len(tf.config.list_logical_devices("GPU")) > len(tf.config.list_physical_devices("GPU"))


def _coordination_store() -> KeyValue | None:
    """The key-value store of TensorFlow's coordination service, which a multi-worker job runs: how the ranks of a job
    spread over machines reach rank 0's watch where no launcher watches (``None`` where this TensorFlow has none).
    """
    from tensorflow.python.eager import context  # noqa: PLC0415 (TensorFlow runs: the strategy is built)

    ctx = context.context()
    names = ("set_config_key_value", "get_config_key_value", "delete_config_key_value")
    if not all(callable(getattr(ctx, name, None)) for name in names):
        return None
    return KeyValue(ctx.set_config_key_value, ctx.get_config_key_value, ctx.delete_config_key_value)


def _make(tf: Any, decision: StrategyInfo, ops: str, cluster: ClusterEnv) -> Any:
    full = [f"/{d}" for d in decision.tf_devices]
    if decision.kind == "default":
        return _explained_class(tf.distribute.Strategy, default=True)(tf.distribute.get_strategy())
    if decision.kind == "one_device":
        return _explained_class(tf.distribute.OneDeviceStrategy)(full[0])
    if decision.kind == "mirrored":
        cross = {
            "nccl": tf.distribute.NcclAllReduce,
            "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
            "reduction_to_one_device": tf.distribute.ReductionToOneDevice,
        }[ops]()
        return _explained_class(tf.distribute.MirroredStrategy)(devices=full, cross_device_ops=cross)
    impl = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(implementation=impl.NCCL if ops == "nccl" else impl.RING)
    resolver = None
    if cluster.source == "kubernetes":  # the pods' names resolve once their headless Service publishes them
        wait_for_names([split_address(a)[0] for a in cluster.addresses], cluster.wait_s)
    if cluster.source in ("SLURM", "kubernetes"):
        # The cluster from the step (or the pods' job) itself, not TensorFlow's SlurmClusterResolver: that one
        # runs nvidia-smi (missing on a node without a driver), counts GPUs without the step's mask, fails with
        # no GPUs ("range() arg 3 must not be zero") and puts every step on one port. GPUs are tfdevices' (configure).
        spec = tf.train.ClusterSpec({"worker": list(cluster.addresses)})
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            spec, task_type="worker", task_id=cluster.task_index, rpc_layer="grpc"
        )
    strategy = _explained_class(tf.distribute.MultiWorkerMirroredStrategy, steps=True)(
        cluster_resolver=resolver, communication_options=options
    )
    start_reporting(store=_coordination_store())  # where each rank is, for the job's watch (tfdevices.jobs.watch)
    leave_together()  # a success reads as one: no worker leaves while another still runs
    return strategy
