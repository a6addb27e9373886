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
        median_s, q25_s, q75_s, iqr_s, noisy (IQR above timing.NOISY_IQR of the
        median), min_s, samples, calls_per_sample,
        useful_gflop, gflops, pct_of_gemm_peak, speedup_vs_numpy,
        jit_speedup_over (the eager twin's name), jit_speedup,
        max_abs_diff_out, max_abs_diff_weights (vs NumPy), fused_attention
        (torch-compile: whether inductor swapped in its fused attention)
    Timings are null unless status is "ok".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from triptych.bench.plots import plot_speedup, plot_time_vs_T
from triptych.bench.roofline import plot_roofline
from triptych.bench.scaling import plot_scaling
from triptych.bench.summary import (
    further_tables,
    markdown,
    results_table,
    summary_lines,
)
from triptych.common import prose
from triptych.common.files import write_csv
from triptych.common.tables import as_rich

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
CSV_FIELDS = RUN_FIELDS + ROW_FIELDS
"""The columns of results.csv, and of results.partial.csv."""
PARTIAL_FILE = "results.partial.csv"
"""Where an interrupted sweep keeps its rows done so far: CSV_FIELDS, in the
output directory; a complete run removes it."""


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
