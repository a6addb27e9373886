"""Blockwise causal attention in PyTorch: the online softmax, one block at a time.

One of three parallel files (impl_numpy, impl_torch, impl_jax): the same names,
the same step comments and the same order as each other and as attention.py.

The naive attention of attention.py builds the whole (T, T) matrix of scores of
every head, and computes the half above the diagonal only to mask it away. Here
queries and keys are cut into blocks of B positions. Each query block keeps
three running quantities per row: the largest score seen so far m, the sum of
exp(score - m) so far l, and the sum of exp(score - m) * value so far acc. Key
blocks arrive one at a time; when one raises the running max, what was summed
under the old max is rescaled by exp(m_old - m_new), so at the end acc / l is
exactly the softmax-weighted sum of the values, although no row of weights ever
existed whole (Milakov and Gimelshein 2018, "Online normalizer calculation for
softmax"; Rabe and Staats 2021; FlashAttention, Dao et al. 2022). A causal query
block visits only the key blocks at and below the diagonal, never one above it,
and only the diagonal block needs a mask. At most one (..., B, B) block of
scores exists at any time.

Shape legend: ... batch (any leading axes), T sequence, C model width
(d_model), H heads, D head width (d_head = C // H), B block_size; Bq, Bk rows
of one query block and one key block (B, or fewer in the last block when B
does not divide T).
"""

from __future__ import annotations

import math

import torch

from impl_torch.attention import (
    _at_least_float32,
    _merge_heads,
    _project,
    _split_heads,
    causal_mask,
)
from shared.validation import check_block_size, check_blockwise, check_multi_head

# Big enough that each block's matmuls keep the BLAS busy, small enough that one
# (..., B, B) block of scores stays small (8 MiB for 8 heads in float32); the
# fastest of 256, 512 and 1024 at T = 4096 in smoke runs (docs/blockwise.md).
DEFAULT_BLOCK_SIZE = 512


