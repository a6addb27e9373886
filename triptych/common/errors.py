"""The errors a command reports in one line. A command raises `CommandError`;
`triptych.cli.main` catches it for every command and prints
`triptych COMMAND: error: message` on stderr, exit code 2, never a traceback."""

from __future__ import annotations

import sys


class CommandError(Exception):
    """What the user can mend, found after parsing: an argument that does not
    fit, a backend that is not installed, an output directory that cannot be
    written. Its message is one line."""


def print_error(command: str, message) -> int:
    """Print `command: error: message` as one line on stderr; return 2."""
    print(f"{command}: error: {message}", file=sys.stderr)
    return 2
