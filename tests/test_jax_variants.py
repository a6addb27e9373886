"""JAX's variants (docs/variants.md): jax.nn.dot_product_attention against the
float64 oracle on the same inputs (GQA by its K key/value heads, a sliding
window as local_window_size=(W - 1, 0) with is_causal, ALiBi as its bias), at
float32's tolerance: its softmax is always float32, whatever the dtype; and
the jitted twins with every variant away from its default, one shape."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from test_variants import (
    ARRAYS,
    H_KV,
    B,
    C,
    H,
    T,
    X,
    core_problem,
    expected,
    weights_for,
)

from impl_jax.attention import multi_head_attention_jit
from impl_jax.blockwise import (
    blockwise_attention_jit,
    multi_head_blockwise_attention_jit,
)
from impl_jax.kv_cache import decode_step_jit, init_kv_cache
from shared import assert_close
from shared.reference import reference_multi_head
from shared.variants import Rotary, Variant, alibi_slopes


def _btnh(a, n):
    """(B, T, n * D) -> (B, T, n, D): jax.nn's layout."""
    return a.reshape(B, T, n, -1)


def test_dot_product_attention_gqa_and_local_window_size_equal_the_oracle():
    """local_window_size=(W - 1, 0) with is_causal is our window W (the
    query's own key and W - 1 before it); key heads K = H_kv: GQA."""
    W = 3
    options = dict(n_kv_heads=H_KV, window=W)
    w_q, w_k, w_v, w_o = weights_for(options)
    q, k, v = _btnh(X @ w_q, H), _btnh(X @ w_k, H_KV), _btnh(X @ w_v, H_KV)
    out = jax.nn.dot_product_attention(
        q, k, v, is_causal=True, local_window_size=(W - 1, 0)
    )
    found = np.asarray(out).reshape(B, T, C) @ w_o
    assert_close(found, expected(options)[0], "float32", "local_window_size")
    wider = jax.nn.dot_product_attention(
        q, k, v, is_causal=True, local_window_size=(W, 0)
    )  # one key more: our window W + 1
    wider_expected = reference_multi_head(
        X, w_q, w_k, w_v, w_o, H, variant=Variant(**options | dict(window=W + 1))
    )
    assert_close(np.asarray(wider).reshape(B, T, C) @ w_o, wider_expected[0], "float32")


def test_dot_product_attention_with_alibi_as_its_bias_equals_the_oracle():
    w_q, w_k, w_v, w_o = weights_for({})
    q, k, v = (_btnh(X @ w, H) for w in (w_q, w_k, w_v))
    distance = np.arange(T)[None, :] - np.arange(T)[:, None]  # j - i
    bias = np.asarray(alibi_slopes(H))[:, None, None] * distance  # (H, T, T)
    out = jax.nn.dot_product_attention(q, k, v, bias=bias[None], is_causal=True)
    found = np.asarray(out).reshape(B, T, C) @ w_o
    assert_close(found, expected(dict(alibi=True))[0], "float32", "bias = ALiBi")


def test_the_jitted_variants_take_every_option_away_from_its_default():
    """multi_head_attention_jit, multi_head_blockwise_attention_jit and
    decode_step_jit with every variant at once, blockwise_attention_jit with
    its four, against the oracle; a Variant is a pytree (its choices static,
    its arrays traced): new arrays, one program."""
    D = C // H
    variant = Variant(
        n_kv_heads=H_KV, head_dim=D, rotary=Rotary(style="gptj", fraction=0.5),
        window=3, alibi=True, softcap=2.0, qk_norm_eps=1e-3,
        sinks=ARRAYS["sinks"], q_norm=ARRAYS["q_norm"], k_norm=ARRAYS["k_norm"],
        positions=ARRAYS["positions"],  # not 0, 1, ...: in any order
    )  # fmt: skip
    w = weights_for(dict(n_kv_heads=H_KV))
    out, weights = multi_head_attention_jit(X, *w, H, variant=variant)
    want = reference_multi_head(X, *w, H, variant=variant)
    assert_close(np.asarray(out), want[0], "float64", "multi_head_attention_jit")
    assert_close(np.asarray(weights), want[1], "float64", "weights")
    compiled = multi_head_attention_jit._cache_size()
    other = dataclasses.replace(variant, sinks=ARRAYS["sinks"] + 1.0)
    multi_head_attention_jit(X, *w, H, variant=other)
    assert multi_head_attention_jit._cache_size() == compiled  # the arrays: traced
    out, _ = multi_head_blockwise_attention_jit(X, *w, H, block_size=4, variant=variant)
    assert_close(np.asarray(out), want[0], "float64", "blockwise jit")
    cache = init_kv_cache((B,), T, C, H, "float64", variant=variant)
    outs = []
    for t in range(T):
        step = dataclasses.replace(variant, positions=variant.positions[t : t + 1])
        out_t, cache = decode_step_jit(X[:, t], cache, *w, H, variant=step)
        outs.append(np.asarray(out_t))
    assert_close(np.stack(outs, -2), want[0], "float64", "decode_step_jit")
    q, k, v, core, merged_expected = core_problem()
    core, lse = blockwise_attention_jit(
        *(jnp.asarray(a) for a in (q, k, v)), block_size=4, variant=core
    )
    assert_close(_merged(np.asarray(core)), merged_expected, "float64", "core jit")
    assert lse.shape == (B, H, T)


def _merged(heads):
    return heads.swapaxes(1, 2).reshape(B, T, C)
