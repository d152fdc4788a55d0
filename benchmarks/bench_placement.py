"""Placement capture of a step that already ran, against TensorFlow's profiler alone.

Steps (each a ``tf.function`` traced and run before anything is measured), at 100 and
1,000 layers: ``forward``, a Keras 3 MLP of Dense(64) layers called on a batch of 16;
``train``, an MLP of Dense(8, relu) layers with GradientTape and SGD, batch 16.
Measured in one process, interleaved: each round times every case once, and each
figure is the median over ``--repeats`` rounds:

* ``plain``: one call of the step;
* ``profiler``: TensorFlow's profiler alone: start, the call, stop (the XSpace written);
  its directory is removed outside the timing;
* ``profiler mem``: the same, its directory in ``/dev/shm``, where capture writes its
  profiles (the profiler alone as a user runs it writes to a disk);
* ``capture``: :func:`tfdevices.verify.capture` of one call, to a report the user can
  read (built: its ops, devices and transfers);
* the phases of capture's own work, measured apart: ``profiled`` (start, the call
  under tfdevices' op recorder, stop, the file read and moved aside) minus the
  profiler alone, ``read`` (the XSpace's bytes into calls and kernels, as capture reads
  them: protobuf's parse and the walk over its messages), ``build`` (the report), and
  ``write`` (:func:`tfdevices.tensorboard.write_placement`, which a logger runs on its worker);
* ``least``: the least any reader in Python pays for the same bytes, whatever its logic: protobuf's
  parse, each event metadata's name read once, each event's id, start and duration read once
  (:func:`least_python_read`); ``records``: one record made per op the report holds (:func:`least_records`).

``cap/prof`` is capture over the profiler alone (the issue's bound: at most 1.5x on a 100-layer
step). ``own`` is capture minus the profiler alone, a difference of two medians that moves by
milliseconds from run to run; the steadier measure sums the phases measured apart:
``phases`` = ``profiled`` minus the profiler (when positive) + ``read`` + ``build``.
``phases / profiler`` is held to the issue's floor (at most 25%, aim 10%).
Run: ``.venv/bin/python benchmarks/bench_placement.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.setrecursionlimit(20000)  # Keras builds a 1,000-layer Sequential recursively

MEMORY = "/dev/shm" if os.path.isdir("/dev/shm") else None  # where capture writes its profiles
OWN_FLOOR = 0.25  # capture's own work / the profiler alone
OWN_AIM = 0.10


def _forward(keras, tf, layers: int):
    model = keras.Sequential([keras.Input((64,)), *[keras.layers.Dense(64) for _ in range(layers)]])
    x = tf.ones([16, 64])
    step = tf.function(lambda: model(x))
    return step


def _train(keras, tf, layers: int):
    model = keras.Sequential(
        [keras.Input((8,)), *[keras.layers.Dense(8, activation="relu") for _ in range(layers)], keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.SGD(0.01)
    x, y = tf.ones([16, 8]), tf.zeros([16, 1])

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


def _read(report) -> tuple:
    """What a user reads of a report: its ops, devices and transfers (the report is built when capture returns)."""
    return len(report.ops), report.devices, report.transfers


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _clocked(fn) -> dict[str, float]:
    """Wall time and the process' CPU time (every thread's) of ``fn()``: the CPU time stands where other
    work on the machine stretches the wall time."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return {"": time.perf_counter() - wall, "_cpu": time.process_time() - cpu}


def least_python_read(data: bytes) -> None:
    """What no reader in Python can skip: protobuf's parse, each event metadata's name and each event's fields
    (its id, start and duration) read once.
    """
    from tfdevices.verify.host import parse_space

    space = parse_space(data)
    for plane in space.planes:
        metadata = plane.event_metadata
        for key in metadata:
            metadata[key].name  # noqa: B018 (touched, as a reader must)
        for line in plane.lines:
            for event in line.events:
                event.metadata_id, event.offset_ps, event.duration_ps  # noqa: B018


def least_records(ops: int) -> None:
    """One record per op the report holds, made as the builder makes them (what reading ``report.ops`` costs)."""
    from tfdevices.verify.records import make_op

    for _ in range(ops):
        make_op("op", "Type", "CPU:0", "", 0, "Kernel", "op", 1.0, 2.0)


