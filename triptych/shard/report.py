"""What `triptych shard` prints and writes: a row per (backend, N), how the
bytes per device scale with N, the table, results.json and the plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from shared import registry
from shared.registry import ONE_CHILD, ONE_PROCESS, PROCESS_GROUP
from shared.tolerances import is_close, max_abs_diff
from triptych.common.plots import finish_line_plot, mode_color, plain_log_ticks
from triptych.common.tables import Table
from triptych.shard.problem import Run, plural

JSON_FILE = "results.json"
PLOT_FILE = "memory_vs_devices.png"
FILES = (JSON_FILE, PLOT_FILE)
PARTIAL_FILE = "shard.partial.csv"
CSV_FIELDS = (
    "backend", "strategy", "devices", "status", "reason", "max_abs_diff",
    "rows_per_device", "out_shard_shape", "peak_bytes_per_device", "peak_bytes",
    "peak_method", "largest_array_shape", "largest_array_bytes",
)  # fmt: skip
"""Every field of a row, in order: the columns of shard.partial.csv."""
PEAK_METHODS = {
    ONE_PROCESS: None,  # one process plays every device: no per-device figure
    PROCESS_GROUP: "resident set of the rank's process (VmHWM) above its level "
    "before the call",
    ONE_CHILD: "XLA's memory analysis of the compiled per-device program "
    "(arguments + outputs + temporaries)",
}
"""How a device's peak is measured, by the engine that runs it (shared.registry)."""


def row(
    backend: str,
    run: Run,
    result: dict[str, Any] | None,
    expected: np.ndarray,
    dtype: str,
    error: str | None = None,
) -> dict[str, Any]:
    """One (backend, N) row: agreement with the oracle and what a device held."""
    fields: dict[str, Any] = dict(
        backend=backend,
        strategy=run.strategy,
        devices=run.devices,
        status="error",
        reason=error,
        max_abs_diff=None,
        rows_per_device=None,
        out_shard_shape=None,
        peak_bytes_per_device=None,
        peak_bytes=None,
        peak_method=PEAK_METHODS[registry.get(backend).shard_engine],
        largest_array_shape=None,
        largest_array_bytes=None,
    )
    if result is None:
        return fields
    out = result["out"]
    agrees = bool(is_close(out, expected, dtype))
    peaks = result["peak_bytes"]
    fields.update(
        status="ok" if agrees else "wrong",
        reason=None if agrees else "does not agree with the float64 oracle",
        max_abs_diff=float(max_abs_diff(out, expected)),
        rows_per_device=result["out_shard_shape"][-2],
        out_shard_shape=list(result["out_shard_shape"]),
        peak_bytes_per_device=peaks,
        peak_bytes=None if peaks is None else max(peaks),
        largest_array_shape=list(result["largest_array_shape"]),
        largest_array_bytes=result["largest_array_bytes"],
    )
    return fields


def slope(points: list[tuple[int, float]]) -> float | None:
    """The least-squares slope of log(value) against log(N): -1 is 1/N."""
    points = [(n, v) for n, v in points if v and v > 0]
    if len({n for n, _ in points}) < 2:
        return None
    xs = np.log([n for n, _ in points])
    ys = np.log([v for _, v in points])
    return float(np.polyfit(xs, ys, 1)[0])


