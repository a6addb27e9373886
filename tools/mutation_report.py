"""Mutation testing, run and reported: what `tox -e mutate` runs (docs/mutation.md).

    python tools/mutation_report.py [MUTANT_GLOB ...] [--resume] [--max-children N]
    python tools/mutation_report.py --report-only

Runs `mutmut run` (configured in pyproject.toml, [tool.mutmut]: impl_numpy/ and
shared/ against the NumPy suite, each mutant against the tests that call its
function) from a fresh mutants/ unless --resume, times it, then writes
outputs/mutation/report.md and report.json: every mutant's status (killed,
survived, timeout, ...), per file and in all, the diff of each one not killed,
and the score, killed / (checked - equivalent): a timeout is not a kill, it
is listed with its diff to be looked at. A mutant counts as equivalent
only where the table in docs/mutation.md names it and its mutated line is the
one the table gives: when the code moves, the entry stops matching and the
mutant is reported as a survivor again, to be looked at afresh.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mutants", nargs="*", help="mutant names or globs to run")
    parser.add_argument("--resume", action="store_true", help="keep mutants/")
    parser.add_argument("--report-only", action="store_true", help="do not run")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # mutmut reads pyproject.toml and writes mutants/ here
    run = None
    if not args.report_only:
        if not args.resume:
            shutil.rmtree(ROOT / "mutants", ignore_errors=True)
        command = ["mutmut", "run", "--max-children", str(args.max_children)]
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", *command, *args.mutants])
        run = {
            "command": " ".join([*command, *args.mutants]),
            "seconds": round(time.perf_counter() - started, 1),
            "exit_code": done.returncode,
            "fresh": not args.resume,
        }
        if done.returncode != 0:
            print(f"mutmut exited {done.returncode}", file=sys.stderr)
            return done.returncode
    report = build_report(run)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (OUTPUT / "report.md").write_text(markdown(report))
    print(summary_line(report))
    print(f"report: {OUTPUT / 'report.md'} and report.json")
    return 0


def build_report(run) -> dict:
    """Every mutant's status and, for those not killed, its diff."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    equivalent = documented_equivalents()
    mutants = []
    for meta in sorted((ROOT / "mutants").rglob("*.py.meta")):
        path = meta.relative_to(ROOT / "mutants").as_posix().removesuffix(".meta")
        data = json.loads(meta.read_text())
        for name, exit_code in data["exit_code_by_key"].items():
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
    """{mutant name: (its mutated line, why it is equivalent)} from docs/mutation.md."""
    found = EQUIVALENT_TABLE.search(DOCS.read_text()) if DOCS.exists() else None
    rows = EQUIVALENT_ROW.findall(found.group(1)) if found else []
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
    return (
        f"mutation score {score:.1%}: {report['killed']} killed of "
        f"{report['non_equivalent']} non-equivalent mutants "
        f"({report['counts'].get('equivalent', 0)} equivalent, "
        f"{report['checked']} checked){took}"
        if score is not None
        else "no mutant was checked"
    )


def markdown(report) -> str:
    statuses = sorted({s for c in report["files"].values() for s in c})
    lines = [
        "# Mutation testing report",
        "",
        f"{summary_line(report)}.",
        "",
        f"- date: {report['date']}",
        f"- machine: {report['machine']}",
    ]
    if report["run"]:
        lines.append(f"- command: `{report['run']['command']}`")
        lines.append(f"- wall time: {report['run']['seconds']} s")
    lines += [
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
            lines += ["", f"## {status} ({len(listed)})", ""]
            for m in listed:
                lines += [f"### `{m['name']}`", "", "```diff", m["diff"], "```", ""]
    equivalent = [m for m in report["mutants"] if m["status"] == "equivalent"]
    if equivalent:
        lines += ["", f"## equivalent ({len(equivalent)}, docs/mutation.md)", ""]
        for m in equivalent:
            lines.append(f"- `{m['name']}`: `{mutated_line(m['diff'])}`: {m['reason']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
