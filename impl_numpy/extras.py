"""What NumPy adds to the lesson: broadcasting, no loop over heads needed; and
what it lacks: autodiff (the gradient by hand, backward.py) and a fused
attention (docs/reading.md, "What each framework adds")."""

import numpy as np

from impl_numpy import lesson
from impl_numpy.backward import single_head_attention_backward


def heads_of(w, n_heads):
    """(C, C) -> (H, C, D): each head's columns of a projection."""
    C = w.shape[0]
    return w.reshape(C, n_heads, C // n_heads).swapaxes(0, 1)  # (C, H, D) -> (H, C, D)


def every_head(x, w_q, w_k, w_v, n_heads):
    """The one-head lesson on every head at once: out (H, T, D), weights (H, T, T)."""
    q_heads, k_heads, v_heads = (heads_of(w, n_heads) for w in (w_q, w_k, w_v))
    return lesson.single_head_attention(x, q_heads, k_heads, v_heads)  # broadcasts


def gradient(x, w_q, w_k, w_v):
    """dL/dw_q (C, D) for L = out.sum(): by hand, NumPy has no autodiff."""
    out, _ = lesson.single_head_attention(x, w_q, w_k, w_v)  # (T, D)
    d_out = np.ones_like(out)  # dL/dout for L = out.sum()
    grads = single_head_attention_backward(x, w_q, w_k, w_v, d_out)  # backward.py
    return grads["w_q"]  # (C, D)
