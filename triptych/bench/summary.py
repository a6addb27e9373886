"""The words of `triptych bench`'s bench.md and of its end on the terminal:
the method, the run's header, the table of each mode at each T, what
torch.compile fused, the tables after it (where the time goes, the scaling)."""

from __future__ import annotations

import textwrap
from typing import Any

from shared import registry
from triptych.bench import load
from triptych.bench.modes import MODES
from triptych.bench.roofline import BEYOND_LLC
from triptych.bench.scaling import scaling_table
from triptych.bench.shares import ROOFLINE_NOTE, SHARES_NOTE, breakdown_table
from triptych.bench.timing import NOISY_FASTEST, NOISY_IQR
from triptych.common.tables import (
    Table,
    as_markdown,
    figure,
    number,
    without_empty_columns,
)

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
of its median, or whose fastest sample is under {fastest:.0%} of it, is marked
noisy (*), and so is a speedup made from it. The load
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
        fastest=NOISY_FASTEST,
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
    packages = (p for f in registry.frameworks() for p in f.install.versions)
    frameworks = ", ".join(
        f"{name} {v.get(name)}" for name in dict.fromkeys(packages) if v.get(name)
    )
    own = "".join(
        f"{f.name} {threads.get(f.name)}; "
        for f in registry.frameworks()
        if f.own_threads
    )
    lines = [
        f"CPU: {head['cpu']}, {head['logical_cores']} logical cores, "
        f"{head['schedulable_cores']} usable by this process",
        f"threads: {threads['requested']} for every framework: {own}"
        f"{pools or 'no BLAS/OpenMP pool found'}; XLA {threads['xla']}",
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
        slow = dict.fromkeys(
            registry.get(MODES[name].framework).compiler.name
            for name in config["left_out"]
        )
        lines.append(
            f"--quick left out {left_out}: {' and '.join(slow)} takes 10 to 30 s "
            "per T; add them with --modes"
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
            f"median, or the fastest sample is under {NOISY_FASTEST:.0%} of it (or "
            "the speedup divides by such a row)"
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
        spread = bandwidth.get("spread")
        noisy = (
            " (noisy: the roofline's bound is too)" if bandwidth.get("noisy") else ""
        )
        lines.append(
            f"- memory bandwidth: {figure(bandwidth['gb_s'])} GB/s "
            f"({bandwidth['library']}; best of {others}; a copy of "
            f"{bandwidth['array_mib']} MiB, read + write"
            + (
                f", {BEYOND_LLC} x or more the {bandwidth['llc_mib']:g} MiB "
                "last-level cache"
                if "llc_mib" in bandwidth
                else ""
            )
            + ")"
            + (f"; spread (IQR) {spread:.0%} of the median{noisy}" if spread else "")
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
