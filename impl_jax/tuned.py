"""Causal self-attention tuned for speed on a CPU, in JAX: not on the reading path.

blockwise.py teaches the online softmax; this file is what a performance
engineer does next, kept apart so that the teaching code stays short. It gives
the same answer (tests/test_tuned.py holds it to the float64 oracle at the
table's tolerances) and is timed as the bench mode `jax-tuned-jit`
(docs/bench.md, "Our attention against the fused kernels"). What it changes:

- one product for q, k and v: x @ [w_q / sqrt(D) | w_k | w_v], so XLA runs
  one large GEMM and the scale costs nothing;
- the heads laid out once, k already transposed as (..., H, D, T), so that no
  product in the loop copies a block of k to transpose it;
- blockwise.py's online softmax at a measured block size (`block_size_for`),
  both loops run by XLA (`lax.fori_loop`), not unrolled at trace time, and
  each query block's heads projected by w_o and written into their rows of
  the output in place: no (..., H, T, D) joined and laid out at the end;
- `on_threads`: a group of heads per core, each a program called from a
  thread of its own, so that each core runs whole blocks where XLA would split
  every small product of one program between them.

The NaN rule is attention.py's: a value that is not finite is set to 0 before
the products and its rows are made NaN at the end.

Shape legend: ... batch, T sequence, C model width, H heads, D head width,
B block.
"""

from __future__ import annotations

import functools
import math
import operator
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
from jax import lax

from impl_jax.arrays import FRAMEWORK
from impl_jax.attention import at_least_float32, finite_values
from shared.blocks import head_groups, online_block_size
from shared.validation.attention import check_multi_head
from shared.validation.blockwise import check_block_size, check_workers
from shared.variants import Variant


def block_size_for(T):
    """B of one program: shared.blocks' rule, 256 on one core and 512 on more
    (XLA runs one thread per core the process may use when it starts), never
    more than T. Counted when the function is traced: after a process changes
    its affinity, XLA keeps the pool it made, but a new trace counts anew.
    `on_threads` gives each group the block of its share of the cores."""
    return online_block_size(T)


def multi_head_tuned_attention(
    x, w_q, w_k, w_v, w_o, n_heads, *, block_size=None, head_dim=None
):
    """Multi-head causal self-attention, as `multi_head_attention` computes it,
    without the weights: every head in one program (jax.jit it, or take
    `multi_head_tuned_attention_jit`; `on_threads` runs groups of heads side
    by side).

    Args:
        x: (..., T, C). w_q, w_k, w_v, w_o: (C, C) projections, x @ w; with
            head_dim, (C, H * D) and w_o (H * D, C), as `multi_head_attention`
            takes them (a group of a layer's heads, for `on_threads`).
        n_heads: H, which must divide C unless head_dim is given.
        block_size: B, the positions of one query block and of one key
            block; None: `block_size_for`.
        head_dim: D, the width of a head; None: C / H.

    Returns:
        out (..., T, C) in x's dtype.
    """
    sizes = None if head_dim is None else Variant(head_dim=head_dim)
    dims, _ = check_multi_head(
        x, w_q, w_k, w_v, w_o, n_heads, variant=sizes, framework=FRAMEWORK
    )
    H = dims.H
    block_size = None if block_size is None else check_block_size(block_size)
    dtype = x.dtype
    x, w_q, w_k, w_v, w_o = (at_least_float32(a) for a in (x, w_q, w_k, w_v, w_o))
    return _attention(x, w_q, w_k, w_v, w_o, H, block_size).astype(dtype)


