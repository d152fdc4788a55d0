"""absl flags for any script: choose devices and a strategy from the command line.

Two lines give an absl app the toolkit's flags::

    from tfdevices import flags as tfd_flags
    tfd_flags.define_flags()                      # at module level

    def main(argv):
        strategy = tfd_flags.configure_from_flags()  # discover, select, configure, build
        print(strategy.table())                       # the selection, the configuration, the strategy
        with strategy.scope():                        # a tf.distribute.Strategy
            ...

Flags: ``--gpus`` (a spec: ``all``, ``none``, ``auto:2``, ``0,2``), ``--min_free_memory``,
``--memory_growth``, ``--memory_limit``, ``--virtual_devices``, ``--strategy``,
``--cross_device_ops``, ``--logdir``, ``--log_placement``. Each is validated when
the command line is parsed, so ``app.run`` answers a bad value with a usage
message, before any work starts.

>>> from absl import app, flags
>>> fv = flags.FlagValues()
>>> define_flags(fv)
>>> _ = fv(["prog", "--gpus=auto:2", "--strategy=mirrored"])
>>> fv.gpus, fv.strategy
('auto:2', 'mirrored')
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from absl import app, flags

from tfdevices.core.errors import ABSL, InputError, TfDevicesError, UsageError
from tfdevices.core.paths import check_directory
from tfdevices.core.reduction import CROSS_DEVICE_OPS
from tfdevices.core.units import parse_memory
from tfdevices.gpus.selection import select
from tfdevices.gpus.spec import parse_spec
from tfdevices.jobs.env import launch_info
from tfdevices.runtime import configure
from tfdevices.strategy import KINDS, build_strategy, explain, explanation
from tfdevices.tensorboard.writer import write_placement
from tfdevices.verify import capture

if TYPE_CHECKING:  # the return type's name only: importing tfdevices never imports TensorFlow
    import tensorflow as tf

__all__ = [
    "define_flags",
    "configure_from_flags",
    "FlagsSetup",
    "log_placement",
    "usage_errors",
    "planned_replicas",
    "check_batch_size",
    "DEFAULT_LOGDIR",
]

FLAGS = flags.FLAGS
DEFAULT_LOGDIR = "logs"
"""``--logdir`` when it is not given: ``logs`` under the working directory, as Keras' ``TensorBoard``
callback (``log_dir="logs"``); a :class:`~tfdevices.tensorboard.callbacks.PlacementLogger` given it
writes its run there, and the demos write theirs under it (``logs/mirrored``)."""


def max_virtual_devices() -> int:
    """The most logical devices ``--virtual_devices`` may split one device into on this machine.

    Every logical device gets its own TensorFlow allocator and executor, and its
    ops run on the host's cores (the CPU's own, or the ones that drive the GPU):
    past four per core a split only time-slices them and costs memory. At least 8.
    """
    return max(8, 4 * (os.cpu_count() or 1))


NAMES = (
    "gpus",
    "min_free_memory",
    "memory_growth",
    "memory_limit",
    "virtual_devices",
    "strategy",
    "cross_device_ops",
    "logdir",
    "log_placement",
)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines the toolkit's flags, with their validators, in ``flag_values``.

    Calling it again on the same ``flag_values`` does nothing.

    Args:
        flag_values: where to define them (tests pass their own ``flags.FlagValues()``).
    """
    if "gpus" in flag_values:
        return
    fv = flag_values
    flags.DEFINE_string(
        "gpus",
        "all",
        "GPUs to use: 'all', 'none' (CPU), 'auto:N' (the N best), or NVML indices as nvidia-smi shows them "
        "('0,2', a range '0-3', a MIG instance '0:1', a UUID prefix 'GPU-8a3c').",
        flag_values=fv,
    )
    flags.DEFINE_string("min_free_memory", None, "Skip GPUs with less free memory, e.g. '8GiB'.", flag_values=fv)
    flags.DEFINE_bool(
        "memory_growth",
        None,
        "Allocate GPU memory as needed instead of all at once (unset: TensorFlow's default).",
        flag_values=fv,
    )
    flags.DEFINE_string("memory_limit", None, "Memory cap per logical GPU, e.g. '4GiB'.", flag_values=fv)
    flags.DEFINE_integer(
        "virtual_devices",
        None,
        "Split each GPU, or the CPU when there is none, into N "
        f"logical devices (at most {max_virtual_devices()} here: 4 per CPU core).",
        lower_bound=1,
        upper_bound=max_virtual_devices(),
        flag_values=fv,
    )
    flags.DEFINE_enum("strategy", "auto", list(KINDS), "The tf.distribute strategy.", flag_values=fv)
    flags.DEFINE_enum(
        "cross_device_ops",
        "auto",
        list(CROSS_DEVICE_OPS),
        "How replicas reduce gradients ('auto': NCCL only where it can work).",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "logdir", DEFAULT_LOGDIR, "TensorBoard log directory (relative to the working directory).", flag_values=fv
    )
    flags.DEFINE_bool(
        "log_placement",
        False,
        "Capture where one step's ops ran and write it to --logdir for TensorBoard.",
        flag_values=fv,
    )
    _validate("gpus", lambda v: parse_spec(v, what="--gpus"), fv)
    _validate("min_free_memory", lambda v: v is None or parse_memory(v, what="--min_free_memory"), fv)
    _validate("memory_limit", lambda v: v is None or parse_memory(v, what="--memory_limit"), fv)
    _validate("logdir", lambda v: v is None or check_directory(v, what="--logdir"), fv)


