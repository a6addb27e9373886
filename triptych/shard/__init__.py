"""`triptych shard`: each backend's sharded attention on 1, 2, 4, ... devices.

    triptych shard [--devices 8] [--strategy sequence|heads]
                   [--backends all] [--T 1024] [--d-model 64]
                   [--n-heads 8] [--batch 1] [--dtype float32] [--key-padding]
                   [--rank-timeout 60] [--output-dir outputs/shard] [--quiet]

For every device count N (a single --devices N means 1, 2, 4, ... up to N),
runs the strategy in each backend where its engine runs it
(`triptych.shard.engines`: NumPy in this process, torch as N processes in a
gloo process group that this command launches itself, JAX in a child process
with N CPU devices, which it sets up itself), and prints per N how closely
the output agrees with the float64 oracle, the peak bytes each device held
and the largest array it made, and how both scale with N. docs/sharding.md.

Files, in --output-dir: results.json (docs/shard.schema.json) and
memory_vs_devices.png, staged like every command's.

Exit codes: 0 every run agrees with the oracle, 1 one does not or a device
failed during a run (a torch rank that died, a collective that timed out: one
line per failure, and no process left behind), 2 bad arguments (N that does
not divide the heads, a sequence too short for 2N chunks, more devices than
JAX has, a backend not installed), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
from typing import Any

from shared import registry
from shared.registry import ONE_CHILD, PROCESS_GROUP
from shared.sharding import STRATEGIES
from shared.tolerances import tolerance
from shared.validation.sharded import check_head_shards, check_sequence_shards
from shared.validation.variants import check_heads
from triptych.common import limits, options, prose, status
from triptych.common.backends import (
    missing_package,
    not_installed_line,
    versions,
)
from triptych.common.errors import CommandError
from triptych.common.files import StagedDirectory, rows_kept_on_interrupt
from triptych.common.tables import as_rich, as_text
from triptych.shard import report
from triptych.shard.engines import RANK_TIMEOUT_S, DeviceFailureError, run_backend
from triptych.shard.problem import BIASES, PARAMS, Problem, Run, plural

SCHEMA = "triptych-shard/1"
SIZES = {"--T": 1024, "--d-model": 64, "--n-heads": 8, "--batch": 1}
"""The size options and their defaults."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "shard",
        help="sharded attention on N devices: heads or the sequence (a ring)",
        description=(
            "Split causal attention across N devices, over the heads (tensor "
            "parallel) or over the sequence (ring attention, context parallel), "
            "in NumPy (a plain simulation), PyTorch (one process per device, "
            "torch.distributed over gloo) and JAX (a Mesh of CPU devices, jit and "
            "shard_map); print per device count the agreement with the float64 "
            "oracle and the bytes each device held; write results.json and a "
            "plot of per-device memory against N.\n\n"
            "exit codes: 0 all agree, 1 some do not or a device failed, 2 bad "
            "arguments, 130 Ctrl-C"
        ),
    )
    parser.add_argument(
        "--devices",
        default="8",
        metavar="N",
        help="the device counts: N alone runs 1, 2, 4, ... up to N; a "
        "comma-separated list (1,3) runs those",
    )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="sequence",
        help="what is split: the sequence (ring attention: each device its rows "
        "of queries, keys and values) or the heads (each device H/N heads)",
    )
    options.backends(parser, help=options.BACKENDS_HELP + " (default: all)")
    parser.add_argument(
        "--T", type=int, default=SIZES["--T"], metavar="T", help="sequence length"
    )
    options.d_model(parser, type=int, default=SIZES["--d-model"], help="model width")
    options.n_heads(
        parser, type=int, default=SIZES["--n-heads"], help="heads (must divide C)"
    )
    options.batch(
        parser,
        type=int,
        default=SIZES["--batch"],
        help="batch size (1: x has no batch axis, unless --key-padding)",
    )
    options.dtype(parser, help="every backend's dtype")
    parser.add_argument(
        "--key-padding",
        action="store_true",
        help="mask padded keys: item 0 on the left (3 keys), the others on the right",
    )
    parser.add_argument(
        "--rank-timeout",
        type=float,
        metavar="SECONDS",
        help="seconds any torch collective or message may wait (default: "
        f"{RANK_TIMEOUT_S:g}; only with torch in --backends)",
    )
    options.output_dir(
        parser,
        default="outputs/shard",
        help="where results.json and memory_vs_devices.png go",
    )
    options.quiet(parser, help="no progress on the terminal")
    parser.set_defaults(func=main)


def device_counts(text: str) -> list[int]:
    """'8' -> [1, 2, 4, 8]; '6' -> [1, 2, 4, 6]; '1,3' -> [1, 3]."""
    try:
        counts = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise CommandError(
            f"--devices must be a positive integer or a list of them, got {text!r}"
        )
    if len(counts) > 1:
        return sorted(set(counts))
    (N,) = counts
    return sorted({2**i for i in range(N.bit_length()) if 2**i < N} | {N})


