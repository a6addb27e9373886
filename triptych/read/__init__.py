"""`triptych read`: the side-by-side page.

One offline HTML file (`index.html`) where the same step stands in the same
row for NumPy, PyTorch and JAX, chapter by chapter in the reading order
(`chapters.CHAPTERS`, framed by the lecture's chapters: `chapters.PAGE`),
with the code read from the repository's files, the tokens where a line
differs from NumPy's marked, and, for the lesson, what each step computed on
the trained model's layer (or random weights) against the float64 oracle.
`chapters` names the files, `rows` reads and aligns them, `tokens` marks
where a line differs, `values` runs the lesson, `lecture` the build-up and
the extras, `page` writes the HTML, `text` and `lecture_text` hold the words.

Exit codes: 0 the page is written and every step agrees with the oracle, 1 it
is written but a step does not, 2 bad input or an unwritable output directory.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from shared import registry
from triptych.common import backends, options, prose, status
from triptych.common.errors import CommandError

PAGE = "index.html"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "read",
        help="the side-by-side page: every step of the three frameworks in one row",
        description=(
            "Write one self-contained HTML page where each step of causal "
            "self-attention stands in one row for NumPy, PyTorch and JAX: chapter "
            "0 builds attention up in seven stages, then chapter by chapter in "
            "the reading order (lesson, what each framework adds, attention, "
            "backward, blockwise, KV cache, module forms, sharded, training and "
            "flax, kernels): the code read from the repository, the tokens that differ "
            "from NumPy's marked, and for the lesson what each step computed on "
            "the trained model (or random weights) against the float64 oracle. "
            "It needs no network: open it from disk. --pdf prints it to a "
            "handout with Chromium.\n\n"
            "exit codes: 0 written and every step agrees with the oracle, 1 a "
            "step does not, 2 bad input or an unwritable output directory"
        ),
    )
    options.output_dir(
        parser, type=Path, default=Path("outputs/read"), help=f"where {PAGE} goes"
    )
    options.backends(
        parser,
        default=",".join(registry.names()),
        help="the columns, comma-separated, from {names} (all: the three); "
        "a backend that is not installed shows its code and says how to install it",
    )
    options.weights(
        parser,
        help="what the lesson's values show: the trained model that ships with "
        "the project (default: its induction layer reading eight words said "
        "twice) or a preset's random weights on the toy sentence (--preset)",
    )
    parser.add_argument(
        "--preset",
        choices=("tiny", "full"),
        help="random weights: the toy sentence with d_model 32 and 4 heads (tiny) "
        "or 64 and 8 (full); implies --weights random",
    )
    options.tokens(parser, help=options.TOKENS_HELP)
    options.dtype(parser, help="the lesson's dtype")
    parser.add_argument(
        "--open", action="store_true", help="open the page in a web browser"
    )
    parser.add_argument(
        "--pdf",
        action="store_true",
        help="also print the page to handout.pdf beside it (A4 landscape, the "
        "columns side by side) with Chromium, headless (env CHROMIUM: its path)",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Build the page; return the exit code."""
    import webbrowser

    from triptych.common.files import StagedDirectory
    from triptych.read import handout

    if args.weights == "trained" and args.preset is not None:
        raise CommandError(
            f"--preset {args.preset} chooses random weights, and --weights "
            "trained the shipped model: drop one or the other"
        )
    weights = "random" if args.preset is not None else args.weights or "trained"
    words = sentence(getattr(args, "tokens", None), weights)
    names = list(args.backends or registry.names())
    browser = handout.chromium() if getattr(args, "pdf", False) else None
    staging = StagedDirectory(args.output_dir, "read")
    with staging, status.shown(status.loading_text(names)) as say:
        html, agrees = build(
            names,
            args.preset or "tiny",
            args.dtype,
            args.output_dir,
            say,
            weights,
            words,
        )
        (staging.path / PAGE).write_text(html, encoding="utf-8")
        (path,) = staging.commit([PAGE], [])
    prose.echo(f"wrote {path}: open {path.resolve().as_uri()} in a browser")
    if browser is not None:
        with status.shown("printing the page to PDF with Chromium"):
            pdf, count = handout.print_pdf(browser, path)
        prose.echo(f"wrote {pdf}: {count} pages, A4 landscape")
    if not agrees:
        prose.echo("some step differs from the float64 oracle beyond the tolerance")
    if args.open:
        webbrowser.open(path.resolve().as_uri())
    return 0 if agrees else 1


