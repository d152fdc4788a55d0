"""The copies between devices in a step: each ``_Send``/``_Recv`` pair the profiler saw, as a :class:`Transfer`.

TensorFlow's partitioner joins two devices' parts of a function with a ``_Send`` and a ``_Recv``; the
``_Send``'s ``key`` stat names both devices (``src;incarnation;dst;...``). They also place the executor
contexts that ran them (:func:`context_devices`).
"""

from __future__ import annotations

import math
from operator import itemgetter

from tfdevices.verify.graph import FunctionGraph
from tfdevices.verify.host import KEY, STATS, KernelEvent
from tfdevices.verify.records import DTYPE_BYTES, TRANSFER_OPS, Transfer, report_device

_key_of, _kind_of_key = itemgetter(KEY), itemgetter(1)


def kernel_name(kernel: KernelEvent) -> str:
    """The op name a kernel ran for."""
    return kernel[KEY][0]


def transfer_kernels(contexts: list[int], by_context: dict[int, list[KernelEvent]]) -> list[tuple[int, KernelEvent]]:
    """``(context, kernel)`` of each ``_Send``/``_Recv`` the contexts ran (a few among thousands of kernels).

    A context that ran none (most: one device) is told apart without a Python turn per kernel.
    """
    out = []
    for context in contexts:
        kernels = by_context.get(context, ())
        if not TRANSFER_OPS.isdisjoint(map(_kind_of_key, map(_key_of, kernels))):
            out += [(context, k) for k in kernels if k[KEY][1] in TRANSFER_OPS]
    return out


def context_devices(
    contexts: list[int], by_context: dict[int, list[KernelEvent]], transfers: list[tuple[int, KernelEvent]]
) -> dict[int, str]:
    """The device of each executor context, from the transfers it sent or received."""
    devices: dict[int, str] = {}
    recv_owner = {kernel_name(k): c for c, k in transfers if k[STATS] is None}
    owner: dict[str, int] | None = None  # op name -> its context, made only when a receiver is not a _Recv
    for context, kernel in transfers:
        if kernel[STATS] is None:
            continue
        src, dst = send_devices(kernel)
        devices.setdefault(context, src)
        receiver = recv_owner.get(_recv_name(kernel_name(kernel)))
        if receiver is None:
            if owner is None:
                owner = {
                    kernel_name(k): c for c in contexts for k in by_context.get(c, ()) if k[KEY][1] not in TRANSFER_OPS
                }
            receiver = owner.get(str(kernel[STATS].get("to", "")))
        if receiver is not None and dst:
            devices.setdefault(receiver, dst)
    return devices


def _recv_name(send: str) -> str:
    """The ``_Recv`` TensorFlow's partitioner pairs with a ``_Send`` ("x/_1" -> "x/_2")."""
    prefix, _, number = send.rpartition("/_")
    return f"{prefix}/_{int(number) + 1}" if number.isdigit() else ""


def send_devices(kernel: KernelEvent) -> tuple[str, str]:
    """``(source, destination)`` device of a ``_Send``, from its rendezvous key."""
    parts = str((kernel[STATS] or {}).get("key", "")).split(";")
    return (parts[0], parts[2]) if len(parts) >= 3 else ("", "")


def make_transfer(
    send: KernelEvent,
    graph: FunctionGraph,
    recvs: dict[str, tuple[int, KernelEvent]],
    call: int,
    start: float,
    duration: float,
) -> Transfer:
    """One ``_Send`` as a :class:`Transfer`: tensor, dtype, shape and size from the graph, and its ``_Recv``."""
    src, dst = send_devices(send)
    stats = send[STATS] or {}
    source = str(stats.get("from", ""))
    consumer, prefix = graph.find(str(stats.get("to", "")))
    index = next((t.value_index for t in getattr(consumer, "inputs", ()) if prefix + t.op.name == source), 0)
    producer, _ = graph.find(source)
    outputs = producer.outputs if producer is not None else ()
    value = outputs[index] if index < len(outputs) else None
    tensor = f"{producer.name if producer is not None else source}:{index}"
    dtype = value.dtype.name if value is not None else ""
    shape = None
    if value is not None and value.shape.rank is not None:
        shape = tuple(-1 if d is None else d for d in value.shape.as_list())
    size = None
    if shape is not None and all(d >= 0 for d in shape) and dtype in DTYPE_BYTES:
        size = DTYPE_BYTES[dtype] * math.prod(shape)
    recv = _recv_name(kernel_name(send))
    return Transfer(
        report_device(src),
        report_device(dst),
        tensor,
        dtype,
        shape,
        size,
        kernel_name(send),
        recv if recv in recvs else "",
        call,
        start,
        duration,
    )
