"""The ``tfdevices`` command: one argparse parser, one subparser per command.

Every error, a bad argument included, is printed as one line (what was asked,
what exists, a HINT) with exit status 2; never a traceback and never usage text
spread over many lines.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tfdevices.core.errors import TfDevicesError, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing for `tfdevices list`
if TYPE_CHECKING:
    from typing import Any, NoReturn


EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are :class:`UsageError`: one line naming what was wrong as typed,
    with the fix for that case as HINT (a close option, where an option goes, an example).
    """

    example = ""
    """A command line that works, for the HINT of a missing argument (``tfdevices select auto:2``)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        err = UsageError(*_explain(self, message, getattr(self, "_argv", [])))
        err.command = self.prog
        raise err


def _explain(parser: argparse.ArgumentParser, message: str, argv: list[str]) -> tuple[str, str]:
    """Argparse's complaint, said from what was typed: ``(message, hint)``."""
    import difflib

    options = parser._option_string_actions  # pylint: disable=protected-access
    unknown, misplaced, command = _scan(parser, argv)
    help_line = f"'{parser.prog} --help' lists its options"
    if unknown and not message.startswith("unrecognized"):
        message = f"unrecognized arguments: {' '.join(unknown)} (and {message})"
    if message.startswith("unrecognized"):
        words = unknown or message.split(": ", 1)[1].split()
        name = words[0].split("=")[0]
        longs = {o[2:]: o for o in options if o.startswith("--")}
        close = [longs[c] for c in difflib.get_close_matches(name.lstrip("-"), list(longs), n=1, cutoff=0.75)]
        elsewhere = [c for c, (_, takes, _) in COMMANDS.items() if name == "--inventory" and takes]
        hint = (
            f"did you mean {close[0]}? ({help_line})"
            if close
            else f"{name} is an option of {', '.join(elsewhere)}, not of {parser.prog}."
            if elsewhere
            else f"{help_line}."
            if name.startswith("-")
            else f"{parser.prog} takes no {name!r} here; {help_line}."
        )
        return f"{message}.", hint
    if message.startswith("the following arguments are required") and misplaced:
        typed = " ".join(misplaced)
        fixed = " ".join([parser.prog, *misplaced, "--", *[a for a in command if a not in misplaced]])
        return (
            f"{message} ({typed!r} comes after the command {command[0]!r}, so it went to the command).",
            f"put {parser.prog}'s options before '--' and the command: {fixed}",
        )
    if message.startswith("the following arguments are required"):
        example = getattr(parser, "example", None)
        return f"{message}.", f"e.g. {example} ({help_line})." if example else f"{help_line}."
    flag = message[len("argument ") :].split(":", 1)[0] if message.startswith("argument ") else ""
    action = next(
        (a for a in parser._actions if "/".join(a.option_strings) == flag or a.dest == flag or a.metavar == flag), None
    )
    if action is not None and action.choices and "invalid choice: " in message:
        typed = message.split("invalid choice: ", 1)[1].split(" (choose", 1)[0].strip("'")
        close = difflib.get_close_matches(typed, list(action.choices), n=1, cutoff=0.6)
        what = "the commands" if flag == "COMMAND" else f"what {flag} takes"
        return f"{message}.", (
            f"did you mean {close[0]!r}? " if close else ""
        ) + f"'{parser.prog} --help' lists {what}."
    if action is not None and action.help and action.help != argparse.SUPPRESS:
        return f"{message}.", f"{flag}: {action.help % vars(action) if '%' in action.help else action.help}."
    return f"{message}.", f"{help_line}."


