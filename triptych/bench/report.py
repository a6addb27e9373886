"""The files of `triptych bench`, written from its report (a JSON-ready dict).

    results.json    the whole report (schema "triptych-bench/1", below)
    results.csv     one row per mode and T: the run's settings, then ROW_FIELDS
                    (CSV_FIELDS)
    bench.md        the header, a Markdown table ready to paste, and the method
    time_vs_T.png   steady-state median time against T, log-log, one line per
                    mode, reference lines dashed, the bars the interquartile range
    speedup.png     jit over eager per framework against T (only when a jit mode
                    and its eager twin both ran)

`triptych bench` writes them into a staging folder (`triptych.common.files`),
then moves each into place with os.replace, so a reader never sees half a file.
A file of this list that the run did not produce is removed, so the folder
never mixes two runs.

results.json, "triptych-bench/1":

    schema      "triptych-bench/1"
    created     ISO 8601 time, UTC
    command     the command that repeats the run, every setting spelled out
    header      cpu, logical_cores, schedulable_cores, device, device_name, dtype,
                threads {requested, schedulable_cores, torch, threadpools [{library,
                api, num_threads, architecture}], xla, affinity?},
                versions {python, platform, numpy, torch, jax, jaxlib, flax},
                environment {OPENBLAS_CORETYPE, XLA_FLAGS, ... where set},
                load {before, during}: each {others_busy_cores (the cores
                other processes kept busy on average, null without
                /proc/stat), cores, loadavg [1, 5, 15 min], busy}
                (triptych.bench.load)
    config      T [..], d_model, n_heads, d_head, batch, dtype, modes [..], repeats,
                warmup, threads, device, gemm_size, min_sample_s, quick, seed,
                train, left_out [the default modes --quick left out]
    flops       {work: {formula, counts}}: how useful FLOPs are counted, for
                each kind of work of the run's modes: "attention" (a forward
                pass), "training step" (--train: forward, backward and Adam)
    gemm_peak   n, dtype "float32", library, gflops, by_library {name: {gflops,
                median_s, iqr_s}}
    modes       [{name, framework, kind, compiled, eager_twin, summary,
                available, reason}]
    results     [one row per mode and T, the keys of ROW_FIELDS]:
        mode, framework, kind ("ours" | "reference"), compiled, T,
        status ("ok" | "wrong" | "error" | "skipped"), reason (null when ok),
        first_call_s, compile_s (first call - median, compiled modes only),
        median_s, q25_s, q75_s, iqr_s, noisy (IQR above NOISY_IQR of the
        median), min_s, samples, calls_per_sample,
        useful_gflop, gflops, pct_of_gemm_peak, speedup_vs_numpy,
        jit_speedup_over (the eager twin's name), jit_speedup,
        max_abs_diff_out, max_abs_diff_weights (vs NumPy), fused_attention
        (torch-compile: whether inductor swapped in its fused attention)
    Timings are null unless status is "ok".
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from triptych.bench import load
from triptych.bench.breakdown import ROOFLINE_NOTE, SHARES_NOTE, breakdown_table
from triptych.bench.modes import MODES
from triptych.bench.roofline import plot_roofline
from triptych.bench.scaling import plot_scaling, scaling_table
from triptych.common import prose
from triptych.common.files import write_csv
from triptych.common.plots import finish_line_plot, mode_color, plain_log_ticks
from triptych.common.tables import (
    Table,
    as_markdown,
    as_rich,
    figure,
    number,
    without_empty_columns,
)

SCHEMA = "triptych-bench/1"
FILES = (
    "results.json",
    "results.csv",
    "bench.md",
    "time_vs_T.png",
    "speedup.png",
    "roofline.png",
    "scaling.png",
)
RUN_FIELDS = ("dtype", "device", "batch", "d_model", "n_heads", "threads")
ROW_FIELDS = (
    "mode",
    "framework",
    "kind",
    "compiled",
    "T",
    "status",
    "reason",
    "first_call_s",
    "compile_s",
    "median_s",
    "q25_s",
    "q75_s",
    "iqr_s",
    "noisy",
    "min_s",
    "samples",
    "calls_per_sample",
    "useful_gflop",
    "gflops",
    "pct_of_gemm_peak",
    "speedup_vs_numpy",
    "jit_speedup_over",
    "jit_speedup",
    "max_abs_diff_out",
    "max_abs_diff_weights",
    "fused_attention",
    "share_matmul",
    "share_softmax",
    "share_memory",
    "share_fused",
    "share_other",
    "traffic_bytes",
    "intensity",
    "roofline_gflops",
    "pct_of_roofline",
    "xla_flops",
    "xla_bytes",
)
"""The keys of a row of results, in order (see the schema above)."""
TIMING_FIELDS = (
    "first_call_s",
    "median_s",
    "q25_s",
    "q75_s",
    "iqr_s",
    "min_s",
    "samples",
    "calls_per_sample",
    "gflops",
)
"""The fields a timing fills in every "ok" row and in no other (compile_s too,
but only for a compiled mode)."""
NOISY_IQR = 0.25
"""A row is noisy when its interquartile range exceeds this share of its
median: its figures, and the speedups made from them, are not to be trusted."""
CSV_FIELDS = RUN_FIELDS + ROW_FIELDS
"""The columns of results.csv, and of results.partial.csv."""
PARTIAL_FILE = "results.partial.csv"
"""Where an interrupted sweep keeps its rows done so far: CSV_FIELDS, in the
output directory; a complete run removes it."""

METHOD = """\
Method: every mode runs multi-head causal self-attention on the same seeded
fixture (x of shape (B, T, C), four (C, C) projections, cast to the dtype).
Before any timing its output (and its attention weights, where it returns them)
must match NumPy's at the dtype's tolerance, or it is reported as wrong and not
timed. The first call of a freshly built mode is timed on its own: for
{compiled} it holds the trace and the compile (each T is a new compile, compile
caches off); "compile" is that first call less the steady median. Then come the
warm-up calls, then the samples: each is the mean of k back-to-back calls (k
chosen so that a sample lasts at least {min_sample_ms:g} ms), every call
synchronized (block_until_ready on every JAX output, weights included;
torch.cuda.synchronize on CUDA), garbage collector off; a framework timed after
another waits until the other's worker threads are idle (0.5 s at most). Median
and interquartile range over the samples; a row whose IQR exceeds {noisy:.0%}
of its median is marked noisy (*), and so is a speedup made from it. The load
of the machine is measured before the sweep and during it (the CPU time of
other processes, from /proc/stat); a busy machine is named in the header.
Useful GFLOP/s count the causal work only, 8·B·T·C² + 2·B·C·T(T+1) (four
projections; q·kᵀ and weights·v over the T(T+1)/2 allowed pairs), divided by
the median; "% peak" is that over the float32 GEMM measured in the same run.
"vs numpy" is NumPy's median over the mode's; "jit speedup" is the eager twin's
median over the compiled mode's ({twins}); a column that no mode of the run
fills is left out of the tables (results.csv keeps it)."""


TRAIN_METHOD = """\
With --train a call is one training step (forward, cross-entropy, backward,
Adam) of triptych train's model at the point's T, C, H and batch (2 layers,
V = max(64, T/2) tokens), on the same batch call after call; the check before
timing compares the first step's loss with NumPy's. Useful FLOPs count three
times the forward's matrix work."""


