"""Causal self-attention tuned for speed on a CPU, in JAX: not on the reading path.

blockwise.py teaches the online softmax; this file is what a performance
engineer does next, kept apart so that the teaching code stays short. It gives
the same answer (tests/test_tuned.py holds it to the float64 oracle at the
table's tolerances) and is timed as the bench mode `jax-tuned-jit`
(docs/bench.md, "Our attention against the fused kernels"). What it changes:

- one product for q, k and v: x @ [w_q / sqrt(D) | w_k | w_v], a (C, 3C)
  matrix, so XLA runs one large GEMM instead of three and the scale costs
  nothing;
- the heads split once from that product, as (..., H, T, D);
- the online softmax of blockwise.py (its `blockwise_attention`, called
  here unchanged, the scale already in q), at a block size from a measured
  rule (`block_size_for`): XLA keeps each key block's products and its fused
  softmax in cache, where a query block against all its keys (the layout
  impl_numpy/tuned.py and impl_torch/tuned.py use) measured 1.3x to 2x slower
  under jax.jit, every block a product of a different static shape.

The NaN rule is blockwise.py's, which this calls.

Shape legend: ... batch, T sequence, C model width, H heads, D head width,
B block.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from impl_jax.arrays import FRAMEWORK
from impl_jax.attention import at_least_float32
from impl_jax.blockwise import blockwise_attention
from shared.validation import check_multi_head

BLOCK_SIZE = 256
"""The block of queries and of keys: the fastest of 128, 256 and 512 at
T = 2048 to 8192 (docs/bench.md shows the measurements); blockwise.py's 512
makes the diagonal block's wasted triangle four times larger."""


def block_size_for(T):
    """B: BLOCK_SIZE, never more than T."""
    return max(1, min(BLOCK_SIZE, T))


def multi_head_tuned_attention(x, w_q, w_k, w_v, w_o, n_heads, *, block_size=None):
    """Multi-head causal self-attention, as `multi_head_attention` computes it,
    without the weights.

    Args:
        x: (..., T, C). w_q, w_k, w_v, w_o: (C, C) projections, x @ w.
        n_heads: H, which must divide C.
        block_size: B, the positions of one query block and of one key
            block; None: `block_size_for`.

    Returns:
        out (..., T, C) in x's dtype.
    """
    H = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, framework=FRAMEWORK).H
    dtype = x.dtype
    x, w_q, w_k, w_v, w_o = (at_least_float32(a) for a in (x, w_q, w_k, w_v, w_o))
    *batch, T, C = x.shape
    D = C // H
    B = block_size or block_size_for(T)
    # q, k and v in one product, the scale folded into w_q
    w_qkv = jnp.concatenate([w_q * (1.0 / math.sqrt(D)), w_k, w_v], axis=-1)  # (C, 3C)
    qkv = (x @ w_qkv).reshape(*batch, T, 3, H, D)  # (..., T, 3, H, D)
    # (..., T, H, D) -> (..., H, T, D), each of q, k and v
    q, k, v = (jnp.moveaxis(qkv[..., i, :, :], -2, -3) for i in range(3))
    heads, _ = blockwise_attention(q, k, v, block_size=B, scale=False)  # (..., H, T, D)
    out = jnp.moveaxis(heads, -3, -2).reshape(*batch, T, C) @ w_o  # (..., T, C)
    return out.astype(dtype)


multi_head_tuned_attention_jit = jax.jit(
    multi_head_tuned_attention, static_argnames=("n_heads", "block_size")
)
