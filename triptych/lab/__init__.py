"""`triptych lab`: the lesson file of each backend, run step by step on a head
of the trained model (or the toy sentence on random weights), printing its own
source.

For each backend, `impl_<backend>/lesson.py` runs under a line tracer on the
layer of the trained model that ships with the project (triptych.common.trained:
by default layer 1, whose heads are induction heads, reading "the cat sat on a
mat and slept" twice, or `--tokens`; its single head, `trained.default_head`,
the one run and read take too, or its four with `--multi`), or
with `--weights random` on the tiny preset's random weights (one head with
D = C = 32, or four). The lab prints what each head of that layer does,
measured, then the lesson's source step by step (the lines under each step
comment, read from the file with `shared.steps.steps_of`), each followed by the
shape and the top-left corner of every array those lines made, taken from the
real run, and the weights whole as a labelled heatmap of characters. So the lab
and the library are one text: edit the lesson and the lab prints the edit.
Then, per backend:

- the original lab's two invariants, YES or NO: every row of the weights sums
  to 1, and nothing above the diagonal is attended (exactly 0);
- why attention.py is longer than the lesson: a NaN in one token reaches
  every row of the lesson's output, and only the rows that attend it in ours;
- what the framework itself adds (impl_<backend>/extras.py), run on this
  input: NumPy broadcasting (the one-head lesson on stacked heads' weights,
  every head at once, no loop); torch a map over the heads,
  its fused attention and its own layer, each equal to the lesson, and the
  autograd tape; JAX the map over the heads (vmap), the trace it compiles
  (make_jaxpr), and tracing and compiling under `jax.jit`, with times.

Exit code 1 if an invariant is NO for any backend, 2 for a bad option or a
backend that is not installed.
"""

from __future__ import annotations

import argparse

from shared import registry
from triptych.common import backends, options, prose, status
from triptych.common.errors import CommandError, numbered
from triptych.common.parser import integer_at_least
from triptych.common.walk import walk
from triptych.lab.adds import (
    POISONED_TOKEN,
    framework_lines,
    invariants,
    nan_rows,
)
from triptych.lab.show import print_model, print_walk, text_heatmap

__all__ = [
    "POISONED_TOKEN",
    "add_parser",
    "invariants",
    "lab",
    "nan_rows",
    "text_heatmap",
    "walk",
]


# The command -------------------------------------------------------------------


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "lab",
        help="each framework's lesson, run step by step on the trained model's heads",
        description=(
            "Run each backend's lesson file (impl_<backend>/lesson.py) on a "
            "layer of the trained model that ships with the project: its "
            "induction heads, reading eight words said twice (--weights random: "
            "the toy sentence on random weights).\n\n"
            "It prints what each head does. Then the lesson's own source, step "
            "by step, with the shape and a slice of every array each step made. "
            "Then the weights whole, as a labelled heatmap.\n\n"
            "Last, for each backend: the original lab's two invariants (rows "
            "sum to 1; nothing above the diagonal), YES or NO; why attention.py "
            "is longer than the lesson (a NaN token); and what the framework "
            "adds (impl_<backend>/extras.py: vmap, make_jaxpr and jit; torch's "
            "fused attention, its layer and the autograd tape).\n\n"
            "exit codes: 0 both invariants hold for every backend, 1 one does "
            "not, 2 bad input or a backend that is not installed"
        ),
    )
    options.backends(
        parser,
        help="the frameworks to walk through, comma-separated, from {names}; all: "
        "every installed one (--backend, the lab's former spelling, is the same)",
    )
    # the spelling the lab had alone; every command now takes --backends
    options.backends(parser, flag="--backend", help=argparse.SUPPRESS)
    options.dtype(parser, help="the dtype of x and the weights")
    parser.add_argument(
        "--multi",
        action="store_true",
        help="walk multi_head_attention (4 heads) instead of one head",
    )
    options.weights(
        parser,
        default="trained",
        help="the trained model that ships with the project (a layer of its "
        "induction model, on eight words said twice), or the tiny preset's "
        "random weights on the toy sentence",
    )
    options.layer(
        parser,
        help="the trained model's layer: 0 (previous-token heads) or 1 "
        "(induction heads) (default: 1; only with the trained weights)",
    )
    parser.add_argument(
        "--head",
        type=integer_at_least(0),
        metavar="H",
        help="the single head the walk takes (default: the layer's clearest "
        "induction head, else its clearest previous-token head, as run and read; "
        "only with the trained weights, not with --multi)",
    )
    options.tokens(parser, help=options.TOKENS_HELP)
    parser.set_defaults(func=lab)


