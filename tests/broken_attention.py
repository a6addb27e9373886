"""Attention with one classic mistake each, for `triptych check` to catch
(tests/test_numpy_check.py): the mistakes students make, and the ones fused
kernels and frameworks have made.

`attention` is right: our multi-head signature, NumPy, every step a small
function, nothing masked ever leaking (a masked key is left out of the sum,
not multiplied by 0) and a row with nothing to attend giving zeros. Each
broken version is `attention` with one step replaced; EXPECTED says which
property must fail and what the diagnosis must say. The last three do not
compute at all: they loop forever, crash the interpreter, or raise.
"""

from __future__ import annotations

import math
import os

import numpy as np


def project(x, w):
    return x @ w  # (..., T, C) @ (C, C) -> (..., T, C)


def split(t, H):
    *B, T, C = t.shape
    return t.reshape(*B, T, H, C // H).swapaxes(-3, -2)  # (..., H, T, D)


def merge(t):
    *B, H, T, D = t.shape
    return t.swapaxes(-3, -2).reshape(*B, T, H * D)  # (..., T, C)


def scores_of(q, k):
    return q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])  # (..., H, T, T)


def allowed_of(T, mask):
    causal = np.tril(np.ones((T, T), dtype=bool))
    return causal if mask is None else causal & mask


def softmax(scores, allowed):
    top = np.where(allowed, scores, -np.inf).max(axis=-1, keepdims=True)
    exp = np.exp(
        np.where(allowed, scores - np.where(np.isfinite(top), top, 0), -np.inf)
    )
    total = exp.sum(axis=-1, keepdims=True)
    return exp / np.where(total == 0, 1, total)  # a row of nothing: zeros


def weighted(weights, v, allowed):
    # (..., H, T, T, 1) * (..., H, 1, T, D), masked terms left out, summed over keys
    terms = np.where(allowed[..., None], weights[..., None] * v[..., None, :, :], 0)
    return terms.sum(axis=-2)  # (..., H, T, D)


def attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None, **steps):
    """Right: x (..., T, C), w (C, C) -> out (..., T, C), weights (..., H, T, T).
    `steps` replace the steps of the same name (the broken versions below)."""
    step = {
        "project": project,
        "split": split,
        "scores_of": scores_of,
        "allowed_of": allowed_of,
        "softmax": softmax,
        "weighted": weighted,
        "merge": merge,
        **steps,
    }
    q, k, v = (step["split"](step["project"](x, w), n_heads) for w in (w_q, w_k, w_v))
    allowed = step["allowed_of"](x.shape[-2], mask)
    weights = step["softmax"](step["scores_of"](q, k), allowed)
    out = step["merge"](step["weighted"](weights, v, allowed))
    return step["project"](out, w_o), weights


def transposed_weights(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """x @ w.T: the weights read as nn.Linear stores them."""
    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, project=lambda x, w: x @ w.T)


def no_scale(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    return attention(
        x,
        w_q,
        w_k,
        w_v,
        w_o,
        n_heads,
        mask,
        scores_of=lambda q, k: q @ k.swapaxes(-1, -2),
    )


def scaled_by_d(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def scores(q, k):
        return q @ k.swapaxes(-1, -2) / q.shape[-1]

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, scores_of=scores)


def scaled_by_model_width(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def scores(q, k):
        return q @ k.swapaxes(-1, -2) / math.sqrt(x.shape[-1])

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, scores_of=scores)


def softmax_over_queries(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def over_queries(scores, allowed):
        return softmax(scores.swapaxes(-1, -2), allowed.swapaxes(-1, -2)).swapaxes(
            -1, -2
        )

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=over_queries)


def inverted_mask(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """True read as may NOT attend, as nn.MultiheadAttention reads it."""
    mask = None if mask is None else ~mask
    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask)


def mask_replaces_causal(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def allowed(T, mask):
        return (
            allowed_of(T, None) if mask is None else np.broadcast_to(mask, mask.shape)
        )

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed)


def off_by_one(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """np.tril(..., k=1): each query sees one key of the future."""

    def allowed(T, mask):
        causal = np.tril(np.ones((T, T), dtype=bool), k=1)
        return causal if mask is None else causal & mask

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed)


def no_causal_mask(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def allowed(T, mask):
        every = np.ones((T, T), dtype=bool)
        return every if mask is None else every & mask

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, allowed_of=allowed)


def max_not_subtracted(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def plain(scores, allowed):
        exp = np.where(allowed, np.exp(scores), 0)  # exp(1e4) = inf
        total = exp.sum(axis=-1, keepdims=True)
        return exp / np.where(total == 0, 1, total)

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=plain)


def nan_for_fully_masked_rows(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """The textbook softmax: a row of -inf is 0 / 0."""

    def plain(scores, allowed):
        scores = np.where(allowed, scores, -np.inf)
        exp = np.exp(scores - scores.max(axis=-1, keepdims=True))  # -inf - -inf
        return exp / exp.sum(axis=-1, keepdims=True)

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=plain)


def nan_leaks_through_the_mask(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """weights @ v: a masked weight is 0, and 0 * NaN = NaN."""
    return attention(
        x, w_q, w_k, w_v, w_o, n_heads, mask, weighted=lambda weights, v, _: weights @ v
    )


def heads_split_without_transpose(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def straight(t, H):
        *B, T, C = t.shape
        return t.reshape(*B, H, T, C // H)

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, split=straight)


def dropout_left_on(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    def dropped(scores, allowed):
        weights = softmax(scores, allowed)
        keep = np.random.default_rng().random(weights.shape) > 0.1
        return weights * keep / 0.9

    return attention(x, w_q, w_k, w_v, w_o, n_heads, mask, softmax=dropped)


def float32_inside(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """float64 computed in float32 (as JAX's fused kernel does); x's dtype out."""
    args = [
        a.astype(np.float32) if a.dtype == np.float64 else a
        for a in (x, w_q, w_k, w_v, w_o)
    ]
    out, weights = attention(*args, n_heads, mask)
    return out.astype(x.dtype), weights.astype(x.dtype)


def endless_loop(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    while True:
        pass


def crashes(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    os.abort()


def raises(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    raise ValueError("not implemented yet")


EXPECTED = {
    "transposed_weights": ("oracle:float64", "weights are transposed"),
    "no_scale": ("scale", "scale missing"),
    "scaled_by_d": ("scale", "divided by D instead of sqrt(D)"),
    "scaled_by_model_width": ("scale", "the model width"),
    "softmax_over_queries": ("rows sum to 1", "softmax over the query axis"),
    "inverted_mask": ("mask", "mask inverted"),
    "mask_replaces_causal": ("mask", "replaces the causal mask"),
    "off_by_one": ("causality", "future leaks at offset 1"),
    "no_causal_mask": ("causality", "no causal mask"),
    "max_not_subtracted": ("hostile magnitudes", "max not subtracted"),
    "nan_for_fully_masked_rows": ("fully masked rows", "NaN from a fully masked row"),
    "nan_leaks_through_the_mask": ("NaN behind the mask", "0 * NaN = NaN"),
    "heads_split_without_transpose": (
        "independence",
        "heads split without the transpose",
    ),
    "dropout_left_on": ("determinism", "dropout left on"),
}
"""Each broken version: the property that must FAIL, and words of its diagnosis."""
