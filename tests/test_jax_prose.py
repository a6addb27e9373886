"""The side-by-side page's differences between the frameworks that concern
JAX and flax (triptych/read/text.py), each checked by running the alternative:
what NumPy or torch would write, and what JAX does with it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest


def test_a_traced_n_heads_fails_under_jit():
    import impl_jax

    x = jnp.ones((4, 8))
    w = jnp.eye(8)
    with pytest.raises(ValueError, match="static_argnames"):
        jax.jit(impl_jax.multi_head_attention)(x, w, w, w, w, 2)
    out, _ = impl_jax.multi_head_attention_jit(x, w, w, w, w, 2)
    assert out.shape == (4, 8)


def test_float64_becomes_float32_without_x64():
    with jax.enable_x64(False):
        assert jnp.asarray(np.ones(2)).dtype == jnp.float32  # silently


def test_vjp_returns_a_function():
    _, backward = jax.vjp(lambda x: 3.0 * x, jnp.ones(2))
    assert callable(backward)
    (grad,) = backward(jnp.ones(2))
    assert grad.tolist() == [3.0, 3.0]


def test_jax_arrays_are_immutable():
    a = jnp.zeros(3)
    with pytest.raises(TypeError, match="immutable"):
        a[0] = 1.0
    b = a.at[0].set(1.0)  # a new array; a is as it was
    assert a.tolist() == [0.0, 0.0, 0.0] and b.tolist() == [1.0, 0.0, 0.0]


def test_jax_exp_takes_no_out():
    x = jnp.ones(2)
    with pytest.raises(TypeError, match="out"):
        jnp.exp(x, out=x)


def test_debug_callback_runs_at_every_call():
    traced, called = [], []

    @jax.jit
    def f(x):
        traced.append(1)  # Python: runs while tracing only
        jax.debug.callback(lambda v: called.append(1), x)
        return x + 1

    for _ in range(3):
        f(jnp.ones(2)).block_until_ready()
    jax.effects_barrier()
    assert len(traced) == 1 and len(called) == 3


def test_jax_drops_a_write_out_of_bounds():
    cache = jnp.zeros(4)
    assert cache.at[10].set(1.0).tolist() == [0.0] * 4  # NumPy: IndexError
    with pytest.raises(IndexError):
        np.zeros(4)[10] = 1.0


def test_linear_layouts_of_torch_and_flax():
    from flax import nnx

    layer = nnx.Linear(3, 5, rngs=nnx.Rngs(0))
    assert layer.kernel.shape == (3, 5)  # (in, out); torch's weight is (5, 3)
    x = jnp.ones((1, 3))
    np.testing.assert_allclose(layer(x), x @ layer.kernel[...] + layer.bias[...])


def test_optax_adam_is_two_pure_functions():
    import optax

    adam = optax.adam(0.1)
    params = {"w": jnp.ones(2)}
    state = adam.init(params)  # data, apart from the optimizer
    updates, new_state = adam.update({"w": jnp.ones(2)}, state, params)
    new = optax.apply_updates(params, updates)
    assert params["w"].tolist() == [1.0, 1.0]  # a new params, the old as it was
    assert new["w"].tolist() != [1.0, 1.0]
    assert jax.tree.leaves(new_state) != jax.tree.leaves(state)


def test_jit_traces_the_lesson_once_into_a_program_then_runs_it():
    """The lesson's lines run once, on abstract arrays, into a jaxpr that jit
    compiles; a second call of the same shapes runs the program, not Python."""
    from impl_jax import lesson

    x, w = jnp.ones((4, 8)), jnp.eye(8)[:, :4]
    program = str(jax.make_jaxpr(lesson.single_head_attention)(x, w, w, w))
    assert "dot_general" in program and "exp" in program
    traced = []

    def counted(*args):
        traced.append(1)  # Python runs only while tracing
        return lesson.single_head_attention(*args)

    compiled = jax.jit(counted)
    first, _ = compiled(x, w, w, w)
    again, _ = compiled(x + 1, w, w, w)
    assert len(traced) == 1 and first.shape == again.shape == (4, 4)
