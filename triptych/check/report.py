"""What `triptych check` prints and writes: a table per target (rich on a
terminal; in a pipe, `plain_target`: one line per property, long reasons
wrapped under it, nothing padded), the grade (`--grade`: one row per target,
one column per property, the score out of the properties that apply and why
each FAIL failed; `grade_rows`, printed by `grade_table` or `plain_grade`,
written by `grade_csv` and `grade_markdown`), results.json (schema:
docs/check.schema.json) and report.md."""

from __future__ import annotations

import csv
import datetime
import io
import shutil
import textwrap
from typing import Any

from triptych.check import causes
from triptych.check.labels import short_labels
from triptych.common.prose import WHOLE
from triptych.common.tables import Table

WIDTH = 100
"""Plain-text lines are wrapped at this width, or at COLUMNS where it is set
(`width`)."""


def width() -> int:
    """The width plain text is wrapped at: COLUMNS if set, else WIDTH."""
    return shutil.get_terminal_size((WIDTH, 24)).columns


SHORT = {
    "oracle:float64": "f64",
    "oracle:float32": "f32",
    "oracle:float16": "f16",
    "oracle:bfloat16": "bf16",
    "causality": "causal",
    "rows sum to 1": "rows",
    "scale": "scale",
    "mask": "mask",
    "independence": "indep",
    "fully masked rows": "empty",
    "NaN behind the mask": "NaN",
    "hostile magnitudes": "hostile",
    "determinism": "determ",
    "gradients": "grad",
}
"""The grade table's column of each property."""

FORMAT = "triptych-check/1"
"""The version of results.json's layout (docs/check.schema.json)."""
MARKS = {"PASS": "PASS", "FAIL": "FAIL", "NOTE": "NOTE", "SKIP": "SKIP"}


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
        parts.append(smallest(result))
    return " · ".join(parts)


SMALLEST = {
    "FAIL": "smallest failing input",
    "NOTE": "smallest input that shows it",  # a deviation that is no failure
    "SKIP": "smallest input it could not judge",  # e.g. a scale wrong everywhere
}


def smallest(result: dict[str, Any]) -> str:
    """'smallest failing input: ...', or what the input is for a NOTE or a
    SKIP that comes with one."""
    return f"{SMALLEST.get(result['status'], 'input')}: {result['smallest']['text']}"


def target_table(report) -> Table:
    """One target: a row per property (PASS, FAIL, NOTE, SKIP) with details."""
    adapter = f" ({report.adapter})" if report.adapter else ""
    table = Table(
        title=f"{report.target}{adapter}",
        columns=["property", "result", "details"],
        align="lll",
        caption=caption(report),
    )
    listed = causes.of(report)
    for i, cause in enumerate(listed):  # the news first, the rows folded under
        explains = ", ".join(cause["properties"])
        text = f"{cause['cause']} · explains {explains}"
        table.rows.append([causes.name(i, listed), "", text])
    for result in causes.folded(report.properties, listed):
        table.rows.append([result["id"], MARKS[result["status"]], details(result)])
    return table


def plain_target(report) -> str:
    """One target as plain text: its name and how it was called, a line per
    property (result, id, reason), the diagnosis and smallest failing input
    wrapped under it, and the caption; no line longer than it must be."""
    adapter = f" ({report.adapter})" if report.adapter else ""
    wrap_at = width()
    lines = textwrap.wrap(
        f"{report.target}{adapter}", wrap_at, subsequent_indent="  ", **WHOLE
    )  # a path stays whole
    lines += causes.plain(report, wrap_at)
    id_width = max([len(r["id"]) for r in report.properties] + [8])
    indent = " " * (2 + 4 + 2 + id_width + 2)
    for result in causes.folded(report.properties, causes.of(report)):
        head = f"  {MARKS[result['status']]:<4}  {result['id']:<{id_width}}  "
        parts = [result["reason"]]
        if result["diagnosis"]:
            parts.append(f"looks like: {result['diagnosis']}")
        if result["smallest"]:
            parts.append(smallest(result))
        for i, part in enumerate(parts):
            lines += textwrap.wrap(
                part,
                wrap_at,
                initial_indent=head if i == 0 else indent,
                subsequent_indent=indent,
                **WHOLE,
            )
    lines += textwrap.wrap(caption(report), wrap_at, subsequent_indent="  ", **WHOLE)
    return "\n".join(lines)


