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
    terminal only the description (its middle elided) and the bar give way:
    the count and the clock are never cut."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TimeElapsedColumn,
    )
    from rich.table import Column

    err = console()
    return Progress(
        SpinnerColumn(table_column=Column(no_wrap=True)),
        _Description(table_column=Column()),  # these two may shrink (may wrap)
        BarColumn(bar_width=BAR_WIDTH, table_column=Column()),
        MofNCompleteColumn(table_column=Column(no_wrap=True)),
        TimeElapsedColumn(table_column=Column(no_wrap=True)),
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


def _Description(**kwargs):
    """The progress column of the task's description, and of its `note` field
    where it has one (`progress.update(task, note=...)`), fitted to the width
    the table gives it by `with_note`."""
    from rich.measure import Measurement
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Elided:
        def __init__(self, text: str, note: str | None):
            self.text, self.note = text, note

        def __rich_measure__(self, console, options):
            whole = len(with_note(self.text, self.note, 10**6))
            return Measurement(min(whole, 8), whole)

        def __rich_console__(self, console, options):
            fitted = with_note(self.text, self.note, options.max_width)
            yield Text(fitted, no_wrap=True)

    class Description(ProgressColumn):
        def render(self, task):
            return Elided(task.description, task.fields.get("note"))

    return Description(**kwargs)
