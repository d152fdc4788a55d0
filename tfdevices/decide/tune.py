"""tune: measure every way to run a model on this machine's devices, and name the fastest.

Each candidate (:func:`~tfdevices.decide.candidates.plan_candidates`) runs in its own
fresh process: configure, build, warm up, a timed window of ``steps`` steps, one captured
step. The one-device run goes first; its capture predicts the others
(:func:`~tfdevices.decide.candidates.predict_step_s`), and ``budget_s`` keeps the
fastest-predicted candidates that fit. Then ``rounds - 1`` more rounds time every candidate
that ran again, each in a fresh process, in alternating order: a candidate's step time is
its fastest round's median, so a burst of load from other processes during one window does
not decide the winner.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tfdevices.core.errors import InputError
from tfdevices.core.units import format_bytes
from tfdevices.decide.candidates import (
    Candidate,
    Profile,
    check_target,
    choose,
    plan_candidates,
    predict_step_s,
    prune,
)
from tfdevices.decide.runner import run_candidate, supervised
from tfdevices.gpus.discovery import discover

__all__ = ["CandidateResult", "TuneResult", "tune"]

STATUSES = ("ok", "out_of_memory", "failed", "timeout", "skipped")


@dataclass(frozen=True)
class CandidateResult:
    """One candidate, as measured.

    Attributes:
        name, strategy, devices: the :class:`~tfdevices.decide.candidates.Candidate`.
        status: ``"ok"``, ``"out_of_memory"``, ``"failed"``, ``"timeout"`` or ``"skipped"``.
        step_s: median step time of its fastest round (``None`` unless ok); ``step_q1_s``/``step_q3_s``
            that round's quartiles.
        examples_per_s: the global batch over ``step_s``.
        predicted_step_s: the prediction from the one-device capture (``None``: no basis).
        peak_memory: peak bytes per device (``"host"`` for logical CPUs, which share it).
        shares: from one captured step: ``{"step_us", "copies", "all_reduce", "idle": {device: share}}``.
        detail: why it did not run, or what it was.
        logdir: its TensorBoard run (``None`` without ``logdir``).
        rounds: the timed windows it ran (each in a fresh process); ``step_s`` is the fastest's median.
    """

    name: str
    strategy: str
    devices: tuple[str, ...]
    status: str
    step_s: float | None = None
    step_q1_s: float | None = None
    step_q3_s: float | None = None
    examples_per_s: float | None = None
    predicted_step_s: float | None = None
    peak_memory: dict[str, int] = field(default_factory=dict)
    shares: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    logdir: str | None = None
    rounds: int = 0


@dataclass(frozen=True)
class TuneResult:
    """What tune measured: every candidate, and the winner (the fastest that ran, ``None`` if none did).

    Attributes:
        candidates: one :class:`CandidateResult` each, in plan order.
        winner: the ok candidate with the most examples per second.
        cpu_split: logical CPUs the CPU was split into for the candidates (``None`` on GPUs).
    """

    candidates: tuple[CandidateResult, ...]
    winner: CandidateResult | None
    cpu_split: int | None = None

    def _baseline(self) -> CandidateResult | None:
        return next((c for c in self.candidates if c.strategy == "one_device" and c.status == "ok"), None)

    def table(self) -> str:
        """The candidates side by side, the winner marked, and how to reproduce it."""
        base = self._baseline()
        head = (
            "candidate",
            "status",
            "step ms (q1-q3)",
            "predicted",
            "examples/s",
            "scaling",
            "peak memory",
            "copies",
            "all-reduce",
            "idle (max)",
        )
        rows = [head] + [_row(c, base, c is self.winner) for c in self.candidates]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines += [f"  {c.name}: {c.detail}" for c in self.candidates if c.detail]
        most = max((c.rounds for c in self.candidates), default=0)
        if most > 1:
            lines.append(f"step times: each candidate's fastest of up to {most} rounds, each in a fresh process")
        if self.winner is not None:
            lines.append(f"winner: {self.winner.name}; reproduce with {self.flags()}")
        return "\n".join(lines)

    def flags(self) -> str:
        """The absl flags (:func:`tfdevices.flags.configure_from_flags`) that reproduce the winner."""
        s = self.settings()
        if not s:
            return ""
        cfg = s["configure"]
        out = [f"--gpus={cfg['gpus']}"] + (
            [f"--virtual_devices={cfg['virtual_devices']}"] if cfg.get("virtual_devices") else []
        )
        return " ".join(out + [f"--strategy={s['build_strategy']['kind']}"])

    def settings(self) -> dict[str, Any]:
        """The winner as JSON-able settings: ``configure`` (gpus, virtual_devices), ``build_strategy``
        (kind, devices: what :func:`tfdevices.build_strategy` accepts) and ``layers`` (for a split:
        ``plan_layers`` arguments), ``{}`` without a winner.
        """
        w = self.winner
        if w is None:
            return {}
        gpu = w.devices[0].startswith("GPU")
        split = None if gpu or w.strategy == "one_device" else len(w.devices)
        gpus = ",".join(d.partition(":")[2] for d in w.devices) if gpu else "none"
        kind = {"split": "default"}.get(w.strategy, w.strategy)
        return {
            "configure": {"gpus": gpus, "virtual_devices": split},
            "build_strategy": {"kind": kind, "devices": list(w.devices)},
            "layers": {"devices": list(w.devices), "balance_by": "time"} if w.strategy == "split" else None,
        }

    def to_json(self) -> str:
        """Every candidate, the winner's name and its settings, as JSON."""
        return json.dumps(
            {
                "candidates": [asdict(c) for c in self.candidates],
                "winner": None if self.winner is None else self.winner.name,
                "settings": self.settings(),
                "flags": self.flags(),
            },
            indent=1,
        )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.2f}"


