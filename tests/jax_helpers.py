"""Helpers for the JAX-only tests (tests/test_jax_*.py); imports jax and flax."""

from __future__ import annotations

import functools

import jax
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


@functools.cache
def xla_fuses_multiply_subtract() -> bool:
    """Whether XLA's code for this CPU contracts a multiply and a subtract
    into one fused multiply-add, which does not round the product: what makes
    jitted attention wrong at hostile magnitudes (docs/contract.md, "A known
    limit of jitted attention"). x86 CPUs with FMA do; without it (or under
    XLA_FLAGS=--xla_cpu_max_isa=AVX) the product rounds, and those cases are
    right. (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24 unrounded and 0 rounded."""
    a = jnp.full((8,), 1 + 2**-12, jnp.float32)
    c = jnp.full((8,), 1 + 2**-11, jnp.float32)
    return bool(jax.jit(lambda a, c: a * a - c)(a, c)[0] != 0)
