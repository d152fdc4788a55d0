"""The launch record: its defaults, its checks (a table of good and bad inputs), and launch() taking it."""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys

import pytest

from tfdevices.core.errors import LaunchError, SelectionError
from tfdevices.jobs import launch_command, launcher
from tfdevices.jobs.launch_config import CLI_TERMS, REPORT_STALLS, LaunchConfig, check_worker_count, config_from_call
from tfdevices.jobs.rendezvous import Nodes
from tfdevices.jobs.stall import StallPolicy

NODES = Nodes(2, 0, ("127.0.0.1", 29500))


def test_defaults_are_one_machine_cpu_no_restart_and_stalls_reported():
    config = LaunchConfig(2)
    assert (config.num_workers, config.gpus, config.max_restarts, config.nodes, config.listen) == (2, (), 0, None, None)
    assert config.stall is REPORT_STALLS and config.mends_off == frozenset()
    assert not (config.share or config.tee or config.all_ranks or config.tf_logs)


@pytest.mark.parametrize(
    "fields,normalised",
    [
        ({"gpus": [0, 1]}, {"gpus": (0, 1)}),
        ({"gpus": range(2)}, {"gpus": (0, 1)}),
        ({"mends_off": ["keras_fit"]}, {"mends_off": frozenset({"keras_fit"})}),
        ({"max_restarts": 1000, "virtual_devices": 1024}, {}),
        ({"log_dir": "logs", "tee": True}, {}),
        ({"listen": "all"}, {}),
        ({"listen": "loopback"}, {"listen": "127.0.0.1"}),
        ({"listen": "10.0.0.5", "nodes": NODES}, {}),
        (
            {"nodes": Nodes(2, 1, ("node0.example", 1), "10.0.0.6", 1e9)},
            {"nodes": Nodes(2, 1, ("node0.example", 1), "10.0.0.6", 86400.0)},
        ),
        ({"stall": StallPolicy(window_s=0.5, timeout_s=7 * 86400.0)}, {}),
    ],
)
def test_good_input(fields, normalised):
    config = LaunchConfig(2, **fields)
    for name, value in {**fields, **normalised}.items():
        assert getattr(config, name) == value


@pytest.mark.parametrize(
    "fields,error,first_words",
    [
        ({"num_workers": 0}, LaunchError, "num_workers=0: the number of workers must be a whole number >= 1."),
        ({"num_workers": "2"}, LaunchError, "num_workers='2': the number of workers must be"),
        ({"num_workers": True}, LaunchError, "num_workers=True: the number of workers must be"),
        ({"num_workers": 1025}, LaunchError, "num_workers=1025: at most 1024 workers per machine."),
        ({"max_restarts": -1}, LaunchError, "max_restarts=-1 must be between 0 and 1000."),
        ({"max_restarts": 1.5}, LaunchError, "max_restarts=1.5 must be between 0 and 1000."),
        ({"virtual_devices": 0}, LaunchError, "virtual_devices=0 must be between 1 and 1024."),
        ({"share": "yes"}, LaunchError, "share='yes': not True or False."),
        ({"tee": True}, LaunchError, "tee without log_dir: there is no log to tee."),
        ({"log_dir": ""}, LaunchError, "log_dir='': not a directory's path."),
        ({"stall": 5}, LaunchError, "stall=5: not a StallPolicy."),
        ({"stall": StallPolicy(timeout_s=0)}, LaunchError, "stall.timeout_s=0 must be a number of seconds in"),
        ({"stall": StallPolicy(window_s=-1.0)}, LaunchError, "stall.window_s=-1.0 must be a number of seconds in"),
        ({"nodes": NODES, "max_restarts": 1}, LaunchError, "max_restarts with nodes: restarting a job over several"),
        ({"nodes": (2, 0)}, LaunchError, "nodes=(2, 0): not a Nodes record."),
        ({"listen": "localhost"}, LaunchError, "listen='localhost': the workers' servers listen on an IPv4 address,"),
        ({"listen": "::1"}, LaunchError, "listen='::1': the workers' servers listen on an IPv4 address, loopback"),
        ({"listen": "0.0.0.0"}, LaunchError, "listen='0.0.0.0': that is every interface; say it as listen='all'."),
        ({"nodes": Nodes(0, 0, ("h", 1))}, LaunchError, "nodes.nnodes=0 must be a whole number between 1 and 4096."),
        ({"nodes": Nodes(2, -1, ("h", 1))}, LaunchError, "nodes.node_rank=-1 must be a whole number between 0 and"),
        ({"nodes": Nodes(2, 2, ("h", 1))}, LaunchError, "nodes.node_rank=2 is out of range for nodes.nnodes=2."),
        ({"nodes": Nodes(2, 0, ("", 1))}, LaunchError, "nodes.nnodes=2 needs nodes.master_addr, the address of"),
        ({"nodes": Nodes(2, 0, ("a b", 1))}, LaunchError, "nodes.master_addr='a b': not a host: 'a b' is no IPv4"),
        ({"nodes": Nodes(2, 0, ("h", 0))}, LaunchError, "nodes.master_port=0: not a port in 1..65535."),
        ({"nodes": Nodes(2, 0, ("h", 1), "h/1")}, LaunchError, "nodes.node_addr='h/1': not a host: 'h/1' is no"),
        ({"nodes": Nodes(2, 0, ("h", 1), timeout=0)}, LaunchError, "nodes.timeout=0 must be a number of seconds > 0."),
        ({"nodes": Nodes(2, 0, ("h", 1), rdzv_id="x" * 257)}, LaunchError, "nodes.rdzv_id='xxxxxxxxx"),
        ({"nodes": Nodes(2, 0, ("h", 1), id_source="--rdzv-id")}, LaunchError, "nodes.rdzv_id='' must be 1 to 256"),
        ({"mends_off": "keras_fit"}, LaunchError, "mends_off='keras_fit': not a set of mend names."),
        ({"mends_off": {"kerasfit"}}, LaunchError, "mends_off=['kerasfit']: no mend is called 'kerasfit'; the mends"),
        ({"gpus": (0, 1), "num_workers": 3}, SelectionError, "3 local ranks but only 2 GPU(s) (0,1)."),
    ],
)
def test_bad_input_names_what_was_asked_and_hints(fields, error, first_words):
    fields = {"num_workers": 2, **fields}
    with pytest.raises(error) as caught:
        LaunchConfig(**fields)
    assert str(caught.value).startswith(first_words), str(caught.value)
    assert "HINT: " in str(caught.value)


