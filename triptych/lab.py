"""`triptych lab`: the lesson file of each backend, run step by step on the toy
sentence, printing its own source.

For each backend, `impl_<backend>/lesson.py` runs on the tiny preset (one head
with D = C = 32, or its four heads with `--multi`) under a line tracer. The lab
prints the lesson's source step by step (the lines under each step comment,
read from the file with `shared.steps.steps_of`), each followed by the shape
and the top-left corner of every array those lines made, taken from the real
run. So the lab and the library are one text: edit the lesson and the lab
prints the edit. Then, per backend:

- the original lab's two invariants, YES or NO: every row of the weights sums
  to 1, and nothing above the diagonal is attended (exactly 0);
- why attention.py is longer than the lesson: a NaN in one token reaches
  every row of the lesson's output, and only the rows that attend it in ours;
- what the framework itself adds: NumPy nothing (it is the plain reference),
  torch the autograd tape, JAX tracing and compiling under `jax.jit`, with
  times measured on this input.

Exit code 1 if an invariant is NO for any backend, 2 for a bad option or a
backend that is not installed.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from dataclasses import dataclass

from triptych.common import backends, status
from triptych.common.walk import Walk, walk

POISONED_TOKEN = 5
"""The token whose embedding the NaN demonstration sets to NaN ('mat')."""


@dataclass(frozen=True)
class Invariant:
    """One of the original lab's checks on the weights, with the number behind it."""

    claim: str
    holds: bool
    evidence: str


def invariants(weights, dtype: str) -> list[Invariant]:
    """The original lab's two invariants on (..., T, T) weights.

    Rows sum to 1 within the tolerance of `dtype` (shared.tolerances); above
    the diagonal every weight is exactly 0.
    """
    import numpy as np

    from shared.tolerances import is_close

    weights = np.asarray(weights, dtype=np.float64)
    row_sums = weights.sum(axis=-1)  # (..., T)
    above = np.triu(weights, k=1)  # (..., T, T), zero on and below the diagonal
    worst_sum = float(np.max(np.abs(row_sums - 1.0)))
    worst_above = float(np.max(np.abs(above)))
    return [
        Invariant(
            "rows sum to 1",
            is_close(row_sums, np.ones_like(row_sums), dtype),
            f"largest |row sum - 1| = {worst_sum:.2g}",
        ),
        Invariant(
            "nothing above the diagonal",
            bool(np.all(above == 0)),
            f"largest weight above it = {worst_above:.2g}",
        ),
    ]


# What the library and each framework add to the lesson -----------------------

POISON_CODE = {
    "numpy": f"x_nan = x.copy(); x_nan[{POISONED_TOKEN}] = np.nan",
    "torch": f"x_nan = x.clone(); x_nan[{POISONED_TOKEN}] = torch.nan",
    "jax": f"x_nan = x.at[{POISONED_TOKEN}].set(jnp.nan)  # a new array: JAX's "
    "are immutable",
}
"""How each framework sets one token of x to NaN: the line the lab runs."""


def poisoned(name: str, x):
    """x with token POISONED_TOKEN set to NaN, by running POISON_CODE[name]."""
    import numpy as np

    namespace = {"x": x, "np": np}
    if name == "torch":
        namespace["torch"] = importlib.import_module("torch")
    if name == "jax":
        namespace["jnp"] = importlib.import_module("jax.numpy")
    exec(POISON_CODE[name], namespace)
    return namespace["x_nan"]


def nan_rows(name: str, walk_: Walk) -> tuple[list[int], list[int]]:
    """The rows of the output that are NaN when token POISONED_TOKEN is NaN:
    (in the lesson, in the backend's attention.py)."""
    import numpy as np

    backend = backends.load_backend(name)
    full = (
        backend.multi_head_attention
        if walk_.function.__name__ == "multi_head_attention"
        else backend.single_head_attention
    )
    args = (poisoned(name, walk_.args[0]), *walk_.args[1:])
    rows = []
    for function in (walk_.function, full):
        out = backend.to_numpy(function(*args)[0])
        rows.append([int(i) for i in np.flatnonzero(np.isnan(out).any(axis=-1))])
    return rows[0], rows[1]


def framework_lines(name: str, walk_: Walk) -> list[str]:
    """What the framework adds to the plain steps, shown on this input."""
    if name == "torch":
        return torch_lines(walk_)
    if name == "jax":
        return jax_lines(walk_)
    return [
        "NumPy is the plain reference: each line ran when Python reached it, on",
        "the CPU, into arrays in memory; no device, no tape, no compiler.",
    ]


