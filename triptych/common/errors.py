"""The errors a command reports in one line, for every command in one place:
`triptych.cli.main` catches them and prints one line on stderr, never a
traceback.

    CommandError        `triptych COMMAND: error: message`, exit code 2
    KeyboardInterrupt   (Ctrl-C) `triptych COMMAND: interrupted`, exit code 130;
                        an `Interrupted` adds where the work done so far is
"""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130
"""128 + SIGINT (2): the exit code a shell gives a program stopped by Ctrl-C."""


class CommandError(Exception):
    """What the user can mend, found after parsing: an argument that does not
    fit, a backend that is not installed, an output directory that cannot be
    written. Its message is one line."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, after the command kept what it had done.

    Attributes:
        kept: what it kept where, e.g. "12 rows done so far kept in DIR/FILE".
    """

    def __init__(self, kept: str):
        super().__init__(kept)
        self.kept = kept


def print_error(command: str, message) -> int:
    """Print `command: error: message` as one line on stderr (on a terminal,
    wrapped between words at its width); return 2."""
    from triptych.common.prose import echo

    echo(f"{command}: error: {message}", file=sys.stderr)
    return 2


def print_interrupted(command: str, interrupt: KeyboardInterrupt) -> int:
    """Print `command: interrupted` (and what was kept where) as one line on
    stderr; return EXIT_INTERRUPTED."""
    kept = f"; {interrupt.kept}" if isinstance(interrupt, Interrupted) else ""
    print(f"{command}: interrupted{kept}", file=sys.stderr)
    return EXIT_INTERRUPTED
