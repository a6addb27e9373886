"""Mutation testing, run and reported: what `tox -e mutate` runs (docs/mutation.md).

    python tools/mutation_report.py [MUTANT_GLOB ...] [--resume] [--max-children N]
    python tools/mutation_report.py --report-only
    python tools/mutation_report.py --backend torch|jax [--sample N] [--seed S]
        [--ref REV] [MUTANT_GLOB ...] [--resume] [--report-only]

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

--backend torch or jax (tox -e mutate-torch, mutate-jax): impl_torch/ or
impl_jax/ against that backend's tests, kernel tests included. mutmut reads
one [tool.mutmut] from the pyproject.toml of the folder it runs in, so the
repository (its working tree, or the commit --ref names) is copied to
outputs/mutation/BACKEND/tree, whose pyproject.toml gets the backend's table,
[tool.mutation_report.BACKEND.mutmut], as its [tool.mutmut]; the table
[tool.mutation_report.BACKEND] also holds the environment the tests need and
the default sample. With --sample N (0: every mutant), N of the backend's
mutants are drawn with random.Random(seed) and only those are run (mutmut run
NAME ...); the report is then of the sample, with a 95% interval for the score
of every mutant (Clopper-Pearson). Reports: outputs/mutation/BACKEND/report.md
and report.json.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import io
import json
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "outputs" / "mutation"
DOCS = ROOT / "docs" / "mutation.md"
EQUIVALENT_TABLE = re.compile(
    r"<!-- equivalent mutants -->(.*?)<!-- end of the equivalent mutants -->", re.S
)
BACKENDS = ("numpy", "torch", "jax")
EQUIVALENT_ROW = re.compile(r"^\| `([\w.ǁ]+)` \| `(.*)` \| (.+?) \|$", re.M)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mutants", nargs="*", help="mutant names or globs to run")
    parser.add_argument("--resume", action="store_true", help="keep mutants/")
    parser.add_argument("--report-only", action="store_true", help="do not run")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="numpy",
        help="numpy (impl_numpy/ and shared/, [tool.mutmut]; the default), or "
        "torch or jax (impl_torch/ or impl_jax/, [tool.mutation_report.BACKEND])",
    )
    parser.add_argument(
        "--sample",
        type=int,
        help="torch, jax: run N mutants drawn at random, 0 for every one "
        "(default: the backend's table)",
    )
    parser.add_argument("--seed", type=int, help="torch, jax: the sample's seed")
    parser.add_argument(
        "--ref",
        help="torch, jax: copy the repository as of this commit (git archive), "
        "not the working tree",
    )
    args = parser.parse_args(argv)
    if args.backend != "numpy":
        return run_backend(args)
    if args.sample is not None or args.seed is not None or args.ref:
        parser.error("--sample, --seed and --ref are for --backend torch or jax")
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


def swapped_mutants(tree: Path, functions: list[str]) -> dict[str, dict]:
    """Mutants of decorated functions, which mutmut leaves alone (a decorator
    such as triton.jit reads the function itself, so no switch can stand in
    for it): mutmut's mutations of each "path::function", taken from the file
    with the decorators dropped, each put back under them into the whole file.
    {name, as mutmut would name it: {"file", "text" (the mutated file), "diff"}}."""
    import libcst as cst
    from mutmut.mutation.diff_apply import (
        find_top_level_function_or_method,
        read_mutant_function,
        read_original_function,
    )
    from mutmut.mutation.file_mutation import mutate_file_contents

    by_path = {}
    for entry in functions:
        path, _, function = entry.partition("::")
        by_path.setdefault(path, []).append(function)
    found = {}
    for path, names in by_path.items():
        module = cst.parse_module((tree / path).read_text())
        originals = {n: find_top_level_function_or_method(module, n) for n in names}
        bare = cst.Module(
            [
                node.with_changes(decorators=[]) if node in originals.values() else node
                for node in module.body
            ]
        )
        mutated = mutate_file_contents(path, bare.code)
        generated = cst.parse_module(mutated.code)
        prefix = path.removesuffix(".py").replace("/", ".")
        for name in mutated.mutant_names:
            function = name.partition("__mutmut_")[0].removeprefix("x_")
            if function not in originals:
                continue
            mutant = read_mutant_function(generated, name)
            before, after = (
                cst.Module([f]).code.strip().split("\n")
                for f in (read_original_function(generated, name), mutant)
            )
            diff = difflib.unified_diff(before, after, path, path, lineterm="")
            mutant = mutant.with_changes(
                decorators=originals[function].decorators,
                leading_lines=originals[function].leading_lines,
            )
            found[f"{prefix}.{name}"] = {
                "file": path,
                "text": module.deep_replace(originals[function], mutant).code,
                "diff": "\n".join(diff),
            }
    return found


def run_swapped(home: Path, tree: Path, swap: dict, names, workers: int, env) -> int:
    """Run each named mutant of swap["functions"] (swapped_mutants) in a copy of
    the tree whose file is that mutant, by `python -m pytest -x` of
    swap["pytest_args"] in a fresh process, `workers` at a time; the results
    go to home/swapped.json as they come. A clean run first, whose time sets the
    timeout (10 times it, and a minute); swapped_status reads the exit codes."""
    import concurrent.futures
    import queue

    mutants = swapped_mutants(tree, swap["functions"])
    copies = queue.Queue()
    for i in range(workers):
        copy = home / f"swap-{i}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(
            tree, copy, ignore=shutil.ignore_patterns("mutants", "__pycache__")
        )
        copies.put(copy)
    env = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("MUTANT_UNDER_TEST", None)
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly"]
    command += swap["pytest_args"]

    def pytest(copy, timeout=None):
        started = time.perf_counter()
        try:
            code = subprocess.run(
                command, cwd=copy, env=env, timeout=timeout, capture_output=True
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
        return code, round(time.perf_counter() - started, 1)

    clean, seconds = pytest(home / "swap-0")
    if clean != 0:
        print(f"swapped functions: the clean run exited {clean}", file=sys.stderr)
        return 1
    timeout = 10 * seconds + 60
    results_file = home / "swapped.json"
    results = swapped_results(home)

    def one(name):
        copy = copies.get()
        mutant = mutants[name]
        original = (copy / mutant["file"]).read_text()
        try:
            (copy / mutant["file"]).write_text(mutant["text"])
            code, took = pytest(copy, timeout)
        finally:
            (copy / mutant["file"]).write_text(original)
            copies.put(copy)
        return name, code, took

    print(f"swapped functions: {len(names)} mutants, clean run {seconds} s")
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for name, code, took in pool.map(one, names):
            results[name] = {
                "file": mutants[name]["file"],
                "status": swapped_status(code),
                "exit_code": code,
                "seconds": took,
                "diff": mutants[name]["diff"],
            }
            results_file.write_text(json.dumps(results, indent=2) + "\n")
            print(f"    {results[name]['status']:>9} {took:6.1f} s {name}")
    return 0


def swapped_status(code: int | None) -> str:
    """pytest's exit code in a fresh process, the status of the swapped mutant:
    0 survived; 1 a test failed, 2 a test module failed to import (the clean
    run imported it), or killed by a signal (the clean run was not: Triton's
    interpreter aborts on a store past the end), all killed; 5 no tests; None
    (run past the timeout) timeout."""
    if code is not None and code < 0:
        return "killed"
    return {
        0: "survived",
        1: "killed",
        2: "killed",
        5: "no tests",
        None: "timeout",
    }.get(code, "suspicious")


def swapped_results(home: Path) -> dict:
    found = home / "swapped.json"
    return json.loads(found.read_text()) if found.exists() else {}


def swapped_report(home: Path, only: set | None) -> dict:
    """The swapped functions' results, as build_report reports mutmut's."""
    equivalent = documented_equivalents()
    mutants = []
    for name, result in sorted(swapped_results(home).items()):
        if only is not None and name not in only:
            continue
        entry = {"name": name, "file": result["file"], "seconds": result["seconds"]}
        entry["status"] = swapped_status(result["exit_code"])
        if entry["status"] != "killed":
            entry["diff"] = result["diff"]
            line = mutated_line(entry["diff"])
            if name in equivalent and equivalent[name][0] == line:
                entry["status"] = "equivalent"
                entry["reason"] = equivalent[name][1]
        mutants.append(entry)
    return summarize(mutants, None)


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


if __name__ == "__main__":
    sys.exit(main())
