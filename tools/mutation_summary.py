"""The report of a mutation run (tools/mutation_report.py): every mutant's
status, the score, the equivalent mutants docs/mutation.md names, report.md."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "outputs" / "mutation"
DOCS = ROOT / "docs" / "mutation.md"
EQUIVALENT_TABLE = re.compile(
    r"<!-- equivalent mutants -->(.*?)<!-- end of the equivalent mutants -->", re.S
)
EQUIVALENT_ROW = re.compile(r"^\| `([\w.ǁ]+)` \| `(.*)` \| (.+?) \|$", re.M)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def build_report(run, base: Path = ROOT, only: set | None = None) -> dict:
    """Every mutant's status (in base/mutants/; of `only` if given) and, for
    those not killed, its diff."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    equivalent = documented_equivalents()
    mutants = []
    for meta in sorted((base / "mutants").rglob("*.py.meta")):
        path = meta.relative_to(base / "mutants").as_posix().removesuffix(".meta")
        data = json.loads(meta.read_text())
        for name, exit_code in data["exit_code_by_key"].items():
            if only is not None and name not in only:
                continue
            entry = {
                "name": name,
                "file": path,
                "status": status_by_exit_code[exit_code],
                "seconds": data["durations_by_key"].get(name),
            }
            if entry["status"] not in ("killed", "not checked"):
                entry["diff"] = get_diff_for_mutant(name, path=path)
                line = mutated_line(entry["diff"])
                if name in equivalent and equivalent[name][0] == line:
                    entry["status"] = "equivalent"
                    entry["reason"] = equivalent[name][1]
            mutants.append(entry)
    return summarize(mutants, run)


def summarize(mutants: list[dict], run) -> dict:
    """The report of these mutants: counts in all and per file, and the score."""
    counts = Counter(m["status"] for m in mutants)
    checked = [m for m in mutants if m["status"] != "not checked"]
    non_equivalent = [m for m in checked if m["status"] != "equivalent"]
    killed = sum(m["status"] == "killed" for m in non_equivalent)
    files = {}
    for m in mutants:
        files.setdefault(m["file"], Counter())[m["status"]] += 1
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "run": run,
        "counts": dict(sorted(counts.items())),
        "checked": len(checked),
        "non_equivalent": len(non_equivalent),
        "killed": killed,
        "score": round(killed / len(non_equivalent), 4) if non_equivalent else None,
        "files": {path: dict(sorted(c.items())) for path, c in sorted(files.items())},
        "mutants": mutants,
    }


def documented_equivalents() -> dict[str, tuple[str, str]]:
    """{mutant name: (its mutated line, why it is equivalent)} from the tables
    of docs/mutation.md (one per backend)."""
    tables = EQUIVALENT_TABLE.finditer(DOCS.read_text()) if DOCS.exists() else ()
    rows = [row for table in tables for row in EQUIVALENT_ROW.findall(table.group(1))]
    return {name: (line.replace("\\|", "|"), why) for name, line, why in rows}


def mutated_line(diff: str) -> str:
    """The first added line of a mutant's diff, stripped: what the mutant wrote."""
    added = [
        line[1:].strip()
        for line in diff.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    return added[0] if added else ""


def summary_line(report) -> str:
    run = report["run"]
    took = f" in {run['seconds'] / 60:.1f} min" if run else ""
    score = report["score"]
    sample = report.get("sample")
    interval = report.get("interval")
    of = (
        f" of a sample of {sample['size']} of {sample['population']} "
        f"(seed {sample['seed']}"
        + (
            f"; 95% interval {interval[0]:.1%} to {interval[1]:.1%})"
            if interval
            else ")"
        )
        if sample
        else ""
    )
    return (
        f"mutation score {score:.1%}: {report['killed']} killed of "
        f"{report['non_equivalent']} non-equivalent mutants "
        f"({report['counts'].get('equivalent', 0)} equivalent, "
        f"{report['checked']} checked){of}{took}"
        if score is not None
        else "no mutant was checked"
    )


def markdown(report) -> str:
    backend = report.get("backend")
    lines = [
        "# Mutation testing report" + (f": {backend}" if backend else ""),
        "",
        f"{summary_line(report)}.",
    ]
    if report.get("swapped"):
        lines += [
            "",
            f"Decorated functions, swapped: {summary_line(report['swapped'])}.",
        ]
    lines += [
        "",
        f"- date: {report['date']}",
        f"- machine: {report['machine']}",
    ]
    if backend:
        lines.append(f"- copied: {report['source']}")
    if report["run"]:
        lines.append(f"- command: `{report['run']['command']}`")
        lines.append(f"- wall time: {report['run']['seconds']} s")
    lines += details(report, "##")
    if report.get("swapped"):
        lines += [
            "",
            "## Decorated functions, each mutant swapped into the file",
            "",
            "mutmut leaves decorated functions alone; these were mutated with its",
            "mutations, each in a copy of its file, run in a fresh process.",
        ]
        lines += details(report["swapped"], "###")
    return "\n".join(lines) + "\n"


def details(report, level) -> list[str]:
    """The counts, per file, then the diff of every mutant not killed."""
    statuses = sorted({s for c in report["files"].values() for s in c})
    lines = [
        f"- counts: {', '.join(f'{s} {n}' for s, n in report['counts'].items())}",
        "",
        "| file | " + " | ".join(statuses) + " |",
        "|---|" + "---|" * len(statuses),
    ]
    for path, counts in report["files"].items():
        row = " | ".join(str(counts.get(s, 0)) for s in statuses)
        lines.append(f"| {path} | {row} |")
    for status in ("survived", "timeout", "no tests", "suspicious", "segfault"):
        listed = [m for m in report["mutants"] if m["status"] == status]
        if listed:
            lines += ["", f"{level} {status} ({len(listed)})", ""]
            for m in listed:
                lines += [
                    f"#{level} `{m['name']}`",
                    "",
                    "```diff",
                    m["diff"],
                    "```",
                    "",
                ]
    equivalent = [m for m in report["mutants"] if m["status"] == "equivalent"]
    if equivalent:
        lines += ["", f"{level} equivalent ({len(equivalent)}, docs/mutation.md)", ""]
        for m in equivalent:
            lines.append(f"- `{m['name']}`: `{mutated_line(m['diff'])}`: {m['reason']}")
    return lines
