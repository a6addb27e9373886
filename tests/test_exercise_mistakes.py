"""The grader's diagnoses: submissions written for this test, each with one
classic mistake, in each framework, fail with the cause in words (exercises
4 to 6: exercises/diagnose.py), and the right version of the same file
passes, so a diagnosis is never the template's fault. Exercise 2's `k.T`
fails because grade.py asks check for batched x; exercise 5 refuses the
framework's autodiff."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import name_of

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exercises"))
import diagnose  # noqa: E402 (exercises/diagnose.py)
import grade  # noqa: E402 (exercises/grade.py)

XP = {"numpy": "import numpy as xp", "torch": "import torch as xp",
      "jax": "import jax.numpy as xp"}  # fmt: skip
COPY = {"numpy": "{0}.copy()", "torch": "{0}.clone()", "jax": "{0}"}
WRITE = {  # write row t of an (H, L, D) cache: in place, or JAX's new array
    "numpy": "{0}[:, t] = {1}",
    "torch": "{0}[:, t] = {1}",
    "jax": "{0} = {0}.at[:, t].set({1})",
}

ONLINE = """{imp}

def online_softmax_step(state, q_block, k_block, v_block, future):
    m, l, acc = state
    s = q_block @ k_block.mT
    if future is not None:
        s = xp.where({future}, float("-inf"), s)
    new_m = xp.maximum(m, xp.amax(s, -1))
    grow = xp.exp(m - new_m)
    p = xp.exp(s - new_m[:, None])
    return new_m, {l} + p.sum(-1), {acc} + p @ v_block
"""
RIGHT_ONLINE = {"future": "future", "l": "l * grow", "acc": "acc * grow[:, None]"}
ONLINE_MISTAKES = {
    "no rescale": {"l": "l", "acc": "acc"},
    "acc not rescaled": {"acc": "acc"},
    "mask inverted": {"future": "~future"},
}

BACKWARD = """import math

def attend_backward(q, k, v, weights, d_out, scale):
    D = q.shape[-1]
    d_P = d_out @ v.mT
    d_v = weights.mT @ d_out
    d_S = {d_S}
    if scale:
        d_S = d_S / {root}
    return d_S @ k, {d_k}, d_v
"""
RIGHT_BACKWARD = {
    "d_S": "weights * (d_P - (d_P * weights).sum(-1, keepdims=True))",
    "root": "math.sqrt(D)",
    "d_k": "d_S.mT @ q",
}
BACKWARD_MISTAKES = {
    "no rowsum": {"d_S": "weights * d_P"},
    "scale times": {"root": "(1 / math.sqrt(D))"},
    "d_k untransposed": {"d_k": "d_S @ q"},
}

DECODE = """import math
{imp}
from impl_{framework}.kv_cache import KVCache

def decode_step(x_t, cache, w_q, w_k, w_v, w_o, n_heads):
    (C,) = x_t.shape
    H, L, D = cache.k.shape
    q = (x_t @ w_q).reshape(H, 1, D)
    k, v = (x_t @ w_k).reshape(H, D), (x_t @ w_v).reshape(H, D)
    t = int(cache.length)
    k_cache, v_cache = {copy_k}, {copy_v}
    {write_k}
    {write_v}
    filled = xp.arange(L) {filled}
    s = q @ k_cache.mT / math.sqrt({width})
    s = xp.where(filled, s, float("-inf"))
    e = xp.exp(s - xp.amax(s, -1, keepdims=True))
    out = (e / e.sum(-1, keepdims=True)) @ v_cache
    return out.reshape(C) @ w_o, KVCache(k_cache, v_cache, cache.length + 1)
