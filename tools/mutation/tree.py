"""The repository as a torch or JAX run sees it: copied to the run's tree, its
pyproject.toml given the backend's mutmut table, and the mutants mutmut
writes there (mutmut reads one [tool.mutmut], from the folder it runs in)."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

from mutation import ROOT


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


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