@pytest.mark.parametrize(
    "fields,first_words",
    [
        ({"num_workers": 0}, "-n 0: the number of workers must be a whole number >= 1. HINT: e.g. -n 2."),
        ({"max_restarts": -1}, "--max-restarts -1 must be between 0 and 1000. HINT: e.g. --max-restarts 1."),
        ({"tee": True}, "--tee without --log-dir: there is no log to tee. HINT: add --log-dir 'DIR'."),
        ({"stall": StallPolicy(timeout_s=0)}, "--stall-timeout 0 must be a number of seconds in (0, 604800]."),
        ({"nodes": NODES, "max_restarts": 1}, "--max-restarts with --nnodes > 1: restarting a job over several"),
        ({"nodes": Nodes(2, 2, ("h", 1))}, "--node-rank 2 is out of range for --nnodes 2. HINT: node ranks run 0..1."),
        ({"nodes": Nodes(10**30, 0, ("h", 1))}, "--nnodes 1000000000000000000000000000000 must be a whole number"),
        (
            {"nodes": Nodes(2, 0, (None, 1))},
            "--nnodes 2 needs --master-addr, the address of the --node-rank 0 machine.",
        ),
        ({"nodes": Nodes(2, 0, ("h", 70000))}, "--master-port 70000: not a port in 1..65535. HINT: e.g. --master-port"),
        ({"nodes": Nodes(2, 0, ("h", 1), timeout=-1.0)}, "--rdzv-timeout -1.0 must be a number of seconds > 0."),
        ({"nodes": Nodes(2, 0, ("h", 1), id_source="--rdzv-id")}, "--rdzv-id '' must be 1 to 256 characters."),
        ({"listen": "node7"}, "--listen 'node7': not loopback, all or an IPv4 address. HINT: give --listen loopback"),
        ({"listen": "0.0.0.0"}, "--listen 0.0.0.0: that is every interface; say it as --listen all."),
    ],
)
def test_the_command_line_terms_name_its_options(fields, first_words):
    with pytest.raises(
        LaunchError, match="^" + first_words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")
    ):
        LaunchConfig(**{"num_workers": 2, **fields, "terms": CLI_TERMS})


