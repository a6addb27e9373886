"""`triptych lab`: the seed attention lab, one head, seven steps, in each framework.

For each backend, the module form (`CausalSelfAttention.from_weights` with one
head) is loaded with the tiny preset's weights; the lab takes its projections
and walks the seven steps of DESIGN.md with that framework's own calls,
printing each step's call, the shape it gives and a small slice. It ends with
the seed lab's two invariants as YES/NO: every row of the weights sums to 1,
and nothing above the diagonal is attended (exactly 0). Exit code 1 if either
is NO for any backend.

The three walks below are written as parallel as the frameworks allow, and do
exactly what `single_head_attention` does, op for op: a test proves that each
walk's weights and output equal its backend's `single_head_attention` bit for
bit, so the lab cannot drift from the library.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from triptych.common import backends

STEP_TITLES = (
    "project x into queries, keys and values",
    "split heads (multi-head only)",
    "scores = q @ k^T",
    "scale by 1 / sqrt(D)",
    "mask the future (and any given mask)",
    "softmax into weights",
    "weighted sum of values, merge heads, output projection",
)
"""The seven step comments of DESIGN.md, word for word."""


@dataclass
class Line:
    """One call of a step: its code, the array it gave (NumPy) and that shape."""

    code: str
    shape: tuple[int, ...] | None = None
    value: object = None  # np.ndarray
    note: str = ""


@dataclass
class Step:
    """One of the seven steps and the calls it made."""

    number: int
    lines: list[Line] = field(default_factory=list)

    @property
    def title(self) -> str:
        return STEP_TITLES[self.number - 1]


@dataclass
class Walk:
    """A backend's walk through the seven steps.

    Attributes:
        backend: "numpy", "torch" or "jax".
        steps: the seven steps, in order.
        x: (T, C) input, a framework array.
        projections: (w_q, w_k, w_v), each (C, D), the framework arrays the
            walk used, as taken from the module.
        weights: (T, T) attention weights, NumPy.
        out: (T, D) output, NumPy.
    """

    backend: str
    steps: list[Step]
    x: object
    projections: tuple
    weights: object
    out: object


class _Recorder:
    """Collects the steps of a walk, converting arrays with `to_numpy`."""

    def __init__(self, to_numpy):
        self.to_numpy = to_numpy
        self.steps: list[Step] = []

    def step(self, number: int, *calls: tuple[str, object], note: str = "") -> None:
        lines = [
            Line(code, tuple(int(n) for n in a.shape), self.to_numpy(a))
            for code, a in calls
        ]
        if note:
            lines.append(Line(code="", note=note))
        self.steps.append(Step(number, lines))


def walk_numpy(fixture, dtype: str) -> Walk:
    """The seven steps in NumPy, from impl_numpy.CausalSelfAttention."""
    import numpy as np

    import impl_numpy

    params = fixture.astype(dtype).params
    module = impl_numpy.CausalSelfAttention.from_weights(*params.values(), n_heads=1)
    x = impl_numpy.from_numpy(fixture.x, dtype)  # (T, C)
    w_q, w_k, w_v = module.w_q, module.w_k, module.w_v  # (C, D), (in, out) already
    T, D = x.shape[-2], w_q.shape[-1]
    record = _Recorder(impl_numpy.to_numpy)
    # 1. project x into queries, keys and values
    q = x @ w_q  # (T, C) @ (C, D) -> (T, D)
    k = x @ w_k  # (T, C) @ (C, D) -> (T, D)
    v = x @ w_v  # (T, C) @ (C, D) -> (T, D)
    record.step(
        1,
        ("w_q = module.w_q", w_q),
        ("q = x @ w_q", q),
        ("k = x @ w_k", k),
        ("v = x @ w_v", v),
    )
    # 2. split heads (multi-head only)
    record.step(2, note="one head: q, k and v stay (T, D)")
    # 3. scores = q @ k^T
    scores = q @ k.T  # (T, D) @ (D, T) -> (T, T)
    record.step(3, ("scores = q @ k.T", scores))
    # 4. scale by 1 / sqrt(D)
    scores = scores / math.sqrt(D)
    record.step(4, ("scores = scores / math.sqrt(D)", scores))
    # 5. mask the future (and any given mask)
    allowed = np.tril(np.ones((T, T), dtype=bool))  # (T, T)
    scores = np.where(allowed, scores, -np.inf)
    record.step(
        5,
        ("allowed = np.tril(np.ones((T, T), dtype=bool))", allowed),
        ("scores = np.where(allowed, scores, -np.inf)", scores),
    )
    # 6. softmax into weights
    row_max = scores.max(axis=-1, keepdims=True)  # (T, 1)
    exp = np.exp(scores - row_max)  # (T, T)
    weights = exp / exp.sum(axis=-1, keepdims=True)  # (T, T)
    record.step(
        6,
        ("row_max = scores.max(axis=-1, keepdims=True)", row_max),
        ("exp = np.exp(scores - row_max)", exp),
        ("weights = exp / exp.sum(axis=-1, keepdims=True)", weights),
    )
    # 7. weighted sum of values, merge heads, output projection
    out = weights @ v  # (T, T) @ (T, D) -> (T, D)
    record.step(
        7, ("out = weights @ v", out), note="one head: nothing to merge, no w_o"
    )
    return Walk(
        "numpy",
        record.steps,
        x,
        (w_q, w_k, w_v),
        impl_numpy.to_numpy(weights),
        impl_numpy.to_numpy(out),
    )


def walk_torch(fixture, dtype: str) -> Walk:
    """The seven steps in PyTorch, from impl_torch.CausalSelfAttention."""
    import torch

    import impl_torch

    params = fixture.astype(dtype).params
    module = impl_torch.CausalSelfAttention.from_weights(*params.values(), n_heads=1)
    x = impl_torch.from_numpy(fixture.x, dtype)  # (T, C)
    w_q = module.q_proj.weight.detach().T  # nn.Linear keeps (out, in): (C, D)
    w_k = module.k_proj.weight.detach().T  # (C, D)
    w_v = module.v_proj.weight.detach().T  # (C, D)
    T, D = x.shape[-2], w_q.shape[-1]
    record = _Recorder(impl_torch.to_numpy)
    # 1. project x into queries, keys and values
    q = x @ w_q  # (T, C) @ (C, D) -> (T, D)
    k = x @ w_k  # (T, C) @ (C, D) -> (T, D)
    v = x @ w_v  # (T, C) @ (C, D) -> (T, D)
    record.step(
        1,
        ("w_q = module.q_proj.weight.detach().T", w_q),
        ("q = x @ w_q", q),
        ("k = x @ w_k", k),
        ("v = x @ w_v", v),
    )
    # 2. split heads (multi-head only)
    record.step(2, note="one head: q, k and v stay (T, D)")
    # 3. scores = q @ k^T
    scores = q @ k.T  # (T, D) @ (D, T) -> (T, T)
    record.step(3, ("scores = q @ k.T", scores))
    # 4. scale by 1 / sqrt(D)
    scores = scores / math.sqrt(D)
    record.step(4, ("scores = scores / math.sqrt(D)", scores))
    # 5. mask the future (and any given mask)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
    scores = torch.where(allowed, scores, -math.inf)
    record.step(
        5,
        ("allowed = torch.ones(T, T, dtype=torch.bool).tril()", allowed),
        ("scores = torch.where(allowed, scores, -math.inf)", scores),
    )
    # 6. softmax into weights
    row_max = scores.amax(dim=-1, keepdim=True)  # (T, 1)
    exp = torch.exp(scores - row_max)  # (T, T)
    weights = exp / exp.sum(dim=-1, keepdim=True)  # (T, T)
    record.step(
        6,
        ("row_max = scores.amax(dim=-1, keepdim=True)", row_max),
        ("exp = torch.exp(scores - row_max)", exp),
        ("weights = exp / exp.sum(dim=-1, keepdim=True)", weights),
    )
    # 7. weighted sum of values, merge heads, output projection
    out = weights @ v  # (T, T) @ (T, D) -> (T, D)
    record.step(
        7, ("out = weights @ v", out), note="one head: nothing to merge, no w_o"
    )
    return Walk(
        "torch",
        record.steps,
        x,
        (w_q, w_k, w_v),
        impl_torch.to_numpy(weights),
        impl_torch.to_numpy(out),
    )


def walk_jax(fixture, dtype: str) -> Walk:
    """The seven steps in JAX, from the flax nnx impl_jax.CausalSelfAttention."""
    import jax.numpy as jnp

    import impl_jax

    params = fixture.astype(dtype).params
    module = impl_jax.CausalSelfAttention.from_weights(*params.values(), n_heads=1)
    x = impl_jax.from_numpy(fixture.x, dtype)  # (T, C)
    w_q = module.q_proj.kernel[...]  # nnx.Linear keeps (in, out): (C, D)
    w_k = module.k_proj.kernel[...]  # (C, D)
    w_v = module.v_proj.kernel[...]  # (C, D)
    T, D = x.shape[-2], w_q.shape[-1]
    record = _Recorder(impl_jax.to_numpy)
    # 1. project x into queries, keys and values
    q = x @ w_q  # (T, C) @ (C, D) -> (T, D)
    k = x @ w_k  # (T, C) @ (C, D) -> (T, D)
    v = x @ w_v  # (T, C) @ (C, D) -> (T, D)
    record.step(
        1,
        ("w_q = module.q_proj.kernel[...]", w_q),
        ("q = x @ w_q", q),
        ("k = x @ w_k", k),
        ("v = x @ w_v", v),
    )
    # 2. split heads (multi-head only)
    record.step(2, note="one head: q, k and v stay (T, D)")
    # 3. scores = q @ k^T
    scores = q @ k.T  # (T, D) @ (D, T) -> (T, T)
    record.step(3, ("scores = q @ k.T", scores))
    # 4. scale by 1 / sqrt(D)
    scores = scores / math.sqrt(D)
    record.step(4, ("scores = scores / math.sqrt(D)", scores))
    # 5. mask the future (and any given mask)
    allowed = jnp.tril(jnp.ones((T, T), dtype=bool))  # (T, T)
    scores = jnp.where(allowed, scores, -jnp.inf)
    record.step(
        5,
        ("allowed = jnp.tril(jnp.ones((T, T), dtype=bool))", allowed),
        ("scores = jnp.where(allowed, scores, -jnp.inf)", scores),
    )
    # 6. softmax into weights
    row_max = scores.max(axis=-1, keepdims=True)  # (T, 1)
    exp = jnp.exp(scores - row_max)  # (T, T)
    weights = exp / exp.sum(axis=-1, keepdims=True)  # (T, T)
    record.step(
        6,
        ("row_max = scores.max(axis=-1, keepdims=True)", row_max),
        ("exp = jnp.exp(scores - row_max)", exp),
        ("weights = exp / exp.sum(axis=-1, keepdims=True)", weights),
    )
    # 7. weighted sum of values, merge heads, output projection
    out = weights @ v  # (T, T) @ (T, D) -> (T, D)
    record.step(
        7, ("out = weights @ v", out), note="one head: nothing to merge, no w_o"
    )
    return Walk(
        "jax",
        record.steps,
        x,
        (w_q, w_k, w_v),
        impl_jax.to_numpy(weights),
        impl_jax.to_numpy(out),
    )


WALKS = {"numpy": walk_numpy, "torch": walk_torch, "jax": walk_jax}


@dataclass(frozen=True)
class Invariant:
    """One of the seed lab's checks on the weights, with the number behind it."""

    claim: str
    holds: bool
    evidence: str


