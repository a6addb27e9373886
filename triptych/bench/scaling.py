"""`triptych bench --scaling`: the exponent p of time ~ T^p, fitted per mode
over its FIT_POINTS largest T, memory's beside it where a `--memory` run of
the same folder has the mode; the table of bench.md and scaling.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from triptych.common.plots import finish_line_plot, mode_color
from triptych.common.tables import Table, number


def fit_exponent(T: list[int], values: list[float]) -> float | None:
    """The slope of log(value) against log(T) by least squares: the p of
    value ~ T^p; None with fewer than two points."""
    if len(T) < 2:
        return None
    slope, _ = np.polyfit(np.log(T), np.log(values), 1)
    return float(slope)


FIT_POINTS = 3
"""The exponent is fitted over each mode's FIT_POINTS largest T, where the
quadratic term rules (at small T the projections, linear in T, weigh)."""


def scaling_fits(
    results: list[dict[str, Any]], memory: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """Per mode: the time exponent over its FIT_POINTS largest T, and the
    memory exponent where a `triptych bench --memory` run of the same folder
    has that mode (memory.json's slopes)."""
    fits: dict[str, dict[str, Any]] = {}
    slopes = (memory or {}).get("slopes") or {}
    for name in dict.fromkeys(r["mode"] for r in results):
        points = sorted(
            (r["T"], r["median_s"])
            for r in results
            if r["mode"] == name and r["status"] == "ok"
        )[-FIT_POINTS:]
        if len(points) < 2:
            continue
        T, seconds = zip(*points, strict=True)
        fits[name] = {
            "time_exponent": fit_exponent(list(T), list(seconds)),
            "fit_T": list(T),
            "memory_exponent": slopes.get(name),
        }
    return fits


def scaling_table(fits: dict[str, dict[str, Any]]) -> Table:
    found = Table(
        "Scaling with T",
        ["mode", "time ~ T^p, p", "fitted over T", "memory ~ T^p, p"],
        "lrrr",
    )
    for name, fit in fits.items():
        found.rows.append(
            [
                name,
                number(fit["time_exponent"], ".2f"),
                ",".join(str(t) for t in fit["fit_T"]),
                number(fit["memory_exponent"], ".2f"),
            ]
        )
    return found


def plot_scaling(report: dict[str, Any], path: Path) -> bool:
    """scaling.png: median time against T, log-log, each mode with its fitted
    exponent in the legend and the fitted line dashed over the points it was
    fitted on; False (nothing written) when the run was not --scaling."""
    fits = report.get("scaling")
    if not fits:
        return False
    from matplotlib.figure import Figure

    config = report["config"]
    fig = Figure(figsize=(9, 5))
    ax = fig.subplots()
    for index, mode in enumerate(report["modes"]):
        fit = fits.get(mode["name"])
        points = sorted(
            (r for r in report["results"] if r["mode"] == mode["name"]
             and r["status"] == "ok"), key=lambda r: r["T"],
        )  # fmt: skip
        if fit is None or not points:
            continue
        color = mode_color(index)
        label = f"{mode['name']}: time ~ T^{fit['time_exponent']:.2f}"
        if fit.get("memory_exponent") is not None:
            label += f", memory ~ T^{fit['memory_exponent']:.2f}"
        T = np.array([r["T"] for r in points])
        ax.plot(T, [r["median_s"] for r in points], marker="o", color=color,
                label=label)  # fmt: skip
        fitted = np.array(fit["fit_T"])
        anchor = next(r["median_s"] for r in points if r["T"] == fitted[-1])
        line = anchor * (fitted / fitted[-1]) ** fit["time_exponent"]
        ax.plot(fitted, line, linestyle=":", color=color, linewidth=2.5, alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xticks(config["T"], labels=[str(T) for T in config["T"]])
    ax.minorticks_off()
    ax.set_xlabel("T (sequence length)")
    ax.set_yscale("log")
    ax.set_ylabel("steady-state time per call, s (median)")
    ax.set_title(
        f"time against T, {config['dtype']}, B={config['batch']}, "
        f"C={config['d_model']}, H={config['n_heads']}, threads={config['threads']}\n"
        f"exponent fitted over each mode's {FIT_POINTS} largest T (dotted)",
        fontsize=9,
    )
    finish_line_plot(fig, ax, path)
    return True