def sentence(tokens: str | None, weights: str) -> tuple[str, ...] | None:
    """The words of --tokens, checked before any work (None: the default)."""
    if tokens is None:
        return None
    if weights != "trained":
        raise CommandError(
            "--tokens is read by the trained model: drop --weights "
            "random and --preset, or --tokens"
        )
    return options.trained_words(tokens)


def build(
    names: list[str],
    preset: str,
    dtype: str,
    output_dir: Path,
    say=None,
    weights: str = "trained",
    words: tuple[str, ...] | None = None,
) -> tuple[str, bool]:
    """The page's HTML, and whether every step agrees with the oracle.

    Args:
        preset: the random weights' preset (with weights "random").
        say: called with the name of each step as it starts (a status line).
        weights: "trained" (the trained model's induction layer) or "random".
        words: the sentence the trained model reads (None: its default).
    """
    from triptych.common import trained
    from triptych.read import chapters, lecture_views, page, sources, values
    from triptych.read.rows import rows_of

    say = say or (lambda text: None)
    if weights == "trained":
        say("the trained model: measuring what each head does")
    shown = trained.view(weights, preset=preset, words=words or trained.SENTENCE)
    fixture = shown.fixture
    found = backends.versions()
    columns, computed, loaded = [], {}, {}
    for name in names:
        say(f"loading {name}, running its lesson")
        try:
            loaded[name] = backends.load_backend(name)
        except backends.BackendMissingError as error:
            columns.append(page.Column(name, f"{name} not installed", str(error)))
            continue
        columns.append(page.Column(name, backends.version_line(name, found)))
        for function in ("single_head_attention", "multi_head_attention"):
            computed[(name, function)] = values.lesson_values(
                name, fixture, dtype, function, shown.head
            )
    agrees = all(
        shown.within
        for steps in computed.values()
        for shown_list in steps.values()
        for shown in shown_list
    )
    say("the build-up and what each framework adds, against the oracle")
    notes, lecture_agrees = lecture_views.notes(shown, loaded, dtype)
    agrees = agrees and lecture_agrees
    root = sources.PREFIX  # the files ride in the page: links work anywhere
    heading = (
        input_line(shown, preset)
        + f", {dtype}; "
        + "; ".join(c.version for c in columns)
        + ". Built from the repository's files: the code is theirs, the values a "
        "real run's."
    )
    say("reading the chapters' files, writing the page")
    rows = [(chapter, rows_of(chapter, names)) for chapter in chapters.PAGE]
    roles = [] if not shown.trained else heads_shown(shown)
    context = view_context(shown)
    return (
        page.document(
            rows,
            columns,
            computed,
            root=root,
            heading=heading,
            roles=roles,
            context=context,
            notes=notes,
            fused=rows_of(chapters.FUSED, names),
        ),
        agrees,
    )


def view_context(shown):
    """The tokens and the heads' titles that label the page's views."""
    from triptych.read.views import Context

    H = shown.fixture.preset.n_heads
    if not shown.trained:
        one = f"one head of D = C = {shown.fixture.preset.d_model}, random weights"
        return Context(shown.labels, [f"head {h}" for h in range(H)], one)
    heads = [f"head {h}: {shown.role(h).role}" for h in range(H)]
    return Context(shown.labels, heads, heads[shown.head])


def input_line(shown, preset: str) -> str:
    """What the lesson's values were computed on, in one sentence."""
    p = shown.fixture.preset
    words = " ".join(p.tokens)
    if not shown.trained:
        return (
            f'The toy sentence "{words}" (preset {preset}: d_model {p.d_model}, '
            f"{p.n_heads} heads, random weights: no head has learned anything)"
        )
    return (
        f"Layer {shown.layer} of the trained model (shared/fixtures/induction.npz, "
        f'd_model {p.d_model}, {p.n_heads} heads of D = {p.d_head}) reading "{words}"; '
        f"the one-head lesson runs head {shown.head}, the multi-head lesson all "
        f"{p.n_heads}"
    )


def heads_shown(shown) -> list[str]:
    """'head 3: induction head: 0.59 of its weight on ...', one per head of
    the layer shown, measured."""
    return [
        f"head {h}: {shown.role(h).describe()}"
        for h in range(shown.fixture.preset.n_heads)
    ]
