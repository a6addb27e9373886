"""The figures of `triptych bench`: time_vs_T.png (steady-state time against
T, one line per mode) and speedup.png (jit over eager per framework)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from triptych.bench.timing import NOISY_IQR
from triptych.common.plots import finish_line_plot, mode_color, plain_log_ticks


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
