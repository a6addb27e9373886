"""Decoding with a KV cache in NumPy: one token at a time, equal to the full pass.

Earlier keys and values never change, so they wait in a cache: each new token
is projected alone, its key and value written at the next free position, and
its one query attends to the filled positions (docs/blockwise.md, section 7).
NumPy writes in place: the returned cache shares the arrays of the one given.
Shapes as in attention.py, and L = max_len cached positions.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from impl_numpy.arrays import FRAMEWORK
from impl_numpy.attention import attend, multi_head
from impl_numpy.variants import (
    cache_slot,
    repeat_kv,
    slot_positions,
    variant_scores,
)
from shared.dtypes import np_dtype
from shared.validation.kv_cache import check_decode_step, check_kv_cache_sizes


class KVCache(NamedTuple):
    """k, v (..., H_kv, L, D): the keys and values so far (zeros past `length`);
    length: 0-d integer array, the number of positions filled."""

    k: np.ndarray
    v: np.ndarray
    length: np.ndarray


def init_kv_cache(batch, max_len, d_model, n_heads, dtype="float32", *, variant=None):
    """An empty KVCache: k, v zeros (*batch, H, max_len, D), length 0, for x of
    shape (*batch, T, d_model) in `dtype` (a name) and n_heads = H; with a
    variant, H_kv heads of its head_dim, and W slots for its window."""
    sizes = check_kv_cache_sizes(batch, max_len, d_model, n_heads, variant)
    shape = (*batch, sizes.H, sizes.T, sizes.D)  # (..., H_kv, L, D)
    k = np.zeros(shape, np_dtype(dtype))
    v = np.zeros(shape, np_dtype(dtype))
    return KVCache(k, v, np.zeros((), np.int64))


def decode_step(
    x_t, cache, w_q, w_k, w_v, w_o, n_heads, *, scale=True, biases=None, variant=None
):
    """The output of x_t (..., C), the token at position cache.length, and the
    cache with it, length + 1: attention.multi_head around a core that writes
    the cache and attends it. w_q, w_k, w_v, w_o, n_heads, scale, biases and
    the variant as for `multi_head_attention` (its positions (...,): x_t's
    rotary position, by default cache.length). With a window, a cache of
    L >= W slots rolls: position p in slot p % L, decoding past L
    (docs/variants.md). out_t (..., C) is row cache.length of the full causal
    pass (docs/contract.md). A full cache raises IndexError."""
    dims, variant = check_decode_step(
        x_t, cache, w_q, w_k, w_v, w_o, n_heads, biases=biases, variant=variant,
        framework=FRAMEWORK,
    )  # fmt: skip
    L = dims.T
    window = None if variant is None else variant.window
    if variant is not None:  # x_t's rotary position, one row: (..., 1)
        position = cache.length if variant.positions is None else variant.positions
        variant = dataclasses.replace(variant, positions=position[..., None])

    def core(q, k, v):  # q (..., H, 1, D), k, v (..., H_kv, 1, D): x_t's
        # cache 1. write the new key and value at position `length` (in place)
        k_cache, v_cache = cache.k, cache.v  # (..., H_kv, L, D)
        slot = cache.length if window is None else cache_slot(cache.length, L, window)
        k_cache[..., slot, :] = k[..., 0, :]
        v_cache[..., slot, :] = v[..., 0, :]
        # cache 2. attend the positions filled so far, the new one included
        filled = np.arange(L) <= cache.length  # (L,): not the future
        keys, values, score_mod, sinks = k_cache, v_cache, None, None
        if variant is not None:  # GQA, the window, ALiBi, soft-capping: variants.py
            keys, values, filled, score_mod = cached_variant(
                k_cache, v_cache, cache.length, dims.H, variant
            )
            sinks = variant.sinks
        out, _ = attend(q, keys, values, filled, scale, score_mod, sinks)  # steps 3-7
        return out.astype(q.dtype), KVCache(k_cache, v_cache, cache.length + 1)

    x = x_t[..., None, :]  # (..., 1, C): one row
    out, cache = multi_head(x, (w_q, w_k, w_v, w_o), dims, core, biases, variant)
    return out[..., 0, :], cache  # (..., C)


def cached_variant(k_cache, v_cache, length, H, variant):
    """What the query at position `length` attends under the variant
    (variants.py): the cached keys and values repeated for the G query heads
    of each KV head, the slots it may attend (written, and within the
    window; (L,) or (1, L)) and the score_mod, by the positions the slots hold."""
    held = slot_positions(length, k_cache.shape[-2])  # (L,)
    filled = held >= 0  # (L,): slots written
    reach, score_mod = variant_scores(variant, H, length[None], held)
    if reach is not None:
        filled = filled & reach  # (1, L)
    keys = repeat_kv(k_cache, variant.groups(H))  # (..., H, L, D)
    values = repeat_kv(v_cache, variant.groups(H))  # (..., H, L, D)
    return keys, values, filled, score_mod
