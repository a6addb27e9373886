"""What `triptych run`'s arguments ask it to run on, found before any
framework loads: options that do not fit together, and the fixture (the
trained model's layer, a preset of random weights with overrides, or a
checkpoint's layer)."""

from __future__ import annotations

import argparse
import dataclasses

from triptych.common import options
from triptych.common.errors import CommandError, numbered


def check_arguments(args: argparse.Namespace) -> None:
    """What `build_fixture` would refuse, found at once: options that do not
    fit together or with the preset, a checkpoint directory that is not one.

    Raises:
        CommandError: one line saying what to mend.
    """
    weights = weights_of(args)
    if weights != "checkpoint":
        if weights == "random" and args.layer is not None:
            raise CommandError(
                "--layer picks a layer of the trained model or of a --checkpoint "
                "model, not of random weights: drop --layer"
            )
        if weights == "random":
            refuse_what_cannot_fit(args)
        build_fixture(args, check_only=True)  # quick, and imports no backend
        return
    checkpoint_clash(args)
    from triptych.run import checkpoint

    checkpoint.check_directory(args.checkpoint)


def refuse_what_cannot_fit(args: argparse.Namespace) -> None:
    """A preset whose sizes (--d-model, --tokens) no memory can hold, or whose
    float64 oracle would not end in time: one line (`triptych.common.limits`).
    Each backend and the oracle keep their (H, T, T) weights to compare."""
    from shared import registry
    from triptych.common import limits

    try:
        preset, _ = build_preset(args)
    except ValueError:  # sizes that do not fit together: build_fixture says so
        return
    T, C, H = len(preset.tokens), preset.d_model, preset.n_heads
    tokens = f"({T} tokens)"
    kept = len(args.backends or registry.names()) + 1
    asked = {"--tokens": tokens, "--d-model": C, "--n-heads": H}
    not_given = {o: asked[o] for o, v in random_sizes(args) if v is None}
    limits.refuse_unless_fits(
        [
            limits.Array("x", (T, C), 8, ("--tokens", "--d-model")),
            limits.Array("the four (C, C) weights", (4, C, C), 8, ("--d-model",)),
            limits.Array(
                "each backend's and the oracle's (H, T, T) weights",
                (kept, H, T, T),
                8,
                ("--tokens", "--n-heads"),
            ),
        ],
        asked,
        not_given,  # the preset's own sizes: named only if nothing else is
    )
    seconds = limits.oracle_seconds(1, H + 1, T, C)  # multi-head and one head
    limits.refuse_unless_in_time(seconds, "--tokens", tokens, limits.ORACLE_LIMIT_S)


def random_sizes(args: argparse.Namespace):
    """The size options of a random preset and their values as given."""
    return (("--tokens", args.tokens), ("--d-model", args.d_model),
            ("--n-heads", args.n_heads))  # fmt: skip


RANDOM_OPTIONS = ("--tiny", "--full", "--d-model", "--n-heads", "--seed")
"""The options that choose a preset of random weights."""


def weights_of(args: argparse.Namespace) -> str:
    """ "trained", "random" or "checkpoint": what the options ask for.

    Raises:
        CommandError: --weights against the options that choose otherwise.
    """
    if args.checkpoint is not None:
        if args.weights is not None:
            raise CommandError(
                "--checkpoint brings its model's weights: drop --weights"
            )
        return "checkpoint"
    given = [
        option
        for option, value in zip(
            RANDOM_OPTIONS,
            (
                args.preset == "tiny",
                args.preset == "full",
                args.d_model,
                args.n_heads,
                args.seed,
            ),
            strict=True,
        )
        if value is not None and value is not False
    ]
    if args.weights == "trained" and given:
        raise CommandError(
            f"{', '.join(given)} choose a preset of random weights, and "
            f"--weights trained the shipped model: drop one or the other"
        )
    return "random" if args.weights == "random" or given else "trained"


