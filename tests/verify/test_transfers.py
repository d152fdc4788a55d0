"""Transfers summarized: grouped by source, destination and tensor in the text report; ``--all`` lists each."""

from __future__ import annotations

import argparse

import pytest

from tests.helpers import run_cli
from tests.xspaces import Space, gpu_copy, gpu_kernel, host_call
from tfdevices.core.errors import InputError
from tfdevices.verify import PlacementReport, Transfer, TransferGroup, group_transfers
from tfdevices.verify.report import FORMS

X = Transfer("CPU:0", "GPU:0", "x:0", "float32", (4, 4), 64)
CONST = Transfer("GPU:0", "CPU:0", "MakeTensorFromProto:0", "int32", (1,), 4)
UNKNOWN = Transfer("GPU:0", "CPU:0", "MakeTensorFromProto:0", "", None, None)


@pytest.mark.parametrize(
    ("transfers", "expected"),
    [
        ([], ()),
        ([X], (TransferGroup("CPU:0", "GPU:0", "x:0", 1, 64, "float32", (4, 4)),)),
        (  # the commonest first; bytes of the copies whose size is known
            [X, CONST, CONST, UNKNOWN],
            (
                TransferGroup("GPU:0", "CPU:0", "MakeTensorFromProto:0", 3, 8, "*", None),
                TransferGroup("CPU:0", "GPU:0", "x:0", 1, 64, "float32", (4, 4)),
            ),
        ),
        (  # one tensor both ways is two groups; ties: the larger first
            [X, Transfer("GPU:0", "CPU:0", "x:0", "float32", (4, 4), 64), CONST],
            (
                TransferGroup("CPU:0", "GPU:0", "x:0", 1, 64, "float32", (4, 4)),
                TransferGroup("GPU:0", "CPU:0", "x:0", 1, 64, "float32", (4, 4)),
                TransferGroup("GPU:0", "CPU:0", "MakeTensorFromProto:0", 1, 4, "int32", (1,)),
            ),
        ),
        ([UNKNOWN], (TransferGroup("GPU:0", "CPU:0", "MakeTensorFromProto:0", 1, None, "", None),)),
    ],
)
def test_group_transfers(transfers, expected):
    assert group_transfers(transfers) == expected


def test_the_markdown_groups_transfers_and_lists_each_when_asked():
    report = PlacementReport((), transfers=(X,) + (CONST,) * 200)
    grouped = report.to_markdown()
    assert "**Transfers: 201** (2 distinct)" in grouped
    assert "| GPU:0 | CPU:0 | `MakeTensorFromProto:0` | int32 | [1] | 200 | 800 B |" in grouped
    assert grouped.count("MakeTensorFromProto") == 1
    each = report.to_markdown(all_transfers=True)
    assert each.count("| GPU:0 | CPU:0 | `MakeTensorFromProto:0` | int32 | [1] | 4 B |") == 200
    assert "| CPU:0 | GPU:0 | `x:0` | float32 | [4, 4] | 64 B |" in each


def test_tfdevices_placement_groups_transfers_and_all_lists_each(tmp_path):
    space = Space()
    steps = 5
    for step in range(steps):
        at = step * 100.0
        host_call(space, "__inference_step_1", at, at + 50, step + 1, [("m/MatMul", "MatMul", at + 10, 1.0)])
        gpu_kernel(space, 0, 13, "volta_sgemm", at + 20, 2.0, "m/MatMul:MatMul", group=step + 1)
        gpu_copy(space, 0, 14, "H2D", at + 5, 1, 4096, op="IteratorGetNext:IteratorGetNext")
    path = str(tmp_path / "host.xplane.pb")
    space.write(path)
    grouped = run_cli("placement", path)
    assert grouped.returncode == 0, grouped.stderr
    rows = [line.split() for line in grouped.stdout.splitlines() if "IteratorGetNext:0" in line]
    assert len(rows) == 1 and rows[0][-3:] == [str(steps), "20.0", "KiB"], grouped.stdout
    each = run_cli("placement", path, "--all", "--format", "markdown")
    assert each.returncode == 0, each.stderr
    rows = [line for line in each.stdout.splitlines() if "`IteratorGetNext:0`" in line]
    assert len(rows) == steps and all(row.endswith("| 4.0 KiB |") for row in rows), each.stdout


def test_the_docstring_examples_of_the_records_run():
    import doctest

    from tfdevices.verify import records

    result = doctest.testmod(records)
    assert result.attempted > 0 and result.failed == 0


def test_a_report_stored_with_the_older_word_copies_still_reads():
    import json

    report = PlacementReport((), transfers=(X, CONST))
    data = json.loads(report.to_json())
    data["copies"] = data.pop("transfers")
    assert PlacementReport.from_json(json.dumps(data)).transfers == report.transfers


def test_the_text_and_the_markdown_show_the_same_tables():
    report = PlacementReport((), transfers=(X,) + (CONST,) * 3)
    text, markdown = report.to_text(), report.to_markdown()
    assert "|" not in text and "**" not in text and "`" not in text
    heading, columns, *rows = text.split("\n\n")[0].splitlines()
    assert heading == "Transfers: 4 (2 distinct)"
    assert columns.split() == ["src", "dst", "tensor", "dtype", "shape", "count", "bytes"]
    assert [row.split() for row in rows] == [
        ["GPU:0", "CPU:0", "MakeTensorFromProto:0", "int32", "[1]", "3", "12", "B"],
        ["CPU:0", "GPU:0", "x:0", "float32", "[4,", "4]", "1", "64", "B"],
    ]
    assert {row.index(row.split()[1]) for row in rows} == {columns.index("dst")}  # aligned under its heading
    for table in [t for t in report.tables() if t.title]:
        assert table.heading in text and f"**{table.title}**" in markdown
        for row in table.rows:
            assert "  ".join(row[:2]) in text and "| " + " | ".join(row[:2]) + " |" in markdown


def test_render_gives_what_tfdevices_placement_prints_in_each_form():
    from tfdevices import cli

    report = PlacementReport((), transfers=(X,))
    assert report.render() == f"{report.summary()}\n\n{report.to_text()}"
    assert report.render("markdown") == f"{report.summary()}\n\n{report.to_markdown()}"
    assert PlacementReport.from_json(report.render("json")) == report
    with pytest.raises(InputError, match="^no report format 'yaml': the formats are table, markdown, json"):
        report.render("yaml")
    parser = cli.build_parser("placement")
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    choices = next(a.choices for a in commands.choices["placement"]._actions if a.dest == "format")
    assert tuple(choices) == FORMS  # the command offers the forms render knows
