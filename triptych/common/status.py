"""What a command shows while it works, so that a terminal never sits silent:
a spinner with the step it is on ("loading numpy, torch, jax", "torch.compile
compiles torch-compile's step"), drawn at once, and progress bars.

On stderr and only when stderr is a terminal, as git and pip show their
progress: piped, stderr gets nothing from here (an error stays the one line
on stderr, a log holds the results alone), and stdout is never touched, so
--json and piped reports stay clean. Both are transient: once the step is
done its line is gone. A command prints nothing on stdout while one is shown
(the two would share the terminal's last line).

One exception, `status_stream`: where stdout and stderr are two different
terminals relayed to one screen (tox runs a command so, a pseudo-terminal
each), the spinner's last erase on stderr could reach the screen after the
report on stdout and erase its verdict; there the status is drawn on stdout,
the report's own stream, so that it is erased before the report is written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass


def console():
    """A rich Console on the stream that status lines are drawn on,
    `status_stream()` (made afresh: it reads the terminal's width and
    TTY_COMPATIBLE when it is made)."""
    from rich.console import Console

    return Console(file=status_stream(), highlight=False)


def status_stream():
    """sys.stderr, unless stdout and stderr are two different terminals: then
    sys.stdout. Moving the cursor back over a status line is safe only in the
    stream whose order the screen keeps with the report's: stderr when stdout
    is the same terminal or no terminal (a file, a pipe: written after the
    status was erased); stdout when each stream is relayed on its own."""
    import os
    import sys

    def terminal(stream):
        try:
            return os.isatty(stream.fileno())
        except (AttributeError, OSError, ValueError):  # pytest's capture
            return False

    if not (terminal(sys.stderr) and terminal(sys.stdout)):
        return sys.stderr
    out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    same = (out.st_rdev, out.st_ino) == (err.st_rdev, err.st_ino)
    return sys.stderr if same else sys.stdout


def on_terminal() -> bool:
    """Whether stderr is a terminal (where status lines are shown)."""
    return console().is_terminal


@contextlib.contextmanager
def shown(text: str, *, quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """A spinner and `text` on stderr while the block runs; yields `say`,
    which replaces the text. Nothing when `quiet` or stderr is not a terminal.
    The first line is drawn before the block starts, not at the spinner's
    first tick."""
    err = console()
    if quiet or not err.is_terminal:
        yield lambda text: None
        return
    from rich.live import Live
    from rich.spinner import Spinner

    spinner = Spinner("dots", text)
    live = Live(
        spinner,
        console=err,
        transient=True,
        refresh_per_second=8,
        redirect_stdout=False,  # stdout stays the command's, never the status's
    )
    live.start(refresh=True)

    def say(text: str) -> None:
        spinner.update(text=text)
        live.refresh()

    try:
        yield say
    finally:
        live.stop()


def loading_text(names: Iterable[str]) -> str:
    """'loading numpy, torch, jax': what importing the frameworks is called."""
    return f"loading {', '.join(names)}"


def progress(*, quiet: bool = False):
    """A rich Progress on stderr: a spinner, the description, a bar, the count
    and the time elapsed (a compile shows as time going by, not as a frozen
    bar); disabled when `quiet` or stderr is not a terminal. On a narrow
    terminal the parts give way in turn (`fitted`): the bar first, then the
    description's note, the count and the clock; the description's own words
    are elided last."""
    from rich.progress import (
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TimeElapsedColumn,
    )

    # made once: the spinner turns with the time since it was first drawn
    parts = SpinnerColumn(), MofNCompleteColumn(), TimeElapsedColumn()

    class Fitted(Progress):
        def make_tasks_table(self, tasks):
            return _Rows([task for task in tasks if task.visible], *parts)

    err = console()
    return Fitted(
        console=err,
        disable=quiet or not err.is_terminal,
        transient=True,
        redirect_stdout=False,
    )


BAR_WIDTH = 20
"""The progress bar's width: rich's 40 would leave an 80-column terminal 20
columns for the description."""


def elided(text: str, width: int) -> str:
    """`text` in at most `width` columns: its middle replaced by an ellipsis
    where it is wider (its end, which says what is going on now, kept the
    longer)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = (width - 1) // 3
    tail = width - 1 - head
    return text[:head] + "…" + text[len(text) - tail :]