def check_options(args: argparse.Namespace) -> tuple[str, ...] | None:
    """Options that do not fit together, found before any framework loads;
    the words of --tokens (None: the default sentence)."""
    from triptych.common import trained

    if args.weights == "random":
        given = [o for o in ("--layer", "--head") if getattr(args, o[2:]) is not None]
        if given:
            verb, drop = ("picks", given[0]) if len(given) == 1 else ("pick", "both")
            raise CommandError(
                f"{' and '.join(given)} {verb} a part of the trained model, and "
                f"--weights random has none: drop {drop} or --weights random"
            )
        if args.tokens is not None:
            raise CommandError(
                "--tokens is read by the trained model: drop --weights random, "
                "or --tokens"
            )
        return None
    if args.head is not None and args.multi:
        raise CommandError("--multi walks every head: drop --head")
    model = trained.load()
    if args.layer is not None and args.layer >= model.n_layers:
        raise CommandError(
            f"--layer {args.layer}: the trained model has "
            f"{numbered(model.n_layers, 'layer')}"
        )
    if args.head is not None and args.head >= model.config.n_heads:
        raise CommandError(
            f"--head {args.head}: the trained model has "
            f"{numbered(model.config.n_heads, 'head')}"
        )
    return None if args.tokens is None else options.trained_words(args.tokens)


def lab(args: argparse.Namespace) -> int:
    """Run the lab for the chosen backends; print; return the exit code."""
    from rich.console import Console

    from triptych.common import trained

    words = check_options(args)
    asked = args.backends or registry.names()
    with status.shown(status.loading_text(asked)) as say:
        names, _ = backends.choose_backends(args.backends)  # all: the installed
        for name in names:
            backends.load_backend(name)  # one asked for but missing: exit 2
        if args.weights == "trained":
            say("the trained model: measuring what each head does")
        shown = trained.view(
            args.weights, args.layer, args.head, words=words or trained.SENTENCE
        )
    console = Console(highlight=False, soft_wrap=True)
    print_model(console, shown, args.multi)
    failed = []
    for name in names:
        with status.shown(f"{name}: running impl_{name}/lesson.py step by step") as say:
            walk_ = walk(
                name, shown.fixture, args.dtype, multi=args.multi, head=shown.head
            )
            checks = invariants(walk_.weights, args.dtype)
            say(f"{name}: the lesson and attention.py on a NaN token")
            poisoned_rows = nan_rows(walk_.backend, walk_)
            say(backends.hooks(name).ADDS)
            adds = framework_lines(walk_.backend, walk_, shown.fixture)
        print_walk(
            console, walk_, shown, args.dtype, checks, poisoned_rows, adds, args.multi
        )
        failed += [f"{name}: {c.claim}" for c in checks if not c.holds]
    prose.say(console, next_text(names[0]))
    if failed:
        prose.say(console, f"NO: {'; '.join(failed)}", "bold red")
        return 1
    prose.say(
        console,
        f"YES: both invariants hold for {', '.join(names)} ({args.dtype})",
        "bold green",
    )
    return 0


def next_text(name: str) -> str:
    """Where the reading order goes after the lesson (triptych.common.reading)."""
    from triptych.common.reading import ORDER

    file, what = ORDER[1]
    return (
        f"next in the reading order: impl_{name}/{file} (2 of {len(ORDER)}: "
        f"{what}; docs/reading.md), or triptych read for every chapter side by "
        "side"
    )
