"""Gradients through masks, by jax.grad itself (not the backward helpers): a
fully masked row sends exactly zero gradient, and NaN padding, which the
forward never sees, still poisons the gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from helpers import PARAM_NAMES, masked_problem

import impl_jax


def masked_arrays(dtype):
    """`helpers.masked_problem` in JAX: [x, w_q, w_k, w_v, w_o] in `dtype`, the
    mask, and the (3, T) NumPy fully masked rows."""
    x, p, mask, empty = masked_problem()
    arrays = [jnp.asarray(a, dtype=dtype) for a in (x, *(p[k] for k in PARAM_NAMES))]
    return arrays, jnp.asarray(mask), empty


def test_fully_masked_rows_send_zero_gradient(dtype):
    inputs, mask, empty = masked_arrays(dtype)
    out, weights = impl_jax.multi_head_attention(*inputs, 2, mask)
    rng = np.random.default_rng(0)
    d_out = jnp.asarray(rng.standard_normal(out.shape), dtype=dtype)
    d_weights = jnp.asarray(rng.standard_normal(weights.shape), dtype=dtype)
    rows = jnp.asarray(empty)  # (3, T)
    heads_rows = rows[:, None, :]  # (3, 1, T): every head

    def loss(only_empty_rows, *arrays):
        out, weights = impl_jax.multi_head_attention(*arrays, 2, mask)
        out_terms = out * d_out
        weight_terms = (weights * d_weights).sum(axis=-1)  # (3, H, T)
        if only_empty_rows:
            out_terms = jnp.where(rows[..., None], out_terms, 0.0)
            weight_terms = jnp.where(heads_rows, weight_terms, 0.0)
        return out_terms.sum() + weight_terms.sum()

    argnums = tuple(range(1, 6))
    for grad in jax.grad(loss, argnums)(False, *inputs):
        assert jnp.isfinite(grad).all()
    for grad in jax.grad(loss, argnums)(True, *inputs):
        assert (grad == 0).all()


def test_nan_padding_spares_the_forward_but_poisons_the_gradients():
    inputs, _, _ = masked_arrays("float32")
    x = inputs[0].at[1, 4:].set(jnp.nan)  # item 1 is 4 long; its padding is NaN
    mask = impl_jax.key_padding_mask(jnp.asarray([6, 4, 6]), 6, multi_head=True)

    def real_rows(*arrays):
        out, _ = impl_jax.multi_head_attention(*arrays, 2, mask)
        return out[1, :4].sum()

    out, _ = impl_jax.multi_head_attention(x, *inputs[1:], 2, mask)
    assert jnp.isfinite(out[1, :4]).all()  # the forward never sees it
    # The backward of q = x @ w_q is x^T @ d_q: 0 * NaN = NaN. Pad with zeros.
    for grad in jax.grad(real_rows, tuple(range(5)))(x, *inputs[1:]):
        assert jnp.isnan(grad).any()
