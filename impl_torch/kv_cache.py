"""Decoding with a KV cache in PyTorch: one token at a time, equal to the full pass.

Earlier keys and values never change, so they wait in a cache: each new token
is projected alone, its key and value written at the next free position, and
its one query attends to the filled positions (docs/blockwise.md, section 7).
torch writes in place: the returned cache shares the tensors of the one given.
Shapes as in attention.py, and L = max_len cached positions.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from impl_torch.arrays import FRAMEWORK
from impl_torch.attention import attend, merge_heads, project
from shared.validation import check_decode_step, check_kv_cache_sizes


class KVCache(NamedTuple):
    """k, v (..., H, L, D): the keys and values so far (zeros past `length`);
    length: 0-d integer array, the number of positions filled."""

    k: torch.Tensor
    v: torch.Tensor
    length: torch.Tensor


def init_kv_cache(batch, max_len, d_model, n_heads, dtype="float32", *, device=None):
    """An empty KVCache: k, v zeros (*batch, H, max_len, D), length 0, for x of
    shape (*batch, T, d_model) in `dtype` (a name), n_heads = H, on `device`."""
    sizes = check_kv_cache_sizes(batch, max_len, d_model, n_heads)
    shape = (*batch, sizes.H, max_len, sizes.D)  # (..., H, L, D)
    k = torch.zeros(shape, dtype=getattr(torch, dtype), device=device)
    v = torch.zeros(shape, dtype=getattr(torch, dtype), device=device)
    return KVCache(k, v, torch.zeros((), dtype=torch.int64, device=device))


def decode_step(
    x_t,
    cache,
    w_q,
    w_k,
    w_v,
    w_o,
    n_heads,
    *,
    scale=True,
    b_q=None,
    b_k=None,
    b_v=None,
    b_o=None,
):
    """The output of x_t (..., C), the token at position cache.length, and the
    cache with it, length + 1; w_q, w_k, w_v, w_o, n_heads, scale and the
    biases as for `multi_head_attention`. out_t (..., C) is row cache.length of the full
    causal pass (docs/contract.md). A full cache raises IndexError."""
    biases = dict(b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o)
    sizes = check_decode_step(
        x_t, cache, w_q, w_k, w_v, w_o, n_heads, framework=FRAMEWORK, **biases
    )
    *batch, C = x_t.shape
    H, D, L = sizes.H, sizes.D, sizes.T
    # 1. project x into queries, keys and values (the new token only)
    q = project(x_t, w_q, b_q)  # (..., C) @ (C, C) -> (..., C)
    k = project(x_t, w_k, b_k)  # (..., C) @ (C, C) -> (..., C)
    v = project(x_t, w_v, b_v)  # (..., C) @ (C, C) -> (..., C)
    # 2. split heads (multi-head only)
    q = q.reshape(*batch, H, 1, D)  # (..., C) -> (..., H, 1, D)
    k = k.reshape(*batch, H, D)  # (..., C) -> (..., H, D)
    v = v.reshape(*batch, H, D)  # (..., C) -> (..., H, D)
    # cache 1. write the new key and value at position `length` (in place)
    k_cache, v_cache = cache.k, cache.v  # (..., H, L, D)
    k_cache[..., cache.length, :] = k
    v_cache[..., cache.length, :] = v
    # cache 2. attend the positions filled so far, the new one included
    filled = torch.arange(L, device=x_t.device) <= cache.length  # (L,): not the future
    out, _ = attend(q, k_cache, v_cache, filled, scale)  # steps 3 to 7
    # 7. (continued) merge heads, output projection
    out = merge_heads(out.to(x_t.dtype)).reshape(*batch, C)  # (..., C)
    out = project(out, w_o, b_o)  # (..., C) @ (C, C) -> (..., C)
    return out, KVCache(k_cache, v_cache, cache.length + 1)
