"""`triptych`: the command line. Each subcommand lives in its own module,
`triptych/<name>.py`, which provides `add_parser(subparsers)`; the parser it
adds sets `func`, called with the parsed arguments and returning the exit code.

Subcommand modules must import quickly: import torch, jax or matplotlib inside
the functions that need them, never at the top, so that `triptych --help` works
with any subset of backends installed.

Every parser here is a `Parser`: its --help shows each option's default, and
a usage error is one line on stderr with exit code 2 (no usage block).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
import textwrap

SUBCOMMANDS: tuple[str, ...] = ("run", "lab", "grad", "bench")


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped paragraph by paragraph (a paragraph with line breaks
    stays as written); "(default: ...)" after each option that has one."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            paragraph
            if "\n" in paragraph
            else textwrap.fill(
                paragraph, width, initial_indent=indent, subsequent_indent=indent
            )
            for paragraph in text.split("\n\n")
        )

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            action.default in (None, argparse.SUPPRESS)
            or action.nargs == 0  # a flag: its default is just "not given"
            or "default" in text  # the help already says it
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser with `HelpFormatter` whose errors are one line."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def print_error(command: str, message) -> int:
    """Print `command: error: message` as one line on stderr; return 2."""
    print(f"{command}: error: {message}", file=sys.stderr)
    return 2


def version() -> str:
    """The installed version of attention-triptych."""
    try:
        return importlib.metadata.version("attention-triptych")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="triptych",
        description=(
            "Causal self-attention in NumPy, PyTorch and JAX, side by side: "
            "run them, compare them, time them."
        ),
        epilog="Start with: triptych run --tiny. Each command has its own --help.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"triptych.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
