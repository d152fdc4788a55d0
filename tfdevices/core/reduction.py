"""How a strategy's replicas reduce gradients: the cross-device ops, chosen and explained (pure).

NCCL only where it can work (every device a GPU, Linux, NCCL in the TensorFlow build, no GPU split
into virtual devices); :func:`tfdevices.build_strategy` gathers those facts and builds what this picks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tfdevices.core.errors import StrategyError

CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduction_to_one_device", "ring", "none")
_MIRRORED_OPS = ("nccl", "hierarchical_copy", "reduction_to_one_device")
_MULTI_WORKER_OPS = ("nccl", "ring")


@dataclasses.dataclass(frozen=True)
class CrossDeviceOpsChoice:
    """How replicas reduce values, and why.

    Attributes:
        name: one of :data:`CROSS_DEVICE_OPS` except ``"auto"``.
        reason: why.
    """

    name: str
    reason: str


def choose_cross_device_ops(
    requested: str, kind: str, devices: Sequence[str], *, platform: str, nccl_available: bool, virtual_gpus: bool
) -> CrossDeviceOpsChoice:
    """Chooses the cross-device reduction (pure).

    ``"auto"`` takes NCCL only where it can work: every device a GPU, Linux, NCCL
    in the TensorFlow build, and no GPU split into virtual devices (NCCL cannot
    have two ranks on one GPU). Otherwise HierarchicalCopy between GPUs, and
    ReductionToOneDevice when a CPU takes part. Multi-worker uses NCCL or ring
    collectives on the same terms.

    Args:
        requested: one of :data:`CROSS_DEVICE_OPS`.
        kind: the decided strategy kind.
        devices: the strategy's TensorFlow devices.
        platform: ``sys.platform``.
        nccl_available: whether this TensorFlow can run NCCL.
        virtual_gpus: whether some physical GPU is split into several logical GPUs.

    Returns:
        A :class:`CrossDeviceOpsChoice`.

    Raises:
        StrategyError: unknown name, or an explicit choice that cannot work here.

    >>> choose_cross_device_ops("auto", "mirrored", ["CPU:0", "CPU:1"], platform="linux",
    ...                         nccl_available=True, virtual_gpus=False)
    CrossDeviceOpsChoice(name='reduction_to_one_device', reason='CPU devices take part: NCCL reduces between GPUs only')
    """
    allowed = _allowed(requested, kind)
    if not allowed:
        return CrossDeviceOpsChoice("none", f"one replica: the {kind} strategy reduces nothing")
    blocker = _nccl_blocker(devices, platform, nccl_available, virtual_gpus)
    if requested == "nccl" and blocker:
        raise StrategyError(
            f"cross_device_ops='nccl' cannot work here: {blocker}.",
            hint="use cross_device_ops='auto', which picks what works.",
        )
    if requested != "auto":
        return CrossDeviceOpsChoice(requested, "asked for")
    if not blocker:
        return CrossDeviceOpsChoice("nccl", "all devices are GPUs on Linux with NCCL: NCCL all-reduce")
    if kind == "multi_worker":
        return CrossDeviceOpsChoice("ring", f"ring collectives over gRPC: {blocker}")
    if any(d.startswith("CPU:") for d in devices):
        return CrossDeviceOpsChoice("reduction_to_one_device", blocker)
    return CrossDeviceOpsChoice("hierarchical_copy", f"{blocker}: hierarchical copy between GPUs")


def _allowed(requested: str, kind: str) -> tuple[str, ...]:
    """The reductions ``kind`` takes (none for one replica), once ``requested`` is checked against them.

    Raises:
        StrategyError: ``requested`` is unknown, or not one ``kind`` takes.
    """
    if requested not in CROSS_DEVICE_OPS:
        raise StrategyError(
            f"cross_device_ops {requested!r} is unknown; known: {', '.join(CROSS_DEVICE_OPS)}.",
            hint="use 'auto' to let tfdevices choose.",
        )
    if kind in ("default", "one_device"):
        if requested not in ("auto", "none"):
            raise StrategyError(
                f"cross_device_ops={requested!r} does not apply to the {kind!r} strategy: one replica reduces nothing.",
                hint="use 'mirrored' or 'multi_worker', or leave cross_device_ops='auto'.",
            )
        return ()
    allowed = _MULTI_WORKER_OPS if kind == "multi_worker" else _MIRRORED_OPS
    if requested not in ("auto", *allowed):
        raise StrategyError(
            f"cross_device_ops={requested!r} does not apply to the {kind!r} strategy; "
            f"it takes {', '.join(('auto', *allowed))}.",
            hint="leave cross_device_ops='auto'.",
        )
    return allowed


def _nccl_blocker(devices: Sequence[str], platform: str, nccl_available: bool, virtual_gpus: bool) -> str | None:
    if any(not d.startswith("GPU:") for d in devices):
        return "CPU devices take part: NCCL reduces between GPUs only"
    if not platform.startswith("linux"):
        return f"NCCL runs on Linux only, this is {platform}"
    if not nccl_available:
        return "this TensorFlow build has no NCCL"
    if virtual_gpus:
        return "a GPU is split into virtual devices, and NCCL cannot run two ranks on one GPU"
    return None
