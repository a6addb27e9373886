"""Exercise 7, JAX: vmap over the heads, jit with a static argument, grad,
and the layer as a flax nnx.Module.

Replace each `raise NotImplementedError` with the lines it names; the
hints are in README.md beside this file. Grade it:

    python exercises/grade.py exercises/07_framework/framework_jax.py

The answer key is your teacher's (docs/teaching.md#answer-key).
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx


def one_head(q, k, v):
    """Steps 3 to 7 of one head (given): q, k, v (T, D) -> out (T, D)."""
    T, D = q.shape
    scores = q @ k.T / math.sqrt(D)  # (T, T)
    scores = jnp.where(jnp.tril(jnp.ones((T, T), dtype=bool)), scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=-1) @ v  # (T, D)


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads):
    """x (T, C); w_* (C, C) -> out (T, C)."""
    T, C = x.shape
    H, D = n_heads, C // n_heads
    # 1. project x into queries, keys and values
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (T, C)
    # 2. split heads
    q, k, v = (a.reshape(T, H, D).swapaxes(0, 1) for a in (q, k, v))  # (H, T, D)
    # 3. to 7. every head at once: one_head mapped over the head axis
    # 7. (continued) merge heads, output projection:
    #    return out.swapaxes(0, 1).reshape(T, C) @ w_o
    raise NotImplementedError("3. to 7. with jax.vmap: see README.md")


def compiled():
    """multi_head_attention under jax.jit, n_heads static."""
    raise NotImplementedError("jit, n_heads static: see README.md")


def weight_gradients(x, w_q, w_k, w_v, w_o, n_heads, d_out):
    """The gradients of sum(out * d_out) with respect to w_q, w_k, w_v, w_o,
    by jax.grad: a tuple of four (C, C) arrays."""
    raise NotImplementedError("jax.grad of the four weights: see README.md")


class CausalSelfAttention(nnx.Module):
    """The layer in flax's nnx: x (T, C) -> out (T, C). Its four weights w_q,
    w_k, w_v, w_o (C, C) are its parameters, used as x @ w (in, out)."""

    def __init__(self, d_model, n_heads, *, rngs):
        self.n_heads = n_heads
        # the four weights, (C, C) each, registered as the module's parameters
        raise NotImplementedError("the parameters: see README.md")

    def __call__(self, x):
        # multi_head_attention on the module's weights
        raise NotImplementedError("__call__: see README.md")
