"""`triptych lab`: the lesson file of each backend, run step by step on a head
of the trained model (or the toy sentence on random weights), printing its own
source.

For each backend, `impl_<backend>/lesson.py` runs under a line tracer on the
layer of the trained model that ships with the project (triptych.common.trained:
by default layer 1, whose heads are induction heads, reading "the cat sat on a
mat and slept" twice; one head, the clearest, or its four with `--multi`), or
with `--weights random` on the tiny preset's random weights (one head with
D = C = 32, or four). The lab prints what each head of that layer does,
measured, then the lesson's source step by step (the lines under each step
comment, read from the file with `shared.steps.steps_of`), each followed by the
shape and the top-left corner of every array those lines made, taken from the
real run, and the weights whole as a labelled heatmap of characters. So the lab
and the library are one text: edit the lesson and the lab prints the edit.
Then, per backend:

- the original lab's two invariants, YES or NO: every row of the weights sums
  to 1, and nothing above the diagonal is attended (exactly 0);
- why attention.py is longer than the lesson: a NaN in one token reaches
  every row of the lesson's output, and only the rows that attend it in ours;
- what the framework itself adds (impl_<backend>/extras.py), run on this
  input: NumPy nothing (a loop over the heads); torch a map over the heads,
  its fused attention and its own layer, each equal to the lesson, and the
  autograd tape; JAX the map over the heads (vmap), the trace it compiles
  (make_jaxpr), and tracing and compiling under `jax.jit`, with times.

Exit code 1 if an invariant is NO for any backend, 2 for a bad option or a
backend that is not installed.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from dataclasses import dataclass

from triptych.common import backends, prose, status
from triptych.common.errors import CommandError
from triptych.common.parser import integer_at_least
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


def framework_lines(name: str, walk_: Walk, fixture=None) -> list[str]:
    """What the framework adds to the plain steps (impl_<name>/extras.py),
    shown on this input. `fixture` gives the layer's heads (the tiny preset's
    random weights if None)."""
    if fixture is None:
        from shared import PRESETS, make_fixture

        fixture = make_fixture(PRESETS["tiny"])
    heads = heads_line(name, walk_, fixture)
    if name == "torch":
        return [heads, *torch_lines(walk_, fixture)]
    if name == "jax":
        return [heads, *jax_lines(walk_, fixture)]
    return [
        "NumPy is the plain reference: each line ran when Python reached it, on",
        "the CPU, into arrays in memory; no device, no tape, no compiler.",
        heads,
    ]


def extras_of(name: str):
    """impl_<name>.extras: what the framework adds to the lesson."""
    return importlib.import_module(f"impl_{name}.extras")


def multi_args(name: str, walk_: Walk, fixture) -> tuple:
    """x and the layer's (C, C) weights as the backend's arrays, in the walk's dtype."""
    backend = backends.load_backend(name)
    dtype = str(backend.to_numpy(walk_.args[0]).dtype)
    return tuple(
        backend.from_numpy(a, dtype) for a in (fixture.x, *fixture.params.values())
    )


def heads_line(name: str, walk_: Walk, fixture) -> str:
    """Every head at once from the single-head lesson: a loop (NumPy) or a map
    over the heads' axis (torch.func.vmap, jax.vmap), against the multi-head
    lesson's weights."""
    import numpy as np

    backend = backends.load_backend(name)
    x, w_q, w_k, w_v, w_o = multi_args(name, walk_, fixture)
    H = fixture.preset.n_heads
    _, weights = extras_of(name).every_head(x, w_q, w_k, w_v, H)
    lesson = importlib.import_module(f"impl_{name}.lesson")
    _, expected = lesson.multi_head_attention(x, w_q, w_k, w_v, w_o, H)
    diff = float(np.max(np.abs(backend.to_numpy(weights) - backend.to_numpy(expected))))
    how = {
        "numpy": "a Python loop over the heads",
        "torch": "torch.func.vmap over the heads' axis, one call",
        "jax": "jax.vmap over the heads' axis, one call",
    }[name]
    return (
        f"every head from the one-head lesson: extras.every_head, {how}: weights "
        f"{tuple(weights.shape)}, largest difference from multi_head_attention's "
        f"{diff:.2g}"
    )


