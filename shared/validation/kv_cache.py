"""The checks of impl_*/kv_cache.py: the cache's sizes, and one decoding step."""

from __future__ import annotations

import numpy as np

from shared.dtypes import dtype_name
from shared.validation.arrays import (
    INTEGER_DTYPES,
    Dims,
    as_int,
    check_float,
    check_frameworks,
    check_positive_int,
    shape_of,
)
from shared.validation.attention import (
    MULTI_HEAD_BIASES,
    check_bias_names,
    check_multi_head_weights,
    check_variant_type,
)
from shared.validation.variants import (
    check_head_sizes,
    check_heads,
    check_variant,
)


def check_kv_cache_sizes(batch, max_len, d_model, n_heads, variant=None) -> Dims:
    """Validate the arguments of `init_kv_cache`; return the cache's sizes:
    T = its slots (max_len, or min(max_len, window) with a window), H = the
    heads it holds (the variant's n_kv_heads if given), D = its head_dim if
    given.

    Raises:
        TypeError: variant not a Variant.
        ValueError: batch is not a tuple of non-negative ints, max_len or d_model
            is not a positive int, n_heads does not divide d_model (without
            head_dim), or n_kv_heads, head_dim or window does not fit.
    """
    if not isinstance(batch, tuple) or not all(
        isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0
        for n in batch
    ):
        raise ValueError(
            f"batch must be a tuple of non-negative ints (the leading axes of x), "
            f"got {batch!r}"
        )
    check_positive_int("max_len", max_len)
    check_positive_int("d_model", d_model)
    v = check_variant_type(variant)
    batch = tuple(int(n) for n in batch)
    if v.n_kv_heads is None and v.head_dim is None and v.window is None:
        H = check_heads(int(d_model), n_heads)
        return Dims(batch, int(max_len), int(d_model), H, d_model // H, H)
    H, D, H_kv = check_head_sizes(int(d_model), n_heads, v.n_kv_heads, v.head_dim)
    slots = int(max_len)
    if v.window is not None:
        slots = min(slots, check_positive_int("window", as_int(v.window)))
    return Dims(batch, slots, int(d_model), H_kv, D, H_kv)


def check_decode_step(
    x_t, cache, w_q, w_k, w_v, w_o, n_heads, *, biases=None, variant=None,
    framework=None,
):  # fmt: skip
    """Validate the arguments of `decode_step`; return the sizes (T = the
    cache's slots) and the variant, or None for plain attention.

    Raises:
        TypeError: x_t is not a floating-point array, the cache is not a
            (k, v, length) triple of arrays, biases not a dict or variant not
            a Variant.
        ValueError: anything else that does not fit: the weights, n_heads, the
            cache's shape (..., H, max_len, D) or dtype, or its length not a
            0-d integer array.
    """
    biases = check_bias_names(biases, MULTI_HEAD_BIASES)
    cached = {f"cache.{n}": getattr(cache, n, None) for n in ("k", "v", "length")}
    arrays = dict(x_t=x_t, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, **cached, **biases)
    check_frameworks(framework, **arrays)
    sizes = check_variant_type(variant)
    check_float(x_t, "x_t")
    shape = shape_of(x_t)
    if len(shape) < 1:
        raise ValueError(f"x_t must have shape (..., C) with rank >= 1, got {shape}")
    *batch, C = shape
    weights = (w_q, w_k, w_v, w_o)
    H, D, H_kv = check_multi_head_weights(x_t, C, weights, n_heads, sizes, biases)
    plain = sizes.n_kv_heads is None and sizes.head_dim is None
    heads = "H" if plain else "n_kv_heads"
    L = check_cache(cache, x_t, tuple(batch), H_kv, D, heads)
    dims = Dims(tuple(batch), L, C, H, D, H_kv)
    return dims, check_variant(variant, x_t, dims, tuple(batch), framework=framework)


def check_cache(cache, x_t, batch: tuple[int, ...], H_kv: int, D: int, heads: str):
    """cache a KVCache of (..., H_kv, L, D) keys and values in x_t's dtype and
    a 0-d integer length; return L. `heads` names H_kv in the message."""
    parts = tuple(getattr(cache, name, None) for name in ("k", "v", "length"))
    if not all(hasattr(a, "shape") and hasattr(a, "dtype") for a in parts):
        raise TypeError(
            "cache must be a KVCache(k, v, length) of arrays, as init_kv_cache "
            f"makes, got {type(cache).__name__}"
        )
    k, v, length = parts
    k_shape = shape_of(k)
    expected = "(" + ", ".join(str(n) for n in (*batch, H_kv)) + f", max_len, {D})"
    if (
        len(k_shape) != len(batch) + 3
        or k_shape[:-2] != (*batch, H_kv)
        or k_shape[-1] != D
    ):
        raise ValueError(
            f"cache.k must have shape (..., {heads}, max_len, D) = {expected} for "
            f"x_t of shape {shape_of(x_t)} and "
            f"{'n_heads' if heads == 'H' else heads}={H_kv}, got {k_shape}"
        )
    if shape_of(v) != k_shape:
        raise ValueError(
            f"cache.v has shape {tuple(v.shape)} but cache.k has {k_shape}; "
            "they must share one shape (..., H, max_len, D)"
        )
    for name, array in (("cache.k", k), ("cache.v", v)):
        if dtype_name(array) != dtype_name(x_t):
            raise ValueError(
                f"x_t has dtype {dtype_name(x_t)} but {name} has dtype "
                f"{dtype_name(array)}; make the cache in x_t's dtype"
            )
    if len(length.shape) != 0 or dtype_name(length) not in INTEGER_DTYPES:
        raise ValueError(
            "cache.length must be a 0-d integer array (positions filled), "
            f"got shape {tuple(length.shape)} dtype {dtype_name(length)}"
        )
    return k_shape[-2]
