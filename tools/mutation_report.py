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

This file is the command line; the run and the report are in tools/mutation/,
one part a module (its __init__.py lists them).
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib

from mutation import ROOT
from mutation.runs import run_backend, run_numpy


def backends() -> tuple[str, tuple[str, ...]]:
    """(the backend [tool.mutmut] mutates in place: the registry's reference,
    NumPy; those run in a copy: each with a [tool.mutation_report.BACKEND]
    table in pyproject.toml)."""
    sys.path.insert(0, str(ROOT))
    from shared import registry

    tables = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return registry.reference().name, tuple(tables["tool"]["mutation_report"])


def main(argv=None) -> int:
    in_place, copied = backends()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mutants", nargs="*", help="mutant names or globs to run")
    parser.add_argument("--resume", action="store_true", help="keep mutants/")
    parser.add_argument("--report-only", action="store_true", help="do not run")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument(
        "--backend",
        choices=(in_place, *copied),
        default=in_place,
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
    if args.backend in copied:
        return run_backend(args)
    if args.sample is not None or args.seed is not None or args.ref:
        parser.error("--sample, --seed and --ref are for --backend torch or jax")
    return run_numpy(args)


if __name__ == "__main__":
    sys.exit(main())
