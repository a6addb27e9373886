"""The table "Where the time goes" of bench.md: each mode's shares of its
time (triptych.bench.breakdown) beside its place under the roofline
(triptych.bench.roofline), and the notes under it."""

from __future__ import annotations

from typing import Any

from triptych.bench.breakdown import CATEGORIES
from triptych.common.tables import Table, figure, number, without_empty_columns

SHARES_NOTE = """\
Shares of one warm call's wall time (triptych.bench.breakdown): matmul (GEMMs),
softmax (exp, max, sum, the mask and the other elementwise work), memory
(copies, transposes, concatenation, allocation), fused (a fused attention
kernel that does both: torch's SDPA), other (Python, dispatch, waiting: what
the instrument does not attribute). torch by torch.profiler, JAX by
jax.profiler's trace of XLA's operations, NumPy by sampling its Python lines.
"""

ROOFLINE_NOTE = """\
Intensity: useful FLOPs per byte of compulsory traffic (triptych.bench.roofline);
bound: min(GEMM peak, intensity x bandwidth); "% bound": the mode's useful
GFLOP/s over that bound. results.json adds, for a jax.jit mode, the FLOPs and
bytes that XLA's cost analysis counts for the compiled program (xla_flops,
xla_bytes)."""
"""Under the table: SHARES_NOTE where the breakdown ran, ROOFLINE_NOTE where
the roofline did (report.further_tables)."""


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.0f}"


def breakdown_table(results: list[dict[str, Any]]) -> Table:
    """One row per T and mode: the shares of its time, its arithmetic
    intensity and where it stands under the roofline; without the columns of
    the one that did not run (`--no-breakdown`, or no roofline)."""
    shares = [f"{c} %" for c in CATEGORIES]
    roofline = ["FLOP/byte", "bound", "% bound"]
    columns = ["T", "mode", "median ms", *shares, "FLOP/byte", "GFLOP/s"]
    columns += ["bound", "% bound"]
    found = Table("Where the time goes", columns, "rl" + "r" * 10, keys=2)
    for row in sorted(results, key=lambda r: r["T"]):
        if row["status"] != "ok":
            continue
        found.rows.append(
            [
                str(row["T"]),
                row["mode"],
                figure(row["median_s"] and row["median_s"] * 1e3),
                *(_pct(row.get(f"share_{c}")) for c in CATEGORIES),
                figure(row.get("intensity")),
                figure(row["gflops"]),
                figure(row.get("roofline_gflops")),
                number(row.get("pct_of_roofline"), ".0f"),
            ]
        )
    return without_empty_columns(found, (*shares, *roofline))
