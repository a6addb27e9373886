"""The options several commands share, each declared once (as pip's
cmdoptions does): a command composes them, `options.dtype(parser, help=...)`,
giving what is its own (its help, a default, bench's wider --dtype choices)
and keeping what they share: the flag, its type and its messages, the
metavar, the choices. An option of one command stays beside its command."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from shared import registry
from triptych.common.backends import DTYPES, parse_backends
from triptych.common.parser import integer_at_least

Add = Callable[..., argparse.Action]
"""add(parser, **own): adds the option to a parser or an argument group."""


def option(*flags: str, **shared: Any) -> Add:
    """An option declared once; the `add` it returns takes a command's own
    keywords over `shared`."""

    def add(parser, **own: Any) -> argparse.Action:
        return parser.add_argument(*flags, **{**shared, **own})

    return add


dtype = option("--dtype", choices=DTYPES, default="float32")
output_dir = option("--output-dir", metavar="DIR")
quiet = option("--quiet", action="store_true")
weights = option("--weights", choices=("trained", "random"))
layer = option("--layer", type=integer_at_least(0), metavar="L")
seed = option("--seed", type=integer_at_least(0), metavar="S")
threads = option("--threads", metavar="N")
d_model = option("--d-model", metavar="C")
n_heads = option("--n-heads", metavar="H")
batch = option("--batch", metavar="B")
tokens = option("--tokens", metavar='"the cat ..."')

TOKENS_HELP = (
    "the trained model reads this sentence instead: words of its vocabulary "
    "separated by spaces, as many as its positions at most (say a run of words "
    "twice, and predict the stripe: docs/teaching.md)"
)
"""--tokens's help where only the trained model reads it (lab, read)."""


def trained_words(tokens: str) -> tuple[str, ...]:
    """The words of --tokens (split at spaces) for the trained model, checked
    before any work (`trained.check_words`), the same in run, lab and read.

    Raises:
        CommandError: '--tokens: ...' naming a word the model does not know,
            or too few or too many words.
    """
    from triptych.common import trained
    from triptych.common.errors import CommandError

    words = tuple(tokens.split())
    try:
        trained.check_words(trained.load(), words)
    except ValueError as error:
        raise CommandError(f"--tokens: {error}") from None
    return words


BACKENDS_HELP = "comma-separated, from {names}; all: every installed one"
"""--backends's help, {names} the registry's backends: numpy,torch,jax."""


def backends(
    parser, help: str = BACKENDS_HELP, flag: str = "--backends", **own: Any
) -> argparse.Action:
    """--backends NAMES: registered backends, comma-separated, or all
    (`parse_backends`); {names} in `help` lists them as they are now. `flag`:
    another spelling of it, into the same args.backends."""
    names = ",".join(registry.names())
    add = option(flag, type=parse_backends, default="all", metavar="NAMES")
    if help != argparse.SUPPRESS:
        help = help.format(names=names)
    return add(parser, help=help, dest="backends", **own)


def one_backend(
    parser, flag: str, before: tuple = (), after: tuple = (), **own: Any
) -> argparse.Action:
    """`flag` NAME: one registered backend, as the registry has them when the
    parser is built, or one of the words `before` or `after` them ("all")."""
    choices = (*before, *registry.names(), *after)
    return option(flag, choices=choices)(parser, **own)
