"""The forward references: attention and its entropy in the input's dtype,
rounded where the precision policy rounds, every sum in orders of orders.py.

Each function takes `which`, one order (an int) or several computed at once
(then each result has a leading axis, one per order); the arrays inside carry
that leading axis O throughout, 1 where an input is the same for every order.
"""

from __future__ import annotations

import math

import numpy as np

from shared.reordered.orders import ordered_matmul, ordered_sum, orders_of


def wide_dtype(dtype) -> np.dtype:
    """Where the policy computes: float32 for half precision, else the dtype."""
    return np.promote_types(np.dtype(dtype), np.float32)


def rounded(a, dtype):
    """a rounded to `dtype` and widened again: a rounding point of the policy."""
    return a.astype(dtype).astype(wide_dtype(dtype))


def allowed_keys(T, mask, causal=True):
    allowed = np.ones((T, T), dtype=bool)
    if causal:
        allowed = np.tril(allowed)
    return allowed if mask is None else allowed & np.asarray(mask, dtype=bool)


def as_inputs(arrays, dtype):
    """Each array in `dtype`, with a leading axis of 1: the same for every order."""
    return [np.asarray(a).astype(dtype)[None] for a in arrays]


def as_results(arrays, which):
    """float64 results: stacked by order, or the one order's if `which` is an int."""
    arrays = [a.astype(np.float64) for a in arrays]
    return [a[0] for a in arrays] if isinstance(which, int | np.integer) else arrays


def attend(q, k, v, allowed, scale, orders, matmul):
    """Steps 3 to 7 in the wide dtype: out (O, ..., T, D), weights (O, ..., T, T)."""
    scores = ordered_matmul(q, k.swapaxes(-1, -2), orders, matmul)  # (O, ..., T, T)
    if scale:
        scores = scores / q.dtype.type(math.sqrt(q.shape[-1]))
    scores = np.where(allowed, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(row_max == -np.inf, 0, row_max)  # a fully masked row
    exp = np.exp(scores - row_max)
    total = ordered_sum(exp, orders)
    weights = exp / np.where(total > 0, total, 1)
    return ordered_matmul(weights, v, orders, matmul), weights


def reordered_single_head(
    x, w_q, w_k, w_v, mask=None, *, scale=True, which=0, matmul="float32"
):
    """`single_head_attention` in x's dtype, summed in order `which` (an int,
    or several at once: then each result has a leading axis, one per order):
    out (..., T, D) and weights (..., T, T), float64."""
    dtype, orders = np.asarray(x).dtype, orders_of(which)
    x, w_q, w_k, w_v = as_inputs((x, w_q, w_k, w_v), wide_dtype(dtype))
    q, k, v = (
        rounded(ordered_matmul(x, w, orders, matmul), dtype) for w in (w_q, w_k, w_v)
    )
    allowed = allowed_keys(x.shape[-2], mask)
    out, weights = attend(q, k, v, allowed, scale, orders, matmul)
    return as_results((rounded(out, dtype), rounded(weights, dtype)), which)


def reordered_multi_head(
    x, w_q, w_k, w_v, w_o, H, mask=None, *, scale=True, which=0, matmul="float32"
):
    """`multi_head_attention` in x's dtype, summed in order `which` (as for
    `reordered_single_head`): out (..., T, C) and weights (..., H, T, T),
    float64."""
    dtype, orders = np.asarray(x).dtype, orders_of(which)
    x, w_q, w_k, w_v, w_o = as_inputs((x, w_q, w_k, w_v, w_o), wide_dtype(dtype))
    q, k, v = (
        split_heads(rounded(ordered_matmul(x, w, orders, matmul), dtype), H)
        for w in (w_q, w_k, w_v)
    )
    allowed = allowed_keys(x.shape[-2], mask)
    heads, weights = attend(q, k, v, allowed, scale, orders, matmul)
    merged = rounded(merge_heads(heads), dtype)
    out = rounded(ordered_matmul(merged, w_o, orders, matmul), dtype)
    return as_results((out, rounded(weights, dtype)), which)


def reordered_attention(
    q, k, v, mask=None, *, scale=True, causal=True, which=0, matmul="float32"
):
    """Steps 3 to 7 on per-head q, k, v (..., T, D) in q's dtype, summed in
    order `which`: out (..., T, D), weights (..., T, T), float64. For the
    blockwise attention, the kernels and the targets of triptych check."""
    dtype = np.asarray(q).dtype
    q, k, v = as_inputs((q, k, v), wide_dtype(dtype))
    allowed = allowed_keys(q.shape[-2], mask, causal)
    out, weights = attend(q, k, v, allowed, scale, orders_of(which), matmul)
    return as_results((rounded(out, dtype), rounded(weights, dtype)), which)


def reordered_entropy(weights, which=0, matmul="float32"):
    """`attention_entropy` of weights (..., T) in their dtype, summed in order
    `which`: (...,), float64. (`matmul` is for `references`: no matmul here.)"""
    dtype = np.asarray(weights).dtype
    (p,) = as_inputs((weights,), wide_dtype(dtype))
    (entropy,) = as_results((entropy_in_orders(p, dtype, orders_of(which)),), which)
    return entropy


def entropy_in_orders(p, dtype, orders):
    """The entropy of p (O, ..., T), already wide, each order's own p summed in
    that order: (O, ...), rounded to `dtype`."""
    p_log_p = p * np.log(np.where(p > 0, p, 1))
    return rounded(-ordered_sum(p_log_p, orders), dtype)[..., 0]


def split_heads(t, H):
    *batch, T, C = t.shape
    return t.reshape(*batch, T, H, C // H).swapaxes(-3, -2)  # (..., H, T, D)


def merge_heads(t):
    *batch, H, T, D = t.shape
    return t.swapaxes(-3, -2).reshape(*batch, T, H * D)  # (..., T, C)
