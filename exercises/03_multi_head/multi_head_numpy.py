"""Exercise 3, NumPy: multi-head attention: split the heads and merge them.

Replace each `raise NotImplementedError` with the lines it names; the
hints are in README.md beside this file. Grade it:

    python exercises/grade.py exercises/03_multi_head/multi_head_numpy.py

The answer key is your teacher's (docs/teaching.md#answer-key).
"""

# ruff: noqa: F841, RUF059 (a skeleton: its names wait for your lines)

import math

import numpy as np


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads):
    """x (..., T, C); w_* (C, C) -> out (..., T, C), weights (..., H, T, T)."""
    *B, T, C = x.shape
    H, D = n_heads, C // n_heads
    # 1. project x into queries, keys and values
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., T, C) @ (C, C) -> (..., T, C)
    # 2. split heads (multi-head only)
    # q, k, v: (..., T, C) -> (..., H, T, D), each head's D columns in front of T
    raise NotImplementedError("step 2: split the heads, see README.md")
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
    # out: (..., H, T, D) -> (..., T, C), the heads side by side; then @ w_o
    raise NotImplementedError("step 7 (continued): merge the heads, see README.md")
    return out, weights