def _attention(x, w_q, w_k, w_v, w_o, H, block_size):
    """out (..., T, C) in x's dtype (float32 at least), from checked inputs."""
    *batch, T, _ = x.shape
    D = w_q.shape[-1] // H
    B = min(block_size or block_size_for(T), T)  # a block longer than T is T
    # q, k and v in one product, the scale folded into w_q
    w_qkv = jnp.concatenate([w_q * (1.0 / math.sqrt(D)), w_k, w_v], axis=-1)  # (C, 3HD)
    qkv = (x @ w_qkv).reshape(*batch, T, 3, H, D)  # (..., T, 3, H, D)
    q = jnp.moveaxis(qkv[..., 0, :, :], -2, -3)  # (..., H, T, D)
    k_t = jnp.moveaxis(qkv[..., 1, :, :], -3, -1)  # (..., H, D, T)
    v = jnp.moveaxis(qkv[..., 2, :, :], -2, -3)  # (..., H, T, D)
    v_finite = finite_values(v)  # (..., H, T, D): 0 * NaN is NaN
    w_o_heads = w_o.reshape(H, D, w_o.shape[-1])  # (H, D, C)

    def query_block(start, n, blocks_before, out):
        """Queries start to start + n (n static) into their rows of `out`."""
        q_block = lax.dynamic_slice_in_dim(q, start, n, axis=-2)  # (..., H, n, D)
        state = (
            jnp.full(q_block.shape[:-1], -jnp.inf, q.dtype),  # m
            jnp.zeros(q_block.shape[:-1], q.dtype),  # l
            jnp.zeros(q_block.shape, q.dtype),  # acc
        )

        def unmasked_block(j, state):
            k_block = lax.dynamic_slice_in_dim(k_t, j * B, B, axis=-1)  # (..., H, D, B)
            v_block = lax.dynamic_slice_in_dim(v_finite, j * B, B, axis=-2)
            return online_softmax_step(state, q_block @ k_block, v_block)

        # the key blocks before the diagonal need no mask
        state = lax.fori_loop(0, blocks_before, unmasked_block, state)
        k_block = lax.dynamic_slice_in_dim(k_t, start, n, axis=-1)  # (..., H, D, n)
        scores = q_block @ k_block  # (..., H, n, n): the diagonal block
        rows = lax.broadcasted_iota(jnp.int32, (n, n), 0)
        columns = lax.broadcasted_iota(jnp.int32, (n, n), 1)
        scores = jnp.where(columns > rows, -jnp.inf, scores)  # the future
        v_block = lax.dynamic_slice_in_dim(v_finite, start, n, axis=-2)
        _, row_sum, acc = online_softmax_step(state, scores, v_block)
        heads = acc / row_sum[..., None]  # (..., H, n, D)
        # merged and projected block by block: no (..., H, T, D) to lay out again
        block_out = jnp.einsum("...hnd,hdc->...nc", heads, w_o_heads)  # (..., n, C)
        return lax.dynamic_update_slice_in_dim(out, block_out, start, axis=-2)

    out = jnp.zeros((*batch, T, w_o.shape[-1]), q.dtype)  # (..., T, C), filled in place
    whole = T // B
    out = lax.fori_loop(  # a loop XLA runs, not one unrolled at trace time
        0, whole, lambda i, out: query_block(i * B, B, i, out), out
    )
    if T % B:  # the last, shorter block
        out = query_block(whole * B, T % B, whole, out)
    # NaN in, NaN out: a row that attends a key whose value is not finite
    finite = jnp.isfinite(v).all(axis=-1)  # (..., H, T)
    attends_nonfinite = (jnp.cumsum(~finite, axis=-1) > 0).any(axis=-2)  # (..., T)
    return jnp.where(attends_nonfinite[..., None], jnp.nan, out)


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
    multi_head_tuned_attention, static_argnames=("n_heads", "block_size", "head_dim")
)


def on_threads(attention, workers=None):
    """`attention` (a jax.jit of `multi_head_tuned_attention`) run on groups of
    heads at once, each called from a thread of its own (docs/bench.md,
    "Threads over heads"). A group's heads are their columns of w_q, w_k, w_v
    and rows of w_o; the layer's out is the sum of the groups' projections,
    in float32 at least, cast to x's dtype.

    Args:
        attention: called as attention(x, w_q, w_k, w_v, w_o, H, block_size=,
            head_dim=) on each group's heads.
        workers: threads, each with one group of heads; None: one per core
            this process may use when it is called
            (`shared.blocks.schedulable_cores`). The groups are the largest
            number of equal groups of heads, at most `workers`: 8 heads on 3
            workers are 2 groups of 4.

    Returns:
        multi_head_tuned_attention's signature without head_dim (a whole
        layer, w_* (C, C)), with `workers` fixed.
    """
    workers = None if workers is None else check_workers(workers)

    def call(x, w_q, w_k, w_v, w_o, n_heads, *, block_size=None):
        H = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, framework=FRAMEWORK)[0].H
        block_size = None if block_size is None else check_block_size(block_size)
        groups, B = head_groups(x.shape[-2], H, workers)
        if groups == 1:
            return attention(x, w_q, w_k, w_v, w_o, H, block_size=block_size)
        block_size = block_size or B
        dtype = x.dtype
        x, w_q, w_k, w_v, w_o = (at_least_float32(a) for a in (x, w_q, w_k, w_v, w_o))
        D = w_q.shape[-1] // H
        width = (H // groups) * D  # the columns of one group's heads

        def group(g):
            heads = slice(g * width, (g + 1) * width)
            weights = (w_q[:, heads], w_k[:, heads], w_v[:, heads], w_o[heads, :])
            return attention(
                x, *weights, H // groups, block_size=block_size, head_dim=D
            )

        with ThreadPoolExecutor(groups) as pool:
            parts = list(pool.map(group, range(groups)))  # (..., T, C) each
        return functools.reduce(operator.add, parts).astype(dtype)

    return call


multi_head_tuned_attention_threaded = on_threads(multi_head_tuned_attention_jit)
"""multi_head_tuned_attention_jit on one group of heads per core."""
