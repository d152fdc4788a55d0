"""The ``tfdevices`` command.

Errors are printed as one line (what was asked, what exists, a HINT) and exit
with status 2; never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tfdevices.errors import TfDevicesError

EXIT_USAGE = 2


def _inventory(args: argparse.Namespace):
    """``--inventory FILE`` read like ``TFDEVICES_INVENTORY=FILE``: this process's mask applies to it."""
    from tfdevices import visibility
    from tfdevices.inventory import Inventory, discover

    return visibility.apply(Inventory.load(args.inventory), os.environ) if args.inventory else discover()


def _cmd_list(args: argparse.Namespace) -> int:
    inventory = _inventory(args)
    print(inventory.to_json() if args.json else inventory.table())
    return 0


def _cmd_select(args: argparse.Namespace) -> int:
    from tfdevices.selection import select

    sel = select(args.spec, _inventory(args), min_free_memory=args.min_free_memory,
                 max_utilization=args.max_utilization, exclude=args.exclude, order=args.order)
    if args.format == "json":
        print(sel.to_json())
    elif args.format == "table":
        print(sel.table())
    else:
        print(sel.table(), file=sys.stderr)
        for name, value in sel.env().items():
            print(f"export {name}={value}")
    return 0


# Commands implemented elsewhere as ``function(argv) -> int``: their arguments pass through untouched
# (argparse cannot hand on options such as ``-n 2 -- python train.py``).
FORWARDED = {"launch": "tfdevices.launcher:launch_main", "placement": "tfdevices.tensorboard:placement_main"}


def _forward(command: str, argv: list[str]) -> int:
    import importlib

    if argv[:1] == ["--inventory"] and len(argv) > 1:  # tfdevices launch --inventory FILE ...
        from tfdevices.runtime import use_inventory_file

        use_inventory_file(argv[1])
        argv = argv[2:]
    module, function = FORWARDED[command].split(":")
    return int(getattr(importlib.import_module(module), function)(argv) or 0)


def _cmd_demo(args: argparse.Namespace) -> int:
    from tfdevices.demos import DEMOS, run_demo

    if not args.name:
        print("demos:\n" + "\n".join(f"  {n:<10} {d}" for n, d in DEMOS.items()))
        return 0
    if args.inventory:
        from tfdevices.runtime import use_inventory_file

        use_inventory_file(args.inventory)
    return run_demo(args.name, list(args.rest))


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction (write 0.5 or 50%)") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is outside 0..1 (write 0.5 or 50%)")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--inventory", metavar="FILE",
                        help="read GPUs from a saved 'tfdevices list --json' instead of NVML")
    parser = argparse.ArgumentParser(prog="tfdevices", description="Make TensorFlow use the right devices, and prove it.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", parents=[common], help="list GPUs (NVML index, CUDA ordinal, TF name, memory, load)")
    p.add_argument("--json", action="store_true", help="print JSON that --inventory and TFDEVICES_INVENTORY read back")
    p.set_defaults(run=_cmd_list)

    p = sub.add_parser("select", parents=[common], help="choose GPUs; prints 'export CUDA_VISIBLE_DEVICES=...'",
                       description="Choose GPUs. Use as: eval \"$(tfdevices select auto:2)\"")
    p.add_argument("spec", help="'all', 'none', 'auto:N', or NVML indices '0,2'")
    p.add_argument("--min-free-memory", metavar="SIZE", help="skip GPUs with less free memory, e.g. 8GiB")
    p.add_argument("--max-utilization", metavar="FRACTION", type=_fraction, help="skip busier GPUs, e.g. 0.5 or 50%%")
    p.add_argument("--exclude", metavar="SPEC", help="GPUs never to take, e.g. 0,3")
    p.add_argument("--order", default="free_memory", choices=("free_memory", "utilization", "index"),
                   help="how auto:N ranks GPUs (default: free_memory)")
    p.add_argument("--format", default="env", choices=("env", "json", "table"),
                   help="env: shell exports on stdout, the decisions on stderr (default)")
    p.set_defaults(run=_cmd_select)

    p = sub.add_parser("demo", parents=[common], help="run a demo (no NAME: list them); flags after NAME go to it")
    p.add_argument("name", nargs="?", help="demo name")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the demo's flags (see NAME --helpfull)")
    p.set_defaults(run=_cmd_demo)

    for name, text in (("placement", "print the placement stored in a TensorBoard log directory (LOGDIR)"),
                       ("launch", "start N local workers with TF_CONFIG: -n N [--gpus SPEC] -- python train.py")):
        sub.add_parser(name, help=text, add_help=False)  # listed here, run by _forward
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in FORWARDED:
        command, run = argv[0], lambda: _forward(argv[0], argv[1:])
    else:
        args = build_parser().parse_args(argv)
        command, run = args.command, lambda: args.run(args)
    try:
        return run()
    except TfDevicesError as err:
        print(f"tfdevices {command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `tfdevices list | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
