"""The inputs `triptych check` draws, and the float64 truth on them.

A `Problem` is a handful of small numbers (batch axes, T, heads, head width, a
seed, a kind of mask) that hypothesis draws and shrinks; `Problem.inputs()`
turns it into float64 NumPy arrays, from one seeded generator, as the suite's
fixtures are made. The truth is always the loop oracle of `shared.reference`
on exactly the numbers the implementation was given (rounded to its dtype).

The shapes come from a fixed catalogue (`catalogue`): a few small ones and
the block edges 15, 16, 17, 31, 32, 33, 63, 64, 65 (up to `--max-t`), each
with its heads, head width and number of batch axes, so that a framework
that compiles each new shape (JAX) compiles each once, and every property
reuses the shapes the others compiled; the seed and the mask's contents are
drawn freely. `fit` turns a catalogue shape into a problem's shape for an
implementation: its batch convention ((T, C), (B, T, C) or any leading
axes, `BATCH_FORMS`), one head, or a module instance's own widths.

Every mask drawn here is boolean, True = may attend, broadcastable to
(*batch, H, T, T), and narrows the causal mask. Apart from "empty rows", each
keeps the diagonal (or, for key padding, key 0 and, under a window, the
keys the last query reaches), so every query has a key to
attend and the fully masked rows are checked on their own; "empty rows"
empties some query rows in every head, one of them past row 0 (row 0 attends
only itself, so ignoring the mask there looks like a policy).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from shared.dtypes import np_dtype
from shared.reference import reference_multi_head, reference_single_head
from triptych.check.variant import Variant

W_NAMES = ("w_q", "w_k", "w_v", "w_o")
MASK_KINDS = ("none", "shared", "per item", "per head", "key padding", "empty rows")
BATCH_FORMS = {0: (), 1: (2,), 2: (2, 1)}
"""The batch axes of x drawn for each number of batch axes: none, one of two
items, two (two items and one)."""
MAX_T = 64
"""--max-t by default: the block edges up to 64 (and 65) are drawn."""


class Shape(NamedTuple):
    """A catalogue entry: T, heads, head width, and the number of batch axes
    it prefers (0, 1 or 2: `BATCH_FORMS`). `roles` says which properties
    draw it beside those in the working dtype: "dtypes" (the other dtypes and
    hostile magnitudes), "masks" (the given masks), "gradients"."""

    T: int
    H: int
    D: int
    rank: int
    roles: tuple[str, ...] = ()


SMALL_SHAPES = (
    Shape(1, 1, 2, 1),
    Shape(2, 2, 2, 0, ("gradients",)),
    Shape(3, 1, 4, 2),
    Shape(6, 2, 3, 1, ("dtypes", "masks")),  # the rich problem's
)
"""T = 1, 2, 3 and 6 (the rich problem's, `rich_problem`), each number of
batch axes once with T >= 2 (the batch probe calls these, `probe`)."""
EDGE_WIDTHS = ((2, 4, 1), (1, 4, 0), (4, 2, 1), (2, 2, 2), (2, 3, 1), (1, 3, 0))
"""Heads, head width and batch axes of the block edges, in turn."""
EDGE_ROLES = {17: ("dtypes", "masks")}


def block_edges(max_t: int) -> list[int]:
    """p - 1, p and p + 1 for each power of two p from 16 up to max_t, then
    max_t itself if it is none of them: 15, 16, 17, 31, ..., 65 for 64."""
    edges, p = [], 16
    while p <= max_t:
        edges += [p - 1, p, p + 1]
        p *= 2
    if max_t > 8 and max_t not in edges:
        edges.append(max_t)
    return edges


def catalogue(max_t: int = MAX_T, window: int | None = None) -> list[Shape]:
    """Every shape drawn with `max_t`, simplest first (the order shrinking
    prefers): the small shapes up to max_t, then the block edges; with a
    `window` no shape is longer than, T = W + 1 too (up to 4 max_t), so that
    sequences both shorter and longer than the window are drawn."""
    found = [s for s in SMALL_SHAPES if max_t >= s.T]
    for i, length in enumerate(block_edges(max_t)):
        heads, width, rank = EDGE_WIDTHS[i % len(EDGE_WIDTHS)]
        found.append(Shape(length, heads, width, rank, EDGE_ROLES.get(length, ())))
    longest = max((s.T for s in found), default=0)
    if window is not None and longest <= window < 4 * max_t:
        found.append(Shape(window + 1, 2, 3, 1, ("masks",)))
    return found


def fit(
    shape: Shape,
    ranks: tuple[int, ...],
    one_head: bool = False,
    fixed: tuple[int, int] | None = None,
    variant: Variant | None = None,
) -> tuple[tuple[int, ...], int, int, int, int]:
    """(batch, T, H, D, width) of a catalogue shape for an implementation
    that takes `ranks` batch axes (the nearest to the shape's, one
    preferred), one head, or its own widths `fixed` (C, H); with a
    `variant`, the heads and head widths its mistakes show at
    (`Variant.heads`, `Variant.width`). `width` is the model width C where
    it is not H * D (else 0): one head of the catalogue's width D reads x of
    the catalogue's H * D, so that sqrt(C) and sqrt(D) differ wherever the
    shape has two heads or more."""
    rank = shape.rank if shape.rank in ranks else min(ranks, key=lambda r: abs(r - 1))
    H, D, width = shape.H, shape.D, 0
    if fixed is not None:
        C, H = fixed
        D = C // H
    elif one_head:
        H, width = 1, (H * D if H > 1 else 0)
    elif variant is not None:
        H, D = variant.heads(H)[0], variant.width(D)
    return BATCH_FORMS[rank], shape.T, H, D, width


class Problem(NamedTuple):
    """One drawn attention problem: C = H * D, weights (C, C) (w_k and w_v
    (C, H_kv * D) with GQA), of the run's variant, if any."""

    batch: tuple[int, ...]
    T: int
    H: int
    D: int
    seed: int
    mask: str = "none"
    variant: Variant | None = None
    width: int = 0  # the model width C where it is not H * D (one head)

    @property
    def C(self) -> int:
        return self.width or self.H * self.D

    @property
    def H_kv(self) -> int:
        """The key/value heads: H without GQA."""
        n_kv_heads = self.variant and self.variant.n_kv_heads
        return n_kv_heads or self.H

    def text(self) -> str:
        """'x (2, 3, 4), 2 heads of width 2, mask per head, seed 5'."""
        heads = f"{self.H} head{'s' * (self.H > 1)} of width {self.D}"
        if self.variant is not None and self.variant.n_kv_heads:
            heads += f" ({self.H_kv} KV head{'s' * (self.H_kv > 1)})"
        mask = "" if self.mask == "none" else f", mask {self.mask}"
        return f"x {(*self.batch, self.T, self.C)}, {heads}{mask}, seed {self.seed}"

    def inputs(self) -> Inputs:
        """x ~ N(0, 1), weights ~ N(0, 1/C) and the mask, from the seed; then
        the variant's arrays: sinks ~ N(0, 1), norm weights ~ U(0.5, 1.5)."""
        rng = np.random.default_rng(self.seed)
        C, HD, kv = self.C, self.H * self.D, self.H_kv * self.D
        x = rng.standard_normal((*self.batch, self.T, C))
        shapes = ((C, HD), (C, kv), (C, kv), (HD, C))
        w = {
            name: rng.standard_normal(shape) / math.sqrt(C)
            for name, shape in zip(W_NAMES, shapes, strict=True)
        }
        mask = draw_mask(self, rng)
        if self.variant is None:
            return Inputs(x, w, self.H, mask)
        shapes = {"sinks": (self.H,), "q_norm": (self.D,), "k_norm": (self.D,)}
        extra = {
            name: rng.standard_normal(shapes[name])
            if name == "sinks"
            else rng.uniform(0.5, 1.5, shapes[name])
            for name in self.variant.extra_names()
        }
        return Inputs(x, w, self.H, mask, self.variant, extra)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """float64 arrays of one problem.

    Attributes:
        x: (*batch, T, C). w: "w_q", "w_k", "w_v", "w_o", each (C, C).
        H: heads. mask: None (causal only) or boolean, broadcastable to
            (*batch, H, T, T), True = may attend.
    """

    x: np.ndarray
    w: dict[str, np.ndarray]
    H: int
    mask: np.ndarray | None
    variant: Variant | None = None
    extra: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def replace(self, **changes) -> Inputs:
        return dataclasses.replace(self, **changes)

    def rounded(self, dtype: str) -> Inputs:
        """x, the weights and the variant's arrays rounded to `dtype`, as
        float64 again."""
        return self.replace(
            x=round_to(self.x, dtype),
            w={name: round_to(w, dtype) for name, w in self.w.items()},
            extra={name: round_to(a, dtype) for name, a in self.extra.items()},
        )

    @property
    def H_kv(self) -> int:
        return self.H * self.w["w_k"].shape[-1] // self.w["w_q"].shape[-1]

    def shared_variant(self):
        """The oracle's shared.Variant (None without a variant)."""
        return None if self.variant is None else self.variant.shared(self.extra)

    def allowed(self) -> np.ndarray:
        """(*batch, H, T, T) booleans: the causal mask, the window and the
        given mask."""
        *batch, T, _ = self.x.shape
        allowed = np.tril(np.ones((T, T), dtype=bool))
        if self.variant is not None and self.variant.window is not None:
            allowed = allowed & ~np.tril(allowed, k=-self.variant.window)
        if self.mask is not None:
            allowed = allowed & self.mask
        return np.broadcast_to(allowed, (*batch, self.H, T, T))

    def item(self, b: int) -> Inputs:
        """Batch item b alone, its batch axis kept (x[b:b+1])."""
        batch_axes = self.x.ndim - 2
        mask = self.mask
        if mask is not None and mask.ndim - 3 >= batch_axes and mask.shape[0] > 1:
            mask = mask[b : b + 1]  # a mask with the batch axis
        return self.replace(x=self.x[b : b + 1], mask=mask)


def round_to(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array` rounded to `dtype` and back to float64: what an implementation
    computing in `dtype` is given."""
    return np.asarray(array).astype(np_dtype(dtype)).astype(np.float64)


def draw_mask(problem: Problem, rng: np.random.Generator) -> np.ndarray | None:
    """The problem's kind of mask, drawn from `rng` (see the module's docstring)."""
    batch, T, kind = problem.batch, problem.T, problem.mask
    if kind == "none":
        return None
    if kind == "key padding":  # lengths 1 to T: key 0 stays for every query
        lengths = np.asarray(rng.integers(shortest_padding(problem), T + 1, size=batch))
        return (np.arange(T) < lengths[..., None])[
            ..., None, None, :
        ]  # (*batch, 1, 1, T)
    shape = {
        "shared": (T, T),
        "per item": (*batch, 1, T, T),
        "per head": (*batch, problem.H, T, T),
        "empty rows": (*batch, 1, T, T),
    }[kind]
    mask = (rng.random(shape) < rng.uniform(0.3, 0.9)) | np.eye(T, dtype=bool)
    if kind == "empty rows":  # some query rows may attend nothing, in every head
        empty = rng.random(shape[:-1]) < 0.4  # (*batch, 1, T)
        empty[..., rng.integers(1, T) if T > 1 else 0] = True  # one past row 0
        mask &= ~empty[..., None]
    return mask


def shortest_padding(problem: Problem) -> int:
    """The shortest key-padding length that leaves every query a key: 1, or
    under a window of W keys T - W + 1 (query T - 1 reaches keys T - W to
    T - 1 only), so that only "empty rows" leave rows empty."""
    window = problem.variant and problem.variant.window
    return max(1, problem.T - window + 1) if window else 1


def split_heads(t: np.ndarray, H: int) -> np.ndarray:
    """(..., T, C) -> (..., H, T, D)."""
    *batch, T, C = t.shape
    return t.reshape(*batch, T, H, C // H).swapaxes(-3, -2)


def merge_heads(t: np.ndarray) -> np.ndarray:
    """(..., H, T, D) -> (..., T, H * D)."""
    *batch, H, T, D = t.shape
    return t.swapaxes(-3, -2).reshape(*batch, T, H * D)


def qkv_of(inputs: Inputs, dtype: str) -> dict[str, np.ndarray]:
    """q, k, v (..., H, T, D) of the inputs as an implementation computing in
    `dtype` holds them: projected from the rounded inputs, then rounded."""
    rounded = inputs.rounded(dtype)
    return {
        name: round_to(split_heads(rounded.x @ rounded.w[f"w_{name}"], inputs.H), dtype)
        for name in "qkv"
    }


def truth_of_projections(inputs: Inputs, one_head: bool):
    """The oracle on x and the weights as they are: out (..., T, C) and
    weights (..., H, T, T); with `one_head`, single-head attention (H = 1,
    no w_o)."""
    if one_head:
        mask = None if inputs.mask is None else single_head_mask(inputs.mask)
        out, weights = reference_single_head(
            inputs.x, inputs.w["w_q"], inputs.w["w_k"], inputs.w["w_v"], mask
        )
        return out, weights[..., None, :, :]
    return reference_multi_head(
        inputs.x,
        *inputs.w.values(),
        inputs.H,
        inputs.mask,
        variant=inputs.shared_variant(),
    )


def truth_of_qkv(q, k, v, mask):
    """The oracle on q, k, v (..., H, T, D) directly: out (..., H, T, D),
    weights (..., H, T, T).

    Single-head attention on x = [q | k | v] (..., H, T, 3D) with projections
    that pick each third: multiplying by one-hot columns is exact, so this is
    the oracle on these very numbers.
    """
    D = q.shape[-1]
    picks = np.eye(3 * D)
    return reference_single_head(
        np.concatenate([q, k, v], axis=-1),
        picks[:, :D],
        picks[:, D : 2 * D],
        picks[:, 2 * D :],
        mask,
    )


def kv_columns(w: np.ndarray, H: int, D: int) -> np.ndarray:
    """w_k or w_v (C, H_kv * D) as (C, H * D): query head h's columns those
    of its KV head h // (H / H_kv), as plain attention's weights (transformers'
    repeat_kv on the weights)."""
    C, H_kv = w.shape[0], w.shape[1] // D
    return np.repeat(w.reshape(C, H_kv, D), H // H_kv, axis=1).reshape(C, H * D)


def single_head_mask(mask: np.ndarray) -> np.ndarray:
    """A mask for (*batch, H, T, T) with H = 1 as single-head attention reads
    it, (*batch, T, T): the head axis dropped (a (T, T) mask stays)."""
    return mask if mask.ndim == 2 else mask[..., 0, :, :]
