"""Demos: absl apps that show the toolkit at work (``tfdevices demo NAME [flags]``).

Each demo is ``tfdevices/demos/<name>.py``: module-level flags (the toolkit's, from
:func:`tfdevices.flags.define_flags`, plus its own), ``main(argv)``, and
``run_script(sys.modules[__name__])`` when run as a script (``python -m tfdevices.demos.mirrored``).

``--help`` (``--helpshort``, ``-?``) shows a demo's description and its own flags and exits 0;
``--helpfull`` adds every other flag. Bad input is one line with a HINT, never a traceback, and
exits with the entry point's status for bad input: 2 under ``tfdevices demo NAME`` (as every
``tfdevices`` command), 1 under ``python -m tfdevices.demos.NAME`` (absl's).

>>> "mirrored" in DEMOS and "tasks" in DEMOS
True
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

from tfdevices.core.errors import InputError, TfDevicesError, UsageError

DEMOS: dict[str, str] = {
    "mirrored": "train a small Keras model with the chosen strategy (logical CPUs when there is no GPU), "
    "print replicas, throughput and where the TensorBoard logs are",
    "tasks": "two independent computations on two devices and a final op that needs both: "
    "the cross-device copy it costs, measured",
    "layers": "plan a Keras model's layers onto devices, place them, and compare the by-hand tf.device habit "
    "with the placed model: weights read across devices, activation transfers, the plan table",
    "workers": "one process per GPU: run alone, under 'tfdevices launch -n N --' or srun; each worker takes "
    "its GPU, trains with MultiWorkerMirroredStrategy and prints its weights checksum",
}


def run_demo(name: str, argv: list[str]) -> int:
    """Runs demo ``name`` as ``tfdevices demo NAME ARGS`` does.

    Args:
        name: a key of :data:`DEMOS`.
        argv: the demo's command-line arguments, e.g. ``["--epochs=1"]``.

    Returns:
        0 on success, and after ``--help``/``--helpshort``/``--helpfull`` (the demo's own flags first).

    Raises:
        TfDevicesError: bad input: ``name`` is not a demo, a flag is malformed (a
            :class:`~tfdevices.core.errors.UsageError`), or the flags ask for what cannot be
            had (``--gpus=0`` without GPUs); the ``tfdevices`` command prints it as one line
            and exits with status 2, as for any bad input.
    """
    if name not in DEMOS:
        import difflib  # noqa: PLC0415 (only for a name that is not a demo)

        close = difflib.get_close_matches(name, list(DEMOS), n=1, cutoff=0.6)
        raise InputError(
            f"demo {name!r} does not exist; demos: {', '.join(sorted(DEMOS))}.",
            hint=(f"did you mean 'tfdevices demo {close[0]}'? " if close else "")
            + "'tfdevices demo' describes them, 'tfdevices demo NAME --help' lists one's flags.",
        )
    return _run(importlib.import_module(f"tfdevices.demos.{name}"), f"tfdevices demo {name}", argv)


def run_script(module: Any) -> NoReturn:
    """``python -m tfdevices.demos.NAME``: runs the demo as an absl app, in absl's terms: bad input
    is one line (what, and a HINT) and exit status 1; ``--help`` shows the demo's own flags, status 0.
    """
    prog = f"python -m {module.__spec__.name}" if getattr(module, "__spec__", None) else sys.argv[0]
    try:
        status = _run(module, prog, sys.argv[1:])
    except TfDevicesError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        status = 1
    except BrokenPipeError:  # `--help | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 0
    sys.exit(status)


def no_arguments(argv: list[str]) -> None:
    """A demo's ``main`` takes flags only: anything else is a usage error naming it."""
    if len(argv) > 1:
        raise UsageError(
            f"unexpected arguments: {' '.join(argv[1:])} (a demo takes flags only).",
            hint="write flags as --name=value; --help lists them.",
        )


HELP = ("--help", "-help", "--helpshort", "-helpshort", "-?", "--helpfull", "-helpfull")


def _run(module: Any, prog: str, argv: list[str]) -> int:
    from absl import app  # noqa: PLC0415 (lazy absl: when a demo runs)

    asked = next((a for a in argv[: argv.index("--") if "--" in argv else len(argv)] if a in HELP), None)
    if asked is not None:
        print(demo_help(module, prog, full=asked.endswith("helpfull")))
        return 0
    try:
        app.run(module.main, argv=[prog, *argv], flags_parser=lambda args: _parse(args, prog))
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def _parse(argv: list[str], prog: str) -> list[str]:
    """Absl's parse, its errors as one-line usage errors (absl's own would print the usage and exit)."""
    from absl import flags  # noqa: PLC0415 (lazy absl: when a demo runs)

    try:
        return flags.FLAGS(argv)
    except flags.Error as err:
        text = str(err)
        match = re.match(r"^flag (--[\w]+)=.*?: (?=\1[ =])", text)  # absl's prefix, when the message repeats it
        message, _, hint = text[match.end() if match else 0 :].partition(" HINT: ")
        raise UsageError(
            message if message.endswith(".") else message + ".", hint=hint or f"'{prog} --help' lists its flags."
        ) from None


def demo_help(module: Any, prog: str, *, full: bool = False) -> str:
    """The demo's description and its own flags (the toolkit's it adopts included); with ``full``,
    every flag after them.
    """
    from absl import flags  # noqa: PLC0415 (lazy absl: when a demo runs)

    own = flags.FLAGS.module_help(module)
    text = f"{(module.__doc__ or '').strip()}\n\nUSAGE: {prog} [flags]\n\nflags of this demo:\n{own}\n"
    if full:
        return text + "\nall flags:\n" + flags.FLAGS.get_help()
    return text + "\n--helpfull lists every flag (absl's too)."


@contextlib.contextmanager
def shown_in_tables() -> Iterator[None]:
    """Holds back the ``tfdevices`` log lines while a demo configures: every one of them (a note, the
    strategy's warning) is in the tables it prints next, so it is said once.
    """
    log = logging.getLogger("tfdevices")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
