"""One cause per mistake at the top of check's report (triptych/check/
causes.py), the same in `triptych check --profile course` and
exercises/grade.py; --grade of a class folder with a cause in words per
row; a misspelt function name one line on stderr. NumPy targets only, and as
few check runs (a process each) as the claims need."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from test_exercise_mistakes import K_DOT_T, XP, graded
from test_numpy_check import SCHEMA, run_cli

from triptych.check.adapters.probe import batch_of
from triptych.check.causes import TRANSPOSE, causes, folded
from triptych.check.target import missing

grade = sys.modules["grade"]  # exercises/grade.py, as test_exercise_mistakes loads it
pytestmark = pytest.mark.neutral  # NumPy targets: once, in the jax env
FAIL = {"status": "FAIL", "diagnosis": None, "finding": None}


def row(id: str, reason: str, diagnosis=None, raised=False) -> dict:
    return {**FAIL, "id": id, "reason": reason, "diagnosis": diagnosis,
            "finding": {"raised": raised}}  # fmt: skip


def test_a_raise_is_one_cause_and_names_the_target_s_own_line(tmp_path):
    """On every input drawn or on one, the same raise is one cause; its
    text says where in the target's file it was raised, not in NumPy."""
    from triptych.check.causes import raised

    (tmp_path / "typo_answer.py").write_text(
        "import numpy as np\n\n\ndef f(T):\n    return np.trill(np.ones((T, T)))\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import typo_answer

        with pytest.raises(AttributeError) as error:
            typo_answer.f(3)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("typo_answer", None)
    text = raised(error.value)
    assert text == (
        "raises AttributeError: module 'numpy' has no attribute 'trill' "
        "(typo_answer.py, line 5: `return np.trill(np.ones((T, T)))`)"
    )
    what = text.removeprefix("raises ")
    found = causes([
        row("oracle:float64", f"raises on every input (3 tried): {what}", raised=True),
        row("rows sum to 1", text, raised=True),
    ])  # fmt: skip
    assert found == [{"cause": text, "properties": ["oracle:float64", "rows sum to 1"]}]


def test_rows_fold_under_the_cause_that_explains_them():
    """The same diagnosis once; a "forward is already wrong" under the first
    cause; every raise under a broken batch, the line it names first."""
    scale = "scale missing: scores not divided by sqrt(D)"
    found = causes([
        row("oracle:float64", "out: 1.2 beyond", scale),
        row("scale", "matches 1", scale),
        row("hostile magnitudes", "the forward is already wrong at ordinary scores"),
        {**row("determinism", "bit for bit"), "status": "PASS"},
    ])  # fmt: skip
    assert found == [
        {
            "cause": scale,
            "properties": ["oracle:float64", "scale", "hostile magnitudes"],
        }
    ]
    shown = folded([row("scale", "matches 1", scale), row("mask", "x", "other")], found)
    assert [r["diagnosis"] for r in shown] == ["the cause above", "other"]
    hint = f"{TRANSPOSE} (a.py, line 7: `s = q @ k.T`)"
    batch = "runs on x (T, C) and raises ValueError on x (B, T, C), which ..."
    found = causes(
        [row("oracle:float64", "raises on every input", hint, raised=True),
         row("rows sum to 1", "raises ValueError: matmul", raised=True)],
        batch,
    )  # fmt: skip
    assert found == [
        {
            "cause": f"{hint}: it {batch}",
            "properties": ["oracle:float64", "rows sum to 1"],
        }
    ]


def test_course_asks_for_batched_x_unless_batch_is_given():
    assert batch_of(None, "course") == "any"
    assert batch_of("auto", "course") == "auto"  # given: it wins
    assert batch_of(None, "default") == batch_of(None, "strict") == "auto"


def test_k_dot_t_is_one_cause_in_check_and_in_grade_alike(
    tmp_path, capsys, monkeypatch
):
    """`k.T` where `k.mT` belongs: `triptych check --profile course` fails it
    (no --batch given), its first cause naming the line, and grade.py prints
    the same cause first; report.md and results.json carry it."""
    path = tmp_path / "k_T_numpy.py"
    path.write_text(K_DOT_T.format(imp=XP["numpy"], t="T"))
    out = tmp_path / "out"
    few = ("--examples", "3", "--properties", "oracle:float64,causality,rows sum to 1")
    argv = ["check", f"{path}:single_head_attention", "--profile", "course", *few]
    code, stdout, _ = run_cli([*argv, "--output-dir", str(out)], capsys)
    assert code == 1
    doc = json.loads((out / "results.json").read_text())
    import jsonschema

    jsonschema.validate(doc, SCHEMA)
    assert doc["settings"]["batch"] == "any"
    (cause,) = doc["targets"][0]["causes"]
    assert cause["cause"].startswith(f"{TRANSPOSE} (k_T_numpy.py, line 7: `s = q @ k.T")
    assert "raises ValueError on x (B, T, C)" in cause["cause"]
    assert cause["properties"] == ["oracle:float64", "causality", "rows sum to 1"]
    lines = stdout.splitlines()
    cause_at = next(i for i, line in enumerate(lines) if line.startswith("  cause: "))
    rows_at = next(i for i, line in enumerate(lines) if line.startswith("  FAIL "))
    assert lines[cause_at].startswith(f"  cause: {TRANSPOSE}"), stdout
    assert cause_at < rows_at, stdout  # at the top, above the rows
    assert stdout.count("looks like: the cause above") == 3  # every row folded
    assert f"- **cause**: {TRANSPOSE}" in (out / "report.md").read_text()

    monkeypatch.setattr(grade, "CHECK_OUTPUT", tmp_path / "graded")
    monkeypatch.setattr(grade, "CHECK_ARGS", few)
    text = path.read_text()
    passed, printed = graded(tmp_path, capsys, "02_single_head", "numpy", text, "k_T")
    assert not passed
    first = printed.splitlines()[0]
    assert first.endswith(f"FAIL {cause['cause']}"), printed


MULTI_K_DOT_T = """import math
import numpy as np


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads):
    *B, T, C = x.shape
    H, D = n_heads, C // n_heads
    q, k, v = (np.swapaxes((x @ w).reshape(*B, T, H, D), -3, -2)
               for w in (w_q, w_k, w_v))
    scores = q @ k.T / math.sqrt(D)
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return np.swapaxes(weights @ v, -3, -2).reshape(*B, T, C) @ w_o, weights
"""


def test_k_dot_t_of_the_heads_is_named_first_in_exercise_3(
    tmp_path, capsys, monkeypatch
):
    """In the multi-head form `k.T` of (..., H, T, D) raises on most shapes,
    batched or not: the cause is the line, first, and the only FAIL."""
    monkeypatch.setattr(grade, "CHECK_OUTPUT", tmp_path / "graded")
    monkeypatch.setattr(grade, "CHECK_ARGS", ("--examples", "3", "--skip", "scale"))
    text = MULTI_K_DOT_T
    passed, out = graded(tmp_path, capsys, "03_multi_head", "numpy", text, "heads")
    lines = out.split(": triptych check ")[0].splitlines()
    assert not passed
    assert f"FAIL {TRANSPOSE} (heads_numpy.py, line 10: `scores = q @ k.T" in lines[0]
    assert sum(" FAIL " in line for line in lines) == 1, out


WINDOWED = """import math
import numpy as np


def attention(x, w_q, w_k, w_v, w_o, n_heads, window=None):
    *B, T, C = x.shape
    H, D = n_heads, C // n_heads
    q, k, v = (np.swapaxes((x @ w).reshape(*B, T, H, D), -3, -2)
               for w in (w_q, w_k, w_v))
    i, j = np.arange(T)[:, None], np.arange(T)
    allowed = (j <= i) & {window}
    s = np.where(allowed, q @ np.swapaxes(k, -1, -2) / math.sqrt(D), -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return np.swapaxes(e / e.sum(-1, keepdims=True) @ v, -3, -2).reshape(*B, T, C) @ w_o
"""


def test_a_class_grade_gives_each_row_its_cause_in_words(tmp_path, capsys):
    """One row per student: the cause of each failure in words, in the
    table, grade.csv and grade.md; a target written for a window and graded
    without --window says so, whether it runs (alice) or raises (bob)."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.py").write_text(
        WINDOWED.format(window="((i - j < window) if window else True)")
    )
    (folder / "bob.py").write_text(WINDOWED.format(window="(i - j < window)"))
    (folder / "carol.py").write_text(
        K_DOT_T.format(imp=XP["numpy"], t="T").replace("single_head_", "")
    )
    out = tmp_path / "out"
    options = ["--grade", "--profile", "course", "--examples", "2"]
    options += ["--properties", "oracle:float64,causality", "--output-dir", str(out)]
    code, stdout, _ = run_cli(["check", f"{folder}/*.py:attention", *options], capsys)
    assert code == 2  # bob cannot be checked
    rows = {line.split()[0]: line for line in stdout.splitlines()[1:4]}
    needs = "variant unchecked: needs --window W"
    assert rows["alice"].split()[1:4] == ["PASS", "PASS", "2/2"]
    assert rows["alice"].endswith(needs)
    assert needs in rows["bob"] and "raises without a variant option" in rows["bob"]
    assert f"f64, causal: {TRANSPOSE} (carol.py, line 7" in rows["carol"]
    with (out / "grade.csv").open() as f:
        found = {Path(r["target"]).stem.split(".")[0]: r for r in csv.DictReader(f)}
    assert found["carol"]["why"].startswith(f"f64, causal: {TRANSPOSE}")
    assert found["alice"]["why"] == needs
    markdown = (out / "grade.md").read_text()
    assert "| score | why |" in markdown and f"| 2/2 | {needs} |" in markdown


def test_a_misspelt_function_is_one_line_on_stderr_and_nothing_else(tmp_path, capsys):
    """No process, no verdict on stdout, exit 2, the output folder untouched."""
    good = tmp_path / "good.py"
    good.write_text("def attention(x, w_q, w_k, w_v, w_o, n_heads):\n    return x\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    argv = ["check", f"{good}:atention", "--output-dir", str(out)]
    code, stdout, stderr = run_cli(argv, capsys)
    assert (code, stdout) == (2, "")
    assert stderr == (
        f"triptych check: error: {good}:atention: {good} has no atention (did you "
        "mean attention?)\n"
    )
    assert [p.name for p in out.iterdir()] == ["results.json"]
    assert (out / "results.json").read_text() == "{}"


def test_a_name_bound_anywhere_is_never_called_missing(tmp_path):
    """The source read without importing it: a name an import, a try, a
    loop or a star import may bind is left to the import to find."""
    path = tmp_path / "m.py"
    for source in (
        "try:\n    from a import attention\nexcept ImportError:\n    attention = 1\n",
        "if True:\n    def attention():\n        pass\n",
        "for attention in []:\n    pass\n",
        "from somewhere import *\n",
        "globals()['attention'] = print\n",
        "def broken(:\n",  # a SyntaxError: the import says so
    ):
        path.write_text(source)
        assert missing(f"{path}:attention") is None, source
    path.write_text("import numpy as np\n\ndef attend():\n    pass\n")
    assert missing(f"{path}:attention") == (
        f"{path}:attention: {path} has no attention (did you mean attend?)"
    )
    assert missing("impl_numpy:atention") is None  # a module: for the import


HINTS = """import numpy as np


def batched_k(x, w):
    k = x @ w
    return x @ k.T


def batched_product(x, w):
    return (x @ w).T @ x


def two_d(x, w):
    return x.astype("U1") @ w.T
"""


def test_a_raise_names_t_only_where_its_array_has_three_axes(tmp_path):
    """`.T` on the line that raised is named where what it transposes has 3
    axes or more (or cannot be told from the line), never for a 2-D weight."""
    import importlib.util

    from triptych.check.causes import raised_hint

    path = tmp_path / "hints.py"
    path.write_text(HINTS)
    spec = importlib.util.spec_from_file_location("hints", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, w = np.ones((2, 3, 4)), np.ones((4, 4))
    found = {}
    for name, args in [("batched_k", (x, w)), ("batched_product", (x, w)),
                       ("two_d", (np.ones((3, 4)), w))]:  # fmt: skip
        try:
            getattr(module, name)(*args)
        except Exception as error:
            found[name] = raised_hint(error)
    assert found["batched_k"] == f"{TRANSPOSE} (hints.py, line 6: `return x @ k.T`)"
    assert found["batched_product"].startswith(f"{TRANSPOSE} (hints.py, line 10:")
    assert found["two_d"] is None
