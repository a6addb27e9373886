# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # blockwise.py: the online softmax, in JAX
#
# Blockwise causal attention in JAX: the online softmax, jittable, one block at a time.
#
# The naive attention.py builds every (T, T) matrix of scores, and computes the
# half above the diagonal only to mask it away. Here queries and keys come in
# blocks of B positions; each query row keeps a running max m, a running sum l of
# exp(score - m) and an accumulator acc of exp(score - m) * value, rescaled by
# exp(m_old - m_new) when a key block raises the max, so acc / l is the softmax-
# weighted sum although no row of weights ever exists whole (Milakov and
# Gimelshein 2018; Rabe and Staats 2021; FlashAttention, Dao et al. 2022). A
# causal query block visits only the key blocks up to the diagonal, and only the
# diagonal block needs a mask. docs/blockwise.md explains it step by step.
#
# Under `jax.jit` the loops are built into the program: the loop over query
# blocks is unrolled at trace time, and the key blocks before the diagonal are a
# `lax.fori_loop` with the static bound i, so the blocks above the diagonal are
# not in the compiled program at all (docs/blockwise.md, section 5).
#
# Shape legend: ... batch (any leading axes), T sequence, C model width, H heads,
# D head width (C // H), B block_size; Bq, Bk the rows of one query block and of
# one key block (B, or fewer in the last block when B does not divide T).
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_jax/blockwise.py`'s, as the page shows them: edit one and
# rerun the cells below it.

# %%
# Setup: where the project is not importable (in Colab), install it from
# its repository with pip (Colab's own NumPy, torch and JAX are enough);
# where it is (a clone after `pip install -e .`), nothing happens.
import importlib
import importlib.util
import subprocess
import sys

REPOSITORY = "https://github.com/attention-triptych/attention-triptych"
if importlib.util.find_spec("impl_numpy") is None:
    print(f"installing attention-triptych from {REPOSITORY}")
    package = f"attention-triptych @ git+{REPOSITORY}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)
    importlib.invalidate_caches()

# %%
import math
from dataclasses import replace
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from impl_jax.arrays import FRAMEWORK
from impl_jax.attention import at_least_float32, causal_mask, finite_values
from impl_jax.blockwise import DEFAULT_BLOCK_SIZE
from impl_jax.variants import (
    first_key_block, nonfinite_in_window, sink_state, variant_scores,
)
from shared.validation.blockwise import (
    check_blockwise, check_blockwise_variant,
)

# %%
def blockwise_attention(
    q, k, v, *, block_size=DEFAULT_BLOCK_SIZE, causal=True, scale=True, visit=None,
    variant=None,
):  # fmt: skip
    """Attention of per-head q, k, v (..., T, D), one block at a time.

    Args:
        q, k, v: (..., T, D), one shape and one float dtype.
        block_size: B, the positions in one query block and in one key block.
        causal: attend to j <= i only, never computing a block above the
            diagonal (True), or to every position (False).
        scale: divide scores by sqrt(D).
        visit: None, or called as visit(i, j) for each block of scores computed.
        variant: None, or a shared.Variant of the window, ALiBi (q (..., H,
            T, D)), soft-capping and sinks (broadcastable to q's batch axes,
            e.g. (H,)) (docs/variants.md); a window skips the key blocks no
            row of a query block reaches.

    Returns:
        out (..., T, D) in q's dtype; lse (..., T), each row's log-sum-exp in
        at least float32: the weight of key j in row i is exp(score_ij - lse_i).
    """
    check_blockwise(q, k, v, block_size, framework=FRAMEWORK)
    variant = check_blockwise_variant(q, causal, variant, framework=FRAMEWORK)
    dtype = q.dtype
    q, k, v = at_least_float32(q), at_least_float32(k), at_least_float32(v)
    T, D = q.shape[-2], q.shape[-1]
    B = min(block_size, T)  # a block is never longer than the sequence
    # ceil(T / B) blocks; the last one is short when B does not divide T
    n_blocks = -(-T // B)
    n_full = T // B  # the blocks of exactly B positions
    window = None if variant is None else variant.window
    # what unmasked_blocks keeps static: the choices, not the sinks (an array)
    static_variant = None if variant is None else replace(variant, sinks=None)
    # 4. scale by 1 / sqrt(D), once on the queries rather than on every block of scores
    if scale:
        q = q * (1.0 / math.sqrt(D))  # (..., T, D)
    # (B, B), True above the diagonal (j > i): what the diagonal block masks
    future = ~causal_mask(B)
    # 6. (loop) softmax, online: each query block i against the key blocks j
    #    up to the diagonal, each block through online_softmax_step (3, 5, 6, 7)
    out_blocks, lse_blocks = [], []  # per query block, joined at the end
    for i in range(n_blocks):  # a Python loop: unrolled at trace time
        rows = slice(i * B, min((i + 1) * B, T))  # the positions of query block i
        q_block = q[..., rows, :]  # (..., Bq, D)
        row_max = jnp.full_like(q_block[..., 0], -jnp.inf)  # (..., Bq), m
        row_sum = jnp.zeros_like(q_block[..., 0])  # (..., Bq), l
        acc = jnp.zeros_like(q_block)  # (..., Bq, D), acc
        state = (row_max, row_sum, acc)
        if variant is not None and variant.sinks is not None:  # each row's sum
            state = sink_state(variant.sinks, state)  # starts with its sink
        # the key blocks that need no mask: those before the diagonal (causal),
        # or every full block (not causal); with a window, from the first it reaches
        n_unmasked = i if causal else n_full
        first = first_key_block(i, B, window)
        if n_unmasked > first:  # (a loop of no steps would still be compiled)
            blocks = (first, n_unmasked)  # a lax.fori_loop: unmasked_blocks
            state = unmasked_blocks(
                state, q_block, k, v, i, blocks, B, static_variant, visit
            )
        # the last key block: the diagonal one, the only one with a future to
        # mask (causal), or the short tail when B does not divide T (not causal)
        last = i if causal else n_full
        if last < n_blocks:
            if visit is not None:
                jax.debug.callback(visit, i, last)  # runs when the block runs
            n_keys = min(B, T - last * B)  # Bk (= Bq on the diagonal)
            mask = future[:n_keys, :n_keys] if causal else None  # (Bq, Bk)
            state = key_block(
                state, q_block, k, v, rows, last * B, n_keys, mask, variant
            )
        row_max, row_sum, acc = state
        # 6. (end) normalize: out = acc / l, where l >= 1 (its max term is exp(0))
        out_blocks.append(acc / row_sum[..., None])  # (..., Bq, D)
        lse_blocks.append(row_max + jnp.log(row_sum))  # (..., Bq)
    out = jnp.concatenate(out_blocks, axis=-2)  # (..., T, D)
    lse = jnp.concatenate(lse_blocks, axis=-1)  # (..., T)
    # 7. (end) NaN in, NaN out, as in attention.py: the rows that attend a key
    #    whose value is not finite are NaN
    finite = jnp.isfinite(v).all(axis=-1)  # (..., T): keys with a finite value
    nonfinite_so_far = jnp.cumsum(~finite, axis=-1) > 0  # (..., T): one at j or before
    attends_nonfinite = nonfinite_so_far if causal else nonfinite_so_far[..., -1:]
    if window is not None:  # only a key within the row's window: variants.py
        attends_nonfinite = nonfinite_in_window(finite, window)  # (..., T)
    out = jnp.where(attends_nonfinite[..., None], jnp.nan, out)  # NaN in, NaN out
    return out.astype(dtype), lse

# %%
def online_softmax_step(state, q_block, k_block, v_block, future, score_mod=None):
    """One key block into the running (m, l, acc) of one query block;
    score_mod (soft-capping, ALiBi) as variants.py makes it."""
    row_max, row_sum, acc = state
    # 3. scores = q @ k^T, one block
    scores = q_block @ k_block.mT  # (..., Bq, D) @ (..., D, Bk) -> (..., Bq, Bk)
    if score_mod is not None:
        scores = score_mod(scores)  # soft-capping, ALiBi: variants.py
    # 5. mask the future (on the diagonal block only)
    if future is not None:
        scores = jnp.where(future, -jnp.inf, scores)
    # 6. softmax, online: the new running max, and by how much to rescale what
    #    was summed under the old one (exp(-inf) = 0 on the first block)
    new_max = jnp.maximum(row_max, scores.max(axis=-1))  # (..., Bq)
    # a row with no key yet (all masked, as padding can make) shifts by 0: no NaN
    shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)  # (..., Bq)
    rescale = jnp.exp(row_max - shift)  # (..., Bq)
    weights = jnp.exp(scores - shift[..., None])  # (..., Bq, Bk), not yet normalized
    row_sum = row_sum * rescale + weights.sum(axis=-1)  # (..., Bq)
    # 7. weighted sum of values, accumulated
    acc = acc * rescale[..., None]  # (..., Bq, D)
    acc = acc + weights @ v_block  # (..., Bq, Bk) @ (..., Bk, D) -> (..., Bq, D)
    return new_max, row_sum, acc

# %%
def key_block(state, q_block, k, v, rows, start, size, mask, variant):
    """The one body of the loop over key blocks: the `size` keys from
    position `start` into the running (m, l, acc) of the query block `rows`
    (a slice), after the variant's window, soft-capping and ALiBi on their
    scores (variants.py); `mask` (True = hidden): the diagonal block's
    future, or None."""
    k_block = lax.dynamic_slice_in_dim(k, start, size, axis=-2)  # (..., Bk, D)
    v_block = lax.dynamic_slice_in_dim(v, start, size, axis=-2)  # (..., Bk, D)
    score_mod = None
    if variant is not None:  # the window, soft-capping, ALiBi: variants.py
        H = q_block.shape[-3] if variant.alibi else None  # ALiBi's slope a head
        query_positions = jnp.arange(rows.start, rows.stop)  # (Bq,)
        key_positions = start + jnp.arange(size)  # (Bk,)
        reach, score_mod = variant_scores(variant, H, query_positions, key_positions)
        if reach is not None:  # (Bq, Bk): what the window hides, hidden too
            mask = ~reach if mask is None else mask | ~reach
    if mask is not None:  # a hidden key may hold a NaN: 0 * NaN is NaN
        v_block = finite_values(v_block)  # (..., Bk, D)
    return online_softmax_step(state, q_block, k_block, v_block, mask, score_mod)

# %%
@partial(jax.jit, static_argnames=("i", "blocks", "B", "variant", "visit"))
def unmasked_blocks(state, q_block, k, v, i, blocks, B, variant, visit):
    """The key blocks `blocks` = (first, stop) of query block i that need no
    mask (before its diagonal; not causal, every full block) into its
    running (m, l, acc): a fori_loop with static bounds, j traced, so each
    block is a dynamic slice of B positions.

    Jitted on its own so that an eager call compiles the loop once per shape
    and bounds, then reuses it (a loop body defined inside
    blockwise_attention would be a new function at every call, traced and
    compiled anew); under jax.jit it is part of the one program. `variant`
    holds the static choices only (the window, ALiBi, soft-capping); `visit`
    is static too, so a new one (a fresh lambda) compiles anew."""
    rows = slice(i * B, i * B + q_block.shape[-2])  # the positions of block i

    def unmasked_block(j, state):
        if visit is not None:
            jax.debug.callback(visit, i, j)  # runs when the loop runs
        return key_block(state, q_block, k, v, rows, j * B, B, None, variant)

    return lax.fori_loop(*blocks, unmasked_block, state)

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_jax.arrays import from_numpy, to_numpy
from shared.reference import reference_single_head
from shared.tolerances import tolerance


def f32(a):  # a NumPy array as the framework's float32 array
    return from_numpy(np.asarray(a), "float32")


def f64(a):  # back to NumPy, in float64
    return np.asarray(to_numpy(a), np.float64)


ATOL, RTOL = tolerance("float32")  # float32's tolerance (docs/suite.md)
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 6, 8))  # (B, T, C)
w = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(4)]  # (C, C)
one = [a[:, :4] for a in w[:3]]  # w_q, w_k, w_v of one head of width D = 4

# %%
# B in the shapes below is the batch of two sequences, not block_size
q, k, v = (f32(x @ a) for a in one)  # one head's (B, T, D), in float32
expected, _ = reference_single_head(x, *one)
# traced once, compiled as one program; block_size decides shapes: static
jax.clear_caches()  # an edit above is traced anew
attention = jax.jit(blockwise_attention, static_argnames="block_size")
# blocks of 2: the last query block folds in three key blocks, rescaling
# what it summed when the max grows; 4 does not divide T = 6: a last block of 2
for block_size in (2, 4):
    out, _ = attention(q, k, v, block_size=block_size)
    distance = np.abs(f64(out) - expected).max()
    print(f"blocks of {block_size}: max |out - oracle| = {distance:.2e}")
    assert np.allclose(f64(out), expected, atol=ATOL, rtol=RTOL)

# %% [markdown]
# Try it: in `online_softmax_step` leave `acc` unscaled when the max grows (drop
# the `rescale`), rerun, and blocks of 2 miss the oracle. Exercise 4
# (exercises/README.md) asks for this step.