def _scan(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Reads ``argv`` as the parser would: ``(unknown options before the command, this parser's options
    typed after the command, the command)`` (the command: a ``REMAINDER`` argument such as launch's).
    """
    options = parser._option_string_actions  # pylint: disable=protected-access
    remainder = any(a.nargs == argparse.REMAINDER for a in parser._actions)  # pylint: disable=protected-access
    unknown: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--" or not word.startswith("-") or word == "-":
            break
        action = options.get(word.split("=", 1)[0])
        if action is None:
            unknown.append(word)
        elif "=" not in word and action.nargs != 0 and action.nargs != "?":
            i += 1  # its value
        i += 1
    command = argv[i + (argv[i : i + 1] == ["--"]) :] if remainder else []
    misplaced: list[str] = []
    for j, word in enumerate(command[1:], 1):
        action = options.get(word.split("=", 1)[0])
        if action is not None and action.required:
            misplaced += [word] if "=" in word or j + 1 >= len(command) else [word, command[j + 1]]
    return unknown, misplaced, command


def _inventory(args: argparse.Namespace, *, topology: bool = True, users: bool = False, sensors: bool = True) -> Any:
    """``--inventory FILE`` read like ``TFDEVICES_INVENTORY=FILE``: this process's mask applies to it.

    Args:
        args: the parsed arguments (``args.inventory``).
        topology: read the wiring from NVML (a file holds what it holds).
        users: name each GPU process's user and command from ``/proc``.
        sensors: read temperature, fan, power, clocks, ECC errors and processes (what the listing shows).
    """
    from tfdevices.gpus import visibility
    from tfdevices.gpus.discovery import discover
    from tfdevices.gpus.inventory import Inventory

    if args.inventory:
        return visibility.apply(Inventory.load(args.inventory), os.environ)
    return discover(topology=topology, users=users, sensors=sensors)


def _cmd_list(args: argparse.Namespace) -> int:
    def listing() -> str:
        inventory = _inventory(args, topology=args.json, users=args.json or args.processes)
        return inventory.to_json() if args.json else inventory.table(processes=args.processes)

    if args.watch is None:
        print(listing())
        return 0
    return watch(listing, args.watch, sys.stdout)


CLEAR = "\x1b[H\x1b[2J"
"""Home the cursor and clear the screen (ANSI), as ``watch`` and ``gpustat -i`` redraw."""


def watch(render: Any, seconds: float, out: Any, *, sleep: Any = None, clock: Any = None) -> int:
    """Prints ``render()`` every ``seconds`` until Ctrl-C: redrawn in place on a terminal, one
    listing after another (each headed by its time) otherwise.

    Args:
        render: returns the text to show.
        seconds: the interval.
        out: where to write (a terminal is redrawn in place).
        sleep: ``time.sleep`` (tests pass their own).
        clock: returns the time shown in the header (``time.strftime('%H:%M:%S')`` by default).

    Returns:
        0 when ended by Ctrl-C (KeyboardInterrupt).
    """
    import time

    sleep = sleep or time.sleep
    clock = clock or (lambda: time.strftime("%Y-%m-%d %H:%M:%S"))
    tty = out.isatty() if hasattr(out, "isatty") else False
    try:
        while True:
            text = render()
            head = f"{clock()}  every {seconds:g}s (Ctrl-C ends)"
            out.write(f"{CLEAR}{head}\n{text}\n" if tty else f"{head}\n{text}\n\n")
            out.flush()
            sleep(seconds)
    except KeyboardInterrupt:
        if tty:
            out.write("\n")
        out.flush()
        return 0


def _cmd_topo(args: argparse.Namespace) -> int:
    from tfdevices.core.errors import InventoryFileError
    from tfdevices.gpus.topology import LEGEND

    inventory = _inventory(args, topology=True, sensors=False)
    topo = inventory.topology
    if topo is None:
        if args.inventory and inventory.gpus:
            raise InventoryFileError(
                f"inventory file {args.inventory!r} holds no topology.",
                hint="save one with 'tfdevices list --json' (or 'tfdevices topo --json').",
            )
        why = inventory.reason or "NVML gave no topology"
        print(_json({"topology": None, "reason": why}) if args.json else f"no topology: {why}")
        return 0
    if args.json:
        print(_json(topo.to_dict()))
        return 0
    print(topo.table())
    if topo.origin and topo.origin != "nvml":
        print(f"\nsource: {topo.origin}")
    if not args.no_legend:
        print("\n" + LEGEND)
    return 0


def _json(data: object) -> str:
    import json  # only for --json: the listing path stays clear of it

    return json.dumps(data, indent=2)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (write 2 or 0.5)") from None
    if not 0.1 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is outside 0.1..86400 seconds")
    return value


def _cmd_select(args: argparse.Namespace) -> int:
    from tfdevices.core.errors import CLI
    from tfdevices.gpus.selection import select

    sel = select(
        args.spec,
        _inventory(args, topology=_wiring_matters(args.spec), sensors=False),  # chosen by memory, load and wiring
        min_free_memory=args.min_free_memory,
        max_utilization=args.max_utilization,
        exclude=args.exclude,
        order=args.order,
        terms=CLI,
    )
    if args.format == "json":
        print(sel.to_json())
    elif args.format == "table":
        print(sel.table())
    else:
        print(sel.table(), file=sys.stderr)
        for name, value in sel.env().items():
            print(f"export {name}={value}")
    return 0


def _wiring_matters(spec: str) -> bool:
    """Whether a spec can choose among GPUs by their wiring, or show it: not ``auto:1``, one GPU by name, or
    none (NVML's wiring reads are left out there). A spec that does not parse reads it: ``select`` says why.
    """
    from tfdevices.core.errors import SpecError
    from tfdevices.gpus.spec import parse_spec

    try:
        parsed = parse_spec(spec)
    except SpecError:
        return True
    if parsed.kind == "auto":
        return (parsed.count or 0) >= 2
    return parsed.kind == "all" or len(parsed.keys) >= 2


def _use_inventory(args: argparse.Namespace) -> None:
    """Hands ``--inventory FILE`` on to the processes a command starts (``TFDEVICES_INVENTORY``)."""
    from tfdevices import runtime

    runtime.quiet_tensorflow_logs()
    if args.inventory:
        runtime.use_inventory_file(args.inventory)


def _cmd_demo(args: argparse.Namespace) -> int:
    from tfdevices.demos import DEMOS, run_demo

    if not args.name:
        print("demos:\n" + "\n".join(f"  {n:<10} {d}" for n, d in DEMOS.items()))
        return 0
    _use_inventory(args)
    return run_demo(args.name, list(args.rest))


def _cmd_launch(args: argparse.Namespace) -> int:
    from tfdevices.jobs import launch_command

    _use_inventory(args)
    return launch_command.run(args)


def _cmd_placement(args: argparse.Namespace) -> int:
    from tfdevices import runtime
    from tfdevices.tensorboard.writer import load_placement

    runtime.quiet_tensorflow_logs()  # TensorFlow starts to read the logs: its start-up lines are noise here

    if args.trace:
        from tfdevices.tensorboard.trace import write_trace

        path = write_trace(load_placement(args.logdir, name=args.name, profile=args.profile), args.trace)
        print(f"wrote {path}: open it in Perfetto (ui.perfetto.dev) or chrome://tracing")
        return 0
    report = load_placement(args.logdir, name=args.name, profile=args.profile)
    print(report.render("json" if args.json else args.format, all_transfers=args.all_transfers))
    return 0


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction (write 0.5 or 50%)") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is outside 0..1 (write 0.5 or 50%)")
    return value


def _add_list(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON that --inventory and TFDEVICES_INVENTORY read back (with processes and topology)",
    )
    p.add_argument(
        "--processes", action="store_true", help="list each GPU's processes: pid, user, GPU memory, kind, command"
    )
    p.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        type=_seconds,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C, like gpustat -i",
    )
    p.set_defaults(run=_cmd_list)


def _add_topo(p: argparse.ArgumentParser) -> None:
    p.description = (
        "How the GPUs are wired, as 'nvidia-smi topo -m' shows it: NV# (bonded NVLinks), PIX, PXB, "
        "PHB, NODE, SYS, with each GPU's CPU and NUMA affinity (from NVML)."
    )
    p.add_argument("--json", action="store_true", help="print the topology as JSON")
    p.add_argument("--no-legend", action="store_true", help="leave out the legend")
    p.set_defaults(run=_cmd_topo)


def _add_select(p: argparse.ArgumentParser) -> None:
    from tfdevices.gpus.spec import SPEC_FORMS

    p.description = 'Choose GPUs. Use as: eval "$(tfdevices select auto:2)"'
    p.add_argument("spec", help=SPEC_FORMS)
    p.add_argument("--min-free-memory", metavar="SIZE", help="skip GPUs with less free memory, e.g. 8GiB")
    p.add_argument("--max-utilization", metavar="FRACTION", type=_fraction, help="skip busier GPUs, e.g. 0.5 or 50%%")
    p.add_argument("--exclude", metavar="SPEC", help="GPUs never to take, e.g. 0,3")
    p.add_argument(
        "--order",
        default="links",
        choices=("links", "free_memory", "utilization", "index"),
        help="how auto:N ranks GPUs (default: links: the best-wired set, then free memory; "
        "the others ignore the wiring)",
    )
    p.add_argument(
        "--format",
        default="env",
        choices=("env", "json", "table"),
        help="env: shell exports on stdout, the decisions on stderr (default)",
    )
    p.set_defaults(run=_cmd_select)


def _add_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="demo name")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the demo's flags (see NAME --helpfull)")
    p.set_defaults(run=_cmd_demo)


def _add_launch(p: argparse.ArgumentParser) -> None:
    from tfdevices.jobs.launch_command import add_arguments

    p.description = (
        "Start N workers with TF_CONFIG on this machine, or N on each of several machines "
        "(the same command on each, with --nnodes, --node-rank and --master-addr); each worker "
        "gets its GPU(s), a crashed job restarts (--max-restarts), a stalled one is named."
    )
    add_arguments(p)
    p.set_defaults(run=_cmd_launch)


def _cmd_configure(args: argparse.Namespace) -> int:
    from tfdevices.core.errors import CLI
    from tfdevices.runtime import configure

    if not args.dry_run:
        raise UsageError(
            "configure plans only here: a process configures itself with tfdevices.configure().",
            hint="add --dry-run to see what configure() would mask, split and limit.",
        )
    config = configure(
        args.spec,
        memory_growth=args.memory_growth or None,
        memory_limit=_memory_limit(args.memory_limit),
        virtual_devices=args.virtual_devices,
        inventory=_inventory(args),
        dry_run=True,
        terms=CLI,
    )
    print(config.table())
    return 0


def _memory_limit(text: str | None) -> str | list[str] | dict[str, str | list[str]] | None:
    """``4GiB`` (every GPU), ``6GiB+2GiB`` (a split: one size per logical device), ``0=8GiB,1=6GiB+2GiB`` (by GPU)."""
    if text is None:
        return None

    def sizes(part: str) -> str | list[str]:
        return part.split("+") if "+" in part else part

    if "=" not in text:
        return sizes(text)
    pairs = [item.partition("=") for item in text.split(",")]
    return {key.strip(): sizes(value.strip()) for key, _, value in pairs}


def _add_configure(p: argparse.ArgumentParser) -> None:
    from tfdevices.gpus.spec import SPEC_FORMS

    p.description = (
        "Show what tfdevices.configure() would mask, split and limit, for this machine's GPUs or "
        "a saved inventory (--inventory), without applying it."
    )
    p.add_argument("spec", nargs="?", default=None, help=f"{SPEC_FORMS} (default: the GPUs visible now)")
    p.add_argument("--dry-run", action="store_true", help="plan only (the only mode: a process configures itself)")
    p.add_argument("--memory-growth", action="store_true", help="grow GPU memory as needed")
    p.add_argument(
        "--memory-limit",
        metavar="LIMIT",
        help="per logical GPU: '4GiB', a split '6GiB+2GiB', or by GPU '0=8GiB,1=4GiB'",
    )
    p.add_argument("--virtual-devices", type=int, metavar="N", help="logical devices per GPU (or the CPU)")
    p.set_defaults(run=_cmd_configure)


def _add_placement(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Print the placement that write_placement or PlacementLogger stored under PATH, or read it "
        "from a profile TensorFlow wrote (Keras' TensorBoard(profile_batch=...), tf.profiler)."
    )
    p.add_argument(
        "logdir",
        metavar="PATH",
        help="a TensorBoard log directory (searched recursively), an event file, or a .xplane.pb profile",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="read the newest profile under PATH even where placement summaries are stored",
    )
    p.add_argument("--name", default="placement", help="the name= it was written with (default: placement)")
    p.add_argument(
        "--format",
        default="table",
        choices=("table", "markdown", "json"),  # PlacementReport.render's forms (not imported: the listing path)
        help="table: aligned text (default); markdown: the same tables in Markdown; json: the whole report",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON (--format json)")
    p.add_argument(
        "--all",
        dest="all_transfers",
        action="store_true",
        help="list every transfer (by default they are grouped by source, destination and tensor)",
    )
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="write the captured step as a Chrome trace (traceEvents JSON: Perfetto, chrome://tracing)",
    )
    p.set_defaults(run=_cmd_placement)


def _cmd_advise(args: argparse.Namespace) -> int:
    import json

    from tfdevices import runtime
    from tfdevices.decide.advise import advise, format_findings
    from tfdevices.tensorboard.writer import load_placement

    runtime.quiet_tensorflow_logs()
    findings = advise(load_placement(args.path, name=args.name, profile=args.profile))
    print(json.dumps([f.__dict__ for f in findings], indent=1) if args.json else format_findings(findings))
    return 0


def _add_advise(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Say why a captured step is slow: findings ordered by the time at stake, each with its "
        "numbers from the step and a fix."
    )
    p.add_argument(
        "path",
        metavar="LOGDIR_OR_PROFILE",
        help="a TensorBoard log directory with a placement run, an event file, or a .xplane.pb profile",
    )
    p.add_argument("--profile", action="store_true", help="read the newest profile under PATH")
    p.add_argument("--name", default="placement", help="the name= the placement was written with")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(run=_cmd_advise)


def _cmd_tune(args: argparse.Namespace) -> int:
    from tfdevices.decide.config import TuneConfig
    from tfdevices.decide.tune import tune

    wanted = "auto" if args.candidates == "auto" else tuple(c.strip() for c in args.candidates.split(",") if c.strip())
    config = TuneConfig(
        candidates=wanted,
        steps=args.steps,
        warmup=args.warmup,
        rounds=args.rounds,
        max_rounds=args.max_rounds,
        budget_s=args.budget,
        timeout_s=args.timeout,
        virtual_devices=args.virtual_devices,
        processes=args.processes,
        logdir=args.logdir,
        margin=args.margin,
    )
    result = tune(args.target, config, echo=lambda line: print(line, file=sys.stderr, flush=True))
    print(result.to_json() if args.json else result.table())
    return 0 if result.winner is not None else 1


def _add_tune(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Measure each way to run a model here (one device, mirrored over k, layers split over k, "
        "multi-worker over GPUs), each in a process of its own, in rounds interleaved in time (one window of "
        "each candidate in turn); compare them round by round; time again only those the rounds cannot yet "
        "tell from the fastest; print the table, how sure each ranking is, and the winner's flags."
    )
    p.add_argument(
        "target",
        metavar="MODULE:FUNCTION",
        help="a function returning (compiled Keras model, tf.data.Dataset of (x, y) batches)",
    )
    p.add_argument("--candidates", default="auto", help="'auto' or names: one_device:CPU:0,mirrored:2,split:2")
    p.add_argument("--steps", type=int, default=20, help="steps in each timed window (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="steps before the first window (default 3)")
    p.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="rounds every candidate runs: one window of each candidate in turn (default 6)",
    )
    p.add_argument(
        "--max-rounds",
        type=int,
        metavar="N",
        help="rounds, at most, for the candidates not yet told from the fastest (default: 4 x --rounds)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.03,
        metavar="SHARE",
        help="a difference under this share is a tie (default 0.03: 3%%)",
    )
    p.add_argument("--budget", type=float, metavar="SECONDS", help="bound on the whole run")
    p.add_argument(
        "--timeout", type=float, default=300.0, metavar="SECONDS", help="bound on each candidate's start and answers"
    )
    p.add_argument("--virtual-devices", type=int, default=4, metavar="N", help="logical CPUs without GPUs")
    p.add_argument(
        "--processes",
        type=int,
        default=2,
        metavar="N",
        help="processes per candidate, compared every one against every one: a process has a speed of its own "
        "(default 2; 1 where the GPU's memory holds one copy of the model)",
    )
    p.add_argument("--logdir", help="a TensorBoard run per candidate, with its captured step")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(run=_cmd_tune)


def _cmd_doctor(args: argparse.Namespace) -> int:
    if args.cuda:  # the cuda section alone, without importing the rest of doctor (jobs, mends ...)
        from tfdevices.core.doctor_report import Report
        from tfdevices.gpus import cuda_check, cuda_facts

        facts = cuda_facts.gather()
        report = Report((("cuda", cuda_check.rows(facts, cuda_check.diagnose(facts))),))
    else:
        from tfdevices.doctor import diagnose

        report = diagnose(tensorflow=not args.no_tensorflow)
    print(report.to_json() if args.json else report.text())
    return 0


def _add_doctor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--no-tensorflow",
        action="store_true",
        help="do not import TensorFlow: versions from the installed packages only, mends not checked",
    )
    p.add_argument(
        "--cuda",
        action="store_true",
        help="only whether this TensorFlow can use the GPUs: one line per cause, with its fix (no TensorFlow started)",
    )
    p.set_defaults(run=_cmd_doctor)


# name -> (help, takes --inventory, adds the subcommand's arguments)
COMMANDS: dict[str, tuple[str, bool, Any]] = {
    "list": ("list GPUs (NVML index, CUDA ordinal, TF name, memory, load, sensors; --processes)", True, _add_list),
    "topo": ("how the GPUs are wired (NVLink, PCIe, sockets) and their CPU/NUMA affinity", True, _add_topo),
    "select": ("choose GPUs: prints 'export CUDA_VISIBLE_DEVICES=...', a table or JSON", True, _add_select),
    "demo": ("run a demo (no NAME: list them); flags after NAME go to it", True, _add_demo),
    "launch": ("start N workers here, or on each of several machines: -n N -- python train.py", True, _add_launch),
    "configure": ("plan configure(): mask, split, limits (--dry-run)", True, _add_configure),
    "placement": ("print the placement stored in a log directory, or read from a profile", False, _add_placement),
    "tune": ("measure each way to run a model here and name the fastest", False, _add_tune),
    "advise": ("say why a captured step is slow: findings with numbers and fixes", False, _add_advise),
    "doctor": (
        "one screen for a bug report: versions, oneDNN, XLA, GPUs, CUDA, job, mends, what listens",
        False,
        _add_doctor,
    ),
}


EXAMPLES = {
    "select": "tfdevices select auto:2",
    "launch": "tfdevices launch -n 2 -- python train.py",
    "placement": "tfdevices placement logs/run",
    "advise": "tfdevices advise logs/run",
    "tune": "tfdevices tune tfdevices.decide.examples:tiny_mlp",
    "configure": "tfdevices configure --dry-run auto:2",
}
"""A command line that works, per command: the HINT when a required argument is missing."""


USAGE: dict[str, tuple[tuple[str, str], ...]] = {
    "list": (
        ("tfdevices list", "this machine's GPUs, read from NVML (no TensorFlow)"),
        ("tfdevices list --processes --watch 2", "and who uses them, every 2 s"),
        ("tfdevices list --json > node.json", "a listing to plan with elsewhere (--inventory)"),
    ),
    "topo": (("tfdevices topo --inventory tests/data/topo-pcie-4gpu-bridges.json", "NVLink and PCIe, as a matrix"),),
    "select": (
        ('eval "$(tfdevices select auto:2 --min-free-memory 8GiB)"', "mask this shell to the 2 best"),
        ("tfdevices select 0-3 --exclude 1 --format table", "GPUs 0, 2 and 3, and why"),
        ("tfdevices select GPU-8a3c --format json", "the GPU whose UUID starts so"),
    ),
    "demo": (
        ("tfdevices demo", "list the demos"),
        ("tfdevices demo mirrored --gpus=auto:2", "a small Keras model on the 2 best GPUs"),
    ),
    "launch": (
        ("tfdevices launch -n 2 -- python train.py", "2 workers on this machine"),
        ("tfdevices launch -n 4 --gpus 0-3 --max-restarts 1 -- python train.py", "a GPU each"),
        (
            "tfdevices launch -n 2 --nnodes 2 --node-rank 0 --master-addr host0 -- python train.py",
            "on host0; on host1 the same with --node-rank 1",
        ),
    ),
    "configure": (
        ("tfdevices configure --dry-run auto:2 --memory-growth", "what configure() would do here"),
        ("tfdevices configure --dry-run 0 --virtual-devices 2", "GPU 0 as two logical GPUs"),
    ),
    "placement": (
        ("tfdevices placement logs/tour", "what PlacementLogger wrote: ops by device"),
        ("tfdevices placement logs/tour --format markdown", "the same tables in Markdown"),
        ("tfdevices placement --profile logs/profiled", "read a profile Keras' TensorBoard wrote"),
    ),
    "tune": (("tfdevices tune tfdevices.decide.examples:tiny_mlp", "each way to run it, timed here"),),
    "advise": (("tfdevices advise logs/tour", "why the captured step is slow, with fixes"),),
    "doctor": (
        ("tfdevices doctor", "versions, GPUs, job, mends: paste it in a bug report"),
        ("tfdevices doctor --no-tensorflow", "the same without importing TensorFlow"),
        ("tfdevices doctor --cuda", "why TensorFlow lists no GPU here: each cause and its fix"),
    ),
}
"""Each command's examples for the documentation's command-line page: (command line, what it does)."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``tfdevices`` parser, one subparser per command in :data:`COMMANDS`.

    Args:
        only: build this command's parser alone, with its arguments (no other command's parser is
            made), so that ``tfdevices list`` neither imports what ``launch`` needs nor builds
            nine parsers it does not use.
    """
    from tfdevices import __version__

    parser = _Parser(prog="tfdevices", description="Make TensorFlow use the right devices, and prove it.")
    parser.add_argument("--version", action="version", version=f"tfdevices {__version__}")
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND", parser_class=_Parser)
    for name, (text, inventory, add) in COMMANDS.items():
        if only is not None and only != name:
            continue
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        p.example = EXAMPLES.get(name, "")
        if only is None or only == name:
            add(p)  # the command's own options first in its --help, then the shared --inventory
            p.set_defaults(parser=p)
        if inventory:
            p.add_argument(
                "--inventory", metavar="FILE", help="read GPUs from a saved 'tfdevices list --json' instead of NVML"
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = "tfdevices"
    try:
        first = next((a for a in argv if not a.startswith("-")), None)
        asks_help = first is None or bool({"-h", "--help"} & set(argv[: argv.index(first)]))  # lists every command
        args, extra = build_parser(first if first in COMMANDS and not asks_help else None).parse_known_args(argv)
        if extra:  # said by the subcommand's parser, so the message names the subcommand
            args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
        command = f"tfdevices {args.subcommand}"
        status = int(args.run(args) or 0)
        sys.stdout.flush()  # a full disk shows here, not as a traceback at exit
        return status
    except TfDevicesError as err:
        print(f"{getattr(err, 'command', command)}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `tfdevices list | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:  # `tfdevices list > /dev/full`
        if err.filename is not None:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(
            f"{command}: error: cannot write the output: {err.strerror}. HINT: free some space, or write elsewhere.",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
