"""Exercises 1 to 3 through exercises/grade.py: a submission written for
this test makes each mistake of check's catalogue (triptych/check/mistakes/
known.py) that a student can make in these exercises, in each framework,
and fails with the catalogue's diagnosis among the causes printed first.
The right version of the same template passes, so no failure is the
template's. (Not here: `batch flattened`, which needs a reshape across the
batch that these signatures make awkward to write, and the variants'.)"""

from __future__ import annotations

import re
import sys

import pytest
from helpers import name_of
from test_exercise_mistakes import XP, graded

from triptych.check.mistakes.known import BY_NAME, FILL

grade = sys.modules["grade"]  # exercises/grade.py, as test_exercise_mistakes loads it

SINGLE = """import math
{imp}

def single_head_attention(x, w_q, w_k, w_v):
    T, D = x.shape[-2], w_q.shape[-1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.mT {scale}
    causal = {mask}
    masked = xp.where(causal, s, {fill})
    e = xp.exp(masked - xp.amax(masked, {axis}, keepdims=True))
    weights = {weights}
    return weights @ v, weights
"""
RIGHT_SINGLE = {
    "scale": "/ math.sqrt(D)",
    "mask": "xp.tril(xp.ones((T, T), dtype=bool))",
    "fill": 'float("-inf")',
    "axis": "-1",
    "weights": "e / e.sum({axis}, keepdims=True)",
}
MULTI = """import math
{imp}

def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads):
    *B, T, C = x.shape
    H, D = n_heads, C // n_heads
    q, k, v = {project}
    q, k, v = ({split} for a in (q, k, v))
    s = q @ k.mT / math.sqrt({width})
    s = xp.where(xp.tril(xp.ones((T, T), dtype=bool)), s, float("-inf"))
    e = xp.exp(s - xp.amax(s, -1, keepdims=True))
    weights = e / e.sum(-1, keepdims=True)
    out = {merge}
    return out @ {wo}, weights
"""
RIGHT_MULTI = {
    "project": "x @ w_q, x @ w_k, x @ w_v",
    "split": "a.reshape(*B, T, H, D).swapaxes(-3, -2)",
    "width": "D",
    "merge": "(weights @ v).swapaxes(-3, -2).reshape(*B, T, C)",
    "wo": "w_o",
}
DIAGONAL = {"numpy": "k", "jax": "k", "torch": "diagonal"}  # tril's offset
SWAP = {"numpy": "swapaxes", "jax": "swapaxes", "torch": "transpose"}
TRIL = "xp.tril(xp.ones((T, T), dtype=bool), {kw}={k})"
MISTAKES = {  # catalogue name: (exercise, the fields that change)
    "scale missing": ("02_single_head", {"scale": ""}),
    "scale 1/D": ("02_single_head", {"scale": "/ D"}),
    "scale times": ("02_single_head", {"scale": "* math.sqrt(D)"}),
    "query axis": ("02_single_head", {"axis": "-2"}),
    "offset 1": ("01_causal_mask", {"mask": TRIL.replace("{k}", "1")}),
    "diagonal masked": ("01_causal_mask", {"mask": TRIL.replace("{k}", "-1")}),
    "causal reversed": (
        "01_causal_mask",
        {"mask": "xp.triu(xp.ones((T, T), dtype=bool))"},
    ),
    "causal inverted": (
        "01_causal_mask",
        {"mask": TRIL.replace("{k}", "0") + " == False"},
    ),
    "not causal": ("01_causal_mask", {"mask": "xp.ones((T, T), dtype=bool)"}),
    "denominator": (
        "01_causal_mask",
        {"fill": "s", "weights": "xp.where(causal, e, 0) / e.sum(-1, keepdims=True)"},
    ),
    FILL.name: ("01_causal_mask", {"fill": "-1e4"}),
    "transposed": (  # every weight read as (out, in), w_o too
        "03_multi_head",
        {"project": "x @ w_q.mT, x @ w_k.mT, x @ w_v.mT", "wo": "w_o.mT"},
    ),
    "scale 1/sqrt(C)": ("03_multi_head", {"width": "C"}),
    "split": ("03_multi_head", {"split": "a.reshape(*B, H, T, D)"}),
    "merge": ("03_multi_head", {"merge": "(weights @ v).reshape(*B, T, C)"}),
}

SAMPLE = ("causal reversed", "diagonal masked", "merge")
"""The mistakes made in torch and JAX too, those whose lines each framework
spells its own way (triu, tril's offset keyword, transpose or swapaxes): each
a check run of its own, seconds each where JAX compiles; NumPy makes them all,
and a diagnosis is read from the outputs, whoever computed them."""


def source(exercise: str, framework: str, fields: dict) -> str:
    if exercise == "03_multi_head":
        text = MULTI.format(imp=XP[framework], **{**RIGHT_MULTI, **fields})
        return text.replace("swapaxes", SWAP[framework])
    chosen = {**RIGHT_SINGLE, **fields}
    chosen["weights"] = chosen["weights"].format(axis=chosen["axis"])
    chosen["mask"] = chosen["mask"].replace("{kw}", DIAGONAL[framework])
    return SINGLE.format(imp=XP[framework], **chosen)


@pytest.fixture
def grading(tmp_path, monkeypatch):
    monkeypatch.setattr(grade, "CHECK_OUTPUT", tmp_path / "out")
    monkeypatch.setattr(grade, "CHECK_ARGS", ("--examples", "5"))


@pytest.mark.parametrize("exercise", ["02_single_head", "03_multi_head"])
def test_the_right_template_passes(backend, tmp_path, capsys, grading, exercise):
    framework = name_of(backend)
    text = source(exercise, framework, {})
    passed, out = graded(tmp_path, capsys, exercise, framework, text)
    assert passed, out
    # the last line: the verdict and full marks, of what applies in this framework
    won, of = re.search(
        r": (\d+)/(\d+) of the properties that apply: passes\n$", out
    ).groups()
    assert won == of, out


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_catalogue_mistake_fails_with_its_diagnosis(
    backend, tmp_path, capsys, grading, monkeypatch, name
):
    framework = name_of(backend)
    if framework != "numpy" and name not in SAMPLE:
        pytest.skip("NumPy makes every mistake; torch and JAX the sample (time)")
    exercise, fields = MISTAKES[name]
    mistake = FILL if name == FILL.name else BY_NAME[name]
    breaks = {"oracle": "oracle:float32"}.get(mistake.property, mistake.property)
    args = ("--examples", "5", "--properties", breaks)  # the one that names it
    monkeypatch.setattr(grade, "CHECK_ARGS", args)
    text = source(exercise, framework, fields)
    passed, out = graded(tmp_path, capsys, exercise, framework, text, "broken")
    causes = out.split(": triptych check ")[0]
    assert not passed and mistake.text in causes, (name, out)