def invariants(weights, dtype: str) -> list[Invariant]:
    """The seed lab's two invariants on (T, T) weights.

    Rows sum to 1 within the tolerance of `dtype` (shared.tolerances); above
    the diagonal every weight is exactly 0.
    """
    import numpy as np

    from shared.tolerances import is_close

    weights = np.asarray(weights, dtype=np.float64)
    row_sums = weights.sum(axis=-1)  # (T,)
    above = np.triu(weights, k=1)  # (T, T), zero on and below the diagonal
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


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "lab",
        help="the seed lab: one head, seven steps, in each framework",
        description=(
            "The seed attention lab: one head of the tiny preset, walked through "
            "the seven steps with each framework's own calls, printing each "
            "step's call, shape and a small slice, then the two invariants "
            "(rows sum to 1; nothing above the diagonal) as YES/NO.\n\n"
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
        help="the dtype of x and weights",
    )
    parser.set_defaults(func=lab)


def lab(args: argparse.Namespace) -> int:
    """Run the lab for the chosen backends; print; return the exit code."""
    from rich.console import Console

    from shared import PRESETS, make_fixture
    from triptych.common.errors import print_error

    try:
        if args.backend == "all":
            names = backends.installed_backends()
        else:
            backends.load_backend(args.backend)
            names = [args.backend]
    except backends.BackendMissingError as error:
        return print_error("triptych lab", error)
    fixture = make_fixture(PRESETS["tiny"])
    console = Console(highlight=False, soft_wrap=True)
    failed = []
    for name in names:
        walk = WALKS[name](fixture, args.dtype)
        checks = invariants(walk.weights, args.dtype)
        print_walk(console, walk, fixture, args.dtype, checks)
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