def with_note(text: str, note: str | None, width: int) -> str:
    """`text (note)` in at most `width` columns: the note elided first (its
    middle), left out where fewer than 8 of its columns would show; then the
    text, by `elided`."""
    if not note:
        return elided(text, width)
    room = width - len(text) - len(" ()")
    if room >= len(note):
        return f"{text} ({note})"
    if room >= 8:
        return f"{text} ({elided(note, room)})"
    return elided(text, width)


MIN_BAR_WIDTH = 6
"""A bar narrower than this says too little to keep: it goes instead."""


@dataclass(frozen=True)
class Layout:
    """How a progress line's parts share a terminal's width: the columns of
    the description, of the bar (0: none), and whether the count and the
    clock are shown."""

    description: int
    bar: int
    count: bool
    clock: bool


def fitted(width: int, texts, wholes, count: int, clock: int) -> Layout:
    """The Layout of progress lines in `width` columns, the same for every
    line so that their parts stay aligned.

    Args:
        texts: each line's description alone (its note left out).
        wholes: each line's description with its note, whole.
        count, clock: the columns of the widest count ('12/350') and clock.

    The parts give way in this order: the bar shrinks to MIN_BAR_WIDTH, then
    goes; the notes are elided, then left out (`with_note`), then the count
    goes, then the clock; only then is a description elided (`elided`).
    """
    text, whole = max(texts, default=0), max(wholes, default=0)
    room = width - 2 - (1 + count) - (1 + clock)  # 2: the spinner and a space
    bar = min(BAR_WIDTH, room - 1 - whole)
    if bar >= MIN_BAR_WIDTH:
        return Layout(whole, bar, True, True)
    for shown in ((True, True), (False, True), (False, False)):
        room = width - 2 - (1 + count) * shown[0] - (1 + clock) * shown[1]
        if room >= text:
            return Layout(min(room, whole), 0, *shown)
    return Layout(max(width - 2, 1), 0, False, False)


class _Rows:
    """The progress lines of some tasks, laid out (`fitted`) when drawn, in
    the width the console gives them."""

    def __init__(self, tasks, spinner, count, clock):
        self.tasks, self.spinner, self.count, self.clock = tasks, spinner, count, clock

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement(min(options.max_width, 3), options.max_width)

    def __rich_console__(self, console, options):
        from rich.progress import BarColumn
        from rich.table import Column, Table
        from rich.text import Text

        notes = [(t.description, t.fields.get("note")) for t in self.tasks]
        counts = [self.count(t) for t in self.tasks]
        clocks = [self.clock(t) for t in self.tasks]
        layout = fitted(
            options.max_width,
            [len(text) for text, _ in notes],
            [len(with_note(text, note, 10**6)) for text, note in notes],
            max((c.cell_len for c in counts), default=0),
            max((c.cell_len for c in clocks), default=0),
        )
        columns = [Column(no_wrap=True), Column(no_wrap=True)]
        columns += [Column(no_wrap=True)] * bool(layout.bar)
        columns += [Column(no_wrap=True, justify="right")] * layout.count
        columns += [Column(no_wrap=True)] * layout.clock
        table = Table.grid(*columns, padding=(0, 1))
        bar = BarColumn(bar_width=layout.bar or None)
        for task, (text, note), count, clock in zip(
            self.tasks, notes, counts, clocks, strict=True
        ):
            fits = with_note(text, note, layout.description)  # as written: no markup
            cells = [self.spinner(task), Text(fits, no_wrap=True)]
            cells += [bar(task)] * bool(layout.bar)
            cells += [count] * layout.count + [clock] * layout.clock
            table.add_row(*cells)
        yield table
