"""What `triptych lab` measures beside the lesson's steps: the original lab's
two invariants, why attention.py is longer than the lesson (a NaN token), and
what each framework adds (impl_<backend>/extras.py, through the backend's
hooks in impl_<backend>/backend.py)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from shared import registry
from triptych.common import backends
from triptych.common.walk import Walk

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


def poisoned_token(T: int) -> int:
    """The token the lab sets to NaN in a sequence of T: POISONED_TOKEN, or
    the last where the sentence is shorter (`--tokens "king wore"`)."""
    return max(0, min(POISONED_TOKEN, T - 1))


def poison_line(name: str, T: int) -> str:
    """How backend `name` sets one token of x (T tokens) to NaN: the line the
    lab runs."""
    line, _ = backends.hooks(name).poison(poisoned_token(T))
    return line


def poisoned(name: str, x):
    """x (..., T, C) with token poisoned_token(T) set to NaN, by running
    `poison_line(name, T)`."""
    line, names = backends.hooks(name).poison(poisoned_token(x.shape[-2]))
    namespace = {"x": x, **names}
    exec(line, namespace)
    return namespace["x_nan"]


def nan_rows(name: str, walk_: Walk) -> tuple[list[int], list[int]]:
    """The rows of the output that are NaN when token poisoned_token(T) is NaN:
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
    shown on this input by its backend's `adds`. `fixture` gives the layer's
    heads (the tiny preset's random weights if None)."""
    if fixture is None:
        from shared import PRESETS, make_fixture

        fixture = make_fixture(PRESETS["tiny"])
    heads = heads_line(name, walk_, fixture)
    arrays = multi_args(name, walk_, fixture)
    H = fixture.preset.n_heads
    return backends.hooks(name).adds(heads, walk_.function, walk_.args, arrays, H)


def extras_of(name: str):
    """impl_<name>.extras: what the framework adds to the lesson."""
    return importlib.import_module(f"{registry.get(name).package}.extras")


def multi_args(name: str, walk_: Walk, fixture) -> tuple:
    """x and the layer's (C, C) weights as the backend's arrays, in the walk's dtype."""
    backend = backends.load_backend(name)
    dtype = str(backend.to_numpy(walk_.args[0]).dtype)
    return tuple(
        backend.from_numpy(a, dtype) for a in (fixture.x, *fixture.params.values())
    )


def heads_line(name: str, walk_: Walk, fixture) -> str:
    """Every head at once from the single-head lesson: broadcasting over
    stacked weights (NumPy) or a map over the heads' axis (torch.func.vmap,
    jax.vmap), against the multi-head lesson's weights."""
    import numpy as np

    backend = backends.load_backend(name)
    x, w_q, w_k, w_v, w_o = multi_args(name, walk_, fixture)
    H = fixture.preset.n_heads
    _, weights = extras_of(name).every_head(x, w_q, w_k, w_v, H)
    lesson = importlib.import_module(f"{registry.get(name).package}.lesson")
    _, expected = lesson.multi_head_attention(x, w_q, w_k, w_v, w_o, H)
    diff = float(np.max(np.abs(backend.to_numpy(weights) - backend.to_numpy(expected))))
    how = backends.hooks(name).EVERY_HEAD
    return (
        f"every head from the one-head lesson: extras.every_head, {how}: weights "
        f"{tuple(weights.shape)}, largest difference from multi_head_attention's "
        f"{diff:.2g}"
    )