def test_the_record_is_frozen_and_its_terms_do_not_make_it_differ():
    config = LaunchConfig(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_workers = 3  # type: ignore[misc]
    assert config == LaunchConfig(2, terms=CLI_TERMS)
    assert dataclasses.replace(config, max_restarts=2).max_restarts == 2
    with pytest.raises(LaunchError, match=r"^max_restarts=-2 "):
        dataclasses.replace(config, max_restarts=-2)  # replace checks again


def test_check_worker_count_bounds_by_the_machine_only_when_asked():
    assert check_worker_count(40, cpus=None) == 40
    with pytest.raises(LaunchError, match=r"^-n 40: this machine has 8 CPU cores"):
        check_worker_count(40, cpus=8)
    assert check_worker_count(40, cpus=8, oversubscribe=True) == 40


PRINT_RANK = [sys.executable, "-c", "import os; print('rank', os.environ['RANK'])"]


def test_launch_runs_the_record():
    out = io.StringIO()
    assert launcher.launch(PRINT_RANK, LaunchConfig(2, all_ranks=True), out=out) == 0, out.getvalue()
    assert "[0] rank 0" in out.getvalue() and "[1] rank 1" in out.getvalue()


def test_launch_takes_the_record_alone_the_keywords_of_before_are_gone():
    """The keywords of before (``launch(command, n, log_dir=...)``, deprecated until 0.4.0) are refused, saying how."""
    with pytest.raises(
        TypeError, match=r"launch\(\) takes a LaunchConfig: launch\(command, LaunchConfig\(2, \.\.\.\)\)"
    ):
        config_from_call(2, {"all_ranks": True})
    with pytest.raises(TypeError, match=r"launch\(\) takes a LaunchConfig.*; got 'x' \(the keywords"):
        config_from_call("x", {})
    with pytest.raises(TypeError, match="a LaunchConfig alone, no keywords: got tee too"):
        config_from_call(LaunchConfig(2), {"tee": True})
    config = LaunchConfig(2)
    assert config_from_call(config, {}) is config


def _from_command_line(*options: str) -> LaunchConfig:
    """The record ``tfdevices launch OPTIONS -- true`` builds (in this process; CPU workers: no GPU is read)."""
    parser = argparse.ArgumentParser()
    launch_command.add_arguments(parser)
    return launch_command.config_from_args(parser.parse_args(["-n", "1", "--gpus", "none", *options]), ["true"])


@pytest.mark.parametrize(
    "options,first_words",
    [
        (("--nnodes", "0"), "--nnodes 0 must be a whole number between 1 and 4096. HINT: e.g. --nnodes 2."),
        (("--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", "70000"), "--master-port 70000: not a port"),
        (("--nnodes", "2", "--master-addr", "no host"), "--master-addr 'no host': not a host: 'no host' is no IPv4"),
        (("--nnodes", "2", "--master-addr", "h", "--node-addr", "a/b"), "--node-addr 'a/b': not a host: 'a/b' is no"),
        (("--nnodes", "2", "--master-addr", "h", "--rdzv-timeout", "0"), "--rdzv-timeout 0.0 must be a number of"),
        (("--nnodes", "2", "--master-addr", "h", "--listen", "h"), "--listen 'h': not loopback, all or an IPv4"),
        (("--metrics", "x:y"), "--metrics 'x:y': not [HOST:]PORT: its port 'y' is not 1 to 5 digits."),
    ],
)
def test_the_command_line_is_checked_by_the_record_in_its_terms(options, first_words):
    """Each value is checked once, by the record, and named as typed; only what needs the machine is the command's."""
    with pytest.raises(LaunchError) as caught:
        _from_command_line(*options)
    assert str(caught.value).startswith(first_words), str(caught.value)
    assert "HINT: " in str(caught.value)


def test_the_command_line_record_of_two_machines() -> None:
    config = _from_command_line("--nnodes", "2", "--node-rank", "1", "--master-addr", "node0", "--rdzv-id", "exp7")
    assert config.nodes is not None and config.terms is CLI_TERMS
    assert (config.nodes.nnodes, config.nodes.node_rank, config.nodes.master) == (2, 1, ("node0", 29400))
    assert (config.nodes.rdzv_id, config.nodes.id_source, config.nodes.timeout) == ("exp7", "--rdzv-id", 300.0)
    assert _from_command_line("--listen", "loopback").listen == "127.0.0.1"