def caption(report) -> str:
    """'FAIL: 13 pass; 1 fail; timed out ... (2.3 s)'."""
    counts = report.counts()
    parts = [f"{n} {s.lower()}" for s, n in counts.items() if n]
    if report.error:
        parts.append(report.error)
    return f"{report.status}: " + "; ".join(parts) + f" ({report.seconds:.1f} s)"


def grade_rows(reports, ids: list[str]) -> list[dict[str, str]]:
    """--grade: one row per target: its label, status, score (properties
    passed or noted of those that apply: `score`), a
    cell per property (PASS, FAIL, NOTE, SKIP; "-" not reached; "error" where
    none ran) and why: each cause in words with the properties it explains
    (`causes.in_words`), and what went wrong beside the properties."""
    labels = short_labels([r.target for r in reports])
    rows = []
    for label, r in zip(labels, reports, strict=True):
        found = {p["id"]: p for p in r.properties}
        none_ran = not found and r.error is not None
        row = {"target": label, "status": r.status, "score": score(r, ids)}
        for id in ids:
            result = found.get(id)
            row[id] = (
                "error" if none_ran else MARKS[result["status"]] if result else "-"
            )
        why = causes.in_words(r, SHORT)  # each cause, the properties it fails
        if r.error:
            why.append(("error: " if none_ran else "") + r.error)
        row["why"] = "; ".join(why)
        rows.append(row)
    return rows


def grade_table(reports, ids: list[str]) -> Table:
    """--grade on a terminal: the rows of `grade_rows`, a column per property
    (SHORT names)."""
    table = Table(
        title="grade: one row per target, one column per property",
        columns=["target", *(SHORT.get(id, id) for id in ids), "score", "why"],
        align="l" + "l" * len(ids) + "rl",
    )
    for row in grade_rows(reports, ids):
        table.rows.append(
            [row["target"], *(row[id] for id in ids), row["score"], row["why"]]
        )
    table.caption = legend(ids)
    return table


def plain_grade(reports, ids: list[str]) -> str:
    """--grade in a pipe: the same columns aligned, the last (why) as long as
    it is, and the legend."""
    rows = grade_rows(reports, ids)
    columns = ["target", *(SHORT.get(id, id) for id in ids), "score"]
    cells = [[r["target"], *(r[id] for id in ids), r["score"]] for r in rows]
    widths = [max(len(c) for c in col) for col in zip(columns, *cells, strict=True)]

    def line(values, why):
        text = "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True))
        return f"{text}  {why}".rstrip()

    lines = [line(columns, "why")]
    lines += [line(c, r["why"]) for c, r in zip(cells, rows, strict=True)]
    return "\n".join(lines + textwrap.wrap(legend(ids), width(), **WHOLE))


def legend(ids: list[str]) -> str:
    return "columns: " + ", ".join(
        f"{SHORT[id]} = {id}" for id in ids if SHORT.get(id, id) != id
    )


