"""Decoding with a KV cache (impl_*/kv_cache.py), once per backend: token by token
it equals the full causal pass of the same backend and the float64 oracle
(float64 within 1e-12, float32, float16 and bfloat16 within the table, with the
output in the input's dtype), in the functional and the module form; the cache
holds the keys and values of the full pass; NaN in the slots not yet filled
never reaches the output, and a NaN or Inf token makes its own and every later
output NaN; bad input raises the same message in every backend."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import (
    PARAM_NAMES,
    PARTIAL_POISONS,
    PARTIAL_RESTS,
    golden,
    hostile_expected,
    hostile_inputs,
    jitted,
    partly_non_finite_row,
    projected,
    run_multi,
    very_negative_scores,
)

import impl_numpy
from shared import PRESETS, TOLERANCES, assert_close
from shared.dtypes import np_dtype
from shared.hostile import HOSTILE_SCORES, with_partly_infinite_value
from shared.reference import reference_multi_head

PRECISIONS = tuple(TOLERANCES)  # float64, float32, float16, bfloat16


def _decode(
    backend, x, params, n_heads, dtype, max_len, fill=None, scale=True, jit=True
):
    """Decode x (..., T, C) one position at a time; NumPy (out (..., T, C), cache).

    `fill`: a value to fill the new cache's k and v with instead of zeros (the
    garbage of a cache allocated without clearing it). `jit`: JAX's jitted
    step, one compile per run, where eager compiles each operation of every
    new shape (docs/suite.md, CI time); tests/test_jax_blockwise.py holds the
    eager step equal to it.
    """
    step = jitted(backend, "decode_step") if jit else backend.decode_step
    *batch, T, C = x.shape
    x_b = backend.from_numpy(x, dtype)
    weights = [backend.from_numpy(params[n], dtype) for n in PARAM_NAMES]
    cache = backend.init_kv_cache(tuple(batch), max_len, C, n_heads, dtype)
    if fill is not None:
        garbage = np.full(backend.to_numpy(cache.k).shape, fill)
        cache = cache._replace(
            k=backend.from_numpy(garbage, dtype), v=backend.from_numpy(garbage, dtype)
        )
    outs = []
    for t in range(T):
        out_t, cache = step(x_b[..., t, :], cache, *weights, n_heads, scale=scale)
        outs.append(backend.to_numpy(out_t))
    return np.stack(outs, axis=-2), cache


# float64 and float32 on every preset; float16 and bfloat16 on the two short ones
DECODE_RUNS = [
    *(
        (preset, precision)
        for precision in ("float64", "float32")
        for preset in ("tiny", "batched", "long")
    ),
    *(
        (preset, precision)
        for precision in ("float16", "bfloat16")
        for preset in ("tiny", "batched")
    ),
]


@pytest.mark.parametrize(
    ("preset", "precision"), DECODE_RUNS, ids=[f"{d}-{p}" for p, d in DECODE_RUNS]
)
def test_decoding_token_by_token_equals_the_full_causal_pass(
    backend, preset, precision
):
    g, H = golden(preset), PRESETS[preset].n_heads
    T = g["x"].shape[-2]
    decoded, cache = _decode(backend, g["x"], g, H, precision, max_len=T + 3)
    assert decoded.dtype == np_dtype(precision)  # the projections round to it
    full, _ = run_multi(backend, g["x"], g, H, precision)
    what = f"{precision} on {preset}"
    assert_close(decoded, full, precision, f"decoded vs the full pass, {what}")
    assert_close(decoded, g["multi_out"], precision, f"decoded vs the oracle, {what}")
    assert int(backend.to_numpy(cache.length)) == T


def test_decoding_with_scale_false_equals_the_full_pass_with_scale_false(
    backend, dtype
):
    g, H = golden("tiny"), PRESETS["tiny"].n_heads
    # max_len T + 3, any length would do: scaled, JAX's step of the decoding test
    max_len = g["x"].shape[-2] + 3
    decoded, _ = _decode(backend, g["x"], g, H, dtype, max_len=max_len, scale=False)
    full, _ = run_multi(backend, g["x"], g, H, dtype, scale=False)
    assert_close(decoded, full, dtype, "decoded, scale=False")
    scaled, _ = _decode(backend, g["x"], g, H, dtype, max_len=max_len)
    assert not np.allclose(decoded, scaled)  # the premise: scale matters here


def test_nan_in_the_slots_not_yet_filled_never_reaches_the_output(backend, dtype):
    g, H = golden("batched"), PRESETS["batched"].n_heads
    T = g["x"].shape[-2]
    clean, _ = _decode(backend, g["x"], g, H, dtype, max_len=T + 3)
    decoded, cache = _decode(backend, g["x"], g, H, dtype, max_len=T + 3, fill=math.nan)
    np.testing.assert_array_equal(decoded, clean)
    for part in (cache.k, cache.v):  # the NaN really was there, and still is
        assert np.all(np.isnan(backend.to_numpy(part)[..., T:, :]))


@pytest.mark.parametrize("poison", [math.nan, math.inf], ids=str)
def test_a_non_finite_token_makes_its_own_and_every_later_output_nan(
    backend, dtype, poison
):
    g, H = golden("batched"), PRESETS["batched"].n_heads
    T = g["x"].shape[-2]
    # max_len T + 3, any length would do: JAX's step of the decoding test above
    clean, _ = _decode(backend, g["x"], g, H, dtype, max_len=T + 3)
    x = g["x"].copy()
    x[..., 3, :] = poison
    with np.errstate(invalid="ignore"):  # NumPy warns on inf - inf
        decoded, _ = _decode(backend, x, g, H, dtype, max_len=T + 3)
    np.testing.assert_array_equal(decoded[..., :3, :], clean[..., :3, :])
    assert np.all(np.isnan(decoded[..., 3:, :]))  # every later token attends it


@pytest.mark.parametrize("rest", PARTIAL_RESTS)
@pytest.mark.parametrize("poison", PARTIAL_POISONS)
def test_partly_non_finite_garbage_in_the_slots_not_yet_filled_never_reaches_the_output(
    backend, dtype, poison, rest
):
    # The garbage of each slot is one non-finite entry and finite ones, such as
    # [NaN, 1e307, ...]: a check that asked whether any entry is finite would
    # keep it, and the weight 0 of a slot not yet filled would make 0 * NaN.
    g, H = golden("batched"), PRESETS["batched"].n_heads
    T, D = g["x"].shape[-2], g["x"].shape[-1] // H
    clean, _ = _decode(backend, g["x"], g, H, dtype, max_len=T + 3)
    garbage = partly_non_finite_row(D, poison, rest, dtype)  # (D,), every slot
    decoded, cache = _decode(backend, g["x"], g, H, dtype, max_len=T + 3, fill=garbage)
    np.testing.assert_array_equal(decoded, clean)
    for part in (cache.k, cache.v):  # the garbage really was there, and still is
        part = backend.to_numpy(part)[..., T:, :]  # (2, 3, H, 3, D)
        np.testing.assert_array_equal(part, np.broadcast_to(garbage, part.shape))


@pytest.mark.parametrize("rest", PARTIAL_RESTS)
@pytest.mark.parametrize("poison", ["inf", "-inf"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_partly_infinite_token_makes_its_own_and_every_later_output_nan(
    backend, precision, poison, rest
):
    g, H = golden("batched"), PRESETS["batched"].n_heads
    x, p = with_partly_infinite_value(g["x"], g, 3, poison, rest, precision)
    v_3 = projected(x, p["w_v"], precision)[..., 3, :]  # (2, 3, C)
    assert np.all(np.isinf(v_3[..., 0])) and np.all(np.isfinite(v_3[..., 1:]))
    T = x.shape[-2]
    # max_len T + 3, any length would do: JAX's step of the decoding test above
    clean, _ = _decode(backend, g["x"], p, H, precision, max_len=T + 3)
    with np.errstate(over="ignore"):  # NumPy: 4 s overflows the cast to half
        decoded, _ = _decode(backend, x, p, H, precision, max_len=T + 3)
    np.testing.assert_array_equal(decoded[..., :3, :], clean[..., :3, :])
    assert np.all(np.isnan(decoded[..., 3:, :].astype(np.float64)))


# Hostile magnitudes, as for the full pass (tests/test_numerics.py).


@pytest.mark.parametrize("preset", ["tiny", "batched"])
@pytest.mark.parametrize("precision", list(HOSTILE_SCORES))
def test_hostile_magnitudes_decode_without_overflow(backend, precision, preset):
    x, params = hostile_inputs(preset, precision)  # scores up to 1e4, 6e4, 1e37
    H, T = PRESETS[preset].n_heads, x.shape[-2]
    # NumPy's warnings are errors in this suite: an overflow anywhere fails here.
    # Eager, as the full pass below.
    decoded, _ = _decode(backend, x, params, H, precision, max_len=T, jit=False)
    decoded = decoded.astype(np.float64)
    assert np.all(np.isfinite(decoded))
    ref_out, _, tolerance, _ = hostile_expected(preset, precision)
    assert_close(decoded, ref_out, tolerance, f"hostile decoding {precision}")
    # the full pass eager: jitted, bfloat16's hostile scores are its known
    # limit (docs/contract.md)
    full, _ = run_multi(backend, x, params, H, precision, jit=False)
    assert_close(decoded, full, tolerance, f"hostile decoding {precision} vs full")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_score_below_minus_2000_decodes_as_the_full_pass(backend, precision):
    x, p = very_negative_scores(25, (2,), 9, 2)  # x (2, 9, 8), H = 2
    decoded, _ = _decode(backend, x, p, 2, precision, max_len=9)
    expected, _ = reference_multi_head(x, *(p[n] for n in PARAM_NAMES), 2)
    assert_close(decoded, expected, precision, "decoded, scores below -2000")
    full, _ = run_multi(backend, x, p, 2, precision)
    assert_close(decoded, full, precision, "decoded vs the full pass, below -2000")


def test_the_cache_holds_the_keys_and_values_of_the_full_pass(backend, dtype):
    g, H = golden("batched"), PRESETS["batched"].n_heads
    *batch, T, C = g["x"].shape
    # three slots past T (JAX's step of the decoding test above)
    _, cache = _decode(backend, g["x"], g, H, dtype, max_len=T + 3)
    for name, cached in (("w_k", cache.k), ("w_v", cache.v)):
        cached = backend.to_numpy(cached)
        assert cached.shape == (*batch, H, T + 3, C // H)
        expected = g["x"] @ g[name]  # (..., T, C)
        expected = expected.reshape(*batch, T, H, C // H).swapaxes(-3, -2)
        assert_close(cached[..., :T, :], expected, dtype, f"cached {name}")
        assert not cached[..., T:, :].any()  # the positions not decoded stay zeros


def test_module_decode_step_equals_the_module_forward(backend, dtype):
    g, H = golden("batched"), PRESETS["batched"].n_heads
    *batch, T, _ = g["x"].shape
    module = backend.CausalSelfAttention.from_weights(
        *(g[n].astype(dtype) for n in PARAM_NAMES), H
    )
    x = backend.from_numpy(g["x"], dtype)
    full, _ = module(x)
    cache = module.init_cache(tuple(batch), T)
    outs = []
    for t in range(T):
        out_t, cache = module.decode_step(x[..., t, :], cache)
        outs.append(backend.to_numpy(out_t))
    decoded = np.stack(outs, axis=-2)
    assert decoded.dtype == np.dtype(dtype)
    assert_close(decoded, backend.to_numpy(full), dtype, "module decode vs forward")
    assert_close(decoded, g["multi_out"], dtype, "module decode vs the oracle")


def test_init_kv_cache_is_empty(backend, dtype):
    cache = backend.init_kv_cache((2, 3), 10, 32, 4, dtype)
    assert isinstance(cache, backend.KVCache)
    for part in (cache.k, cache.v):
        part = backend.to_numpy(part)
        assert part.shape == (2, 3, 4, 10, 8)
        assert part.dtype == np.dtype(dtype)
        assert not part.any()
    length = backend.to_numpy(cache.length)
    assert length.shape == () and length.dtype == np.int64 and int(length) == 0


def test_init_kv_cache_takes_a_batch_axis_of_size_0(backend):
    cache = backend.init_kv_cache((0, 2), 4, 8, 2)
    assert tuple(cache.k.shape) == tuple(cache.v.shape) == (0, 2, 2, 4, 4)


def test_decode_step_returns_a_new_cache_and_keeps_the_given_length(backend):
    g = golden("tiny")
    x = backend.from_numpy(g["x"])
    weights = [backend.from_numpy(g[n]) for n in PARAM_NAMES]
    cache = backend.init_kv_cache((), 8, 32, 4, "float64")
    _, new_cache = backend.decode_step(x[0], cache, *weights, 4)
    assert int(backend.to_numpy(cache.length)) == 0
    assert int(backend.to_numpy(new_cache.length)) == 1


def _arrays(backend, dtype="float64", C=8, H=2, batch=(), max_len=4):
    rng = np.random.default_rng(0)
    x_t = backend.from_numpy(rng.standard_normal((*batch, C)), dtype)
    weights = [backend.from_numpy(rng.standard_normal((C, C)), dtype) for _ in "qkvo"]
    return x_t, weights, backend.init_kv_cache(batch, max_len, C, H, dtype)


BAD_INIT = [
    ((2,), 0, 8, 2, "max_len must be a positive integer, got 0"),
    (
        (2, -1),
        4,
        8,
        2,
        "batch must be a tuple of non-negative ints (the leading axes of x), "
        "got (2, -1)",
    ),
    (
        (True,),
        4,
        8,
        2,
        "batch must be a tuple of non-negative ints (the leading axes of x), "
        "got (True,)",
    ),
    (
        (2.0,),
        4,
        8,
        2,
        "batch must be a tuple of non-negative ints (the leading axes of x), "
        "got (2.0,)",
    ),
    ((2,), 4, 8, 3, "n_heads=3 does not divide d_model=8"),
    (
        [2],
        4,
        8,
        2,
        "batch must be a tuple of non-negative ints (the leading axes of x), got [2]",
    ),
    ((2,), 4, 0, 2, "d_model must be a positive integer, got 0"),
]


@pytest.mark.parametrize(
    ("batch", "max_len", "d_model", "n_heads", "message"),
    BAD_INIT,
    ids=[f"{m[:30]} {batch!r}" for batch, *_, m in BAD_INIT],
)
def test_bad_init_kv_cache_raises_the_same_message(
    backend, batch, max_len, d_model, n_heads, message
):
    with pytest.raises(ValueError) as raised:
        backend.init_kv_cache(batch, max_len, d_model, n_heads)
    assert str(raised.value) == message


def test_bad_decode_step_raises_the_same_message(backend):
    x_t, weights, cache = _arrays(backend)
    cache_32 = backend.init_kv_cache((), 4, 8, 2, "float32")
    lengths = backend.from_numpy(np.zeros(1, dtype=np.int64))  # (1,), not 0-d
    cases = [
        (
            dict(cache=backend.init_kv_cache((3,), 4, 8, 2, "float64")),
            ValueError,
            "cache.k must have shape (..., H, max_len, D) = (2, max_len, 4) for x_t "
            "of shape (8,) and n_heads=2, got (3, 2, 4, 4)",
        ),
        (
            dict(cache=backend.init_kv_cache((), 4, 8, 2, "float32")),
            ValueError,
            "x_t has dtype float64 but cache.k has dtype float32; make the cache in "
            "x_t's dtype",
        ),
        (
            dict(cache=(cache.k, cache.v)),
            TypeError,
            "cache must be a KVCache(k, v, length) of arrays, as init_kv_cache makes, "
            "got tuple",
        ),
        (
            dict(cache=backend.KVCache(cache.k, cache.v, cache.k[0, 0, 0])),
            ValueError,
            "cache.length must be a 0-d integer array (positions filled), got shape "
            "() dtype float64",
        ),
        (
            dict(n_heads=4),
            ValueError,
            "cache.k must have shape (..., H, max_len, D) = (4, max_len, 2) for x_t "
            "of shape (8,) and n_heads=4, got (2, 4, 4)",
        ),
        (
            dict(w_o=weights[3][:4]),
            ValueError,
            "w_o must have shape (C, C) with C = 8 (the last axis of x), got (4, 8)",
        ),
        (
            dict(x_t=backend.from_numpy(np.ones((8,)), "float32")),
            ValueError,
            # (the projections' check is shared with the full pass, which says x)
            "x has dtype float32 but w_q has dtype float64; give x and the weights "
            "one dtype",
        ),
        (
            dict(cache=backend.KVCache(cache.k, cache.v[..., :3], cache.length)),
            ValueError,
            "cache.v has shape (2, 4, 3) but cache.k has (2, 4, 4); they must share "
            "one shape (..., H, max_len, D)",
        ),
        (
            dict(cache=backend.KVCache(cache.k, cache.v, lengths)),
            ValueError,
            "cache.length must be a 0-d integer array (positions filled), got shape "
            "(1,) dtype int64",
        ),
        (
            dict(cache=backend.KVCache(cache.k, cache_32.v, cache.length)),
            ValueError,
            "x_t has dtype float64 but cache.v has dtype float32; make the cache in "
            "x_t's dtype",
        ),
        (
            dict(
                cache=backend.KVCache(cache.k[..., :3], cache.v[..., :3], cache.length)
            ),
            ValueError,
            "cache.k must have shape (..., H, max_len, D) = (2, max_len, 4) for x_t "
            "of shape (8,) and n_heads=2, got (2, 4, 3)",
        ),
        (
            dict(x_t=[1.0] * 8),
            TypeError,
            "x_t must be an array with .shape and .dtype, got list",
        ),
        (
            dict(x_t=backend.from_numpy(np.ones(8, dtype=np.int64))),
            TypeError,
            "x_t must be a floating-point array (float16, bfloat16, float32, "
            "float64), got dtype int64",
        ),
        (
            dict(x_t=backend.from_numpy(np.array(1.0))),
            ValueError,
            "x_t must have shape (..., C) with rank >= 1, got ()",
        ),
        (
            dict(n_heads=3),
            ValueError,
            "n_heads=3 does not divide d_model=8",
        ),
        (
            dict(w_k=weights[1][:, :4]),
            ValueError,
            "w_k has shape (8, 4) but w_q has (8, 8); w_q, w_k and w_v must share "
            "one shape (C, C)",
        ),
        (
            dict(w_v=weights[2][:, :4]),
            ValueError,
            "w_v has shape (8, 4) but w_q has (8, 8); w_q, w_k and w_v must share "
            "one shape (C, C)",
        ),
        (
            dict(w_o=weights[3][:, :4]),
            ValueError,
            "w_o must have shape (C, C) = (8, 8) for multi-head attention, got (8, 4)",
        ),
        (
            dict(cache=backend.KVCache(cache.k, cache.v, SimpleNamespace(shape=()))),
            TypeError,
            "cache must be a KVCache(k, v, length) of arrays, as init_kv_cache makes, "
            "got KVCache",
        ),
        (
            dict(  # the right rank and D, another batch
                x_t=backend.from_numpy(np.ones((2, 8))),
                cache=backend.init_kv_cache((3,), 4, 8, 2, "float64"),
            ),
            ValueError,
            "cache.k must have shape (..., H, max_len, D) = (2, 2, max_len, 4) for "
            "x_t of shape (2, 8) and n_heads=2, got (3, 2, 4, 4)",
        ),
        (
            dict(w_q=weights[0][:, :4], w_k=weights[1][:, :4], w_v=weights[2][:, :4]),
            ValueError,
            "w_q must have shape (C, C) = (8, 8) for multi-head attention, got (8, 4)",
        ),
        (
            dict(b_v=backend.from_numpy(np.zeros(4))),
            ValueError,
            "b_v must have shape (C,) = (8,), got (4,)",
        ),
        (
            dict(b_q=[0.0] * 8),
            TypeError,
            "b_q must be an array with .shape and .dtype, got list",
        ),
    ]
    for change, error, message in cases:
        args = dict(x_t=x_t, cache=cache, n_heads=2)
        args |= dict(zip(("w_q", "w_k", "w_v", "w_o"), weights, strict=True))
        args |= change
        with pytest.raises(error) as raised:
            backend.decode_step(
                args["x_t"],
                args["cache"],
                args["w_q"],
                args["w_k"],
                args["w_v"],
                args["w_o"],
                args["n_heads"],
                biases={n: args[n] for n in ("b_q", "b_k", "b_v", "b_o") if n in args},
            )
        assert str(raised.value) == message


def test_numpy_decoding_past_max_len_raises_index_error():
    x_t, weights, cache = _arrays(impl_numpy, max_len=2)
    for _ in range(2):
        _, cache = impl_numpy.decode_step(x_t, cache, *weights, 2)
    with pytest.raises(IndexError):
        impl_numpy.decode_step(x_t, cache, *weights, 2)


# Every option away from its default (tests/test_options.py registers them).


def test_decoding_takes_every_option_away_from_its_default(backend):
    """init_kv_cache(dtype="float64") and decode_step with scale=False and
    b_q, b_k, b_v, b_o, token by token, against the oracle's full pass."""
    from helpers import options_problem

    case = options_problem()
    cache = backend.init_kv_cache((2,), 7, 8, case.H, dtype="float64")
    assert backend.to_numpy(cache.k).dtype == backend.to_numpy(cache.v).dtype
    assert backend.to_numpy(cache.k).dtype == np.float64
    x = backend.from_numpy(case.x)
    w = [backend.from_numpy(case.params[n]) for n in PARAM_NAMES]
    b = {n: backend.from_numpy(a) for n, a in case.biases.items()}
    outs = []
    for t in range(6):
        out_t, cache = backend.decode_step(
            x[..., t, :], cache, *w, case.H, scale=False,
            biases=dict(b_q=b["b_q"], b_k=b["b_k"], b_v=b["b_v"], b_o=b["b_o"])
        )  # fmt: skip
        outs.append(backend.to_numpy(out_t))
    expected, _ = reference_multi_head(
        case.x, *(case.params[n] for n in PARAM_NAMES), case.H, scale=False,
        biases=case.biases
    )  # fmt: skip
    assert_close(np.stack(outs, axis=-2), expected, "float64", "decoded")
