"""The inputs `triptych check` draws, and the float64 truth on them.

A `Problem` is a handful of small numbers (batch axes, T, heads, head width, a
seed, a kind of mask) that hypothesis draws and shrinks; `Problem.inputs()`
turns it into float64 NumPy arrays, from one seeded generator, as the suite's
fixtures are made. The truth is always the loop oracle of `shared.reference`
on exactly the numbers the implementation was given (rounded to its dtype).

Every mask drawn here is boolean, True = may attend, broadcastable to
(*batch, H, T, T), and narrows the causal mask. Apart from "empty rows", each
keeps the diagonal (or, for key padding, key 0), so every query has a key to
attend and the fully masked rows are checked on their own.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from shared.dtypes import np_dtype
from shared.reference import reference_multi_head, reference_single_head

W_NAMES = ("w_q", "w_k", "w_v", "w_o")
MASK_KINDS = ("none", "shared", "per item", "per head", "key padding", "empty rows")


class Problem(NamedTuple):
    """One drawn attention problem: C = H * D, weights (C, C)."""

    batch: tuple[int, ...]
    T: int
    H: int
    D: int
    seed: int
    mask: str = "none"

    @property
    def C(self) -> int:
        return self.H * self.D

    def text(self) -> str:
        """'x (2, 3, 4), 2 heads of width 2, mask per head, seed 5'."""
        heads = f"{self.H} head{'s' * (self.H > 1)} of width {self.D}"
        mask = "" if self.mask == "none" else f", mask {self.mask}"
        return f"x {(*self.batch, self.T, self.C)}, {heads}{mask}, seed {self.seed}"

    def inputs(self) -> Inputs:
        """x ~ N(0, 1), weights ~ N(0, 1/C) and the mask, from the seed."""
        rng = np.random.default_rng(self.seed)
        C = self.C
        x = rng.standard_normal((*self.batch, self.T, C))
        w = {name: rng.standard_normal((C, C)) / math.sqrt(C) for name in W_NAMES}
        return Inputs(x, w, self.H, draw_mask(self, rng))


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

    def replace(self, **changes) -> Inputs:
        return dataclasses.replace(self, **changes)

    def rounded(self, dtype: str) -> Inputs:
        """x and the weights rounded to `dtype`, as float64 again."""
        return self.replace(
            x=round_to(self.x, dtype),
            w={name: round_to(w, dtype) for name, w in self.w.items()},
        )

    def allowed(self) -> np.ndarray:
        """(*batch, H, T, T) booleans: the causal mask and the given one."""
        *batch, T, _ = self.x.shape
        allowed = np.tril(np.ones((T, T), dtype=bool))
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
        lengths = np.asarray(rng.integers(1, T + 1, size=batch))
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
        empty[..., rng.integers(T)] = True
        mask &= ~empty[..., None]
    return mask


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
    return reference_multi_head(inputs.x, *inputs.w.values(), inputs.H, inputs.mask)


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


def single_head_mask(mask: np.ndarray) -> np.ndarray:
    """A mask for (*batch, H, T, T) with H = 1 as single-head attention reads
    it, (*batch, T, T): the head axis dropped (a (T, T) mask stays)."""
    return mask if mask.ndim == 2 else mask[..., 0, :, :]
