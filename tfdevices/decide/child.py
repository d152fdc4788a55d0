"""One tune candidate in one process: ``python -m tfdevices.decide.child SPEC REPLY_FD``.

SPEC is a JSON file holding a :class:`~tfdevices.decide.messages.ChildSpec` (what
:mod:`tfdevices.decide.runner` writes). The process configures TensorFlow once (the CPU split
into logical devices, or the GPUs), builds the candidate, warms up, times windows of ``steps``
steps until the step time settles (a window not faster than the best so far by more than 5%)
and answers :class:`~tfdevices.decide.messages.Ready` on the file descriptor REPLY_FD. Then it
waits, idle, for the parent's commands on its standard input, one JSON line each: a timed
window, a captured step (the one-device run that predictions start from also probes the copies
between each pair of the devices the command names: :mod:`tfdevices.decide.probe`), or stop.
The parent times the candidates' windows in turn (A B C A B C ...). Every failure is answered
as :class:`~tfdevices.decide.messages.Failed`, with a line a user can act on.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from tfdevices.core.errors import TfDevicesError
from tfdevices.core.tf_door import import_tf
from tfdevices.decide.advise import time_shares
from tfdevices.decide.candidates import Profile
from tfdevices.decide.messages import (
    Capture,
    Captured,
    ChildSpec,
    Failed,
    Ready,
    Reply,
    Stop,
    TimeWindow,
    Window,
    decode,
    encode,
)
from tfdevices.decide.probe import probe_links
from tfdevices.gpus.inventory import Inventory
from tfdevices.gpus.selection import select
from tfdevices.layers.place import place_layers
from tfdevices.layers.plan import plan_layers
from tfdevices.runtime import configure
from tfdevices.strategy import build_strategy
from tfdevices.tensorboard.callbacks import PlacementLogger


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _configure(spec: ChildSpec) -> None:
    if spec.gpus:  # the candidates' processes live side by side: each takes GPU memory as it needs it
        growth = True if spec.memory_limit is None else None
        configure(select("all"), memory_limit=spec.memory_limit, memory_growth=growth)
    else:
        configure(select("none", Inventory()), virtual_devices=spec.virtual_devices)


def _build(spec: ChildSpec) -> tuple[Any, Any]:
    fn = _load(spec.target)
    devices = list(spec.devices)
    if spec.strategy == "split":
        model, data = fn()
        sample = next(iter(data))[0]
        # a layer on each device: under a busy minute the measured times can make one device's plan the best,
        # and split:k would then be timed as one device under another name
        plan = plan_layers(model, devices, balance_by="time", sample=sample, every_device=True)
        return place_layers(model, plan), data
    kind = "one_device" if spec.strategy == "one_device" else "mirrored"
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
    def round_trip(x: Any) -> Any:
        with tf.device(pair[1].name):
            y = tf.identity(x)
        with tf.device(pair[0].name):
            return tf.identity(y)

    round_trip(x)
    runs = []
    for _ in range(20):
        start = time.perf_counter()
        round_trip(x).numpy()
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


def _as_window(times: list[float]) -> Window:
    ordered = sorted(times)
    return Window(statistics.median(ordered), ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4])


class Candidate:
    """One candidate, built and warmed up in this process: it times windows and captures steps on command."""

    def __init__(self, spec: ChildSpec, started: float) -> None:
        sys.path[:0] = [p for p in spec.sys_path if p not in sys.path]
        _configure(spec)
        self.tf = import_tf()
        self.spec = spec
        model, data = _build(spec)
        self.model, self.data = model, data.repeat()
        if spec.warmup:
            model.fit(self.data, epochs=1, steps_per_epoch=spec.warmup, verbose=0)
        times, windows = _steady_window(lambda: _timed_window(self.model, self.data, spec.steps))
        self.ready = Ready(_batch(self.data), time.perf_counter() - started, windows, statistics.median(times))

    def capture(self, command: Capture) -> Captured:
        """One captured step: its shares and peak memory; the profile and the copy probe where asked."""
        logdir = command.logdir or tempfile.mkdtemp(prefix="tfdevices-tune-")
        logger = PlacementLogger(logdir, at_step=1, memory=False)
        self.model.fit(self.data, epochs=1, steps_per_epoch=2, verbose=0, callbacks=[logger])
        if logger.report is None:
            raise RuntimeError("the placement logger captured no step of the 2 it was given")
        report = json.loads(logger.report.to_json())
        found: dict[str, Any] = {
            "peak_memory": _peak_memory(self.tf, list(self.spec.devices)),
            "shares": time_shares(report),
            "logdir": command.logdir,
        }
        probe = _probe(self.tf, list(command.probe)) if len(command.probe) > 1 else {}
        links = probe.pop("links", ())
        found.update(probe)
        if command.profile:
            busy = report.get("busy_us", {}).get(self.spec.devices[0])
            extras = _profile_extras(self.tf, self.model, self.data, list(self.spec.devices))
            found["profile"] = Profile(compute_s=None if busy is None else busy / 1e6, links=links, **extras)
        return Captured(**found)


def _probe(tf: Any, devices: list[str]) -> dict[str, Any]:
    """The copy probe over ``devices`` (after the timing: it delays no measurement); its failure is reported."""
    started = time.perf_counter()
    try:
        links = tuple(probe_links(tf, devices))
    except Exception as err:  # noqa: BLE001 -- the candidate's timing stands; the predictions go uncalibrated
        return {"links": (), "probe_s": time.perf_counter() - started, "probe_detail": _failure(err).detail}
    return {"links": links, "probe_s": time.perf_counter() - started}


#: Known failures, by a phrase of TensorFlow's message: what to do about each.
_HINTS = (
    (
        "must have the same size and shape",
        (
            "the replicas got batches of different sizes and this Keras cannot add them; use a global batch the "
            "replica count divides, or leave the uneven_batch mend on (tfdevices doctor)"
        ),
    ),
    ("OOM when allocating", "use a smaller batch or more devices, or cap other processes' memory"),
    (
        "layers cannot give each of",
        "the model has fewer layers than this split has devices: a split over fewer devices, or another strategy",
    ),
)


def _failure(err: BaseException) -> Failed:
    """The failure as a line: the error's first line, and what to do where it is a known one."""
    tf = sys.modules.get("tensorflow")
    oom = tf is not None and isinstance(err, tf.errors.ResourceExhaustedError)
    oom = oom or isinstance(err, MemoryError)
    own = err if isinstance(err, TfDevicesError) else None  # its message and hint apart: a known hint replaces it
    text = (own.message if own else str(err)).strip()
    first = next((line for line in text.splitlines() if line.strip()), "")
    first = first.split("}} ", 1)[-1][:300]  # TensorFlow's "{{function_node ...}} " prefix says nothing to a user
    hint = next((f" HINT: {fix}" for phrase, fix in _HINTS if phrase in text), "")
    if not hint and own and own.hint:
        hint = f" HINT: {own.hint}"
    return Failed("out_of_memory" if oom else "failed", f"{type(err).__name__}: {first}{hint}")


