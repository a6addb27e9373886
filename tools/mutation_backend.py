"""A backend's mutation run (tools/mutation_report.py --backend BACKEND): the
repository copied with the backend's [tool.mutmut], its mutants drawn as a
sample, run, and reported with the score's interval."""

from __future__ import annotations

import fnmatch
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

from mutation_summary import OUTPUT, ROOT, build_report, git, markdown, summary_line
from mutation_swapped import (
    run_swapped,
    swapped_mutants,
    swapped_report,
    swapped_results,
)


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


def sample_of(population: list[str], size: int, seed: int) -> dict:
    return {
        "seed": seed,
        "size": min(size, len(population)),
        "population": len(population),
        "names": draw(population, size, seed),
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


def backend_settings(backend: str) -> dict:
    """[tool.mutation_report.BACKEND] of pyproject.toml: the mutmut table (mutmut),
    the environment its tests need (env), the sample's size and seed."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["tool"]["mutation_report"][backend]


def stage(tree: Path, mutmut: dict, ref: str | None, preload=()) -> str:
    """Copy the repository to `tree`, the working tree's files git knows (or the
    commit `ref`), with pyproject.toml's [tool.mutmut] replaced by `mutmut` and
    the modules `preload` in its preload_modules_file; returns what was copied,
    in words."""
    tree.mkdir(parents=True, exist_ok=True)  # on --resume, copied over
    if ref:
        commit = git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()
        archive = subprocess.run(
            ["git", "archive", "--format=tar", commit],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
        source = f"commit {commit}"
    else:
        listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
        for name in filter(None, listed.split("\0")):
            if (ROOT / name).is_file():
                (tree / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, tree / name)
        source = f"working tree at {git('rev-parse', 'HEAD').strip()}"
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(with_mutmut_table(pyproject.read_text(), mutmut))
    if "preload_modules_file" in mutmut:
        (tree / mutmut["preload_modules_file"]).write_text("\n".join(preload) + "\n")
    return source


def with_mutmut_table(text: str, mutmut: dict) -> str:
    """pyproject.toml's text with its [tool.mutmut] table replaced by `mutmut`
    (strings, booleans, numbers and lists of strings: JSON writes them as TOML)."""
    lines = [
        "[tool.mutmut]",
        *(
            f"{key} = {json.dumps(value, ensure_ascii=False)}"
            for key, value in mutmut.items()
        ),
        "",
    ]
    table = re.compile(r"^\[tool\.mutmut\]\n(?:(?!\[).*\n|\n)*", re.M)
    replaced, count = table.subn(lambda _: "\n".join(lines) + "\n", text, count=1)
    if count != 1:
        raise SystemExit("pyproject.toml has no [tool.mutmut] table to replace")
    assert tomllib.loads(replaced)["tool"]["mutmut"] == mutmut
    return replaced


def generate_mutants(tree: Path) -> list[str]:
    """Write every mutant into tree/mutants/ as `mutmut run` would first (it
    keeps them), and return their names, sorted."""
    code = (
        "import os\n"
        "from mutmut.__main__ import copy_also_copy_files, copy_src_dir, "
        "create_mutants, setup_source_paths\n"
        "os.makedirs('mutants', exist_ok=True)\n"
        "copy_src_dir(); copy_also_copy_files(); setup_source_paths()\n"
        "create_mutants(os.cpu_count() or 2)\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], cwd=tree, check=True, stdout=subprocess.DEVNULL
    )
    return sorted(exit_codes(tree))


def exit_codes(tree: Path) -> dict:
    """{mutant name: mutmut's exit code, None if not checked} in tree/mutants/."""
    found = {}
    for meta in sorted((tree / "mutants").rglob("*.py.meta")):
        found.update(json.loads(meta.read_text())["exit_code_by_key"])
    return found


def draw(population: list[str], size: int, seed: int) -> list[str]:
    """`size` of the sorted names, drawn without replacement, by the seed."""
    return sorted(random.Random(seed).sample(population, min(size, len(population))))


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> list[float] | None:
    """The exact (Clopper-Pearson) interval for a proportion of k in n."""
    if not n:
        return None
    alpha = 1 - confidence

    def at_least(p):  # P(X >= k), X ~ Binomial(n, p)
        return sum(binomial(n, i, p) for i in range(k, n + 1))

    def at_most(p):  # P(X <= k)
        return sum(binomial(n, i, p) for i in range(k + 1))

    low = 0.0 if k == 0 else bisect(lambda p: at_least(p) - alpha / 2)
    high = 1.0 if k == n else bisect(lambda p: alpha / 2 - at_most(p))
    return [round(low, 4), round(high, 4)]


def binomial(n: int, i: int, p: float) -> float:
    if p in (0.0, 1.0):
        return float(i == (n if p else 0))
    log = math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
    return math.exp(log + i * math.log(p) + (n - i) * math.log1p(-p))


def bisect(increasing, low=0.0, high=1.0) -> float:
    """The root of an increasing function on [0, 1]."""
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if increasing(middle) < 0 else (low, middle)
    return (low + high) / 2
