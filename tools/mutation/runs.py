"""The runs: mutmut over impl_numpy/ and shared/ in the repository itself, or
over impl_torch/ or impl_jax/ in a copy (tree.py), the decorated functions
after (swapped.py); each timed, then reported (report.py)."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mutation import OUTPUT, ROOT
from mutation.report import build_report, markdown, summary_line
from mutation.sample import clopper_pearson, sample_of
from mutation.swapped import (
    run_swapped,
    swapped_mutants,
    swapped_report,
    swapped_results,
)
from mutation.tree import backend_settings, exit_codes, generate_mutants, stage


def run_numpy(args) -> int:
    """The default run: [tool.mutmut] of pyproject.toml, in the repository."""
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


def run_backend(args) -> int:
    """--backend torch or jax: the run in a copy of the repository, reported."""
    settings = backend_settings(args.backend)
    home = OUTPUT / args.backend
    tree = home / "tree"  # the copy: mutmut runs here and writes tree/mutants/
    sample_file = home / "sample.json"
    swap = settings.get("swapped")
    run = None
    if not args.report_only:
        if args.resume and not sample_file.exists():
            print(f"--resume: no earlier run in {home}", file=sys.stderr)
            return 1
        if not args.resume:
            clear(home, keep=backend_env(settings, home).values())
        preload = settings.get("preload", ())
        source = stage(tree, settings["mutmut"], args.ref, preload)
        population = generate_mutants(tree)
        swappable = sorted(swapped_mutants(tree, swap["functions"])) if swap else []
        recorded = {"sample": None}
        if args.resume:
            recorded = json.loads(sample_file.read_text())
        size = settings.get("sample", 0) if args.sample is None else args.sample
        seed = settings.get("seed", 0) if args.seed is None else args.seed
        if not args.resume and size:
            recorded["sample"] = sample_of(population, size, seed)
        if "swapped_sample" not in recorded:  # a fresh run, or one from before
            swap_size = swap.get("sample", 0) if swap and args.sample is None else size
            recorded["swapped_sample"] = (
                sample_of(swappable, swap_size, seed) if swap and swap_size else None
            )
        recorded["source"] = source
        sample_file.write_text(json.dumps(recorded, indent=2) + "\n")
        names, swap_names = chosen(args.mutants, population, swappable, recorded, tree)
        started = time.perf_counter()
        command = ["mutmut", "run", "--max-children", str(args.max_children)]
        env = {**os.environ, **backend_env(settings, home)}
        # a test's child process (python -m triptych) imports the copy, as an
        # installed wheel would, not the working tree of an editable install
        paths = [str(tree), env.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        code = 0
        if names or not (args.mutants or recorded["sample"]):
            code = subprocess.run(
                [sys.executable, "-m", *command, *names], cwd=tree, env=env
            ).returncode
        if code == 0 and swap_names:
            code = run_swapped(home, tree, swap, swap_names, args.max_children, env)
        run = {
            "command": " ".join(command)
            + (f" <{len(names)} mutants>" if len(names) > 10 else "")
            + "".join(f" {n}" for n in names if len(names) <= 10),
            "swapped": len(swap_names),
            "seconds": round(time.perf_counter() - started, 1),
            "exit_code": code,
            "fresh": not args.resume,
            "env": backend_env(settings, home),
        }
        if code != 0:
            print(f"the run exited {code}", file=sys.stderr)
            return code
    if not sample_file.exists():
        print(f"no run of {args.backend} in {home}", file=sys.stderr)
        return 1
    recorded = json.loads(sample_file.read_text())
    os.chdir(tree)  # mutmut's diffs read mutants/ and the config from here
    sample, swapped_sample = recorded["sample"], recorded.get("swapped_sample")
    report = build_report(run, base=tree, only=set(sample["names"]) if sample else None)
    report["backend"] = args.backend
    report["source"] = recorded["source"]
    if sample:
        report["sample"] = {k: sample[k] for k in ("seed", "size", "population")}
        report["interval"] = clopper_pearson(report["killed"], report["non_equivalent"])
    if swap:
        only = set(swapped_sample["names"]) if swapped_sample else None
        report["swapped"] = swapped_report(home, only)
        if swapped_sample:
            part = report["swapped"]
            part["sample"] = {
                k: swapped_sample[k] for k in ("seed", "size", "population")
            }
            part["interval"] = clopper_pearson(part["killed"], part["non_equivalent"])
    (home / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (home / "report.md").write_text(markdown(report))
    print(summary_line(report))
    if swap:
        print(f"swapped functions: {summary_line(report['swapped'])}")
    print(f"report: {home / 'report.md'} and report.json")
    return 0


def clear(home: Path, keep) -> None:
    """Empty `home` for a fresh run, but for the paths in `keep` (the folders
    `env` names there: JAX's compilation cache is keyed by the program, so what
    it holds is never stale, and a fresh run need not compile it again)."""
    kept = {Path(path) for path in keep}
    for old in sorted(home.iterdir()) if home.exists() else ():
        if old in kept:
            continue
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()


def backend_env(settings: dict, home: Path) -> dict[str, str]:
    """The backend's `env`, "{output}" in a value read as its output folder."""
    return {
        k: v.replace("{output}", str(home)) for k, v in settings.get("env", {}).items()
    }


def chosen(patterns, population, swappable, recorded, tree) -> tuple[list, list]:
    """The mutants to run now: those the patterns name, mutmut's and the swapped
    functions' apart; without patterns, those of each sample not checked yet
    (every one of a sample on a fresh run), or every mutant where there is no
    sample ([] for mutmut: it runs every one not checked)."""
    if patterns:

        def match(names):
            return [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)]

        return match(population), match(swappable)
    codes = exit_codes(tree)
    names = []
    if recorded["sample"]:
        names = [n for n in recorded["sample"]["names"] if codes.get(n) is None]
    done = swapped_results(tree.parent)
    swap = recorded.get("swapped_sample")
    swap_names = [n for n in (swap["names"] if swap else swappable) if n not in done]
    return names, swap_names
