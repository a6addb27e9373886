"""The parts of tools/mutation_report.py (whose docstring says what the run
does): the runs (runs.py), the repository copied for torch or JAX (tree.py),
the decorated functions' mutants swapped into their files (swapped.py), the
sample and its interval (sample.py), the report (report.py)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "outputs" / "mutation"
