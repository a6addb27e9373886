"""Tables as plain data, printed two ways: a `Table` holds a title, columns and
rows of strings or `Bar`s; `as_text` renders it for a pipe or a log file,
`as_rich` for a terminal, `as_markdown` for a Markdown file. All show the same
cells, so a log holds exactly what a terminal shows (`triptych run` writes its
tables into run_log.txt this way; `triptych grad` prints its agreement table
the same way).

A cell is never cut. Piped, a table is as wide as its widest cell. On a
terminal, `as_rich` fits the table to the terminal's width when it is drawn,
in the first of these ways that fits:

1. as it is, every header on one line;
2. headers, and cells with spaces in them, wrapped between words (a number
   has no space, so it stays whole), unless that wraps a column that names a
   row (`Table.keys`) and the table fits in two parts of 3 with every cell
   whole;
3. fewer columns, the rest below: the table in parts of as many columns as
   fit, each part repeating the columns that name a row;
4. stacked: one block per row, a line per cell ("column: value").
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

from triptych.common.prose import WHOLE

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
    """Rows of cells under named columns; `align` has one 'l' or 'r' per column;
    the first `keys` columns name a row (a narrow terminal repeats them in every
    part of a table it splits)."""

    title: str
    columns: list[str]
    align: str
    rows: list[list[Cell]] = field(default_factory=list)
    caption: str = ""
    keys: int = 1


def without_empty_columns(found: Table, optional: tuple[str, ...]) -> Table:
    """`found` less those of its `optional` columns that hold no figure ("-")
    in any row: a figure that nothing in the run measured."""
    keep = [
        i
        for i, name in enumerate(found.columns)
        if name not in optional or any(row[i] != "-" for row in found.rows)
    ]
    found.columns = [found.columns[i] for i in keep]
    found.align = "".join(found.align[i] for i in keep)
    found.rows = [[row[i] for i in keep] for row in found.rows]
    return found


def number(value: float | None, fmt: str = ".3g") -> str:
    """`value` formatted by `fmt`; "-" for None (a figure not measured)."""
    return "-" if value is None else format(value, fmt)


def figure(value: float | None) -> str:
    """A measured figure for a table: three significant digits, and whole
    numbers from 1000 on (1090, not 1.09e+03); "-" for None."""
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 999.5 else f"{value:.3g}"


def as_text(table: Table) -> str:
    """The table as aligned plain text (ASCII bars), for pipes and run_log.txt.

    Every cell whole, however wide; no line has trailing spaces, and the rule
    under a last left-aligned column (free text, e.g. details) is only as long
    as its header, so one long cell there does not widen every line."""
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

    ruled = list(widths)
    if table.align[-1] == "l":
        ruled[-1] = len(table.columns[-1])
    rule = "  ".join("-" * width for width in ruled)
    lines = [table.title, line(table.columns), rule, *(line(row) for row in cells)]
    if table.caption:
        width = max(CAPTION_WIDTH, len(rule))  # a path in it stays whole
        lines += textwrap.wrap(table.caption, width, **WHOLE)
    return "\n".join(lines)


def as_markdown(table: Table) -> str:
    """The table as a Markdown table (no title or caption), for a .md file."""
    cells = [[_plain(c) for c in row] for row in table.rows]
    rule = ["---:" if side == "r" else "---" for side in table.align]
    lines = [table.columns, rule, *cells]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def as_rich(table: Table):
    """The table for a rich Console: block bars, PASS green, FAIL red, fitted to
    the console's width when printed (see the module's docstring)."""
    return _Fitted(table)


# Fitting a table to a terminal ------------------------------------------------


class _Fitted:
    """A rich renderable: the table laid out for the width it is given."""

    def __init__(self, table: Table):
        self.table = table

    def __rich_console__(self, console, options):
        yield from layout(self.table, options.max_width, console)


def layout(table: Table, width: int, console) -> list:
    """The rich renderables that show `table` within `width` columns, every
    cell whole: the first of the module's four ways that fits."""
    natural = _rich_table(table)
    if _width(natural, console) <= width:
        return [natural]
    widths = _fit_widths(table, width, console)
    keys = range(min(table.keys, len(table.columns) - 1))
    whole_keys = widths is not None and all(
        widths[i] >= _cells_width(table, i) for i in keys
    )
    # a row's name wrapped is hard to follow: two parts, every cell whole, first
    parts = None if whole_keys else _column_parts(table, width, console, _cells_width)
    if widths is not None and (parts is None or len(parts) > 2):
        return [_rich_table(table, widths)]
    parts = parts or _column_parts(table, width, console, _least)
    if parts is None:
        return [_stacked(table)]
    return [
        _fit(_part(table, columns, number, len(parts), width), width, console)
        for number, columns in enumerate(parts, start=1)
    ]


def _fit(table: Table, width: int, console):
    """`table` laid out in `_fit_widths`; None when it does not fit `width`."""
    widths = _fit_widths(table, width, console)
    return None if widths is None else _rich_table(table, widths)


