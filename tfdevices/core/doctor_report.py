"""A report of sections of labelled rows: what ``tfdevices doctor`` prints, as text for people or JSON for machines.

>>> print(Report((("a", (("x", "1"), ("longer", "2"))),)).text())
a:
  x       1
  longer  2
"""

from __future__ import annotations

import dataclasses
import json


@dataclasses.dataclass(frozen=True)
class Report:
    """What ``tfdevices doctor`` found; :meth:`text` for people, :meth:`to_dict` for ``--json``.

    Attributes:
        sections: ``(title, ((label, value), ...))`` in the order shown.
    """

    sections: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]

    def text(self) -> str:
        """The report as aligned lines, one block per section."""
        width = max((len(label) for _, rows in self.sections for label, _ in rows), default=0)
        blocks = []
        for title, rows in self.sections:
            blocks.append("\n".join([f"{title}:"] + [f"  {label.ljust(width)}  {value}" for label, value in rows]))
        return "\n\n".join(blocks)

    def to_dict(self) -> dict[str, dict[str, str]]:
        """``{section: {label: value}}``."""
        return {title: dict(rows) for title, rows in self.sections}

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2)