def checkpoint_clash(args: argparse.Namespace) -> None:
    """The options --checkpoint replaces, if any were given: one line."""
    clash = [
        option
        for option, given in (
            ("--full", args.preset == "full"),
            ("--d-model", args.d_model is not None),
            ("--n-heads", args.n_heads is not None),
            ("--seed", args.seed is not None),
        )
        if given
    ]
    if clash:
        raise CommandError(
            f"--checkpoint takes its sizes and weights from the model: drop "
            f"{', '.join(clash)}"
        )


def build_fixture(args: argparse.Namespace, check_only: bool = False):
    """(the fixture, the overrides, the source: a Checkpoint, the trained
    model's layer or None) the options ask for; with `check_only`, the trained
    layer's options are checked and nothing is built.

    Raises:
        CommandError: options that do not fit together or with the preset.
    """
    from shared import TOY_SENTENCE, make_fixture

    if weights_of(args) == "trained":
        return trained_fixture(args, check_only)
    if args.checkpoint is None:
        try:
            preset, overrides = build_preset(args)
        except ValueError as error:  # a preset's check: d_model, n_heads, tokens
            raise CommandError(preset_width_clash(args) or error) from None
        return make_fixture(preset), overrides, None
    checkpoint_clash(args)
    from triptych.run import checkpoint

    sentence = args.tokens or " ".join(TOY_SENTENCE)
    fixture, where = checkpoint.load(args.checkpoint, args.layer or 0, sentence)
    overrides = {} if args.tokens is None else {"tokens": args.tokens}
    return fixture, overrides, where


def trained_fixture(args: argparse.Namespace, check_only: bool = False):
    """The trained model's layer (--layer, default its induction layer) reading
    --tokens or the default sentence: (fixture, overrides, the layer); None
    with `check_only`, once the options are found to fit."""
    from triptych.common import trained

    model = trained.load()
    layer = trained.DEFAULT_LAYER if args.layer is None else args.layer
    if layer >= model.n_layers:
        raise CommandError(
            f"--layer {layer}: the trained model has "
            f"{numbered(model.n_layers, 'layer')}"
        )
    words = trained.SENTENCE
    if args.tokens is not None:  # a word it does not know, or too many: one line
        words = options.trained_words(args.tokens)
    if check_only:
        return None
    fixture = trained.fixture(model, layer, words)
    overrides = {} if args.tokens is None else {"tokens": args.tokens}
    return fixture, overrides, layer


def preset_width_clash(args: argparse.Namespace) -> str | None:
    """The message for --n-heads that does not divide the preset's own width
    (no --d-model given): it names the preset the user chose, or says that
    --n-heads alone chose random weights, and what to change; else None."""
    from shared import PRESETS

    name = args.preset or "tiny"
    d_model, n_heads = PRESETS[name].d_model, args.n_heads
    if args.d_model is not None or not n_heads or n_heads < 1 or d_model % n_heads == 0:
        return None
    if args.preset is None:  # no preset asked: say what --n-heads chose
        fits = ", ".join(str(h) for h in range(1, d_model + 1) if d_model % h == 0)
        wider = -(-d_model // n_heads) * n_heads
        return (
            f"--n-heads {n_heads} switches to random weights (the trained model's "
            f"heads are its own) of width d_model={d_model}, which {n_heads} does "
            f"not divide: add --d-model {wider} (a multiple of {n_heads}), or "
            f"choose --n-heads from {fits}"
        )
    return (
        f"n_heads={n_heads} does not divide d_model={d_model}, the {name} "
        "preset's width; --d-model N sets another"
    )


def build_preset(args: argparse.Namespace):
    """The chosen preset with the overrides given; ValueError if they do not fit."""
    from shared import PRESETS

    overrides = {
        field: value
        for field, value in (
            ("d_model", args.d_model),
            ("n_heads", args.n_heads),
            ("seed", args.seed),
            ("tokens", None if args.tokens is None else tuple(args.tokens.split())),
        )
        if value is not None
    }
    preset = dataclasses.replace(PRESETS[args.preset or "tiny"], **overrides)
    if "tokens" in overrides:
        overrides["tokens"] = " ".join(overrides["tokens"])
    return preset, overrides
