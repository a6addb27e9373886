"""The files of `triptych bench --memory`, written from its report (a JSON-ready
dict) into the staging folder (`triptych.common.files`):

    memory.json      everything (schema "triptych-memory/1")
    memory.csv       one row per point, the keys of ROW_FIELDS
    memory.md        the extra memory table, the ratios and the slopes
    memory_vs_T.png  log-log: the naive modes rise as T^2, the blockwise as T
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from triptych.common.files import write_csv
from triptych.common.plots import finish_line_plot, mode_color

SCHEMA = "triptych-memory/1"
FILES = ("memory.json", "memory.csv", "memory.md", "memory_vs_T.png")
ROW_FIELDS = (
    "mode",
    "framework",
    "kind",
    "linear_memory",
    "T",
    "status",
    "reason",
    "weights_gib",
    "baseline_mib",
    "extra_mib",
    "first_call_extra_mib",
    "peak_rss_gib",
    "call_s",
)
"""The keys of a row of results (one point: a mode at one T), in order."""
PARTIAL_FILE = "memory.partial.csv"
"""Where an interrupted sweep keeps its rows done so far: ROW_FIELDS, in the
output directory; a complete run removes it."""


def markdown(report: dict[str, Any]) -> str:
    """memory.md: the extra memory table, the ratios and the slopes."""
    config, results = report["config"], report["results"]
    modes = config["modes"]
    lines = [
        "# triptych bench --memory",
        "",
        f"`{report['command']}`  ",
        f"{report['created']}, {report['header']['cpu']}, "
        f"{report['header']['threads']} threads, d_model {config['d_model']}, "
        f"{config['n_heads']} heads, batch {config['batch']}, {config['dtype']}",
        "",
        f"A T^2 mode is skipped where one (B, H, T, T) array would take more than "
        f"a quarter of {config['memory_limit_gib']:.3g} GiB (--memory-limit-gib; "
        "by default the physical memory of the machine that ran it).",
        "",
        "Peak extra memory of one call, MiB (resident set above the baseline "
        "just before the call; each point in a fresh process):",
        "",
        "| T | " + " | ".join(modes) + " |",
        "|---:|" + "---:|" * len(modes),
    ]
    cells = {(r["mode"], r["T"]): r for r in results}
    for T in config["T"]:
        row = []
        for mode in modes:
            r = cells[(mode, T)]
            row.append(
                f"{r['extra_mib']:.1f}"
                if r["status"] == "ok"
                else ("-" if r["status"] == "skipped" else r["status"])
            )
        lines.append(f"| {T} | " + " | ".join(row) + " |")
    if report["ratios"]:
        lines += ["", "Blockwise over naive, extra memory:", ""]
        lines += ["| T | pair | ratio |", "|---:|---|---:|"]
        lines += [
            f"| {r['T']} | {r['blockwise']} / {r['naive']} | {r['ratio']:.4f} |"
            for r in report["ratios"]
        ]
    if report["slopes"]:
        lines += ["", "Log-log slope of extra memory against T (largest 3 T):", ""]
        lines += [f"- {m}: {s:.2f}" for m, s in report["slopes"].items()]
    biggest = [r for r in results if r["status"] == "ok"]
    if biggest:
        T_max = max(r["T"] for r in biggest)
        lines += ["", f"At T = {T_max}:", ""]
        lines += [
            f"- {r['mode']}: peak resident set {r['peak_rss_gib']:.2f} GiB, "
            f"one call {r['call_s']:.1f} s"
            for r in biggest
            if r["T"] == T_max
        ]
    skipped = [r for r in results if r["status"] == "skipped"]
    if skipped:
        lines += ["", "Skipped (T^2 modes):", ""]
        lines += [f"- {r['mode']} at T={r['T']}: {r['reason']}" for r in skipped]
    return "\n".join(lines) + "\n"


def write_outputs(report: dict[str, Any], directory: Path) -> list[str]:
    """Write the four files into `directory` (the staging folder); their names."""
    (directory / FILES[0]).write_text(json.dumps(report, indent=2) + "\n")
    write_csv(directory / FILES[1], ROW_FIELDS, report["results"])
    (directory / FILES[2]).write_text(markdown(report))
    plot(report, directory / FILES[3])
    return list(FILES)


def plot(report: dict[str, Any], path: Path) -> None:
    """memory_vs_T.png: extra MiB against T, log-log, with T and T^2 guides."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5))
    ax = fig.subplots()
    results = report["results"]
    for index, mode in enumerate(report["config"]["modes"]):
        points = sorted(
            (r["T"], r["extra_mib"])
            for r in results
            if r["mode"] == mode and r["status"] == "ok" and r["extra_mib"] > 0
        )
        if not points:
            continue
        kind = next(r["kind"] for r in results if r["mode"] == mode)
        ax.plot(
            [t for t, _ in points],
            [m for _, m in points],
            marker="o",
            linestyle="--" if kind == "reference" else "-",
            color=mode_color(index),
            label=mode + (" (reference)" if kind == "reference" else ""),
        )
    ok = [r for r in results if r["status"] == "ok" and r["extra_mib"] > 0]
    T_lo = min((r["T"] for r in ok), default=None)
    for power, linear, style, label in (
        (2, False, "-.", "∝ T²"),
        (1, True, ":", "∝ T"),
    ):
        # a guide through the group's point at its largest T, back to the first T
        group = [r for r in ok if r["linear_memory"] == linear]
        if not group:
            continue
        anchor = max(group, key=lambda r: (r["T"], r["extra_mib"]))
        ts = [T_lo, anchor["T"]]
        ax.plot(
            ts,
            [anchor["extra_mib"] * (t / anchor["T"]) ** power for t in ts],
            color="grey",
            linewidth=0.8,
            linestyle=style,
            label=label,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("T (sequence length)")
    ax.set_ylabel("peak extra memory of one call (MiB)")
    config = report["config"]
    ax.set_title(
        f"naive vs blockwise attention: d_model {config['d_model']}, "
        f"{config['n_heads']} heads, batch {config['batch']}, {config['dtype']}",
        fontsize=10,
    )
    finish_line_plot(fig, ax, path)
