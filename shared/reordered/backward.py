"""The backward references: the gradients of L = sum(out * d_out) in the
input's dtype (float32 or float64), by the same chain rule as
impl_numpy/backward.py, every sum in orders of orders.py."""

from __future__ import annotations

import math

import numpy as np

from shared.reordered.forward import (
    allowed_keys,
    as_inputs,
    as_results,
    attend,
    merge_heads,
    split_heads,
)
from shared.reordered.orders import ordered_matmul, ordered_sum, orders_of


def reordered_multi_head_backward(
    x, w_q, w_k, w_v, w_o, H, d_out, mask=None, *, scale=True, which=0, matmul="float32"
):
    """The gradients of L = sum(out * d_out) for `multi_head_attention`, in x's
    dtype (float32 or float64), every sum in order `which`: {"x", "w_q", "w_k",
    "w_v", "w_o"}, float64. The same chain rule as impl_numpy/backward.py."""
    orders = orders_of(which)
    x, w_q, w_k, w_v, w_o, d_out = as_inputs(
        (x, w_q, w_k, w_v, w_o, d_out), np.asarray(x).dtype
    )
    q, k, v = (
        split_heads(ordered_matmul(x, w, orders, matmul), H) for w in (w_q, w_k, w_v)
    )
    allowed = allowed_keys(x.shape[-2], mask)
    heads, weights = attend(q, k, v, allowed, scale, orders, matmul)
    grads = {"w_o": _over_positions(merge_heads(heads), d_out, orders, matmul)}
    d_heads = split_heads(
        ordered_matmul(d_out, w_o.swapaxes(-1, -2), orders, matmul), H
    )
    d_q, d_k, d_v = _attend_backward(q, k, v, weights, d_heads, scale, orders, matmul)
    d_ys = map(merge_heads, (d_q, d_k, d_v))
    grads = _project_backward(x, (w_q, w_k, w_v), d_ys, orders, matmul) | grads
    return dict(zip(grads, as_results(grads.values(), which), strict=True))


def reordered_single_head_backward(
    x, w_q, w_k, w_v, d_out, mask=None, *, scale=True, which=0, matmul="float32"
):
    """As `reordered_multi_head_backward`, for `single_head_attention`:
    {"x", "w_q", "w_k", "w_v"}, float64."""
    orders = orders_of(which)
    x, w_q, w_k, w_v, d_out = as_inputs((x, w_q, w_k, w_v, d_out), np.asarray(x).dtype)
    q, k, v = (ordered_matmul(x, w, orders, matmul) for w in (w_q, w_k, w_v))
    allowed = allowed_keys(x.shape[-2], mask)
    _, weights = attend(q, k, v, allowed, scale, orders, matmul)
    d_q, d_k, d_v = _attend_backward(q, k, v, weights, d_out, scale, orders, matmul)
    grads = _project_backward(x, (w_q, w_k, w_v), (d_q, d_k, d_v), orders, matmul)
    return dict(zip(grads, as_results(grads.values(), which), strict=True))


def reordered_attention_backward(
    q, k, v, d_out, mask=None, *, scale=True, causal=True, which=0, matmul="float32"
):
    """The gradients {"q", "k", "v"} of `reordered_attention` given d_out, float64."""
    orders = orders_of(which)
    q, k, v, d_out = as_inputs((q, k, v, d_out), np.asarray(q).dtype)
    allowed = allowed_keys(q.shape[-2], mask, causal)
    _, weights = attend(q, k, v, allowed, scale, orders, matmul)
    grads = _attend_backward(q, k, v, weights, d_out, scale, orders, matmul)
    return dict(zip("qkv", as_results(grads, which), strict=True))


def _attend_backward(q, k, v, weights, d_out, scale, orders, matmul):
    d_weights = ordered_matmul(d_out, v.swapaxes(-1, -2), orders, matmul)  # (..., T, T)
    d_v = ordered_matmul(weights.swapaxes(-1, -2), d_out, orders, matmul)  # (..., T, D)
    d_scores = weights * (d_weights - ordered_sum(d_weights * weights, orders))
    if scale:
        d_scores = d_scores / q.dtype.type(math.sqrt(q.shape[-1]))
    d_q = ordered_matmul(d_scores, k, orders, matmul)  # (..., T, D)
    d_k = ordered_matmul(d_scores.swapaxes(-1, -2), q, orders, matmul)  # (..., T, D)
    return d_q, d_k, d_v


def _project_backward(x, weights, d_ys, orders, matmul):
    grads, d_x = {}, None
    for name, w, d_y in zip(("w_q", "w_k", "w_v"), weights, d_ys, strict=True):
        part = ordered_matmul(d_y, w.swapaxes(-1, -2), orders, matmul)  # (..., T, C)
        d_x = part if d_x is None else d_x + part
        grads[name] = _over_positions(x, d_y, orders, matmul)
    return {"x": d_x, **grads}


def _over_positions(a, d_y, orders, matmul):
    """a^T @ d_y summed over every position of every batch item: (O, C, D)."""
    rows = a.reshape(a.shape[0], -1, a.shape[-1])  # (O, B·T, C)
    d_rows = d_y.reshape(d_y.shape[0], -1, d_y.shape[-1])  # (O, B·T, D)
    return ordered_matmul(rows.swapaxes(-1, -2), d_rows, orders, matmul)
