"""The JAX backward against JAX's and flax's own tools: the full Jacobian from
jax.jacrev, gradients of the nnx.Module form and of nnx.MultiHeadAttention
(read through the layout converters) by nnx.grad, and jit against eager."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import (
    PARAM_NAMES,
    functional_gradients,
    gradient_case,
    gradient_tolerances,
    masked_problem,
)
from jax_helpers import flax_multi_head_attention

import impl_jax
import impl_numpy
from shared import assert_close
from shared.layout import from_flax_heads_in, from_flax_heads_out, from_flax_linear


def test_jacrev_jacobian_is_causal_and_equals_the_numpy_backward(dtype):
    x, params, n_heads, _ = gradient_case("tiny", dtype)
    w = [jnp.asarray(params[k]) for k in PARAM_NAMES]

    def out_of_x(x):
        return impl_jax.multi_head_attention(x, *w, n_heads)[0]

    jacobian = np.asarray(jax.jacrev(out_of_x)(jnp.asarray(x)))  # (T, C, T, C)
    T = x.shape[0]
    future = np.triu(np.ones((T, T), dtype=bool), k=1)  # j > i
    assert np.all(jacobian.transpose(0, 2, 1, 3)[future] == 0)
    assert np.all(np.any(jacobian.transpose(0, 2, 1, 3)[~future] != 0, axis=(1, 2)))
    # the same Jacobian, row by row, from the hand-written NumPy backward
    x64, params64, _, _ = gradient_case("tiny", "float64")
    rows = [
        impl_numpy.multi_head_attention_backward(
            x64, *(params64[k] for k in PARAM_NAMES), n_heads, one_hot.reshape(x.shape)
        )["x"]
        for one_hot in np.eye(x.size)
    ]
    # the x-gradient's tolerance on the same preset (docs/suite.md)
    tolerance = gradient_tolerances("tiny", "multi", dtype)["x"]
    assert_close(jacobian, np.stack(rows).reshape(jacobian.shape), tolerance)


def test_nnx_grad_of_the_module_equals_the_functional_gradients(dtype):
    x, params, n_heads, d_out = gradient_case("batched", dtype)
    module = impl_jax.CausalSelfAttention.from_weights(
        *(params[k] for k in PARAM_NAMES), n_heads
    )

    def loss(module, x):
        out, _ = module(x)
        return jnp.sum(out * d_out)

    module_grads, x_grad = nnx.grad(loss, argnums=(0, 1))(module, jnp.asarray(x))
    expected = functional_gradients(impl_jax, x, params, n_heads, d_out, dtype)
    tolerances = gradient_tolerances("batched", "multi", dtype)
    assert_close(np.asarray(x_grad), expected["x"], tolerances["x"], "module d_x")
    linears = (
        module_grads.q_proj,
        module_grads.k_proj,
        module_grads.v_proj,
        module_grads.out_proj,
    )
    for linear, name in zip(linears, PARAM_NAMES, strict=True):
        grad = from_flax_linear(np.asarray(linear.kernel[...]))
        assert_close(grad, expected[name], tolerances[name], f"module d_{name}")


def test_nnx_multi_head_attention_gradients_equal_ours(dtype):
    x, params, n_heads, d_out = gradient_case("batched", dtype)
    T = x.shape[-2]
    mha = flax_multi_head_attention(params, n_heads, dtype)
    allowed = impl_jax.causal_mask(T)  # flax: True = may attend, like ours

    # sow_weights=True keeps flax on its own softmax: without it, flax hands the
    # call to jax.nn.dot_product_attention, whose softmax is float32 even for
    # float64 inputs (test_jax_fused.py), and float64 gradients then differ at 1e-7.
    # nnx.capture takes what it sows (calling sow outside it is deprecated).
    def loss(mha, x):
        out, _ = nnx.capture(mha, nnx.Intermediate)(x, mask=allowed, sow_weights=True)
        return jnp.sum(out * d_out)

    grads, x_grad = nnx.grad(loss, argnums=(0, 1))(mha, jnp.asarray(x))
    expected = functional_gradients(impl_jax, x, params, n_heads, d_out, dtype)
    tolerances = gradient_tolerances("batched", "multi", dtype)
    what = "nnx.MultiHeadAttention"
    assert_close(np.asarray(x_grad), expected["x"], tolerances["x"], f"{what} d_x")
    for layer, name in ((grads.query, "w_q"), (grads.key, "w_k"), (grads.value, "w_v")):
        grad = from_flax_heads_in(np.asarray(layer.kernel[...]))  # (C, H, D) -> (C, C)
        assert_close(grad, expected[name], tolerances[name], f"{what} d_{name}")
    w_o_grad = from_flax_heads_out(np.asarray(grads.out.kernel[...]))  # (H, D, C)
    assert_close(w_o_grad, expected["w_o"], tolerances["w_o"], f"{what} d_w_o")


def test_jitted_backward_equals_eager_where_rows_are_fully_masked():
    """The other tests take JAX's gradients from the jitted backward; here eager
    gives the same where a row has nothing to attend (finite, no NaN)."""
    x, params, mask, _ = masked_problem()
    d_out = np.random.default_rng(3).standard_normal(x.shape)
    args = [jnp.asarray(a) for a in (x, *(params[k] for k in PARAM_NAMES))]
    mask, d_out = jnp.asarray(mask), jnp.asarray(d_out)
    eager = impl_jax.multi_head_attention_backward(*args, 2, d_out, mask)
    jitted = impl_jax.multi_head_attention_backward_jit(*args, 2, d_out, mask)
    for name in eager:
        assert np.all(np.isfinite(np.asarray(eager[name]))), name
        assert_close(np.asarray(jitted[name]), np.asarray(eager[name]), "float64", name)


def test_jitted_backward_equals_eager(dtype):
    # "tiny", any preset would do: the eager backward's programs are those of
    # tests/test_backward.py's tests on it, and of triptych grad
    x, params, n_heads, d_out = gradient_case("tiny", dtype)
    args = [jnp.asarray(a) for a in (x, *(params[k] for k in PARAM_NAMES))]
    d_out = jnp.asarray(d_out)
    eager = impl_jax.multi_head_attention_backward(*args, n_heads, d_out)
    eager_single = impl_jax.single_head_attention_backward(*args[:4], d_out)
    # jitted as shared.gradients.backend_gradients calls it (the mask None, the
    # scale given): the programs tests/test_backward.py compiled on this preset
    jitted = impl_jax.multi_head_attention_backward_jit(
        *args, n_heads, d_out, None, scale=True
    )
    jitted_single = impl_jax.single_head_attention_backward_jit(
        *args[:4], d_out, None, scale=True
    )
    multi = gradient_tolerances("tiny", "multi", dtype)
    single = gradient_tolerances("tiny", "single", dtype)
    for name in eager:
        assert_close(jitted[name], eager[name], multi[name], f"jit d_{name}")
    for name in eager_single:
        what = f"jit single d_{name}"
        assert_close(jitted_single[name], eager_single[name], single[name], what)


def test_jitted_jax_grad_equals_eager_jax_grad_and_our_backward(dtype):
    x, params, n_heads, d_out = gradient_case("batched", dtype)
    inputs = {"x": jnp.asarray(x), **{k: jnp.asarray(params[k]) for k in PARAM_NAMES}}

    def loss(inputs):
        out, _ = impl_jax.multi_head_attention(**inputs, n_heads=n_heads)
        return jnp.sum(out * d_out)

    eager = jax.grad(loss)(inputs)
    jitted = jax.jit(jax.grad(loss))(inputs)
    ours = functional_gradients(impl_jax, x, params, n_heads, d_out, dtype)
    tolerances = gradient_tolerances("batched", "multi", dtype)
    for name in inputs:
        what = f"jax.jit(jax.grad) d_{name}"
        assert_close(jitted[name], eager[name], tolerances[name], what)
        assert_close(eager[name], ours[name], tolerances[name], f"jax.grad d_{name}")


def test_validation_runs_at_trace_time_under_jit():
    x = jax.ShapeDtypeStruct((2, 5, 8), jnp.float32)
    w = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    bad = jax.ShapeDtypeStruct((2, 5, 4), jnp.float32)
    message = r"^d_out must have the shape of out, \(\.\.\., T, C\) = \(2, 5, 8\)"
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(
            impl_jax.multi_head_attention_backward_jit, x, w, w, w, w, 2, bad
        )
    grads = jax.eval_shape(
        impl_jax.multi_head_attention_backward_jit, x, w, w, w, w, 2, x
    )
    assert grads["x"].shape == (2, 5, 8) and grads["w_o"].shape == (8, 8)


def test_the_jitted_backward_takes_every_option_away_from_its_default():
    """single_head_attention_backward_jit and multi_head_attention_backward_jit
    with a mask, scale=False (static) and every bias, float64, against NumPy's
    hand-written backward (tests/test_options.py registers them)."""
    from helpers import options_problem

    case = options_problem()
    x, d_out, mask = case.x, case.d_out, case.mask
    w, b = case.params, case.biases
    single = {n: w[n][:, :4] for n in ("w_q", "w_k", "w_v")}
    single_b = {n: b[n][:4] for n in ("b_q", "b_k", "b_v")}
    expected = impl_numpy.single_head_attention_backward(
        x, *single.values(), d_out[..., :4], mask[:, 0], scale=False, biases=single_b
    )
    found = impl_jax.single_head_attention_backward_jit(
        *(jnp.asarray(a) for a in (x, *single.values(), d_out[..., :4], mask[:, 0])),
        scale=False,
        biases=dict(
            b_q=jnp.asarray(single_b["b_q"]),
            b_k=jnp.asarray(single_b["b_k"]),
            b_v=jnp.asarray(single_b["b_v"]),
        ),
    )
    assert sorted(found) == sorted(expected)  # jit returns a pytree's sorted keys
    for name, g in expected.items():
        assert_close(np.asarray(found[name]), g, "float64", f"single d_{name}")
    expected = impl_numpy.multi_head_attention_backward(
        x, *w.values(), case.H, d_out, mask, scale=False, biases=b
    )
    found = impl_jax.multi_head_attention_backward_jit(
        *(jnp.asarray(a) for a in (x, *w.values())), case.H,
        jnp.asarray(d_out), jnp.asarray(mask), scale=False,
        biases={n: jnp.asarray(a) for n, a in b.items()},
    )  # fmt: skip
    assert sorted(found) == sorted(expected)  # jit returns a pytree's sorted keys
    for name, g in expected.items():
        assert_close(np.asarray(found[name]), g, "float64", f"multi d_{name}")
