"""tune: measure every way to run a model on this machine's devices, and name the fastest.

Each candidate (:func:`~tfdevices.decide.candidates.plan_candidates`) runs in its own
fresh process: configure, build, warm up, timed windows of ``steps`` steps until they settle,
one captured step. The one-device run goes first; its capture, and the copy cost it probes
between each pair of devices (:mod:`~tfdevices.decide.probe`), predict the others
(:func:`~tfdevices.decide.candidates.predict_step_s`), and ``budget_s`` keeps the
fastest-predicted candidates that fit. Then ``rounds - 1`` more rounds time every candidate
that ran again, each in a fresh process, in alternating order: a candidate's step time is
its fastest round's median. Its rounds give it a spread (:mod:`~tfdevices.decide.ties`);
the candidates whose spread reaches the fastest's are tied with it, and only those are timed
again, up to ``max_rounds``, until they separate. Among candidates still tied the winner is
the one with the fewest devices, then the simplest strategy.
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
    Link,
    Profile,
    check_target,
    choose,
    plan_candidates,
    predict_step_s,
    prune,
)
from tfdevices.decide.runner import run_candidate, supervised
from tfdevices.decide.ties import Timing, Verdict, judge, spread
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
        predicted_step_s: the prediction from the one-device capture and the copy costs probed
            between each pair of devices (``None``: no basis).
        peak_memory: peak bytes per device (``"host"`` for logical CPUs, which share it).
        shares: from one captured step: ``{"step_us", "copies", "all_reduce", "idle": {device: share}}``.
        detail: why it did not run, or what it was.
        logdir: its TensorBoard run (``None`` without ``logdir``).
        rounds: the timed rounds it ran (each in a fresh process); ``step_s`` is the fastest's median.
        round_step_s: each ok round's median, in the order they ran (its spread: the fastest two).
        predicted_uncalibrated_s: the prediction with the one copy cost measured between the first
            two devices by the one-device run, for every pair (what tune predicted before the probe).
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
    round_step_s: tuple[float, ...] = ()
    predicted_uncalibrated_s: float | None = None


@dataclass(frozen=True)
class TuneResult:
    """What tune measured: every candidate, those tied with the fastest, and the winner.

    Attributes:
        candidates: one :class:`CandidateResult` each, in plan order.
        winner: the fastest ok candidate, or among those tied with it the one the rule picks
            (:func:`~tfdevices.decide.ties.judge`); ``None`` if none ran.
        cpu_split: logical CPUs the CPU was split into for the candidates (``None`` on GPUs).
        tied: names of the fastest candidate and those tied with it, fastest first.
        reason: why the winner won, in words.
        links: the copy cost probed between each pair of devices (empty: not probed).
        probe_s: the probe's time (``None``: not probed).
    """

    candidates: tuple[CandidateResult, ...]
    winner: CandidateResult | None
    cpu_split: int | None = None
    tied: tuple[str, ...] = ()
    reason: str = ""
    links: tuple[Link, ...] = ()
    probe_s: float | None = None

    def _baseline(self) -> CandidateResult | None:
        return next((c for c in self.candidates if c.strategy == "one_device" and c.status == "ok"), None)

    def table(self) -> str:
        """The candidates side by side (``*`` the winner, ``=`` tied with the fastest), the ties, and the winner.

        The last line names the winner, why it won, and the flags that reproduce it.
        """
        base = self._baseline()
        head = (
            "candidate",
            "status",
            "step ms (q1-q3)",
            "spread ms (rounds)",
            "predicted",
            "examples/s",
            "scaling",
            "peak memory",
            "copies",
            "all-reduce",
            "idle (max)",
        )
        marks = dict.fromkeys(self.tied, "= ") | ({self.winner.name: "* "} if self.winner else {})
        rows = [head] + [_row(c, base, marks.get(c.name, "  ")) for c in self.candidates]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines += [f"  {c.name}: {c.detail}" for c in self.candidates if c.detail]
        most = max((c.rounds for c in self.candidates), default=0)
        if most > 1:
            lines.append(
                f"step: the fastest round's median (q1-q3 of its steps); spread: the fastest round's median to the "
                f"second fastest's, of up to {most} rounds, each in a fresh process; a spread that reaches the "
                "fastest's is a tie"
            )
        elif most == 1:
            lines.append("one round each: no spread, ties not told (rounds >= 2 tells them)")
        if len(self.tied) > 1:
            lines.append(f"tied within the noise: {', '.join(self.tied)}")
        if self.links:
            lines.append(f"predicted: from the one-device capture and {_links(self.links, self.probe_s)}")
        if self.winner is not None:
            why = f" ({self.reason})" if self.reason else ""
            lines.append(f"winner: {self.winner.name}{why}; reproduce with {self.flags()}")
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
        """Every candidate, the winner's name, why, the tie, the copy probe and the winner's settings, as JSON."""
        return json.dumps(
            {
                "candidates": [asdict(c) for c in self.candidates],
                "winner": None if self.winner is None else self.winner.name,
                "settings": self.settings(),
                "flags": self.flags(),
                "tied": list(self.tied),
                "reason": self.reason,
                "links": [asdict(link) for link in self.links],
                "probe_s": self.probe_s,
            },
            indent=1,
        )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.2f}"


def _row(c: CandidateResult, base: CandidateResult | None, mark: str) -> tuple[str, ...]:
    scaling = "-"
    if c.examples_per_s and base is not None and base.examples_per_s:
        scaling = f"{c.examples_per_s / base.examples_per_s / len(c.devices):.0%}"
    step = "-" if c.step_s is None else f"{_ms(c.step_s)} ({_ms(c.step_q1_s)}-{_ms(c.step_q3_s)})"
    low, high = spread(c.round_step_s) if c.round_step_s else (None, None)
    spread_ms = "-" if low is None else f"{_ms(low)}-{_ms(high)} ({c.rounds})"
    idle = c.shares.get("idle") or {}
    return (
        mark + c.name,
        c.status,
        step,
        spread_ms,
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


def _links(links: tuple[Link, ...], probe_s: float | None) -> str:
    """The probe in a few words: pairs, latency range, bandwidth range."""
    latency = _span([link.latency_s * 1e6 for link in links], "{:.1f}")
    rates = [link.bytes_per_s / 1e9 for link in links if link.bytes_per_s]
    rate = "no cost per byte measured"
    if rates:
        rate = _span(rates, "{:,.1f}") + " GB/s" + ("" if len(rates) == len(links) else " (else none measured)")
    took = "" if probe_s is None else f" in {probe_s:.1f} s"
    return (
        f"the copy cost probed between each pair of devices ({len(links)} pair{'s' * (len(links) > 1)}{took}: "
        f"latency {latency} us, {rate})"
    )


def _span(values: list[float], form: str) -> str:
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}-{high}"


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
    rounds: int = 2,
    max_rounds: int | None = None,
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
        warmup: steps run before each timed window (tracing, first allocations).
        rounds: timed rounds every candidate runs, each in a fresh process, the candidates taking turns
            (first round in plan order, then reversed, then plan order ...); a candidate's step time is
            its fastest round's median, its spread the fastest round's to the second fastest's. ``1``
            measures each once (no spread: ties are not told).
        max_rounds: rounds, at most, for the candidates still tied with the fastest after ``rounds``
            (only they run again, until they separate); default ``rounds + 3``.
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
    most = rounds + 3 if max_rounds is None else _count("max_rounds", max_rounds, rounds)
    budget = None if budget_s is None else _seconds("budget_s", budget_s, optional=True)
    timeout = _seconds("timeout_s", timeout_s, optional=False)
    split = _count("virtual_devices", virtual_devices, 1)
    names, gpus = _devices(devices, split)
    planned = plan_candidates(names)
    chosen = choose(planned, candidates)
    base = planned[0]  # one device of the main kind: predictions start from it
    pool = list(dict.fromkeys(d for c in chosen if c.strategy in ("mirrored", "split") for d in c.devices))
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

        def run(c: Candidate, predicted: tuple[float | None, float | None], limit: float) -> dict[str, Any]:
            first = c == base
            child = {
                **spec,
                "strategy": c.strategy,
                "devices": list(c.devices),
                "profile": first,
                "probe": pool if first else [],
                "logdir": None if out_dir is None else os.path.join(out_dir, c.name.replace(":", "_")),
            }
            raw = run_candidate(child, timeout_s=limit, watchdog=watchdog)
            results[c.name] = _result(c, raw, *predicted)
            say(f"{c.name}: {results[c.name].status} {_ms(results[c.name].step_s)} ms/step")
            return raw

        def again(cs: list[Candidate], turn: int, per_round_s: float) -> None:
            """Times each of ``cs`` once more in a fresh process (no capture), reversed on odd turns."""
            for c in cs[::-1] if turn % 2 else cs:
                cost = (results[c.name].step_s or 0.0) * (steps + warmup) + per_round_s
                if budget is not None and time.perf_counter() - started + cost > budget:
                    return
                raw = run_candidate(
                    {**spec, "strategy": c.strategy, "devices": list(c.devices), "capture": False},
                    timeout_s=_limit(timeout, budget, started),
                    watchdog=watchdog,
                )
                results[c.name] = _faster(results[c.name], raw)
                say(f"{c.name}: round {turn + 1} {raw.get('status')} {_ms(raw.get('step_s'))} ms/step")

        raw = run(base, (None, None), timeout if budget is None else min(timeout, budget))
        profile = _profile(raw, gpus)
        links = tuple(Link(**link) for link in raw.get("links") or ())
        if raw.get("probe_detail"):
            say(f"copy probe: {raw['probe_detail']}; predictions use one copy cost for every pair")
        if profile is not None:
            results[base.name] = replace(
                results[base.name], predicted_step_s=profile.step_s, predicted_uncalibrated_s=profile.step_s
            )
        rest = [(c, _predictions(c, profile, links)) for c in chosen if c != base]
        runnable = {c: p for c, p in rest if c.strategy != "multi_worker"}
        for c, (p, plain) in rest:
            if c.strategy == "multi_worker":
                results[c.name] = CandidateResult(
                    c.name,
                    c.strategy,
                    c.devices,
                    "skipped",
                    predicted_step_s=p,
                    detail="multi-worker needs one process per GPU: not run by tune yet",
                    predicted_uncalibrated_s=plain,
                )
        left = None if budget is None else budget - (time.perf_counter() - started)
        startup = float(raw.get("startup_s") or 0.0)
        order = [(c, p[0]) for c, p in runnable.items()]
        kept, pruned = prune(order, left, startup_s=startup, steps=steps + warmup + 2)
        for c, reason in pruned:
            p, plain = runnable[c]
            results[c.name] = CandidateResult(
                c.name,
                c.strategy,
                c.devices,
                "skipped",
                predicted_step_s=p,
                detail=reason,
                predicted_uncalibrated_s=plain,
            )
        for c in kept:
            run(c, runnable[c], _limit(timeout, budget, started))
        measured = [c for c in [base, *kept] if results[c.name].status == "ok"]
        for turn in range(1, rounds if len(measured) > 1 else 1):
            again(measured, turn, startup)
        for turn in range(rounds, most):
            tied = [c for c in measured if c.name in _verdict(results).tied]
            if len(tied) < 2:
                break
            say(f"tied within the noise: {', '.join(c.name for c in tied)}; timing them again")
            again(tied, turn, startup)
    if not any(c.strategy == "multi_worker" for c in planned):
        say("multi-worker: skipped (it runs one worker per GPU; this machine has fewer than two GPUs)")
    ordered = tuple(results[c.name] for c in planned if c.name in results)
    verdict = _verdict(results)
    winner = results[verdict.winner] if verdict.winner else None
    probe_s = raw.get("probe_s")
    return TuneResult(ordered, winner, None if gpus else split, verdict.tied, verdict.reason, links, probe_s)


def _verdict(results: dict[str, CandidateResult]) -> Verdict:
    return judge(
        [
            Timing(c.name, c.strategy, len(c.devices), c.round_step_s)
            for c in results.values()
            if c.status == "ok" and c.round_step_s
        ]
    )


def _predictions(c: Candidate, profile: Profile | None, links: tuple[Link, ...]) -> tuple[float | None, float | None]:
    """(calibrated, uncalibrated) predictions: with the probed copy costs per pair, and without."""
    if profile is None:
        return None, None
    plain = predict_step_s(c, profile)
    return (predict_step_s(c, replace(profile, links=links)) if links else plain), plain


def _limit(timeout: float, budget: float | None, started: float) -> float:
    """The time a child may take: its own bound, and what is left of the budget (at least 1 s)."""
    return timeout if budget is None else max(1.0, min(timeout, budget - (time.perf_counter() - started)))


def _result(c: Candidate, raw: dict[str, Any], predicted: float | None, uncalibrated: float | None) -> CandidateResult:
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
        (step,) if step else (),
        uncalibrated,
    )


def _faster(kept: CandidateResult, raw: dict[str, Any]) -> CandidateResult:
    """``kept`` with one more round: its median added to the rounds, its timing replaced when faster.

    A round that fails (the machine ran out of memory meanwhile, a time limit) is counted in
    the detail; the candidate keeps the rounds it measured.
    """
    step = raw.get("step_s")
    if raw.get("status") != "ok" or not step:
        why = str(raw.get("detail") or raw.get("status") or "no result")
        return replace(kept, detail=(kept.detail + "; " if kept.detail else "") + f"a later round: {why}")
    rounds, timed = kept.rounds + 1, (*kept.round_step_s, step)
    if kept.step_s is not None and kept.step_s <= step:
        return replace(kept, rounds=rounds, round_step_s=timed)
    return replace(
        kept,
        rounds=rounds,
        round_step_s=timed,
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
