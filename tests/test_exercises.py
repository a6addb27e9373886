"""exercises/: the lessons (and the library's functions) are the solutions
and pass the grader; every skeleton fails it, in every framework; a wrong
answer that runs fails it too. Exercises 1 to 3 are graded by `triptych check
--profile course`: that the lessons pass it in every framework is
tests/test_numpy_check.py's, tests/test_torch_check.py's and
tests/test_jax_check.py's (here: NumPy's, through the grader's call)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import name_of

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
sys.path.insert(0, str(EXERCISES))
import grade  # noqa: E402 (exercises/grade.py, a script beside the exercises)


def skeleton(exercise: str, framework: str) -> Path:
    (path,) = (EXERCISES / exercise).glob(f"*_{framework}.py")
    return path


def solution(exercise: str, framework: str):
    """The project's own answer: the library's function for exercises 4 to 6
    (NumPy's hand-written backward runs unchanged on torch's and JAX's arrays)."""
    if exercise == "05_softmax_backward":
        return importlib.import_module("impl_numpy.backward").attend_backward
    module = {"04_online_softmax": "blockwise", "06_kv_cache": "kv_cache"}[exercise]
    name, _ = grade.OWN[exercise]
    return getattr(importlib.import_module(f"impl_{framework}.{module}"), name)


FRAMEWORK_EXERCISE = ("torch", "jax")
"""Exercise 7 asks what a framework adds: none in NumPy."""
SAME_IN_ALL = [e for e in grade.OWN if e != "07_framework"]


def test_seven_exercises_each_in_its_frameworks_with_hints():
    folders = sorted(p.name for p in EXERCISES.iterdir() if p.is_dir())
    folders = [f for f in folders if f[:2].isdigit()]
    assert folders == sorted([*grade.CHECKED, *grade.OWN]) and len(folders) == 7
    for folder in folders:
        assert (EXERCISES / folder / "README.md").read_text().count("Hint") >= 1
        frameworks = (
            FRAMEWORK_EXERCISE if folder == "07_framework" else grade.FRAMEWORKS
        )
        for framework in frameworks:
            text = skeleton(folder, framework).read_text()
            assert "raise NotImplementedError" in text and "grade.py" in text


@pytest.mark.parametrize("exercise", SAME_IN_ALL)
def test_the_solution_passes_and_the_skeleton_fails(backend, exercise):
    framework = name_of(backend)
    assert (
        grade.grade_function(exercise, solution(exercise, framework), framework) == []
    )
    name, _ = grade.OWN[exercise]
    answer = getattr(grade.load(skeleton(exercise, framework)), name)
    (why,) = grade.grade_function(exercise, answer, framework)
    assert why.startswith("not implemented yet: ")


def test_the_check_graded_skeletons_raise(backend):
    framework = name_of(backend)
    for exercise, name in grade.CHECKED.items():
        function = getattr(grade.load(skeleton(exercise, framework)), name)
        x = backend.from_numpy(np.ones((3, 4)), "float32")
        w = backend.from_numpy(np.eye(4), "float32")
        args = (x, w, w, w) if name == "single_head_attention" else (x, w, w, w, w, 2)
        with pytest.raises(NotImplementedError, match=r"README\.md"):
            function(*args)


def test_check_grades_the_lessons_pass_and_a_skeleton_fail(tmp_path, capsys):
    out = ["--output-dir", str(tmp_path)]
    assert grade.check("impl_numpy/lesson.py:single_head_attention", *out)
    assert grade.check("impl_numpy/lesson.py:multi_head_attention", *out)
    target = f"{skeleton('01_causal_mask', 'numpy')}:single_head_attention"
    assert not grade.check(target, *out)
    assert "NotImplementedError: step 5: the causal mask" in capsys.readouterr().out


def test_a_wrong_answer_that_runs_fails_with_why():
    """An online softmax that forgets to rescale what it summed under the old max."""
    from impl_numpy.blockwise import online_softmax_step

    def no_rescale(state, q_block, k_block, v_block, future):
        m, _, _ = state
        new_m, row_sum, acc = online_softmax_step(
            state, q_block, k_block, v_block, future
        )
        return new_m, row_sum * np.exp(new_m - np.where(np.isinf(m), new_m, m)), acc

    failures = grade.grade_function("04_online_softmax", no_rescale, "numpy")
    assert failures[0].startswith("the first query block (one key block")
    assert "beyond float32's tolerance" in failures[1]
    assert failures[1].startswith(grade.FOLD)  # a row under its cause


def test_only_the_skeletons_own_raise_is_not_implemented_yet(tmp_path):
    """The probe runs the answer in a child process: a NotImplementedError
    raised outside the file (a library's) and a file that does not import are
    for check to name, not "not implemented yet"."""
    head = "def single_head_attention(x, w_q, w_k, w_v):\n"
    library = "    exec(compile('raise NotImplementedError', 'lib.py', 'exec'))\n"
    answers = {
        "own": head + "    raise NotImplementedError('step 5: mine')\n",
        "library": head + "    assert NotImplementedError\n" + library,
        "broken": head + "    return NotImplementedError(0) +\n",
    }
    found = {}
    for name, text in answers.items():
        path = tmp_path / f"{name}_numpy.py"
        path.write_text(text)
        found[name] = grade.unfinished(path, "01_causal_mask", "numpy")
    assert found == {"own": "step 5: mine", "library": None, "broken": None}


def test_an_answer_whose_code_never_names_not_implemented_starts_no_probe(
    tmp_path, monkeypatch
):
    """No child for a finished answer (whose docstring may still name the
    error) or one that does not parse: check finds what is wrong with it."""
    import skeleton  # exercises/skeleton.py, as grade.py imports it

    def no_child(*args, **kwargs):
        raise AssertionError("a probe was started")

    monkeypatch.setattr(skeleton.subprocess, "run", no_child)
    head = "def single_head_attention(x, w_q, w_k, w_v):\n"
    answers = {
        "done": head + '    """Replace each raise NotImplementedError."""\n'
        "    return x, x  # no NotImplementedError left\n",
        "library": head
        + "    exec(compile('raise NotImplementedError', 'lib.py', 'exec'))\n",
        "broken": head + "    raise NotImplementedError(\n",
    }
    for name, text in answers.items():
        path = tmp_path / f"{name}_numpy.py"
        path.write_text(text)
        assert grade.unfinished(path, "01_causal_mask", "numpy") is None, name


def test_the_command_line_exit_codes(capsys):
    path = skeleton("06_kv_cache", "numpy")
    assert grade.main([str(path)]) == 1
    assert "FAIL not implemented yet: " in capsys.readouterr().out
    # a skeleton that check grades: one line too, not every property failing
    assert grade.main([str(skeleton("01_causal_mask", "numpy"))]) == 1
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80  # one grade, wrapped at 80
    assert " ".join(out.split()).endswith(
        "FAIL not implemented yet: step 5: the causal mask, see README.md"
    )
    assert grade.main([str(ROOT / "README.md")]) == 2
    assert "not an exercise file" in capsys.readouterr().err
    assert grade.main(["--help"]) == 0  # the usage, not "not an exercise file"
    assert capsys.readouterr().out.startswith("Grade an exercise: python exercises")


def test_a_copy_outside_the_repository_is_graded_by_its_folder(tmp_path, capsys):
    """A class's submissions kept elsewhere, in folders named as the exercises'."""
    copy = tmp_path / "alice" / "01_causal_mask" / "causal_mask_numpy.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(skeleton("01_causal_mask", "numpy").read_text())
    assert grade.main([str(copy)]) == 1
    out = capsys.readouterr().out
    assert " ".join(out.split()).endswith(
        "FAIL not implemented yet: step 5: the causal mask, see README.md"
    )
