"""`triptych train`: the same tiny attention-only model trained in every
framework, step for step, from the same start on the same batches.

    triptych train [--steps 350] [--backends numpy,torch,jax] [--dtype float64]
                   [--compiled | --eager] [--quick] [--vocab 64] [--seq-len 32] ...

Every trainer of triptych.common.training (NumPy's always, as the reference;
each framework's compiled step, or with --eager its eager one) runs in
lockstep (`loop`); after each step their parameters are compared with NumPy's
and each other's against the tolerance of that step. The output directory:

    results.json          everything, per step too (docs/train.schema.json)
    steps.csv             one row per step: losses, differences, tolerance
    summary.md            the run in a page: agreement, accuracy, times
    loss.png              every trainer's loss per step, overlaid
    agreement.png         each pair's largest difference per step, and the tolerance
    heatmaps_<name>.png   a trainer's attention, each layer and head, before
                          and after training, on one held-out sequence

This package is the command; `loop` trains, `report` writes and prints,
`plots` draws. Exit codes: 0 every pair agrees within the tolerance at every
step; 1 one does not, or a loss turned NaN (training stops there; the steps
done are written); 2 bad arguments, a backend asked for but not installed, or
an output directory that cannot be written (before any training); 130 Ctrl-C,
the steps done so far kept in steps.partial.csv.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from shared import registry
from triptych.common import backends, options, status
from triptych.common.errors import CommandError
from triptych.common.files import StagedDirectory, rows_kept_on_interrupt

DEFAULTS = dict(
    vocab=64,
    seq_len=32,
    d_model=64,
    n_heads=4,
    n_layers=2,
    batch=32,
    steps=350,
    lr=4e-3,
    seed=0,
)
"""The sizes of the default run (shared.train.TrainConfig's defaults)."""

QUICK_STEPS = 40
"""--quick's steps: enough for the agreement's verdict, in seconds, with the
eager steps (no compiler's first step)."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train the same tiny attention model in every framework, step for step",
        description=(
            "Train a tiny attention-only language model (token and position "
            "embeddings, L layers of our multi-head causal attention on the "
            "residual stream, an unembedding) on an induction task in NumPy (by "
            "hand), PyTorch (autograd, torch.optim.Adam), JAX (jax.value_and_grad, "
            "optax.adam) and flax (nnx.Module, nnx.Optimizer), from the same "
            "start on the same batches. After every step the parameters of each "
            "are compared with NumPy's and each other's, against a tolerance "
            "measured from how rounding grows in this run (docs/train.md); at the "
            "end, the induction accuracy and the attention before and after.\n\n"
            "exit codes: 0 all agree at every step, 1 a pair leaves its tolerance "
            "or a loss turns NaN, 2 bad arguments, a missing backend or an "
            "unwritable output directory, 130 Ctrl-C (the steps done so far are "
            "kept in DIR/steps.partial.csv)"
        ),
    )
    parser.add_argument(
        "--steps", type=_positive_int, default=None, metavar="N",
        help=f"Adam steps (default: {DEFAULTS['steps']}; --quick: {QUICK_STEPS})",
    )  # fmt: skip
    options.backends(
        parser,
        help="comma-separated, from {names} (jax brings flax); all: every "
        "installed one; NumPy, the reference, runs always",
    )
    options.dtype(parser, default="float64", help="every trainer's dtype")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--compiled",
        dest="compiled",
        action="store_true",
        help="torch.compile, jax.jit and nnx.jit steps (the default, but with --quick)",
    )
    mode.add_argument(
        "--eager",
        dest="compiled",
        action="store_false",
        help="each framework's step op by op instead",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a quick look: {QUICK_STEPS} steps unless --steps is given, eager "
        "unless --compiled is (no compiler's first step): seconds, not a minute",
    )
    sizes = parser.add_argument_group("the model and the task")
    for name, metavar, text in (
        ("vocab", "V", "distinct tokens (at least seq-len / 2)"),
        ("seq_len", "T", "tokens per sequence: a period of T/4 to T/2, repeated"),
        ("d_model", "C", "model width"),
        ("n_heads", "H", "heads per layer (must divide d-model)"),
        ("n_layers", "L", "attention layers"),
        ("batch", "B", "sequences per step"),
    ):
        sizes.add_argument(
            f"--{name.replace('_', '-')}",
            type=_positive_int,
            default=DEFAULTS[name],
            metavar=metavar,
            help=text,
        )
    sizes.add_argument(
        "--lr",
        type=_positive_float,
        default=DEFAULTS["lr"],
        metavar="RATE",
        help="Adam's step size",
    )
    options.seed(
        sizes,
        type=_non_negative_int,
        default=DEFAULTS["seed"],
        help="of the one NumPy generator behind the start and every batch",
    )
    options.threads(
        parser,
        type=_positive_int,
        default=1,
        help="threads for every framework (tiny matrices gain nothing from more)",
    )
    options.output_dir(
        parser,
        type=Path,
        default=Path("outputs/train"),
        help="where results.json, steps.csv, summary.md and the figures go",
    )
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument(
        "--save-weights",
        type=Path,
        metavar="FILE",
        help="also write NumPy's trained float64 parameters to FILE (.npz), with "
        "the run's settings and, after steps 1, 10, 100 and the last, their "
        "SHA-256 and samples (only with --dtype float64). The model that lab, "
        "read and run show: --backends numpy --save-weights "
        "shared/fixtures/induction.npz",
    )
    weights.add_argument(
        "--check-weights",
        type=Path,
        metavar="FILE",
        help="compare NumPy's parameters, after each step FILE recorded, with "
        "FILE's: the same bits (SHA-256), else within this run's tolerance "
        "(another NumPy may round otherwise); exit 1 if not. The settings must be "
        "FILE's but --steps: fewer steps compare the recorded steps reached",
    )
    options.quiet(parser, help="no progress bar; print only the verdict")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """`triptych train`: check, train, write the files, print; the exit code."""
    from shared.train import TrainConfig, make_task
    from triptych.common.threads import schedulable_cores, thread_limits
    from triptych.common.training import trainer_names
    from triptych.train import loop, report, sizes

    quick_defaults(args)
    try:
        config = TrainConfig(
            **{key: getattr(args, key) for key in DEFAULTS if key != "steps"},
            steps=args.steps,
        )
    except ValueError as error:  # the task's or the model's own check
        raise CommandError(error) from None
    sizes.refuse_what_cannot_fit(args, DEFAULTS)
    saved = check_weights_options(args, config)
    if args.threads > schedulable_cores():
        raise CommandError(
            f"--threads {args.threads} asks for more than the "
            f"{schedulable_cores()} cores this process may use"
        )
    plain = registry.reference().name  # the reference: it trains always
    wanted = [plain, *(args.backends or registry.names())]
    rows: list[dict] = []
    # an unwritable output directory is refused before the frameworks load
    with StagedDirectory(args.output_dir, "train") as staging:
        loading = status.loading_text(dict.fromkeys(wanted))
        with status.shown(loading, quiet=args.quiet):
            asked, not_installed = backends.choose_backends(args.backends)
            for name in dict.fromkeys([plain, *asked]):
                backends.load_backend(name)  # a missing one asked by name: one line
        names = trainer_names([plain, *asked], args.compiled)
        report.print_header(config, args)
        with thread_limits(args.threads):
            task = make_task(config)
            with rows_kept_on_interrupt(
                staging, report.PARTIAL_FILE, loop.row_fields(names), rows
            ):
                results = _train(task, names, args, rows)
            with status.shown(
                "drawing the figures, writing the files", quiet=args.quiet
            ):
                written, doc = report.write_files(
                    staging.path, results, not_installed, args
                )
            staging.commit(written, stale=report.stale_files(written))
    report.print_outcome(doc, args, written)
    weights_agree = save_or_check_weights(args, results, saved)
    return 0 if results.agree and weights_agree else 1


def quick_defaults(args: argparse.Namespace) -> None:
    """--steps and --compiled/--eager as given, else the defaults: the full
    run's, or --quick's."""
    if args.steps is None:
        args.steps = QUICK_STEPS if args.quick else DEFAULTS["steps"]
    if args.compiled is None:
        args.compiled = not args.quick


def check_weights_options(args: argparse.Namespace, config):
    """What --save-weights and --check-weights need, found before training:
    float64, a writable file's folder, a readable file of the same settings.

    Returns:
        The weights of --check-weights' FILE, or None.
    """
    from triptych.common import trained

    if args.save_weights is not None:
        if args.dtype != "float64":
            raise CommandError(
                f"--save-weights keeps float64 parameters: drop --dtype {args.dtype}"
            )
        if not args.save_weights.parent.is_dir():
            raise CommandError(
                f"--save-weights {args.save_weights}: no directory "
                f"{args.save_weights.parent}"
            )
        return None
    if args.check_weights is None:
        return None
    if args.dtype != "float64":
        raise CommandError(
            f"--check-weights compares float64 parameters: drop --dtype {args.dtype}"
        )
    try:
        saved = trained.load(args.check_weights)
    except FileNotFoundError:
        raise CommandError(
            f"--check-weights {args.check_weights}: no such file"
        ) from None
    except OSError as error:  # a folder, no permission: what, not the errno
        reason = (error.strerror or str(error)).lower()
        raise CommandError(f"--check-weights {args.check_weights}: {reason}") from None
    except (ValueError, KeyError) as error:
        raise CommandError(f"--check-weights {args.check_weights}: {error}") from None
    differ = trained.settings_differ(config, saved)
    if differ:
        raise CommandError(
            f"--check-weights {args.check_weights} was made with other settings: "
            + "; ".join(differ)
        )
    return saved


def save_or_check_weights(args: argparse.Namespace, results, saved) -> bool:
    """Write --save-weights' file, or compare with --check-weights' and print
    the verdict; False when the comparison fails."""
    import shlex

    from triptych.common import trained

    if results.numpy_params is None:  # a NaN loss stopped the run
        return args.save_weights is None and args.check_weights is None
    if args.save_weights is not None:
        run = results.runs["numpy"]
        command = "triptych train " + shlex.join(_argv(args))
        trained.save(
            args.save_weights,
            results.numpy_params,
            results.task.config,
            results.records,
            run.accuracy_after,
            command,
        )
        print(f"saved NumPy's parameters to {args.save_weights}")
        return True
    if args.check_weights is not None:
        comparison = trained.compare(results.records, results.numpy_params, saved)
        print(f"--check-weights {args.check_weights}: {comparison.verdict()}")
        return comparison.within
    return True


def _argv(args: argparse.Namespace) -> list[str]:
    """The options that set the run, as a command line."""
    found = []
    for key in DEFAULTS:
        value = getattr(args, key)
        if value != DEFAULTS[key]:
            found += [f"--{key.replace('_', '-')}", str(value)]
    if args.backends:
        found += ["--backends", ",".join(args.backends)]
    return [*found, "--save-weights", str(args.save_weights)]


def _train(task, names, args, rows):
    """loop.train under a progress bar on stderr (none when quiet or piped),
    whose line says what runs: the compiler at work in a first step."""
    from triptych.train import loop

    with status.progress(quiet=args.quiet) as progress:
        bar = progress.add_task("training", total=task.config.steps)
        return loop.train(
            task,
            names,
            args.dtype,
            rows,
            advance=lambda step: progress.update(bar, completed=step),
            doing=lambda text, note=None: progress.update(
                bar, description=text, note=note
            ),
        )


def _number(text: str, kind):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = _number(text, float)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value