def resolve(args: argparse.Namespace) -> tuple[list[str], list[str], list[Run]]:
    """The backends and the runs the arguments ask for, and the backends "all"
    left out as not installed; CommandError, one line, for anything that does
    not fit (before any process starts)."""
    counts = device_counts(args.devices)
    # "all" looks for the packages without importing them: the runs import
    # their framework in processes of their own
    found = [b for b in registry.names() if not missing_package(b)]
    backends = list(args.backends or found)
    not_installed = (
        [] if args.backends else [b for b in registry.names() if b not in found]
    )
    if min(args.T, args.d_model, args.batch) < 1:
        raise CommandError("--T, --d-model and --batch must be positive")
    if args.key_padding and args.T <= 3:
        raise CommandError("--key-padding hides 3 keys of item 0: give --T > 3")
    if args.rank_timeout is not None:
        grouped = [
            f.name for f in registry.frameworks() if f.shard_engine == PROCESS_GROUP
        ]
        if not set(grouped) & set(backends):
            name = grouped[0]  # torch: the one with collectives to bound
            why = (
                f"{name} is not installed"
                if args.backends is None
                else (f"--backends has no {name}")
            )
            raise CommandError(
                f"--rank-timeout bounds {name}'s collectives, and {why}: drop "
                "--rank-timeout"
            )
        if not args.rank_timeout > 0:
            raise CommandError("--rank-timeout must be positive")
    # after the options' own checks: a pair that does not fit is wrong wherever
    # it runs, whatever is installed
    missing = [b for b in backends if missing_package(b)]
    if missing:
        raise CommandError(
            f"backend {missing[0]!r} is not installed ({missing_package(missing[0])}"
            "): " + registry.install_command(registry.get(missing[0]).install.extra)
        )
    try:
        check_heads(args.d_model, args.n_heads)
        for N in counts:
            check_sequence_shards(args.T, N)
            if args.strategy == "heads":
                check_head_shards(args.n_heads, N)
    except ValueError as error:
        raise CommandError(str(error)) from None
    problem = Problem(
        T=args.T,
        C=args.d_model,
        H=args.n_heads,
        batch=(args.batch,) if args.batch > 1 or args.key_padding else (),
        dtype=args.dtype,
        padded=args.key_padding,
    )
    refuse_what_cannot_fit(args)
    return backends, not_installed, [Run(args.strategy, N, problem) for N in counts]


def refuse_what_cannot_fit(args: argparse.Namespace) -> None:
    """Sizes whose float64 oracle cannot be held in memory, or would not end
    in time: one line (`triptych.common.limits`)."""
    B, T, C, H = args.batch, args.T, args.d_model, args.n_heads
    sizes = ("--T", "--batch", "--n-heads")
    asked = {"--T": T, "--d-model": C, "--n-heads": H, "--batch": B}
    limits.refuse_unless_fits(
        [
            limits.Array("x", (B, T, C), 8, ("--T", "--batch")),
            limits.Array("the four (C, C) weights", (4, C, C), 8, ("--d-model",)),
            limits.Array("the oracle's (B, H, T, T) weights", (B, H, T, T), 8, sizes),
        ],
        asked,
        SIZES,
    )
    seconds = limits.oracle_seconds(B, H, T, C)
    limits.refuse_unless_in_time(seconds, "--T", T, limits.ORACLE_LIMIT_S)


def main(args: argparse.Namespace) -> int:
    """`triptych shard`: run, print, write; the exit code."""
    backends, not_installed, runs = resolve(args)
    rank_timeout = RANK_TIMEOUT_S if args.rank_timeout is None else args.rank_timeout
    args = argparse.Namespace(**{**vars(args), "rank_timeout": rank_timeout})
    with StagedDirectory(args.output_dir, "shard") as staging:
        problem = runs[0].problem
        with status.shown(
            f"computing the float64 oracle (T={problem.T}, the reference's loops)",
            quiet=args.quiet,
        ):
            expected = oracle(problem)
        rows: list[dict[str, Any]] = []
        with rows_kept_on_interrupt(
            staging, report.PARTIAL_FILE, report.CSV_FIELDS, rows
        ):
            failures = run_all(args, backends, runs, expected, rows)
        document = dict(
            schema=SCHEMA,
            created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            command=command_line(args, backends),
            header=dict(logical_cores=os.cpu_count(), versions=versions()),
            config=dict(
                strategy=args.strategy,
                devices=[run.devices for run in runs],
                backends=backends,
                not_installed=not_installed,
                problem=runs[0].problem.as_dict(),
                rank_timeout_s=args.rank_timeout,
            ),
            tolerance=tolerance(args.dtype)._asdict(),
            results=rows,
            scaling=report.scaling(rows),
            failures=[str(failure) for failure in failures],  # whole
        )
        written = report.write_outputs(document, staging.path)
        paths = staging.commit(written, stale=(*report.FILES, report.PARTIAL_FILE))
    print_report(document, paths)
    for failure in failures:  # short: the whole message is in results.json
        whole = f" (all of it in {paths[0]})" if failure.line != str(failure) else ""
        prose.echo(f"triptych shard: {failure.line}{whole}", sys.stderr)
    wrong = [r for r in rows if r["status"] == "wrong"]
    for row in wrong:
        print(
            f"triptych shard: {row['backend']} on "
            f"{plural(row['devices'], 'device', 'devices')} is wrong: "
            f"max |diff| {row['max_abs_diff']:.3g} against the oracle",
            file=sys.stderr,
        )
    return 1 if failures or wrong else 0


