"""The backward pass in NumPy, by hand: the seven forward steps in reverse.

One of three parallel files (impl_numpy, impl_torch, impl_jax) with the same
names and the same order. This one is the teaching file: PyTorch and JAX get
their gradients from autodiff (torch.autograd, jax.vjp); here every step of
`attention.py` is undone by hand, with its math in the comments, and the test
suite proves the three equal (and this one equal to finite differences).

Notation: L is a scalar loss, and d_a is dL/da, an array of a's shape. A
backward function is given d_out = dL/d out and returns d_x, d_w_q, ...: the
vector-Jacobian product of the forward with d_out. Only `out` is
differentiated; the weights the forward also returns are a by-product.

Each forward step y = f(a, b) becomes, in reverse order, "given d_y, find d_a
and d_b". For a matmul y = a @ b that is d_a = d_y @ b^T and d_b = a^T @ d_y;
an array used twice (x feeds q, k and v) collects the sum of its gradients.

Half precision: the forward rounds q, k, v and the merged heads to x's dtype,
and the forward recomputed here rounds them the same way, so this file
differentiates the function that autodiff differentiates. A rounding passes
the gradient through unchanged, kept in float32 here, where torch.autograd and
jax.vjp round it to x's dtype at each cast; in float16 and bfloat16 the three
backward passes differ by that much (at most a quarter of the tolerance on the
presets).

Shape legend: B batch (any leading axes, written ...), T sequence,
C model width (d_model), H heads, D head width (d_head = C // H).
"""

from __future__ import annotations

import math

from impl_numpy.attention import (
    _at_least_float32,
    _attend,
    _merge_heads,
    _project,
    _split_heads,
)
from shared.validation import check_d_out, check_multi_head, check_single_head


def single_head_attention_backward(x, w_q, w_k, w_v, d_out, mask=None, *, scale=True):
    """Gradients of one head of causal self-attention.

    Args:
        x, w_q, w_k, w_v, mask, scale: as for `single_head_attention`.
        d_out: (..., T, D) gradient of the loss with respect to out, x's dtype.

    Returns:
        {"x": (..., T, C), "w_q", "w_k", "w_v": (C, D)}, the gradients of the
        loss, in x's dtype (computed in at least float32). The weight
        gradients sum over every position of every batch item.
    """
    dims = check_single_head(x, w_q, w_k, w_v, mask)
    check_d_out(d_out, x, (*dims.batch, dims.T, dims.D), "(..., T, D)")
    dtype = x.dtype
    # forward again: steps 1 to 7, keeping q, k, v and the weights; q, k, v
    # rounded to x's dtype, as the forward rounds them, then in float32 or wider
    q = _at_least_float32(_project(x, w_q))  # (..., T, C) @ (C, D) -> (..., T, D)
    k = _at_least_float32(_project(x, w_k))  # (..., T, C) @ (C, D) -> (..., T, D)
    v = _at_least_float32(_project(x, w_v))  # (..., T, C) @ (C, D) -> (..., T, D)
    _, weights = _attend(q, k, v, mask, scale)  # (..., T, T)
    x, w_q, w_k, w_v, d_out = (_at_least_float32(a) for a in (x, w_q, w_k, w_v, d_out))
    # backward: the seven steps in reverse, from d_out to the inputs
    d_q, d_k, d_v = _attend_backward(q, k, v, weights, d_out, scale)  # steps 7 to 3
    # 2. split heads (multi-head only)
    # 1. project x into queries, keys and values
    grads = _project_backward(x, w_q, w_k, w_v, d_q, d_k, d_v)
    return {name: grad.astype(dtype) for name, grad in grads.items()}


def multi_head_attention_backward(
    x, w_q, w_k, w_v, w_o, n_heads, d_out, mask=None, *, scale=True
):
    """Gradients of multi-head causal self-attention.

    Args:
        x, w_q, w_k, w_v, w_o, n_heads, mask, scale: as for
            `multi_head_attention`.
        d_out: (..., T, C) gradient of the loss with respect to out, x's dtype.

    Returns:
        {"x": (..., T, C), "w_q", "w_k", "w_v", "w_o": (C, C)}, the gradients
        of the loss, in x's dtype (computed in at least float32). The weight
        gradients sum over every position of every batch item.
    """
    dims = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, mask)
    check_d_out(d_out, x, (*dims.batch, dims.T, dims.C), "(..., T, C)")
    H, dtype = dims.H, x.dtype
    # forward again: steps 1 to 7, keeping q, k, v, the weights and merged heads;
    # q, k, v and the merged heads rounded to x's dtype, as the forward rounds
    # them, then in float32 or wider
    q = _at_least_float32(_project(x, w_q))  # (..., T, C) @ (C, C) -> (..., T, C)
    k = _at_least_float32(_project(x, w_k))  # (..., T, C) @ (C, C) -> (..., T, C)
    v = _at_least_float32(_project(x, w_v))  # (..., T, C) @ (C, C) -> (..., T, C)
    q = _split_heads(q, H)  # (..., T, C) -> (..., H, T, D)
    k = _split_heads(k, H)  # (..., T, C) -> (..., H, T, D)
    v = _split_heads(v, H)  # (..., T, C) -> (..., H, T, D)
    heads_out, weights = _attend(q, k, v, mask, scale)  # (..., H, T, D), (..., H, T, T)
    merged = _merge_heads(heads_out.astype(dtype))  # (..., H, T, D) -> (..., T, C)
    merged = _at_least_float32(merged)  # (..., T, C)
    x, w_q, w_k, w_v, w_o, d_out = (
        _at_least_float32(a) for a in (x, w_q, w_k, w_v, w_o, d_out)
    )
    # backward: the seven steps in reverse, from d_out to the inputs
    # 7. (continued, undone first) output projection, merge heads.
    #    out = merged @ w_o, so d_merged = d_out @ w_o^T and d_w_o = merged^T @ d_out
    #    summed over positions. Merging heads only moves numbers, so its
    #    backward moves the gradient back: split d_merged into heads.
    d_w_o = _sum_over_positions(merged, d_out)  # (C, C)
    d_merged = d_out @ w_o.T  # (..., T, C) @ (C, C) -> (..., T, C)
    d_heads_out = _split_heads(d_merged, H)  # (..., T, C) -> (..., H, T, D)
    # steps 7 (weighted sum of values) to 3, on every head at once
    d_q, d_k, d_v = _attend_backward(q, k, v, weights, d_heads_out, scale)
    # 2. split heads (multi-head only): undone by merging each head's gradient
    #    back into its D columns.
    d_q = _merge_heads(d_q)  # (..., H, T, D) -> (..., T, C)
    d_k = _merge_heads(d_k)  # (..., H, T, D) -> (..., T, C)
    d_v = _merge_heads(d_v)  # (..., H, T, D) -> (..., T, C)
    # 1. project x into queries, keys and values
    grads = _project_backward(x, w_q, w_k, w_v, d_q, d_k, d_v)
    grads["w_o"] = d_w_o
    return {name: grad.astype(dtype) for name, grad in grads.items()}


