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

from triptych.common import prose
from triptych.common.files import write_csv
from triptych.common.plots import finish_line_plot, mode_color
from triptych.common.tables import Table, as_markdown, as_rich

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


def extra_table(report: dict[str, Any]) -> Table:
    """The extra MiB of each mode (a column) at each T (a row)."""
    config = report["config"]
    modes = config["modes"]
    table = Table(
        "Peak extra memory of one call, MiB (resident set above the baseline "
        "just before the call; each point in a fresh process)",
        ["T", *modes],
        "r" * (len(modes) + 1),
    )
    cells = {(r["mode"], r["T"]): r for r in report["results"]}
    for T in config["T"]:
        row = [str(T)]
        for mode in modes:
            r = cells[(mode, T)]
            row.append(
                f"{r['extra_mib']:.1f}"
                if r["status"] == "ok"
                else ("-" if r["status"] == "skipped" else r["status"])
            )
        table.rows.append(row)
    return table


def ratios_table(report: dict[str, Any]) -> Table | None:
    """Blockwise over naive extra memory, each pair at each T; None if none."""
    if not report["ratios"]:
        return None
    table = Table("Blockwise over naive, extra memory", ["T", "pair", "ratio"], "rlr")
    table.rows += [
        [str(r["T"]), f"{r['blockwise']} / {r['naive']}", f"{r['ratio']:.4f}"]
        for r in report["ratios"]
    ]
    return table


def head_lines(report: dict[str, Any]) -> list[str]:
    """The run: its command, when and where, and the skip rule's limit."""
    config = report["config"]
    return [
        report["command"],
        f"{report['created']}, {report['header']['cpu']}, "
        f"{report['header']['threads']} threads, d_model {config['d_model']}, "
        f"{config['n_heads']} heads, batch {config['batch']}, {config['dtype']}",
        f"A T^2 mode is skipped where one (B, H, T, T) array would take more than "
        f"a quarter of {config['memory_limit_gib']:.3g} GiB (--memory-limit-gib; "
        "by default the physical memory of the machine that ran it).",
    ]


def tail_blocks(report: dict[str, Any]) -> list[list[str]]:
    """After the tables: the slopes, the largest T, the points skipped; each a
    title line and its items ("- ...")."""
    results = report["results"]
    blocks = []
    if report["slopes"]:
        n = min(3, len(report["config"]["T"]))
        blocks.append(
            [f"Log-log slope of extra memory against T (its largest {n} T):"]
            + [f"- {m}: {s:.2f}" for m, s in report["slopes"].items()]
        )
    biggest = [r for r in results if r["status"] == "ok"]
    if biggest:
        T_max = max(r["T"] for r in biggest)
        blocks.append(
            [f"At T = {T_max}:"]
            + [
                f"- {r['mode']}: peak resident set {r['peak_rss_gib']:.2f} GiB, "
                f"one call {r['call_s']:.1f} s"
                for r in biggest
                if r["T"] == T_max
            ]
        )
    skipped = [r for r in results if r["status"] == "skipped"]
    if skipped:
        blocks.append(
            ["Skipped (T^2 modes):"]
            + [f"- {r['mode']} at T={r['T']}: {r['reason']}" for r in skipped]
        )
    return blocks


def markdown(report: dict[str, Any]) -> str:
    """memory.md: the extra memory table, the ratios and the slopes."""
    command, *rest = head_lines(report)
    lines = ["# triptych bench --memory", "", f"`{command}`  ", rest[0], "", rest[1]]
    for table in (extra_table(report), ratios_table(report)):
        if table is not None:
            lines += ["", table.title + ":", "", as_markdown(table)]
    for title, *items in tail_blocks(report):
        lines += ["", title, "", *items]
    return "\n".join(lines) + "\n"


def print_report(report: dict[str, Any]) -> None:
    """The report on stdout: piped, memory.md; on a terminal, its prose wrapped
    and its tables fitted to the terminal's width (triptych.common.tables)."""
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        print(markdown(report), end="")
        return
    prose.say(console, "\n".join(head_lines(report)))
    for table in (extra_table(report), ratios_table(report)):
        if table is not None:
            console.print()
            console.print(as_rich(table))
    for block in tail_blocks(report):
        console.print()
        prose.say(console, "\n".join(block))


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
