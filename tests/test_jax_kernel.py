"""What only the Pallas kernel has: jax.grad through its custom_vjp equals the
gradient of blockwise attention and, with a key mask, of the naive attention
(the lse's cotangent included; a row with nothing to attend gets a zero
gradient), and with GQA, a window and soft-capping, of the naive attention;
eager equals jit; and the kernel lowers for a CUDA GPU, on this CPU,
to one Triton call (Pallas writes the Triton IR; XLA compiles it on a GPU).
Collected with --kernels (tox -e kernels)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    PARAM_NAMES,
    derived_gradient_tolerances,
    random_inputs,
)

import impl_jax
from impl_jax import kernel
from impl_jax.attention import allowed_keys, attend
from impl_jax.variants import repeat_kv, soft_cap
from shared import Variant, assert_close


def test_eager_equals_jit(dtype):
    q, k, v = np.random.default_rng(0).standard_normal((3, 2, 13, 4))
    q, k, v = (jnp.asarray(a, dtype) for a in (q, k, v))
    eager = kernel.flash_attention(q, k, v, block_size=4)
    jitted = kernel.flash_attention_jit(q, k, v, block_size=4)
    for a, b, what in zip(eager, jitted, ("out", "lse"), strict=True):
        assert_close(np.asarray(a), np.asarray(b), dtype, f"eager vs jit {what}")


def test_multi_head_gradients_equal_blockwise_attentions(dtype):
    x, p = random_inputs(1, (2,), 13, 8)
    args = [jnp.asarray(a, dtype) for a in (x, *(p[n] for n in PARAM_NAMES))]
    d_out = jnp.asarray(np.random.default_rng(2).standard_normal(x.shape), dtype)

    def loss(attention, *args):
        out, _ = attention(*args, 2, block_size=4)  # 2 heads of D = 4
        return jnp.sum(out * d_out)

    def gradients(attention):
        grad = jax.grad(functools.partial(loss, attention), argnums=range(5))
        return jax.jit(grad)(*args)

    ours = gradients(kernel.multi_head_flash_attention)
    theirs = gradients(impl_jax.multi_head_blockwise_attention)
    tolerances = derived_gradient_tolerances(
        "multi", x, p, 2, np.asarray(d_out, np.float64), dtype
    )
    for name, a, b in zip(("x", *PARAM_NAMES), ours, theirs, strict=True):
        assert_close(
            np.asarray(a), np.asarray(b), tolerances[name], f"d loss / d {name}"
        )


@pytest.mark.parametrize("with_lse", [False, True], ids=["out", "out-and-lse"])
def test_gradients_with_a_key_mask_equal_the_naive_attentions(with_lse):
    T = 13
    rng = np.random.default_rng(3)
    q, k, v, d_out = (jnp.asarray(a) for a in rng.standard_normal((4, 2, T, 4)))
    d_lse = jnp.asarray(rng.standard_normal((2, T)))
    keep = np.ones((2, T), dtype=bool)
    keep[0, -5:] = False  # padding at the end
    if not with_lse:  # lse is -inf where nothing is attended: no cotangent there
        keep[1, :3] = False  # queries 0 to 2 of item 1 may attend nothing
    mask = jnp.asarray(keep[:, None, :])  # (2, 1, T)

    def loss(out, lse):
        return jnp.sum(out * d_out) + (jnp.sum(lse * d_lse) if with_lse else 0.0)

    def flash(q, k, v):
        return loss(*kernel.flash_attention(q, k, v, mask, block_size=4))

    def naive(q, k, v):
        allowed = allowed_keys(T, mask)  # (2, T, T)
        out, _ = attend(q, k, v, allowed)
        scores = jnp.where(allowed, q @ k.mT / 2.0, -jnp.inf)  # D = 4
        return loss(out, jax.nn.logsumexp(scores, axis=-1))

    ours = jax.jit(jax.grad(flash, argnums=(0, 1, 2)))(q, k, v)
    theirs = jax.grad(naive, argnums=(0, 1, 2))(q, k, v)
    for name, a, b in zip("qkv", ours, theirs, strict=True):
        assert_close(np.asarray(a), np.asarray(b), "float64", f"d loss / d {name}")
    if not with_lse:  # the rows with nothing to attend: a zero gradient
        np.testing.assert_array_equal(np.asarray(ours[0])[1, :3], 0.0)


def test_gradients_with_gqa_a_window_and_a_softcap_equal_the_naive_attentions():
    """flash_attention with 4 query heads on 2 KV heads, a window of 3 and a
    soft-cap of 1.5 (docs/variants.md): its backward repeats k and v, sums
    their gradients back over each KV head's queries, masks the window and
    multiplies by soft-capping's slope, 1 - tanh^2."""
    T, window, cap = 9, 3, 1.5
    rng = np.random.default_rng(4)
    q, d_out = (jnp.asarray(a) for a in rng.standard_normal((2, 1, 4, T, 4)))
    k, v = (jnp.asarray(a) for a in rng.standard_normal((2, 1, 2, T, 4)))
    d_lse = jnp.asarray(rng.standard_normal((1, 4, T)))

    def loss(out, lse):
        return jnp.sum(out * d_out) + jnp.sum(lse * d_lse)

    def flash(q, k, v):
        variant = Variant(n_kv_heads=2, window=window, softcap=cap)
        return loss(*kernel.flash_attention(q, k, v, block_size=4, variant=variant))

    def naive(q, k, v):
        k, v = repeat_kv(k, 2), repeat_kv(v, 2)  # (1, 4, T, 4): head h reads h // 2
        i, j = jnp.arange(T)[:, None], jnp.arange(T)
        allowed = (j <= i) & (j > i - window)  # (T, T)
        out, _ = attend(q, k, v, allowed, score_mod=lambda s: soft_cap(s, cap))
        scores = jnp.where(allowed, soft_cap(q @ k.mT / 2.0, cap), -jnp.inf)
        return loss(out, jax.nn.logsumexp(scores, axis=-1))  # D = 4: scale 1 / 2

    ours = jax.jit(jax.grad(flash, argnums=(0, 1, 2)))(q, k, v)
    theirs = jax.jit(jax.grad(naive, argnums=(0, 1, 2)))(q, k, v)
    for name, a, b in zip("qkv", ours, theirs, strict=True):
        assert_close(np.asarray(a), np.asarray(b), "float64", f"d loss / d {name}")


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_the_kernel_lowers_to_one_triton_call_for_a_cuda_gpu(precision):
    q = jnp.zeros((8, 256, 64), precision)  # N = 8 rows of T = 256, D = 64
    keep = jnp.ones(q.shape[:-1], dtype=bool)
    # block_size, causal, scale, compiled, no window, no soft-capping
    settings = (64, True, 0.125, False, None, None)
    forward = jax.jit(kernel.flash_forward, static_argnums=4)
    lowered = forward.trace(q, q, q, keep, settings).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert text.count("xla.gpu.triton") == 1
    assert "grid_x = 8 : i32, grid_y = 4 : i32" in text  # (N, T / B) programs


