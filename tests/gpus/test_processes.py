"""GPU processes: user and command from a /proc made of files; never the environment."""

from __future__ import annotations

import os
import pwd

import pytest

from tfdevices.core.errors import InventoryFileError
from tfdevices.gpus.processes import MAX_COMMAND, GpuProcess, command_text, describe


def proc_entry(root, pid, *, uid=None, cmdline=None, comm=None):
    d = root / str(pid)
    d.mkdir()
    if uid is not None:
        (d / "status").write_text(f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n")
    if cmdline is not None:
        (d / "cmdline").write_bytes(cmdline)
    if comm is not None:
        (d / "comm").write_bytes(comm)
    (d / "environ").write_bytes(b"AWS_SECRET_ACCESS_KEY=abc\0")


def test_describe(tmp_path):
    proc_entry(tmp_path, 10, uid=0, cmdline=b"python\0a b.py\0")
    proc_entry(tmp_path, 11, uid=os.getuid(), cmdline=b"", comm=b"kworker/0:1\n")  # a kernel thread
    proc_entry(tmp_path, 12, uid=4_000_000_000, cmdline=b"x\0")  # a uid without a name
    proc_entry(tmp_path, 13, cmdline=b"y\0")  # status unreadable
    found = describe([10, 11, 12, 13, 14, 10], proc=str(tmp_path))
    assert found == {
        10: ("root", "python a b.py"),
        11: (pwd.getpwuid(os.getuid()).pw_name, "[kworker/0:1]"),
        12: ("4000000000", "x"),
        13: (None, "y"),
        14: (None, None),
    }
    assert "abc" not in repr(found)


@pytest.mark.parametrize(
    "raw, text",
    [
        (b"", None),
        (b"\0\0", None),
        (b"a\0b\0", "a b"),
        (b"echo\0\x1b[31mred\0", "echo \\x1b[31mred"),
        (b"\xff\xfe\0", "\\xff\\xfe"),
        (b"x" * 5000, "x" * (MAX_COMMAND - 3) + "..."),
    ],
)
def test_command_text(raw, text):
    assert command_text(raw) == text


@pytest.mark.parametrize(
    "data, first_words",
    [
        ({"kind": "C"}, "p: lacks 'pid'"),
        ({"pid": -1}, "p: pid=-1 must be a whole number"),
        ({"pid": 1, "kind": "X"}, "p: kind='X'; known kinds"),
        ({"pid": 1, "gpu_memory": 1.5}, "p: gpu_memory=1.5"),
        ({"pid": 1, "user": 3}, "p: user=3 must be a string"),
        ({"pid": 1, "env": "A=1"}, "p: unknown field(s) ['env']"),
        ([1], "p: expected a JSON object for a process, not a list"),
    ],
)
def test_bad_process_entries_are_refused(data, first_words):
    with pytest.raises(InventoryFileError) as err:
        GpuProcess.from_dict(data, where="p")
    assert str(err.value).startswith(first_words) and "HINT:" in str(err.value)
