"""Printing what `triptych run` found: its tables (`triptych.common.tables`,
as plain text or rich tables), the one-line verdict, and the results.json
document."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from triptych.common.backends import not_installed_line, version_line
from triptych.common.prose import say
from triptych.common.tables import Bar, Table, as_rich, as_text
from triptych.run.results import (
    ORACLE,
    QUANTITIES,
    EntropySummary,
    Outcome,
    RunResults,
)

FORMAT = "triptych-run/1"
"""The `format` field of results.json; docs/results.schema.json describes it."""


# --- the tables of `triptych run` -------------------------------------------------


def header_lines(results: RunResults) -> list[str]:
    """What went in: the preset, its overrides, the tokens and the sizes."""
    p = results.preset
    names = ", ".join(o.name for o in results.outcomes)
    changed = ", ".join(f"{k}={v}" for k, v in results.overrides.items())
    lines = [
        f"triptych run: preset {p.name}"
        + (f" with {changed}" if changed else "")
        + f", {results.dtype}, backends {names}, checked against the float64 oracle",
        f"tokens   {' '.join(results.labels)}",
        f"T {p.T}   d_model {p.d_model}   n_heads {p.n_heads}   "
        f"d_head {p.d_head}"
        + ("" if results.checkpoint or results.trained else f"   seed {p.seed}"),
        "weights: " + weights_text(results),
    ]
    if results.trained:
        single = results.trained["single_head"]
        lines += [
            f"   head {h['head']}: {h['text']}"
            + (" <- the single head" if h["head"] == single else "")
            for h in results.trained["heads"]
        ]
    if results.not_installed:
        lines.append(not_installed_line(results.not_installed))
    return lines


def weights_text(results: RunResults) -> str:
    """Where the weights came from, and for the trained model what its heads
    do (one line each after this one)."""
    if results.checkpoint:
        return results.checkpoint.describe()
    if results.trained:
        return (
            f"layer {results.trained['layer']} of the trained model that ships with "
            f"the project ({results.trained['file']}: the induction model of "
            "triptych train, whose words name its token ids); what each head does, "
            "measured on 256 held-out sequences (--weights random: the toy "
            "sentence on random weights):"
        )
    return (
        "random (N(0, 1/C), drawn from the seed), not trained: the heatmaps "
        "show no language patterns (the default, without --tiny or --full: the "
        "trained model)"
    )


def backends_table(results: RunResults) -> Table:
    """One column per backend and the oracle: version, device, dtype, shapes."""
    columns = [*results.outcomes, results.oracle]
    table = Table(
        "Each backend",
        ["", *(o.name for o in columns)],
        "l" * (len(columns) + 1),
    )
    table.rows.append(["version", *(_version(o, results.versions) for o in columns)])
    table.rows.append(["device", *(o.device for o in columns)])
    table.rows.append(["dtype", *(o.dtype for o in columns)])
    legends = {
        "x": "x (T, C)",
        "single_out": "1-head out (T, D)" if results.trained else "1-head out (T, D=C)",
        "single_weights": "1-head weights (T, T)",
        "multi_out": "H-head out (T, C)",
        "multi_weights": "H-head weights (H, T, T)",
        "entropy": "entropy (H, T)",
    }
    for key, legend in legends.items():
        table.rows.append([legend, *(str(o.shapes[key]) for o in columns)])
    return table


def weights_tables(results: RunResults) -> list[Table]:
    """The single-head weights rounded to 3 places, once per distinct rounding.

    The backends nearly always print the same matrix; one whose rounding
    differs gets its own table, so that nothing is hidden.
    """
    groups: dict[bytes, list[Outcome]] = {}
    for outcome in results.outcomes:
        rounded = np.round(outcome.arrays["single_weights"].astype(np.float64), 3)
        groups.setdefault(rounded.tobytes(), []).append(outcome)
    labels = results.labels
    tables = []
    for members in groups.values():
        weights = members[0].arrays["single_weights"].astype(np.float64)
        who = " = ".join(o.name for o in members)
        table = Table(
            f"Single-head attention weights, rounded to 3 places ({who})",
            ["query \\ key", *(f"{j} {word}" for j, word in enumerate(labels))],
            "l" + "r" * len(labels),
            caption=single_head_text(results)
            + "; row i: how much token i attends to each key j <= i; 0 = masked "
            "(exactly zero), every row sums to 1",
        )
        for i, row in enumerate(weights):
            table.rows.append(
                [f"{i} {labels[i]}", *("0" if w == 0 else f"{w:.3f}" for w in row)]
            )
        tables.append(table)
    return tables


def single_head_text(results: RunResults) -> str:
    """Which head single_head_attention ran: on the trained model, the head lab
    and read show (its columns of the layer's weights); else one head as wide
    as the model."""
    if not results.trained:
        return (
            "single_head_attention: one head as wide as the model (D = C: "
            "w_q, w_k and w_v whole), not one of its heads"
        )
    head = results.trained["single_head"]
    role = next(h for h in results.trained["heads"] if h["head"] == head)["role"]
    article = "an" if role[0] in "aeiou" else "a"
    return (
        f"single_head_attention on head {head} of layer {results.trained['layer']}"
        f" ({article} {role} head; D = {results.preset.d_head}: its columns of "
        "w_q, w_k and w_v), the single head lab and read show too"
    )


def entropy_table(results: RunResults) -> Table:
    """Per-head mean entropy, both ways, per backend and oracle, with a bar."""
    columns = [*results.outcomes, results.oracle]
    summaries = [o.entropy for o in columns]
    oracle = summaries[-1]
    T = results.preset.T
    table = Table(
        "Entropy per head (1 = as spread out as possible)",
        ["head", "measure", *(o.name for o in columns), "bar (oracle)"],
        "ll" + "r" * len(columns) + "l",
        caption=(
            "/ log T: the original build script's measure, mean row entropy over "
            f"log T = {math.log(T):.3f}. / log(i+1): row i against its causal maximum "
            "log(i+1), averaged over rows 1..T-1 (row 0 has one key: entropy "
            "and maximum are both 0)."
        ),
        keys=2,  # head, measure
    )
    for h in range(results.preset.n_heads):
        for measure, attribute in (
            ("/ log T", "over_log_T"),
            ("/ log(i+1)", "over_causal"),
        ):
            values = [_at(getattr(s, attribute), h) for s in summaries]
            table.rows.append(
                [
                    str(h) if attribute == "over_log_T" else "",
                    measure,
                    *(_number(v) for v in values),
                    Bar(_at(getattr(oracle, attribute), h)),
                ]
            )
    return table


def agreement_table(results: RunResults) -> Table:
    """Largest |a - b| per comparison and quantity, with the verdict per row."""
    atol, rtol = results.tolerance
    marks = []  # the legend says only what the table shows
    if any(c.max_abs_diff == 0 for c in results.comparisons):
        marks.append("0 = bit for bit the same")
    if not all(c.passed for c in results.comparisons):
        marks.append("! = beyond the tolerance")
    table = Table(
        f"Agreement: largest |a - b|, {results.dtype} tolerance "
        f"|a - b| <= {atol:g} + {rtol:g} |b|",
        ["a vs b", *QUANTITIES.values(), "verdict"],
        "l" + "r" * len(QUANTITIES) + "l",
        caption="; ".join(marks),
    )
    by_pair: dict[tuple[str, str], list] = {}
    for c in results.comparisons:
        by_pair.setdefault((c.actual, c.expected), []).append(c)
    for (a, b), row in by_pair.items():
        table.rows.append(
            [
                f"{a} vs {b}",
                *(_diff(c.max_abs_diff) + ("" if c.passed else "!") for c in row),
                "PASS" if all(c.passed for c in row) else "FAIL",
            ]
        )
    return table


def verdict_line(results: RunResults) -> str:
    """One line: PASS and what agreed, or FAIL and what did not."""
    n = len(results.comparisons)
    names = [o.name for o in results.outcomes]
    if results.passed:
        if len(names) == 1:
            return (
                f"PASS: {names[0]} agrees with the float64 oracle in {results.dtype} "
                f"({n} of {n} comparisons within the tolerance)"
            )
        return (
            f"PASS: {', '.join(names[:-1])} and {names[-1]} agree with the float64 "
            f"oracle and with each other in {results.dtype} "
            f"({n} of {n} comparisons within the tolerance)"
        )
    misses = "; ".join(
        f"{c.actual} vs {c.expected} {QUANTITIES[c.quantity]} "
        f"(max |diff| {_diff(c.max_abs_diff)})"
        for c in results.failures
    )
    return (
        f"FAIL: {len(results.failures)} of {n} comparisons beyond the "
        f"{results.dtype} tolerance: {misses}"
    )


def tables(results: RunResults) -> list[Table]:
    """Every table of the report, in the order printed."""
    return [
        backends_table(results),
        *weights_tables(results),
        entropy_table(results),
        agreement_table(results),
    ]


def report_text(results: RunResults, directory: str, files: dict[str, str]) -> str:
    """The whole report as plain text: what a pipe gets and run_log.txt holds."""
    blocks = ["\n".join(header_lines(results))]
    blocks += [as_text(t) for t in tables(results)]
    blocks.append(files_text(directory, files))
    blocks.append(verdict_line(results))
    return "\n\n".join(blocks) + "\n"


def files_text(directory: str, files: dict[str, str]) -> str:
    """'wrote DIR/' and one line per file: its name and what it holds."""
    width = max(len(name) for name in files)
    lines = [f"wrote {directory.rstrip('/')}/"]
    lines += [f"  {name:<{width}}  {what}" for name, what in files.items()]
    return "\n".join(lines)


def print_report(
    results: RunResults, directory: str, files: dict[str, str], console
) -> None:
    """The report on a rich Console: rich tables on a terminal, else plain text."""
    if not console.is_terminal:
        console.file.write(report_text(results, directory, files))
        return
    say(console, "\n".join(header_lines(results)))
    for table in tables(results):
        console.print()
        console.print(as_rich(table))
    console.print()
    say(console, files_text(directory, files))
    say(console, verdict_line(results), "bold green" if results.passed else "bold red")


# --- results.json -----------------------------------------------------------------


def document(results: RunResults, files: dict[str, str]) -> dict:
    """Everything printed, as plain JSON data (docs/results.schema.json)."""
    p = results.preset
    atol, rtol = results.tolerance
    return {
        "format": FORMAT,
        "verdict": "PASS" if results.passed else "FAIL",
        "input": {
            "checkpoint": (
                dataclasses.asdict(results.checkpoint) if results.checkpoint else None
            ),
            "trained": results.trained,
            "preset": p.name,
            "overrides": dict(results.overrides),
            "tokens": results.labels,
            "T": p.T,
            "d_model": p.d_model,
            "n_heads": p.n_heads,
            "d_head": p.d_head,
            "seed": p.seed,
            "dtype": results.dtype,
        },
        "tolerance": {"dtype": results.dtype, "atol": atol, "rtol": rtol},
        "versions": dict(results.versions),
        "not_installed": list(results.not_installed),
        "backends": {o.name: _outcome_document(o) for o in results.outcomes},
        ORACLE: _outcome_document(results.oracle),
        "agreement": [
            {
                "actual": c.actual,
                "expected": c.expected,
                "quantity": c.quantity,
                "max_abs_diff": _json_float(c.max_abs_diff),
                "passed": c.passed,
            }
            for c in results.comparisons
        ],
        "files": dict(files),
        "summary": verdict_line(results),
    }


def _outcome_document(outcome: Outcome) -> dict:
    summary: EntropySummary = outcome.entropy
    return {
        "device": outcome.device,
        "dtype": outcome.dtype,
        "shapes": {key: list(shape) for key, shape in outcome.shapes.items()},
        "single_head_weights": _json_array(outcome.arrays["single_weights"]),
        "entropy": {
            "rows_nats": _json_array(outcome.arrays["entropy"]),
            "mean_nats": _json_array(summary.mean_nats),
            "over_log_T": _json_array(summary.over_log_T),
            "over_causal": _json_array(summary.over_causal),
        },
    }


def _json_array(array):
    """Nested lists of floats; NaN and infinities (not JSON) become null."""
    if array is None:
        return None
    return np.vectorize(_json_float, otypes=[object])(
        np.asarray(array, dtype=np.float64)
    ).tolist()


def _json_float(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _version(outcome: Outcome, versions: dict[str, str | None]) -> str:
    if outcome.name == ORACLE:
        return "float64 loops"
    return version_line(outcome.name, versions)


def _at(values: np.ndarray | None, h: int) -> float | None:
    return None if values is None else float(values[h])


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _diff(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}"
