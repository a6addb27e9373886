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
# # blockwise.py: the online softmax, in NumPy
#
# Blockwise causal attention in NumPy: the online softmax, one block at a time.
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
# Shape legend: ... batch (any leading axes), T sequence, C model width, H heads,
# D head width (C // H), B block_size; Bq, Bk the rows of one query block and of
# one key block (B, or fewer in the last block when B does not divide T).
#
# The first code cell installs the project where it is missing (in Colab). The
# functions are `impl_numpy/blockwise.py`'s, as the page shows them: edit one and
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

import numpy as np

from impl_numpy.arrays import FRAMEWORK
from impl_numpy.attention import at_least_float32, causal_mask, finite_values
from impl_numpy.blockwise import DEFAULT_BLOCK_SIZE
from impl_numpy.variants import (
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
    # 4. scale by 1 / sqrt(D), once on the queries rather than on every block of scores
    if scale:
        q = q * (1.0 / math.sqrt(D))  # (..., T, D)
    # (B, B), True above the diagonal (j > i): what the diagonal block masks
    future = ~causal_mask(B)
    # 6. (loop) softmax, online: each query block i against the key blocks j
    #    up to the diagonal, each block through online_softmax_step (3, 5, 6, 7)
    out = np.empty(q.shape, q.dtype)  # (..., T, D)
    lse = np.empty(q.shape[:-1], q.dtype)  # (..., T)
    for i in range(n_blocks):
        rows = slice(i * B, min((i + 1) * B, T))  # the positions of query block i
        q_block = q[..., rows, :]  # (..., Bq, D)
        row_max = np.full_like(q_block[..., 0], -np.inf)  # (..., Bq), m
        row_sum = np.zeros_like(q_block[..., 0])  # (..., Bq), l
        acc = np.zeros_like(q_block)  # (..., Bq, D), acc
        state = (row_max, row_sum, acc)
        if variant is not None and variant.sinks is not None:  # each row's sum
            state = sink_state(variant.sinks, state)  # starts with its sink
        # the key blocks that need no mask: those before the diagonal (causal),
        # or every full block (not causal); with a window, from the first it reaches
        n_unmasked = i if causal else n_full
        first = first_key_block(i, B, window)
        for j in range(first, n_unmasked):
            if visit is not None:
                visit(i, j)
            state = key_block(state, q_block, k, v, rows, j * B, B, None, variant)
        # the last key block: the diagonal one, the only one with a future to
        # mask (causal), or the short tail when B does not divide T (not causal)
        last = i if causal else n_full
        if last < n_blocks:
            if visit is not None:
                visit(i, last)
            n_keys = min(B, T - last * B)  # Bk (= Bq on the diagonal)
            mask = future[:n_keys, :n_keys] if causal else None  # (Bq, Bk)
            state = key_block(
                state, q_block, k, v, rows, last * B, n_keys, mask, variant
            )
        row_max, row_sum, acc = state
        # 6. (end) normalize: out = acc / l, where l >= 1 (its max term is exp(0))
        out[..., rows, :] = acc / row_sum[..., None]  # (..., Bq, D)
        lse[..., rows] = row_max + np.log(row_sum)  # (..., Bq)
    # 7. (end) NaN in, NaN out, as in attention.py: the rows that attend a key
    #    whose value is not finite are NaN
    finite = np.isfinite(v).all(axis=-1)  # (..., T): keys with a finite value
    nonfinite_so_far = np.cumsum(~finite, axis=-1) > 0  # (..., T): one at j or before
    attends_nonfinite = nonfinite_so_far if causal else nonfinite_so_far[..., -1:]
    if window is not None:  # only a key within the row's window: variants.py
        attends_nonfinite = nonfinite_in_window(finite, window)  # (..., T)
    np.copyto(out, np.nan, where=attends_nonfinite[..., None])  # NaN in, NaN out
    return out.astype(dtype, copy=False), lse

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
        np.copyto(scores, -np.inf, where=future)
    # 6. softmax, online: the new running max, and by how much to rescale what
    #    was summed under the old one (exp(-inf) = 0 on the first block)
    new_max = np.maximum(row_max, scores.max(axis=-1))  # (..., Bq)
    # a row with no key yet (all masked, as padding can make) shifts by 0: no NaN
    shift = np.where(new_max == -np.inf, 0.0, new_max)  # (..., Bq)
    rescale = np.exp(row_max - shift)  # (..., Bq)
    scores -= shift[..., None]  # in place: no second (..., Bq, Bk) array
    weights = np.exp(scores, out=scores)  # (..., Bq, Bk), not yet normalized, in place
    row_sum = row_sum * rescale + weights.sum(axis=-1)  # (..., Bq)
    # 7. weighted sum of values, accumulated
    acc *= rescale[..., None]
    acc += weights @ v_block  # (..., Bq, Bk) @ (..., Bk, D) -> (..., Bq, D)
    return new_max, row_sum, acc

# %%
def key_block(state, q_block, k, v, rows, start, size, mask, variant):
    """The one body of the loop over key blocks: the `size` keys from
    position `start` into the running (m, l, acc) of the query block `rows`
    (a slice), after the variant's window, soft-capping and ALiBi on their
    scores (variants.py); `mask` (True = hidden): the diagonal block's
    future, or None."""
    k_block = k[..., start : start + size, :]  # (..., Bk, D)
    v_block = v[..., start : start + size, :]  # (..., Bk, D)
    score_mod = None
    if variant is not None:  # the window, soft-capping, ALiBi: variants.py
        H = q_block.shape[-3] if variant.alibi else None  # ALiBi's slope a head
        query_positions = np.arange(rows.start, rows.stop)  # (Bq,)
        key_positions = start + np.arange(size)  # (Bk,)
        reach, score_mod = variant_scores(variant, H, query_positions, key_positions)
        if reach is not None:  # (Bq, Bk): what the window hides, hidden too
            mask = ~reach if mask is None else mask | ~reach
    if mask is not None:  # a hidden key may hold a NaN: 0 * NaN is NaN
        v_block = finite_values(v_block)  # (..., Bk, D)
    return online_softmax_step(state, q_block, k_block, v_block, mask, score_mod)

# %% [markdown]
# Not in NumPy's blockwise.py: `unmasked_blocks` (JAX's). No such function here:
# the loop over the key blocks before the diagonal is written inline, in Python
# (JAX jits it on its own, so that an eager call compiles it once).

# %% [markdown]
# ## Against the float64 oracle, in float32

# %%
from impl_numpy.arrays import from_numpy, to_numpy
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
# run as written, one operation at a time
attention = blockwise_attention
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
