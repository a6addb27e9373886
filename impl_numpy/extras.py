"""What NumPy adds to the lesson: nothing. No map over an axis, no trace, no
compiler, no fused attention: to run the one-head lesson on every head, NumPy
loops (docs/reading.md, "What each framework adds")."""

import numpy as np

from impl_numpy import lesson


def heads_of(w, n_heads):
    """(C, C) -> (H, C, D): each head's columns of a projection."""
    C = w.shape[0]
    return w.reshape(C, n_heads, C // n_heads).swapaxes(0, 1)  # (C, H, D) -> (H, C, D)


def every_head(x, w_q, w_k, w_v, n_heads):
    """The one-head lesson run on each head: out (H, T, D), weights (H, T, T)."""
    q_heads, k_heads, v_heads = (heads_of(w, n_heads) for w in (w_q, w_k, w_v))
    heads = [
        lesson.single_head_attention(x, q, k, v)  # a Python loop over the H heads
        for q, k, v in zip(q_heads, k_heads, v_heads, strict=True)
    ]
    out = np.stack([o for o, _ in heads])  # (H, T, D)
    weights = np.stack([w for _, w in heads])  # (H, T, T)
    return out, weights
