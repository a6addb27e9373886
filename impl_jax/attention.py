"""Causal self-attention in JAX: the seven steps, pure and jittable.

One of three parallel files (impl_numpy, impl_torch, impl_jax): the same
names, the same step comments and the same order, so that two of them side by
side show only what the frameworks do differently. It follows the seed
attention lab (seven printed steps), The Annotated Transformer (`attention()`
returning `(out, weights)`) and nanoGPT's shape comments.

The functions are pure, so `jax.jit` compiles them as they stand; the jitted
exports at the bottom mark `n_heads`, `scale`, `T` and `multi_head` static
(they decide shapes and Python branches). Validation reads only shapes and
dtypes, so it runs once, at trace time.

Shape legend: B batch (any leading axes, written ...), T sequence,
C model width (d_model), H heads, D head width (d_head = C // H).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from shared.validation import (
    check_key_padding,
    check_multi_head,
    check_single_head,
    check_weights,
)


def causal_mask(T):
    """Where a query may attend: True on and below the diagonal (j <= i).

    Args:
        T: sequence length.

    Returns:
        (T, T) boolean array.
    """
    return jnp.tril(jnp.ones((T, T), dtype=bool))  # (T, T)


def key_padding_mask(lengths_or_keep, T, *, multi_head=False):
    """Which keys are real, per batch item, as a mask for the `mask` argument.

    Masks keys only, as a key-padding mask does: a padded query still attends
    to the real keys before it (ignore its output). A batch item with no real
    key gives rows with nothing to attend to: zero weights, zero output.

    Args:
        lengths_or_keep: integer lengths (...,), key j is real when
            j < length (so 0 or less keeps none, T or more keeps all); or a
            boolean keep array (..., T), True = a real key.
        T: sequence length.
        multi_head: add the head axis, for `multi_head_attention`.

    Returns:
        boolean (..., 1, T), or (..., 1, 1, T) with `multi_head`: True = may
        attend; it broadcasts to (..., T, T), or (..., H, T, T).
    """
    if check_key_padding(lengths_or_keep, T) == "lengths":
        positions = jnp.arange(T)  # (T,)
        keep = positions < lengths_or_keep[..., None]  # (..., T)
    else:
        keep = lengths_or_keep  # (..., T)
    keep = keep[..., None, :]  # (..., 1, T): the same keys for every query
    if multi_head:
        keep = keep[..., None, :, :]  # (..., 1, 1, T): and for every head
    return keep


def single_head_attention(x, w_q, w_k, w_v, mask=None, *, scale=True):
    """One head of causal self-attention.

    Args:
        x: (..., T, C) inputs, float16, bfloat16, float32 or float64.
        w_q, w_k, w_v: (C, D) projections, x's dtype, applied as x @ w.
        mask: None for causal; else boolean, True = may attend, broadcastable
            to (..., T, T), combined with the causal mask.
        scale: divide scores by sqrt(D).

    Returns:
        out (..., T, D) and weights (..., T, T), in x's dtype. A row with
        nothing to attend to has zero weights and a zero output. A key a row
        may not attend has no effect on it, even a NaN or Inf; a NaN or Inf
        it does attend makes its output NaN. float16 and bfloat16 multiply in
        float32 and round q, k, v and the output to x's dtype; steps 3 to 7
        run in float32.
    """
    check_single_head(x, w_q, w_k, w_v, mask)
    # 1. project x into queries, keys and values
    q = _project(x, w_q)  # (..., T, C) @ (C, D) -> (..., T, D)
    k = _project(x, w_k)  # (..., T, C) @ (C, D) -> (..., T, D)
    v = _project(x, w_v)  # (..., T, C) @ (C, D) -> (..., T, D)
    # 2. split heads (multi-head only)
    out, weights = _attend(q, k, v, mask, scale)  # steps 3 to 7
    return out.astype(x.dtype), weights.astype(x.dtype)


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, mask=None, *, scale=True):
    """Multi-head causal self-attention.

    Args:
        x: (..., T, C) inputs, float16, bfloat16, float32 or float64.
        w_q, w_k, w_v, w_o: (C, C) projections, x's dtype, applied as x @ w.
        n_heads: H, which must divide C.
        mask: None for causal; else boolean, True = may attend, broadcastable
            to (..., H, T, T), combined with the causal mask.
        scale: divide scores by sqrt(D), D = C // H.

    Returns:
        out (..., T, C) and weights (..., H, T, T), in x's dtype; masks,
        NaN and dtypes as for `single_head_attention`.
    """
    H = check_multi_head(x, w_q, w_k, w_v, w_o, n_heads, mask).H
    # 1. project x into queries, keys and values
    q = _project(x, w_q)  # (..., T, C) @ (C, C) -> (..., T, C)
    k = _project(x, w_k)  # (..., T, C) @ (C, C) -> (..., T, C)
    v = _project(x, w_v)  # (..., T, C) @ (C, C) -> (..., T, C)
    # 2. split heads (multi-head only)
    q = _split_heads(q, H)  # (..., T, C) -> (..., H, T, D)
    k = _split_heads(k, H)  # (..., T, C) -> (..., H, T, D)
    v = _split_heads(v, H)  # (..., T, C) -> (..., H, T, D)
    out, weights = _attend(q, k, v, mask, scale)  # steps 3 to 7
    # 7. (continued) merge heads, output projection
    out = _merge_heads(out.astype(x.dtype))  # (..., H, T, D) -> (..., T, C)
    out = _project(out, w_o)  # (..., T, C) @ (C, C) -> (..., T, C)
    return out, weights.astype(x.dtype)


def attention_entropy(weights):
    """Entropy of each row of attention weights, in nats, with 0 * log 0 = 0.

    Args:
        weights: (..., T) rows of attention weights.

    Returns:
        (...,) entropy per row, in weights' dtype. Row i of a causal head is at
        most log(i + 1); a row of zeros (nothing attended) has entropy 0.
    """
    check_weights(weights)
    p = _at_least_float32(weights)
    p_log_p = p * jnp.log(jnp.where(p > 0, p, 1.0))  # log 1 = 0 where p = 0
    return (-p_log_p.sum(axis=-1)).astype(weights.dtype)


def _attend(q, k, v, mask, scale):
    """Steps 3 to 7 on per-head tensors; softmax in at least float32."""
    q, k, v = _at_least_float32(q), _at_least_float32(k), _at_least_float32(v)
    T, D = q.shape[-2], q.shape[-1]
    # 3. scores = q @ k^T
    scores = q @ k.mT  # (..., T, D) @ (..., D, T) -> (..., T, T)
    # 4. scale by 1 / sqrt(D)
    if scale:
        scores = scores / math.sqrt(D)
    # 5. mask the future (and any given mask)
    causal = causal_mask(T)
    allowed = causal if mask is None else causal & mask  # (..., T, T)
    scores = jnp.where(allowed, scores, -jnp.inf)
    # 6. softmax into weights
    row_max = scores.max(axis=-1, keepdims=True)  # (..., T, 1)
    row_max = jnp.where(row_max == -jnp.inf, 0.0, row_max)  # fully masked row
    exp = jnp.exp(scores - row_max)  # masked entries: exp(-inf) = 0
    row_sum = exp.sum(axis=-1, keepdims=True)  # (..., T, 1), 0 if fully masked
    weights = exp / jnp.where(row_sum > 0, row_sum, 1.0)  # 0 / 1 = 0, never NaN
    # 7. weighted sum of values, merge heads, output projection
    finite = jnp.isfinite(v).all(axis=-1)  # (..., T): keys with a finite value
    v = jnp.where(finite[..., None], v, 0.0)  # else 0 * NaN leaks a masked NaN
    out = weights @ v  # (..., T, T) @ (..., T, D) -> (..., T, D)
    attends_nonfinite = (allowed & ~finite[..., None, :]).any(axis=-1)  # (..., T)
    out = jnp.where(attends_nonfinite[..., None], jnp.nan, out)  # NaN in, NaN out
    return out, weights


def _split_heads(t, H):
    """(..., T, C) -> (..., H, T, D)."""
    *batch, T, C = t.shape
    return t.reshape(*batch, T, H, C // H).swapaxes(-3, -2)  # (..., H, T, D)


def _merge_heads(t):
    """(..., H, T, D) -> (..., T, C)."""
    *batch, H, T, D = t.shape
    return t.swapaxes(-3, -2).reshape(*batch, T, H * D)  # (..., T, C)


def _project(a, w):
    """a @ w accumulated in at least float32, rounded to a's dtype."""
    dtype = a.dtype
    a, w = _at_least_float32(a), _at_least_float32(w)
    return (a @ w).astype(dtype)  # (..., T, C) @ (C, D) -> (..., T, D)


def _at_least_float32(a):
    """float16 and bfloat16 -> float32; float32 and float64 unchanged."""
    return a.astype(jnp.promote_types(a.dtype, jnp.float32))


single_head_attention_jit = jax.jit(single_head_attention, static_argnames="scale")
multi_head_attention_jit = jax.jit(
    multi_head_attention, static_argnames=("n_heads", "scale")
)
attention_entropy_jit = jax.jit(attention_entropy)
key_padding_mask_jit = jax.jit(key_padding_mask, static_argnames=("T", "multi_head"))
