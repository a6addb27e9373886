"""`triptych`: the command line, the top of the package. Each command is a
module or package right under `triptych/` (run, lab, read, grad, train,
bench, check, shard) that provides `add_parser(subparsers)`; the parser it adds
sets `func`, called with the parsed arguments and returning the exit code. A
command imports
`triptych.common`, shared and impl_*, never another command or this module
(docs/architecture.md; tests/test_architecture.py checks).

Commands must import quickly: torch, jax or matplotlib are imported inside the
functions that need them, never at the top, so that `triptych --help` works
with any subset of backends installed.

Errors are handled here, once for every command: a `CommandError` is one line
on stderr, `triptych COMMAND: error: ...`, and exit code 2, as argparse's own
usage errors are (`triptych.common.parser.Parser`); Ctrl-C is one line too,
`triptych COMMAND: interrupted`, and exit code 130, with where the work done so
far is kept when the command kept it (`triptych.common.errors.Interrupted`),
and never lost where Python cannot raise it (`triptych.common.interrupt`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

from triptych.common.errors import CommandError, print_error, print_interrupted
from triptych.common.interrupt import stops_never_lost
from triptych.common.parser import Parser

SUBCOMMANDS: tuple[str, ...] = (
    "run", "lab", "read", "grad", "train", "bench", "check", "shard",
)  # fmt: skip
"""The commands, in the order of `triptych --help`: each the package
triptych.<name>, imported as the parser is built, within `stops_never_lost`
(a signal while Python imports them, a third of a second, stops the command
as one later does: one line, 128 + its number)."""


def version() -> str:
    """The installed version of attention-triptych."""
    try:
        return importlib.metadata.version("attention-triptych")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> Parser:
    """The parser of `triptych`, each command's parser kept in its
    `commands` attribute (name -> parser)."""
    parser = Parser(
        prog="triptych",
        description=(
            "Causal self-attention in NumPy, PyTorch and JAX, side by side: "
            "run them, compare them, time them."
        ),
        epilog="Start with: triptych run. Each command has its own --help.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"triptych.{name}").add_parser(subparsers)
    parser.commands = dict(subparsers.choices)
    return parser


def parse(parser: Parser, argv: list[str]):
    """The parsed arguments. Bare `triptych` prints the help and exits 0 (as
    git does); an option the command does not know is the command's error,
    which points to its own --help (and to the option meant, when one is
    close)."""
    if not argv:
        parser.print_help()
        parser.exit(0)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.commands[args.command].error(
            unrecognized(parser.commands[args.command], unknown)
        )
    return args


def unrecognized(parser: Parser, unknown: list[str]) -> str:
    """'unrecognized arguments: --dtpye float32 (did you mean --dtype?)'."""
    import difflib

    message = f"unrecognized arguments: {' '.join(unknown)}"
    options = [o for action in parser._actions for o in action.option_strings]
    for word in unknown:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=")[0], options, n=1)
            if close:
                return f"{message} (did you mean {close[0]}?)"
    return message


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    named = argv[:1] if argv[:1] and argv[0] in SUBCOMMANDS else []
    command = " ".join(["triptych", *named])  # until the parser has read argv
    try:
        with stops_never_lost():
            args = parse(build_parser(), argv)
            command = f"triptych {args.command}"
            return args.func(args)
    except CommandError as error:
        return print_error(command, error)
    except KeyboardInterrupt as interrupt:
        return print_interrupted(command, interrupt)


if __name__ == "__main__":
    sys.exit(main())
