"""What a command shows while it works, so that a terminal never sits silent:
a spinner with the step it is on ("loading numpy, torch, jax", "torch.compile
compiles torch-compile's step"), drawn at once, and progress bars.

On stderr and only when stderr is a terminal, as git and pip show their
progress: piped, stderr gets nothing from here (an error stays the one line
on stderr, a log holds the results alone), and stdout is never touched, so
--json and piped reports stay clean. Both are transient: once the step is
done its line is gone. A command prints nothing on stdout while one is shown
(the two would share the terminal's last line).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator


def console():
    """A rich Console on stderr (made afresh: it reads the terminal's width
    and TTY_COMPATIBLE when it is made)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


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
    bar); disabled when `quiet` or stderr is not a terminal."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    err = console()
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=quiet or not err.is_terminal,
        transient=True,
        redirect_stdout=False,
    )
