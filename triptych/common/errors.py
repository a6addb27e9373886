"""The errors a command reports in one line, for every command in one place:
`triptych.cli.main` catches them and prints one line on stderr, never a
traceback.

    CommandError        `triptych COMMAND: error: message`, exit code 2
    KeyboardInterrupt   (Ctrl-C) `triptych COMMAND: interrupted`, exit code 130;
                        SIGTERM `triptych COMMAND: terminated (SIGTERM)`, 143,
                        and SIGHUP `triptych COMMAND: hung up (SIGHUP)`, 129
                        (`Stopped`, raised by `triptych.common.interrupt`);
                        an `Interrupted` adds where the work done so far is
"""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED = 130
"""128 + SIGINT (2): the exit code a shell gives a program stopped by Ctrl-C."""

STOPPED_WORDS = {
    signal.SIGINT: "interrupted",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGHUP: "hung up (SIGHUP)",
}
"""What the line on stderr says for each signal that stops a command."""


class CommandError(Exception):
    """What the user can mend, found after parsing: an argument that does not
    fit, a backend that is not installed, an output directory that cannot be
    written. Its message is one line."""


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised as Ctrl-C's KeyboardInterrupt is (a subclass,
    so that what cleans up after Ctrl-C cleans up after them too).

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP), after the command kept what it had done.

    Attributes:
        kept: what it kept where, e.g. "12 rows done so far kept in DIR/FILE".
        signum: the signal that stopped the command.
    """

    def __init__(self, kept: str, signum: int = signal.SIGINT):
        super().__init__(kept)
        self.kept = kept
        self.signum = signum


def numbered(count: int, noun: str) -> str:
    """How many there are and the indices a flag takes: '2 layers, 0 and 1',
    '4 heads, 0 to 3', '1 layer, 0'."""
    indices = {1: "0", 2: "0 and 1"}.get(count, f"0 to {count - 1}")
    return f"{count} {noun}{'s' * (count != 1)}, {indices}"


def signal_of(interrupt: BaseException) -> int:
    """The signal behind a KeyboardInterrupt: SIGINT unless it names another."""
    return getattr(interrupt, "signum", signal.SIGINT)


def print_error(command: str, message) -> int:
    """Print `command: error: message` as one line on stderr (on a terminal,
    wrapped between words at its width); return 2."""
    from triptych.common.prose import echo

    echo(f"{command}: error: {message}", file=sys.stderr)
    return 2


def print_interrupted(command: str, interrupt: KeyboardInterrupt) -> int:
    """Print `command: interrupted` (SIGTERM: `terminated (SIGTERM)`; SIGHUP:
    `hung up (SIGHUP)`), and what was kept where, as one line on stderr;
    return 128 + the signal's number (EXIT_INTERRUPTED for Ctrl-C)."""
    number = signal_of(interrupt)
    kept = f"; {interrupt.kept}" if isinstance(interrupt, Interrupted) else ""
    print(f"{command}: {STOPPED_WORDS[number]}{kept}", file=sys.stderr)
    return 128 + number
