"""The swapped functions of a backend's mutation run (tools/mutation_report.py
--backend, [tool.mutation_report.BACKEND.swapped]): each mutant swapped into
the copy of the repository and its tests run, and their report."""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mutation_summary import (
    documented_equivalents,
    mutated_line,
    summarize,
)


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
