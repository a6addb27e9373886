"""Causal self-attention tuned for speed on a CPU, in PyTorch: not on the reading path.

What blockwise.py's reader does next, kept apart so that the teaching code
stays short: one (C, 3C) product for q, k and v with the scale folded in, the
heads laid out once (k transposed), query blocks of exact softmax, the block
size from a measured rule. Why each, and what it bought: docs/bench.md, "Our
attention against the fused kernels". The bench mode `torch-tuned`;
tests/test_tuned.py holds it to the float64 oracle. The NaN rule is
attention.py's.

Shape legend: ... batch, T sequence, C model width, H heads, D head width,
Bq query block.
"""

from __future__ import annotations

import math

import torch

from impl_torch.arrays import FRAMEWORK
from impl_torch.attention import at_least_float32, finite_values
from shared.validation import check_block_size, check_multi_head

QUERY_BLOCK = 128  # Bq, the fastest measured at T = 2048 to 8192 (docs/bench.md)


def query_block_size(T):
    """Bq: QUERY_BLOCK, never more than T."""
    return max(1, min(QUERY_BLOCK, T))


def multi_head_tuned_attention(x, w_q, w_k, w_v, w_o, n_heads, *, block_size=None):
    """Multi-head causal self-attention, as `multi_head_attention` computes it,
    without the weights.

    Args:
        x: (..., T, C). w_q, w_k, w_v, w_o: (C, C) projections, x @ w.
        n_heads: H, which must divide C.
        block_size: Bq, the queries of one block; None: `query_block_size`.

    Returns:
        out (..., T, C) in x's dtype.
    """
    H = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, framework=FRAMEWORK).H
    block_size = None if block_size is None else check_block_size(block_size)
    dtype = x.dtype
    x, w_q, w_k, w_v, w_o = (at_least_float32(a) for a in (x, w_q, w_k, w_v, w_o))
    *batch, T, C = x.shape
    D = C // H
    Bq = block_size or query_block_size(T)
    # q, k and v in one product, the scale folded into w_q
    w_qkv = torch.cat([w_q * (1.0 / math.sqrt(D)), w_k, w_v], dim=-1)  # (C, 3C)
    qkv = (x @ w_qkv).reshape(*batch, T, 3, H, D)  # (..., T, 3, H, D)
    q = qkv[..., 0, :, :].movedim(-2, -3).contiguous()  # (..., H, T, D)
    k_t = qkv[..., 1, :, :].movedim(-3, -1).contiguous()  # (..., H, D, T)
    v = qkv[..., 2, :, :].movedim(-2, -3).contiguous()  # (..., H, T, D)
    v_finite = finite_values(v)  # (..., H, T, D): 0 * NaN is NaN
    future = torch.ones(Bq, Bq, dtype=torch.bool, device=x.device).triu(1)  # j > i
    heads = torch.empty((*batch, T, H, D), dtype=x.dtype, device=x.device)
    for start in range(0, T, Bq):
        stop = min(start + Bq, T)
        n = stop - start
        scores = q[..., start:stop, :] @ k_t[..., :stop]  # (..., H, n, stop)
        scores[..., start:].masked_fill_(future[:n, :n], -math.inf)
        weights = torch.softmax(scores, dim=-1)  # (..., H, n, stop)
        block = weights @ v_finite[..., :stop, :]  # (..., H, n, D)
        heads[..., start:stop, :, :] = block.movedim(-3, -2)  # (..., n, H, D)
    # NaN in, NaN out: a row that attends a key whose value is not finite
    finite = torch.isfinite(v).all(dim=-1)  # (..., H, T)
    attends_nonfinite = (~finite).cumsum(dim=-1) > 0  # (..., H, T)
    heads.masked_fill_(attends_nonfinite.movedim(-1, -2)[..., None], math.nan)
    out = heads.reshape(*batch, T, C) @ w_o  # (..., T, C) @ (C, C) -> (..., T, C)
    return out.to(dtype)