def _row(c: CandidateResult, base: CandidateResult | None, won: bool) -> tuple[str, ...]:
    scaling = "-"
    if c.examples_per_s and base is not None and base.examples_per_s:
        scaling = f"{c.examples_per_s / base.examples_per_s / len(c.devices):.0%}"
    step = "-" if c.step_s is None else f"{_ms(c.step_s)} ({_ms(c.step_q1_s)}-{_ms(c.step_q3_s)})"
    idle = c.shares.get("idle") or {}
    return (
        ("* " if won else "  ") + c.name,
        c.status,
        step,
        _ms(c.predicted_step_s),
        "-" if c.examples_per_s is None else f"{c.examples_per_s:,.0f}",
        scaling,
        ", ".join(f"{d} {format_bytes(b)}" for d, b in sorted(c.peak_memory.items())) or "-",
        _share(c.shares.get("copies")),
        _share(c.shares.get("all_reduce")),
        _share(max(idle.values())) if idle else "-",
    )


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


# ----------------------------------------------------------------------------- inputs


def _target(model_fn: Callable[[], Any] | str) -> str:
    if isinstance(model_fn, str):
        return _findable(check_target(model_fn))
    module, name = getattr(model_fn, "__module__", None), getattr(model_fn, "__qualname__", "")
    if not callable(model_fn) or module in (None, "__main__") or "<" in name or "." in name:
        raise InputError(
            f"model_fn {model_fn!r}: each candidate runs in a fresh process, which imports it by "
            "its module, but it is not a module-level function of an importable module.",
            hint="define it at the top of a module (mypackage/models.py) and pass the function or "
            "'mypackage.models:build'; e.g. 'tfdevices.decide.examples:tiny_mlp'.",
        )
    return check_target(f"{module}:{name}")


def _findable(target: str) -> str:
    """``target``, once its top-level package is found on this Python's path (the children's, too).

    Only the top-level name is looked up: nothing of the user's code runs in this process.
    """
    top = target.partition(":")[0].split(".")[0]
    if importlib.util.find_spec(top) is None:
        raise InputError(
            f"model function {target!r}: there is no module {top!r} on this Python's path.",
            hint="run tune from the directory that holds it, or install its package; "
            "e.g. 'tfdevices.decide.examples:tiny_mlp' runs anywhere.",
        )
    return target