def _validate(name: str, check: Callable[[Any], object], fv: flags.FlagValues) -> None:
    def checker(value: Any) -> bool:
        try:
            check(value)
        except TfDevicesError as err:
            raise flags.ValidationError(str(err)) from None
        return True

    flags.register_validator(name, checker, flag_values=fv)


@dataclasses.dataclass(frozen=True)
class FlagsSetup:
    """What :func:`configure_from_flags` did before building the strategy (its ``setup``).

    Attributes:
        selection: the GPUs chosen (:class:`~tfdevices.gpus.selection.Selection`).
        runtime: the configuration applied (:class:`~tfdevices.runtime.RuntimeConfig`).
        logdir: ``--logdir``; :data:`DEFAULT_LOGDIR` (``"logs"``) when it is not given.
        log_placement: ``--log_placement``.
    """

    selection: Any
    runtime: Any
    logdir: str | None = None
    log_placement: bool = False

    def table(self) -> str:
        """The selection and the runtime configuration, for people."""
        return "\n\n".join((self.selection.table(), self.runtime.table()))


def configure_from_flags(
    flag_values: flags.FlagValues = FLAGS,
    *,
    cpu_virtual_devices: int | None = None,
    global_batch_size: int | None = None,
) -> tf.distribute.Strategy:
    """Discovers, selects, configures and builds the strategy the flags ask for.

    Call it in ``main``, before anything else uses TensorFlow. What it returns is the
    strategy :func:`tfdevices.build_strategy` built (a ``tf.distribute.Strategy``), which
    also carries what was done: ``table()`` shows the selection, the configuration and
    the strategy; ``selection``, ``runtime``, ``logdir`` (``"logs"`` when ``--logdir`` is not
    given: :data:`DEFAULT_LOGDIR`), ``log_placement`` and ``setup`` (a :class:`FlagsSetup`) hold them.

    Args:
        flag_values: parsed flags holding :func:`define_flags`' flags.
        cpu_virtual_devices: logical CPUs to split the CPU into when no GPU is
            selected and ``--virtual_devices`` is unset (demos use it to show
            distribution on a CPU-only machine); ``None``: no split.
        global_batch_size: the batch split across the replicas; when given, a batch
            smaller than the number of replicas is refused before TensorFlow starts.

    Returns:
        The ``tf.distribute.Strategy`` (:class:`~tfdevices.strategy.Explained`).

    Raises:
        InputError: the flags were not defined or not parsed.
        UsageError: ``global_batch_size`` is smaller than the number of replicas.
        SelectionError, RuntimeInitializedError, StrategyError: see
            :func:`tfdevices.select`, :func:`tfdevices.configure`, :func:`tfdevices.build_strategy`.
    """
    fv = _parsed(flag_values)
    selection = select(fv.gpus, min_free_memory=fv.min_free_memory, terms=ABSL)
    split = fv.virtual_devices
    if split is None and selection.is_cpu_only:
        split = cpu_virtual_devices
    if global_batch_size is not None:
        check_batch_size(global_batch_size, planned_replicas(fv.strategy, len(selection.gpus), split))
    runtime = configure(
        selection, memory_growth=fv.memory_growth, memory_limit=fv.memory_limit, virtual_devices=split, terms=ABSL
    )
    strategy = build_strategy(fv.strategy, None, fv.cross_device_ops, runtime=runtime)
    return explain(strategy, explanation(strategy).info, FlagsSetup(selection, runtime, fv.logdir, fv.log_placement))


