"""What JAX adds to the lesson: a map over heads (jax.vmap), the trace of a
function (jax.make_jaxpr) and its compiler (jax.jit), each equal to the
lesson (docs/reading.md, "What each framework adds")."""

import jax

from impl_jax import lesson


def heads_of(w, n_heads):
    """(C, C) -> (H, C, D): each head's columns of a projection."""
    C = w.shape[0]
    return w.reshape(C, n_heads, C // n_heads).swapaxes(0, 1)  # (C, H, D) -> (H, C, D)


def every_head(x, w_q, w_k, w_v, n_heads):
    """The one-head lesson mapped over the heads: out (H, T, D), weights (H, T, T)."""
    q_heads, k_heads, v_heads = (heads_of(w, n_heads) for w in (w_q, w_k, w_v))
    over_heads = jax.vmap(lesson.single_head_attention, in_axes=(None, 0, 0, 0))
    return over_heads(x, q_heads, k_heads, v_heads)  # x shared, weights per head


def trace(x, w_q, w_k, w_v):
    """The program JAX records from one head: a jaxpr, traced on stand-ins."""
    return jax.make_jaxpr(lesson.single_head_attention)(x, w_q, w_k, w_v)


def compiled():
    """The lesson traced once per new shape, compiled by XLA, then rerun."""
    return jax.jit(lesson.single_head_attention)