def blockwise_attention(
    q, k, v, *, block_size=DEFAULT_BLOCK_SIZE, causal=True, scale=True, visit=None
):
    """Attention of per-head queries, keys and values, one block at a time.

    Args:
        q, k, v: (..., T, D) queries, keys and values of one head (or of many,
            on leading axes), one shape and one float dtype.
        block_size: B, the positions in one query block and in one key block.
        causal: True: position i attends to j <= i, and the key blocks above
            the diagonal are never computed. False: every position attends to
            every position.
        scale: divide scores by sqrt(D).
        visit: None, or a function called as visit(i, j) each time the scores
            of query block i against key block j are computed (to count them).

    Returns:
        out (..., T, D) in q's dtype, and lse (..., T), the log-sum-exp of each
        row's (scaled) scores, in the softmax dtype (at least float32): the
        weight of key j in row i is exp(score_ij - lse_i). A key a row may not
        attend has no effect on it, even a NaN or Inf; a NaN or Inf value it
        does attend makes its output NaN, as in `single_head_attention`.
    """
    check_blockwise(q, k, v, block_size)
    dtype = q.dtype
    q, k, v = _at_least_float32(q), _at_least_float32(k), _at_least_float32(v)
    T, D = q.shape[-2], q.shape[-1]
    B = min(block_size, T)  # a block is never longer than the sequence
    # ceil(T / B) blocks; the last one is short when B does not divide T
    n_blocks = -(-T // B)
    n_full = T // B  # the blocks of exactly B positions
    # 4. scale by 1 / sqrt(D), once on the queries rather than on every block of scores
    if scale:
        q = q * (1.0 / math.sqrt(D))  # (..., T, D)
    # (B, B), True above the diagonal (j > i): what the diagonal block masks
    future = ~causal_mask(B, device=q.device)
    # 7. (ahead) keys whose value is NaN or Inf, as in attention.py: the rows
    #    that attend one are set to NaN at the end, and the last key block (the
    #    diagonal, where a masked weight is 0) zeroes their values, else
    #    0 * NaN = NaN leaks into the earlier rows
    finite = torch.isfinite(v).all(dim=-1)  # (..., T): keys with a finite value
    nonfinite_so_far = (~finite).cumsum(dim=-1) > 0  # (..., T): one at j or before
    attends_nonfinite = nonfinite_so_far if causal else nonfinite_so_far[..., -1:]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # (..., T, D)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)  # (..., T)
    for i in range(n_blocks):
        rows = slice(i * B, min((i + 1) * B, T))  # the positions of query block i
        q_block = q[..., rows, :]  # (..., Bq, D)
        row_max = torch.full_like(q_block[..., 0], -math.inf)  # (..., Bq), m
        row_sum = torch.zeros_like(q_block[..., 0])  # (..., Bq), l
        acc = torch.zeros_like(q_block)  # (..., Bq, D), acc
        state = (row_max, row_sum, acc)
        # the key blocks that need no mask: those before the diagonal (causal),
        # or every full block (not causal)
        n_unmasked = i if causal else n_full
        for j in range(n_unmasked):
            k_block = k[..., j * B : (j + 1) * B, :]  # (..., Bk, D)
            v_block = v[..., j * B : (j + 1) * B, :]  # (..., Bk, D)
            if visit is not None:
                visit(i, j)
            state = _online_softmax_step(state, q_block, k_block, v_block, None)
        # the last key block: the diagonal one, the only one with a future to
        # mask (causal), or the short tail when B does not divide T (not causal)
        last = i if causal else n_full
        if last < n_blocks:
            columns = slice(last * B, min((last + 1) * B, T))  # its positions
            k_block = k[..., columns, :]  # (..., Bk, D)
            v_block = v[..., columns, :]  # (..., Bk, D)
            v_block = torch.where(finite[..., columns, None], v_block, 0.0)
            n_rows = rows.stop - rows.start  # Bq (= Bk on the diagonal)
            mask = future[:n_rows, :n_rows] if causal else None  # (Bq, Bk)
            if visit is not None:
                visit(i, last)
            state = _online_softmax_step(state, q_block, k_block, v_block, mask)
        row_max, row_sum, acc = state
        # 6. (end) normalize: out = acc / l, where l >= 1 (its max term is exp(0))
        out[..., rows, :] = acc / row_sum[..., None]  # (..., Bq, D)
        lse[..., rows] = row_max + torch.log(row_sum)  # (..., Bq)
    out.masked_fill_(attends_nonfinite[..., None], math.nan)  # NaN in, NaN out
    return out.to(dtype), lse


def multi_head_blockwise_attention(
    x,
    w_q,
    w_k,
    w_v,
    w_o,
    n_heads,
    *,
    block_size=DEFAULT_BLOCK_SIZE,
    causal=True,
    scale=True,
):
    """Multi-head self-attention with the blockwise core.

    Args:
        x: (..., T, C) inputs, float16, bfloat16, float32 or float64.
        w_q, w_k, w_v, w_o: (C, C) projections, x's dtype, applied as x @ w.
        n_heads: H, which must divide C.
        block_size: B, positions per query block and per key block.
        causal: attend to j <= i only (True) or to every position (False).
        scale: divide scores by sqrt(D), D = C // H.

    Returns:
        out (..., T, C) in x's dtype, and lse (..., H, T), the log-sum-exp of
        each head's rows, in the softmax dtype (at least float32). There are no
        weights to return: they never exist whole.
    """
    H = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads).H
    check_block_size(block_size)
    # 1. project x into queries, keys and values
    q = _project(x, w_q)  # (..., T, C) @ (C, C) -> (..., T, C)
    k = _project(x, w_k)  # (..., T, C) @ (C, C) -> (..., T, C)
    v = _project(x, w_v)  # (..., T, C) @ (C, C) -> (..., T, C)
    # 2. split heads (multi-head only)
    q = _split_heads(q, H)  # (..., T, C) -> (..., H, T, D)
    k = _split_heads(k, H)  # (..., T, C) -> (..., H, T, D)
    v = _split_heads(v, H)  # (..., T, C) -> (..., H, T, D)
    out, lse = blockwise_attention(
        q, k, v, block_size=block_size, causal=causal, scale=scale
    )  # steps 3 to 7
    # 7. (continued) merge heads, output projection
    out = _merge_heads(out)  # (..., H, T, D) -> (..., T, C)
    out = _project(out, w_o)  # (..., T, C) @ (C, C) -> (..., T, C)
    return out, lse


def _online_softmax_step(state, q_block, k_block, v_block, future):
    """One key block into the running (m, l, acc) of one query block."""
    row_max, row_sum, acc = state
    # 3. scores = q @ k^T, one block
    scores = q_block @ k_block.mT  # (..., Bq, D) @ (..., D, Bk) -> (..., Bq, Bk)
    # 5. mask the future (on the diagonal block only)
    if future is not None:
        scores.masked_fill_(future, -math.inf)
    # 6. softmax, online: the new running max, and by how much to rescale what
    #    was summed under the old one (exp(-inf) = 0 on the first block)
    new_max = torch.maximum(row_max, scores.amax(dim=-1))  # (..., Bq)
    rescale = torch.exp(row_max - new_max)  # (..., Bq)
    scores -= new_max[..., None]  # in place: no second (..., Bq, Bk) array
    weights = scores.exp_()  # (..., Bq, Bk), not yet normalized, in place
    row_sum = row_sum * rescale + weights.sum(dim=-1)  # (..., Bq)
    # 7. weighted sum of values, accumulated
    acc *= rescale[..., None]
    acc += weights @ v_block  # (..., Bq, Bk) @ (..., Bk, D) -> (..., Bq, D)
    return new_max, row_sum, acc