def grade_csv(reports, ids: list[str]) -> str:
    """grade.csv: target, status, score, passed, of, why (the grade table's:
    each cause in words), a column per property (its status) and one beside
    it (why it failed or is noted), error."""
    found = grade_rows(reports, ids)
    fields = ["target", "status", "score", "passed", "of", "why"]
    for id in ids:
        fields += [id, f"{id}: why"]
    fields.append("error")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for report, row in zip(reports, found, strict=True):
        results = {p["id"]: p for p in report.properties}
        passed, of = row["score"].split("/")
        line = {
            "target": report.target,
            "status": report.status,
            "score": row["score"],
            "passed": passed,
            "of": of,
            "why": row["why"],
            "error": report.error or "",
        }
        for id in ids:
            result = results.get(id)
            line[id] = result["status"] if result else row[id]
            why = ""
            if result and result["status"] in ("FAIL", "NOTE"):
                why = result["diagnosis"] or result["reason"]
            line[f"{id}: why"] = why
        writer.writerow(line)
    return out.getvalue()


def grade_markdown(reports, ids: list[str]) -> str:
    """grade.md: the grade table, a FAIL cell with its diagnosis, and why
    (the grade table's: each cause in words, what went wrong beside)."""
    lines = [
        "# triptych check: grade",
        "",
        "| target | " + " | ".join(ids) + " | score | why |",
        "|---|" + "---|" * len(ids) + "---|---|",
    ]
    for report, row in zip(reports, grade_rows(reports, ids), strict=True):
        results = {p["id"]: p for p in report.properties}
        cells = []
        for id in ids:
            result = results.get(id)
            if result is None:
                cells.append("-" if results or not report.error else "error")
            elif result["status"] == "FAIL":
                why = result["diagnosis"] or result["reason"]
                cells.append(f"**FAIL**: {escape(why)}")
            else:
                cells.append(result["status"])
        lines.append(
            f"| `{report.target}` | "
            + " | ".join(cells)
            + f" | {row['score']} | {escape(row['why'])} |"
        )
    return "\n".join(lines) + "\n"


def score(report, ids: list[str]) -> str:
    """'9/11': properties that passed or are noted, of the properties that
    apply to the target. A SKIP that says the property does not apply (no
    mask taken, no autodiff, no float16 of NumPy's own) leaves the
    denominator, so the same correct answer scores full marks in every
    framework; a SKIP that could not judge a failing input, a property not
    reached and a target that cannot be checked earn nothing and count."""
    counts, found = report.counts(), {p["id"]: p for p in report.properties}
    moot = [id for id in ids if found.get(id, {}).get("status") == "SKIP"]
    moot = sum(not found[id]["smallest"] for id in moot)
    return f"{counts['PASS'] + counts['NOTE']}/{len(ids) - moot}"


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
        parts.append(
            f"{len(errors)} target{'s' * (len(errors) != 1)} could not be checked"
        )
    return ("ERROR: " if errors else "FAIL: ") + ", ".join(parts)


def markdown(doc: dict[str, Any]) -> str:
    """report.md: the summary table, then each target's properties, with the
    smallest failing input and the largest difference of each failure."""
    settings = doc["settings"]
    lines = [
        "# triptych check",
        "",
        f"{doc['created']}; dtypes {', '.join(settings['dtypes'])}, "
        f"{settings['examples']} examples per property, seed {settings['seed']}, "
        f"profile {settings.get('profile', 'default')}, T up to "
        f"{settings.get('max_t', 64)} (and its block edges); "
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
        listed = target.get("causes") or []  # the news first
        for i, cause in enumerate(listed):
            explains = ", ".join(cause["properties"])
            text = f"{escape(cause['cause'])} (explains {explains})"
            lines += [f"- **{causes.name(i, listed)}**: {text}"]
        lines += [""] * bool(listed)
        if not target["properties"]:
            continue
        lines += ["| property | result | why |", "|---|---|---|"]
        for result in target["properties"]:
            lines.append(
                f"| {result['id']} | {result['status']} | {escape(result['reason'])} |"
            )
        for result in causes.folded(target["properties"], listed):
            if result["smallest"] is None:
                continue
            lines += ["", f"### {result['id']}: {result['status']}", ""]
            if result["diagnosis"]:
                lines.append(f"- looks like: {escape(result['diagnosis'])}")
            lines.append(f"- {smallest(result)}")
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
