"""Causal self-attention tuned for speed on a CPU, in PyTorch: not on the reading path.

What blockwise.py's reader does next, kept apart so that the teaching code
stays short: one (C, 3C) product for q, k and v with the scale folded in, the
heads laid out once (v transposed), query blocks of exact softmax one head at
a time (one head's scores in flight, not all H heads'), the softmax in torch's
fused kernel, the block size from a measured rule, and float32 products
through oneDNN where torch has it (`times`). Why each, and what it bought:
docs/bench.md, "Our attention against the fused kernels". The bench mode
`torch-tuned`; tests/test_tuned.py holds it to the float64 oracle. The NaN
rule is attention.py's.

Shape legend: ... batch, T sequence, C model width, H heads, D head width,
Bq query block.
"""

from __future__ import annotations

import functools
import math

import torch

from impl_torch.arrays import FRAMEWORK
from impl_torch.attention import at_least_float32, finite_values
from shared.validation.attention import check_multi_head
from shared.validation.blockwise import check_block_size

QUERY_BLOCK = 256  # Bq, the fastest measured at T = 2048 to 8192 (docs/bench.md)


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
    H = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, framework=FRAMEWORK)[0].H
    block_size = None if block_size is None else check_block_size(block_size)
    dtype = x.dtype
    x, w_q, w_k, w_v, w_o = (at_least_float32(a) for a in (x, w_q, w_k, w_v, w_o))
    *batch, T, C = x.shape
    D = C // H
    Bq = block_size or query_block_size(T)
    # q, k and v in one product, the scale folded into w_q
    w_qkv = torch.cat([w_q * (1.0 / math.sqrt(D)), w_k, w_v], dim=-1)  # (C, 3C)
    qkv = times(x, w_qkv).reshape(-1, T, 3, H, D)  # (N, T, 3, H, D), N = batch
    q, k, v = (heads_first(qkv[:, :, i]) for i in range(3))  # (N H, T, D) each
    v_t = finite_values(v).mT.contiguous()  # (N H, D, T): 0 * NaN is NaN
    future = torch.ones(Bq, Bq, dtype=torch.bool, device=x.device).triu(1)  # j > i
    heads = torch.empty_like(q)  # (N H, T, D)
    for start in range(0, T, Bq):
        stop = min(start + Bq, T)
        n = stop - start
        for head in range(len(q)):  # one (n, stop) block of scores at a time
            scores = times_transposed(q[head, start:stop], k[head, :stop])  # (n, stop)
            scores[:, start:].masked_fill_(future[:n, :n], -math.inf)
            # one fused kernel, a row at a time: max, exp, sum and divide
            weights = torch.softmax(scores, dim=-1)  # (n, stop)
            block_t = times_transposed(v_t[head, :, :stop], weights)  # (D, n)
            heads[head, start:stop] = block_t.mT
    # NaN in, NaN out: a row that attends a key whose value is not finite
    finite = torch.isfinite(v).all(dim=-1)  # (N H, T)
    attends_nonfinite = (~finite).cumsum(dim=-1) > 0  # (N H, T)
    heads.masked_fill_(attends_nonfinite[..., None], math.nan)
    merged = heads.reshape(-1, H, T, D).permute(0, 2, 1, 3).reshape(*batch, T, C)
    out = times(merged, w_o)  # (..., T, C) @ (C, C) -> (..., T, C)
    return out.to(dtype)


def heads_first(a):
    """(N, T, H, D) -> (N H, T, D), laid out anew: each head's (T, D) rows one
    after the other."""
    N, T, H, D = a.shape
    return a.permute(0, 2, 1, 3).contiguous().reshape(N * H, T, D)


# Products. On a CPU torch sends a float32 matmul to MKL, which runs its AVX2
# kernels on any CPU that is not Intel's; oneDNN, also inside torch, picks its
# kernels by the CPU's features, AVX-512 where there is one: twice the rate on
# a CPU that runs 512-bit FMAs at full width (docs/bench.md, "The GEMM gap").
# torch reaches oneDNN's matmul through the linear op it registers for its
# compiler, torch.ops.mkldnn._linear_pointwise: private, so `@` stands in
# wherever it is missing.


@functools.cache
def _has_onednn_linear():
    """Whether this torch has oneDNN and its linear op."""
    return torch.backends.mkldnn.is_available() and hasattr(
        torch.ops.mkldnn, "_linear_pointwise"
    )


def times_transposed(a, b):
    """a @ b.mT for a (..., n, k) and b (m, k). oneDNN takes b as a linear
    layer's weight matrix, made contiguous (strided, it costs its matmul a
    thousand times as long); it has no gradient, so `@` runs where autograd
    records."""
    on_cpu = a.device.type == b.device.type == "cpu"
    recorded = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
    if (
        on_cpu
        and not recorded
        and a.dtype == b.dtype == torch.float32
        and _has_onednn_linear()
    ):
        return torch.ops.mkldnn._linear_pointwise(
            a, b.contiguous(), None, "none", [], ""
        )
    return a @ b.mT


def times(a, w):
    """a @ w for a (..., n, k) and w (k, m)."""
    return times_transposed(a, w.mT)  # laid out anew only for oneDNN
