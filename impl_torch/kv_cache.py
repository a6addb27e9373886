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
from impl_torch.attention import attend, merge_heads, positioned, project
from impl_torch.variants import (
    cache_slot,
    make_score_mod,
    repeat_kv,
    slot_positions,
    window_mask,
)
from shared.validation import (
    QK_NORM_EPS,
    check_decode_step,
    check_kv_cache_sizes,
    check_variant,
)


class KVCache(NamedTuple):
    """k, v (..., H, L, D): the keys and values so far (zeros past `length`);
    length: 0-d integer array, the number of positions filled."""

    k: torch.Tensor
    v: torch.Tensor
    length: torch.Tensor


def init_kv_cache(
    batch,
    max_len,
    d_model,
    n_heads,
    dtype="float32",
    *,
    device=None,
    n_kv_heads=None,
    head_dim=None,
    window=None,
):
    """An empty KVCache: k, v zeros (*batch, H, max_len, D), length 0, for x of
    shape (*batch, T, d_model) in `dtype` (a name), n_heads = H, on `device`."""
    variants = dict(n_kv_heads=n_kv_heads, head_dim=head_dim, window=window)
    sizes = check_kv_cache_sizes(batch, max_len, d_model, n_heads, **variants)
    shape = (*batch, sizes.H, sizes.T, sizes.D)  # (..., H, L, D)
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
    n_kv_heads=None,
    head_dim=None,
    rotary=None,
    positions=None,
    window=None,
    alibi=False,
    softcap=None,
    sinks=None,
    q_norm=None,
    k_norm=None,
    qk_norm_eps=QK_NORM_EPS,
):
    """The output of x_t (..., C), the token at position cache.length, and the
    cache with it, length + 1; w_q, w_k, w_v, w_o, n_heads, scale, the
    biases and the variants n_kv_heads to qk_norm_eps as for
    `multi_head_attention` (positions (...,): x_t's rotary position, by
    default cache.length). With a window, a cache of L >= W slots rolls:
    position p in slot p % L, decoding past L (docs/variants.md).
    out_t (..., C) is row cache.length of the full
    causal pass (docs/contract.md). A full cache raises IndexError."""
    biases = dict(b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o)
    heads = dict(n_kv_heads=n_kv_heads, head_dim=head_dim)
    sizes = check_decode_step(
        x_t, cache, w_q, w_k, w_v, w_o, n_heads, framework=FRAMEWORK, **heads,
        **biases,
    )  # fmt: skip
    variant = check_variant(
        x_t, sizes, x_t.shape[:-1], framework=FRAMEWORK, n_kv_heads=n_kv_heads,
        rotary=rotary, positions=positions, window=window, alibi=alibi,
        softcap=softcap, sinks=sinks, q_norm=q_norm, k_norm=k_norm,
        qk_norm_eps=qk_norm_eps,
    )  # fmt: skip
    batch = x_t.shape[:-1]  # (...,)
    H, D, L = sizes.H, sizes.D, sizes.T
    H_kv = n_kv_heads or H
    # 1. project x into queries, keys and values (the new token only)
    q = project(x_t, w_q, b_q)  # (..., C) @ (C, C) -> (..., C)
    k = project(x_t, w_k, b_k)  # (..., C) @ (C, C) -> (..., C)
    v = project(x_t, w_v, b_v)  # (..., C) @ (C, C) -> (..., C)
    # 2. split heads (multi-head only)
    q = q.reshape(*batch, H, 1, D)  # (..., C) -> (..., H, 1, D)
    k = k.reshape(*batch, H_kv, D)  # (..., C) -> (..., H_kv, D)
    v = v.reshape(*batch, H_kv, D)  # (..., C) -> (..., H_kv, D)
    if variant is not None:  # QK-norm, rotary positions on the new token
        position = cache.length if positions is None else positions  # (...,)
        q, k = positioned(q, k[..., None, :], position[..., None], variant)
        k = k[..., 0, :]  # (..., H_kv, 1, D) -> (..., H_kv, D)
    # cache 1. write the new key and value at position `length` (in place)
    k_cache, v_cache = cache.k, cache.v  # (..., H, L, D)
    slot = cache.length if window is None else cache_slot(cache.length, L, window)
    k_cache[..., slot, :] = k
    v_cache[..., slot, :] = v
    # cache 2. attend the positions filled so far, the new one included
    filled = torch.arange(L, device=x_t.device) <= cache.length  # (L,): not the future
    keys, values, score_mod = k_cache, v_cache, None
    if variant is not None:  # GQA, the window, ALiBi, soft-capping: variants.py
        keys, values, filled, score_mod = cached_variant(
            k_cache, v_cache, cache.length, variant
        )
    out, _ = attend(q, keys, values, filled, scale, score_mod, sinks)  # steps 3 to 7
    # 7. (continued) merge heads, output projection
    out = merge_heads(out.to(x_t.dtype)).reshape(*batch, H * D)  # (..., C)
    out = project(out, w_o, b_o)  # (..., C) @ (C, C) -> (..., C)
    return out, KVCache(k_cache, v_cache, cache.length + 1)


def cached_variant(k_cache, v_cache, length, variant):
    """What the query at position `length` attends under the variant
    (variants.py): the cached keys and values repeated for the G query heads
    of each KV head, the slots it may attend (written, and within the
    window; (L,) or (1, L)) and the score_mod, by the positions the slots hold."""
    held = slot_positions(length, k_cache.shape[-2])  # (L,)
    query = length[None]  # (1,): the new token's position
    filled = held >= 0  # (L,): slots written
    if variant.window is not None:
        filled = filled & window_mask(query, held, variant.window)  # (1, L)
    slopes = (
        None
        if variant.slopes is None
        else torch.tensor(variant.slopes, dtype=torch.float64, device=k_cache.device)
    )  # (H,)
    score_mod = make_score_mod(variant.softcap, slopes, query, held)
    keys = repeat_kv(k_cache, variant.groups)  # (..., H, L, D)
    values = repeat_kv(v_cache, variant.groups)  # (..., H, L, D)
    return keys, values, filled, score_mod
