"""`triptych run`: the original build script, for every backend at once.

Builds the input from a layer of the trained model that ships with the project
(the default: `triptych.common.trained`, its induction heads reading eight
words said twice; `--layer L`), from a preset of random weights (`--tiny`,
`--full`, with overrides, or `--weights random`), or from a layer of a GPT-2
checkpoint on disk (`--checkpoint DIR --layer L`: see
`triptych.run.checkpoint`), runs
single-head attention, multi-head attention and entropy in each backend and in
the float64 oracle, prints one report (see `triptych.run.report`) and writes the
output directory:

    run_log.txt                       the printed report, as plain text
    results.json                      everything printed (docs/results.schema.json)
    attention_heatmaps_<backend>.png  one panel per head, tokens on both axes
    attention_diff.png                where backends (and the oracle) differ
    entropy.png                       per-head mean entropy beside the causal maximum

The files are made in a temporary directory and moved into place only when
all of them are written, so a failure leaves the output directory as it was.

This package is the command; `results` computes, `report` prints and writes
results.json, `plots` draws the figures.

Exit codes: 0 every comparison within the tolerance, 1 one is not, 2 bad
input, a backend asked for but not installed, or an output directory that
cannot be written (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shared import registry
from triptych.common import backends, options, status
from triptych.common.files import StagedDirectory
from triptych.run.inputs import build_fixture, check_arguments, weights_of

LOG_FILE = "run_log.txt"
JSON_FILE = "results.json"
DIFF_FILE = "attention_diff.png"
ENTROPY_FILE = "entropy.png"


def heatmap_file(backend: str) -> str:
    """The file name of a backend's heatmap grid."""
    return f"attention_heatmaps_{backend}.png"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="the main job: every backend on the trained model, side by side",
        description=(
            "Run causal self-attention in every backend on one input: by default a "
            "layer of the trained model that ships with the project (its "
            "induction heads reading eight words said twice), else a seeded "
            "preset of random weights (--tiny, --full, --weights random) or a "
            "GPT-2 checkpoint's layer; print the sizes, what each head does, the "
            "single-head weights, each head's entropy and how closely the "
            "backends agree with the float64 oracle and with each other; write a "
            "log, results.json and figures to the output directory.\n\n"
            "exit codes: 0 all agree within the tolerance of the dtype, 1 some do "
            "not, 2 bad input, a missing backend or an unwritable output directory"
        ),
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--tiny",
        dest="preset",
        action="store_const",
        const="tiny",
        help="random weights: the toy sentence, d_model 32, 4 heads (the same as "
        "--weights random)",
    )
    size.add_argument(
        "--full",
        dest="preset",
        action="store_const",
        const="full",
        help="random weights: the toy sentence, d_model 64, 8 heads",
    )
    parser.set_defaults(preset=None)
    options.weights(
        parser,
        help="the trained model that ships with the project (default) or a "
        "preset's random weights (--tiny, --full, --d-model, --n-heads and "
        "--seed choose random ones)",
    )
    options.d_model(parser, type=int, metavar="N", help="override the preset's width C")
    options.n_heads(
        parser,
        type=int,
        help="override the preset's number of heads (must divide d_model)",
    )
    options.seed(
        parser,
        help="override the preset's seed (of the one NumPy generator behind x "
        "and the weights)",
    )
    options.tokens(
        parser,
        help="override the sentence: tokens separated by spaces (the trained "
        "model's: words of its vocabulary)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        metavar="DIR",
        help="a GPT-2, Llama, Mistral, Qwen 2/3, Gemma 2/3 or gpt-oss checkpoint "
        "directory (as save_pretrained writes it; "
        "nothing is downloaded): run layer --layer of it on the sentence, with "
        "its tokenizer, instead of a preset (needs the extras torch and layers)",
    )
    options.layer(
        parser,
        help="the layer whose attention runs: the trained model's (default: 1, "
        "its induction heads) or the checkpoint's (default: 0)",
    )
    options.backends(parser)
    options.dtype(parser, help="the dtype of every backend")
    options.output_dir(
        parser,
        type=Path,
        default=Path("outputs"),
        help="where the log, results.json and figures go",
    )
    quiet = parser.add_mutually_exclusive_group()
    options.quiet(quiet, help="print only the PASS/FAIL verdict")
    quiet.add_argument(
        "--json", action="store_true", help="print only results.json, to stdout"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """`triptych run`: compute, write the files, print; return the exit code.

    What the user can mend is found first, in a moment, with no framework
    imported: options that do not fit, a checkpoint directory that is not
    one, an output directory that cannot be written. Then a status line on the
    terminal names each step (loading, each backend, the figures)."""
    check_arguments(args)
    names = list(args.backends or registry.names())
    with (
        StagedDirectory(args.output_dir, "run") as staging,
        status.shown(status.loading_text(names), quiet=args.quiet) as say,
    ):
        if args.checkpoint is not None:
            say(
                f"loading layer {args.layer or 0} of the checkpoint in "
                f"{args.checkpoint} (torch, transformers)"
            )
        if weights_of(args) == "trained":
            say("the trained model: measuring what each head does")
        fixture, overrides, source = build_fixture(args)
        say(status.loading_text(names))
        names, not_installed = backends.choose_backends(args.backends)
        modules = {name: backends.load_backend(name) for name in names}
        results = compute(
            fixture, overrides, modules, args.dtype, not_installed, source, say
        )
        say("drawing the figures")
        files = write_files(staging.path, results, str(args.output_dir))
        stale = [heatmap_file(n) for n in registry.names() if n not in modules]
        staging.commit(files, stale)
    print_outputs(args, results, files)
    return 0 if results.passed else 1


def compute(fixture, overrides, modules, dtype, not_installed, source=None, say=None):
    """Every backend, the oracle and the comparisons, as one RunResults.

    Args:
        source: the Checkpoint the fixture came from, the trained model's
            layer (an int), or None (a preset).
        say: called with the name of each step as it starts (a status line).
    """
    from triptych.common import trained
    from triptych.run.results import RunResults, compare, run_backend, run_oracle

    say = say or (lambda text: None)
    # the trained model's single head: the head lab and read show by default
    head = trained.default_head(source) if isinstance(source, int) else None
    outcomes = []
    for name, module in modules.items():
        note = registry.get(name).eager_note  # why its first run is slow
        say(f"running {name} ({note})" if note else f"running {name}")
        outcomes.append(run_backend(name, module, fixture, dtype, head))
    say("running the float64 oracle")
    oracle = run_oracle(fixture, head)
    return RunResults(
        preset=fixture.preset,
        overrides=overrides,
        dtype=dtype,
        outcomes=outcomes,
        oracle=oracle,
        comparisons=compare(outcomes, oracle, dtype),
        not_installed=not_installed,
        versions=backends.versions(),
        checkpoint=None if isinstance(source, int | None) else source,
        trained=trained.layer_record(source) if isinstance(source, int) else None,
    )


def write_files(directory: Path, results, shown_as: str) -> dict[str, str]:
    """Write the log, the JSON and the figures into `directory`.

    Returns:
        What each file holds, by file name, in the order written.
    """
    import numpy as np

    from triptych.run import plots, report

    outcomes = results.outcomes
    files = {
        LOG_FILE: "this report, as plain text, and the versions",
        JSON_FILE: "all of it, machine-readable (docs/results.schema.json)",
        **{
            heatmap_file(o.name): f"{o.name}'s attention weights, one panel per head"
            for o in outcomes
        },
        DIFF_FILE: "|a - b| of the weights, each pair and vs the oracle, log scale",
        ENTROPY_FILE: "mean entropy per head beside the causal maximum",
    }
    roles = None
    if results.trained:
        roles = [h["role"] for h in results.trained["heads"]]
    for outcome in outcomes:
        plots.save_heatmaps(
            directory / heatmap_file(outcome.name),
            outcome.arrays["multi_weights"],
            results.labels,
            f"{outcome.name}: attention weights per head ({results.dtype})",
            roles,
        )
    pairs = [(a, b) for i, a in enumerate(outcomes) for b in outcomes[i + 1 :]] + [
        (o, results.oracle) for o in outcomes
    ]
    plots.save_differences(
        directory / DIFF_FILE,
        {
            f"{a.name} vs {b.name}": np.abs(
                a.arrays["multi_weights"].astype(np.float64)
                - b.arrays["multi_weights"].astype(np.float64)
            )
            for a, b in pairs
        },
        results.labels,
        results.tolerance.atol,
        results.dtype,
    )
    plots.save_entropy(
        directory / ENTROPY_FILE,
        {o.name: o.arrays["entropy"] for o in [*outcomes, results.oracle]},
    )
    (directory / LOG_FILE).write_text(
        report.report_text(results, shown_as, files) + "\n" + versions_text(results),
        encoding="utf-8",
    )
    (directory / JSON_FILE).write_text(
        json.dumps(report.document(results, files), indent=2) + "\n",
        encoding="utf-8",
    )
    return files


def versions_text(results) -> str:
    """The versions block at the end of run_log.txt."""
    return (
        "versions: "
        + ", ".join(
            f"{name} {found}" for name, found in results.versions.items() if found
        )
        + "\n"
    )


def print_outputs(args: argparse.Namespace, results, files: dict[str, str]) -> None:
    """The report, the verdict alone (--quiet) or the JSON alone (--json)."""
    from rich.console import Console

    from triptych.run import report

    if args.json:
        print(json.dumps(report.document(results, files), indent=2))
    elif args.quiet:
        print(report.verdict_line(results))
    else:
        report.print_report(
            results, str(args.output_dir), files, Console(highlight=False)
        )
