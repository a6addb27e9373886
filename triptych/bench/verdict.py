"""The line that ends `triptych bench` on the screen, after the tables, the
files and any warning: what the sweep found at its largest T, in words. The
tables hold every figure; this line says which mode was fastest, by how much
against NumPy, what jit gained over eager, and whether every mode agreed."""

from __future__ import annotations

from typing import Any

from triptych.bench.modes import MODES
from triptych.common.tables import figure, number


def verdict_line(results: list[dict[str, Any]]) -> str:
    """'verdict at T=16: jax-jit is the fastest, 0.0409 ms (5.52x as fast as
    numpy); jit over eager: jax-jit 33.8x as fast as jax-eager, ...; every
    mode that ran agreed with NumPy'. A figure from a noisy row is marked *
    (as in the tables)."""
    bad = [r for r in results if r["status"] in ("wrong", "error")]
    agreed = (
        "every mode that ran agreed with NumPy"
        if not bad
        else f"{len(bad)} of {sum(r['status'] != 'skipped' for r in results)} "
        "runs were wrong or failed (named above)"
    )
    timed = [r for r in results if r["status"] == "ok" and r["median_s"]]
    if not timed:
        return f"verdict: no mode was timed; {agreed}"
    T = max(r["T"] for r in timed)
    rows = [r for r in timed if r["T"] == T]

    def noisy(row) -> str:
        return "*" if row.get("noisy") else ""

    fastest = min(rows, key=lambda r: r["median_s"])
    ratio = fastest["speedup_vs_numpy"]
    against = (
        ""
        if ratio is None or MODES[fastest["mode"]].baseline == fastest["mode"]
        else f" ({number(ratio, '.3g')}x as fast as numpy)"
    )
    median = f"{figure(fastest['median_s'] * 1e3)} ms{noisy(fastest)}"
    parts = [
        f"verdict at T={T}: {fastest['mode']} is the fastest, {median}{against}"
        if rows[1:]
        else f"verdict at T={T}: {fastest['mode']} (the one mode timed) took {median}"
    ]
    jits = [r for r in rows if r["jit_speedup"] is not None]
    if jits:
        parts.append(
            "jit over eager: "
            + ", ".join(
                f"{r['mode']} {number(r['jit_speedup'], '.3g')}x{noisy(r)} as fast "
                f"as {r['jit_speedup_over']}"
                for r in sorted(jits, key=lambda r: -r["jit_speedup"])
            )
        )
    parts.append(agreed)
    return "; ".join(parts)
