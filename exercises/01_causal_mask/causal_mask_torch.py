"""Exercise 1, PyTorch: the causal mask (step 5); the other steps are given.

Replace each `raise NotImplementedError` with the lines it names; the
hints are in README.md beside this file. Grade it:

    python exercises/grade.py exercises/01_causal_mask/causal_mask_torch.py

The answer key is your teacher's (docs/teaching.md#answer-key).
"""

# ruff: noqa: F841 (a skeleton: its names wait for your lines)

import math

import torch


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
    # causal: (T, T), True where key j <= query i; scores: -inf elsewhere
    raise NotImplementedError("step 5: the causal mask, see README.md")
    # 6. softmax into weights
    exp = torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # (..., T, T)
    weights = exp / exp.sum(dim=-1, keepdim=True)  # (..., T, T)
    # 7. weighted sum of values
    out = weights @ v  # (..., T, T) @ (..., T, D) -> (..., T, D)
    return out, weights
