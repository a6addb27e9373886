"""Grade an exercise: python exercises/grade.py FILE [FILE ...]

FILE is an exercise's file, exercises/NN_name/name_<framework>.py. Exercises
1 to 3 are graded by `triptych check --profile course` (docs/check.md:
every property a student must get right, on x (..., T, C), with a diagnosis
of the known mistakes), each of check's causes printed once and first,
check's report under it; 4 to 7 have no signature that check knows, and are graded here:
the function is run in its framework, in float32, on a seeded problem, and
compared with the float64 oracle of shared/ (shared/reference.py) within
float32's tolerance (shared/tolerances.py), the cause of a failure named by
exercises/diagnose.py (4 to 6) or exercises/frameworks.py (7).

Exit code 0 every file passes, 1 one does not, 2 a file that is not an
exercise. The answer key is the teacher's (docs/teaching.md#answer-key).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import math
import os
import sys
import textwrap
from pathlib import Path
from unittest import mock

import numpy as np

from shared import registry
from shared.reference import reference_multi_head, reference_single_head
from shared.tolerances import tolerance

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diagnose  # exercises/diagnose.py, beside this script
import frameworks  # exercises/frameworks.py: exercise 7
from skeleton import unfinished  # exercises/skeleton.py: the skeleton as handed out

HERE = Path(__file__).resolve().parent
FRAMEWORKS = registry.names()  # an exercise file is name_<backend>.py
CHECKED = {  # exercise folder: the function triptych check grades
    "01_causal_mask": "single_head_attention",
    "02_single_head": "single_head_attention",
    "03_multi_head": "multi_head_attention",
}
DTYPE = "float32"
WIDTH, INDENT = 80, "    "  # a terminal's columns; the lines under a grade's


def load(path: Path):
    """The exercise file as a module, under a name of its own."""
    name = f"exercise_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exercise_of(path: Path) -> tuple[str, str]:
    """(the exercise's folder name, the framework) of an exercise file, here
    or a copy elsewhere (a class's submissions) in a folder of the same name."""
    framework = path.stem.rsplit("_", 1)[-1]
    if path.parent.name not in {*CHECKED, *OWN} or framework not in FRAMEWORKS:
        raise ValueError(
            f"{path}: not an exercise file (exercises/NN_name/name_<framework>.py)"
        )
    return path.parent.name, framework


def problem(seed: int, T: int = 8, C: int = 16, D: int = 8, H: int = 2):
    """A seeded problem in float64: x (T, C), one head's w_q, w_k, w_v (C, D),
    and the heads' (C, C) weights with w_o."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, C))
    one = [rng.standard_normal((C, D)) / math.sqrt(C) for _ in range(3)]
    full = [rng.standard_normal((C, C)) / math.sqrt(C) for _ in range(4)]
    return x, one, full, H


def close(got, expected, what: str) -> str | None:
    """None if within float32's tolerance of the float64 expectation, else why."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != expected.shape:
        return f"{what}: shape {got.shape}, expected {expected.shape}"
    level = tolerance(DTYPE)
    error = np.abs(got - expected)
    beyond = ~(error <= level.atol + level.rtol * np.abs(expected))
    if beyond.any():
        where = tuple(int(i) for i in np.argwhere(beyond)[0])
        return (
            f"{what}: {int(beyond.sum())} of {beyond.size} entries beyond float32's "
            f"tolerance, first at {where}: {got[where]:.6g}, expected "
            f"{expected[where]:.6g}"
        )
    return None


def online_softmax(step, backend, framework: str) -> list[str]:
    """Exercise 4: `step` folds each key block into the running (m, l, acc) of
    each query block, up to the diagonal; acc / l is attention's output."""
    failures = []
    for seed, block in ((0, 4), (1, 3)):
        x, (w_q, w_k, w_v), _, _ = problem(seed)
        expected, _ = reference_single_head(x, w_q, w_k, w_v)
        D = w_q.shape[1]
        q64, k64, v64 = x @ w_q / math.sqrt(D), x @ w_k, x @ w_v  # q scaled, once
        q, k, v = (backend.from_numpy(a, DTYPE) for a in (q64, k64, v64))
        T, rows = x.shape[0], []
        for start in range(0, T, block):
            qb = q[start : start + block]
            Bq = qb.shape[0]
            state = (
                backend.from_numpy(np.full(Bq, -np.inf), DTYPE),
                backend.from_numpy(np.zeros(Bq), DTYPE),
                backend.from_numpy(np.zeros((Bq, D)), DTYPE),
            )
            for key in range(0, start + Bq, block):
                kb, vb = k[key : key + block], v[key : key + block]
                positions_q = np.arange(start, start + Bq)[:, None]
                positions_k = np.arange(key, key + kb.shape[0])[None, :]
                future = positions_k > positions_q  # True: masked
                future = backend.from_numpy(future) if future.any() else None
                state = step(state, qb, kb, vb, future)
            _, row_sum, acc = (
                np.asarray(backend.to_numpy(a), np.float64) for a in state
            )
            with np.errstate(invalid="ignore", divide="ignore"):
                rows.append(acc / row_sum[:, None])
        got = np.concatenate(rows)
        why = close(got, expected, f"blocks of {block}: acc / l")
        if why:
            cause = diagnose.online(got, q64, k64, v64, block)
            failures += [cause] if cause not in failures else []
            failures.append(FOLD + why)
    return failures


def softmax_backward(attend_backward, backend, framework: str) -> list[str]:
    """Exercise 5: d_q, d_k, d_v of steps 3 to 7 by hand, against the float64
    hand-written backward (impl_numpy/backward.py, held to torch's and JAX's
    autodiff by tests/test_backward.py)."""
    from impl_numpy.backward import attend_backward as reference

    causes, rows = [], []
    for seed, scale in ((0, True), (1, False)):
        x, (w_q, w_k, w_v), _, _ = problem(seed)
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        _, weights = reference_single_head(x, w_q, w_k, w_v, scale=scale)
        d_out = np.random.default_rng(seed + 10).standard_normal(q.shape)
        expected = reference(q, k, v, weights, d_out, scale)
        args = (backend.from_numpy(a, DTYPE) for a in (q, k, v, weights, d_out))
        got = [
            np.asarray(backend.to_numpy(g), np.float64)
            for g in attend_backward(*args, scale)
        ]
        found = []
        for name, g, e in zip(("d_q", "d_k", "d_v"), got, expected, strict=True):
            why = close(g, e, f"scale={scale}: {name}")
            found += [FOLD + why] if why else []
        shapes = [g.shape for g in got] == [e.shape for e in expected]
        if found and shapes:
            problem_ = (q, k, v, weights, d_out)
            for cause in diagnose.by_hand(got, problem_, scale, framework):
                causes += [cause] if cause not in causes else []
        rows += found
    return causes + rows


def kv_cache(decode_step, backend, framework: str) -> list[str]:
    """Exercise 6: decoding token by token from an empty cache gives, row by
    row, the full causal pass."""
    cache_module = importlib.import_module(f"impl_{framework}.kv_cache")
    x, _, (w_q, w_k, w_v, w_o), H = problem(0)
    expected, _ = reference_multi_head(x, w_q, w_k, w_v, w_o, H)
    T, C = x.shape
    cache = cache_module.init_kv_cache((), T, C, H, DTYPE)
    weights = [backend.from_numpy(w, DTYPE) for w in (w_q, w_k, w_v, w_o)]
    rows = []
    for t in range(T):
        out, cache = decode_step(backend.from_numpy(x[t], DTYPE), cache, *weights, H)
        rows.append(np.asarray(backend.to_numpy(out), np.float64))
    length = int(np.asarray(backend.to_numpy(cache.length)))
    got = np.stack(rows)
    why = close(got, expected, "out, token by token")
    failures = [FOLD + why] if why else []
    if length != T:
        failures.append(f"{FOLD}cache.length is {length} after {T} tokens")
    if failures and got.shape == expected.shape:
        failures.insert(0, diagnose.decoding(got, (x, w_q, w_k, w_v, w_o, H)))
    elif failures:
        failures.insert(0, "the output of one token is (C,): merge the heads")
    return failures


FOLD = "  "
"""A row that the cause above it explains starts with FOLD: printed under it."""


def framework_idioms(module, backend, framework: str) -> list[str]:
    """Exercise 7: the file's module, graded by exercises/frameworks.py."""
    grader = frameworks.GRADERS.get(framework)
    if grader is None:
        return ["exercise 7 is for torch or JAX: NumPy has no vmap, jit or autograd"]
    x, _, full, H = problem(0)
    d_out = np.random.default_rng(10).standard_normal(x.shape)
    return grader(module, backend, (x, full, H, d_out), close, FOLD)


OWN = {  # exercise folder: (the function, or None: the file; how it is graded)
    "04_online_softmax": ("online_softmax_step", online_softmax),
    "05_softmax_backward": ("attend_backward", softmax_backward),
    "06_kv_cache": ("decode_step", kv_cache),
    "07_framework": (None, framework_idioms),
}


def grade_function(exercise: str, function, framework: str) -> list[str]:
    """Why `function`, an answer to `exercise` (4 to 6) in `framework`, fails;
    [] when it passes."""
    backend = importlib.import_module(f"impl_{framework}")
    _, how = OWN[exercise]
    try:  # a NaN is for the diagnosis to explain, not a warning to raise
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return how(function, backend, framework)
    except NotImplementedError as error:  # the skeleton, as it was handed out
        return [f"not implemented yet: {error}"]
    except Exception as error:  # a bug
        return [f"raised {type(error).__name__}: {error}"]


def check(target: str, *argv: str) -> bool:
    """True if `checked` passes."""
    return checked(target, *argv) == 0


def checked(target: str, *argv: str) -> int:
    """`triptych check TARGET --profile course`, in this process: its exit
    code (its report goes to stdout, its files to outputs/check/). The
    profile asks for x (..., T, C), as the exercises promise (`--batch
    any`), so `k.T` where `k.mT` belongs fails."""
    from triptych.cli import main as triptych

    return triptych(["check", target, "--profile", "course", *argv])


def grade(path: Path) -> bool:
    """Grade one exercise file, print what was found; True when it passes."""
    exercise, framework = exercise_of(path)
    return grade_file(path, exercise, framework)


def grade_file(path: Path, exercise: str, framework: str) -> bool:
    """Grade `path` as an answer to `exercise` in `framework`: the cause of
    each failure first, the rows it explains under it; True when it passes."""
    shown = os.path.relpath(path)
    if exercise in CHECKED:
        left = unfinished(path, exercise, framework)
        if left is not None:  # one line, not every property failing alike
            say(f"{shown}: FAIL ", f"not implemented yet: {left}")
            return False
        target = f"{shown}:{CHECKED[exercise]}"
        report = io.StringIO()
        # check's report, indented under the grade's lines, fits WIDTH with it
        narrower = {"COLUMNS": str(WIDTH - len(INDENT))}
        with contextlib.redirect_stdout(report), mock.patch.dict(os.environ, narrower):
            code = checked(target, "--output-dir", str(CHECK_OUTPUT), *CHECK_ARGS)
        if code == 2:  # cannot be checked (a name misspelt): said on stderr
            say(f"{shown}: FAIL ", f"check cannot check {target}: see above")
            return False
        passed = code == 0
        results = json.loads((CHECK_OUTPUT / "results.json").read_text())
        for cause in results["targets"][0]["causes"]:  # check's, news first
            say(f"{shown}: FAIL ", cause["cause"])
            say(f"{shown}:     ", f"explains {', '.join(cause['properties'])}")
        say(f"{shown}: ", f"triptych check {target} --profile course")
        print(textwrap.indent(report.getvalue().rstrip(), INDENT))
        verdict = "passes" if passed else "fails"
        say(f"{shown}: ", f"{score(results)} of the properties that apply: {verdict}")
        return passed
    name, _ = OWN[exercise]
    used = diagnose.autodiff_in(path.read_text()) if exercise in BY_HAND else None
    if used:
        title = registry.get(framework).title
        failures = [
            f"exercise 5 is by hand, and {used} hands the backward to "
            f"{title}'s autodiff (or the library's answer): write steps 7 to 3"
        ]
    else:
        answer = load(path) if name is None else getattr(load(path), name)
        failures = grade_function(exercise, answer, framework)
    for i, why in enumerate(failures):
        if why.startswith(FOLD) and i:  # a row the cause above explains
            say(f"{shown}:     ", why.strip())
        else:
            say(f"{shown}: FAIL ", why.strip())
    if not failures:
        what = name or "every part"
        tolerance_ = "the float64 oracle's, within float32's tolerance"
        say(f"{shown}: PASS ", f"{what}: {tolerance_}")
    return not failures


def score(results: dict) -> str:
    """'9/11' of the properties that apply, as `triptych check --grade`
    scores (triptych/check/report.py's `score`)."""
    from triptych.check.report import score as check_score
    from triptych.check.runner import TargetReport

    target = TargetReport(**results["targets"][0])
    return check_score(target, [p["id"] for p in target.properties])


def say(lead: str, text: str) -> None:
    """A line of the grade, `lead` then `text`, wrapped between words at 80
    columns, the rest indented under it."""
    print(textwrap.fill(text, WIDTH - 1, initial_indent=lead, subsequent_indent=INDENT,
                        break_long_words=False, break_on_hyphens=False))  # fmt: skip


CHECK_OUTPUT = Path("outputs/check")
"""Where check writes results.json, read back for the causes."""
CHECK_ARGS: tuple[str, ...] = ()
"""More options for check (the tests ask for fewer examples)."""
BY_HAND = ("05_softmax_backward",)
"""The exercises whose answer may not call the framework's autodiff."""


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if not argv:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    try:
        paths = [Path(a).resolve() for a in argv]
        for path in paths:
            exercise_of(path)
    except ValueError as error:
        from triptych.common.prose import echo  # wrapped on a terminal

        echo(f"grade.py: error: {error}", file=sys.stderr)
        return 2
    results = [grade(path) for path in paths]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