def _count(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{name}={value!r}: expected a whole number >= {low}.", hint=f"e.g. {name}={max(low, 10)}.")
    return value


def _seconds(name: str, value: object, *, optional: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
        raise InputError(
            f"{name}={value!r}: expected a number of seconds > 0" + (" or None." if optional else "."),
            hint=f"e.g. {name}=300.",
        )
    return float(value)


def _devices(devices: Iterable[str] | None, split: int) -> tuple[tuple[str, ...], bool]:
    """(devices, on GPUs?): the GPUs NVML sees, else ``split`` logical CPUs."""
    if devices is None:
        gpus = discover().gpus
        if gpus:
            return tuple(f"GPU:{i}" for i in range(len(gpus))) + ("CPU:0",), True
        return tuple(f"CPU:{i}" for i in range(split)), False
    names = tuple(devices) if not isinstance(devices, str) else (devices,)
    return names, any(n.upper().startswith("GPU") for n in names)


# ----------------------------------------------------------------------------- tune


def tune(
    model_fn: Callable[[], Any] | str,
    *,
    devices: Iterable[str] | None = None,
    candidates: str | Iterable[str] = "auto",
    steps: int = 20,
    warmup: int = 3,
    rounds: int = 3,
    budget_s: float | None = None,
    timeout_s: float = 300.0,
    virtual_devices: int = 4,
    memory_limit: object = None,
    logdir: str | os.PathLike[str] | None = None,
    echo: Callable[[str], None] | None = None,
) -> TuneResult:
    """Measures each way to run ``model_fn``'s model here, in fresh processes; returns the results.

    Args:
        model_fn: a module-level function (or ``"MODULE:FUNCTION"``) returning ``(compiled Keras model,
            tf.data.Dataset of (x, y) batches)``; each child imports and calls it (under the strategy's scope).
        devices: TensorFlow devices, best first; default: the GPUs NVML sees (and ``CPU:0``), else
            ``virtual_devices`` logical CPUs.
        candidates: ``"auto"`` (all) or names from :func:`~tfdevices.decide.candidates.plan_candidates`
            (``"mirrored:2"``); the one-device run on the main kind always runs (predictions start from it).
        steps: steps in each timed window (after ``warmup`` steps).
        rounds: timed windows per candidate, each in a fresh process, the candidates taking turns
            (first round in plan order, then reversed, then plan order ...); a candidate's step time is
            its fastest window's median. ``1`` measures each once (and so does a single candidate).
        warmup: steps run before each timed window (tracing, first allocations).
        budget_s: bound on the whole run: candidates are kept, fastest predicted first, while they fit.
        timeout_s: bound on each candidate's process.
        virtual_devices: logical CPUs to split the CPU into, without GPUs.
        memory_limit: each GPU's memory cap in the children (``configure(memory_limit=...)``).
        logdir: a TensorBoard run per candidate under it (``LOGDIR/<candidate>``) with its captured step.
        echo: called with a line as each candidate ends (the CLI prints them).

    Returns:
        A frozen :class:`TuneResult`.

    Raises:
        InputError: a bad argument (the message says which).
        KeyboardInterrupt: Ctrl-C or SIGTERM, after every child is stopped.
    """
    target = _target(model_fn)
    steps, warmup, rounds = _count("steps", steps, 2), _count("warmup", warmup, 0), _count("rounds", rounds, 1)
    budget = None if budget_s is None else _seconds("budget_s", budget_s, optional=True)
    timeout = _seconds("timeout_s", timeout_s, optional=False)
    split = _count("virtual_devices", virtual_devices, 1)
    names, gpus = _devices(devices, split)
    planned = plan_candidates(names)
    chosen = choose(planned, candidates)
    base = planned[0]  # one device of the main kind: predictions start from it
    spec = {
        "target": target,
        "sys_path": [p for p in sys.path if p],
        "gpus": gpus,
        "virtual_devices": split,
        "warmup": warmup,
        "steps": steps,
        "memory_limit": memory_limit,
    }
    out_dir = None if logdir is None else os.fspath(logdir)
    say = echo or (lambda line: None)
    started = time.perf_counter()
    results: dict[str, CandidateResult] = {}
    with supervised() as watchdog:

        def run(c: Candidate, predicted: float | None, profile: bool, limit: float) -> dict[str, Any]:
            child = {
                **spec,
                "strategy": c.strategy,
                "devices": list(c.devices),
                "profile": profile,
                "logdir": None if out_dir is None else os.path.join(out_dir, c.name.replace(":", "_")),
            }
            raw = run_candidate(child, timeout_s=limit, watchdog=watchdog)
            results[c.name] = _result(c, raw, predicted)
            say(f"{c.name}: {results[c.name].status} {_ms(results[c.name].step_s)} ms/step")
            return raw

        def again(c: Candidate, limit: float) -> None:
            """Times ``c`` once more in a fresh process (no capture); keeps its fastest round."""
            raw = run_candidate(
                {**spec, "strategy": c.strategy, "devices": list(c.devices), "capture": False},
                timeout_s=limit,
                watchdog=watchdog,
            )
            results[c.name] = _faster(results[c.name], raw)
            say(f"{c.name}: round {results[c.name].rounds} {raw.get('status')} {_ms(raw.get('step_s'))} ms/step")

        raw = run(base, None, True, timeout if budget is None else min(timeout, budget))
        profile = _profile(raw, gpus)
        if profile is not None:
            results[base.name] = replace(results[base.name], predicted_step_s=profile.step_s)
        rest = [(c, None if profile is None else predict_step_s(c, profile)) for c in chosen if c != base]
        runnable = [(c, p) for c, p in rest if c.strategy != "multi_worker"]
        for c, p in rest:
            if c.strategy == "multi_worker":
                results[c.name] = CandidateResult(
                    c.name,
                    c.strategy,
                    c.devices,
                    "skipped",
                    predicted_step_s=p,
                    detail="multi-worker needs one process per GPU: not run by tune yet",
                )
        left = None if budget is None else budget - (time.perf_counter() - started)
        kept, pruned = prune(runnable, left, startup_s=float(raw.get("startup_s") or 0.0), steps=steps + warmup + 2)
        for c, reason in pruned:
            results[c.name] = CandidateResult(
                c.name, c.strategy, c.devices, "skipped", predicted_step_s=dict(runnable)[c], detail=reason
            )
        for c in kept:
            run(c, dict(runnable)[c], False, _limit(timeout, budget, started))
        measured = [c for c in [base, *kept] if results[c.name].status == "ok"]
        for turn in range(1, rounds if len(measured) > 1 else 1):
            for c in measured[::-1] if turn % 2 else measured:
                per_round = (results[c.name].step_s or 0.0) * (steps + warmup) + float(raw.get("startup_s") or 0.0)
                if budget is not None and time.perf_counter() - started + per_round > budget:
                    break
                again(c, _limit(timeout, budget, started))
    if not any(c.strategy == "multi_worker" for c in planned):
        say("multi-worker: skipped (it runs one worker per GPU; this machine has fewer than two GPUs)")
    ordered = tuple(results[c.name] for c in planned if c.name in results)
    ok = [c for c in ordered if c.status == "ok" and c.examples_per_s]
    winner = max(ok, key=lambda c: c.examples_per_s or 0.0) if ok else None
    return TuneResult(ordered, winner, None if gpus else split)


def _limit(timeout: float, budget: float | None, started: float) -> float:
    """The time a child may take: its own bound, and what is left of the budget (at least 1 s)."""
    return timeout if budget is None else max(1.0, min(timeout, budget - (time.perf_counter() - started)))


def _result(c: Candidate, raw: dict[str, Any], predicted: float | None) -> CandidateResult:
    status = raw["status"] if raw.get("status") in STATUSES else "failed"
    step = raw.get("step_s")
    return CandidateResult(
        c.name,
        c.strategy,
        c.devices,
        status,
        step,
        raw.get("step_q1_s"),
        raw.get("step_q3_s"),
        raw["batch"] / step if step else None,
        predicted,
        dict(raw.get("peak_memory") or {}),
        dict(raw.get("shares") or {}),
        str(raw.get("detail") or ""),
        raw.get("logdir"),
        1 if step else 0,
    )


def _faster(kept: CandidateResult, raw: dict[str, Any]) -> CandidateResult:
    """``kept`` with one more round: its timing replaced when this round's median is faster.

    A round that fails (the machine ran out of memory meanwhile, a time limit) is counted in
    the detail; the candidate keeps the rounds it measured.
    """
    step = raw.get("step_s")
    if raw.get("status") != "ok" or not step:
        why = str(raw.get("detail") or raw.get("status") or "no result")
        return replace(kept, detail=(kept.detail + "; " if kept.detail else "") + f"a later round: {why}")
    rounds = kept.rounds + 1
    if kept.step_s is not None and kept.step_s <= step:
        return replace(kept, rounds=rounds)
    return replace(
        kept,
        rounds=rounds,
        step_s=step,
        step_q1_s=raw.get("step_q1_s"),
        step_q3_s=raw.get("step_q3_s"),
        examples_per_s=raw["batch"] / step,
    )


def _profile(raw: dict[str, Any], gpus: bool) -> Profile | None:
    if raw.get("status") != "ok" or raw.get("compute_s") is None:
        return None
    return Profile(
        step_s=raw["step_s"],
        compute_s=min(raw["compute_s"], raw["step_s"]),
        grad_bytes=raw["grad_bytes"],
        variables=raw["variables"],
        activation_bytes=raw["activation_bytes"],
        copy_latency_s=raw.get("copy_latency_s", 0.0),
        copy_bytes_per_s=raw.get("copy_bytes_per_s", 1e12),
        shared_compute=not gpus,
    )
