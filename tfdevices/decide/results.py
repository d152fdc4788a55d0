"""What tune measured: each candidate's record, the run's, and the table and JSON people read (pure)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from tfdevices.core.units import format_bytes
from tfdevices.decide.candidates import Link
from tfdevices.decide.ties import DEFAULT_MARGIN, Comparison

STATUSES = ("ok", "out_of_memory", "failed", "timeout", "skipped")


@dataclass(frozen=True)
class CandidateResult:
    """One candidate, as measured.

    Attributes:
        name, strategy, devices: the :class:`~tfdevices.decide.candidates.Candidate`.
        status: ``"ok"``, ``"out_of_memory"``, ``"failed"``, ``"timeout"`` or ``"skipped"``.
        step_s: the median of its rounds' median step times (``None`` unless it ran); ``step_q1_s``/``step_q3_s``
            their quartiles. Before its first round: its settled window's median.
        examples_per_s: the global batch over ``step_s``.
        predicted_step_s: the prediction from the one-device capture and the copy costs probed
            between each pair of devices (``None``: no basis).
        peak_memory: peak bytes per device (``"host"`` for logical CPUs, which share it).
        shares: from one captured step: ``{"step_us", "copies", "all_reduce", "idle": {device: share}}``.
        detail: why it did not run or stopped, in a line a user can act on (``HINT:``), or what it was.
        logdir: its TensorBoard run (``None`` without ``logdir``).
        rounds: the rounds it was timed in (one window each, interleaved with the other candidates').
        round_step_s: each round's step (the median of its processes' windows), in the order of the
            rounds (round ``i`` of every candidate ran at about the same time).
        processes: the processes it was timed in (``TuneConfig.processes``, less those that did not start).
        process_step_s: each process's windows, one a round: what :func:`~tfdevices.decide.ties.compare`
            compares, every process against every process of the other candidate.
        predicted_uncalibrated_s: the prediction with the one copy cost measured between the first
            two devices by the one-device run, for every pair (what tune predicted before the probe).
        batch: the global batch (examples a step); startup_s: its process' start to ready.
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
    batch: int = 0
    startup_s: float | None = None
    processes: int = 0
    process_step_s: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class TuneResult:
    """What tune measured: every candidate, those tied with the fastest, and the winner.

    Attributes:
        candidates: one :class:`CandidateResult` each, in plan order.
        winner: the fastest ok candidate, or the one the rule picks among those tied with it and
            measured within the margin of it (:func:`~tfdevices.decide.ties.judge`); ``None`` if none ran.
        cpu_split: logical CPUs the CPU was split into for the candidates (``None`` on GPUs).
        tied: names of the fastest candidate and those the rounds cannot tell from it by more than
            ``margin``, fastest first.
        reason: why the winner won, in words.
        links: the copy cost probed between each pair of devices (empty: not probed).
        probe_s: the probe's time (``None``: not probed).
        comparisons: every other candidate that ran against the fastest, by paired rounds
            (:class:`~tfdevices.decide.ties.Comparison`: ratio and 95% interval).
        margin: the practical margin: a difference under it is a tie.
        took_s: the run's time, start to end.
    """

    candidates: tuple[CandidateResult, ...]
    winner: CandidateResult | None
    cpu_split: int | None = None
    tied: tuple[str, ...] = ()
    reason: str = ""
    links: tuple[Link, ...] = ()
    probe_s: float | None = None
    comparisons: tuple[Comparison, ...] = ()
    margin: float = DEFAULT_MARGIN
    took_s: float | None = None

    def _baseline(self) -> CandidateResult | None:
        return next((c for c in self.candidates if c.strategy == "one_device" and c.status == "ok"), None)

    def table(self) -> str:
        """The candidates side by side (``*`` the winner, ``=`` tied with the fastest), the ties, and the winner.

        The last line names the winner, why it won, and the flags that reproduce it.
        """
        base = self._baseline()
        versus = {c.name: c for c in self.comparisons}
        marks = dict.fromkeys(self.tied, "= ") | ({self.winner.name: "* "} if self.winner else {})
        rows = [_HEAD] + [_row(c, base, marks.get(c.name, "  "), versus.get(c.name)) for c in self.candidates]
        widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines += [f"  {c.name}: {c.detail}" for c in self.candidates if c.detail]
        lines += self._notes()
        if self.winner is not None:
            why = f" ({self.reason})" if self.reason else ""
            lines.append(f"winner: {self.winner.name}{why}; reproduce with {self.flags()}")
        return "\n".join(lines)

    def _notes(self) -> list[str]:
        """How sure each ranking is, what the columns mean, the ties, the probe."""
        lines = [c.line() for c in self.comparisons]
        most = max((c.rounds for c in self.candidates), default=0)
        each = max((c.processes for c in self.candidates), default=0)
        if most:
            processes = f" in each of its {each} processes" if each > 1 else ""
            pairs = ", every process against every process, the interval spanning each pair's" if each > 1 else ""
            lines.append(
                f"step: the median of each candidate's rounds (q1-q3 of them), up to {most} rounds, each one window "
                f"of each candidate{processes} in turn; vs fastest: its step over the fastest's, round by round "
                f"(95% interval{pairs}); a candidate the rounds cannot show slower by more than {self.margin:.0%} "
                "is tied"
            )
        if len(self.tied) > 1:
            lines.append(f"tied: {', '.join(self.tied)}")
        if self.links:
            lines.append(f"predicted: from the one-device capture and {_links(self.links, self.probe_s)}")
        if self.took_s is not None:
            lines.append(f"took {self.took_s:.0f} s")
        return lines

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
            "layers": {"devices": list(w.devices), "balance_by": "time", "every_device": True}
            if w.strategy == "split"
            else None,
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
                "comparisons": [asdict(c) | {"line": c.line()} for c in self.comparisons],
                "margin": self.margin,
                "took_s": self.took_s,
                "links": [asdict(link) for link in self.links],
                "probe_s": self.probe_s,
            },
            indent=1,
        )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.2f}"


_HEAD = (
    "candidate",
    "status",
    "step ms (q1-q3)",
    "vs fastest (95%)",
    "rounds",
    "predicted",
    "examples/s",
    "scaling",
    "peak memory",
    "copies",
    "all-reduce",
    "idle (max)",
)


def _versus(c: Comparison | None, ran: bool) -> str:
    if c is None:
        return "fastest" if ran else "-"
    if c.low is None or c.high is None:
        return f"{c.ratio - 1:+.0%} (no interval)"
    return f"{c.ratio - 1:+.0%} ({c.low - 1:+.0%} to {c.high - 1:+.0%})"


def _row(c: CandidateResult, base: CandidateResult | None, mark: str, versus: Comparison | None) -> tuple[str, ...]:
    scaling = "-"
    if c.examples_per_s and base is not None and base.examples_per_s:
        scaling = f"{c.examples_per_s / base.examples_per_s / len(c.devices):.0%}"
    step = "-" if c.step_s is None else f"{_ms(c.step_s)} ({_ms(c.step_q1_s)}-{_ms(c.step_q3_s)})"
    idle = c.shares.get("idle") or {}
    return (
        mark + c.name,
        c.status,
        step,
        _versus(versus, bool(c.round_step_s) and c.status == "ok"),
        str(c.rounds),
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
