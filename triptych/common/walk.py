"""Running a backend's lesson file step by step: the lesson of `impl_<backend>`
on a fixture under a line tracer, recording what each step's lines made.
`triptych lab` prints it, `triptych read` puts it beside the code.

The steps come from the lesson's own source (`shared.steps.steps_of`), so a
walk shows exactly the lines of the file, and the values come from the real
call: edit the lesson and the walk follows.
"""

from __future__ import annotations

import ast
import importlib
import sys
from dataclasses import dataclass

from triptych.common import backends


@dataclass(frozen=True)
class Made:
    """An array that a step's lines made: its name, shape and NumPy value."""

    name: str
    shape: tuple[int, ...]
    value: object  # np.ndarray


@dataclass(frozen=True)
class StepRun:
    """One step of the lesson as it ran: its source lines and what they made."""

    step: object  # shared.steps.Step
    made: tuple[Made, ...]


@dataclass(frozen=True)
class Walk:
    """A backend's lesson, run on the tiny preset.

    Attributes:
        backend: "numpy", "torch" or "jax".
        function: the lesson's function that ran.
        path: its file, relative to the repository (e.g. impl_jax/lesson.py).
        args: the framework arrays it was given (x, w_q, w_k, w_v[, w_o, H]).
        steps: the seven steps, as they ran.
        out, weights: what it returned, as NumPy arrays.
    """

    backend: str
    function: object
    path: str
    args: tuple
    steps: tuple[StepRun, ...]
    out: object
    weights: object


def lesson_of(name: str):
    """The module impl_<name>.lesson (BackendMissingError if not installed)."""
    backends.load_backend(name)
    return importlib.import_module(f"impl_{name}.lesson")


def lesson_inputs(
    name: str, fixture, dtype: str, multi: bool, head: int | None = None
) -> tuple:
    """The arguments of the lesson's function, as the backend's arrays: for one
    head, the columns of `head` (or, if None, the whole projections, D = C)."""
    from triptych.common.trained import head_columns

    backend = backends.load_backend(name)
    if multi:
        arrays = (fixture.x, *fixture.params.values())
        return (
            *(backend.from_numpy(a, dtype) for a in arrays),
            fixture.preset.n_heads,
        )
    weights = (
        (fixture.w_q, fixture.w_k, fixture.w_v)
        if head is None
        else head_columns(fixture, head)
    )
    return tuple(backend.from_numpy(a, dtype) for a in (fixture.x, *weights))


def walk(
    name: str, fixture, dtype: str, *, multi: bool = False, head: int | None = None
) -> Walk:
    """Run the lesson of backend `name` on `fixture`, step by step (one head:
    the columns of `head`, or all of them as one head of D = C if None)."""
    from shared.steps import steps_of

    backend = backends.load_backend(name)
    lesson = lesson_of(name)
    function = lesson.multi_head_attention if multi else lesson.single_head_attention
    args = lesson_inputs(name, fixture, dtype, multi, head)
    (out, weights), after = run_traced(function, args)
    steps = []
    for step in steps_of(function):
        made = []
        if step.lines:
            values = after(step.lines[-1][0])
            for target in assigned_names(line for _, line in step.lines):
                value = backend.to_numpy(values[target])
                made.append(Made(target, tuple(value.shape), value))
        steps.append(StepRun(step, tuple(made)))
    path = f"impl_{name}/lesson.py"
    return Walk(
        name,
        function,
        path,
        args,
        tuple(steps),
        backend.to_numpy(out),
        backend.to_numpy(weights),
    )


def run_traced(function, args):
    """Call function(*args) under a line tracer.

    Returns:
        What it returned, and `after(line)`: the function's local variables
        just after that line of its source ran (the lesson has no loops, so
        each line runs once).
    """
    code = function.__code__
    snapshots: list[tuple[int, dict]] = []  # (line about to run, locals then)

    def local_tracer(frame, event, arg):
        if event in ("line", "return"):
            line = frame.f_lineno if event == "line" else sys.maxsize
            snapshots.append((line, dict(frame.f_locals)))
        return local_tracer

    def tracer(frame, event, arg):
        return local_tracer if frame.f_code is code else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        result = function(*args)
    finally:
        sys.settrace(previous)

    def after(line: int) -> dict:
        return next(values for at, values in snapshots if at > line)

    return result, after


def assigned_names(lines) -> list[str]:
    """The names that lines of code assign, in order, each once."""
    names: list[str] = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
    return list(dict.fromkeys(names))
