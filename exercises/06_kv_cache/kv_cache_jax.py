"""Exercise 6, JAX: one decoding step with a cache of keys and values.

Replace each `raise NotImplementedError` with the lines it names; the
hints are in README.md beside this file. Grade it:

    python exercises/grade.py exercises/06_kv_cache/kv_cache_jax.py

The answer key is your teacher's (docs/teaching.md#answer-key).
"""

# ruff: noqa: F401, RUF059 (a skeleton: its names wait for your lines)

import math

import jax.numpy as jnp

from impl_jax.kv_cache import KVCache


def decode_step(x_t, cache, w_q, w_k, w_v, w_o, n_heads):
    """The output of x_t (C,), the token at position cache.length, and the
    cache with it (length + 1). cache: KVCache(k, v, length), k and v
    (H, L, D) with positions 0 to length - 1 filled (impl_jax.kv_cache's
    init_kv_cache makes an empty one); w_* (C, C)."""
    (C,) = x_t.shape
    H, L, D = cache.k.shape
    # 1. project x into queries, keys and values (the new token only)
    q, k, v = x_t @ w_q, x_t @ w_k, x_t @ w_v  # (C,) @ (C, C) -> (C,)
    # 2. split heads (multi-head only)
    q = q.reshape(H, 1, D)  # (C,) -> (H, 1, D)
    k, v = k.reshape(H, D), v.reshape(H, D)  # (C,) -> (H, D)
    # cache 1. write the new key and value at position `length`
    # cache 2. attend the positions filled so far, the new one included:
    #    steps 3 to 7 of one query against the L slots, the unfilled ones masked
    # 7. (continued) merge heads, output projection; the new cache:
    #    out = out.reshape(C) @ w_o  # (H, 1, D) -> (C,) @ (C, C) -> (C,)
    #    return out, KVCache(k_cache, v_cache, cache.length + 1)
    raise NotImplementedError("cache 1. and 2., then 7. (continued): see README.md")