def test_gradients_with_every_option_away_from_its_default_equal_the_oracles():
    """flash_attention and flash_attention_jit with a key mask, block_size=2,
    causal=False, scale=False and interpret=True: jax.grad of
    sum(out * d_out) + sum(lse * d_lse) for q, k, v equals the oracle's finite
    differences entry by entry; multi_head_flash_attention and its _jit twin
    with those and every bias, for x, the weights and the biases, along random
    directions (tests/helpers.py; registered in tests/test_options.py)."""
    from helpers import (
        assert_directional_derivatives,
        assert_finite_differences,
        flash_options_case,
        multi_head_flash_options_case,
    )

    case = flash_options_case()
    mask = jnp.asarray(case.mask)
    options = dict(block_size=2, causal=False, scale=False, interpret=True)
    for flash in (kernel.flash_attention, kernel.flash_attention_jit):

        def loss(q, k, v, flash=flash):
            out, lse = flash(q, k, v, mask, **options)
            return jnp.sum(out * case.d_out) + jnp.sum(lse * case.d_lse)

        grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(case.q, case.k, case.v)
        found = {name: np.asarray(g) for name, g in zip("qkv", grads, strict=True)}
        assert_finite_differences(found, case.grads, flash.__name__)
    multi = multi_head_flash_options_case()
    key_mask = jnp.asarray(multi.mask)
    flashes = (kernel.multi_head_flash_attention, kernel.multi_head_flash_attention_jit)
    for flash in flashes:

        def multi_loss(a, flash=flash):
            out, lse = flash(
                a["x"], *(a[n] for n in PARAM_NAMES), multi.H, key_mask,
                block_size=2, causal=False, scale=False, interpret=True,
                biases={n: a[n] for n in ("b_q", "b_k", "b_v", "b_o")},
            )  # fmt: skip
            return jnp.sum(out * multi.d_out) + jnp.sum(lse * multi.d_lse)

        grads = jax.jit(jax.grad(multi_loss))(multi.arrays)
        found = {name: np.asarray(g) for name, g in grads.items()}
        assert_directional_derivatives(found, multi.found, flash.__name__)


def test_matmul_transposes_b_when_asked():
    """kernel.matmul(transpose_b=True) is a @ b^T, summed in the dtype asked
    for (the scores' product); the default, a @ b (tests/test_options.py
    registers it)."""
    rng = np.random.default_rng(45)
    a, b = rng.standard_normal((2, 5, 4))
    found = kernel.matmul(jnp.asarray(a), jnp.asarray(b), jnp.float64, transpose_b=True)
    assert found.dtype == jnp.float64
    assert_close(np.asarray(found), a @ b.T, "float64", "a @ b^T")
    square = rng.standard_normal((4, 3))
    plain = kernel.matmul(jnp.asarray(a), jnp.asarray(square), jnp.float64)
    assert_close(np.asarray(plain), a @ square, "float64", "a @ b")
