"""Tables of a report, made once and shown two ways: aligned plain text for a terminal, Markdown for a notebook
or TensorBoard's Text tab.

A report builds its :class:`Table` records (a title, the columns, the rows as text); :func:`plain` and
:func:`markdown` render the same records, so the two forms cannot say different things.

>>> ops = Table(
...     "Ops by device",
...     (Column("device"), Column("ops", right=True), Column("commonest op", code=True)),
...     (("CPU:0", "57", "MatMul"), ("CPU:1", "6", "AddV2")),
... )
>>> print(plain([ops]))
Ops by device
  device  ops  commonest op
  CPU:0    57  MatMul
  CPU:1     6  AddV2
>>> print(markdown([ops]))
**Ops by device**
<BLANKLINE>
| device | ops | commonest op |
|---|---:|---|
| CPU:0 | 57 | `MatMul` |
| CPU:1 | 6 | `AddV2` |
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: its heading, numbers aligned right, names shown as code in Markdown."""

    name: str
    right: bool = False
    code: bool = False


@dataclasses.dataclass(frozen=True)
class Table:
    """One titled table: the title (bold in Markdown; ``""`` for none), the words after it, its rows as text.

    A table without rows shows its title alone ("Collectives: 0"); without a title either, nothing.
    """

    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""

    def __post_init__(self) -> None:
        wrong = [row for row in self.rows if len(row) != len(self.columns)]
        if wrong:
            raise ValueError(f"table {self.title!r}: {len(self.columns)} columns, but a row has {len(wrong[0])}")

    @property
    def heading(self) -> str:
        """The title and the words after it, as one line."""
        return " ".join(part for part in (self.title, self.note) if part)


def plain(tables: Iterable[Table]) -> str:
    """The tables as aligned text, a blank line between them; a titled table's rows indented under its title."""
    blocks = []
    for table in _shown(tables):
        lines = [table.heading] if table.heading else []
        if table.rows:
            indent = "  " if table.heading else ""
            cells = [tuple(c.name for c in table.columns), *table.rows]
            widths = [max(len(row[i]) for row in cells) for i in range(len(table.columns))]
            for row in cells:
                aligned = (
                    cell.rjust(width) if column.right else cell.ljust(width)
                    for cell, width, column in zip(row, widths, table.columns)
                )
                lines.append((indent + "  ".join(aligned)).rstrip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def markdown(tables: Iterable[Table]) -> str:
    """The tables in Markdown: each title in bold, a blank line, the table (none where there are no rows)."""
    blocks = []
    for table in _shown(tables):
        lines = []
        if table.title:
            lines.append(f"**{table.title}**" + (f" {table.note}" if table.note else ""))
        if table.rows:
            lines += [""] if lines else []
            lines.append("| " + " | ".join(c.name for c in table.columns) + " |")
            lines.append("|" + "|".join("---:" if c.right else "---" for c in table.columns) + "|")
            lines += [
                "| " + " | ".join(f"`{cell}`" if c.code else cell for cell, c in zip(row, table.columns)) + " |"
                for row in table.rows
            ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _shown(tables: Iterable[Table]) -> list[Table]:
    return [table for table in tables if table.title or table.rows]
