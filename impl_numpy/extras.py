"""What NumPy adds to the lesson: broadcasting, no loop over heads needed
(docs/reading.md, "What each framework adds")."""

from impl_numpy import lesson


def heads_of(w, n_heads):
    """(C, C) -> (H, C, D): each head's columns of a projection."""
    C = w.shape[0]
    return w.reshape(C, n_heads, C // n_heads).swapaxes(0, 1)  # (C, H, D) -> (H, C, D)


def every_head(x, w_q, w_k, w_v, n_heads):
    """The one-head lesson on every head at once: out (H, T, D), weights (H, T, T)."""
    q_heads, k_heads, v_heads = (heads_of(w, n_heads) for w in (w_q, w_k, w_v))
    return lesson.single_head_attention(x, q_heads, k_heads, v_heads)  # broadcasts