def _next(commands: Iterator[str]) -> Any:
    """The parent's next command (``Stop()`` at the end of its pipe)."""
    line = next(commands, None)
    return Stop() if line is None else decode(line)


class _Windows:
    """Timed windows inside one long ``fit``: after each window's last step the callback answers and
    waits, idle, for the next command. A window costs its steps alone, not a call of ``fit`` (measured:
    a ``fit`` call of 20 steps of 16 ms took 2.2 s). Any other command ends the ``fit``; it is kept in
    :attr:`left` for :func:`serve`.
    """

    def __init__(self, steps: int, commands: Iterator[str], reply: Callable[[Reply], None]) -> None:
        self.steps, self.commands, self.reply = steps, commands, reply
        self.times: list[float] = []
        self.left: Any = None
        self._start = 0.0

    def callback(self, model: Any) -> Any:
        import keras  # noqa: PLC0415 (lazy Keras)

        windows = self

        class Windows(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                windows._start = time.perf_counter()

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                windows.times.append(time.perf_counter() - windows._start)
                if len(windows.times) >= windows.steps and windows.left is None:
                    windows.reply(_as_window(windows.times))
                    windows.times = []
                    command = _next(windows.commands)
                    if isinstance(command, TimeWindow):
                        windows.steps = command.steps
                    else:
                        windows.left, model.stop_training = command, True

        return Windows()


#: Steps of the ``fit`` that times windows: it ends on the parent's command, never by running out.
_ENDLESS = 1 << 40


def serve(spec: ChildSpec, commands: Iterator[str], reply: Callable[[Reply], None], started: float) -> None:
    """Builds the candidate, answers Ready, then each command until Stop or the end of ``commands``."""
    try:
        candidate = Candidate(spec, started)
    except Exception as err:  # noqa: BLE001 -- every failure is reported to the parent, as a message
        reply(_failure(err))
        return
    reply(candidate.ready)
    command = _next(commands)
    while not isinstance(command, Stop):
        try:
            if isinstance(command, TimeWindow):
                windows = _Windows(command.steps, commands, reply)
                candidate.model.fit(
                    candidate.data,
                    epochs=1,
                    steps_per_epoch=_ENDLESS,
                    verbose=0,
                    callbacks=[windows.callback(candidate.model)],
                )
                command = windows.left or Stop()
                continue
            if isinstance(command, Capture):
                reply(candidate.capture(command))
            else:
                reply(Failed("failed", f"the child got a message it does not take: {type(command).__name__}"))
        except Exception as err:  # noqa: BLE001 -- the parent decides what a failed window means
            reply(_failure(err))
            return
        command = _next(commands)


def main(argv: list[str]) -> int:
    """Runs the candidate that ``argv`` names (spec file, reply file descriptor); returns the exit status."""
    started = time.perf_counter()
    spec_path, fd = argv
    with open(spec_path) as f:
        spec = decode(f.read())
    if not isinstance(spec, ChildSpec):
        raise SystemExit(f"{spec_path}: not a ChildSpec")
    with os.fdopen(int(fd), "w", buffering=1) as out:

        def reply(message: Reply) -> None:
            out.write(encode(message) + "\n")
            out.flush()

        serve(spec, iter(sys.stdin), reply, started)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
