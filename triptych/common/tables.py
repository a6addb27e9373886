"""Tables as plain data, printed two ways: a `Table` holds a title, columns and
rows of strings or `Bar`s; `as_text` renders it for a pipe or a log file,
`as_rich` for a terminal. Both show the same cells, so a log holds exactly what
a terminal shows (`triptych run` writes its tables into run_log.txt this way;
`triptych grad` prints its agreement table the same way)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

BAR_WIDTH = 10
CAPTION_WIDTH = 80  # plain-text captions wrap at this width, or the table's


@dataclass(frozen=True)
class Bar:
    """A text bar for a value in [0, 1] (None: nothing to draw)."""

    value: float | None

    def text(self, full: str = "#", empty: str = ".") -> str:
        if self.value is None or not math.isfinite(self.value):
            return "n/a"
        filled = round(min(max(self.value, 0.0), 1.0) * BAR_WIDTH)
        return full * filled + empty * (BAR_WIDTH - filled)


Cell = str | Bar


@dataclass
class Table:
    """Rows of cells under named columns; `align` has one 'l' or 'r' per column."""

    title: str
    columns: list[str]
    align: str
    rows: list[list[Cell]] = field(default_factory=list)
    caption: str = ""


def as_text(table: Table) -> str:
    """The table as aligned plain text (ASCII bars), for pipes and run_log.txt."""
    cells = [[_plain(c) for c in row] for row in table.rows]
    widths = [
        max([len(name)] + [len(row[i]) for row in cells])
        for i, name in enumerate(table.columns)
    ]

    def line(row: list[str]) -> str:
        parts = [
            cell.rjust(width) if side == "r" else cell.ljust(width)
            for cell, width, side in zip(row, widths, table.align, strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    lines = [table.title, line(table.columns), rule, *(line(row) for row in cells)]
    if table.caption:
        lines += textwrap.wrap(table.caption, max(CAPTION_WIDTH, len(rule)))
    return "\n".join(lines)


def as_rich(table: Table):
    """The table as a rich.table.Table (block bars, PASS green, FAIL red)."""
    from rich.table import Table as RichTable
    from rich.text import Text

    styles = {"PASS": "bold green", "FAIL": "bold red", "YES": "green", "NO": "red"}
    rich_table = RichTable(
        title=table.title,
        title_justify="left",
        caption=table.caption or None,
        caption_justify="left",
    )
    for name, side in zip(table.columns, table.align, strict=True):
        rich_table.add_column(name, justify="right" if side == "r" else "left")
    for row in table.rows:
        rich_table.add_row(
            *(
                Text(c.text("█", "░"), style="cyan")
                if isinstance(c, Bar)
                else Text(c, style=styles.get(c, ""))
                for c in row
            )
        )
    return rich_table


def _plain(cell: Cell) -> str:
    return cell.text() if isinstance(cell, Bar) else cell
