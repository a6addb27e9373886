"""Our JAX attention against JAX's and flax's own: jax.nn.dot_product_attention,
nnx.MultiHeadAttention (loaded through the layout converters), and jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import PARAM_NAMES, golden, run_multi
from jax_helpers import flax_multi_head_attention

import impl_jax
from shared import assert_close, tolerance
from shared.layout import from_flax_heads_in, from_flax_heads_out, from_flax_linear


def _params(preset, dtype):
    g = golden(preset)
    return g["x"].astype(dtype), {k: g[k].astype(dtype) for k in PARAM_NAMES}


# jitted, one compile per shape, where eager compiles each of its operations
fused_attention = jax.jit(jax.nn.dot_product_attention, static_argnames="is_causal")


def test_dot_product_attention_is_causal_equals_ours(dtype):
    for preset, H in (("tiny", 4), ("batched", 4), ("long", 4)):
        x, p = _params(preset, dtype)
        x = x.reshape(-1, *x.shape[-2:])  # (B, T, C)
        ours, _ = run_multi(impl_jax, x, p, H, dtype)
        B, T, C = x.shape
        q, k, v = (
            jnp.asarray(x @ p[n]).reshape(B, T, H, C // H)
            for n in ("w_q", "w_k", "w_v")
        )
        fused = fused_attention(q, k, v, is_causal=True)  # (B, T, H, D)
        fused = np.asarray(fused).reshape(B, T, C) @ p["w_o"]
        # jax.nn.dot_product_attention always runs its softmax in float32, even for
        # float64 inputs, so it can only match ours to the float32 level.
        assert_close(
            ours, fused, "float32", f"jax.nn.dot_product_attention on {preset}"
        )


def test_dot_product_attention_softmax_is_float32_even_for_float64():
    x, p = _params("tiny", "float64")
    q, k, v = (jnp.asarray(x @ p[n]).reshape(1, 8, 4, 8) for n in ("w_q", "w_k", "w_v"))
    fused = np.asarray(jax.nn.dot_product_attention(q, k, v, is_causal=True))
    assert fused.dtype == np.float64
    ours, _ = run_multi(impl_jax, x, p, 4, "float64")
    theirs = fused.reshape(8, 32) @ p["w_o"]
    assert 1e-9 < np.abs(ours - theirs).max() < tolerance("float32").atol  # float32


def test_flax_multi_head_attention_equals_ours_weights_included(dtype):
    x, p = _params("batched", dtype)
    H, T = 4, x.shape[-2]
    mha = flax_multi_head_attention(p, H, dtype)
    allowed = impl_jax.causal_mask(T)  # flax: True = may attend, like ours
    # flax sows the weights only when asked; nnx.capture collects what was sown
    forward = nnx.capture(mha, nnx.Intermediate)
    out, sown = forward(jnp.asarray(x), mask=allowed, sow_weights=True)
    (weights,) = sown["attention_weights"]
    ours_out, ours_weights = run_multi(impl_jax, x, p, H, dtype)
    assert_close(
        ours_weights, np.asarray(weights), dtype, "nnx.MultiHeadAttention weights"
    )
    assert_close(ours_out, np.asarray(out), dtype, "nnx.MultiHeadAttention out")
    for layer, name in ((mha.query, "w_q"), (mha.key, "w_k"), (mha.value, "w_v")):
        np.testing.assert_array_equal(
            from_flax_heads_in(np.asarray(layer.kernel[...])), p[name]
        )
    np.testing.assert_array_equal(
        from_flax_heads_out(np.asarray(mha.out.kernel[...])), p["w_o"]
    )


def test_module_weights_round_trip_exactly(dtype):
    g = golden("tiny")
    module = impl_jax.CausalSelfAttention.from_weights(
        *(g[k].astype(dtype) for k in PARAM_NAMES), 4
    )
    linears = (module.q_proj, module.k_proj, module.v_proj, module.out_proj)
    for linear, name in zip(linears, PARAM_NAMES, strict=True):
        assert linear.kernel[...].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(
            from_flax_linear(np.asarray(linear.kernel[...])), g[name].astype(dtype)
        )


def test_jit_equals_eager(dtype):
    g = golden("batched")
    args = [jnp.asarray(g[k].astype(dtype)) for k in ("x", *PARAM_NAMES)]
    # jitted as tests/helpers.py's run_multi and run_single call it (the mask
    # None, the scale given): the programs of tests/test_backend.py's presets
    out, weights = impl_jax.multi_head_attention_jit(*args, 4, None, scale=True)
    eager_out, eager_weights = impl_jax.multi_head_attention(*args, 4)
    assert_close(np.asarray(out), np.asarray(eager_out), dtype, "jit out")
    assert_close(np.asarray(weights), np.asarray(eager_weights), dtype, "jit weights")
    single_out, _ = impl_jax.single_head_attention_jit(*args[:4], None, scale=True)
    assert_close(np.asarray(single_out), g["single_out"], dtype, "jit single-head out")


def test_nnx_jit_module_equals_eager_module():
    g = golden("tiny")
    module = impl_jax.CausalSelfAttention.from_weights(
        *(g[k].astype(np.float32) for k in PARAM_NAMES), 4
    )
    x = jnp.asarray(g["x"].astype(np.float32))
    out, weights = nnx.jit(lambda m, x: m(x))(module, x)
    eager_out, eager_weights = module(x)
    assert_close(np.asarray(out), np.asarray(eager_out), "float32", "nnx.jit out")
    assert_close(
        np.asarray(weights), np.asarray(eager_weights), "float32", "nnx.jit weights"
    )


def test_validation_runs_at_trace_time_under_jit():
    x = jax.ShapeDtypeStruct((2, 5, 8), jnp.float32)
    w = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    # Under jit, JAX appends a note on traceback filtering after our message.
    with pytest.raises(ValueError, match=r"^n_heads=3 does not divide d_model=8\n"):
        jax.eval_shape(impl_jax.multi_head_attention_jit, x, w, w, w, w, 3)
    out, weights = jax.eval_shape(impl_jax.multi_head_attention_jit, x, w, w, w, w, 2)
    assert out.shape == (2, 5, 8) and weights.shape == (2, 2, 5, 5)


def test_the_jitted_attention_takes_every_option_away_from_its_default():
    """single_head_attention_jit and multi_head_attention_jit with a mask,
    scale=False (static) and every bias, and key_padding_mask_jit with
    multi_head=True (static), float64, against the oracle (tests/test_options.py
    registers them)."""
    from helpers import options_problem

    from shared.reference import reference_multi_head, reference_single_head

    case = options_problem()
    x, mask = jnp.asarray(case.x), jnp.asarray(case.mask)
    w = {n: jnp.asarray(a) for n, a in case.params.items()}
    b = {n: jnp.asarray(a) for n, a in case.biases.items()}
    out, weights = impl_jax.single_head_attention_jit(
        x, w["w_q"], w["w_k"], w["w_v"], mask[:, 0], scale=False,
        biases=dict(b_q=b["b_q"], b_k=b["b_k"], b_v=b["b_v"]),
    )  # fmt: skip
    three = {n: case.biases[n] for n in ("b_q", "b_k", "b_v")}
    expected = reference_single_head(
        case.x,
        *list(case.params.values())[:3],
        case.mask[:, 0],
        scale=False,
        biases=three,
    )
    assert_close(np.asarray(out), expected[0], "float64", "single out")
    assert_close(np.asarray(weights), expected[1], "float64", "single weights")
    out, weights = impl_jax.multi_head_attention_jit(
        x, *w.values(), case.H, mask, scale=False,
        biases=b,
    )  # fmt: skip
    expected = reference_multi_head(
        case.x,
        *case.params.values(),
        case.H,
        case.mask,
        scale=False,
        biases=case.biases,
    )
    assert_close(np.asarray(out), expected[0], "float64", "multi out")
    assert_close(np.asarray(weights), expected[1], "float64", "multi weights")
    padding = impl_jax.key_padding_mask_jit(jnp.asarray(case.keep), 6, multi_head=True)
    np.testing.assert_array_equal(np.asarray(padding), case.keep[:, None, None, :])
