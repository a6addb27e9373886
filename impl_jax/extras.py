"""What JAX adds to the lesson: a map over heads (jax.vmap), the trace of a
function (jax.make_jaxpr), its compiler (jax.jit, with n_heads static), the
gradient of the trace (jax.grad) and its fused attention, each equal to the
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


def compiled_heads():
    """The multi-head lesson compiled: n_heads decides a reshape, so it must be
    known when tracing (static); a traced n_heads fails."""
    return jax.jit(lesson.multi_head_attention, static_argnames="n_heads")


def gradient(x, w_q, w_k, w_v):
    """dL/dw_q (C, D) for L = out.sum(): jax.grad transposes the trace, and
    jax.jit compiles the forward and its transpose into one program."""

    def loss(w_q):
        out, _ = lesson.single_head_attention(x, w_q, w_k, w_v)  # (T, D)
        return out.sum()

    return jax.jit(jax.grad(loss))(w_q)  # (C, D)


@jax.jit
def fused(x, w_q, w_k, w_v):
    """One head through JAX's fused attention: steps 3 to 7 in one call,
    out (T, D), compiled; no weights come back (a fused kernel never stores
    them)."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (T, C) @ (C, D) -> (T, D)
    q, k, v = (a[:, None, :] for a in (q, k, v))  # (T, 1, D): its (T, heads, D)
    out = jax.nn.dot_product_attention(q, k, v, is_causal=True)  # (T, 1, D)
    return out[:, 0]  # (T, D)