def torch_lines(walk_: Walk, fixture) -> list[str]:
    """torch's fused attention and layer against the lesson, the device and
    the autograd tape, on the lesson's inputs."""
    import numpy as np

    backend = backends.load_backend("torch")
    extras = extras_of("torch")
    lesson = importlib.import_module("impl_torch.lesson")
    x, w_q, w_k, w_v, w_o = multi_args("torch", walk_, fixture)
    H = fixture.preset.n_heads

    def diff(a, b) -> str:
        a, b = (backend.to_numpy(t.detach()) for t in (a, b))
        return f"{float(np.max(np.abs(a - b))):.2g}"

    if len(walk_.args) == 4:  # the walk's head
        one = walk_.args[1:4]
    else:  # the first head's columns
        one = tuple(extras.heads_of(w, H)[0] for w in (w_q, w_k, w_v))
    out, _ = lesson.single_head_attention(x, *one)
    fused = extras.fused(x, *one)
    layer_out, layer_weights = extras.call_layer(
        extras.as_layer(w_q, w_k, w_v, w_o, H), x
    )
    multi_out, multi_weights = lesson.multi_head_attention(x, w_q, w_k, w_v, w_o, H)
    x_leaf = walk_.args[0].detach().clone().requires_grad_()  # a leaf of the tape
    taped, _ = walk_.function(x_leaf, *walk_.args[1:])
    tape = type(taped.grad_fn).__name__
    taped.sum().backward()
    return [
        "fused: F.scaled_dot_product_attention(q, k, v, is_causal=True), steps 3 "
        f"to 7 in one call, differs from the lesson's out by {diff(fused, out)} "
        "(and returns no weights)",
        f"a layer: nn.MultiheadAttention loaded with these weights and called as "
        f"layer(x, x, x, attn_mask=future): out differs by "
        f"{diff(layer_out, multi_out)}, weights by "
        f"{diff(layer_weights, multi_weights)}",
        f"device: every tensor here is on {x.device}; move x and the weights "
        "with .to('cuda') and the same lines run there.",
        f"autograd: with x.requires_grad_(), each line was recorded: "
        f"out.grad_fn is {tape}; out.sum().backward() filled x.grad "
        f"{tuple(x_leaf.grad.shape)}; out.detach() is the same numbers off the tape.",
    ]


