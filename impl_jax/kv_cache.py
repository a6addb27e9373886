"""Decoding with a KV cache in JAX: one token at a time, equal to the full pass.

Earlier keys and values never change, so they wait in a cache: each new token
is projected alone, its key and value written at the next free position, and
its one query attends to the filled positions (docs/blockwise.md, section 7).
JAX arrays are immutable: a new cache comes back, and `decode_step_jit` donates
the one given, so that XLA may write in place: do not use it again. A write
past max_len is dropped without a word, as `.at[].set` drops it.
Shapes as in attention.py, and L = max_len cached positions.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from impl_jax.arrays import FRAMEWORK, require_x64_for
from impl_jax.attention import attend, merge_heads, project
from shared.validation import check_decode_step, check_kv_cache_sizes


class KVCache(NamedTuple):
    """k, v (..., H, L, D): the keys and values so far (zeros past `length`);
    length: 0-d integer array, the number of positions filled."""

    k: jax.Array
    v: jax.Array
    length: jax.Array


def init_kv_cache(batch, max_len, d_model, n_heads, dtype="float32"):
    """An empty KVCache: k, v zeros (*batch, H, max_len, D), length 0, for x of
    shape (*batch, T, d_model) in `dtype` (a name) and n_heads = H."""
    sizes = check_kv_cache_sizes(batch, max_len, d_model, n_heads)
    shape = (*batch, sizes.H, max_len, sizes.D)  # (..., H, L, D)
    require_x64_for(dtype)  # JAX only: float64 needs x64 (docs/contract.md)
    k = jnp.zeros(shape, jnp.dtype(dtype))
    v = jnp.zeros(shape, jnp.dtype(dtype))
    return KVCache(k, v, jnp.zeros((), int))  # int64, or int32 without x64


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
    causal pass (docs/contract.md). A full cache does not raise."""
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
    # cache 1. write the new key and value at position `length` (a new array)
    k_cache = cache.k.at[..., cache.length, :].set(k)  # (..., H, L, D)
    v_cache = cache.v.at[..., cache.length, :].set(v)  # (..., H, L, D)
    # cache 2. attend the positions filled so far, the new one included
    filled = jnp.arange(L) <= cache.length  # (L,): not the future
    out, _ = attend(q, k_cache, v_cache, filled, scale)  # steps 3 to 7
    # 7. (continued) merge heads, output projection
    out = merge_heads(out.astype(x_t.dtype)).reshape(*batch, C)  # (..., C)
    out = project(out, w_o, b_o)  # (..., C) @ (C, C) -> (..., C)
    return out, KVCache(k_cache, v_cache, cache.length + 1)


decode_step_jit = jax.jit(
    decode_step, static_argnames=("n_heads", "scale"), donate_argnames="cache"
)
