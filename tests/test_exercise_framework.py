"""Exercise 7, what each framework adds: the teacher's answers
(tests/exercise_answers/) pass the grader, the skeletons fail it, and
answers broken in the classic ways fail with the cause in the framework's
words: no vmap, n_heads traced by jit, gradients not asked of JAX; torch
weights that are no parameters, a forward that breaks on batched x,
gradients that accumulate."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import name_of

ROOT = Path(__file__).resolve().parents[1]
ANSWERS = ROOT / "tests" / "exercise_answers"
sys.path.insert(0, str(ROOT / "exercises"))
import grade  # noqa: E402 (exercises/grade.py)
from test_exercise_mistakes import unwrapped  # noqa: E402 (the grade's lines)

EXERCISE = "07_framework"
BROKEN = {
    "jax": {
        "jax.vmap(one_head)(q, k, v)": (
            "jnp.stack([one_head(q[h], k[h], v[h]) for h in range(H)])",
            "steps 3 to 7 are not mapped over the heads",
        ),
        'jax.jit(multi_head_attention, static_argnames="n_heads")': (
            "jax.jit(multi_head_attention)",
            "jit traces n_heads, and a traced value cannot give a shape",
        ),
        "argnums=(0, 1, 2, 3)": (
            "argnums=(0, 1, 2)",
            "the gradients are not sum(out * d_out)'s",
        ),
        "nnx.Param(jax.random": (
            "(jax.random",
            "w_q, w_k, w_v, w_o are to be nnx.Param",
        ),
    },
    "torch": {
        "nn.Parameter(torch.randn": (
            "(torch.randn",
            "w_q, w_k, w_v, w_o are to be nn.Parameter",
        ),
        "reshape(*B, T, H, D).transpose(-3, -2)": (
            "reshape(T, H, D).transpose(0, 1)",
            "forward breaks on x (B, T, C)",
        ),
        "    module.zero_grad()\n": ("", "a second call doubles the gradients"),
    },
}


def graded(path: Path, framework: str, capsys) -> tuple[bool, list[str]]:
    passed = grade.grade_file(path, EXERCISE, framework)
    return passed, unwrapped(capsys.readouterr().out).splitlines()


@pytest.fixture
def framework(backend):
    name = name_of(backend)
    if name not in BROKEN:
        pytest.skip("exercise 7 is for torch and JAX")
    return name


def test_the_answer_passes_and_the_skeleton_fails(framework, capsys):
    passed, lines = graded(ANSWERS / f"framework_{framework}.py", framework, capsys)
    assert passed, lines
    skeleton = ROOT / "exercises" / EXERCISE / f"framework_{framework}.py"
    passed, lines = graded(skeleton, framework, capsys)
    assert not passed and ": FAIL not implemented yet: " in lines[0]


def test_each_broken_answer_fails_with_its_cause(framework, tmp_path, capsys):
    answer = (ANSWERS / f"framework_{framework}.py").read_text()
    for right, (wrong, cause) in BROKEN[framework].items():
        assert right in answer, right
        path = tmp_path / f"broken_{framework}.py"
        path.write_text(answer.replace(right, wrong))
        passed, lines = graded(path, framework, capsys)
        assert not passed, (right, lines)
        failed = [line for line in lines if ": FAIL " in line]
        assert cause in failed[0], (right, lines)


def test_numpy_has_no_exercise_7(capsys):
    assert grade.grade_function(EXERCISE, None, "numpy")[0].startswith(
        "exercise 7 is for torch or JAX"
    )