def cases(keras, tf, sizes: list[int], kinds: list[str]) -> dict[tuple[str, int], dict]:
    """Every (step kind, layers): its step, traced and run once, and the timers of its phases."""
    from tfdevices import verify
    from tfdevices.tensorboard import write_placement
    from tfdevices.verify import profiling, recording
    from tfdevices.verify.building import build_report
    from tfdevices.verify.host import read_trace

    out = {}
    for kind in kinds:
        for layers in sizes:
            step = (_forward if kind == "forward" else _train)(keras, tf, layers)
            call = lambda step=step: step().numpy()
            call()

            def profiler(call=call, where=None) -> dict[str, float]:
                logdir = tempfile.mkdtemp(dir=where)

                def profiled() -> None:
                    tf.profiler.experimental.start(logdir)
                    call()
                    tf.profiler.experimental.stop()

                took = _clocked(profiled)
                shutil.rmtree(logdir, ignore_errors=True)
                return took

            def phases(call=call) -> dict[str, float]:
                recorder, spaces = recording.Recorder(), []
                start = time.perf_counter()
                with profiling._profiling(tf, spaces), recording.record_calls(recorder):
                    call()
                took = {"profiled": time.perf_counter() - start}
                data, trace = spaces[0], []
                cpu = time.thread_time()
                took["read"] = _timed(lambda: trace.append(read_trace(data)))
                took["read_cpu"], cpu = time.thread_time() - cpu, time.thread_time()
                report = []
                took["build"] = _timed(lambda: report.append(build_report(trace[0], recorder)))
                took["build_cpu"] = time.thread_time() - cpu
                with tempfile.TemporaryDirectory() as logdir:
                    took["write"] = _timed(lambda: write_placement(report[0], logdir))
                took["ops"], took["kernels"] = len(report[0].ops), sum(report[0].kernel_counts.values())
                took["least"] = _timed(lambda: least_python_read(data))
                took["records"] = _timed(lambda: least_records(len(report[0].ops)))
                return took

            out[(kind, layers)] = {
                "plain": lambda call=call: _timed(call),
                "profiler": profiler,
                "profiler_mem": lambda profiler=profiler: profiler(where=MEMORY)[""],
                "capture": lambda call=call: _clocked(lambda: _read(verify.capture(call, warmup=0))),
                "phases": phases,
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="layer counts, comma-separated")
    parser.add_argument("--steps", default="forward,train", help="step kinds, comma-separated: forward, train")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds; medians are shown")
    args = parser.parse_args(argv)
    import keras

    from tfdevices.core.tf_door import import_tf

    tf = import_tf()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = [k for k in args.steps.split(",") if k]
    timers = cases(keras, tf, sizes, kinds)
    times: dict[tuple[str, int], dict[str, list[float]]] = {key: {} for key in timers}
    for t in timers.values():  # one warm round, not kept
        t["profiler"](), t["capture"](), t["phases"]()
    for _ in range(args.repeats):
        for key, t in timers.items():
            for name in ("plain", "profiler", "profiler_mem", "capture"):
                took = t[name]()
                for suffix, value in took.items() if isinstance(took, dict) else [("", took)]:
                    times[key].setdefault(name + suffix, []).append(value)
            for name, value in t["phases"]().items():
                times[key].setdefault(name, []).append(value)
    med = {key: {name: statistics.median(v) for name, v in d.items()} for key, d in times.items()}
    print(
        f"{'step':>8} {'layers':>6} {'ops':>6} {'plain ms':>9} {'profiler':>9} {'capture':>9} {'cap/prof':>8} "
        f"{'own ms':>8} {'own/prof':>8} | {'prof mem':>9} | {'profiled+':>9} {'read':>7} {'build':>7} {'phases':>7} "
        f"{'ph/prof':>7} | {'write':>7}"
    )
    worst = 0.0
    for (kind, layers), m in med.items():
        own = m["capture"] - m["profiler"]
        phases = max(m["profiled"] - m["profiler"], 0.0) + m["read"] + m["build"]
        worst = max(worst, phases / m["profiler"])
        print(
            f"{kind:>8} {layers:>6} {m['ops']:>6.0f} {1e3 * m['plain']:>9.2f} {1e3 * m['profiler']:>9.2f} "
            f"{1e3 * m['capture']:>9.2f} {m['capture'] / m['profiler']:>7.2f}x {1e3 * own:>8.2f} "
            f"{own / m['profiler']:>7.0%} | "
            f"{1e3 * m['profiler_mem']:>9.2f} | "
            f"{1e3 * (m['profiled'] - m['profiler']):>9.2f} {1e3 * m['read']:>7.2f} "
            f"{1e3 * m['build']:>7.2f} {1e3 * phases:>7.2f} {phases / m['profiler']:>6.0%} | "
            f"{1e3 * m['write']:>7.2f}"
        )
    print(
        f"times in ms, medians of {args.repeats} interleaved rounds; profiled+ = the profiled "
        "call under tfdevices' recorder, file read and moved aside, minus the profiler alone; prof mem = the "
        "profiler alone writing to /dev/shm, where capture writes; phases = profiled+ (when positive) + read + build"
    )
    print(
        f"capture's own work (phases) / the profiler alone, worst case: {worst:.0%} (floor <= {OWN_FLOOR:.0%}, "
        f"aim {OWN_AIM:.0%}): {'met' if worst <= OWN_FLOOR else 'NOT met'}"
    )
    for (kind, layers), m in med.items():
        print(
            f"{kind} {layers}: the process' CPU time, profiler alone {1e3 * m['profiler_cpu']:.2f} ms, capture "
            f"{1e3 * m['capture_cpu']:.2f} ms: {m['capture_cpu'] / m['profiler_cpu']:.2f}x; the thread's CPU time "
            f"to read {1e3 * m['read_cpu']:.2f} ms, to build {1e3 * m['build_cpu']:.2f} ms (medians)"
        )
    for (kind, layers), m in med.items():
        block, least, records = (max(m["profiled"] - m["profiler"], 0.0), m["least"], m["records"])
        print(
            f"{kind} {layers}: the least a reader in Python pays: the parse and each event touched once "
            f"{1e3 * least:.2f} ms ({least / m['profiler']:.0%} of the profiler alone), a record per op "
            f"{1e3 * records:.2f} ms ({records / m['profiler']:.0%}); with profiled+ ({block / m['profiler']:.0%}): "
            f"a capture of at least {1 + (block + least) / m['profiler']:.2f}x, "
            f"{1 + (block + least + records) / m['profiler']:.2f}x with the records"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
