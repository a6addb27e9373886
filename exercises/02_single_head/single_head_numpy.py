"""Exercise 2, NumPy: one head of causal self-attention, the seven steps.

Replace each `raise NotImplementedError` with the lines it names; the
hints are in README.md beside this file. Grade it:

    python exercises/grade.py exercises/02_single_head/single_head_numpy.py

The answer key is your teacher's (docs/teaching.md#answer-key).
"""

# ruff: noqa: F401, F841 (a skeleton: its names wait for your lines)

import math

import numpy as np


def single_head_attention(x, w_q, w_k, w_v):
    """x (..., T, C); w_q, w_k, w_v (C, D) -> out (..., T, D), weights (..., T, T)."""
    T, D = x.shape[-2], w_q.shape[-1]
    # 1. project x into queries, keys and values
    # 2. split heads (multi-head only)
    # 3. scores = q @ k^T
    # 4. scale by 1 / sqrt(D)
    # 5. mask the future
    # 6. softmax into weights
    # 7. weighted sum of values
    raise NotImplementedError("steps 1 to 7, under their comments: see README.md")
