"""tune: measure every way to run a model on this machine's devices, and name the fastest.

Each candidate (:func:`~tfdevices.decide.candidates.plan_candidates`) runs in processes of its own
(``processes``, 2 by default: a process has a speed of its own, see :mod:`~tfdevices.decide.ties`),
each built and warmed up once (:mod:`~tfdevices.decide.child`). The one-device run starts first; its
captured step, and the copy cost it probes between each pair of devices (:mod:`~tfdevices.decide.probe`),
predict the others (:func:`~tfdevices.decide.candidates.predict_step_s`), and ``budget_s`` keeps the
fastest-predicted candidates that fit. Then the candidates are timed in rounds, interleaved in
time: each round times one window of each candidate's process, one after another (A B C, B C A, ...),
while the others wait idle, so a slow minute of the machine weighs on all alike. Candidates are compared
by their paired ratios, round by round, every process against every process
(:mod:`~tfdevices.decide.ties`); further rounds, still
interleaved, time only the candidates the answer depends on, up to ``max_rounds`` and within the
budget. Among the fastest and the candidates the rounds cannot tell from it and measure within the
margin of it, the winner is the one with the fewest devices, then the simplest strategy.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from tfdevices.core.errors import InputError
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
from tfdevices.decide.config import TuneConfig
from tfdevices.decide.messages import Capture, Captured, ChildSpec, Failed, Ready, TimeWindow, Window
from tfdevices.decide.results import STATUSES, CandidateResult, TuneResult
from tfdevices.decide.runner import Child, start_child, supervised
from tfdevices.decide.ties import Timing, Verdict, judge
from tfdevices.gpus.discovery import discover
from tfdevices.jobs.orphan_guard import OrphanGuard

#: A window's cost besides its steps (Keras' fit call), for the budget.
_WINDOW_OVERHEAD_S = 0.1


def tune(
    model_fn: Callable[[], Any] | str,
    config: TuneConfig | None = None,
    *,
    echo: Callable[[str], None] | None = None,
    **options: Any,
) -> TuneResult:
    """Measures each way to run ``model_fn``'s model here, in processes of their own; returns the results.

    Args:
        model_fn: a module-level function (or ``"MODULE:FUNCTION"``) returning ``(compiled Keras model,
            tf.data.Dataset of (x, y) batches)``; each child imports and calls it (under the strategy's scope).
        config: how to measure (a :class:`~tfdevices.decide.config.TuneConfig`; default: its defaults).
        echo: called with a line as the run goes (the CLI prints them).
        **options: :class:`~tfdevices.decide.config.TuneConfig` fields, over ``config``'s
            (``tune(fn, steps=10, budget_s=120)``).

    Returns:
        A frozen :class:`TuneResult`.

    Raises:
        InputError: a bad argument (the message says which).
        KeyboardInterrupt: Ctrl-C or SIGTERM, after every child is stopped.
    """
    cfg = (config or TuneConfig()).replace(**options) if options else (config or TuneConfig())
    if not isinstance(cfg, TuneConfig):
        raise InputError(f"config={cfg!r}: expected a TuneConfig.", hint="tune(fn, TuneConfig(steps=10)).")
    target = _target(model_fn)
    names, gpus = _devices(cfg.devices, cfg.virtual_devices)
    planned = plan_candidates(names)
    chosen = choose(planned, "auto" if cfg.candidates == "auto" else list(cfg.candidates))
    with supervised() as orphan_guard:
        session = _Session(target, cfg, gpus, orphan_guard, echo or (lambda line: None))
        try:
            return session.run(planned, chosen)
        finally:
            session.close()


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


def _devices(devices: Iterable[str] | None, split: int) -> tuple[tuple[str, ...], bool]:
    """(devices, on GPUs?): the GPUs NVML sees, else ``split`` logical CPUs."""
    if devices is None:
        gpus = discover().gpus
        if gpus:
            return tuple(f"GPU:{i}" for i in range(len(gpus))) + ("CPU:0",), True
        return tuple(f"CPU:{i}" for i in range(split)), False
    names = tuple(devices)
    return names, any(n.upper().startswith("GPU") for n in names)


# ----------------------------------------------------------------------------- one run


class _Session:
    """One tune run: the candidates' live processes, started, asked and timed in rounds.

    What each candidate has shown so far is kept by :class:`_Records` (``records``; ``results`` is its
    dict, read here); the children are closed on :meth:`close`, whatever happened.
    """

    def __init__(self, target: str, cfg: TuneConfig, gpus: bool, orphan_guard: OrphanGuard, say: Callable[[str], None]):
        self.cfg, self.gpus, self.orphan_guard, self.say = cfg, gpus, orphan_guard, say
        self.started = time.perf_counter()
        self.spec = ChildSpec(
            target, "one_device", (), gpus, cfg.virtual_devices, cfg.warmup, cfg.steps, cfg.memory_limit,
            tuple(p for p in sys.path if p),
        )  # fmt: skip
        self.records = _Records(cfg.margin, say)
        self.results = self.records.results
        self.children: dict[str, list[Child]] = {}
        self.links: tuple[Link, ...] = ()
        self.probe_s: float | None = None

    def run(self, planned: tuple[Candidate, ...], chosen: tuple[Candidate, ...]) -> TuneResult:
        """Starts, predicts, prunes, times the rounds and judges; returns the run's record."""
        base = planned[0]  # one device of the main kind: predictions start from it
        pool = tuple(dict.fromkeys(d for c in chosen if c.strategy in ("mirrored", "split") for d in c.devices))
        profile = self._first(base, pool)
        rest = [(c, _predictions(c, profile, self.links)) for c in chosen if c != base]
        kept = self._keep(rest, self.results[base.name])
        self._start(kept, capture=True)
        measured = [c for c in [base, *kept] if self.results[c.name].status == "ok"]
        self._rounds(measured)
        if not any(c.strategy == "multi_worker" for c in planned):
            self.say("multi-worker: skipped (it runs one worker per GPU; this machine has fewer than two GPUs)")
        return self._result(planned)

    def close(self) -> None:
        """Stops every child still running (all asked first: they exit side by side)."""
        every = [child for children in self.children.values() for child in children]
        for child in every:
            child.stop()
        for child in every:
            child.close()

    # ------------------------------------------------------------ starting

    def _first(self, base: Candidate, pool: tuple[str, ...]) -> Profile | None:
        """Starts the one-device run; its captured step and copy probe are what predictions start from."""
        self._start([base], capture=False)
        captured = self._capture(base, Capture(profile=True, probe=pool if len(pool) > 1 else (), logdir=None))
        if captured is None:
            return None
        self.links = captured.profile.links if captured.profile is not None else ()
        self.probe_s = captured.probe_s
        if captured.probe_detail:
            self.say(f"copy probe: {captured.probe_detail}; predictions use one copy cost for every pair")
        profile = _profile(self.results[base.name], captured, self.gpus)
        if profile is not None:
            self.records.record(base, predicted_step_s=profile.step_s, predicted_uncalibrated_s=profile.step_s)
        return profile

    def _keep(
        self, rest: list[tuple[Candidate, tuple[float | None, float | None]]], base: CandidateResult
    ) -> list[Candidate]:
        """The candidates to run: multi-worker is skipped, and ``budget_s`` keeps the fastest predicted that fit."""
        runnable = {c: p for c, p in rest if c.strategy != "multi_worker"}
        for c, (p, plain) in rest:
            if c.strategy == "multi_worker":
                why = "multi-worker needs one process per GPU: not run by tune yet"
                self.results[c.name] = _skipped(c, p, plain, why)
        left = None if self.cfg.budget_s is None else self.cfg.budget_s - self._elapsed()
        each = self.cfg.processes
        startup = each * (base.startup_s or 0.0)
        steps = each * (self.cfg.warmup + self.cfg.steps * (2 + self.cfg.rounds))
        kept, pruned = prune([(c, p[0]) for c, p in runnable.items()], left, startup_s=startup, steps=steps)
        for c, reason in pruned:
            self.results[c.name] = _skipped(c, *runnable[c], reason)
        for c in kept:
            self.results[c.name] = _skipped(c, *runnable[c], "")
        return list(kept)

    def _start(self, candidates: list[Candidate], *, capture: bool) -> None:
        """Starts each candidate's processes (all side by side), waits for each to be ready, captures a step."""
        for c in candidates:
            spec = replace(self.spec, strategy=c.strategy, devices=c.devices)
            self.children[c.name] = [start_child(spec, self.orphan_guard) for _ in range(self.cfg.processes)]
        for c in candidates:
            self._ready(c)
        for c in candidates if capture else ():
            self._capture(c, Capture(logdir=self._logdir(c)))

    def _ready(self, c: Candidate) -> None:
        """Waits for each of ``c``'s processes; those that did not start are left out (all of them: it failed)."""
        children = self.children[c.name]
        replies = [child.ask(None, self._limit()) for child in children]
        ready = [r for r in replies if isinstance(r, Ready)]
        self.children[c.name] = [child for child, r in zip(children, replies) if isinstance(r, Ready)]
        self.records.take(c, ready[0] if ready else replies[0])
        if not ready:
            return
        self.records.record(c, processes=len(ready))
        failed = [r for r in replies if isinstance(r, Failed)]
        if failed:
            why = f"timed in {len(ready)} of {len(replies)} processes, the others did not start: {failed[0].detail}"
            self.records.record(c, detail=why)
            self.say(f"{c.name}: {why}")
        each = f" ({len(ready)} processes)" if len(ready) > 1 else ""
        self.say(f"{c.name}: ready in {max(r.startup_s for r in ready):.1f} s{each}")

    def _capture(self, c: Candidate, command: Capture) -> Captured | None:
        if self.results[c.name].status != "ok":
            return None
        if command.logdir is None and self.cfg.logdir is not None:
            command = replace(command, logdir=self._logdir(c))
        reply = self.children[c.name][0].ask(command, self._limit())
        self.records.take(c, reply)
        return reply if isinstance(reply, Captured) else None

    def _logdir(self, c: Candidate) -> str | None:
        return None if self.cfg.logdir is None else os.path.join(self.cfg.logdir, c.name.replace(":", "_"))

    # ------------------------------------------------------------ rounds

    def _rounds(self, measured: list[Candidate]) -> None:
        """``rounds`` rounds of every candidate, then further rounds of those the answer depends on."""
        for turn in range(self.cfg.rounds):
            if not self._round(measured, turn):
                return
        for turn in range(self.cfg.rounds, self.cfg.max_rounds or self.cfg.rounds):
            open_ = [c for c in measured if c.name in self.records.verdict().contenders]
            if len(open_) < 2:
                return
            if turn == self.cfg.rounds:
                self.say(f"not told apart yet: {', '.join(c.name for c in open_)}; timing them again, in turn")
            if not self._round(open_, turn):
                return

    def _round(self, candidates: list[Candidate], turn: int) -> bool:
        """One window of each candidate's process, in turn (rotated each round); ``False`` when the budget is spent.

        Process ``k`` of every candidate, then process ``k + 1`` of every candidate; a candidate's round
        counts once each of its processes answered (one that fails stops the candidate: its rounds so
        far stand).
        """
        ok = [c for c in candidates if self.results[c.name].status == "ok"]
        cost = sum(
            len(self.children[c.name]) * (self.cfg.steps * (self.results[c.name].step_s or 0.0) + _WINDOW_OVERHEAD_S)
            for c in ok
        )
        if self.cfg.budget_s is not None and self._elapsed() + cost > self.cfg.budget_s:
            self.say(f"round {turn + 1}: not run, the budget ({self.cfg.budget_s:g} s) is spent")
            return False
        shift = turn % len(ok) if ok else 0
        order = ok[shift:] + ok[:shift]
        windows: dict[str, list[float]] = {c.name: [] for c in ok}
        for k in range(max((len(self.children[c.name]) for c in ok), default=0)):
            for c in order:
                if k < len(self.children[c.name]) and self.results[c.name].status == "ok":
                    reply = self.children[c.name][k].ask(TimeWindow(self.cfg.steps), self._limit())
                    self.records.take(c, reply)
                    if isinstance(reply, Window):
                        windows[c.name].append(reply.step_s)
        for c in ok:
            if self.results[c.name].status == "ok":
                self.records.record(c, **_with_round(self.results[c.name], windows[c.name]))
        timed = ", ".join(f"{c.name} {_ms(self.results[c.name].round_step_s[-1:])}" for c in ok)
        self.say(f"round {turn + 1}: {timed} ms/step")
        return True

    def _result(self, planned: tuple[Candidate, ...]) -> TuneResult:
        verdict = self.records.verdict()
        ordered = tuple(self.results[c.name] for c in planned if c.name in self.results)
        winner = self.results[verdict.winner] if verdict.winner else None
        cpu_split = None if self.gpus else self.cfg.virtual_devices
        return TuneResult(
            ordered, winner, cpu_split, verdict.tied, verdict.reason, self.links, self.probe_s,
            verdict.comparisons, self.cfg.margin, self._elapsed(),
        )  # fmt: skip

    def _elapsed(self) -> float:
        return time.perf_counter() - self.started

    def _limit(self) -> float:
        """The time a child may take to answer: its own bound, and what is left of the budget (at least 1 s)."""
        if self.cfg.budget_s is None:
            return self.cfg.timeout_s
        return max(1.0, min(self.cfg.timeout_s, self.cfg.budget_s - self._elapsed()))


class _Records:
    """What each candidate of one tune run has shown so far: its record, changed in one place (:meth:`record`).

    Args:
        margin: the ties' margin (``TuneConfig.margin``), for :meth:`verdict`.
        say: called with a line when a candidate fails.
    """

    def __init__(self, margin: float, say: Callable[[str], None]) -> None:
        self.margin, self.say = margin, say
        self.results: dict[str, CandidateResult] = {}

    def take(self, c: Candidate, reply: Any) -> None:
        """A child's reply, into its candidate's record."""
        kept = self.results.get(c.name) or _skipped(c, None, None, "")
        if isinstance(reply, Failed):
            status = reply.status if reply.status in STATUSES else "failed"
            if kept.status == "ok" and kept.round_step_s:  # a later window: its rounds so far stand
                self.record(c, detail=_joined(kept.detail, f"stopped after {kept.rounds} rounds: {reply.detail}"))
                self.results[c.name] = replace(self.results[c.name], status=status)
            else:
                self.record(c, status=status, detail=reply.detail)
            self.say(f"{c.name}: {status}: {reply.detail}")
        elif isinstance(reply, Ready):
            step = reply.step_s
            self.record(c, status="ok", batch=reply.batch, startup_s=reply.startup_s, step_s=step)
            self.record(c, examples_per_s=reply.batch / step if step else None)
        elif isinstance(reply, Captured):
            self.record(c, peak_memory=dict(reply.peak_memory), shares=dict(reply.shares), logdir=reply.logdir)

    def record(self, c: Candidate, **changes: Any) -> None:
        """Changes ``c``'s record (a ``skipped`` one with no why, where it has none yet)."""
        kept = self.results.get(c.name) or _skipped(c, None, None, "")
        self.results[c.name] = replace(kept, **changes)

    def verdict(self) -> Verdict:
        """The ties' judgement of the rounds so far: every process of every candidate timed ``ok``."""
        timings = [
            Timing(r.name, r.strategy, len(r.devices), rounds, process=k)
            for r in self.results.values()
            if r.status == "ok" and r.round_step_s
            for k, rounds in enumerate(r.process_step_s)
        ]
        return judge(timings, margin=self.margin)


# ----------------------------------------------------------------------------- small pure pieces


def _skipped(c: Candidate, predicted: float | None, plain: float | None, why: str) -> CandidateResult:
    """A candidate's record before it runs (``skipped``, and why; an empty why: it is about to start)."""
    return CandidateResult(
        c.name, c.strategy, c.devices, "skipped", predicted_step_s=predicted, detail=why,
        predicted_uncalibrated_s=plain,
    )  # fmt: skip


def _with_round(kept: CandidateResult, windows: list[float]) -> dict[str, Any]:
    """The fields one more round changes (``windows``: each process's, in process order): the round's
    step (the median of its processes' windows), each process's rounds, and the median and quartiles
    over the rounds.
    """
    processes = kept.process_step_s or tuple(() for _ in windows)
    timed = (*kept.round_step_s, statistics.median(windows))
    ordered = sorted(timed)
    step = statistics.median(ordered)
    return {
        "rounds": len(timed),
        "round_step_s": timed,
        "process_step_s": tuple((*rounds, w) for rounds, w in zip(processes, windows)),
        "step_s": step,
        "step_q1_s": ordered[len(ordered) // 4],
        "step_q3_s": ordered[(3 * len(ordered)) // 4],
        "examples_per_s": kept.batch / step if kept.batch and step else None,
    }


def _joined(first: str, second: str) -> str:
    return f"{first}; {second}" if first else second


def _ms(values: tuple[float, ...]) -> str:
    return "-" if not values else f"{1000 * values[-1]:.2f}"


def _predictions(c: Candidate, profile: Profile | None, links: tuple[Link, ...]) -> tuple[float | None, float | None]:
    """(calibrated, uncalibrated) predictions: with the probed copy costs per pair, and without."""
    if profile is None:
        return None, None
    plain = predict_step_s(c, profile)
    return (predict_step_s(c, replace(profile, links=links)) if links else plain), plain


def _profile(base: CandidateResult, captured: Captured, gpus: bool) -> Profile | None:
    """What predictions start from: the one-device run's step (its settled window) and its captured step."""
    step, measured = base.step_s, captured.profile
    if base.status != "ok" or measured is None or measured.compute_s is None or not step:
        return None
    # without the probed links: _predictions puts them in for the calibrated prediction, the plain one has none
    return replace(measured, step_s=step, compute_s=min(measured.compute_s, step), shared_compute=not gpus, links=())
