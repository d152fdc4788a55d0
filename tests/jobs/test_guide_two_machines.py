"""The several-machines guide's two-machine example runs as written: its host0 and host1 commands, taken
from the guide's blocks, started as two launchers on this machine.

The guide says what a reader replaces: ``host0`` (the first machine's address: 127.0.0.1 here) and the
port ``29400`` (any port free there: a free one here), and what to add to try it on one machine:
``--node-addr 127.0.0.2`` on host1's command, before ``--``. Nothing else of the commands is changed.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

from tests.helpers import REPO, kill_all, subprocess_env
from tests.test_docs_text import code_blocks
from tfdevices.jobs.rendezvous import free_ports

GUIDE = pathlib.Path(REPO, "docs", "guides", "several_machines.rst")
SECTION = "Several machines without a scheduler"


def guide_commands() -> dict[str, str]:
    """The section's commands by the machine the text before each block names ("On host0:")."""
    text = GUIDE.read_text(encoding="utf-8")
    lines = text.splitlines()
    start = lines.index(SECTION)
    end = next(i for i in range(start + 2, len(lines)) if re.fullmatch(r"-{3,}", lines[i])) - 1
    out = {}
    for first, body in code_blocks(text):
        if not start < first < end:
            continue
        prose = (lines[i] for i in range(first - 2, start, -1) if lines[i].strip()[:1] not in ("", ".", " "))
        said = next(prose)  # the line above the block's directive
        machine = re.fullmatch(r"On (host\d):", said.strip())
        assert machine, f"{GUIDE.name}:{first}: a block not preceded by 'On hostN:' ({said!r})"
        command = " ".join(line.strip().removesuffix("\\").strip() for line in body)
        assert len(body) == 1 or all(line.rstrip().endswith("\\") for line in body[:-1]), body
        out[machine[1]] = command
    return out


def test_each_machine_has_its_own_block_with_one_command():
    commands = guide_commands()
    assert sorted(commands) == ["host0", "host1"]
    for machine, command in commands.items():
        words = shlex.split(command)
        assert words[:2] == ["tfdevices", "launch"] and words.count("tfdevices") == 2, command
        assert words[words.index("--node-rank") + 1] == machine.removeprefix("host"), command
        assert words[words.index("--master-addr") + 1] == "host0"


ON_ONE_MACHINE = "add ``--node-addr 127.0.0.2`` to\nhost1's, before ``--``"


def _as_here(machine: str, command: str, port: int) -> list[str]:
    """The command with the guide's two placeholders filled in, and what the guide says to add on one machine."""
    assert ON_ONE_MACHINE in GUIDE.read_text(encoding="utf-8")  # the guide still says so
    words = shlex.split(command)
    assert words.count("host0") == 1 and words.count("29400") == 1, command
    words = ["127.0.0.1" if w == "host0" else str(port) if w == "29400" else w for w in words]
    if machine == "host1":
        words[words.index("--") : words.index("--")] = ["--node-addr", "127.0.0.2"]
    return words


def test_the_two_machine_example_runs_as_written(tmp_path):
    commands = guide_commands()
    port = free_ports(1)[0]
    env = subprocess_env()
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]  # the installed tfdevices command
    procs = [
        subprocess.Popen(
            _as_here(machine, commands[machine], port),
            env=env,
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for machine in ("host1", "host0")  # node 1 first: it waits for node 0
    ]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        kill_all(p.pid for p in procs)
    assert [p.returncode for p in procs] == [0, 0], outs
    printed = outs[0][0] + outs[1][0]
    ranks = re.findall(r"rank (\d)/4 \(TF_CONFIG\).*weights checksum (-?[\d.]+)", printed)
    assert sorted(r for r, _ in ranks) == ["0", "1", "2", "3"], printed
    assert len({checksum for _, checksum in ranks}) == 1, printed  # one job: the same weights everywhere
    assert "node 0 of 2: ranks 0..1 of 4" in outs[1][0] and "node 1 of 2: ranks 2..3 of 4" in outs[0][0]