def _attend_backward(q, k, v, weights, d_out, scale):
    """Steps 7 to 3 in reverse on per-head arrays: d_out -> d_q, d_k, d_v."""
    D = q.shape[-1]
    # 7. weighted sum of values: out = P @ v, P the weights.
    #    d_P = d_out @ v^T, and d_v = P^T @ d_out: key j collects the gradient of
    #    every query that attended to it, in proportion to P[i, j].
    d_weights = d_out @ v.mT  # (..., T, D) @ (..., D, T) -> (..., T, T)
    d_v = weights.mT @ d_out  # (..., T, T) @ (..., T, D) -> (..., T, D)
    # 6. softmax into weights: P[i, j] = exp(S[i, j]) / sum_l exp(S[i, l]).
    #    Its Jacobian is dP[i, j] / dS[i, l] = P[i, j] * (1[j = l] - P[i, l]), so
    #    the gradient of the scores S is, row by row,
    #        dS = P * (dP - sum(dP * P, axis=-1))
    #    (the mean of dP under P is subtracted: adding a constant to a row of
    #    S changes nothing, so each row of dS sums to zero). It is written with
    #    P alone: the forward's row max and exp are never differentiated.
    d_scores = weights * (d_weights - (d_weights * weights).sum(axis=-1, keepdims=True))
    # 5. mask the future (and any given mask): nothing left to do. A masked
    #    score was set to -inf, so its weight is exp(-inf) = 0, and the factor
    #    P in step 6 makes its gradient exactly 0. So no gradient flows through
    #    a masked score: out[i] sends nothing to a key j > i (nor to q[i]
    #    through it), and d out[i] / d x[j] = 0 for j > i, exactly. Nor is there
    #    a NaN to fear for finite inputs: the backward works from P and never
    #    touches the -inf. A fully masked row has P = 0 everywhere, so its whole
    #    row of dS is 0 (and it adds nothing to d_v): its output was the
    #    constant 0, and its d_out is ignored.
    # 4. scale by 1 / sqrt(D): the forward multiplied S by a constant, so the
    #    backward multiplies dS by the same constant. Without it, scores grow
    #    like sqrt(D), the softmax saturates (P nearly one-hot) and
    #    dS = P * (dP - ...) shrinks towards zero: the scale keeps the
    #    gradient alive as well as the weights soft.
    if scale:
        d_scores = d_scores / math.sqrt(D)
    # 3. scores = q @ k^T: d_q = dS @ k (query i collects the keys it scored),
    #    d_k = dS^T @ q (key j collects the queries that scored it).
    d_q = d_scores @ k  # (..., T, T) @ (..., T, D) -> (..., T, D)
    d_k = d_scores.mT @ q  # (..., T, T) @ (..., T, D) -> (..., T, D)
    return d_q, d_k, d_v


def _project_backward(x, w_q, w_k, w_v, d_q, d_k, d_v):
    """Step 1 in reverse: q = x @ w_q, k = x @ w_k, v = x @ w_v.

    Each projection y = x @ w gives d_w = x^T @ d_y, summed over positions, and
    d_x = d_y @ w^T; x fed all three, so d_x is the sum of the three.
    """
    d_x = d_q @ w_q.T  # (..., T, D) @ (D, C) -> (..., T, C)
    d_x = d_x + d_k @ w_k.T  # (..., T, D) @ (D, C) -> (..., T, C)
    d_x = d_x + d_v @ w_v.T  # (..., T, D) @ (D, C) -> (..., T, C)
    return {
        "x": d_x,
        "w_q": _sum_over_positions(x, d_q),
        "w_k": _sum_over_positions(x, d_k),
        "w_v": _sum_over_positions(x, d_v),
    }


def _sum_over_positions(a, d_y):
    """a^T @ d_y summed over every position of every batch item: (C, D)."""
    a_rows = a.reshape(-1, a.shape[-1])  # (..., T, C) -> (B·T, C)
    d_y_rows = d_y.reshape(-1, d_y.shape[-1])  # (..., T, D) -> (B·T, D)
    return a_rows.T @ d_y_rows  # (C, B·T) @ (B·T, D) -> (C, D)