def scaling(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per backend: how the peak bytes and the largest array per device scale
    with N (the log-log slope) and their ratio from the fewest devices to the most."""
    found = {}
    for backend in dict.fromkeys(r["backend"] for r in rows):
        ok = sorted(
            (r for r in rows if r["backend"] == backend and r["status"] != "error"),
            key=lambda r: r["devices"],
        )
        entry = {}
        for field in ("peak_bytes", "largest_array_bytes"):
            points = [(r["devices"], r[field]) for r in ok if r[field]]
            entry[f"{field}_slope"] = slope(points)
            entry[f"{field}_ratio"] = (
                points[0][1] / points[-1][1] if len(points) > 1 else None
            )
        found[backend] = entry
    return found


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def table(document: dict[str, Any]) -> Table:
    """The agreement and the bytes per device, a row per (backend, N)."""
    config = document["config"]
    problem = config["problem"]
    found = Table(
        title=(
            f"triptych shard: {config['strategy']} strategy, T={problem['T']} "
            f"C={problem['C']} H={problem['H']} batch {batch_size(problem)} "
            f"{problem['dtype']}{', key padding' if problem['padded'] else ''}"
        ),
        columns=[
            "backend",
            "N",
            "rows/device",
            "max |diff|",
            "agrees",
            "peak/device",
            "largest array",
        ],
        align="lrrrlrr",
        keys=2,  # backend, N
        caption=(
            f"max |diff| against the float64 oracle, tolerance "
            f"{document['tolerance']['atol']:g}; peak/device as each engine measures "
            "it (torch: how much the rank's resident set grew during the call, "
            "above its level before it; JAX: XLA's memory analysis; "
            "NumPy: none, one process plays every device); largest array: the "
            "largest any device made"
        ),
    )
    for r in document["results"]:
        diff = "-" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.2e}"
        found.rows.append(
            [
                r["backend"],
                str(r["devices"]),
                str(r["rows_per_device"] or "-"),
                diff,
                {"ok": "YES", "wrong": "NO", "error": "ERROR"}[r["status"]],
                _bytes(r["peak_bytes"]),
                _bytes(r["largest_array_bytes"]),
            ]
        )
    return found


def batch_size(problem: dict[str, Any]) -> int:
    """The batch as --batch gives it: 1 where x has no batch axis."""
    return int(np.prod(problem["batch"], dtype=int))


def verdict_line(document: dict[str, Any]) -> str:
    """PASS when every run agrees with the oracle, else FAIL and what did not."""
    rows = document["results"]
    bad = [r for r in rows if r["status"] != "ok"]
    runs = f"{len(rows)} run{'s' * (len(rows) != 1)}"
    if not bad:
        return f"PASS: all {runs} agree with the float64 oracle within the tolerance"
    what = "; ".join(
        f"{r['backend']} on {plural(r['devices'], 'device', 'devices')} "
        + ("failed" if r["status"] == "error" else "disagrees")
        for r in bad
    )
    return f"FAIL: {len(bad)} of {runs} did not agree: {what}"


def scaling_lines(document: dict[str, Any]) -> list[str]:
    """How the bytes per device scale with N, a line per backend and measure
    (each fits 80 columns, piped too)."""
    lines = ["bytes per device against N (log-log slope; -1 is 1/N, -2 is 1/N^2):"]
    for backend, entry in document["scaling"].items():
        parts = []
        for field, name in (("peak_bytes", "peak"), ("largest_array_bytes", "largest")):
            if entry[f"{field}_slope"] is not None:
                parts.append(
                    f"  {backend} {name}: N^{entry[f'{field}_slope']:.2f}, "
                    f"{entry[f'{field}_ratio']:.3g}x less on the most devices"
                )
        lines += parts or [f"  {backend}: -"]
    return lines


def write_outputs(document: dict[str, Any], folder: Path) -> list[str]:
    """results.json and the plot, into `folder`; the names written."""
    (folder / JSON_FILE).write_text(json.dumps(document, indent=2) + "\n")
    plot(document, folder / PLOT_FILE)
    return list(FILES)


MIB = 2**20


def plot(document: dict[str, Any], path: Path) -> None:
    """MiB per device against N, log-log: the measured peak (solid) and the
    largest array (dashed) of each backend, and 1/N from the first point; a
    tick at each N of the run."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    rows = [r for r in document["results"] if r["status"] != "error"]
    largest: dict[tuple, list[str]] = {}  # one dashed line per distinct series
    for index, backend in enumerate(dict.fromkeys(r["backend"] for r in rows)):
        mine = sorted(
            (r for r in rows if r["backend"] == backend), key=lambda r: r["devices"]
        )
        peaks = [(r["devices"], r["peak_bytes"]) for r in mine if r["peak_bytes"]]
        if peaks:
            xs, ys = zip(*peaks, strict=True)
            ys = [y / MIB for y in ys]
            ax.plot(xs, ys, "-o", color=mode_color(index), label=f"{backend} peak")
        series = tuple((r["devices"], r["largest_array_bytes"]) for r in mine)
        largest.setdefault(series, []).append(backend)
    names = list(dict.fromkeys(r["backend"] for r in rows))
    for series, backends in largest.items():
        xs, ys = zip(*series, strict=True)
        ys = [y / MIB for y in ys]
        shared = len(backends) > 1  # black: the same for several backends
        color = "black" if shared else mode_color(names.index(backends[0]))
        label = f"largest array ({', '.join(backends)})"
        ax.plot(xs, ys, "--s", color=color, label=label)
    firsts = [r for r in rows if r["peak_bytes"]]
    if firsts:
        first = min(firsts, key=lambda r: r["devices"])
        counts = sorted({r["devices"] for r in rows})
        ax.plot(
            counts,
            [first["peak_bytes"] * first["devices"] / n / MIB for n in counts],
            ":",
            color="gray",
            label="1/N",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    counts = sorted({r["devices"] for r in document["results"]})
    ax.set_xticks(counts, labels=[str(n) for n in counts])
    ax.xaxis.set_minor_locator(NullLocator())
    plain_log_ticks(ax.yaxis)
    ax.set_xlabel("devices N")
    ax.set_ylabel("MiB per device")
    config = document["config"]
    ax.set_title(
        f"{config['strategy']} strategy, T={config['problem']['T']}, "
        f"{config['problem']['dtype']}"
    )
    finish_line_plot(fig, ax, path)
