"""``tfdevices launch``'s command line: its options, checked, then :func:`tfdevices.jobs.launcher.launch`.

Every bad option is a :class:`~tfdevices.core.errors.LaunchError` naming the option as
typed (the CLI prints it as one line, status 2) before any worker starts. This module
imports no TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from tfdevices.core.addresses import ipv4_problem
from tfdevices.core.errors import EnvVarError, LaunchError, Terms
from tfdevices.core.units import short_repr
from tfdevices.gpus.discovery import discover
from tfdevices.gpus.selection import select
from tfdevices.gpus.spec import SPEC_FORMS
from tfdevices.jobs.handshake import TOKEN_ENV, rdzv_id, read_token
from tfdevices.jobs.kubernetes import POD_CLUSTER, pod_cluster, wait_for_names
from tfdevices.jobs.launch_config import CLI_TERMS, WORKERS_PER_CORE, LaunchConfig, check_worker_count
from tfdevices.jobs.launcher import launch, own_address
from tfdevices.jobs.rendezvous import MASTER_PORT, MAX_WORKERS, Nodes
from tfdevices.jobs.stall import StallPolicy
from tfdevices.jobs.straggler import SlowRankPolicy
from tfdevices.mends.base import parse_mends_off
from tfdevices.mends.loopback import ALL, LOOPBACK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the options of ``tfdevices launch`` to ``parser`` (the CLI's ``launch`` subcommand)."""
    _add_workers(parser)
    _add_output(parser.add_argument_group("output"))
    _add_mends_and_stalls(parser)
    _add_nodes(parser.add_argument_group("many machines (no scheduler)"))
    parser.add_argument(
        "--cpu-affinity",
        choices=("numa", "none"),
        default=None,
        help="numa: bind each worker to the CPUs of its GPU's NUMA node (default where the "
        "topology is known and has several nodes); none: leave CPUs alone",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command each worker runs, after '--'")


def _add_workers(parser: argparse.ArgumentParser) -> None:
    """How many workers, on which GPUs, restarted how often."""
    parser.add_argument("-n", "--num-workers", type=int, required=True, help="worker processes on this machine")
    parser.add_argument("--gpus", default="all", help=f"the workers' {SPEC_FORMS} (default: all)")
    parser.add_argument("--share", action="store_true", help="allow more workers than GPUs (they share GPUs)")
    parser.add_argument(
        "--oversubscribe",
        action="store_true",
        help=f"allow more than {WORKERS_PER_CORE} workers per CPU core (at most {MAX_WORKERS})",
    )
    parser.add_argument(
        "--max-restarts", type=int, default=0, help="restart the whole job up to K times after a failure"
    )
    parser.add_argument(
        "--virtual-devices",
        type=int,
        default=None,
        help="logical devices per worker (sets TFDEVICES_VIRTUAL_DEVICES; see tfdevices.runtime.configure_worker)",
    )


def _add_output(out: argparse._ArgumentGroup) -> None:
    """What the console shows, and what is kept in files."""
    out.add_argument(
        "--log-dir", default=None, help="keep each rank's output in DIR/rank{R}.log; the console shows rank 0 only"
    )
    out.add_argument("--tee", action="store_true", help="with --log-dir: show every rank on the console too")
    out.add_argument(
        "--all-ranks",
        action="store_true",
        help="show every rank's progress bars and repeated warnings (default: rank 0's progress, "
        "a warning every rank prints the same once)",
    )
    out.add_argument("--tf-logs", action="store_true", help="show TensorFlow's C++ log lines (hidden by default)")
    out.add_argument(
        "--metrics",
        default=None,
        metavar="[HOST:]PORT",
        help="serve the job's metrics for Prometheus while it runs (each rank's steps and their split, the slow "
        "rank, stalls, each rank's GPUs, the workers): on 127.0.0.1 unless HOST names another address of this "
        "machine (0.0.0.0: every interface); PORT 0: any free port, said on the console",
    )


def _add_mends_and_stalls(parser: argparse.ArgumentParser) -> None:
    """The workers' mends, the stall detector, and where the workers' servers listen."""
    parser.add_argument(
        "--no-mend",
        action="store_true",
        help="leave Keras 3 model.fit as it is in the workers (by default it is mended for "
        "MultiWorkerMirroredStrategy, keras-team/keras#20585, with no change to the script); "
        "the same as --mends-off keras_fit",
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        metavar="SECONDS",
        help="stop the job (and restart it, with --max-restarts) when ranks that disagree about the next step "
        "have not moved for the stall window plus SECONDS (default: report stalls, never stop)",
    )
    parser.add_argument(
        "--stall-window",
        type=float,
        metavar="SECONDS",
        help="quiet time that makes a stall (default: the larger of 60 s and 20x the median step; "
        "600 s before every rank finished a step)",
    )
    parser.add_argument(
        "--no-slow-rank",
        action="store_true",
        help="do not name the slow rank (the rank the others wait for in the all-reduce) while the job runs, "
        "nor print each rank's step split at its end (on by default)",
    )
    parser.add_argument(
        "--mends-off",
        default="",
        metavar="NAMES",
        help="turn these mends off in the workers: a comma list, or 'all' (added to what TFDEVICES_MENDS says; "
        "`tfdevices doctor` lists them)",
    )
    parser.add_argument(
        "--listen",
        default=None,
        metavar="{loopback,all,ADDRESS}",
        help="where the workers' TensorFlow servers listen (they have no authentication): loopback (127.0.0.1, "
        "the default on one machine), the node's own address (the default with --nnodes), an IPv4 ADDRESS "
        "of this machine, or all (every interface); a worker found listening on more stops the job",
    )


def _add_nodes(nodes: argparse._ArgumentGroup) -> None:
    """A job over several machines without a scheduler: where the launchers meet, and who may join."""
    pod = f"in a pod whose manifest sets {POD_CLUSTER}"
    nodes.add_argument(
        "--nnodes", type=int, default=None, help=f"machines in the job, one launcher each (default 1; {pod}: its pods)"
    )
    nodes.add_argument(
        "--node-rank", type=int, default=None, help=f"this machine's place, 0 .. nnodes-1 (default 0; {pod}: its index)"
    )
    nodes.add_argument(
        "--master-addr",
        default=None,
        help=f"the address of the machine with --node-rank 0 ({pod}: pod 0's name under the headless Service)",
    )
    nodes.add_argument(
        "--master-port",
        type=int,
        default=None,
        help=f"the port the launchers meet on (default {MASTER_PORT}; {pod}: its port=)",
    )
    nodes.add_argument(
        "--node-addr",
        default=None,
        help="the address other machines reach this one's workers at (default: the one that reaches the master)",
    )
    nodes.add_argument(
        "--rdzv-timeout", type=float, default=300.0, help="seconds to wait for every launcher to join (default 300)"
    )
    nodes.add_argument(
        "--rdzv-id",
        default=None,
        help="the job's name at the rendezvous: launchers of another job are refused (default: "
        "SLURM's job id, else derived from the command, --nnodes and --master-port)",
    )
    nodes.add_argument(
        "--rdzv-token-file",
        default=None,
        help=f"a file holding the job's shared secret (default: ${TOKEN_ENV}, when set): "
        "launchers without it are refused; it never crosses the network",
    )


def run(args: argparse.Namespace) -> int:
    """Runs ``tfdevices launch`` from parsed arguments (see :func:`add_arguments`).

    Returns:
        0 when every worker succeeded, else the first non-zero exit status.

    Raises:
        LaunchError: bad arguments (the CLI prints it as one line, status 2).
        SpecError, SelectionError: ``--gpus`` is malformed or cannot be met.
    """
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise LaunchError(
            "no command to run.", hint="put the command after '--': tfdevices launch -n 2 -- python train.py."
        )
    check_worker_count(args.num_workers, cpus=os.cpu_count(), oversubscribe=args.oversubscribe)
    return launch(command, config_from_args(args, command))


def config_from_args(args: argparse.Namespace, command: Sequence[str]) -> LaunchConfig:
    """The :class:`~tfdevices.jobs.launch_config.LaunchConfig` the options ask for, checked: every value by
    the record, in the command line's terms; here only what needs this machine (its GPUs and their
    topology, the token file, the addresses it resolves and binds, the log directory it creates).

    Raises:
        LaunchError: a bad option, named as typed.
        SpecError, SelectionError: ``--gpus`` is malformed or cannot be met.
    """
    args = with_pod_defaults(args, os.environ)
    try:
        mends_off = parse_mends_off(args.mends_off, asked=f"--mends-off {short_repr(args.mends_off)}")
    except EnvVarError as err:
        raise LaunchError(err.message, hint=err.hint) from None
    gpus = _candidate_gpus(args.gpus)
    config = LaunchConfig(
        args.num_workers,
        gpus=gpus,
        share=args.share,
        max_restarts=args.max_restarts,
        virtual_devices=args.virtual_devices,
        log_dir=args.log_dir,
        tee=args.tee,
        all_ranks=args.all_ranks,
        tf_logs=args.tf_logs,
        nodes=_nodes(args, command),
        topology=_affinity_topology(getattr(args, "cpu_affinity", None), gpus),
        mends_off=mends_off | ({"keras_fit"} if args.no_mend else set()),
        stall=StallPolicy(
            window_s=args.stall_window,
            timeout_s=args.stall_timeout,
            slow_rank=SlowRankPolicy(enabled=not args.no_slow_rank),
        ),
        listen=getattr(args, "listen", None),
        metrics=getattr(args, "metrics", None),
        terms=CLI_TERMS,
    )
    _check_here(config)
    return config


def with_pod_defaults(args: argparse.Namespace, env: Mapping[str, str]) -> argparse.Namespace:
    """``args`` with the options a pod can tell filled in where they were not given (an option given always wins):
    in a pod whose manifest sets :data:`~tfdevices.jobs.kubernetes.POD_CLUSTER`, ``--nnodes`` is its job's pod
    count, ``--node-rank`` its index (a JobSet's Job index and the completion index), ``--master-addr`` pod 0's
    name and ``--master-port`` the manifest's port; elsewhere 1, 0, none and the default port.

    Raises:
        LaunchError: the pod's job cannot be worked out, or pod 0's name does not resolve within the wait.
    """
    pod = pod_cluster(env) if POD_CLUSTER in env else None
    given: dict[str, Any] = {n: getattr(args, n, None) for n in ("nnodes", "node_rank", "master_addr", "master_port")}
    found: dict[str, Any] = {"nnodes": 1, "node_rank": 0, "master_addr": None, "master_port": MASTER_PORT}
    if pod is not None:
        found = {"nnodes": len(pod.hosts), "node_rank": pod.index, "master_addr": pod.hosts[0], "master_port": pod.port}
    chosen = {name: found[name] if value is None else value for name, value in given.items()}
    if pod is not None and given["master_addr"] is None and chosen["nnodes"] > 1:
        wait_for_names([pod.hosts[0]], pod.wait_s)  # pod 0's name, once its Service publishes it
    return argparse.Namespace(**{**vars(args), **chosen})


def _nodes(args: argparse.Namespace, command: Sequence[str]) -> Nodes | None:
    """The options of a job over several machines as the record (checked by ``LaunchConfig``), with the
    token file read; ``None`` for one machine, where those options have no use.

    Raises:
        LaunchError: one of them given without ``--nnodes``; the token file cannot be read.
    """
    if args.nnodes == 1:
        for name, value in (
            ("--node-rank", args.node_rank or None),
            ("--rdzv-id", args.rdzv_id),
            ("--rdzv-token-file", args.rdzv_token_file),
        ):
            if value is not None:
                raise LaunchError(
                    f"{name} {short_repr(value)} without --nnodes.",
                    hint=f"give --nnodes M (the number of machines) with {name}; a one-machine job has no rendezvous.",
                )
        return None
    if args.rdzv_id is not None:  # given, even empty: the record checks it
        rdzv, source = args.rdzv_id, "--rdzv-id"
    else:
        rdzv, source = rdzv_id(None, os.environ, command, args.nnodes, args.master_port)
    listen = getattr(args, "listen", None)
    where = LOOPBACK if listen == "loopback" else listen
    specific = where not in (None, ALL) and ipv4_problem(where) is None  # else the record says what is wrong
    return Nodes(
        args.nnodes,
        args.node_rank,
        (args.master_addr, args.master_port),
        where if args.node_addr is None and specific else args.node_addr,  # reached where they listen
        args.rdzv_timeout,
        rdzv,
        read_token(args.rdzv_token_file, os.environ),
        source,
    )


def _check_here(config: LaunchConfig) -> None:
    """What a checked record still needs this machine for: where the workers listen can be listened on,
    this node's address names it, and the log directory can be written.

    Raises:
        LaunchError: ``--listen`` is not an address of this machine; ``--node-addr`` (or, on node 0,
            ``--master-addr``) names none of it, or not where the workers listen; ``--log-dir`` cannot be made.
    """
    listen, nodes = config.listen, config.nodes
    fix = "give --listen loopback, all, or an IPv4 address of this machine (e.g. --listen 10.0.0.5)."
    if nodes is None and listen not in (None, ALL):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((str(listen), 0))
            except OSError as err:
                raise LaunchError(
                    f"--listen {listen}: cannot listen there on this machine ({err.strerror}).", hint=fix
                ) from None
    if nodes is not None and listen is None and (nodes.node_addr is not None or nodes.node_rank == 0):
        own_address(nodes.node_addr or nodes.master[0])  # the node's own address, checked now
    reached = nodes.node_addr if nodes is not None else None  # the workers are reached where they listen
    if reached is not None and listen not in (None, ALL, reached) and own_address(reached) != listen:
        raise LaunchError(
            f"--listen {listen} but the other machines reach this one's workers at {short_repr(reached)} "
            f"(--node-addr, {own_address(reached)}): they could not.",
            hint="leave --listen out (the workers listen on --node-addr), or give the same address to both.",
        )
    if config.log_dir:
        _check_log_dir(config.log_dir)


def _check_log_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise LaunchError(
            f"--log-dir {short_repr(path)}: cannot create it ({err.strerror}).",
            hint="name a directory you can write to.",
        ) from None
    if not os.access(path, os.W_OK):
        raise LaunchError(f"--log-dir {short_repr(path)} is not writable.", hint="name a directory you can write to.")


#: How selection's messages name launch's GPU spec: the ``--gpus`` option it came from.
_GPUS_OPTION = Terms("cli", (("spec", "--gpus"),))


def _candidate_gpus(spec: str) -> tuple[int, ...]:
    if spec in ("none", "cpu"):
        return ()
    return tuple(g.index for g in select(spec, terms=_GPUS_OPTION).gpus)


def _affinity_topology(mode: str | None, gpus: Sequence[int]) -> Any:
    """The topology to bind workers by: ``--cpu-affinity numa`` (or unset, where the topology is known
    and has several NUMA nodes); ``None`` binds nothing.

    Raises:
        LaunchError: ``numa`` was asked but the GPUs' topology is unknown.
    """
    if mode == "none" or not gpus:
        return None
    topology = discover(topology=True).topology
    if topology is None and mode == "numa":
        raise LaunchError(
            "--cpu-affinity numa: the GPUs' topology is unknown (NVML gave none, or the inventory file holds none).",
            hint="use --cpu-affinity none, or an inventory saved with 'tfdevices list --json'.",
        )
    return topology if topology is not None and len(topology.numa_nodes) > 1 else None
