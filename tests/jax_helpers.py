"""Helpers for the JAX-only tests (tests/test_jax_*.py); imports jax and flax."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from shared.layout import to_flax_heads_in, to_flax_heads_out


def flax_multi_head_attention(params, n_heads, dtype):
    """flax nnx.MultiHeadAttention (no bias, no decode) holding our (C, C)
    NumPy projections, read through the layout converters."""
    C = params["w_q"].shape[0]
    mha = nnx.MultiHeadAttention(
        num_heads=n_heads,
        in_features=C,
        qkv_features=C,
        out_features=C,
        use_bias=False,
        decode=False,
        param_dtype=jnp.dtype(dtype),
        rngs=nnx.Rngs(0),
    )
    for layer, name in ((mha.query, "w_q"), (mha.key, "w_k"), (mha.value, "w_v")):
        layer.kernel[...] = jnp.asarray(to_flax_heads_in(params[name], n_heads))
    mha.out.kernel[...] = jnp.asarray(to_flax_heads_out(params["w_o"], n_heads))
    return mha
