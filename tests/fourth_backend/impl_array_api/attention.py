"""Causal self-attention for the array API standard: the lesson's steps with
what a library adds (validation, masks, biases, rows with nothing to attend,
NaN behind a mask), as impl_numpy/attention.py adds it, in the standard's
words. No variants: a Variant other than plain attention is refused.

Shape legend as in lesson.py.
"""

import math

import array_api_strict as xp

from impl_array_api.arrays import FRAMEWORK
from shared.validation.attention import (
    check_multi_head,
    check_single_head,
    check_weights,
)


def single_head_attention(x, w_q, w_k, w_v, mask=None, *, scale=True, biases=None):
    """x (..., T, C); w_* (C, D); mask bool broadcastable to (..., T, T);
    biases a dict of b_q, b_k, b_v (D,) -> out (..., T, D), weights (..., T, T)."""
    T = check_single_head(x, w_q, w_k, w_v, mask, biases=biases, framework=FRAMEWORK).T
    b = biases or {}
    # 1. project x into queries, keys and values
    q = project(x, w_q, b.get("b_q"))  # (..., T, C) @ (C, D) -> (..., T, D)
    k = project(x, w_k, b.get("b_k"))  # (..., T, C) @ (C, D) -> (..., T, D)
    v = project(x, w_v, b.get("b_v"))  # (..., T, C) @ (C, D) -> (..., T, D)
    # 2. split heads (multi-head only)
    # 5. (ahead) who may attend whom: the causal mask, and any given mask
    allowed = allowed_keys(T, mask)  # (..., T, T)
    return attend(q, k, v, allowed, scale)  # steps 3 to 7


def multi_head_attention(
    x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, scale=True, biases=None, variant=None
):
    """x (..., T, C); w_* (C, C); mask bool broadcastable to (..., H, T, T);
    biases a dict of b_q, b_k, b_v, b_o (C,) -> out (..., T, C), weights
    (..., H, T, T). variant: None (this backend has no variants)."""
    dims, variant = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, mask, biases=biases, variant=variant,
        framework=FRAMEWORK,
    )  # fmt: skip
    if variant is not None:
        raise ValueError("the array API backend computes plain attention only")
    H, D = dims.H, dims.D
    b = biases or {}
    # 1. project x into queries, keys and values
    q = project(x, w_q, b.get("b_q"))  # (..., T, C) @ (C, C) -> (..., T, C)
    k = project(x, w_k, b.get("b_k"))  # (..., T, C) @ (C, C) -> (..., T, C)
    v = project(x, w_v, b.get("b_v"))  # (..., T, C) @ (C, C) -> (..., T, C)
    # 2. split heads (multi-head only)
    q, k, v = (heads(t, H, D) for t in (q, k, v))  # (..., T, C) -> (..., H, T, D)
    # 5. (ahead) who may attend whom: the causal mask, and any given mask
    allowed = allowed_keys(dims.T, mask)  # (..., T, T)
    out, weights = attend(q, k, v, allowed, scale)  # steps 3 to 7
    # 7. (continued) merge heads, output projection
    out = project(merged(out, dims.C), w_o, b.get("b_o"))  # (..., T, C)
    return out, weights


def attend(q, k, v, allowed, scale=True):
    """Steps 3 to 7 on per-head q, k, v (..., T, D): out (..., T, D), weights."""
    # 3. scores = q @ k^T
    scores = q @ xp.matrix_transpose(k)  # (..., T, D) @ (..., D, T) -> (..., T, T)
    # 4. scale by 1 / sqrt(D)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    # 5. mask the future (and any given mask)
    scores = xp.where(allowed, scores, -xp.inf)
    # 6. softmax into weights
    weights = softmax_or_zeros(scores)  # (..., T, T)
    # 7. weighted sum of values
    out = weights @ finite_values(v)  # (..., T, T) @ (..., T, D) -> (..., T, D)
    finite = xp.all(xp.isfinite(v), axis=-1)  # (..., T): keys with a finite value
    attends = xp.any(xp.logical_and(allowed, ~finite[..., None, :]), axis=-1)
    return xp.where(attends[..., None], xp.nan, out), weights  # NaN in, NaN out


def attention_entropy(weights):
    """Entropy in nats of each row (last axis), 0 log 0 = 0: (..., T) -> (...,)."""
    check_weights(weights, framework=FRAMEWORK)
    p_log_p = weights * xp.log(xp.where(weights > 0, weights, 1.0))
    return -xp.sum(p_log_p, axis=-1)


def project(a, w, b=None):
    """a @ w, plus b if given."""
    y = a @ w  # (..., T, C) @ (C, D) -> (..., T, D)
    return y if b is None else y + b


def heads(t, H, D):
    """(..., T, C) -> (..., H, T, D)."""
    *batch, T, _ = t.shape
    t = xp.reshape(t, (*batch, T, H, D))  # (..., T, H, D)
    n = t.ndim
    return xp.permute_dims(t, (*range(n - 3), n - 2, n - 3, n - 1))


def merged(t, C):
    """(..., H, T, D) -> (..., T, C)."""
    n = t.ndim
    t = xp.permute_dims(t, (*range(n - 3), n - 2, n - 3, n - 1))  # (..., T, H, D)
    return xp.reshape(t, (*t.shape[:-2], C))


def causal_mask(T):
    """(T, T) bool, True where query i may attend key j: j <= i."""
    return xp.arange(T)[None, :] <= xp.arange(T)[:, None]


def allowed_keys(T, mask=None):
    """The causal mask, narrowed by `mask` if given: (..., T, T) bool."""
    causal = causal_mask(T)
    return causal if mask is None else xp.logical_and(causal, mask)


def softmax_or_zeros(scores):
    """Softmax over the last axis; a row of only -inf gives zeros, not 0 / 0."""
    row_max = xp.max(scores, axis=-1, keepdims=True)  # (..., T, 1)
    row_max = xp.where(row_max == -xp.inf, 0.0, row_max)  # fully masked row
    exp = xp.exp(scores - row_max)  # masked entries: exp(-inf) = 0
    row_sum = xp.sum(exp, axis=-1, keepdims=True)  # (..., T, 1)
    return exp / xp.where(row_sum > 0, row_sum, 1.0)  # 0 / 1 = 0, never NaN


def finite_values(v):
    """v with the value of each key holding a NaN or Inf set to 0."""
    finite = xp.all(xp.isfinite(v), axis=-1, keepdims=True)  # (..., T, 1)
    return xp.where(finite, v, 0.0)  # (..., T, D)
