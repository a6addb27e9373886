"""Causal self-attention in NumPy, the lesson: the seven steps and nothing else.

NumPy is the plain reference: each line computes when it runs, on the CPU.
attention.py computes the same numbers, bit for bit, and adds what a library
needs (docs/reading.md shows why). Shapes: B batch (any leading axes, written
...), T sequence, C model width, H heads, D head width (C // H).
"""

import math

import numpy as np


def single_head_attention(x, w_q, w_k, w_v):
    """x (..., T, C); w_q, w_k, w_v (C, D) -> out (..., T, D), weights (..., T, T)."""
    T, D = x.shape[-2], w_q.shape[-1]
    # 1. project x into queries, keys and values
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., T, C) @ (C, D) -> (..., T, D)
    # 2. split heads (multi-head only)
    # 3. scores = q @ k^T
    scores = q @ k.mT  # (..., T, D) @ (..., D, T) -> (..., T, T)
    # 4. scale by 1 / sqrt(D)
    scores = scores / math.sqrt(D)
    # 5. mask the future
    causal = np.tril(np.ones((T, T), dtype=bool))  # (T, T)
    scores = np.where(causal, scores, -np.inf)  # (..., T, T)
    # 6. softmax into weights
    exp = np.exp(scores - scores.max(axis=-1, keepdims=True))  # (..., T, T)
    weights = exp / exp.sum(axis=-1, keepdims=True)  # (..., T, T)
    # 7. weighted sum of values
    out = weights @ v  # (..., T, T) @ (..., T, D) -> (..., T, D)
    return out, weights


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads):
    """x (..., T, C); w_* (C, C) -> out (..., T, C), weights (..., H, T, T)."""
    *B, T, C = x.shape
    H, D = n_heads, C // n_heads
    # 1. project x into queries, keys and values
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., T, C) @ (C, C) -> (..., T, C)
    # 2. split heads (multi-head only)
    q = q.reshape(*B, T, H, D).swapaxes(-3, -2)  # (..., T, C) -> (..., H, T, D)
    k = k.reshape(*B, T, H, D).swapaxes(-3, -2)  # (..., T, C) -> (..., H, T, D)
    v = v.reshape(*B, T, H, D).swapaxes(-3, -2)  # (..., T, C) -> (..., H, T, D)
    # 3. scores = q @ k^T
    scores = q @ k.mT  # (..., H, T, D) @ (..., H, D, T) -> (..., H, T, T)
    # 4. scale by 1 / sqrt(D)
    scores = scores / math.sqrt(D)
    # 5. mask the future
    causal = np.tril(np.ones((T, T), dtype=bool))  # (T, T)
    scores = np.where(causal, scores, -np.inf)  # (..., H, T, T)
    # 6. softmax into weights
    exp = np.exp(scores - scores.max(axis=-1, keepdims=True))  # (..., H, T, T)
    weights = exp / exp.sum(axis=-1, keepdims=True)  # (..., H, T, T)
    # 7. weighted sum of values
    out = weights @ v  # (..., H, T, T) @ (..., H, T, D) -> (..., H, T, D)
    # 7. (continued) merge heads, output projection
    out = out.swapaxes(-3, -2).reshape(*B, T, C)  # (..., H, T, D) -> (..., T, C)
    out = out @ w_o  # (..., T, C) @ (C, C) -> (..., T, C)
    return out, weights
