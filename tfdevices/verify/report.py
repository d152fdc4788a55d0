"""The placement report: queries, assertions that read as sentences, diffs and JSON."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from tfdevices.core.errors import InputError, PlacementAssertionError
from tfdevices.core.tables import Column, Table, markdown, plain
from tfdevices.core.units import format_bytes
from tfdevices.verify.clusters import cluster_runs, cluster_tables, type_tables
from tfdevices.verify.matching import device_matcher, name_matcher
from tfdevices.verify.records import (
    JSON_VERSION,
    XLA_CLUSTER,
    Collective,
    OpPlacement,
    PlacementDiff,
    Transfer,
    VariableRead,
    XlaOpPlacement,
    group_transfers,
    record_dict,
)

FORMS = ("table", "markdown", "json")  # what PlacementReport.render and `tfdevices placement --format` print


@dataclass(frozen=True)
class PlacementReport:
    """Where the ops of one captured run really ran.

    Attributes:
        ops: every executed op except function plumbing (``_Arg``, ``_Retval``, ``NoOp``)
            and transfers.
        transfers: every cross-device transfer (a tensor copied between devices: TensorFlow's
            ``_Send``/``_Recv`` pair, a memcpy on a GPU); filter with :meth:`transfers_between`.
        collectives: the collective ops (all-reduce and friends).
        graphs: each called function's graph as the program wrote it, as
            ``(namespace, graph)``, one namespace per call; ``graph`` is TensorFlow's
            traced graph (or a serialized GraphDef). ``tfdevices.tensorboard`` writes
            them with every node's executed device.
        busy_us: per device, the microseconds during which at least one of its kernels ran
            (on a GPU: its kernels on the device, by the GPU's clock).
        steps: the training steps the trace covers, where it marks them (Keras' ``train``
            step events in a profile); ``()`` when it does not say.
        cold: whether this is a first execution: something was traced during the capture, so
            its times include one-time set-up (tracing, kernel initialisation, autotuning);
            :func:`~tfdevices.verify.capture` warms up first unless asked not to.
        notes: what the report could not establish, as sentences: ops the profiler's trace does
            not tie to a device are reported on device ``"?"`` (:data:`UNKNOWN_DEVICE`) and named here.
    """

    ops: tuple[OpPlacement, ...]
    transfers: tuple[Transfer, ...] = ()
    collectives: tuple[Collective, ...] = ()
    graphs: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)
    busy_us: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    steps: tuple[int, ...] = ()
    cold: bool = False

    # -- queries

    @property
    def devices(self) -> tuple[str, ...]:
        """Every device that ran an op or took part in a transfer, sorted."""
        names = {op.device for op in self.ops} | {t.src for t in self.transfers} | {t.dst for t in self.transfers}
        return tuple(sorted(names))

    @property
    def op_counts(self) -> dict[str, int]:
        """Number of executed ops per device."""
        return dict(sorted(Counter(op.device for op in self.ops).items()))

    @property
    def kernel_counts(self) -> dict[str, int]:
        """Number of kernels TensorFlow executed per device (a fused kernel counts once)."""
        return dict(sorted(Counter(device for device, *_ in _kernels(self.ops)).items()))

    @property
    def xla_clusters(self) -> dict[str, tuple[str, int]]:
        """Each XLA cluster that ran: its function name -> ``(device, ops compiled together)``."""
        clusters: dict[str, tuple[str, int]] = {}
        for op in self.ops:
            if op.kernel == XLA_CLUSTER:
                device, count = clusters.get(op.kernel_name, (op.device, 0))
                clusters[op.kernel_name] = (device, count + 1)
        return clusters

    def ops_on(self, device: str) -> tuple[OpPlacement, ...]:
        """The ops that ran on ``device`` (a name or pattern such as ``"CPU:*"``).

        Raises:
            SpecError: ``device`` is not a TensorFlow device name or pattern.
        """
        on = device_matcher(device)
        return tuple(op for op in self.ops if on(op.device))

    def transfers_between(self, src: str | None = None, dst: str | None = None) -> tuple[Transfer, ...]:
        """The cross-device transfers from ``src`` and/or to ``dst`` (``report.transfers`` holds them all).

        Args:
            src: a device name or pattern for the sender, or ``None`` for any.
            dst: a device name or pattern for the receiver, or ``None`` for any.

        Returns:
            The matching transfers, in capture order.

        Raises:
            SpecError: ``src`` or ``dst`` is not a TensorFlow device name or pattern.
        """
        from_src = (lambda _: True) if src is None else device_matcher(src, what="src")
        to_dst = (lambda _: True) if dst is None else device_matcher(dst, what="dst")
        return tuple(t for t in self.transfers if from_src(t.src) and to_dst(t.dst))

    def variables_on(self, device: str | None = None) -> tuple[VariableRead, ...]:
        """Where each variable read happens: the variables stored on ``device`` and who reads them.

        A ``VariableRead`` whose ``read_on`` names another device is a weight copied
        across devices on every call: the classic silent slowdown.

        Args:
            device: a device name or pattern for the variables' device, ``None`` for all.

        Returns:
            One :class:`VariableRead` per ``ReadVariableOp`` executed.

        Raises:
            SpecError: ``device`` is not a TensorFlow device name or pattern.
        """
        on = (lambda _: True) if device is None else device_matcher(device)
        by_tensor: dict[tuple[int, str], list[Transfer]] = {}
        for t in self.transfers:
            by_tensor.setdefault((t.call, t.tensor.rsplit(":", 1)[0]), []).append(t)
        reads = []
        for op in self.ops:
            if op.type != "ReadVariableOp" or not on(op.device):
                continue
            sent = by_tensor.get((op.call, op.name), [])
            read_on = tuple(sorted({op.device} | {t.dst for t in sent})) if sent else (op.device,)
            size = next((t.bytes for t in sent if t.bytes is not None), None)
            reads.append(VariableRead(op=op.name, stored_on=op.device, read_on=read_on, bytes=size))
        return tuple(reads)

    # -- assertions

    def assert_on(self, device: str, ops: str | Iterable[str] = "*", *, types: Iterable[str] | None = None) -> None:
        """Checks that every executed op matching ``ops`` (and ``types``) ran on ``device``.

        Args:
            device: a TensorFlow device name (``"GPU:1"``, ``"/device:CPU:1"``) or pattern (``"CPU:*"``).
            ops: glob pattern(s) on the op names the program wrote, matched at any scope
                boundary (``"dense_2/*"`` matches ``"model/dense_2/MatMul"``); a leading
                ``"/"`` matches from the start only (``"/model/*"`` leaves out
                ``"gradient_tape/model/..."``).
            types: only ops of these model op types (``["MatMul"]``: the ops the program
                wrote, whichever kernel ran them; a fused kernel counts as each op it
                fused), or ``None`` for all.

        Raises:
            PlacementAssertionError: an op ran elsewhere, or no executed op matches.
            SpecError: ``device`` is a physical GPU index or not a device name.
            InputError: ``ops`` is not a pattern.
        """
        on, selected = device_matcher(device), self._select(ops, types)
        offenders = [op for op in selected if not on(op.device)]
        if offenders:
            where = Counter(op.device for op in offenders)
            listing = list_for_message(offenders, _where_ran)
            raise PlacementAssertionError(
                f"expected ops matching {ops!r} on {device}, but {len(offenders)} of {len(selected)} ran "
                f"elsewhere ({', '.join(f'{d}: {n}' for d, n in sorted(where.items()))}): {listing}.",
                hint=f"pin them with tf.device('{device}') where they are created, or create their "
                "variables on that device.",
            )

    def assert_no_transfers(self, src: str | None = None, dst: str | None = None) -> None:
        """Checks that no tensor was copied between devices (optionally only ``src`` -> ``dst``).

        Raises:
            PlacementAssertionError: transfers were found; the message lists them.
            SpecError: ``src`` or ``dst`` is not a TensorFlow device name or pattern.
        """
        found = self.transfers_between(src, dst)
        if found:
            scope = "" if src is None and dst is None else f" from {src or 'any device'} to {dst or 'any device'}"
            listing = list_for_message(found, Transfer.describe)
            raise PlacementAssertionError(
                f"expected no cross-device transfers{scope}, but {len(found)} ran "
                f"({format_bytes(_total(found))} where known): {listing}.",
                hint="keep each op on the device of its inputs and variables (report.variables_on() "
                "shows weights read from another device).",
            )

    def _select(self, ops: str | Iterable[str], types: Iterable[str] | None) -> list[OpPlacement]:
        named = name_matcher(ops)
        wanted = None if types is None else set([types] if isinstance(types, str) else types)
        by_name = [op for op in self.ops if named(op.name)]
        selected = [op for op in by_name if wanted is None or op.type in wanted]
        if selected:
            return selected
        if by_name and wanted is not None:
            listing = list_for_message(by_name, _where_ran)
            raise PlacementAssertionError(
                f"expected ops matching {ops!r} of types {sorted(wanted)} to check, but none of the "
                f"{len(by_name)} ops matching {ops!r} is of those types: {listing}.",
                hint="types name the ops the program wrote (MatMul, BiasAdd, Relu ...), whichever kernel "
                "ran them; pick types from this list.",
            )
        sample = ", ".join(sorted({op.name for op in self.ops})[:8]) or "none"
        raise PlacementAssertionError(
            f"expected ops matching {ops!r}{'' if types is None else f' of types {sorted(wanted or ())}'} "
            f"to check, but none of the {len(self.ops)} executed ops matches; they include: {sample}.",
            hint="check the pattern against report.ops (names are matched at scope boundaries).",
        )

    # -- comparison

    def diff(self, other: PlacementReport) -> PlacementDiff:
        """What changed from this report to ``other``: moved, added and removed ops, and transfers.

        Ops are matched by name (and occurrence, for names that repeat).
        """
        mine, theirs = _keyed(self.ops), _keyed(other.ops)
        moved = tuple(
            (k[0], mine[k].device, theirs[k].device) for k in mine if k in theirs and mine[k].device != theirs[k].device
        )
        added = tuple((k[0], theirs[k].device) for k in theirs if k not in mine)
        removed = tuple((k[0], mine[k].device) for k in mine if k not in theirs)
        return PlacementDiff(moved, added, removed, _pair_counts(self.transfers), _pair_counts(other.transfers))

    # -- output

    def summary(self) -> str:
        """A few lines for people: ops per device, transfers per device pair, collectives."""
        counts = ", ".join(f"{d}: {n}" for d, n in self.op_counts.items()) or "none"
        lines = [f"{len(self.ops)} ops on {len(self.op_counts)} device(s) ({counts})"]
        pairs = _pair_counts(self.transfers)
        lines.append(
            f"{len(self.transfers)} transfer(s)"
            + (
                f" ({format_bytes(_total(self.transfers))} where known): "
                + ", ".join(f"{p}: {n}" for p, n in pairs.items())
                if pairs
                else ""
            )
        )
        clusters = cluster_runs(self.ops)  # each cluster one unit: its ops under it, each run's time counted once
        if clusters:
            lines.append(
                f"{sum(len(c.ops) for c in clusters.values())} op(s) compiled together by XLA in {len(clusters)} "
                "cluster(s): "
                + ", ".join(
                    f"{name} on {c.device} ({len(c.ops)} ops; {c.runs} run(s), {'?' if c.us is None else f'{c.us:.0f}'}"
                    " us in all)"
                    for name, c in clusters.items()
                )
            )
        kinds = Counter(c.type for c in self.collectives)
        lines.append(
            f"{len(self.collectives)} collective(s)"
            + (": " + ", ".join(f"{t}: {n}" for t, n in sorted(kinds.items())) if kinds else "")
        )
        crossing = [r for r in self.variables_on() if r.crosses_devices]
        if crossing:
            lines.append(f"{len(crossing)} variable read(s) copied to another device every call")
        if self.steps:
            lines.append(f"step(s) covered: {_ranges(self.steps)}")
        gpu_busy = {d: us for d, us in self.busy_us.items() if d.rsplit("/", 1)[-1].startswith("GPU:")}
        if gpu_busy:
            lines.append("GPU busy (device clock): " + ", ".join(f"{d}: {us:.0f} us" for d, us in gpu_busy.items()))
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def tables(self, *, all_transfers: bool = False) -> list[Table]:
        """The report's tables, made once for :meth:`to_text` and :meth:`to_markdown`: ops per device (with the
        commonest types), GPU time by op type, XLA clusters and the instructions that took the most time,
        transfers, collectives, variable reads crossing devices.

        Transfers are grouped by source, destination and tensor (count and bytes, the
        commonest first); ``all_transfers=True`` lists each one.
        """
        kernels = self.kernel_counts
        rows = []
        for device, n in self.op_counts.items():
            types = Counter(op.type for op in self.ops if op.device == device).most_common(4)
            busy = self.busy_us.get(device)
            commonest = ", ".join(f"{t} ({c})" for t, c in types)
            rows.append(
                (device, str(n), commonest, str(kernels.get(device, 0)), "?" if busy is None else f"{busy:.0f} us")
            )
        ops = (Column("device"), Column("ops", right=True), Column("commonest ops"))
        out = [Table("", (*ops, Column("kernels", right=True), Column("busy", right=True)), tuple(rows))]
        out += type_tables(self.ops)
        out += cluster_tables(self.ops, self.busy_us)
        out.append(self._transfer_table(all_transfers))
        collectives = tuple((c.device, c.type, c.name, c.reduction) for c in self.collectives)
        columns = (Column("device"), Column("type"), Column("op", code=True), Column("reduction"))
        out.append(Table(f"Collectives: {len(self.collectives)}", columns, collectives))
        crossing = tuple(
            (r.op, r.stored_on, ", ".join(r.read_on), format_bytes(r.bytes))
            for r in self.variables_on()
            if r.crosses_devices
        )
        if crossing:
            columns = (Column("read op", code=True), Column("stored on"), Column("read on"), Column("size", right=True))
            out.append(Table(f"Variable reads crossing devices: {len(crossing)}", columns, crossing))
        return out

    def _transfer_table(self, all_transfers: bool) -> Table:
        groups = group_transfers(self.transfers)
        title, note = f"Transfers: {len(self.transfers)}", f"({len(groups)} distinct)" if self.transfers else ""
        where = (Column("src"), Column("dst"), Column("tensor", code=True), Column("dtype"), Column("shape"))
        rows: tuple[tuple[str, ...], ...]
        if not all_transfers:
            rows = tuple(
                (g.src, g.dst, g.tensor, g.dtype or "?", _shape(g.shape), str(g.count), format_bytes(g.bytes))
                for g in groups
            )
            return Table(title, (*where, Column("count", right=True), Column("bytes", right=True)), rows, note)
        rows = tuple(
            (t.src, t.dst, t.tensor, t.dtype or "?", _shape(t.shape), format_bytes(t.bytes)) for t in self.transfers
        )
        return Table(title, (*where, Column("size", right=True)), rows, note)

    def render(self, form: str = "table", *, all_transfers: bool = False) -> str:
        """What ``tfdevices placement`` prints: the :meth:`summary`, a blank line and the :meth:`tables` as aligned
        text (``form="table"``) or in Markdown (``"markdown"``); or the report as JSON (``"json"``).

        Raises:
            InputError: ``form`` is none of those.
        """
        if form == "json":
            return self.to_json()
        if form not in FORMS:
            raise InputError(f"no report format {form!r}: the formats are {', '.join(FORMS)}")
        tables = self.to_text if form == "table" else self.to_markdown
        return f"{self.summary()}\n\n{tables(all_transfers=all_transfers)}"

    def to_text(self, *, all_transfers: bool = False) -> str:
        """The :meth:`tables` as aligned plain text, for a terminal (``tfdevices placement``)."""
        return plain(self.tables(all_transfers=all_transfers))

    def to_markdown(self, *, all_transfers: bool = False) -> str:
        """The :meth:`tables` in Markdown, for a notebook or TensorBoard's Text tab."""
        return markdown(self.tables(all_transfers=all_transfers))

    def to_json(self) -> str:
        """The report as JSON (without the graphs); :meth:`from_json` reads it back."""
        return json.dumps(
            {
                "version": JSON_VERSION,
                "ops": [record_dict(op) for op in self.ops],
                "transfers": [asdict(t) for t in self.transfers],  # shapes are tuples: asdict copies them
                "collectives": [record_dict(c) for c in self.collectives],
                "busy_us": self.busy_us,
                "notes": list(self.notes),
                "steps": list(self.steps),
                "cold": self.cold,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> PlacementReport:
        """Reads :meth:`to_json` output back.

        Raises:
            InputError: ``text`` is not a placement report in JSON.
        """
        try:
            data = json.loads(text)
            return cls(
                ops=tuple(
                    (XlaOpPlacement if "fusion" in op else OpPlacement)(
                        **{**op, "kernels": tuple(op.get("kernels", ()))}
                    )
                    for op in data["ops"]
                ),
                transfers=tuple(
                    Transfer(**{**t, "shape": None if t["shape"] is None else tuple(t["shape"])})
                    for t in (data["transfers"] if "transfers" in data else data["copies"])  # an older word
                ),
                collectives=tuple(Collective(**c) for c in data["collectives"]),
                busy_us={str(k): float(v) for k, v in data.get("busy_us", {}).items()},
                notes=tuple(str(n) for n in data.get("notes", ())),
                steps=tuple(int(s) for s in data.get("steps", ())),
                cold=bool(data.get("cold", False)),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise InputError(
                f"not a placement report in JSON ({err}): {text[:80]!r}",
                hint="pass the output of PlacementReport.to_json().",
            ) from None


def _ranges(values: Iterable[int]) -> str:
    """``"1-3, 7"`` for ``[1, 2, 3, 7]``.

    >>> _ranges([7, 1, 2, 3])
    '1-3, 7'
    """
    runs: list[list[int]] = []
    for value in sorted(set(values)):
        if runs and runs[-1][1] == value - 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _ran_as(op: OpPlacement) -> str:
    """``"MatMul via _FusedMatMul"``, or just ``"MatMul"`` when the kernel is the op itself."""
    return op.type if op.kernel in ("", op.type) else f"{op.type} via {op.kernel}"


def _kernels(ops: Iterable[OpPlacement]) -> set[tuple[str, int, str, str, float | None]]:
    """The distinct kernels behind ``ops`` (a fused kernel's ops share one)."""
    return {(op.device, op.call, op.kernel, op.kernel_name or op.name, op.start_us) for op in ops}


def _total(transfers: Iterable[Transfer]) -> int:
    return sum(t.bytes or 0 for t in transfers)


def _pair_counts(transfers: Iterable[Transfer]) -> dict[str, int]:
    return dict(sorted(Counter(f"{t.src} -> {t.dst}" for t in transfers).items()))


def _keyed(ops: Iterable[OpPlacement]) -> dict[tuple[str, int], OpPlacement]:
    seen: Counter[str] = Counter()
    keyed = {}
    for op in ops:
        keyed[(op.name, seen[op.name])] = op
        seen[op.name] += 1
    return keyed


_LISTED = 20  # items an assertion message lists before "... N more"


def list_for_message(
    items: list[Any] | tuple[Any, ...], describe: Callable[[Any], str] = str, *, limit: int = _LISTED, sep: str = "; "
) -> str:
    """``"a; b; ... 5 more"``: what a message lists, at most ``limit`` items (:data:`_LISTED` by default)."""
    more = f"{sep}... {len(items) - limit} more" if len(items) > limit else ""
    return sep.join(describe(item) for item in items[:limit]) + more


def _shape(shape: tuple[int, ...] | None) -> str:
    return "?" if shape is None else str(list(shape))


def _where_ran(op: OpPlacement) -> str:
    return f"{op.name} ({_ran_as(op)}) on {op.device}"
