"""Strategy overhead: Keras ``fit`` throughput with ``tfdevices.build_strategy("mirrored")``
against hand-written ``tf.distribute.MirroredStrategy`` on the same 4 logical CPU devices.

    .venv/bin/python benchmarks/bench_strategy.py [--rounds 5] [--steps 40]

One process, the cases alternating round by round (their order rotating), each round a fresh model
trained for ``--steps`` steps after one warm-up epoch (tracing excluded); medians
of examples/s. Cases:

* ``tfdevices``: ``build_strategy("mirrored")`` (its ``auto`` reduction);
* ``hand, TF default``: ``tf.distribute.MirroredStrategy(devices)`` (TensorFlow's own reduction choice);
* ``hand, same reduction``: ``MirroredStrategy(devices, cross_device_ops=<what tfdevices chose>)``.

The ratio tfdevices / hand-written is the issue's figure (floor 0.98).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
BATCH = 256


def throughput(tf, keras, strategy, x, y, steps: int) -> tuple[float, float]:
    """(examples per wall second, examples per CPU second of this process)."""
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True).repeat()
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
    model.fit(data, epochs=1, steps_per_epoch=5, verbose=0, shuffle=False)  # trace and warm up
    start, cpu = time.perf_counter(), time.process_time()
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
    return steps * BATCH / (time.perf_counter() - start), steps * BATCH / (time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    import tfdevices

    tfdevices.configure(tfdevices.select("none", tfdevices.Inventory()), virtual_devices=len(DEVICES))
    tf = tfdevices.core.tf_door.import_tf()
    import keras

    info = tfdevices.build_strategy("mirrored", DEVICES)
    same_ops = {
        "reduction_to_one_device": tf.distribute.ReductionToOneDevice,
        "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
        "nccl": tf.distribute.NcclAllReduce,
    }[info.cross_device_ops]
    full = [f"/{d}" for d in DEVICES]
    cases = {
        "tfdevices build_strategy('mirrored')": lambda: tfdevices.build_strategy("mirrored", DEVICES).strategy,
        "hand, TF default": lambda: tf.distribute.MirroredStrategy(full),
        "hand, same reduction": lambda: tf.distribute.MirroredStrategy(full, cross_device_ops=same_ops()),
    }
    rng = tf.random.Generator.from_seed(0)
    x = rng.normal([BATCH * 8, 64])
    y = tf.random.uniform([BATCH * 8], 0, 10, dtype=tf.int64, seed=1)
    results = {name: [] for name in cases}
    names = list(cases)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate: no case always runs first
            results[name].append(throughput(tf, keras, cases[name](), x, y, args.steps))
    print(
        f"{len(DEVICES)} logical CPUs, batch {BATCH}, {args.steps} steps x {args.rounds} rounds; "
        f"tfdevices chose cross_device_ops={info.cross_device_ops}"
    )
    print("| case | examples/s (wall, median) | min | max | examples per CPU-s (median) |")
    print("|---|---:|---:|---:|---:|")
    for name, values in results.items():
        wall, cpu = [v[0] for v in values], [v[1] for v in values]
        print(
            f"| {name} | {statistics.median(wall):,.0f} | {min(wall):,.0f} | {max(wall):,.0f} "
            f"| {statistics.median(cpu):,.0f} |"
        )
    ours = results["tfdevices build_strategy('mirrored')"]
    for name in ("hand, TF default", "hand, same reduction"):
        for i, what in ((0, "wall"), (1, "CPU")):
            ratio = statistics.median(v[i] for v in ours) / statistics.median(v[i] for v in results[name])
            print(
                f"ratio tfdevices / {name} ({what}): {ratio:.3f} (floor 0.98: {'met' if ratio >= 0.98 else 'NOT met'})"
            )


if __name__ == "__main__":
    main()
