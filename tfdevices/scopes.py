"""Device scopes and tasks: different devices for different work in one script.

* :func:`device_scope` is ``tf.device`` that speaks tfdevices names (an NVML
  index for a physical GPU, ``"CPU:1"`` for a logical device) and checks them
  against what TensorFlow has, so a typo fails here instead of silently running
  on another device (``tf.device`` with soft placement falls back).
* :func:`plan_assignment` maps independent tasks to devices (pure);
  :func:`assign` carries the plan out, one thread per task so that ops on
  different devices overlap, and returns each task's device and result.

>>> plan = plan_assignment(["a", "b", "c"], ["CPU:0", "CPU:1"])
>>> [(p.task, p.device) for p in plan]
[('a', 'CPU:0'), ('b', 'CPU:1'), ('c', 'CPU:0')]
>>> [p.device for p in plan_assignment(["a", "b", "c"], ["0", "1"], policy="by_memory",
...                                    free_memory={"0": 8 << 30, "1": 24 << 30})]
['1', '1', '0']
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tfdevices import runtime
from tfdevices.core.devices import default_devices, logical_devices, resolve_devices, tfdevices_name
from tfdevices.core.errors import InputError
from tfdevices.core.tf_door import import_tf
from tfdevices.core.units import format_bytes
from tfdevices.gpus.discovery import discover

__all__ = ["device_scope", "assign", "TaskResult", "plan_assignment", "TaskPlacement"]

POLICIES = ("round_robin", "by_memory")


@dataclasses.dataclass(frozen=True)
class TaskPlacement:
    """Where one task goes, and why.

    Attributes:
        task: the task's name.
        device: its device, tfdevices name (NVML index for a GPU, ``"CPU:1"``).
        reason: why this device.
    """

    task: str
    device: str
    reason: str


def plan_assignment(
    tasks: Sequence[str],
    devices: Sequence[str],
    policy: str = "round_robin",
    *,
    free_memory: Mapping[str, int] | None = None,
) -> tuple[TaskPlacement, ...]:
    """Maps tasks to devices (pure).

    ``round_robin`` deals tasks out in order. ``by_memory`` gives each task to the
    device with the most free memory per task already on it, so a device with
    three times the free memory gets about three times the tasks.

    Args:
        tasks: task names, unique.
        devices: device names, unique (tfdevices names).
        policy: one of :data:`POLICIES`.
        free_memory: bytes free per device, needed by ``by_memory``.

    Returns:
        One :class:`TaskPlacement` per task, in task order.

    Raises:
        InputError: no tasks or devices, repeated names, an unknown policy, or
            ``by_memory`` without a memory figure for some device.
    """
    _check_assignment(tasks, devices, policy)
    if policy == "round_robin":
        return tuple(
            TaskPlacement(t, devices[i % len(devices)], f"round robin: task {i} of {len(tasks)}")
            for i, t in enumerate(tasks)
        )
    return _by_memory(tasks, devices, dict(free_memory or {}))


def _check_assignment(tasks: Sequence[str], devices: Sequence[str], policy: str) -> None:
    """A known policy, and at least one task and one device, each named once."""
    if policy not in POLICIES:
        raise InputError(
            f"assign policy {policy!r} is unknown; known policies: {', '.join(POLICIES)}.",
            hint="use 'round_robin' or 'by_memory'.",
        )
    for what, names in (("tasks", tasks), ("devices", devices)):
        if not names:
            raise InputError(f"assign: no {what} given.", hint=f"pass at least one of the {what}.")
        dupes = sorted(n for n, k in Counter(names).items() if k > 1)
        if dupes:
            listed = ", ".join(repr(n) for n in dupes[:10]) + (
                f", ... {len(dupes) - 10} more" if len(dupes) > 10 else ""
            )
            raise InputError(
                f"assign: {what} {listed} appear more than once among the {len(names)} given.",
                hint=f"give each of the {what} once.",
            )


def _by_memory(tasks: Sequence[str], devices: Sequence[str], memory: Mapping[str, int]) -> tuple[TaskPlacement, ...]:
    """Each task to the device with the most free memory per task once it is added, the earliest on ties.

    A heap keeps planning O(tasks * log devices).
    """
    missing = [d for d in devices if d not in memory]
    if missing:
        raise InputError(
            f"assign policy 'by_memory': no free-memory figure for {missing}; known: {sorted(memory) or 'none'}.",
            hint="by_memory needs GPUs with NVML memory figures; use policy='round_robin' for CPUs.",
        )
    heap: list[tuple[float, int, int]] = [(-memory[d], i, 0) for i, d in enumerate(devices)]
    heapq.heapify(heap)
    plan = []
    for task in tasks:
        _, i, count = heapq.heappop(heap)
        device = devices[i]
        plan.append(
            TaskPlacement(task, device, f"by memory: {format_bytes(memory[device])} free, task {count + 1} on it")
        )
        heapq.heappush(heap, (-memory[device] / (count + 2), i, count + 1))
    return tuple(plan)


@contextlib.contextmanager
def device_scope(device: int | str, *, soft_placement: bool | None = None) -> Iterator[str]:
    """``tf.device`` for a tfdevices device name, validated against TensorFlow's devices.

    Args:
        device: an NVML index (``1``, ``"1"``) of a GPU TensorFlow sees, or a
            TensorFlow logical name (``"CPU:1"``, ``"/GPU:0"``).
        soft_placement: ``False``: an op with no kernel on ``device`` raises instead of
            running elsewhere without a word; ``True``: it may run elsewhere; ``None``
            (default): TensorFlow's setting as it is. TensorFlow keeps this setting per
            process, so it is set for the block and put back after it.

    Yields:
        The TensorFlow name used (``"/device:GPU:0"``).

    Raises:
        SpecError: the name is malformed or names no device TensorFlow has.
        InputError: ``soft_placement`` is not a bool or None.

    >>> import tfdevices
    >>> with tfdevices.device_scope("CPU:0") as name:
    ...     print(name)
    /device:CPU:0
    """
    tf_name = resolve_device(device)[1]
    tf = import_tf()
    previous = None if soft_placement is None else runtime.set_soft_placement(soft_placement)
    try:
        with tf.device(f"/device:{tf_name}"):
            yield f"/device:{tf_name}"
    finally:
        if previous is not None:
            runtime.set_soft_placement(previous)


def resolve_device(device: int | str) -> tuple[str, str]:
    """``(tfdevices name, TensorFlow name)`` for one device, checked against TensorFlow's devices.

    Raises:
        SpecError: the name is malformed or names no device TensorFlow has.
    """
    runtime.trace_runtime_start()
    logical = logical_devices()
    names, tf_names = resolve_devices(
        [device], logical=logical, gpu_map=runtime.gpu_map(logical), unseen=runtime.unseen_gpu_hint
    )
    return names[0], tf_names[0]


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """One task of :func:`assign`.

    Attributes:
        task: its name.
        device: tfdevices name of its device.
        tf_device: TensorFlow name of its device.
        reason: why this device.
        result: what the task returned (``None`` for a task given by name only).
        seconds: wall time of the task.
    """

    task: str
    device: str
    tf_device: str
    reason: str
    result: Any = None
    seconds: float = 0.0


def assign(
    tasks: Sequence[Callable[[], Any] | str] | Mapping[str, Callable[[], Any]],
    devices: Sequence[int | str] | None = None,
    policy: str = "round_robin",
    *,
    run: bool = True,
) -> tuple[TaskResult, ...]:
    """Maps independent tasks to devices and runs each under its device, concurrently.

    Each task runs in its own thread inside :func:`device_scope`, so ops on
    different devices overlap (TensorFlow releases the GIL while an op runs).
    A task's exception is raised after every task has finished.

    Args:
        tasks: callables (named by ``__name__``), a mapping name -> callable, or
            names only (planned, not run).
        devices: tfdevices device names; default: every visible GPU, else every logical CPU.
        policy: ``"round_robin"`` or ``"by_memory"`` (GPUs' free memory from NVML).
        run: ``False`` to only plan.

    Returns:
        One :class:`TaskResult` per task, in task order.

    Raises:
        InputError: see :func:`plan_assignment`; or a task is neither callable nor a name.
        SpecError: a device names nothing TensorFlow has, or is named twice.
    """
    named = _named_tasks(tasks)
    runtime.trace_runtime_start()
    logical = logical_devices()
    gpu_map = runtime.gpu_map(logical)
    if devices is None:
        devices = [tfdevices_name(d, gpu_map) for d in default_devices(logical)]
    resolved = dict(
        zip(*resolve_devices(list(devices), logical=logical, gpu_map=gpu_map, unseen=runtime.unseen_gpu_hint))
    )
    memory = _free_memory(list(resolved)) if policy == "by_memory" else None
    plan = plan_assignment([n for n, _ in named], list(resolved), policy, free_memory=memory)
    results = _run_tasks(plan, dict(named), resolved, run)
    return tuple(results[p.task] for p in plan)


def _run_tasks(
    plan: Sequence[TaskPlacement], fns: Mapping[str, Callable[[], Any] | None], resolved: Mapping[str, str], run: bool
) -> dict[str, TaskResult]:
    """Runs each task in its own thread under its device (TensorFlow's name in ``resolved``); the first
    exception a task raised is raised here once all have finished.
    """
    tf = import_tf()
    results: dict[str, TaskResult] = {}
    errors: list[BaseException] = []

    def work(p: TaskPlacement) -> None:
        start = time.perf_counter()
        try:
            fn = fns[p.task]
            with tf.device(f"/device:{resolved[p.device]}"):
                value = fn() if run and fn is not None else None
        except BaseException as err:  # noqa: BLE001 (re-raised below, in the caller's thread)
            errors.append(err)
            value = None
        results[p.task] = TaskResult(p.task, p.device, resolved[p.device], p.reason, value, time.perf_counter() - start)

    threads = [threading.Thread(target=work, args=(p,), name=f"tfdevices-{p.task}") for p in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _named_tasks(tasks: object) -> list[tuple[str, Callable[[], Any] | None]]:
    if isinstance(tasks, Mapping):
        items = list(tasks.items())
    elif isinstance(tasks, (list, tuple)):
        items = [
            (t, None) if isinstance(t, str) else (getattr(t, "__name__", f"task{i}"), t) for i, t in enumerate(tasks)
        ]
    else:
        raise InputError(
            f"assign(tasks=...): expected a list or a mapping, got {type(tasks).__name__}.",
            hint="pass [fn1, fn2] or {'name': fn}.",
        )
    for name, fn in items:
        if not isinstance(name, str) or (fn is not None and not callable(fn)):
            raise InputError(
                f"assign: task {name!r} -> {fn!r} is neither a callable nor a name.",
                hint="pass functions taking no arguments, or task names to plan only.",
            )
    return items


def _free_memory(devices: Sequence[str]) -> dict[str, int]:
    if not any(d.isdigit() or (":" in d and d.split(":")[0].isdigit()) for d in devices):
        return {}
    inventory = discover()
    return {d: g.memory_free for d in devices if (g := inventory.get(d)) is not None}