def _and(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if names[1:] else names)


def method_text(min_sample_ms: float) -> str:
    """METHOD filled in from the registry, wrapped at 80 columns."""
    method = METHOD.format(
        compiled=compiled_modes_text(),
        min_sample_ms=min_sample_ms,
        noisy=NOISY_IQR,
        twins=eager_twins_text(),
    )
    return textwrap.fill(" ".join(method.split()), 80, break_on_hyphens=False)


def compiled_modes_text() -> str:
    """The compiled modes of the registry, e.g. 'torch-compile, jax-jit and ...'."""
    return _and([name for name, mode in MODES.items() if mode.compiled])


def eager_twins_text() -> str:
    """Each eager twin and the compiled modes over it, from the registry, e.g.
    'torch-compile over torch-eager; jax-jit and flax-jit over jax-eager'."""
    over: dict[str, list[str]] = {}
    for name, mode in MODES.items():
        if mode.eager_twin is not None:
            over.setdefault(mode.eager_twin, []).append(name)
    return "; ".join(f"{_and(names)} over {twin}" for twin, names in over.items())


def header_lines(head: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The run's header, one fact per line."""
    threads = head["threads"]
    pools = ", ".join(
        f"{p['library']} {p['num_threads']}"
        + (f" ({p['architecture']})" if p.get("architecture") else "")
        for p in threads.get("threadpools", [])
    )
    v = head["versions"]
    frameworks = ", ".join(
        f"{name} {v.get(name)}"
        for name in ("numpy", "torch", "jax", "jaxlib", "flax")
        if v.get(name)
    )
    lines = [
        f"CPU: {head['cpu']}, {head['logical_cores']} logical cores, "
        f"{head['schedulable_cores']} usable by this process",
        f"threads: {threads['requested']} for every framework: torch "
        f"{threads.get('torch')}; {pools or 'no BLAS/OpenMP pool found'}; "
        f"XLA {threads['xla']}",
        f"dtype {head['dtype']}, device {head['device']} ({head['device_name']})",
        f"sizes: B={config['batch']}, C={config['d_model']}, H={config['n_heads']}, "
        f"D={config['d_head']}, T={','.join(str(t) for t in config['T'])}; "
        f"{config['repeats']} samples after {config['warmup']} warm-up "
        f"call{'s' * (config['warmup'] != 1)}; "
        + (
            "clock: the process's CPU time (--clock cpu)"
            if config.get("clock") == "cpu"
            else "clock: wall"
        ),
        f"versions: python {v['python']}, {frameworks}; {v['platform']}",
    ]
    for name, lib in head.get("gemm_libraries", {}).items():
        lines.append(
            f"{name}'s float32 GEMM: {lib['library']}"
            + (f" {lib['version']}" if lib.get("version") else "")
            + (f"; kernels: {lib['kernels']}" if lib.get("kernels") else "")
            + f"; threads: {lib['threads']}"
            + (f"; {lib['note']}" if lib.get("note") else "")
        )
    if head.get("environment"):
        lines.append(
            "environment: "
            + ", ".join(f"{k}={val}" for k, val in head["environment"].items())
        )
    for when in ("before", "during"):
        if head.get("load", {}).get(when):
            window = head["load"][when]
            busy = ": BUSY, timings will be noisy" if window["busy"] else ""
            lines.append(f"load {when} the sweep: {load.describe(window)}{busy}")
    if config.get("left_out"):
        left_out = ", ".join(config["left_out"])
        lines.append(
            f"--quick left out {left_out}: torch.compile takes 10 to 30 s per T; "
            "add them with --modes"
        )
    return lines


def _ms(seconds) -> str:
    return figure(None if seconds is None else seconds * 1e3)


def results_table(results: list[dict[str, Any]], *, steps: bool = False) -> Table:
    """One row per T and mode; `steps`: with each mode's steps per second
    (1 / median), for the training steps of --train. A figure that rests on
    a noisy row (its own, or the row its speedup divides by) is marked *."""
    columns = ["T", "mode", "kind", "first call ms", "compile ms", "median ms"]
    columns += ["steps/s"] * steps
    columns += ["IQR ms", "GFLOP/s", "% peak", "vs numpy", "jit speedup", "check"]
    found = Table(
        "Each mode at each T",
        columns,
        "rll" + "r" * (len(columns) - 4) + "l",
        caption=(
            f"* noisy: the interquartile range exceeds {NOISY_IQR:.0%} of the "
            "median (or the speedup divides by such a row)"
            if any(r.get("noisy") for r in results)
            else ""
        ),
        keys=2,  # T, mode
    )
    noisy = {(r["mode"], r["T"]) for r in results if r.get("noisy")}

    def mark(text: str, *rows) -> str:
        return text + "*" if text != "-" and any(r in noisy for r in rows) else text

    for row in sorted(results, key=lambda r: r["T"]):
        own = (row["mode"], row["T"])
        if row["status"] == "ok":
            diffs = [row["max_abs_diff_out"], row["max_abs_diff_weights"]]
            worst = max((d for d in diffs if d is not None), default=None)
            check = "ok" + (f" ({worst:.1e})" if worst is not None else "")
        else:
            check = row["status"]
        rate = []
        if steps:
            per_second = None if row["median_s"] is None else 1 / row["median_s"]
            rate = [mark(figure(per_second), own)]
        mode = MODES.get(row["mode"])
        baseline = (mode.baseline, row["T"]) if mode else own
        twin = (row["jit_speedup_over"], row["T"])
        found.rows.append(
            [
                str(row["T"]),
                row["mode"],
                row["kind"],
                _ms(row["first_call_s"]),
                _ms(row["compile_s"]),
                mark(_ms(row["median_s"]), own),
                *rate,
                mark(_ms(row["iqr_s"]), own),
                mark(figure(row["gflops"]), own),
                mark(number(row["pct_of_gemm_peak"], ".1f"), own),
                mark(number(row["speedup_vs_numpy"], ".2f"), own, baseline),
                mark(number(row["jit_speedup"], ".2f"), own, twin),
                check,
            ]
        )
    # results.json and results.csv keep every field
    return without_empty_columns(found, ("compile ms", "vs numpy", "jit speedup"))


def table(results: list[dict[str, Any]], *, steps: bool = False) -> str:
    """`results_table` in Markdown, as bench.md has it."""
    return as_markdown(results_table(results, steps=steps))


def fusion_line(results: list[dict[str, Any]]) -> str | None:
    """What torch.compile did with the hand-written attention, from inductor."""
    rows = [r for r in results if r["mode"] == "torch-compile" and r["status"] == "ok"]
    if not rows:
        return None
    fused = [r["T"] for r in rows if r["fused_attention"]]
    if not fused:
        return (
            "torch.compile kept the hand-written attention: inductor's "
            'counters["inductor"]["fuse_attention"] stayed 0 at every T (no swap '
            "to its fused scaled_dot_product_attention)"
        )
    return (
        "torch.compile replaced the hand-written attention with its fused "
        "scaled_dot_product_attention (inductor's fuse_attention counter) at T = "
        + ", ".join(str(t) for t in fused)
    )


def markdown(report: dict[str, Any], *, full: bool = True) -> str:
    """bench.md: title, command, header, peak, fusion, skipped and wrong modes,
    the table, the method. `full=False`: the part after the header, before the
    method (what the console shows at the end, the header having gone first)."""
    peak = report["gemm_peak"]
    lines = []
    if full:
        lines += [f"## triptych bench, {report['created']}", ""]
        lines += [f"`{report['command']}`", ""]
        lines += [
            f"- {line}" for line in header_lines(report["header"], report["config"])
        ]
    config = report["config"]
    warning = load.warning(
        report["header"].get("load", {}), config.get("threads"), config.get("clock")
    )
    if full and warning:
        lines.append(f"- **warning**: {warning}")
    if peak["gflops"] is not None:
        others = ", ".join(
            f"{name} {figure(v['gflops'])}" for name, v in peak["by_library"].items()
        )
        n = peak["n"]
        lines.append(
            f"- float32 GEMM peak: {figure(peak['gflops'])} GFLOP/s "
            f"({peak['library']}; best of {others}, on {n}x{n} @ {n}x{n})"
        )
    bandwidth = report.get("bandwidth")
    if bandwidth:
        others = ", ".join(
            f"{name} {figure(v['gb_s'])}" for name, v in bandwidth["by_library"].items()
        )
        lines.append(
            f"- memory bandwidth: {figure(bandwidth['gb_s'])} GB/s "
            f"({bandwidth['library']}; best of {others}; a copy of "
            f"{bandwidth['array_mib']} MiB, read + write)"
        )
    fusion = fusion_line(report["results"])
    if fusion:
        lines.append(f"- {fusion}")
    for mode in report["modes"]:
        if not mode["available"]:
            lines.append(f"- skipped {mode['name']}: {mode['reason']}")
    for row in report["results"]:
        if row["status"] in ("wrong", "error"):
            lines.append(
                f"- {row['status']}: {row['mode']} at T={row['T']}: {row['reason']}"
            )
    lines += ["", table(report["results"], steps=bool(report["config"].get("train")))]
    caption = results_table(report["results"]).caption
    if caption:
        lines += ["", caption]
    for found, note in further_tables(report):
        lines += ["", f"### {found.title}", "", as_markdown(found)]
        if note:
            lines += ["", textwrap.fill(note, 80)]
    if full:
        min_sample_ms = report["config"]["min_sample_s"] * 1e3
        lines += ["", method_text(min_sample_ms)]
        if report["config"].get("train"):
            lines += ["", textwrap.fill(" ".join(TRAIN_METHOD.split()), 80)]
    return "\n".join(lines) + "\n"


def further_tables(report: dict[str, Any]) -> list[tuple[Table, str | None]]:
    """The tables after the results, each with the note under it: where the
    time goes (when the breakdown or the roofline ran) and the scaling (with
    --scaling)."""
    found = []
    results = report["results"]
    shares = any(r.get("share_matmul") is not None for r in results)
    roofline = any(r.get("intensity") for r in results)
    if shares or roofline:
        note = (SHARES_NOTE if shares else "") + (ROOFLINE_NOTE if roofline else "")
        found.append((breakdown_table(results), " ".join(note.split())))
    if report.get("scaling"):
        found.append((scaling_table(report["scaling"]), None))
    return found


def summary_lines(report: dict[str, Any]) -> list[str]:
    """What the console shows before the results table: the markdown's bullet
    lines (peak, fusion, skipped, wrong), without the table."""
    text = markdown(report, full=False)
    return [line for line in text.splitlines() if line.startswith("- ")]


def say(text: str, *, stderr: bool = False) -> None:
    """Prose (the header, the files written, a warning): wrapped between words
    on a terminal, each line whole when piped (triptych.common.prose)."""
    from rich.console import Console

    prose.say(Console(stderr=stderr, highlight=False), text)


def print_summary(report: dict[str, Any]) -> None:
    """The end of a run on stdout: piped, the Markdown of bench.md after its
    header; on a terminal, the same lines and tables, each a rich table that
    fits the terminal (triptych.common.tables)."""
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        print(markdown(report, full=False))
        return
    prose.say(console, "\n".join(summary_lines(report)))
    steps = bool(report["config"].get("train"))
    console.print(as_rich(results_table(report["results"], steps=steps)))
    for found, note in further_tables(report):
        console.print()
        console.print(as_rich(found))
        if note:
            prose.say(console, note)


def run_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The run's own columns of results.csv, from results.json's config."""
    return {key: config[key] for key in RUN_FIELDS}


def plot_time_vs_T(report: dict[str, Any], path: Path) -> bool:
    """time_vs_T.png; False (nothing written) when no mode has a timing."""
    rows = [r for r in report["results"] if r["status"] == "ok"]
    if not rows:
        return False
    from matplotlib.figure import Figure

    config = report["config"]
    fig = Figure(figsize=(9, 5))
    ax = fig.subplots()
    for index, mode in enumerate(report["modes"]):
        points = sorted((r for r in rows if r["mode"] == mode["name"]), key=_by_T)
        if not points:
            continue
        T = [r["T"] for r in points]
        median = [r["median_s"] * 1e3 for r in points]
        spread = [
            [(r["median_s"] - r["q25_s"]) * 1e3 for r in points],
            [(r["q75_s"] - r["median_s"]) * 1e3 for r in points],
        ]
        ax.errorbar(
            T,
            median,
            yerr=spread,
            label=mode["name"]
            + (" (reference)" if mode["kind"] == "reference" else ""),
            linestyle="--" if mode["kind"] == "reference" else "-",
            color=mode_color(index),
            marker="o",
            markersize=3,
            capsize=2,
        )
    _T_axis(ax, config["T"])
    ax.set_yscale("log")
    ax.set_ylabel("steady-state time per call, ms (median, IQR bars)")
    ax.set_title(
        f"{'one training step' if config.get('train') else 'causal self-attention'}"
        f", {config['dtype']} on {config['device']}: "
        f"B={config['batch']}, C={config['d_model']}, H={config['n_heads']}, "
        f"threads={config['threads']}",
        fontsize=9,
    )
    finish_line_plot(fig, ax, path)
    return True


def plot_speedup(report: dict[str, Any], path: Path) -> bool:
    """speedup.png; False (nothing written) when no jit/eager pair ran."""
    rows = [r for r in report["results"] if r["jit_speedup"] is not None]
    if not rows:
        return False
    from matplotlib.figure import Figure

    config = report["config"]
    noisy = {(r["mode"], r["T"]) for r in report["results"] if r.get("noisy")}
    fig = Figure(figsize=(9.5, 4.5))
    ax = fig.subplots()
    for index, mode in enumerate(report["modes"]):
        points = sorted((r for r in rows if r["mode"] == mode["name"]), key=_by_T)
        if not points:
            continue
        color = mode_color(index)
        ax.plot(
            [r["T"] for r in points],
            [r["jit_speedup"] for r in points],
            color=color,
            marker="o",
            label=f"{mode['name']} over {points[0]['jit_speedup_over']}",
        )
        shaky = [
            r
            for r in points
            if {(r["mode"], r["T"]), (r["jit_speedup_over"], r["T"])} & noisy
        ]
        ax.plot(  # hollow: this speedup rests on a noisy row
            [r["T"] for r in shaky],
            [r["jit_speedup"] for r in shaky],
            linestyle="none",
            marker="o",
            markersize=9,
            markerfacecolor="white",
            color=color,
        )
    if noisy:
        ax.plot(
            [], [], "o", color="gray", markerfacecolor="white",
            label=f"hollow: noisy (IQR > {NOISY_IQR:.0%} of the median)",
        )  # fmt: skip
    ax.axhline(1.0, color="gray", linewidth=1, linestyle=":")
    _T_axis(ax, config["T"])
    _ratio_axis(ax, [r["jit_speedup"] for r in rows])
    ax.set_ylabel("speedup of jit over eager (eager median / jit median), log")
    ax.set_title(
        f"jit over eager, {config['dtype']} on {config['device']}, "
        f"C={config['d_model']}, H={config['n_heads']}",
        fontsize=9,
    )
    finish_line_plot(fig, ax, path)
    return True


def _T_axis(ax, lengths) -> None:
    """A log2 T axis with a labelled tick at each T of the sweep."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, labels=[str(T) for T in lengths])
    from matplotlib.ticker import NullLocator

    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("T (sequence length)")


def _ratio_axis(ax, ratios) -> None:
    """A log axis for ratios, 1 in the middle of the ticks' range: 0.5x and
    2x stand equally far from 1, and a speedup of 1,000 does not flatten the
    others. Ticks read as plain numbers (0.5, 1, 2, 10), not powers of 10."""
    ax.set_yscale("log")
    finite = [r for r in ratios if r and r > 0]
    low, high = min([*finite, 1.0]), max([*finite, 1.0])
    ax.set_ylim(low / 1.5, high * 1.5)
    plain_log_ticks(ax.yaxis)


def _by_T(row: dict[str, Any]) -> int:
    return row["T"]


def write_outputs(report: dict[str, Any], directory: Path) -> list[str]:
    """Write every file of the run into `directory` (the staging folder).

    Returns:
        The names written, in the order of FILES (a plot with nothing to
        draw is not written).
    """
    (directory / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    write_csv(
        directory / "results.csv",
        CSV_FIELDS,
        report["results"],
        run_settings(report["config"]),
    )
    (directory / "bench.md").write_text(markdown(report))
    plot_time_vs_T(report, directory / "time_vs_T.png")
    plot_speedup(report, directory / "speedup.png")
    plot_roofline(report, directory / "roofline.png")
    plot_scaling(report, directory / "scaling.png")
    return [name for name in FILES if (directory / name).exists()]