def _fit_widths(table: Table, width: int, console) -> list[int] | None:
    """Each column as narrow as its longest word (no word cut), the room left
    given to the columns whose cells or header it unwraps; None when even the
    narrowest does not fit `width`."""
    widths = [_least(table, i) for i in range(len(table.columns))]
    spare = width - _width(_rich_table(table, widths), console)
    if spare < 0:
        return None
    # cells on one line first, then headers on one line, cheapest first
    for target in (_cells_width, _most):
        wants = sorted(
            (target(table, i) - widths[i], i)
            for i in range(len(table.columns))
            if target(table, i) > widths[i]
        )
        for extra, i in wants:
            if extra <= spare:
                widths[i] += extra
                spare -= extra
    # what is left, shared among the columns still wrapping, as they want it
    wants = {
        i: _cells_width(table, i) - widths[i]
        for i in range(len(table.columns))
        if _cells_width(table, i) > widths[i]
    }
    total = sum(wants.values())
    for i, want in wants.items():
        widths[i] += spare * want // total
    return widths


def _column_parts(
    table: Table, width: int, console, narrowest
) -> list[list[int]] | None:
    """The columns of each part when the table is split to fit `width` (the
    key columns in every part), each column at least `narrowest(part, i)`
    wide (`_least`: no word cut; `_cells_width`: every cell on one line);
    None when the keys and one more do not fit."""
    keys = list(range(min(table.keys, len(table.columns) - 1)))

    def fits(columns: list[int]) -> bool:
        part = _select(table, columns)
        least = [narrowest(part, i) for i in range(len(columns))]
        return _width(_rich_table(part, least), console) <= width

    parts: list[list[int]] = []
    current: list[int] = []
    for column in range(len(keys), len(table.columns)):
        if fits([*keys, *current, column]):
            current.append(column)
        elif current and fits([*keys, column]):
            parts.append(keys + current)
            current = [column]
        else:
            return None
    parts.append(keys + current)
    return parts


def _part(
    table: Table, columns: list[int], number: int, total: int, width: int
) -> Table:
    """Part `number` of `total` of a split table: its columns, the title on the
    first part saying why, the caption under the last part."""
    part = _select(table, columns)
    part.title = (  # the note on a line of its own: a long title wraps before it
        f"{table.title}\n(part 1 of {total}: its {len(table.columns)} columns are "
        f"too wide for {width})"
        if number == 1
        else f"(part {number} of {total})"
    )
    part.caption = table.caption if number == total else ""
    return part


def _select(table: Table, columns: list[int]) -> Table:
    """The table with only `columns`, in that order."""
    return Table(
        table.title,
        [table.columns[i] for i in columns],
        "".join(table.align[i] for i in columns),
        [[row[i] for i in columns] for row in table.rows],
        table.caption,
        keys=sum(1 for i in columns if i < table.keys),
    )


def _stacked(table: Table):
    """One block per row: the key cells on a line, then "column: value" lines."""
    from rich.console import Group
    from rich.text import Text

    lines = [Text(table.title, style="italic")]
    keys = min(table.keys, len(table.columns) - 1)
    for row in table.rows:
        lines.append(Text(" ".join(_plain(c) for c in row[:keys]), style="bold"))
        for name, cell in zip(table.columns[keys:], row[keys:], strict=True):
            line = Text(f"  {name}: ")
            line.append_text(_rich_cell(cell))
            lines.append(line)
    if table.caption:
        lines.append(Text(table.caption, style="italic"))
    return Group(*lines)


def _rich_table(table: Table, widths: list[int] | None = None):
    """A rich.table.Table of `table`; `widths`: each column's exact width."""
    from rich.table import Table as RichTable

    rich_table = RichTable(
        title=table.title,
        title_justify="left",
        caption=table.caption or None,
        caption_justify="left",
    )
    for n, (name, side) in enumerate(zip(table.columns, table.align, strict=True)):
        rich_table.add_column(
            name,
            justify="right" if side == "r" else "left",
            width=None if widths is None else widths[n],
        )
    for row in table.rows:
        rich_table.add_row(*(_rich_cell(c) for c in row))
    return rich_table


STYLES = {"PASS": "bold green", "FAIL": "bold red", "YES": "green", "NO": "red"}


def _rich_cell(cell: Cell):
    from rich.text import Text

    if isinstance(cell, Bar):
        return Text(cell.text("█", "░"), style="cyan")
    return Text(cell, style=STYLES.get(cell, ""))


def _width(rich_table, console) -> int:
    """How many columns `rich_table` takes when nothing constrains it."""
    from rich.measure import Measurement

    unbounded = console.options.update_width(10**6)
    return Measurement.get(console, unbounded, rich_table).maximum


def _words(text: str) -> list[str]:
    return text.split() or [""]


def _least(table: Table, i: int) -> int:
    """Column i's narrowest width that cuts no word: its longest word, header
    included."""
    texts = [table.columns[i], *(_rich_text(row[i]) for row in table.rows)]
    return max(len(word) for text in texts for word in _words(text))


def _cells_width(table: Table, i: int) -> int:
    """Column i's width with every cell on one line (the header may wrap)."""
    return max([_least(table, i), *(len(_rich_text(row[i])) for row in table.rows)])


def _most(table: Table, i: int) -> int:
    """Column i's width with every cell and the header on one line."""
    return max(_cells_width(table, i), len(table.columns[i]))


def _rich_text(cell: Cell) -> str:
    return cell.text("█", "░") if isinstance(cell, Bar) else cell


def _plain(cell: Cell) -> str:
    return cell.text() if isinstance(cell, Bar) else cell