def print_walk(console, walk: Walk, fixture, dtype: str, checks) -> None:
    """Each step's calls, shapes and slices, then the invariants."""
    import numpy as np

    version = backends.versions().get(walk.backend)
    T, C = fixture.x.shape
    console.print(
        f"== {walk.backend} {version}: one head (D = C = {C}) of the tiny preset, "
        f"{dtype} ==",
        style="bold",
        markup=False,
    )
    console.print(
        f"module = impl_{walk.backend}.CausalSelfAttention.from_weights("
        "w_q, w_k, w_v, w_o, n_heads=1)",
        markup=False,
    )
    console.print(f"x {(T, C)}: {' '.join(fixture.preset.tokens)}", markup=False)
    for step in walk.steps:
        console.print(f"{step.number}. {step.title}", style="bold cyan", markup=False)
        for line in step.lines:
            if line.value is None:
                console.print(f"   {line.note}", markup=False)
                continue
            console.print(f"   {line.code:<52} {line.shape}", markup=False)
            console.print(_slice_text(np.asarray(line.value)), markup=False)
    for check in checks:
        console.print(
            f"{check.claim:<28} {'YES' if check.holds else 'NO':<4} ({check.evidence})",
            style="green" if check.holds else "bold red",
            markup=False,
        )
    console.print()


def _slice_text(value) -> str:
    """The top-left corner of a 2-D array, indented, three decimals."""
    import numpy as np

    rows = min(4 if value.shape[0] == value.shape[1] else 3, value.shape[0])
    columns = min(4, value.shape[1])
    corner = value[:rows, :columns]
    corner = corner.astype(int if corner.dtype == bool else np.float64)  # bool: 1, 0
    text = np.array2string(corner, precision=3, suppress_small=True, floatmode="fixed")
    label = f"[:{rows}, :{columns}] "
    pad = " " * (5 + len(label))
    first, *rest = text.splitlines()
    return "\n".join([f"     {label}{first}", *(pad + line for line in rest)])
