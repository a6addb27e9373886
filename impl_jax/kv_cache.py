"""Decoding with a KV cache in JAX: one token at a time, equal to the full pass.

One of three parallel files (impl_numpy, impl_torch, impl_jax): the same names,
the same step comments and the same order as each other and as attention.py.

Causal attention lets position t see only positions <= t, so the keys and values
of the earlier positions never change once computed. Decoding keeps them in a
cache: for each new token, project only that token, write its key and value at
the next free position, and attend from its one query to every filled position.
Token by token this gives what the full causal pass gives (tests/test_kv_cache.py).

The cache is preallocated to `max_len` positions, with `length` counting the
filled ones, so its arrays keep one shape for the whole decode; that is what
lets the JAX step compile once. Positions not yet filled are zeros and are
masked, like the future in the full pass: whatever they hold (even NaN or Inf)
has no effect on the output, and a NaN or Inf in a filled position makes the
output NaN, as in attention.py.

JAX arrays are immutable: `decode_step` returns a new cache and leaves the one
it was given as it was. Under `decode_step_jit` the given cache is donated, so
XLA may write the new position in place instead of copying the whole cache:
do not use a cache after passing it to the jitted step. Writing past max_len
does not raise (an update out of bounds is dropped, as JAX's `.at[].set` does):
keep length < max_len.

Shape legend: B batch (any leading axes, written ...), C model width (d_model),
H heads, D head width (d_head = C // H), L = max_len cached positions.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from impl_jax.attention import _at_least_float32, _project
from shared.validation import check_decode_step, check_kv_cache_sizes


class KVCache(NamedTuple):
    """The keys and values of the positions decoded so far.

    Attributes:
        k, v: (..., H, L, D) keys and values; positions >= length are zeros.
        length: 0-d int64 array, the number of positions filled.
    """

    k: jax.Array
    v: jax.Array
    length: jax.Array


def init_kv_cache(batch, max_len, d_model, n_heads, dtype="float32"):
    """An empty cache for decoding up to `max_len` tokens.

    Args:
        batch: the leading axes of x, e.g. () for one sequence, (B,) for B.
        max_len: L, the most positions the cache can hold.
        d_model: C; n_heads: H, which must divide C.
        dtype: name of the dtype of x and the weights, e.g. "float32".

    Returns:
        KVCache with k, v zeros of shape (*batch, H, L, D) and length 0.
    """
    sizes = check_kv_cache_sizes(batch, max_len, d_model, n_heads)
    shape = (*batch, sizes.H, max_len, sizes.D)  # (..., H, L, D)
    k = jnp.zeros(shape, jnp.dtype(dtype))  # (..., H, L, D)
    v = jnp.zeros(shape, jnp.dtype(dtype))  # (..., H, L, D)
    return KVCache(k, v, jnp.zeros((), jnp.int64))


def decode_step(x_t, cache, w_q, w_k, w_v, w_o, n_heads, *, scale=True):
    """Attention output of one new token per sequence, and the cache with it.

    Args:
        x_t: (..., C) the new token of each sequence, at position cache.length.
        cache: KVCache of the positions before it, from `init_kv_cache` or the
            previous step, in x_t's dtype.
        w_q, w_k, w_v, w_o: (C, C) projections, x_t's dtype, applied as x @ w.
        n_heads: H, which must divide C.
        scale: divide scores by sqrt(D), D = C // H.

    Returns:
        out_t (..., C), equal to row cache.length of the full causal pass, in
        x_t's dtype; and the cache with this token's key and value, length + 1.
        A full cache (length = L) does not raise: see the module docstring.
    """
    sizes = check_decode_step(x_t, cache, w_q, w_k, w_v, w_o, n_heads)
    *batch, C = x_t.shape
    H, D, L = sizes.H, sizes.D, sizes.T
    # 1. project x into queries, keys and values (the new token only)
    q = _project(x_t, w_q)  # (..., C) @ (C, C) -> (..., C)
    k = _project(x_t, w_k)  # (..., C) @ (C, C) -> (..., C)
    v = _project(x_t, w_v)  # (..., C) @ (C, C) -> (..., C)
    # 2. split heads (multi-head only)
    q = q.reshape(*batch, H, 1, D)  # (..., C) -> (..., H, 1, D)
    k = k.reshape(*batch, H, D)  # (..., C) -> (..., H, D)
    v = v.reshape(*batch, H, D)  # (..., C) -> (..., H, D)
    # the new key and value go to position `length` of the cache (a new array)
    k_cache = cache.k.at[..., cache.length, :].set(k)  # (..., H, L, D)
    v_cache = cache.v.at[..., cache.length, :].set(v)  # (..., H, L, D)
    # (the softmax runs in at least float32, as in the full pass)
    q = _at_least_float32(q)  # (..., H, 1, D)
    k_all = _at_least_float32(k_cache)  # (..., H, L, D)
    v_all = _at_least_float32(v_cache)  # (..., H, L, D)
    # 3. scores = q @ k^T
    scores = q @ k_all.mT  # (..., H, 1, D) @ (..., H, D, L) -> (..., H, 1, L)
    # 4. scale by 1 / sqrt(D)
    if scale:
        scores = scores / math.sqrt(D)
    # 5. mask the future: the positions after this token are not filled yet
    filled = jnp.arange(L) <= cache.length  # (L,)
    scores = jnp.where(filled, scores, -jnp.inf)
    # 6. softmax into weights (position 0 is always filled: no empty row)
    row_max = scores.max(axis=-1, keepdims=True)  # (..., H, 1, 1)
    exp = jnp.exp(scores - row_max)  # (..., H, 1, L), 0 where not filled
    weights = exp / exp.sum(axis=-1, keepdims=True)  # (..., H, 1, L)
    # 7. weighted sum of values, merge heads, output projection
    finite = jnp.isfinite(v_all).all(axis=-1)  # (..., H, L): finite values
    v_all = jnp.where(finite[..., None], v_all, 0.0)  # else a masked 0 * NaN leaks
    out = weights @ v_all  # (..., H, 1, L) @ (..., H, L, D) -> (..., H, 1, D)
    attends_nonfinite = (filled & ~finite).any(axis=-1)  # (..., H): NaN in, NaN out
    out = jnp.where(attends_nonfinite[..., None, None], jnp.nan, out)
    out = out.astype(x_t.dtype).reshape(*batch, C)  # (..., H, 1, D) -> (..., C)
    out = _project(out, w_o)  # (..., C) @ (C, C) -> (..., C)
    return out, KVCache(k_cache, v_cache, cache.length + 1)


decode_step_jit = jax.jit(
    decode_step, static_argnames=("n_heads", "scale"), donate_argnames="cache"
)
