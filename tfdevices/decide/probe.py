"""The copy probe: what one copy between each pair of devices costs here (latency and bytes/s).

It runs once per tune, in the one-device candidate's fresh process after its timing (so it
delays no measurement and costs no extra start-up). For each pair of devices, one traced
function hands a tensor back and forth ``h`` times (``tf.identity`` on alternating devices);
it is timed for :data:`HOPS` (two hop counts) and :data:`SIZES` (three sizes), the fastest of
:data:`REPEATS` calls each. The difference between the hop counts cancels the call's own cost,
so each size gives the time of one hop; a least-squares line through the sizes gives the
latency (its intercept) and the bandwidth (one over its slope): :func:`fit_link`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

from tfdevices.core.errors import InputError
from tfdevices.decide.candidates import Link

#: Tensor sizes probed, in float32 elements (1 KiB, 256 KiB, 4 MiB).
SIZES = (256, 1 << 16, 1 << 20)
#: Hop counts: their difference cancels the cost of calling the function.
HOPS = (2, 10)
#: Calls per size and hop count; the fastest is kept.
REPEATS = 10


def fit_link(a: str, b: str, sizes_bytes: Sequence[float], hop_s: Sequence[float]) -> Link:
    """The least-squares line ``hop_s = latency + bytes / bandwidth`` through the probed sizes.

    A negative intercept is no latency (``0.0``); a slope that is not positive is no measurable
    cost per byte (``bytes_per_s=None``): logical CPUs hand buffers over without copying.

    Raises:
        InputError: fewer than two sizes, or as many times as sizes they are not.

    >>> link = fit_link("GPU:0", "GPU:1", [1e3, 1e6, 4e6], [10.05e-6, 60e-6, 210e-6])
    >>> round(link.latency_s * 1e6, 3), round(link.bytes_per_s / 1e9, 3)  # us, GB/s
    (10.0, 20.0)
    >>> fit_link("CPU:0", "CPU:1", [1e3, 1e6, 4e6], [2e-6, 1e-6, 1.5e-6]).bytes_per_s is None
    True
    """
    if len(sizes_bytes) != len(hop_s) or len(sizes_bytes) < 2:
        raise InputError(
            f"fit_link got {len(sizes_bytes)} sizes and {len(hop_s)} times: expected as many, at least two.",
            hint="time each probed size once.",
        )
    n = len(sizes_bytes)
    mean_x, mean_y = sum(sizes_bytes) / n, sum(hop_s) / n
    var = sum((x - mean_x) ** 2 for x in sizes_bytes)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes_bytes, hop_s)) / var if var else 0.0
    latency = max(mean_y - slope * mean_x, 0.0)
    return Link(a, b, latency, 1.0 / slope if slope > 0 else None)


def _hop_function(tf: Any, a: str, b: str, hops: int) -> Any:
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def back_and_forth(x: Any) -> Any:
        for i in range(hops):
            with tf.device(b if i % 2 == 0 else a):
                x = tf.identity(x)
        with tf.device(a):
            return tf.reduce_sum(x[:1])

    return back_and_forth


def _fastest(fn: Any, x: Any) -> float:
    fn(x).numpy()
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn(x).numpy()
        best = min(best, time.perf_counter() - start)
    return best


def probe_links(tf: Any, devices: Sequence[str]) -> tuple[Link, ...]:
    """Probes every pair of ``devices`` (TensorFlow names); one :class:`Link` per pair, in pair order."""
    tensors = []
    for n in SIZES:
        with tf.device(devices[0]):
            tensors.append(tf.ones([n]))
    links = []
    for a, b in itertools.combinations(devices, 2):
        short, long = (_hop_function(tf, a, b, h) for h in HOPS)
        per_hop = [max(_fastest(long, x) - _fastest(short, x), 0.0) / (HOPS[1] - HOPS[0]) for x in tensors]
        links.append(fit_link(a, b, [4.0 * n for n in SIZES], per_hop))
    return tuple(links)
