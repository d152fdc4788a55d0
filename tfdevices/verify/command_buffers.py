"""XLA's command buffers on a GPU: each kernel run inside one tied to the HLO instruction it came from.

XLA on GPUs runs a compiled step's kernels inside CUDA graphs (*command buffers*) by default,
and the profile then names the graph, not the instruction, in each kernel's ``hlo_op``
(``command_buffer_1``). A graph runs a stretch of one computation's commands
(:class:`~tfdevices.verify.hlo.Command`) in their schedule's order: each fusion launches its
kernel, named after the fusion (or after an identical fusion XLA compiled once), and each
library call (cuBLAS, cuDNN) launches one kernel or more under the library's names. One run
of a graph (its kernels share the graph launch's ``correlation_id``), in the order its
kernels ran, is read against those commands by :func:`place_run`:

* a kernel named after a fusion is the next fusion in order when that one has its name, else
  the later fusion of its name (the fusions between launched no kernel: a memset, a copy),
  else the next fusion when it has its family (an identical fusion, sharing the kernel),
  else the fusion just placed when it is that one (a fusion of two kernels);
* the library kernels between two fusions are the library calls between them: one each
  when the counts agree, all of one call's when there is one call, each shared by the calls
  when there are more kernels than calls (every call launches a kernel at least);
* the library kernels before the first fusion (after the last) are the library calls right
  before it (after it).

Where the kernels stop following the commands, :class:`Placed` says why (:class:`Untied`) and
from which kernel on; the kernels from there are read as they would be without the order.

>>> from tfdevices.verify.hlo import Command, HloModule, Launch
>>> module = HloModule("jit_step")
>>> module.sequences["main"] = (Command("fusion.1", Launch.KERNEL, "kLoop fusion"),
...                             Command("custom-call.2", Launch.LIBRARY, "cuBLAS"),
...                             Command("fusion.3", Launch.KERNEL, "kLoop fusion"))
>>> module.where.update({c.name: ("main", i) for i, c in enumerate(module.sequences["main"])})
>>> place_run(("fusion_1", "sm90_gemm", "fusion_3"), module).instructions
(('fusion.1',), ('custom-call.2',), ('fusion.3',))
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tfdevices.verify.hlo import Command, HloModule, Launch

#: The most places in its computation a run's first kernel is tried at (identical fusions share its name).
MAX_STARTS = 32


class Untied(enum.Enum):
    """Why a graph's kernels stopped following its computation's commands."""

    MISSING = "no kernel of theirs is named after an instruction of a computation the profile's HLO holds"
    ORDER = "their kernels do not follow the order of their computation's instructions in the profile's HLO"
    SURPLUS = "they ran more kernels than their computation's instructions in the profile's HLO launch"
    CONTROL = "a loop or condition runs inside them, whose kernels are not read by their order"


@dataclass(frozen=True)
class Placed:
    """Each kernel of one graph run tied to its instructions by their order.

    Attributes:
        instructions: for each kernel, the instructions it ran for (several: a library kernel
            shared by calls whose kernel counts differ); ``()`` for a kernel not placed by order.
        computation: the computation the run was read against (``""`` when none was found).
        cause: why kernels stopped following the commands (``None``: every kernel is placed).
        at: the first kernel not placed by order (``len(instructions)`` when all are).
    """

    instructions: tuple[tuple[str, ...], ...]
    computation: str = ""
    cause: Untied | None = None
    at: int = 0

    @property
    def ordered(self) -> int:
        """How many kernels are placed by order."""
        return sum(1 for names in self.instructions if names)


def place_run(names: tuple[str, ...], module: HloModule) -> Placed:
    """Ties each kernel of one run of a command buffer, in the order they ran, to its instructions.

    Args:
        names: the run's kernel names, in the order they ran.
        module: the module's HLO.

    Returns:
        The kernels' instructions; the run's first kernel named after a fusion is tried at each
        place of its computation it may be (at most :data:`MAX_STARTS`), and the reading that
        places the most kernels wins. A loop's body runs again: where its commands end and kernels
        go on, the rest is read from its start again.
    """
    placed = _place_once(names, module)
    done: list[tuple[str, ...]] = list(placed.instructions[: placed.at])
    while placed.cause is Untied.SURPLUS and placed.computation in module.loops and 0 < placed.at < len(names):
        names = names[placed.at :]
        placed = _place_once(names, module)
        done += placed.instructions[: placed.at]
    return Placed((*done, *placed.instructions[placed.at :]), placed.computation, placed.cause, len(done))


def _place_once(names: tuple[str, ...], module: HloModule) -> Placed:
    """:func:`place_run` for one pass through a computation's commands."""
    own = tuple(_fusion_of(name, module) for name in names)
    first = next((i for i, command in enumerate(own) if command is not None), None)
    if first is None:
        return Placed(((),) * len(names), "", Untied.MISSING, 0)
    computation, at = module.where[own[first].name]  # type: ignore[union-attr]
    reading = _Reading(computation, module.sequences[computation], own)
    family = reading.commands[at].family
    starts = [at] + [i for i, c in enumerate(reading.commands) if c.family == family and i != at][: MAX_STARTS - 1]
    return max((reading.walk(start, first) for start in starts), key=lambda placed: placed.ordered)