def torch_lines(walk_: Walk) -> list[str]:
    """The device and the autograd tape, on the lesson's inputs."""
    x, *weights = walk_.args
    x = x.detach().clone().requires_grad_()  # a leaf of the tape
    out, _ = walk_.function(x, *weights)
    tape = type(out.grad_fn).__name__
    out.sum().backward()
    return [
        f"device: every tensor here is on {x.device}; move x and the weights "
        "with .to('cuda') and the same lines run there.",
        f"autograd: with x.requires_grad_(), each line was recorded: "
        f"out.grad_fn is {tape}; out.sum().backward() filled x.grad "
        f"{tuple(x.grad.shape)}; out.detach() is the same numbers off the tape.",
    ]


def jax_lines(walk_: Walk, calls: int = 20) -> list[str]:
    """Eager against jax.jit on the lesson's inputs: first call, then steady."""
    import jax

    traces = []

    def counted(*args):
        traces.append(tuple(args[0].shape))  # Python runs only while tracing
        return walk_.function(*args)

    multi = len(walk_.args) > 4  # n_heads, the 6th argument, decides a reshape
    jitted = jax.jit(counted, static_argnums=(5,) if multi else ())
    x, *rest = walk_.args
    eager = _first_and_steady(lambda: walk_.function(*walk_.args), calls)
    compiled = _first_and_steady(lambda: jitted(*walk_.args), calls)
    jitted(x[:-1], *rest)  # T - 1: a new shape
    T = x.shape[-2]
    return [
        "jax.jit traces the pure function once per new shape and compiles it "
        f"into one program: {calls + 1} calls with T = {T}, then one with "
        f"T = {T - 1}, traced {len(traces)} times"
        + (" (n_heads is static: it decides a reshape)." if multi else "."),
        f"eager: {_ms(eager[1])} a call (each op dispatched on its own); "
        f"jitted: {_ms(compiled[0])} for the first call (trace and compile), "
        f"then {_ms(compiled[1])} (medians of {calls} calls; they vary by "
        "machine).",
    ]


def _first_and_steady(call, calls: int) -> tuple[float, float]:
    """Seconds of the first call, and the median of `calls` more."""
    import jax

    start = time.perf_counter()
    jax.block_until_ready(call())
    first = time.perf_counter() - start
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


# The command -------------------------------------------------------------------


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "lab",
        help="the lesson of each framework, run step by step on the toy sentence",
        description=(
            "Run each backend's lesson file (impl_<backend>/lesson.py) on the "
            "toy sentence, printing its own source step by step with the shape "
            "and a slice of every array each step made; then the original lab's "
            "two invariants (rows sum to 1; nothing above the diagonal) as "
            "YES/NO, why attention.py is longer than the lesson (a NaN token), "
            "and what the framework adds (torch's autograd tape, JAX's jit).\n\n"
            "exit codes: 0 both invariants hold for every backend, 1 one does "
            "not, 2 bad input or a backend that is not installed"
        ),
    )
    parser.add_argument(
        "--backend",
        choices=(*backends.BACKENDS, "all"),
        default="all",
        help="the framework to walk through; all: every installed one",
    )
    parser.add_argument(
        "--dtype",
        choices=backends.DTYPES,
        default="float32",
        help="the dtype of x and the weights",
    )
    parser.add_argument(
        "--multi",
        action="store_true",
        help="walk multi_head_attention (4 heads) instead of one head",
    )
    parser.set_defaults(func=lab)


def lab(args: argparse.Namespace) -> int:
    """Run the lab for the chosen backends; print; return the exit code."""
    from rich.console import Console

    from shared import PRESETS, make_fixture

    asked = backends.BACKENDS if args.backend == "all" else [args.backend]
    with status.shown(status.loading_text(asked)):
        if args.backend == "all":
            names = backends.installed_backends()
        else:
            backends.load_backend(args.backend)  # missing: one line, exit 2
            names = [args.backend]
    fixture = make_fixture(PRESETS["tiny"])
    console = Console(highlight=False, soft_wrap=True)
    failed = []
    for name in names:
        with status.shown(f"{name}: running impl_{name}/lesson.py step by step") as say:
            walk_ = walk(name, fixture, args.dtype, multi=args.multi)
            checks = invariants(walk_.weights, args.dtype)
            say(f"{name}: the lesson and attention.py on a NaN token")
            poisoned_rows = nan_rows(walk_.backend, walk_)
            say(ADDS.get(name, f"what {name} adds"))
            adds = framework_lines(walk_.backend, walk_)
        print_walk(console, walk_, fixture, args.dtype, checks, poisoned_rows, adds)
        failed += [f"{name}: {c.claim}" for c in checks if not c.holds]
    if failed:
        console.print(f"NO: {'; '.join(failed)}", style="bold red", markup=False)
        return 1
    console.print(
        f"YES: both invariants hold for {', '.join(names)} ({args.dtype})",
        style="bold green",
        markup=False,
    )
    return 0