def planned_replicas(strategy: str, gpus: int, split: int | None, world_size: int | None = None) -> int:
    """How many replicas a strategy will have, known before TensorFlow starts (pure).

    Args:
        strategy: a ``--strategy`` value.
        gpus: the GPUs selected (0: the CPU).
        split: logical devices per physical device (``None``: no split).
        world_size: processes of a multi-worker job (``None``: read by :func:`tfdevices.launch_info`).

    >>> planned_replicas("auto", 2, 3), planned_replicas("one_device", 8, None), planned_replicas("auto", 0, 4)
    (6, 1, 4)
    """
    if strategy in ("default", "one_device"):
        return 1
    local = max(1, gpus) * (split or 1)
    if strategy == "multi_worker":
        if world_size is None:
            world_size = launch_info().world_size
        return local * world_size
    return local


def check_batch_size(global_batch_size: int, replicas: int, *, what: str = "--batch_size") -> None:
    """Refuses a global batch smaller than the number of replicas (some replicas would get no example).

    Raises:
        UsageError: ``global_batch_size < replicas`` (under :func:`usage_errors`, absl's usage error).
    """
    if global_batch_size < replicas:
        raise UsageError(
            f"{what}={global_batch_size} is smaller than the {replicas} replicas it is split across, "
            "so some replicas would train on no example.",
            hint=f"use {what}={replicas} or more (a multiple of {replicas} splits evenly), "
            "or fewer devices (--gpus, --virtual_devices).",
        )


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """Turns a tfdevices :class:`~tfdevices.core.errors.UsageError` into absl's ``app.UsageError``, so an
    absl app answers a bad combination of flags found after parsing (``--batch_size`` smaller than the
    replicas) with its usage message and exit status 1, as it does for a bad flag.
    """
    try:
        yield
    except UsageError as err:
        raise app.UsageError(str(err)) from None


def log_placement(fn: Callable[..., Any], *args: Any, flag_values: flags.FlagValues = FLAGS, **kwargs: Any) -> Any:
    """With ``--log_placement``: runs ``fn`` once under :func:`tfdevices.verify` and writes the
    placement to ``--logdir`` for TensorBoard.

    Args:
        fn: one training or inference step (a ``tf.function``, a model ...).
        *args: its arguments.
        flag_values: parsed flags.
        **kwargs: its keyword arguments.

    Returns:
        The :class:`~tfdevices.verify.PlacementReport`, or ``None`` when the flag is off.

    Raises:
        InputError: the flags were not defined or not parsed.
    """
    fv = _parsed(flag_values)
    if not fv.log_placement:
        return None
    report = capture(fn, *args, **kwargs)
    write_placement(report, fv.logdir)
    return report


def _parsed(fv: flags.FlagValues) -> flags.FlagValues:
    if "gpus" not in fv:
        raise InputError(
            "the tfdevices flags are not defined.", hint="call tfdevices.flags.define_flags() at module level."
        )
    if not fv.is_parsed():
        raise InputError("the flags are not parsed yet.", hint="call this inside main(), under absl.app.run.")
    return fv