def _fusion_of(name: str, module: HloModule) -> Command | None:
    """The fusion a kernel is named after, when it is a command XLA's own kernel runs; else ``None``."""
    instruction = module.instruction_of(name)
    command = module.command(instruction) if instruction else None
    return command if command is not None and command.launch is Launch.KERNEL else None


class _Reading:
    """One run's kernels read against one computation's commands (internal)."""

    def __init__(self, computation: str, commands: tuple[Command, ...], own: tuple[Command | None, ...]) -> None:
        self.computation = computation
        self.commands = commands
        self.own = own  # each kernel's fusion by its name, None for a library's kernel
        self.index = {c.name: i for i, c in enumerate(commands)}
        self.controls = [i for i, c in enumerate(commands) if c.launch is Launch.CONTROL]

    def walk(self, start: int, first: int) -> Placed:
        """The kernels placed with kernel ``first`` at command ``start``, up to the first that does not follow."""
        placed: list[tuple[str, ...]] = [()] * len(self.own)
        before = _library_run(self.commands, start, -1)[-first:] if first else ()
        cause = _libraries(placed, list(range(first)), before)
        if cause is not None:
            return self._stop(placed, cause, 0)
        placed[first] = (self.commands[start].name,)
        here, pending = start + 1, []
        for i in range(first + 1, len(self.own)):
            fusion = self.own[i]
            if fusion is None:
                pending.append(i)
                continue
            found = self._next_fusion(here, fusion)
            if found == here - 1 and pending:  # not the fusion just placed again: library kernels ran between
                found = (
                    Untied.ORDER
                    if any(c.launch is not Launch.LIBRARY for c in self.commands[here:])
                    else Untied.SURPLUS
                )
            if found is Untied.SURPLUS and pending and self._trailing(placed, pending, here):
                pending = []  # the library calls after the last fusion ran them: the kernels after are more
            if isinstance(found, Untied):
                return self._stop(placed, found, pending[0] if pending else i)
            cause = _libraries(placed, pending, self.commands[here:found])
            if cause is not None:
                return self._stop(placed, cause, pending[0] if pending else i)
            placed[i] = (self.commands[found].name,)
            here, pending = found + 1, []
        if pending and not self._trailing(placed, pending, here):
            left = any(c.launch is not Launch.LIBRARY for c in self.commands[here:])
            return self._stop(placed, Untied.ORDER if left else Untied.SURPLUS, pending[0])
        return Placed(tuple(placed), self.computation, None, len(self.own))

    def _trailing(self, placed: list[tuple[str, ...]], pending: list[int], here: int) -> bool:
        """Ties library kernels after the last fusion placed to the library calls from ``here`` on; whether it did."""
        return _libraries(placed, pending, _library_run(self.commands, here, 1)[: len(pending)]) is None

    def _stop(self, placed: list[tuple[str, ...]], cause: Untied, at: int) -> Placed:
        return Placed(tuple(placed), self.computation, cause, at)

    def _next_fusion(self, here: int, fusion: Command) -> int | Untied:
        """Where a kernel named after ``fusion`` runs: the next fusion when it has its name, the later one of its
        name, the next one when it has its family, else the fusion just placed when it is that one (a fusion of
        two kernels); why not, when none is.
        """
        commands, last = self.commands, here - 1
        following = next((i for i in range(here, len(commands)) if commands[i].launch is not Launch.LIBRARY), None)
        if following is None:
            return last if commands[last].name == fusion.name else Untied.SURPLUS
        command = commands[following]
        if command.launch is Launch.CONTROL:
            return Untied.CONTROL
        if command.name == fusion.name:
            return following
        later = self.index.get(fusion.name, -1)
        if later > following and not any(following < c < later for c in self.controls):
            return later
        if command.family == fusion.family:
            return following
        return last if commands[last].name == fusion.name else Untied.ORDER


def _library_run(commands: tuple[Command, ...], edge: int, step: int) -> tuple[Command, ...]:
    """The library calls next to ``edge``, in order: those right before it (``step`` -1) or from it on (1)."""
    out: list[Command] = []
    i = edge - 1 if step < 0 else edge
    while 0 <= i < len(commands) and commands[i].launch is Launch.LIBRARY:
        out.append(commands[i])
        i += step
    return tuple(reversed(out)) if step < 0 else tuple(out)


def _libraries(placed: list[tuple[str, ...]], kernels: list[int], between: tuple[Command, ...]) -> Untied | None:
    """Ties library ``kernels`` to the library calls among ``between``: one each when the counts agree, all to the
    one call, else each shared by the calls. Returns why not: a call left without a kernel (every call launches
    one at least), or a loop or condition among them.
    """
    if any(c.launch is Launch.CONTROL for c in between):
        return Untied.CONTROL
    calls = [c.name for c in between if c.launch is Launch.LIBRARY]
    if len(kernels) < len(calls) or (kernels and not calls):
        return Untied.ORDER
    for n, kernel in enumerate(kernels):
        placed[kernel] = (calls[n],) if len(calls) == len(kernels) else tuple(calls)
    return None