"""
RIGHT_DECODE = {"filled": "<= t", "width": "D"}
DECODE_MISTAKES = {
    "empty slots": {"filled": ">= 0"},
    "own slot masked": {"filled": "< t"},
    "scale sqrt(C)": {"width": "C"},
}


def source(exercise: str, framework: str, mistake: dict | None) -> str:
    """A submission to `exercise` in `framework`: right, or with `mistake`
    (a dict of the template's fields that change)."""
    if exercise == "04_online_softmax":
        fields = {**RIGHT_ONLINE, **(mistake or {})}
        return ONLINE.format(imp=XP[framework], **fields)
    if exercise == "05_softmax_backward":
        return BACKWARD.format(**{**RIGHT_BACKWARD, **(mistake or {})})
    fields = {**RIGHT_DECODE, **(mistake or {})}
    return DECODE.format(
        imp=XP[framework],
        framework=framework,
        copy_k=COPY[framework].format("cache.k"),
        copy_v=COPY[framework].format("cache.v"),
        write_k=WRITE[framework].format("k_cache", "k"),
        write_v=WRITE[framework].format("v_cache", "v"),
        **fields,
    )


CASES = [
    ("04_online_softmax", ONLINE_MISTAKES, diagnose.ONLINE),
    ("05_softmax_backward", BACKWARD_MISTAKES, diagnose.BACKWARD),
    ("06_kv_cache", DECODE_MISTAKES, diagnose.DECODE),
]


def graded(tmp_path, capsys, exercise, framework, text, name="answer"):
    path = tmp_path / f"{name}_{framework}.py"
    path.write_text(text)
    here = os.getcwd()
    os.chdir(tmp_path)  # the file's name as a student's, short
    try:
        passed = grade.grade_file(path, exercise, framework)
    finally:
        os.chdir(here)
    out = capsys.readouterr().out
    # every line, check's report under the grade's too, fits 80 columns (but
    # the paths check wrote, this test's long temporary ones)
    lines = [line for line in out.splitlines() if not line.strip().startswith("wrote ")]
    assert all(len(line) <= 80 for line in lines), out
    return passed, unwrapped(out)


def unwrapped(out: str) -> str:
    """The grade's lines as printed before wrapping: each continuation (four
    spaces, no file name) joined to the line above."""
    lines: list[str] = []
    for line in out.splitlines():
        if line.startswith("    ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("exercise", "mistakes", "causes"), CASES)
def test_each_mistake_fails_with_its_cause_first(
    backend, tmp_path, capsys, exercise, mistakes, causes
):
    framework = name_of(backend)
    passed, out = graded(tmp_path, capsys, exercise, framework, source(
        exercise, framework, None))  # fmt: skip
    assert passed, out
    for name, fields in mistakes.items():
        text = source(exercise, framework, fields)
        passed, out = graded(tmp_path, capsys, exercise, framework, text, "broken")
        lines = out.splitlines()
        cause = causes[name].format(**diagnose.WORDS[framework])
        assert not passed and lines[0].endswith(f"FAIL {cause}"), (name, out)
        # the rows the cause explains are folded under it, no FAIL of their own
        assert sum("FAIL" in line for line in lines) == 1, out
        assert all("    " in line for line in lines[1:]), out


def test_the_rowsum_over_the_wrong_axis_is_named_in_the_framework_s_words(
    backend, tmp_path, capsys
):
    framework = name_of(backend)
    keep = {"numpy": "sum(-2, keepdims=True)", "jax": "sum(-2, keepdims=True)",
            "torch": "sum(-2, keepdim=True)"}[framework]  # fmt: skip
    d_S = f"weights * (d_P - (d_P * weights).{keep})"
    text = source("05_softmax_backward", framework, {"d_S": d_S})
    passed, out = graded(tmp_path, capsys, "05_softmax_backward", framework, text)
    assert not passed
    assert diagnose.WORDS[framework]["keep"] in out.splitlines()[0]


@pytest.mark.parametrize(
    ("framework", "line"),
    [
        ("jax", "import jax\n_, pullback = jax.vjp(lambda v: v, q)"),
        ("jax", "from jax import vjp\n_, pullback = vjp(lambda v: v, q)"),
        ("torch", "import torch\ng = torch.autograd.grad(q.sum(), q)"),
        ("torch", "q.requires_grad_()\nq.sum().backward()"),
        ("numpy", "from impl_numpy.backward import attend_backward as mine"),
    ],
)
def test_exercise_5_refuses_autodiff_and_the_library(tmp_path, capsys, framework, line):
    body = "\n".join("    " + part for part in line.splitlines())
    text = source("05_softmax_backward", "numpy", None).replace(
        "    D = q.shape[-1]\n", f"{body}\n    D = q.shape[-1]\n"
    )
    passed, out = graded(tmp_path, capsys, "05_softmax_backward", framework, text)
    assert not passed
    (first,) = out.splitlines()
    assert "exercise 5 is by hand" in first and "line " in first


def test_the_same_right_answer_in_every_framework_has_no_cause():
    """The hand-written backward's names are not autodiff's."""
    text = source("05_softmax_backward", "numpy", None)
    assert diagnose.autodiff_in(text) is None


K_DOT_T = """import math
{imp}

def single_head_attention(x, w_q, w_k, w_v):
    T, D = x.shape[-2], w_q.shape[-1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.{t} / math.sqrt(D)
    causal = xp.tril(xp.ones((T, T), dtype=bool))
    s = xp.where(causal, s, float("-inf"))
    e = xp.exp(s - xp.amax(s, -1, keepdims=True))
    weights = e / e.sum(-1, keepdims=True)
    return weights @ v, weights
"""


def test_k_dot_t_fails_exercise_1_on_batched_x(backend, tmp_path, capsys, monkeypatch):
    """The exercise promises x (..., T, C): grade.py asks check for it
    (`--batch any`), where `k.T` reverses every axis, not the last two; the
    cause comes first, once, for every property the raise fails."""
    framework = name_of(backend)
    out = ["--output-dir", str(tmp_path / "out"), "--examples", "10"]
    path = tmp_path / f"k_mT_{framework}.py"
    path.write_text(K_DOT_T.format(imp=XP[framework], t="mT"))
    assert grade.check(f"{path}:single_head_attention", *out)
    capsys.readouterr()
    monkeypatch.setattr(grade, "CHECK_OUTPUT", tmp_path / "graded")
    text = K_DOT_T.format(imp=XP[framework], t="T")
    passed, out = graded(tmp_path, capsys, "02_single_head", framework, text, "k_T")
    lines = out.splitlines()
    assert not passed
    assert "raises" in lines[0] and "`.T` reverses every axis" in lines[0], out
    assert lines[1].split(": ", 1)[1].strip().startswith("explains oracle:float64")
    assert sum(": FAIL " in line for line in lines) == 1, out


def test_the_lesson_scores_full_marks_in_every_framework(backend, tmp_path, capsys):
    """A SKIP that does not apply (NumPy's gradients) is out of the score: the
    same right answer scores passed == of in NumPy, PyTorch and JAX."""
    import csv

    framework = name_of(backend)
    target = f"impl_{framework}/lesson.py:single_head_attention"
    options = ["--grade", "--examples", "5", "--output-dir", str(tmp_path)]
    assert grade.check(target, *options)
    capsys.readouterr()
    with (tmp_path / "grade.csv").open() as f:
        (row,) = csv.DictReader(f)
    assert row["passed"] == row["of"] and row["score"] == f"{row['of']}/{row['of']}"
    fixed = ("target", "status", "score", "passed", "of", "why", "error")
    marks = [v for k, v in row.items() if k not in fixed and not k.endswith(": why")]
    assert int(row["of"]) == len(marks) - marks.count("SKIP")
