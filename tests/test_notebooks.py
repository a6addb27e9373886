"""notebooks/: the lesson notebooks are what notebooks/build.py makes of the
lesson files (no drift), valid nbformat 4.5 documents, import nothing of the
project (they run in Colab without it), and run top to bottom, their code
cells in order in a fresh interpreter, printing the distance to the oracle
that shared/reference.py gives for the same problem."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import name_of

from shared.reference import reference_multi_head, reference_single_head

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))
import build  # noqa: E402 (notebooks/build.py)

PROJECT = ("shared", "impl_numpy", "impl_torch", "impl_jax", "triptych")


def code_of(path: Path) -> str:
    document = json.loads(path.read_text())
    cells = [c for c in document["cells"] if c["cell_type"] == "code"]
    return "\n\n".join("".join(c["source"]) for c in cells) + "\n"


def run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.neutral
def test_the_notebooks_are_built_from_the_lessons_and_valid(capsys):
    assert build.main(["--check"]) == 0, capsys.readouterr().out
    for framework in build.ARRAYS:
        path = NOTEBOOKS / f"lesson_{framework}.ipynb"
        document = json.loads(path.read_text())
        assert (document["nbformat"], document["nbformat_minor"]) == (4, 5)
        assert document["metadata"]["kernelspec"]["name"] == "python3"
        ids = [c["id"] for c in document["cells"]]
        assert len(ids) == len(set(ids))
        for cell in document["cells"]:
            assert cell["cell_type"] in ("markdown", "code")
            assert isinstance(cell["source"], list) and cell["metadata"] == {}
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [] and cell["execution_count"] is None
        tree = ast.parse(code_of(path))
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                    for a in n.names]  # fmt: skip
        imported += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m.split(".")[0] in PROJECT]
        text = (NOTEBOOKS / f"lesson_{framework}.py").read_text()
        assert "formats: ipynb,py:percent" in text  # jupytext's pairing


def test_the_notebook_runs_top_to_bottom_with_the_oracle_s_distance(backend, tmp_path):
    framework = name_of(backend)
    done = run(code_of(NOTEBOOKS / f"lesson_{framework}.ipynb"), tmp_path)
    assert done.returncode == 0, done.stderr
    lesson = __import__(f"impl_{framework}.lesson", fromlist=["lesson"])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 8))
    w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]
    one = [a[:, :4] for a in w[:3]]
    arrays = [backend.from_numpy(a, "float32") for a in (x, *w)]
    out, _ = lesson.single_head_attention(arrays[0], *(
        backend.from_numpy(a, "float32") for a in one))  # fmt: skip
    expected, _ = reference_single_head(x, *one)
    distance = np.abs(np.asarray(backend.to_numpy(out), np.float64) - expected).max()
    assert f"one head: max |out - oracle| = {distance:.2e}" in done.stdout
    out, _ = lesson.multi_head_attention(*arrays, 2)
    expected, _ = reference_multi_head(x, *w, 2)
    distance = np.abs(np.asarray(backend.to_numpy(out), np.float64) - expected).max()
    assert f"two heads: max |out - oracle| = {distance:.2e}" in done.stdout


@pytest.mark.neutral
def test_a_notebook_with_a_wrong_mask_fails(tmp_path):
    code = code_of(NOTEBOOKS / "lesson_numpy.ipynb")
    assert "np.tril(" in code
    done = run(code.replace("np.tril(", "np.triu("), tmp_path)
    assert done.returncode != 0 and "AssertionError" in done.stderr