def jax_lines(walk_: Walk, fixture=None, calls: int = 20) -> list[str]:
    """The trace JAX compiles (make_jaxpr), and eager against jax.jit on the
    lesson's inputs: first call, then steady."""
    import jax

    one_head = walk_.args[:4]
    if len(walk_.args) > 4:  # the first head's columns
        H = walk_.args[5]
        extras = extras_of("jax")
        one_head = (walk_.args[0], *(extras.heads_of(w, H)[0] for w in walk_.args[1:4]))
    jaxpr = extras_of("jax").trace(*one_head)
    primitives = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    trace_line = (
        f"make_jaxpr: one head traced to {len(primitives)} operations, "
        f"{' '.join(dict.fromkeys(primitives))} (extras.trace; print it to see them)"
    )
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
        trace_line,
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
        help="each framework's lesson, run step by step on the trained model's heads",
        description=(
            "Run each backend's lesson file (impl_<backend>/lesson.py) on a "
            "layer of the trained model that ships with the project (its "
            "induction heads, reading eight words said twice; --weights random: "
            "the toy sentence on random weights), printing what each head does, "
            "the lesson's own source step by step with the shape and a slice of "
            "every array each step made, and the weights whole as a labelled "
            "heatmap; then the original lab's two invariants (rows sum to 1; "
            "nothing above the diagonal) as YES/NO, why attention.py is longer "
            "than the lesson (a NaN token), and what the framework adds "
            "(impl_<backend>/extras.py: vmap, make_jaxpr and jit; torch's fused "
            "attention, its layer and the autograd tape).\n\n"
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
    parser.add_argument(
        "--weights",
        choices=("trained", "random"),
        default="trained",
        help="the trained model that ships with the project (a layer of its "
        "induction model, on eight words said twice), or the tiny preset's "
        "random weights on the toy sentence",
    )
    parser.add_argument(
        "--layer",
        type=integer_at_least(0),
        metavar="L",
        help="the trained model's layer: 0 (previous-token heads) or 1 "
        "(induction heads) (default: 1; only with the trained weights)",
    )
    parser.add_argument(
        "--head",
        type=integer_at_least(0),
        metavar="H",
        help="the head the one-head walk takes (default: the layer's clearest; "
        "only with the trained weights, not with --multi)",
    )
    parser.set_defaults(func=lab)


def check_options(args: argparse.Namespace) -> None:
    """Options that do not fit together, found before any framework loads."""
    from triptych.common import trained

    if args.weights == "random":
        given = [o for o in ("--layer", "--head") if getattr(args, o[2:]) is not None]
        if given:
            raise CommandError(
                f"{', '.join(given)} pick a part of the trained model, and "
                f"--weights random has none: drop one or the other"
            )
        return
    if args.head is not None and args.multi:
        raise CommandError("--multi walks every head: drop --head")
    model = trained.load()
    if args.layer is not None and args.layer >= model.n_layers:
        raise CommandError(
            f"--layer {args.layer}: the trained model has layers 0 to "
            f"{model.n_layers - 1}"
        )
    if args.head is not None and args.head >= model.config.n_heads:
        raise CommandError(
            f"--head {args.head}: the trained model has heads 0 to "
            f"{model.config.n_heads - 1}"
        )


def lab(args: argparse.Namespace) -> int:
    """Run the lab for the chosen backends; print; return the exit code."""
    from rich.console import Console

    from triptych.common import trained

    check_options(args)
    asked = backends.BACKENDS if args.backend == "all" else [args.backend]
    with status.shown(status.loading_text(asked)) as say:
        if args.backend == "all":
            names = backends.installed_backends()
        else:
            backends.load_backend(args.backend)  # missing: one line, exit 2
            names = [args.backend]
        if args.weights == "trained":
            say("the trained model: measuring what each head does")
        shown = trained.view(args.weights, args.layer, args.head)
    console = Console(highlight=False, soft_wrap=True)
    print_model(console, shown, args.multi)
    failed = []
    for name in names:
        with status.shown(f"{name}: running impl_{name}/lesson.py step by step") as say:
            walk_ = walk(
                name, shown.fixture, args.dtype, multi=args.multi, head=shown.head
            )
            checks = invariants(walk_.weights, args.dtype)
            say(f"{name}: the lesson and attention.py on a NaN token")
            poisoned_rows = nan_rows(walk_.backend, walk_)
            say(ADDS.get(name, f"what {name} adds"))
            adds = framework_lines(walk_.backend, walk_, shown.fixture)
        print_walk(
            console, walk_, shown, args.dtype, checks, poisoned_rows, adds, args.multi
        )
        failed += [f"{name}: {c.claim}" for c in checks if not c.holds]
    prose.say(console, next_text(names[0]))
    if failed:
        prose.say(console, f"NO: {'; '.join(failed)}", "bold red")
        return 1
    prose.say(
        console,
        f"YES: both invariants hold for {', '.join(names)} ({args.dtype})",
        "bold green",
    )
    return 0


def next_text(name: str) -> str:
    """Where the reading order goes after the lesson (triptych.common.reading)."""
    from triptych.common.reading import ORDER

    file, what = ORDER[1]
    return (
        f"next in the reading order: impl_{name}/{file} (2 of {len(ORDER)}: "
        f"{what}; docs/reading.md), or triptych read for every chapter side by "
        "side"
    )


ADDS = {
    "torch": "torch: vmap, the fused attention, nn.MultiheadAttention, the tape",
    "jax": "jax: vmap, make_jaxpr, jax.jit tracing and compiling, then timing it",
}
"""The status line while `framework_lines` runs, where it takes a while."""


def print_model(console, shown, multi: bool) -> None:
    """What is shown: the trained model and what its heads do, measured, or
    the random weights."""

    def say(text: str = "", style: str | None = None, code: bool = False) -> None:
        prose.say(console, text, style, code=code)

    if not shown.trained:
        say(
            "random weights (--weights random): the tiny preset on the toy "
            "sentence; no head has learned anything",
            "bold",
        )
        say()
        return
    from triptych.common import trained

    model = trained.load()
    c = model.config
    say(
        f"the trained model (shared/fixtures/induction.npz): {c.n_layers} layers "
        f"of {c.n_heads} heads, d_model {c.d_model}, trained {c.steps} steps to "
        f"an induction accuracy of {model.meta['induction_accuracy']:.1%}",
        "bold",
    )
    say("what each head does, measured on 256 held-out sequences:")
    for role in trained.head_roles():
        mark = (
            " <- shown"
            if role.layer == shown.layer and (multi or role.head == shown.head)
            else ""
        )
        say(f"   {role.name}: {role.describe()}{mark}")
    say()


def print_walk(
    console,
    walk_: Walk,
    shown,
    dtype: str,
    checks,
    poisoned_rows,
    adds,
    multi: bool = False,
) -> None:
    """The lesson's steps with what they made, the weights as heatmaps, the
    invariants, the notes.

    Args:
        shown: the View (triptych.common.trained) walked.
        poisoned_rows: what `nan_rows` found; adds: `framework_lines`'s lines.
    """
    import numpy as np

    def say(text: str = "", style: str | None = None, code: bool = False) -> None:
        prose.say(console, text, style, code=code)

    fixture = shown.fixture
    version = backends.versions().get(walk_.backend)
    T, C = fixture.x.shape
    say(
        f"== {walk_.backend} {version}: {walk_.path}, {walk_.function.__name__}, "
        f"{shown.describe(multi)}, {dtype} ==",
        "bold",
    )
    where = (
        f"what enters layer {shown.layer} as the model reads"
        if shown.trained
        else "the toy sentence"
    )
    say(f"x {(T, C)}, {where}: {' '.join(fixture.preset.tokens)}")
    for run in walk_.steps:
        step = run.step
        say(
            f"{step.number}. {step.title}  ({walk_.path}:{step.comment_line})",
            "bold cyan",
        )
        if not step.lines:
            say("   (one head: nothing to split)")
        for _, text in step.lines:
            say(f"   {text}", code=True)
        for made in run.made:
            say(f"     {made.name} {made.shape}")
            say(_slice_text(np.asarray(made.value)), code=True)
    weights = np.asarray(walk_.weights, dtype=np.float64)
    for h, matrix in enumerate(weights if weights.ndim == 3 else [weights]):
        head = h if weights.ndim == 3 else shown.head
        role = None if head is None else shown.role(head)
        name = "weights" if head is None else f"weights of head {head}"
        what = "" if role is None else f": {role.describe()}"
        say(f"{name}, whole (row: the query, column: the key){what}", "bold")
        for line in text_heatmap(matrix, shown.labels):
            say(f"   {line}", code=not line.startswith("scale: "))
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
    say(f"   {POISON_CODE[walk_.backend]}", code=True)
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


SHADES = " .:-=+*#%@"
"""Ten characters from weight 0 to weight 1, light to dark."""


def text_heatmap(matrix, labels: list[str]) -> list[str]:
    """A (T, T) matrix of weights as lines of characters, each row labelled
    with its position and token, each column headed by its token's first two
    letters; a scale line at the end. Above the diagonal (never attended by a
    causal head): blank."""
    import numpy as np

    T = matrix.shape[0]
    width = max(len(word) for word in labels[:T]) + 4
    head = " " * width + "".join(f"{word[:2]:<3}" for word in labels[:T])
    lines = [head.rstrip()]
    for i in range(T):
        cells = []
        for j in range(T):
            value = float(np.clip(np.nan_to_num(matrix[i, j]), 0.0, 1.0))
            shade = SHADES[min(int(value * len(SHADES)), len(SHADES) - 1)]
            cells.append(f"{shade * 2} ")
        label = f"{i:>2} {labels[i]}"
        lines.append(f"{label:<{width}}{''.join(cells)}".rstrip())
    steps = ", ".join(
        f"{SHADES[k]!r} < {(k + 1) / len(SHADES):.1f}" for k in range(len(SHADES) - 1)
    )
    lines.append(f"scale: {steps}, '@' >= 0.9")
    return lines


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
