"""What `triptych check` prints and writes: a table per target (rich on a
terminal, plain text in a pipe), the grade table (`--grade`: one line per
property, one column per target, and the score), results.json (schema:
docs/check.schema.json) and report.md."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from triptych.common.tables import Table

FORMAT = "triptych-check/1"
"""The version of results.json's layout (docs/check.schema.json)."""
MARKS = {"PASS": "PASS", "FAIL": "FAIL", "NOTE": "NOTE", "SKIP": "skip"}


def document(reports, settings: dict[str, Any], versions: dict) -> dict[str, Any]:
    """results.json: the settings, the versions, every target's report."""
    counts = {"targets": len(reports)}
    for status in ("PASS", "FAIL", "ERROR"):
        counts[status.lower()] = sum(r.status == status for r in reports)
    return {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "settings": settings,
        "versions": versions,
        "summary": counts,
        "targets": [r.to_json() for r in reports],
    }


def details(result: dict[str, Any]) -> str:
    """A property's reason, diagnosis and smallest failing input in one cell."""
    parts = [result["reason"]]
    if result["diagnosis"]:
        parts.append(f"looks like: {result['diagnosis']}")
    if result["smallest"]:
        parts.append(f"smallest failing input: {result['smallest']['text']}")
    return " · ".join(parts)


def target_table(report) -> Table:
    """One target: a row per property (PASS, FAIL, NOTE, skip) with details."""
    adapter = f" ({report.adapter})" if report.adapter else ""
    counts = report.counts()
    parts = [f"{n} {s.lower()}" for s, n in counts.items() if n]
    if report.error:
        parts.append(report.error)
    caption = f"{report.status}: " + "; ".join(parts)
    table = Table(
        title=f"{report.target}{adapter}",
        columns=["property", "result", "details"],
        align="lll",
        caption=caption + f" ({report.seconds:.1f} s)",
    )
    for result in report.properties:
        table.rows.append([result["id"], MARKS[result["status"]], details(result)])
    return table


def grade_table(reports, ids: list[str]) -> Table:
    """--grade: one line per property with each target's result, then each
    target's score (properties passed or noted, of those not skipped)."""
    labels = short_labels([r.target for r in reports])
    table = Table(
        title="grade: one line per property, one column per target",
        columns=["property", *labels],
        align="l" + "l" * len(labels),
    )
    by_target = [{p["id"]: p["status"] for p in r.properties} for r in reports]
    for id in ids:
        marks = [
            "ERROR" if r.status == "ERROR" else MARKS.get(found.get(id), "-")
            for r, found in zip(reports, by_target, strict=True)
        ]
        table.rows.append([id, *marks])
    table.rows.append(["score", *(score(r) for r in reports)])
    errors = [
        f"{label}: {r.error}"
        for label, r in zip(labels, reports, strict=True)
        if r.error
    ]
    table.caption = "; ".join(errors)
    return table


def score(report) -> str:
    """'9/11': properties that passed or are noted, of those not skipped."""
    if report.status == "ERROR":
        return "error"
    counts = report.counts()
    checked = counts["PASS"] + counts["NOTE"] + counts["FAIL"]
    return f"{counts['PASS'] + counts['NOTE']}/{checked}"


def short_labels(targets: list[str]) -> list[str]:
    """The file name (or module) of each target, the whole spec where two
    would read the same."""
    short = []
    for target in targets:
        where = target.rpartition(":")[0]
        short.append(Path(where).stem if where.endswith(".py") else target)
    if len(set(short)) < len(short):
        return list(targets)
    return short


def summary_line(reports) -> str:
    """'PASS: 3 targets, no property failed' or 'FAIL: 2 of 3 targets ...'."""
    n = len(reports)
    failed = [r for r in reports if r.status == "FAIL"]
    errors = [r for r in reports if r.status == "ERROR"]
    plural = "s" * (n != 1)
    if not failed and not errors:
        return f"PASS: {n} target{plural}, no property failed"
    parts = []
    if failed:
        parts.append(f"{len(failed)} of {n} target{plural} failed a property")
    if errors:
        parts.append(f"{len(errors)} could not be checked")
    return ("ERROR: " if errors else "FAIL: ") + ", ".join(parts)


def markdown(doc: dict[str, Any]) -> str:
    """report.md: the summary table, then each target's properties, with the
    smallest failing input and the largest difference of each failure."""
    settings = doc["settings"]
    lines = [
        "# triptych check",
        "",
        f"{doc['created']}; dtypes {', '.join(settings['dtypes'])}, "
        f"{settings['examples']} examples per property, seed {settings['seed']}; "
        + ", ".join(f"{k} {v}" for k, v in doc["versions"].items() if v),
        "",
        "| target | called as | result | pass | fail | note | skip | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for target in doc["targets"]:
        counts = {s: 0 for s in ("PASS", "FAIL", "NOTE", "SKIP")}
        for result in target["properties"]:
            counts[result["status"]] += 1
        lines.append(
            f"| `{target['target']}` | {target['adapter'] or '-'} | "
            f"**{target['status']}** | {counts['PASS']} | {counts['FAIL']} | "
            f"{counts['NOTE']} | {counts['SKIP']} | {target['seconds']:.1f} |"
        )
    for target in doc["targets"]:
        lines += ["", f"## `{target['target']}`", ""]
        if target["error"]:
            lines += [f"**{target['status']}**: {target['error']}", ""]
        if not target["properties"]:
            continue
        lines += ["| property | result | why |", "|---|---|---|"]
        for result in target["properties"]:
            lines.append(
                f"| {result['id']} | {result['status']} | {escape(result['reason'])} |"
            )
        for result in target["properties"]:
            if result["smallest"] is None:
                continue
            lines += ["", f"### {result['id']}: {result['status']}", ""]
            if result["diagnosis"]:
                lines.append(f"- looks like: {escape(result['diagnosis'])}")
            lines.append(f"- smallest failing input: {result['smallest']['text']}")
            finding = result["finding"]
            if finding and finding["largest"] is not None:
                lines.append(
                    f"- largest |difference|: {number(finding['largest'])} "
                    f"(at {tuple(finding['index'] or ())}: got "
                    f"{number(finding['got'])}, expected {number(finding['expected'])})"
                )
    return "\n".join(lines) + "\n"


def escape(text: str) -> str:
    """Text for a Markdown table cell."""
    return text.replace("|", "\\|")


def number(value) -> str:
    """A float in 4 significant digits; None (a NaN or Inf in JSON) as such."""
    return "not finite" if value is None else f"{value:.4g}"
