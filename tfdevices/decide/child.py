"""One tune candidate in one fresh process: ``python -m tfdevices.decide.child SPEC RESULT``.

SPEC is a JSON file (what :mod:`tfdevices.decide.runner` writes); the result is one JSON
object written to RESULT, never read from the environment. The process configures
TensorFlow once (the CPU split into logical devices, or the GPUs), builds the candidate,
warms up, times windows of ``steps`` steps one by one until the step time settles (a window
not faster than the one before by more than 5%), captures one more step, and writes what it saw.
The one-device candidate that predictions start from also probes the copies between each pair
of the devices its spec names in ``probe`` (:mod:`tfdevices.decide.probe`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from tfdevices.core._tf import import_tf
from tfdevices.decide.advise import time_shares
from tfdevices.decide.probe import probe_links
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.selection import select
from tfdevices.layers.place import place_layers
from tfdevices.layers.plan import plan_layers
from tfdevices.runtime import configure
from tfdevices.strategy import build_strategy
from tfdevices.tensorboard.callbacks import PlacementLogger

__all__ = ["main"]


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _configure(spec: dict[str, Any]) -> None:
    if spec["gpus"]:
        configure(select("all"), memory_limit=spec.get("memory_limit"))
    else:
        configure(select("none", Inventory()), virtual_devices=spec["virtual_devices"])


def _build(spec: dict[str, Any]) -> tuple[Any, Any]:
    fn = _load(spec["target"])
    strategy, devices = spec["strategy"], spec["devices"]
    if strategy == "split":
        model, data = fn()
        sample = next(iter(data))[0]
        plan = plan_layers(model, devices, balance_by="time", sample=sample)
        return place_layers(model, plan), data
    kind = "one_device" if strategy == "one_device" else "mirrored"
    with build_strategy(kind, devices).scope():
        return fn()


class _Clock:
    """Times each training step (``on_train_batch_begin`` to ``on_train_batch_end``)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def callback(self) -> Any:
        import keras  # noqa: PLC0415 (lazy Keras)

        clock = self

        class Clock(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                clock._start = time.perf_counter()

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                clock.times.append(time.perf_counter() - clock._start)

        return Clock()


def _batch(data: Any) -> int:
    return int(next(iter(data))[0].shape[0])


def _peak_memory(tf: Any, devices: list[str]) -> dict[str, int]:
    peaks = {}
    for device in devices:
        if device.startswith("CPU"):  # logical CPUs share the host's memory (and report no peak of their own)
            peaks["host"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            continue
        try:
            peaks[device] = int(tf.config.experimental.get_memory_info(device)["peak"])
        except (ValueError, RuntimeError):
            peaks.setdefault("host", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return peaks


def _profile_extras(tf: Any, model: Any, data: Any, devices: list[str]) -> dict[str, Any]:
    """What predictions need besides the step: weight and activation sizes, copy latency and bandwidth."""
    batch = _batch(data)
    sizes = [batch * int(abs(_numel(layer.output.shape))) * 4 for layer in model.layers if hasattr(layer, "output")]
    out: dict[str, float] = {
        "grad_bytes": int(sum(int(w.numpy().nbytes) for w in model.trainable_weights)),
        "variables": len(model.trainable_weights),
        "activation_bytes": int(statistics.median(sizes)) if sizes else 0,
    }
    pair = [d for d in (tf.config.list_logical_devices()) if d.device_type == devices[0].split(":")[0]][:2]
    if len(pair) == 2:
        small, big = _copy_time(tf, pair, 256), _copy_time(tf, pair, 1 << 20)
        out["copy_latency_s"] = small
        out["copy_bytes_per_s"] = (4 * ((1 << 20) - 256)) / max(big - small, 1e-9)
    return out


def _numel(shape: Any) -> int:
    n = 1
    for d in shape[1:]:
        n *= int(d or 1)
    return n


def _copy_time(tf: Any, pair: list[Any], floats: int) -> float:
    with tf.device(pair[0].name):
        x = tf.ones([floats])

    @tf.function
    def hop(x: Any) -> Any:
        with tf.device(pair[1].name):
            y = tf.identity(x)
        with tf.device(pair[0].name):
            return tf.identity(y)

    hop(x)
    runs = []
    for _ in range(20):
        start = time.perf_counter()
        hop(x).numpy()
        runs.append(time.perf_counter() - start)
    return min(runs) / 2


#: Timed windows a candidate may run before its step time settles.
_MAX_WINDOWS = 8
#: A window improves on the best so far when its median is faster by more than this share.
_SETTLED = 0.05


def _steady_window(window: Callable[[], list[float]]) -> tuple[list[float], int]:
    """Runs ``window`` (one timed window: its step times) until one does not beat the fastest so far by more than 5%.

    Some ways of running a model keep speeding up for tens of steps after the first (seen here:
    a small conv net mirrored over 2 logical CPUs, about 9 ms a step for its first 20 steps and
    6.6 ms after 30), and a burst of load from other processes slows one window: a single window
    after a fixed warm-up can time either. Returns the fastest window's step times (by median)
    and how many windows ran (2 to :data:`_MAX_WINDOWS`).
    """
    best, windows = window(), 1
    while windows < _MAX_WINDOWS:
        times, windows = window(), windows + 1
        settled = statistics.median(times) >= statistics.median(best) * (1 - _SETTLED)
        if statistics.median(times) < statistics.median(best):
            best = times
        if settled:
            break
    return best, windows


def _timed_window(model: Any, data: Any, steps: int) -> list[float]:
    clock = _Clock()
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[clock.callback()])
    return clock.times


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs the candidate ``spec`` describes; returns the result object."""
    started = time.perf_counter()
    sys.path[:0] = [p for p in spec.get("sys_path", ()) if p not in sys.path]
    _configure(spec)
    tf = import_tf()
    model, data = _build(spec)
    data = data.repeat()
    if spec["warmup"]:
        model.fit(data, epochs=1, steps_per_epoch=spec["warmup"], verbose=0)
    started_windows = time.perf_counter()
    times, windows = _steady_window(lambda: _timed_window(model, data, spec["steps"]))
    window = (time.perf_counter() - started_windows) / windows
    times = sorted(times)
    result = {
        "status": "ok",
        "step_s": statistics.median(times),
        "step_q1_s": times[len(times) // 4],
        "step_q3_s": times[(3 * len(times)) // 4],
        "batch": _batch(data),
        "windows": windows,
    }
    if not spec.get("capture", True):  # a later round: the timed window only
        return result
    logdir = spec.get("logdir") or tempfile.mkdtemp(prefix="tfdevices-tune-")
    logger = PlacementLogger(logdir, at_step=1, memory=False)
    model.fit(data, epochs=1, steps_per_epoch=2, verbose=0, callbacks=[logger])
    if logger.report is None:
        raise RuntimeError("the placement logger captured no step of the 2 it was given")
    report = json.loads(logger.report.to_json())
    result.update(
        {
            "peak_memory": _peak_memory(tf, spec["devices"]),
            "shares": time_shares(report),
            "startup_s": time.perf_counter() - started - window,
            "logdir": spec.get("logdir"),
        }
    )
    if spec.get("profile"):
        busy = report.get("busy_us", {}).get(spec["devices"][0])
        result["compute_s"] = None if busy is None else busy / 1e6
        result.update(_profile_extras(tf, model, data, spec["devices"]))
    if len(spec.get("probe") or ()) > 1:
        result.update(_probe(tf, spec["probe"]))
    return result


def _probe(tf: Any, devices: list[str]) -> dict[str, Any]:
    """The copy probe over ``devices`` (after the timing: it delays no measurement); its failure is reported."""
    started = time.perf_counter()
    try:
        links = [dataclasses.asdict(link) for link in probe_links(tf, devices)]
    except Exception as err:  # noqa: BLE001 -- the candidate's timing stands; the predictions go uncalibrated
        return {"links": [], "probe_s": time.perf_counter() - started, "probe_detail": _failure(err)["detail"]}
    return {"links": links, "probe_s": time.perf_counter() - started}


def _failure(err: BaseException) -> dict[str, Any]:
    tf = sys.modules.get("tensorflow")
    oom = tf is not None and isinstance(err, tf.errors.ResourceExhaustedError)
    oom = oom or isinstance(err, MemoryError)
    first = (str(err).strip().splitlines() or [""])[0][:300]
    return {"status": "out_of_memory" if oom else "failed", "detail": f"{type(err).__name__}: {first}"}


def main(argv: list[str]) -> int:
    """Runs the candidate that ``argv`` names (spec file, result file); returns the exit status."""
    spec_path, result_path = argv
    with open(spec_path) as f:
        spec = json.load(f)
    try:
        result = run(spec)
    except Exception as err:  # noqa: BLE001 -- every failure is reported to the parent, as a result
        result = _failure(err)
    with open(result_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(result_path + ".tmp", result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
