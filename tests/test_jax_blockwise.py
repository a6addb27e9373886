"""What only JAX has, for blockwise attention and the KV cache: eager equals
jit, a repeated eager call compiles nothing, agreement with jax.nn.dot_product_attention, the block count is the
compiled loop's (counted when it runs, not when it is traced), the static-bound
loops are reverse-differentiable, the jitted decode step compiles once for a
whole decode (the preallocated cache keeps one shape), donates its cache, and
runs under nnx.jit in the module form; the tuned attention's block follows the
cores XLA may use."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import PARAM_NAMES, golden, random_inputs, run_multi

import impl_jax
from impl_jax import tuned
from shared import PRESETS, Variant, assert_close, blocks


def _qkv(dtype, batch=(2,), T=13, D=4, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal((*batch, T, D)), dtype) for _ in "qkv"]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_eager_blockwise_equals_jitted(dtype, causal):
    q, k, v = _qkv(dtype)
    eager = impl_jax.blockwise_attention(q, k, v, block_size=4, causal=causal)
    jitted = impl_jax.blockwise_attention_jit(q, k, v, block_size=4, causal=causal)
    for a, b, what in zip(eager, jitted, ("out", "lse"), strict=True):
        assert_close(np.asarray(a), np.asarray(b), dtype, f"eager vs jit {what}")


def test_eager_multi_head_blockwise_equals_jitted():
    # float64 only: eager and jitted run the same code in every dtype (the
    # single-head test above takes both), and eager JAX compiles each of its
    # operations, seconds of them; on helpers.options_problem's sizes, (2, 6, 8)
    # and two heads (two blocks of 4, the second cut short), whose operations
    # tests/test_blockwise.py's test of every option has compiled eagerly
    x, p = random_inputs(0, (2,), 6, 8)
    args = [jnp.asarray(a, "float64") for a in (x, *(p[n] for n in PARAM_NAMES))]
    eager, _ = impl_jax.multi_head_blockwise_attention(*args, 2, block_size=4)
    jitted, _ = impl_jax.multi_head_blockwise_attention_jit(*args, 2, block_size=4)
    assert_close(np.asarray(eager), np.asarray(jitted), "float64", "eager vs jit")


@contextlib.contextmanager
def compiles():
    """The programs XLA compiles inside the block, counted into a list."""
    found = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            found.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield found
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


@pytest.mark.parametrize("sinks", [False, True], ids=["plain", "window-and-sinks"])
def test_an_eager_call_repeated_compiles_nothing(sinks):
    """The loop over the key blocks before the diagonal is jitted on its own
    (impl_jax/blockwise.py's unmasked_blocks): a second eager call of the
    same shapes reuses every program, even with a new sinks array."""
    q, k, v = _qkv("float32", batch=(2, 3), T=16)  # (2, 3, 16, 4): 4 blocks of 4

    def call():
        variant = None
        if sinks:  # a fresh array each call, as a caller's would be
            variant = Variant(window=6, sinks=jnp.asarray([0.5, -1.0, 2.0], q.dtype))
        out, _ = impl_jax.blockwise_attention(q, k, v, block_size=4, variant=variant)
        return np.asarray(out)

    with compiles() as first:
        expected = call()
    with compiles() as again:
        got = call()
    assert len(first) > 0 and again == []
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_blockwise_equals_dot_product_attention(causal):
    q, k, v = _qkv("float32", batch=(2, 3))  # (B, H, T, D)
    ours, _ = impl_jax.blockwise_attention_jit(q, k, v, block_size=4, causal=causal)
    q, k, v = (a.swapaxes(-3, -2) for a in (q, k, v))  # (B, T, H, D), JAX's layout
    theirs = jax.nn.dot_product_attention(q, k, v, is_causal=causal)  # (B, T, H, D)
    assert_close(ours, theirs.swapaxes(-3, -2), "float32", "blockwise vs dpa")


def test_the_visit_count_is_the_compiled_loops_counted_each_run():
    q, k, v = _qkv("float64", T=40)
    visited = []

    def visit(i, j):
        visited.append((int(i), int(j)))

    attend = jax.jit(
        lambda q, k, v: impl_jax.blockwise_attention(q, k, v, block_size=8, visit=visit)
    )
    jax.block_until_ready(attend(q, k, v))  # trace, compile, run
    jax.effects_barrier()
    assert len(visited) == 5 * 6 // 2  # n = 5 blocks: 15 visits, not 25
    jax.block_until_ready(attend(q, k, v))  # run again: no trace
    jax.effects_barrier()
    assert len(visited) == 2 * 15  # the callbacks ran with the loop, again
    assert sorted(set(visited)) == [(i, j) for i in range(5) for j in range(i + 1)]


def test_blockwise_is_reverse_differentiable_and_matches_the_naive_gradient():
    x, p = random_inputs(1, (), 13, 8)
    weights = [jnp.asarray(p[n]) for n in PARAM_NAMES]

    def loss(x, attention):
        out, *_ = attention(x, *weights, 2)
        return jnp.sum(out**2)

    def blockwise(x, *weights_and_heads):
        return impl_jax.multi_head_blockwise_attention(
            x, *weights_and_heads, block_size=4
        )

    # jitted: differentiating traces the loops either way, and one compile of
    # the whole gradient is cheaper than eager JAX's one per operation
    def gradient(attention):
        return jax.jit(jax.grad(lambda x: loss(x, attention)))(jnp.asarray(x))

    grad_blockwise = gradient(blockwise)
    grad_naive = gradient(impl_jax.multi_head_attention)
    assert_close(grad_blockwise, grad_naive, "float64", "d loss / d x")


def test_the_decode_step_eager_and_jitted_equals_the_full_pass(dtype):
    # (tests/test_kv_cache.py decodes with the jitted step)
    g, H = golden("batched"), PRESETS["batched"].n_heads
    *batch, T, C = g["x"].shape
    x = jnp.asarray(g["x"], dtype)
    weights = [jnp.asarray(g[n], dtype) for n in PARAM_NAMES]
    traces = []

    def counted_step(x_t, cache, *weights):
        traces.append(1)  # runs only when jax traces the function
        return impl_jax.decode_step(x_t, cache, *weights, H)

    step = jax.jit(counted_step, donate_argnames="cache")
    ours = impl_jax.init_kv_cache(tuple(batch), T + 2, C, H, dtype)
    exported = impl_jax.init_kv_cache(tuple(batch), T + 2, C, H, dtype)
    eager = impl_jax.init_kv_cache(tuple(batch), T + 2, C, H, dtype)
    outs, exported_outs, eager_outs = [], [], []
    for t in range(T):
        out_t, ours = step(x[..., t, :], ours, *weights)
        outs.append(np.asarray(out_t))
        out_t, exported = impl_jax.decode_step_jit(x[..., t, :], exported, *weights, H)
        exported_outs.append(np.asarray(out_t))
        out_t, eager = impl_jax.decode_step(x[..., t, :], eager, *weights, H)
        eager_outs.append(np.asarray(out_t))
    assert len(traces) == 1  # one shape for the whole decode: one compile
    full, _ = run_multi(impl_jax, g["x"], g, H, dtype)
    decodes = (
        (outs, "jax.jit"),
        (exported_outs, "decode_step_jit"),
        (eager_outs, "eager"),
    )
    for decoded, what in decodes:
        decoded = np.stack(decoded, axis=-2)
        assert decoded.dtype == np.dtype(dtype)
        assert_close(decoded, full, dtype, f"{what} decode vs the full pass")
        assert_close(decoded, g["multi_out"], dtype, f"{what} decode vs the oracle")


def test_the_jitted_decode_step_donates_the_cache_it_is_given():
    g = golden("tiny")
    weights = [jnp.asarray(g[n]) for n in PARAM_NAMES]
    cache = impl_jax.init_kv_cache((), 8, 32, 4, "float64")
    _, new_cache = impl_jax.decode_step_jit(jnp.asarray(g["x"][0]), cache, *weights, 4)
    assert cache.k.is_deleted() and cache.v.is_deleted()
    assert int(new_cache.length) == 1


def test_eager_decode_step_leaves_the_given_cache_as_it_was():
    g = golden("tiny")
    weights = [jnp.asarray(g[n]) for n in PARAM_NAMES]
    cache = impl_jax.init_kv_cache((), 8, 32, 4, "float64")
    _, new_cache = impl_jax.decode_step(jnp.asarray(g["x"][0]), cache, *weights, 4)
    assert not np.asarray(cache.k).any() and np.asarray(new_cache.k).any()


def test_module_decode_step_under_nnx_jit_equals_the_forward(dtype):
    g, H = golden("batched"), PRESETS["batched"].n_heads
    *batch, T, _ = g["x"].shape
    module = impl_jax.CausalSelfAttention.from_weights(
        *(g[n].astype(dtype) for n in PARAM_NAMES), H
    )
    x = jnp.asarray(g["x"], dtype)
    full, _ = module(x)

    @nnx.jit
    def step(module, x_t, cache):
        return module.decode_step(x_t, cache)

    cache = module.init_cache(tuple(batch), T)
    outs = []
    for t in range(T):
        out_t, cache = step(module, x[..., t, :], cache)
        outs.append(np.asarray(out_t))
    assert_close(np.stack(outs, axis=-2), np.asarray(full), dtype, "nnx.jit decode")


def test_decoding_past_max_len_drops_the_write_and_does_not_raise():
    """What the module docstring warns of: JAX drops an out-of-bounds update."""
    g = golden("tiny")
    weights = [jnp.asarray(g[n]) for n in PARAM_NAMES]
    cache = impl_jax.init_kv_cache((), 2, 32, 4, "float64")
    for t in range(2):
        _, cache = impl_jax.decode_step(jnp.asarray(g["x"][t]), cache, *weights, 4)
    full_k = np.asarray(cache.k)
    _, cache = impl_jax.decode_step(jnp.asarray(g["x"][2]), cache, *weights, 4)
    assert int(cache.length) == 3
    np.testing.assert_array_equal(np.asarray(cache.k), full_k)


def test_the_jitted_blockwise_and_decode_take_every_option_away_from_their_default():
    """blockwise_attention_jit (block_size, causal=False, scale=False, visit),
    multi_head_blockwise_attention_jit (those and every bias) and
    decode_step_jit (scale=False and every bias), float64, against the oracle
    (tests/test_options.py registers them)."""
    from helpers import PARAM_NAMES as NAMES
    from helpers import logsumexp_rows, options_problem

    from shared.reference import reference_multi_head, reference_single_head

    case = options_problem()
    x, p = random_inputs(42, (2,), 6, 8, D=4)
    q, k, v = (x @ p[n] for n in ("w_q", "w_k", "w_v"))
    visited = []
    out, lse = impl_jax.blockwise_attention_jit(
        *(jnp.asarray(a) for a in (q, k, v)), block_size=4, causal=False,
        scale=False, visit=lambda i, j: visited.append((int(i), int(j))),
    )  # fmt: skip
    expected, _ = reference_single_head(
        x, p["w_q"], p["w_k"], p["w_v"], causal=False, scale=False
    )
    assert_close(np.asarray(out), expected, "float64", "blockwise out")
    everywhere = np.ones((6, 6), dtype=bool)
    lse_expected = logsumexp_rows(q, k, everywhere, scale=False)
    assert_close(np.asarray(lse), lse_expected, "float64", "blockwise lse")
    assert sorted(visited) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    weights = [jnp.asarray(case.params[n]) for n in NAMES]
    b = {n: jnp.asarray(a) for n, a in case.biases.items()}
    out, _ = impl_jax.multi_head_blockwise_attention_jit(
        jnp.asarray(case.x), *weights, case.H, block_size=4, causal=False,
        scale=False, biases=dict(b_q=b["b_q"], b_k=b["b_k"], b_v=b["b_v"], b_o=b["b_o"])
    )  # fmt: skip
    expected, _ = reference_multi_head(
        case.x, *case.params.values(), case.H, causal=False, scale=False,
        biases=case.biases
    )  # fmt: skip
    assert_close(np.asarray(out), expected, "float64", "multi-head blockwise out")
    cache = impl_jax.init_kv_cache((2,), 6, 8, case.H, "float64")
    decoded = []
    for t in range(6):
        out_t, cache = impl_jax.decode_step_jit(
            jnp.asarray(case.x[..., t, :]), cache, *weights, case.H, scale=False,
            biases=dict(b_q=b["b_q"], b_k=b["b_k"], b_v=b["b_v"], b_o=b["b_o"])
        )  # fmt: skip
        decoded.append(np.asarray(out_t))
    expected, _ = reference_multi_head(
        case.x, *case.params.values(), case.H, scale=False, biases=case.biases
    )
    assert_close(np.stack(decoded, axis=-2), expected, "float64", "decode_step_jit")


@pytest.mark.parametrize(("cores", "block"), [(1, 256), (2, 512), (64, 512)])
def test_the_tuned_block_follows_the_cores_xla_may_use(monkeypatch, cores, block):
    # XLA sizes its thread pool from the process's affinity: 256 on one core,
    # 512 on more (shared/blocks.py, docs/bench.md), never longer than T
    monkeypatch.setattr(blocks, "schedulable_cores", lambda: cores)
    assert tuned.block_size_for(8192) == block
    assert tuned.block_size_for(100) == 100
