"""Tables made once, shown as aligned text (a terminal) and as Markdown (a notebook, TensorBoard's Text tab)."""

from __future__ import annotations

import doctest

import pytest

from tfdevices.core import tables
from tfdevices.core.tables import Column, Table, markdown, plain

OPS = Table(
    "Transfers: 3",
    (Column("src"), Column("tensor", code=True), Column("bytes", right=True)),
    (("CPU:0", "x:0", "512 B"), ("GPU:1", "a_longer_name:0", "4 B")),
    "(2 distinct)",
)


def test_the_docstring_examples_run():
    result = doctest.testmod(tables)
    assert result.attempted > 0 and result.failed == 0


def test_plain_aligns_each_column_and_puts_numbers_right():
    lines = plain([OPS]).splitlines()
    assert lines == [
        "Transfers: 3 (2 distinct)",
        "  src    tensor           bytes",
        "  CPU:0  x:0              512 B",
        "  GPU:1  a_longer_name:0    4 B",
    ]
    assert "|" not in plain([OPS]) and "*" not in plain([OPS]) and "`" not in plain([OPS])


def test_markdown_shows_the_same_rows_with_the_title_bold_and_names_as_code():
    assert markdown([OPS]).splitlines() == [
        "**Transfers: 3** (2 distinct)",
        "",
        "| src | tensor | bytes |",
        "|---|---|---:|",
        "| CPU:0 | `x:0` | 512 B |",
        "| GPU:1 | `a_longer_name:0` | 4 B |",
    ]


def test_a_table_without_rows_is_its_title_and_an_untitled_one_is_not_indented():
    empty = Table("Collectives: 0", (Column("device"),), ())
    bare = Table("", (Column("device"), Column("ops", right=True)), (("CPU:0", "57"),))
    assert plain([bare, empty]) == "device  ops\nCPU:0    57\n\nCollectives: 0"
    assert markdown([bare, empty]) == "| device | ops |\n|---|---:|\n| CPU:0 | 57 |\n\n**Collectives: 0**"


def test_a_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="^table 'T': 2 columns, but a row has 1"):
        Table("T", (Column("a"), Column("b")), (("only one",),))