ADDS = {
    "torch": "torch: the autograd tape, a backward pass",
    "jax": "jax: jax.jit tracing and compiling the lesson, then timing it",
}
"""The status line while `framework_lines` runs, where it takes a while."""


def print_walk(
    console, walk_: Walk, fixture, dtype: str, checks, poisoned_rows, adds
) -> None:
    """The lesson's steps with what they made, the invariants, the notes.

    Args:
        poisoned_rows: what `nan_rows` found; adds: `framework_lines`'s lines.
    """
    import numpy as np

    def say(text: str = "", style: str | None = None) -> None:
        console.print(text, style=style, markup=False)

    version = backends.versions().get(walk_.backend)
    T, C = fixture.x.shape
    H = fixture.preset.n_heads
    heads = f"{H} heads, D = {C // H}" if len(walk_.args) > 4 else f"one head, D = {C}"
    say(
        f"== {walk_.backend} {version}: {walk_.path}, {walk_.function.__name__}, "
        f"tiny preset ({heads}), {dtype} ==",
        "bold",
    )
    say(f"x {(T, C)}: {' '.join(fixture.preset.tokens)}")
    for run in walk_.steps:
        step = run.step
        say(
            f"{step.number}. {step.title}  ({walk_.path}:{step.comment_line})",
            "bold cyan",
        )
        if not step.lines:
            say("   (one head: nothing to split)")
        for _, text in step.lines:
            say(f"   {text}")
        for made in run.made:
            say(f"     {made.name} {made.shape}")
            say(_slice_text(np.asarray(made.value)))
    for check in checks:
        say(
            f"{check.claim:<28} {'YES' if check.holds else 'NO':<4} ({check.evidence})",
            "green" if check.holds else "bold red",
        )
    lesson_rows, full_rows = poisoned_rows
    token = fixture.preset.tokens[POISONED_TOKEN]
    say(
        f"why attention.py is longer: NaN in token {POISONED_TOKEN} ({token!r})", "bold"
    )
    say(f"   {POISON_CODE[walk_.backend]}")
    say(
        f"   lesson: NaN in rows {_rows(lesson_rows)} of {T}: a masked weight "
        "is 0, and 0 * NaN is NaN"
    )
    say(
        f"   impl_{walk_.backend}.{walk_.function.__name__}: NaN in rows "
        f"{_rows(full_rows)}, the rows that attend token {POISONED_TOKEN}"
    )
    say(f"what {walk_.backend} adds", "bold")
    for line in adds:
        say(f"   {line}")
    say()


def _rows(rows: list[int]) -> str:
    """'5-7' for [5, 6, 7], 'none' for []."""
    if not rows:
        return "none"
    if rows == list(range(rows[0], rows[-1] + 1)):
        return f"{rows[0]}-{rows[-1]}" if len(rows) > 1 else str(rows[0])
    return ", ".join(map(str, rows))


def _slice_text(value) -> str:
    """The top-left corner of a (..., rows, columns) array, indented, 3 decimals."""
    import numpy as np

    leading = "0, " * (value.ndim - 2)  # the first head of each leading axis
    while value.ndim > 2:
        value = value[0]
    rows = min(4 if value.shape[0] == value.shape[1] else 3, value.shape[0])
    columns = min(4, value.shape[1])
    corner = value[:rows, :columns]
    corner = corner.astype(int if corner.dtype == bool else np.float64)  # bool: 1, 0
    text = np.array2string(corner, precision=3, suppress_small=True, floatmode="fixed")
    label = f"[{leading}:{rows}, :{columns}] "
    pad = " " * (7 + len(label))
    first, *rest = text.splitlines()
    return "\n".join([f"       {label}{first}", *(pad + line for line in rest)])
