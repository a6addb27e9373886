"""Causal self-attention for the array API standard: the seven steps, nothing
else (impl_numpy/lesson.py in the standard's words: xp.matmul for @,
xp.matrix_transpose for .mT, comparisons of aranges for np.tril).

Shape legend: B batch (any leading axes, written ...), T sequence,
C model width (d_model), H heads, D head width (d_head = C // H).
"""

import math

import array_api_strict as xp


def single_head_attention(x, w_q, w_k, w_v):
    """x (..., T, C); w_q, w_k, w_v (C, D) -> out (..., T, D), weights (..., T, T)."""
    T = x.shape[-2]
    # 1. project x into queries, keys and values
    q = x @ w_q  # (..., T, C) @ (C, D) -> (..., T, D)
    k = x @ w_k  # (..., T, C) @ (C, D) -> (..., T, D)
    v = x @ w_v  # (..., T, C) @ (C, D) -> (..., T, D)
    # 2. split heads (multi-head only)
    # 3. scores = q @ k^T
    scores = q @ xp.matrix_transpose(k)  # (..., T, D) @ (..., D, T) -> (..., T, T)
    # 4. scale by 1 / sqrt(D)
    scores = scores / math.sqrt(q.shape[-1])
    # 5. mask the future
    future = xp.arange(T)[None, :] > xp.arange(T)[:, None]  # (T, T): j > i
    scores = xp.where(future, -xp.inf, scores)
    # 6. softmax into weights
    exp = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
    weights = exp / xp.sum(exp, axis=-1, keepdims=True)  # (..., T, T)
    # 7. weighted sum of values
    out = weights @ v  # (..., T, T) @ (..., T, D) -> (..., T, D)
    return out, weights


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads):
    """x (..., T, C); w_q, w_k, w_v, w_o (C, C); n_heads = H ->
    out (..., T, C), weights (..., H, T, T)."""
    T, C = x.shape[-2:]
    H, D = n_heads, C // n_heads
    # 1. project x into queries, keys and values
    q = x @ w_q  # (..., T, C) @ (C, C) -> (..., T, C)
    k = x @ w_k  # (..., T, C) @ (C, C) -> (..., T, C)
    v = x @ w_v  # (..., T, C) @ (C, C) -> (..., T, C)
    # 2. split heads (multi-head only)
    q = heads(q, H, D)  # (..., T, C) -> (..., H, T, D)
    k = heads(k, H, D)  # (..., T, C) -> (..., H, T, D)
    v = heads(v, H, D)  # (..., T, C) -> (..., H, T, D)
    # 3. scores = q @ k^T
    scores = q @ xp.matrix_transpose(k)  # (..., H, T, D) @ (..., H, D, T)
    # 4. scale by 1 / sqrt(D)
    scores = scores / math.sqrt(D)
    # 5. mask the future
    future = xp.arange(T)[None, :] > xp.arange(T)[:, None]  # (T, T): j > i
    scores = xp.where(future, -xp.inf, scores)
    # 6. softmax into weights
    exp = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
    weights = exp / xp.sum(exp, axis=-1, keepdims=True)  # (..., H, T, T)
    # 7. weighted sum of values
    out = weights @ v  # (..., H, T, T) @ (..., H, T, D) -> (..., H, T, D)
    # 7. (continued) merge heads, output projection
    out = merged(out, C)  # (..., H, T, D) -> (..., T, C)
    out = out @ w_o  # (..., T, C) @ (C, C) -> (..., T, C)
    return out, weights


def heads(t, H, D):
    """(..., T, C) -> (..., H, T, D)."""
    *batch, T, _ = t.shape
    t = xp.reshape(t, (*batch, T, H, D))  # (..., T, H, D)
    n = t.ndim
    return xp.permute_dims(t, (*range(n - 3), n - 2, n - 3, n - 1))  # (..., H, T, D)


def merged(t, C):
    """(..., H, T, D) -> (..., T, C)."""
    n = t.ndim
    t = xp.permute_dims(t, (*range(n - 3), n - 2, n - 3, n - 1))  # (..., T, H, D)
    return xp.reshape(t, (*t.shape[:-2], C))  # (..., T, C)
