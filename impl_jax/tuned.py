"""Causal self-attention tuned for speed on a CPU, in JAX: not on the reading path.

blockwise.py teaches the online softmax; this file is what a performance
engineer does next, kept apart so that the teaching code stays short. It gives
the same answer (tests/test_tuned.py holds it to the float64 oracle at the
table's tolerances) and is timed as the bench mode `jax-tuned-jit`
(docs/bench.md, "Our attention against the fused kernels"). What it changes:

- one product for q, k and v: x @ [w_q / sqrt(D) | w_k | w_v], a (C, 3C)
  matrix, so XLA runs one large GEMM instead of three and the scale costs
  nothing;
- the heads laid out once, q and v as (..., H, T, D) and k already transposed
  as (..., H, D, T), so that no product in the loop copies a block of k to
  transpose it (XLA did, for blockwise.py's `q_block @ k_block.mT`);
- the online softmax of blockwise.py, block by block, at a block size from a
  measured rule (`block_size_for`): XLA keeps each key block's products and
  its fused softmax in cache, where a query block against all its keys (the
  layout impl_numpy/tuned.py and impl_torch/tuned.py use) measured 1.3x to
  2.7x slower under jax.jit, every block a product of a different static
  shape. The loops are blockwise.py's: query blocks unrolled at trace time,
  the key blocks before the diagonal a `lax.fori_loop`, the diagonal block
  masked with positions from `lax.broadcasted_iota`.

The NaN rule is attention.py's: a value that is not finite is set to 0 before
the products and its rows are made NaN at the end.

Shape legend: ... batch, T sequence, C model width, H heads, D head width,
B block.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from impl_jax.arrays import FRAMEWORK
from impl_jax.attention import at_least_float32, finite_values
from shared.blocks import online_block_size
from shared.validation import check_block_size, check_multi_head


def block_size_for(T):
    """B: shared.blocks' rule, 128 on one core and 512 on more (XLA runs one
    thread per core the process may use when it starts), never more than T.
    Counted when the function is traced: after a process changes its
    affinity, XLA keeps the pool it made, but a new trace counts anew."""
    return online_block_size(T)


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
    block_size = None if block_size is None else check_block_size(block_size)
    dtype = x.dtype
    x, w_q, w_k, w_v, w_o = (at_least_float32(a) for a in (x, w_q, w_k, w_v, w_o))
    *batch, T, C = x.shape
    D = C // H
    B = block_size or block_size_for(T)
    # q, k and v in one product, the scale folded into w_q
    w_qkv = jnp.concatenate([w_q * (1.0 / math.sqrt(D)), w_k, w_v], axis=-1)  # (C, 3C)
    qkv = (x @ w_qkv).reshape(*batch, T, 3, H, D)  # (..., T, 3, H, D)
    q = jnp.moveaxis(qkv[..., 0, :, :], -2, -3)  # (..., H, T, D)
    k_t = jnp.moveaxis(qkv[..., 1, :, :], -3, -1)  # (..., H, D, T)
    v = jnp.moveaxis(qkv[..., 2, :, :], -2, -3)  # (..., H, T, D)
    v_finite = finite_values(v)  # (..., H, T, D): 0 * NaN is NaN
    blocks = []  # per query block, joined at the end
    for i in range(-(-T // B)):  # a Python loop: unrolled at trace time
        start, stop = i * B, min((i + 1) * B, T)
        q_block = q[..., start:stop, :]  # (..., Bq, D)
        n = stop - start
        state = (
            jnp.full(q_block.shape[:-1], -jnp.inf, q_block.dtype),  # m
            jnp.zeros(q_block.shape[:-1], q_block.dtype),  # l
            jnp.zeros(q_block.shape, q_block.dtype),  # acc
        )

        def unmasked_block(j, state, q_block=q_block):
            k_block = lax.dynamic_slice_in_dim(k_t, j * B, B, axis=-1)  # (..., D, B)
            v_block = lax.dynamic_slice_in_dim(v_finite, j * B, B, axis=-2)
            return online_softmax_step(state, q_block @ k_block, v_block)

        if i > 0:  # the key blocks before the diagonal need no mask
            state = lax.fori_loop(0, i, unmasked_block, state)
        scores = q_block @ k_t[..., start:stop]  # (..., Bq, Bq): the diagonal block
        rows = lax.broadcasted_iota(jnp.int32, (n, n), 0)
        columns = lax.broadcasted_iota(jnp.int32, (n, n), 1)
        scores = jnp.where(columns > rows, -jnp.inf, scores)  # the future
        _, row_sum, acc = online_softmax_step(
            state, scores, v_finite[..., start:stop, :]
        )
        blocks.append(acc / row_sum[..., None])  # (..., Bq, D)
    heads = jnp.concatenate(blocks, axis=-2)  # (..., H, T, D)
    # NaN in, NaN out: a row that attends a key whose value is not finite
    finite = jnp.isfinite(v).all(axis=-1)  # (..., H, T)
    attends_nonfinite = jnp.cumsum(~finite, axis=-1) > 0  # (..., H, T)
    heads = jnp.where(attends_nonfinite[..., None], jnp.nan, heads)
    out = jnp.moveaxis(heads, -3, -2).reshape(*batch, T, C) @ w_o  # (..., T, C)
    return out.astype(dtype)


def online_softmax_step(state, scores, v_block):
    """One block of scores (..., Bq, Bk) into the running (m, l, acc), as in
    blockwise.py (a diagonal row always has its own key, so m is finite)."""
    row_max, row_sum, acc = state
    new_max = jnp.maximum(row_max, scores.max(axis=-1))  # (..., Bq)
    rescale = jnp.exp(row_max - new_max)  # (..., Bq): exp(-inf) = 0 at first
    weights = jnp.exp(scores - new_max[..., None])  # (..., Bq, Bk)
    row_sum = row_sum * rescale + weights.sum(axis=-1)  # (..., Bq)
    acc = acc * rescale[..., None] + weights @ v_block  # (..., Bq, D)
    return new_max, row_sum, acc


multi_head_tuned_attention_jit = jax.jit(
    multi_head_tuned_attention, static_argnames=("n_heads", "block_size")
)
