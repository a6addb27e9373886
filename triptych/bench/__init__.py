"""`triptych bench`: jit against eager, every framework timed the same way;
with --memory, the peak memory of each mode against T.

    triptych bench [--T 128,256,512,1024,2048] [--d-model 512] [--n-heads 8]
                   [--batch 1] [--dtype float32] [--modes numpy,jax-jit,...]
                   [--repeats 10] [--warmup 2] [--threads N] [--device auto]
                   [--output-dir outputs/bench] [--quick] [--quiet]
    triptych bench --memory [...]: see triptych.bench.memory

This package is the command: the parser and `main`, which resolves the config,
sets the threads (`triptych.common.threads`), stages the output directory, runs
the sweep and writes its files. The parts below it, each importing only those
above it in this list (and triptych.common, shared, impl_*):

    machine.py   the CPU and devices the run is on (threads: triptych.common.threads)
    config.py    the defaults and the config types, one per idea
    problem.py   the fixture every mode runs at one point of a sweep
    modes/       the registry of modes and the runners they build
    timing.py    the clock: first call, steady state, FLOP counts
    report.py    the time sweep's files, and the fields of its rows
    gemm.py      the float32 GEMM peak, measured in the same run
    sweep.py     the time sweep: every mode at every T, checked and timed
    verdict.py   the line that ends a run: what the sweep found, in words
    memory/      the memory sweep (--memory), its child process and its files

Exit codes: 0 every requested mode ran and agreed with NumPy (or was skipped
because its framework is missing or lacks the device); 1 a mode was wrong or
failed (the files are still written); 2 bad arguments or an output directory
that cannot be written (checked before the sweep); 130 Ctrl-C, which leaves the
output directory as it was but for the rows done so far, kept in
results.partial.csv (--memory: memory.partial.csv) there; the next complete
run removes that file.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from shared.dtypes import FLOAT_DTYPES
from triptych.bench import load, memory, settings, sweep
from triptych.bench import report as bench_report
from triptych.bench.config import (
    FULL,
    QUICK,
    SCALING,
    SCALING_MODES,
    TRAIN,
    TRAIN_QUICK,
)
from triptych.bench.machine import resolve_device
from triptych.bench.memory import report as memory_report
from triptych.bench.modes import MODES, SETS
from triptych.bench.verdict import verdict_line
from triptych.common import options, prose, status
from triptych.common.errors import CommandError
from triptych.common.files import StagedDirectory, rows_kept_on_interrupt
from triptych.common.threads import thread_limits


def main(args: argparse.Namespace) -> int:
    """`triptych bench`: run the sweep, print the table, write the files; the
    exit code."""
    check_pairs(args)
    if args.memory:
        return memory_main(args)
    config = settings.resolve_config(args)
    frameworks = dict.fromkeys(MODES[name].framework for name in config.modes)
    # an unwritable output directory is refused before the frameworks load
    with StagedDirectory(config.output_dir, "bench") as staging:
        with status.shown(status.loading_text(frameworks), quiet=config.quiet):
            sweep.load_frameworks(frameworks)
        with thread_limits(config.threads) as threads:
            device, unreachable = resolve_device(config.device)
            config = dataclasses.replace(config, device=device)
            rows: list[dict] = []
            kept = bench_report.run_settings(settings.config_dict(config))
            with rows_kept_on_interrupt(
                staging,
                bench_report.PARTIAL_FILE,
                bench_report.CSV_FIELDS,
                rows,
                kept,
            ):
                report = sweep.run(config, threads, unreachable, rows)
            written = bench_report.write_outputs(report, staging.path)
            stale = (*bench_report.FILES, bench_report.PARTIAL_FILE)
            paths = staging.commit(written, stale)
    bench_report.print_summary(report)
    bench_report.say("wrote " + ", ".join(str(p) for p in paths))
    ran = report["config"]
    warning = load.warning(report["header"]["load"], ran["threads"], ran["clock"])
    if warning:
        bench_report.say(f"triptych bench: warning: {warning}", stderr=True)
    bad = [r for r in report["results"] if r["status"] in ("wrong", "error")]
    for row in bad:
        what = "is wrong" if row["status"] == "wrong" else "failed"
        print(
            f"triptych bench: {row['mode']} at T={row['T']} {what}: {row['reason']}",
            file=sys.stderr,
        )
    sys.stderr.flush()  # the warnings reach the screen before the verdict
    bench_report.say(verdict_line(report["results"]))  # the last line on screen
    return 1 if bad else 0


TIME_ONLY = ("repeats", "warmup", "gemm_size")
"""Options of the time sweep that --memory has no use for."""
MEMORY_ONLY = ("memory_limit_gib", "memory_timeout")
"""Options of --memory that the time sweep has no use for."""


def check_pairs(args: argparse.Namespace) -> None:
    """An option given where the sweep asked for would ignore it: one line.

    Raises:
        CommandError: --train or a timing option with --memory, or a --memory
            option without it.
    """

    def flag(dest: str) -> str:
        return "--" + dest.replace("_", "-")

    if args.memory:
        if args.train:
            raise CommandError("--memory measures attention's memory, not training")
        if args.clock is not None:
            raise CommandError(
                "--clock says how a time is taken; --memory "
                "measures memory: drop --clock"
            )
        if args.scaling or args.breakdown is not None:
            what = "--scaling" if args.scaling else "--breakdown"
            raise CommandError(f"{what} goes with the time sweep, not --memory")
        given = [flag(d) for d in TIME_ONLY if getattr(args, d) is not None]
        if given:
            raise CommandError(
                f"{', '.join(given)} set{'s' * (len(given) == 1)} how a time is "
                f"taken; --memory measures memory: drop {', '.join(given)}"
            )
    else:
        given = [flag(d) for d in MEMORY_ONLY if getattr(args, d) is not None]
        if given:
            raise CommandError(f"{', '.join(given)} only with --memory")


def memory_main(args: argparse.Namespace) -> int:
    """`triptych bench --memory`: run the sweep, write the files; the exit code."""
    config = memory.resolve_config(args)
    with StagedDirectory(config.output_dir, "memory") as staging:
        rows: list[dict] = []
        with rows_kept_on_interrupt(
            staging, memory_report.PARTIAL_FILE, memory_report.ROW_FIELDS, rows
        ):
            report = memory.run(config, rows)
        written = memory_report.write_outputs(report, staging.path)
        stale = (*memory_report.FILES, memory_report.PARTIAL_FILE)
        paths = staging.commit(written, stale)
    memory_report.print_report(report)
    prose.echo("wrote " + ", ".join(str(p) for p in paths))
    bad = [r for r in report["results"] if r["status"] in ("error", "wrong")]
    for row in bad:
        print(
            f"triptych bench --memory: {row['mode']} at T={row['T']} "
            f"{row['status']}: {row['reason']}",
            file=sys.stderr,
        )
    return 1 if bad else 0


# Command line -----------------------------------------------------------------


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bench",
        help="time jit against eager, every framework the same way",
        description=(
            "Time causal self-attention in every mode on the shared fixture: "
            "first call (trace and compile) apart from the steady state, useful "
            "GFLOP/s against a float32 GEMM measured in the same run, speedups, "
            "after checking each mode's output against NumPy's.\n\n"
            "Ctrl-C stops the sweep (exit code 130) and keeps the rows done so far "
            f"in DIR/{bench_report.PARTIAL_FILE} (--memory: "
            f"DIR/{memory_report.PARTIAL_FILE}); the output directory is "
            "otherwise as it was, and the next complete run removes that file.\n\n"
            "exit codes: 0 every requested mode ran and agreed with NumPy (or was "
            "skipped: its framework missing, or its device), 1 a mode was wrong or "
            "failed (the files are still written), 2 bad arguments or an output "
            "directory that cannot be written, 130 Ctrl-C"
        ),
    )
    parser.add_argument(
        "--T",
        type=_lengths,
        metavar="T1,T2,...",
        help=f"sequence lengths (default: {_csv(FULL['T'])}; --quick: "
        f"{_csv(QUICK['T'])})",
    )
    options.d_model(parser, type=_positive, help=_default("model width", "d_model"))
    options.n_heads(parser, type=_positive, help=_default("heads", "n_heads"))
    options.batch(parser, type=_positive, help=_default("batch size", "batch"))
    options.dtype(parser, choices=FLOAT_DTYPES, help="every mode's dtype")
    parser.add_argument(
        "--modes",
        type=_mode_names,
        metavar="M1,M2,...",
        help=f"modes to run (default: {', '.join(SETS['attention'])}; --train: "
        f"{', '.join(SETS['train'])})",
    )
    parser.add_argument(
        "--repeats",
        type=_positive,
        metavar="N",
        help=_default("steady-state samples", "repeats"),
    )
    parser.add_argument(
        "--warmup",
        type=_non_negative,
        metavar="N",
        help=_default("untimed calls after the first", "warmup"),
    )
    options.threads(
        parser,
        type=_positive,
        help="threads for every framework (default: the cores this process may use)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=["cpu", "cuda", "auto"],
        help="auto: cuda where torch or JAX sees one, else cpu",
    )
    parser.add_argument(
        "--gemm-size",
        type=_positive,
        metavar="N",
        help=_default("n of the float32 (n, n) @ (n, n) peak measurement", "gemm_size"),
    )
    options.output_dir(parser, default="outputs/bench", help="where files go")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run of seconds: tiny sizes, a few repeats, and without "
        "the torch.compile modes (10 to 30 s each; --modes brings them back)",
    )
    parser.add_argument(
        "--train",
        action="store_true",
        help="time one training step (forward, backward, Adam) of triptych "
        "train's model instead of attention's forward: the modes "
        f"{', '.join(SETS['train'])}; T {_csv(TRAIN['T'])}, C {TRAIN['d_model']}, "
        f"H {TRAIN['n_heads']}, batch {TRAIN['batch']} by default (--quick: "
        f"T {_csv(TRAIN_QUICK['T'])}, C {TRAIN_QUICK['d_model']}, batch "
        f"{TRAIN_QUICK['batch']})",
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default=None,
        help="what a second is: wall (default), or cpu, this process's CPU time, "
        "which other processes on a busy machine do not inflate (needs "
        "--threads 1)",
    )
    parser.add_argument(
        "--breakdown",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after timing each mode, profile it: the shares of matmul, softmax, "
        "memory layout and the rest (torch.profiler, jax.profiler, NumPy's lines "
        "sampled), with the roofline (default: on; off with --quick, --train, "
        "--scaling)",
    )
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="time against T for the modes whose memory grows as T (T "
        f"{_csv(SCALING['T'])}; modes {', '.join(SCALING_MODES)}), each checked "
        "against NumPy's blockwise attention, the exponent of time ~ T^p fitted "
        "(and memory's, from a --memory run in the same folder): scaling.png",
    )
    options.quiet(parser, help="no progress bar and no header")
    group = parser.add_argument_group("memory (triptych bench --memory)")
    group.add_argument(
        "--memory",
        action="store_true",
        help="measure the peak extra memory of each mode against T instead of "
        "its time, each point in a fresh process; writes memory.json, "
        "memory.csv, memory.md and memory_vs_T.png (default T: "
        f"{_csv(memory.MEMORY_T)}; modes: {', '.join(memory.DEFAULT_MODES)})",
    )
    group.add_argument(
        "--memory-limit-gib",
        type=float,
        metavar="GIB",
        help="the memory to plan for: a T^2 mode is skipped where one "
        "(B, H, T, T) array alone would take more than a quarter of it "
        "(default: this machine's physical memory)",
    )
    group.add_argument(
        "--memory-timeout",
        type=int,
        metavar="S",
        help=f"seconds one point may take (default: {memory.MEMORY_TIMEOUT_S})",
    )
    parser.set_defaults(func=main)
    return parser


def _default(text: str, key: str) -> str:
    return f"{text} (default: {FULL[key]}; --quick: {QUICK[key]})"


def _csv(values) -> str:
    return ",".join(str(v) for v in values)


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _lengths(text: str) -> tuple[int, ...]:
    lengths = []
    for part in text.split(","):
        T = _integer(part.strip())
        if T < 1:
            raise argparse.ArgumentTypeError(f"every T must be at least 1, got {T}")
        lengths.append(T)
    return tuple(dict.fromkeys(lengths))


def _mode_names(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in MODES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown mode {', '.join(map(repr, unknown)) or 'list'}; "
            f"choose from {', '.join(MODES)}"
        )
    return names
