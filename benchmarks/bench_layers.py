"""Layer placement benchmark: planning time, traffic per step, and plan quality.

    .venv/bin/python benchmarks/bench_layers.py

Prints, measured side by side in one run on 4 logical CPU devices:

1. the time to plan 1,000 layers over 8 devices (best of 20; the issue's floor is 50 ms);
2. on the three-layer example (layers 1 and 3 on CPU:0, layer 2 on CPU:1) and on a
   48-layer MLP over 4 devices: weight reads that cross devices, activation
   transfers, all transfers and bytes per forward step, for (a) the by-hand
   ``tf.device``-in-call placement and (b) tfdevices' plan, read with ``tfdevices.verify``;
3. the planned bottleneck against the greedy fill-the-first-device plan that
   accelerate-style memory balancing makes, under the same per-device caps.
"""

from __future__ import annotations

import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


def planning_time() -> None:
    from tfdevices import plan_layers

    rng = random.Random(0)
    costs = [rng.uniform(1, 100) for _ in range(1000)]
    devices = [f"GPU:{i}" for i in range(8)]
    sizes = [rng.randint(1, 1000) for _ in range(1000)]
    caps = {d: sum(sizes) // 6 for d in devices}
    for name, kwargs in [
        ("plain", {}),
        ("speeds + max_memory", {"speeds": [1, 2, 1, 1, 2, 1, 1, 1], "max_memory": caps, "layer_bytes": sizes}),
    ]:
        best = min(_timed(lambda kwargs=kwargs: plan_layers(costs, devices, **kwargs)) for _ in range(20))
        print(f"plan 1000 layers over 8 devices ({name}): {best * 1000:.1f} ms (best of 20)")


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def greedy_fill(costs, sizes, caps):
    """accelerate-style: fill each device in order up to its cap, then move on."""
    out, d, used = [], 0, 0
    for size in sizes:
        while used + size > caps[d]:
            d, used = d + 1, 0
        out.append(d)
        used += size
    return max(sum(c for c, x in zip(costs, out) if x == k) for k in set(out))


def traffic(tf, keras) -> None:
    import numpy as np

    from tfdevices import place_layers, plan_layers
    from tfdevices.demos.layers import by_hand, forward_traffic, make_mlp

    keras.utils.set_random_seed(0)
    three = keras.Sequential([keras.Input((256,))] + [keras.layers.Dense(256, name=f"layer{i}") for i in (1, 2, 3)])
    cases = [
        (
            "three layers: 1, 3 on CPU:0, 2 on CPU:1",
            three,
            {"layer1": "CPU:0", "layer2": "CPU:1", "layer3": "CPU:0"},
            256,
        ),
        ("48-layer MLP over 4 devices", make_mlp(keras, 48, 64), DEVICES, 64),
    ]
    for title, model, devices, width in cases:
        x = tf.constant(np.random.default_rng(0).random((32, width), dtype=np.float32))
        plan = plan_layers(model, devices)
        names = list(plan.layers)
        hand = forward_traffic(tf, by_hand(keras, tf, model, plan.assignment), x, names)
        placed = forward_traffic(tf, place_layers(model, plan), x, names)
        print(f"\n{title} (batch 32, plan: {len(plan.stages)} stages, {plan.transfers} activation transfers)")
        print(
            f"  {'':<10} {'weight reads across':>20} {'weight bytes':>13} {'activations':>12} "
            f"{'act. bytes':>11} {'all transfers':>14} {'all bytes':>10}"
        )
        for name, t in (("(a) by hand", hand), ("(b) planned", placed)):
            print(
                f"  {name:<10} {t['weights_across']:>20} {t['weight_bytes_across']:>13} {t['activations']:>12} "
                f"{t['activation_bytes']:>11} {t['transfers']:>14} {t['bytes']:>10}"
            )
        if placed["bytes"]:
            print(f"  bytes moved per step, by hand / planned: {hand['bytes'] / placed['bytes']:.1f}x")
        if title.startswith("48"):
            quality(model, plan)


def quality(model, plan) -> None:
    from tfdevices import plan_layers

    costs = [float(c) for c in plan_layers(model, DEVICES[:1]).costs]
    sizes = list(plan.memory)
    for share in (0.5, 0.35, 0.3):
        cap = int(sum(sizes) * share)
        caps = [cap] * 4
        greedy = greedy_fill(costs, sizes, caps)
        planned = plan_layers(model, DEVICES, max_memory=dict.fromkeys(DEVICES, cap)).bottleneck
        print(
            f"  caps {share:.0%} of the weights per device: bottleneck (params) greedy fill {greedy:,.0f}, "
            f"planned {planned:,.0f}: greedy / planned = {greedy / planned:.2f}x"
        )


def main() -> None:
    planning_time()
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 4)
    import keras

    traffic(tf, keras)


if __name__ == "__main__":
    main()
