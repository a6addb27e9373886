"""`triptych check TARGET ...`: the cross-check suite, for anyone's attention.

Points the suite's properties at an implementation (ours, a lesson, a
framework's kernel or module, a student's homework) and says, property by
property, PASS, FAIL (with the smallest failing input hypothesis finds, the
largest difference and what the mistake looks like), NOTE (a known,
deliberate deviation) or SKIP (the signature cannot show it). Each target
runs in a process of its own with a timeout (`runner`), so one that hangs or
crashes is a FAIL row and the others still run.

This package is the command; `target` finds what TARGET names, `adapters`
calls it, `problems` draws the inputs, `properties` checks them, `mistakes`
names a failure, `runner` runs each target in its own process, `report`
prints and writes the results, `plugin` is the pytest plugin. docs/check.md
says how to use it and what is proved.

Exit codes: 0 no property failed, 1 one did (or a target hung, crashed or
raised on import), 2 a target that cannot be checked (no such file, module
or function, not callable, no signature fits, framework not installed) or a
bad option (one line on stderr each), 130 Ctrl-C (the targets done kept in
results.partial.csv).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from shared import registry
from triptych.check.progress import progress_shown
from triptych.common import options, prose
from triptych.common.errors import CommandError
from triptych.common.files import StagedDirectory, rows_kept_on_interrupt
from triptych.common.parser import integer_at_least, positive_float

DTYPES = ("float64", "float32", "float16", "bfloat16")
SIGNATURES = ("auto", "multi", "heads", "single", "qkv", "qkv-thd", "module")
PROFILES = ("default", "strict", "course")
BATCHES = ("auto", "none", "one", "any")
JSON_FILE = "results.json"
MARKDOWN_FILE = "report.md"
GRADE_CSV = "grade.csv"
GRADE_MARKDOWN = "grade.md"
PARTIAL_FILE = "results.partial.csv"
PARTIAL_FIELDS = (
    "target", "status", "adapter", "passed", "failed", "noted", "skipped", "error",
)  # fmt: skip
MISSING = (
    "hypothesis is not installed here, and triptych check needs it: "
    + registry.install_command("check")
)


def add_parser(subparsers) -> None:
    """Add `triptych check` to the command line."""
    missing = "" if has_hypothesis() else f"\n\nNOTE: {MISSING}."
    parser = subparsers.add_parser(
        "check",
        help="the cross-check suite for any attention implementation",
        description=(
            "Check attention implementations against the float64 oracle and the "
            "contract, property by property: equal to the oracle in each dtype, "
            "causal, rows summing to 1, scaled by 1/sqrt(D), mask polarity and "
            "broadcasting, batch and heads independent, fully masked rows, NaN "
            "behind the mask, hostile magnitudes, determinism, gradients. A "
            "failure comes with the smallest failing input hypothesis finds, the "
            "largest difference and, where the pattern is a known mistake, what it "
            "looks like. T is drawn up to --max-t (64), the block edges 15, 16, "
            "17, 31, 32, 33, 63, 64, 65 among the sizes. Each TARGET runs in a "
            "process of its own with --timeout. Writes results.json "
            "(docs/check.schema.json) and report.md to --output-dir (and "
            "grade.csv, grade.md with --grade).\n\n"
            "--profile default asks what every correct causal attention must do "
            "(a policy difference, NaN behind the mask or a fully masked row of "
            "NaN, is a NOTE); strict adds this project's own policies; course "
            "asks what a student must get right, on x (..., T, C).\n\n"
            "TARGET is module:function or path/to/file.py:function (a glob in the "
            "path is expanded: submissions/*.py:attention): a function of x and the "
            "four (C, C) weights (w_k, w_v (C, H_kv * D) with --n-kv-heads), ours "
            "f(x, w_q, w_k, w_v, w_o, n_heads, mask=None), "
            "the merged heads f(x, w_q, w_k, w_v, n_heads) or single-head f(x, w_q, "
            "w_k, w_v, mask=None); a kernel f(q, k, v, mask=None) on (..., H, T, D) "
            "like torch's scaled_dot_product_attention (qkv-thd: (..., T, H, D), "
            "like jax.nn.dot_product_attention); or a module class or instance "
            "(ours, nn.MultiheadAttention, nnx.MultiHeadAttention, transformers' "
            "attention, or one with linear layers named q, k, v, o, or qkv / c_attn "
            "and proj / c_proj). The batch axes it takes, (T, C), (B, T, C) or any, "
            "are found by calling it (--batch names them). Anything else: --adapter "
            "(docs/check.md).\n\n"
            "exit codes: 0 no property failed (PASS, NOTE or SKIP), 1 one failed or "
            "a target hung, crashed or raised on import, 2 a target that cannot be "
            "checked or a bad option (one line on stderr)" + missing
        ),
    )
    parser.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="module:function or file.py:function",
    )
    options.one_backend(
        parser,
        "--framework",
        before=("auto",),
        default="auto",
        help="what the target computes with; auto: from the target and its module",
    )
    parser.add_argument(
        "--signature",
        choices=SIGNATURES,
        default="auto",
        help="how to call it; auto: from its parameters (docs/check.md#signatures)",
    )
    parser.add_argument(
        "--adapter",
        metavar="SPEC",
        help="module:function or file.py:function of adapt(target), which returns "
        "a function f(x, w_q, w_k, w_v, w_o, n_heads, mask=None) calling the target",
    )
    parser.add_argument(
        "--dtypes",
        type=parse_dtypes,
        default=",".join(DTYPES),
        metavar="NAMES",
        help="comma-separated: the dtypes the oracle property runs in (the others "
        "run in float64 if given, else in the first)",
    )
    parser.add_argument(
        "--examples",
        type=integer_at_least(1),
        default=20,
        metavar="N",
        help="inputs drawn per property (a failure then shrinks with up to 60 more)",
    )
    options.seed(parser, default=0, help="hypothesis's seed")
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default="default",
        help="what is asked: default (every correct causal attention; policy "
        "differences are NOTEs), strict (this project's policies too), course "
        "(what a student must get right, on x (..., T, C))",
    )
    parser.add_argument(
        "--properties",
        metavar="NAMES",
        help="comma-separated property ids to run (default: the profile's; see "
        "docs/check.md)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="PROPERTY",
        help="leave this property out (repeat, or comma-separated ids)",
    )
    parser.add_argument(
        "--max-t",
        type=integer_at_least(2),
        default=64,
        metavar="N",
        help="the longest sequences drawn: the block edges p - 1, p, p + 1 of each "
        "power of two p from 16 up to N, and N",
    )
    parser.add_argument(
        "--batch",
        choices=BATCHES,
        default=None,
        help="the batch axes x is given with: none (T, C), one (B, T, C), any "
        "(..., T, C); auto: those the target runs with (the default; any with "
        "--profile course)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=900.0,
        metavar="SECONDS",
        help="per target: past it, the target is killed and its row is FAIL",
    )
    options.output_dir(
        parser,
        type=Path,
        default=Path("outputs/check"),
        help="where results.json and report.md go",
    )
    parser.add_argument(
        "--eager",
        action="store_true",
        help="run JAX targets eagerly, as written (slower: each operation compiles "
        "for each new shape); by default under jax.jit, and eagerly only where they "
        "cannot be traced",
    )
    parser.add_argument(
        "--grade",
        action="store_true",
        help="print one row per target with each property's result, its score "
        "and why each FAIL failed; write grade.csv and grade.md",
    )
    from triptych.check.variant import add_options

    add_options(
        parser.add_argument_group(
            "the variant the target implements",
            "Passed by keyword, or as one variant=Variant(...) to a function "
            "with a variant parameter (docs/check.md#variants).",
        ).add_argument
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """`triptych check`: each target in its own process; print, write; exit code."""
    from triptych.check import report, runner, target
    from triptych.check.adapters.probe import batch_of
    from triptych.check.properties import Settings, property_ids
    from triptych.check.variant import variant_of
    from triptych.common.backends import versions

    if not has_hypothesis():
        raise CommandError(MISSING)
    variant = variant_of(args)
    args.batch = batch_of(args.batch, args.profile)
    settings = Settings(
        args.dtypes,
        args.examples,
        args.seed,
        profile=args.profile,
        max_t=args.max_t,
        variant=variant,
    )
    every = property_ids(Settings(args.dtypes, profile="strict", variant=variant))
    skip = [p.strip() for text in args.skip for p in text.split(",") if p.strip()]
    unknown = [p for p in skip if p not in every]
    if unknown:
        raise CommandError(
            f"--skip: unknown {', '.join(unknown)}; choose from {', '.join(every)}"
        )
    ids = property_ids(settings, skip)
    if args.properties:
        asked = [p.strip() for p in args.properties.split(",") if p.strip()]
        unknown = [p for p in asked if p not in every]
        if unknown:
            raise CommandError(
                f"--properties: unknown {', '.join(unknown)}; choose from "
                f"{', '.join(every)}"
            )
        ids = [p for p in every if p in asked and p not in skip]
    if not ids:
        raise CommandError("no property left to check: see --properties and --skip")
    runner.refuse_what_cannot_fit(args.max_t, args.timeout)
    specs = target.expand(args.targets)
    with StagedDirectory(args.output_dir, "check") as staging:
        reports, rows = [], []
        with (
            rows_kept_on_interrupt(staging, PARTIAL_FILE, PARTIAL_FIELDS, rows),
            progress_shown(len(specs) * len(ids)) as advance,
        ):
            for spec in specs:
                typo = target.missing(spec)  # no process for a name it lacks
                job = runner.Job(
                    spec,
                    args.framework,
                    args.signature,
                    args.adapter,
                    settings.dtypes,
                    settings.examples,
                    settings.seed,
                    tuple(ids),
                    args.eager,
                    args.profile,
                    args.max_t,
                    args.batch,
                    None if variant is None else variant.to_json(),
                )
                done = (
                    runner.TargetReport(spec, "ERROR", error=typo)
                    if typo
                    else runner.check(job, args.timeout, advance(spec))
                )
                reports.append(done)
                rows.append(partial_row(done))
        settings_json = {
            "dtypes": list(settings.dtypes),
            "examples": settings.examples,
            "seed": settings.seed,
            "timeout_s": args.timeout,
            "framework": args.framework,
            "signature": args.signature,
            "adapter": args.adapter,
            "eager": args.eager,
            "profile": args.profile,
            "max_t": args.max_t,
            "batch": args.batch,
            "variant": None if variant is None else variant.to_json(),
            "skip": skip,
            "properties": ids,
        }
        if all(r.status == "ERROR" for r in reports):  # nothing checked: exit
            print_reports(args, reports, ids, [])  # code 2, the folder as it was
            return 2
        doc = report.document(reports, settings_json, versions())
        (staging.path / JSON_FILE).write_text(json.dumps(doc, indent=2) + "\n")
        (staging.path / MARKDOWN_FILE).write_text(report.markdown(doc))
        files = [JSON_FILE, MARKDOWN_FILE]
        if args.grade:
            (staging.path / GRADE_CSV).write_text(report.grade_csv(reports, ids))
            (staging.path / GRADE_MARKDOWN).write_text(
                report.grade_markdown(reports, ids)
            )
            files += [GRADE_CSV, GRADE_MARKDOWN]
        stale = [PARTIAL_FILE] + ([] if args.grade else [GRADE_CSV, GRADE_MARKDOWN])
        paths = staging.commit(files, stale=stale)
    print_reports(args, reports, ids, paths)
    if any(r.status == "ERROR" for r in reports):
        return 2
    return 1 if any(r.status == "FAIL" for r in reports) else 0


def print_reports(args, reports, ids, paths) -> None:
    """The tables (or the grade), the verdict and the files on stdout; each
    target that cannot be checked in one line on stderr (in --grade, where
    its row says why, one line for all). No error is printed twice: where
    no target could be checked, stdout stays empty."""
    import sys

    from rich.console import Console

    from triptych.check import report
    from triptych.common.tables import as_rich

    console = Console(highlight=False)
    errors = [r for r in reports if r.status == "ERROR"]
    if args.grade:
        if console.is_terminal:
            console.print(as_rich(report.grade_table(reports, ids)))
        else:
            print(report.plain_grade(reports, ids) + "\n")
        if errors:
            print(
                f"triptych check: error: {len(errors)} of {len(reports)} targets "
                f"cannot be checked: their rows say why",
                file=sys.stderr,
            )
    else:
        for r in reports:
            if r.status == "ERROR":
                print(f"triptych check: error: {r.error}", file=sys.stderr)
            elif console.is_terminal and r.properties:
                console.print(as_rich(report.target_table(r)))
            elif console.is_terminal:  # nothing ran: its name and why, whole width
                prose.echo(report.plain_target(r) + "\n")
            else:
                print(report.plain_target(r) + "\n")
    if not args.grade and all(r.status == "ERROR" for r in reports):
        return  # each said on stderr, once: no verdict repeats it
    verdict = report.summary_line(reports)
    if console.is_terminal:
        style = "bold green" if verdict.startswith("PASS") else "bold red"
        console.print(verdict, style=style, markup=False)
    else:
        print(verdict)
    if paths:
        prose.echo("wrote " + ", ".join(str(p) for p in paths))


def partial_row(report) -> dict:
    counts = report.counts()
    return {
        "target": report.target,
        "status": report.status,
        "adapter": report.adapter,
        "passed": counts["PASS"],
        "failed": counts["FAIL"],
        "noted": counts["NOTE"],
        "skipped": counts["SKIP"],
        "error": report.error,
    }


def has_hypothesis() -> bool:
    return importlib.util.find_spec("hypothesis") is not None


def parse_dtypes(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in DTYPES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"choose from {', '.join(DTYPES)}, comma-separated; got {text!r}"
        )
    return names