def print_report(document: dict[str, Any], paths) -> None:
    """The table (a rich table on a terminal, else plain text), the scaling,
    the files, then the verdict: PASS or FAIL, as `triptych grad` ends."""
    from rich.console import Console

    console = Console(highlight=False)
    table = report.table(document)
    if console.is_terminal:
        console.print(as_rich(table))
    else:
        print(as_text(table))
    missing = document["config"]["not_installed"]
    if missing:
        prose.say(console, not_installed_line(missing))
    console.print()
    prose.say(console, "\n".join(report.scaling_lines(document)))
    prose.say(console, "wrote " + ", ".join(str(p) for p in paths))
    verdict = report.verdict_line(document)
    if console.is_terminal:
        style = "bold green" if verdict.startswith("PASS") else "bold red"
        console.print(verdict, style=style, markup=False)
    else:
        print(verdict)


def run_all(args, backends, runs, expected, rows) -> list[DeviceFailureError]:
    """Each backend's runs; a row per run into `rows`; the failures.

    JAX runs every N in one child; NumPy and torch one N at a time (torch: a
    launch per N), so a failure costs only the runs of its launch."""
    failures = []
    with status.progress(quiet=args.quiet) as progress:
        task = progress.add_task("", total=len(backends) * len(runs))
        for backend in backends:
            together = registry.get(backend).shard_engine == ONE_CHILD
            for batch in [runs] if together else [[run] for run in runs]:
                what, note = launching(backend, batch)
                progress.update(task, description=what, note=note)
                failures += run_batch(args, backend, batch, expected, rows)
                progress.advance(task, len(batch))
    return failures


def launching(backend: str, batch: list[Run]) -> tuple[str, str | None]:
    """What the progress line says while a launch of `backend` runs, and a
    note (which a narrow line elides first): what its engine
    (shared.registry) starts."""
    counts = [run.devices for run in batch]
    framework = registry.get(backend)
    if framework.shard_engine == PROCESS_GROUP:
        (N,) = counts
        return (
            f"{backend} on {plural(N, 'device', 'devices')}",
            f"{plural(N, 'process', 'processes')} in a gloo group",
        )
    if framework.shard_engine == ONE_CHILD:
        listed = ", ".join(map(str, counts))
        return (
            f"{backend} on {listed} devices",
            f"one child process, {framework.compiler.name} compiling",
        )
    return f"{backend} on {plural(counts[0], 'device', 'devices')}", None


def run_batch(args, backend, batch, expected, rows) -> list[DeviceFailureError]:
    """One launch of a backend: a row per run into `rows`; its failure."""
    try:
        results = run_backend(backend, batch, rank_timeout_s=args.rank_timeout)
    except DeviceFailureError as failure:
        rows.extend(
            report.row(backend, run, None, expected, args.dtype, str(failure))
            for run in batch
        )
        return [failure]
    rows.extend(
        report.row(backend, run, result, expected, args.dtype)
        for run, result in zip(batch, results, strict=True)
    )
    return []


def oracle(problem: Problem):
    """The float64 oracle's output for the problem, (..., T, C)."""
    from impl_numpy import key_padding_mask
    from shared.reference import reference_multi_head

    arrays = problem.inputs()
    keep = arrays["keep"]
    mask = None if keep is None else key_padding_mask(keep, problem.T, multi_head=True)
    out, _ = reference_multi_head(
        arrays["x"],
        *(arrays[name] for name in PARAMS),
        problem.H,
        mask,
        biases={name: arrays[name] for name in BIASES},
    )
    return out


def command_line(args: argparse.Namespace, backends: list[str]) -> str:
    """The command that repeats this run."""
    parts = [
        "triptych", "shard", "--devices", args.devices, "--strategy", args.strategy,
        "--backends", ",".join(backends), "--T", str(args.T),
        "--d-model", str(args.d_model), "--n-heads", str(args.n_heads),
        "--batch", str(args.batch), "--dtype", args.dtype,
    ]  # fmt: skip
    if args.key_padding:
        parts.append("--key-padding")
    return shlex.join(parts)
