"""`triptych`: the command line. Each subcommand lives in its own module,
`triptych/<name>.py`, which provides `add_parser(subparsers)`; the parser it
adds sets `func`, called with the parsed arguments and returning the exit code.

Subcommand modules must import quickly: import torch, jax or matplotlib inside
the functions that need them, never at the top, so that `triptych --help` works
with any subset of backends installed.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS: tuple[str, ...] = ()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="triptych",
        description=(
            "Causal self-attention in NumPy, PyTorch and JAX, side by side: "
            "run them, compare them, time them."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"triptych.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
