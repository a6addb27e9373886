"""Free prose on stdout, printed as `triptych run`'s report is: on a terminal,
wrapped between words at the terminal's width (the terminal would otherwise
break it mid-word); piped, each line whole, so a log or grep gets it on one
line. A wrapped line's continuation is indented two spaces deeper than its
first line, so an indented list stays a list. Code (a source line, a
heatmap, an array) is printed with `code=True`: never rewrapped."""

from __future__ import annotations

import textwrap

WHOLE = {"break_long_words": False, "break_on_hyphens": False}
"""textwrap's settings that keep every word whole, a path and a hyphenated
name among them: a line breaks only between words."""


def wrapped(text: str, width: int) -> str:
    """Each line of `text` that is wider than `width`, wrapped between words
    (a word wider than `width`, such as a path, stays whole); the others as
    they are."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        out += textwrap.wrap(
            line,
            width,
            subsequent_indent=indent + "  ",
            **WHOLE,
        )
    return "\n".join(out)


def say(console, text: str = "", style: str | None = None, *, code=False) -> None:
    """Print `text` on a rich Console: wrapped at its width on a terminal
    (not `code`), whole when piped."""
    if console.is_terminal and not code:
        text = wrapped(text, console.width)
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


def echo(text: str, file=None) -> None:
    """print(text) on `file` (stdout by default), as `say` does without rich:
    wrapped between words at the terminal's width where `file` is a terminal
    (COLUMNS, else the terminal's own), whole when piped; flushed, so that it
    keeps its order with the other stream."""
    import shutil
    import sys

    file = file or sys.stdout
    try:
        terminal = file.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if terminal:
        text = wrapped(text, shutil.get_terminal_size().columns)
    print(text, file=file, flush=True)
