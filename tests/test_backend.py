"""The contract of docs/contract.md, checked once per backend (parametrized by `backend`)
in float64 and float32 (`dtype`), against the float64 oracle."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from helpers import (
    PARAM_NAMES,
    ShapeOnly,
    golden,
    name_of,
    random_inputs,
    run_entropy,
    run_multi,
    run_single,
)

from shared import PRESETS, assert_close
from shared.protocol import Backend
from shared.reference import (
    reference_entropy,
    reference_multi_head,
    reference_single_head,
)


def _protocol_members():
    """Backend's names: its methods (parameters without self) and its classes."""
    methods = {
        name: [p for p in inspect.signature(member).parameters.values()][1:]
        for name, member in vars(Backend).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }
    return methods, [name for name in Backend.__annotations__ if name[0].isupper()]


def test_keeps_the_backend_protocol(backend):
    methods, classes = _protocol_members()
    assert isinstance(backend, Backend)
    assert set(methods) <= set(backend.__all__)
    for name in classes:
        assert isinstance(getattr(backend, name), type), name
    for name, expected in methods.items():
        given = inspect.signature(getattr(backend, name)).parameters.values()
        names = {p.name for p in expected}
        assert [p for p in given if p.name in names] == expected, name
        extras = [p for p in given if p.name not in names]
        assert all(  # a framework may add keyword-only extras (torch: device=)
            p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in extras
        ), name


def test_causal_mask_is_true_on_and_below_the_diagonal(backend):
    mask = backend.to_numpy(backend.causal_mask(5))
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(mask, np.tril(np.ones((5, 5), dtype=bool)))


@pytest.mark.parametrize("preset", PRESETS)
def test_single_head_equals_the_golden_oracle(backend, dtype, preset):
    g = golden(preset)
    out, weights = run_single(backend, g["x"], g["w_q"], g["w_k"], g["w_v"], dtype)
    assert out.dtype == weights.dtype == np.dtype(dtype)
    assert_close(weights, g["single_weights"], dtype, "single-head weights")
    assert_close(out, g["single_out"], dtype, "single-head out")
    entropy = run_entropy(backend, weights, dtype)
    assert_close(entropy, g["single_entropy"], dtype, "single-head entropy")


@pytest.mark.parametrize("preset", PRESETS)
def test_multi_head_equals_the_golden_oracle(backend, dtype, preset):
    g = golden(preset)
    out, weights = run_multi(backend, g["x"], g, PRESETS[preset].n_heads, dtype)
    assert out.dtype == weights.dtype == np.dtype(dtype)
    assert_close(weights, g["multi_weights"], dtype, "multi-head weights")
    assert_close(out, g["multi_out"], dtype, "multi-head out")
    entropy = run_entropy(backend, weights, dtype)
    assert_close(entropy, g["multi_entropy"], dtype, "multi-head entropy")


@pytest.mark.parametrize("preset", PRESETS)
def test_the_seed_labs_invariants(backend, dtype, preset):
    """Every weight row sums to 1; every weight above the diagonal is exactly 0."""
    g = golden(preset)
    _, weights = run_multi(backend, g["x"], g, PRESETS[preset].n_heads, dtype)
    assert_close(weights.sum(axis=-1), np.ones(weights.shape[:-1]), dtype, "row sums")
    T = weights.shape[-1]
    above = ~np.tril(np.ones((T, T), dtype=bool))
    assert np.all(weights[..., above] == 0.0)


@pytest.mark.parametrize("i", [0, 3, 6])
def test_changing_the_future_leaves_the_past_bit_for_bit(backend, dtype, i):
    g = golden("tiny")
    x = g["x"].copy()
    out, weights = run_multi(backend, x, g, 4, dtype)
    rng = np.random.default_rng(i)
    x[i + 1 :] = 100 * rng.standard_normal(x[i + 1 :].shape)
    out2, weights2 = run_multi(backend, x, g, 4, dtype)
    np.testing.assert_array_equal(out2[: i + 1], out[: i + 1])
    np.testing.assert_array_equal(weights2[:, : i + 1], weights[:, : i + 1])
    assert not np.array_equal(out2[i + 1 :], out[i + 1 :])


def test_one_head_with_identity_output_is_single_head(backend, dtype):
    # Eager, operation for operation the same arithmetic: jitted, XLA compiles
    # the two as programs of their own, and on an AVX2 CPU it fused the single
    # head's otherwise (12 of 98 float32 weights one ulp apart; docs/suite.md).
    x, p = random_inputs(5, (2,), 7, 8)
    p["w_o"] = np.eye(8)
    out, weights = run_multi(backend, x, p, 1, dtype, jit=False)
    single_out, single_weights = run_single(
        backend, x, p["w_q"], p["w_k"], p["w_v"], dtype, jit=False
    )
    np.testing.assert_array_equal(weights[:, 0], single_weights)
    np.testing.assert_array_equal(out, single_out)


def test_multi_head_is_single_heads_on_column_slices_then_w_o(backend, dtype):
    g = golden("batched")
    H, D = 4, 8
    out, weights = run_multi(backend, g["x"], g, H, dtype)
    heads = []
    for h in range(H):
        cols = slice(h * D, (h + 1) * D)
        o, w = run_single(
            backend,
            g["x"],
            g["w_q"][:, cols],
            g["w_k"][:, cols],
            g["w_v"][:, cols],
            dtype,
        )
        assert_close(w, weights[..., h, :, :], dtype, f"head {h} weights")
        heads.append(o.astype(np.float64))
    assert_close(np.concatenate(heads, axis=-1) @ g["w_o"], out, dtype, "merged heads")


def test_module_form_equals_functional_form(backend, dtype):
    g = golden("batched")
    module = backend.CausalSelfAttention.from_weights(
        *(g[k].astype(dtype) for k in PARAM_NAMES), 4
    )
    out, weights = module(backend.from_numpy(g["x"], dtype))
    out, weights = backend.to_numpy(out), backend.to_numpy(weights)
    f_out, f_weights = run_multi(backend, g["x"], g, 4, dtype, jit=False)  # as eager
    assert_close(weights, f_weights, dtype, "module weights")
    assert_close(out, f_out, dtype, "module out")
    if name_of(backend) != "torch":
        # The same arithmetic: every module calls its backend's function. torch's
        # hands it weight.T, a transposed view of nn.Linear's (out, in) weight,
        # which BLAS multiplies in another order: torch agrees to rounding.
        np.testing.assert_array_equal(out, f_out)
        np.testing.assert_array_equal(weights, f_weights)


def test_module_form_passes_its_mask_and_scale_on(backend, dtype):
    # from_weights(..., scale=False), a call with a mask, and decoding, each
    # equal to the functional form given the same mask and scale
    g, H = golden("batched"), 4
    *batch, T, _ = g["x"].shape
    module = backend.CausalSelfAttention.from_weights(
        *(g[k].astype(dtype) for k in PARAM_NAMES), H, scale=False
    )
    keep = np.random.default_rng(7).random((*batch, 1, T, T)) < 0.7  # per item
    x = backend.from_numpy(g["x"], dtype)
    out, weights = module(x, backend.from_numpy(keep))
    f_out, f_weights = run_multi(backend, g["x"], g, H, dtype, keep, scale=False)
    assert_close(backend.to_numpy(weights), f_weights, dtype, "module, masked")
    assert_close(backend.to_numpy(out), f_out, dtype, "module out, masked")
    cache = module.init_cache(tuple(batch), T)
    decoded = []
    for t in range(T):
        out_t, cache = module.decode_step(x[..., t, :], cache)
        decoded.append(backend.to_numpy(out_t))
    f_out, _ = run_multi(backend, g["x"], g, H, dtype, scale=False)
    assert_close(np.stack(decoded, axis=-2), f_out, dtype, "module decoding")


def test_given_mask_combines_with_causal(backend, dtype):
    x, p = random_inputs(6, (2,), 6, 8)
    rng = np.random.default_rng(6)
    mask = rng.random((2, 1, 6, 6)) < 0.6  # per batch item, shared by the heads
    mask[..., 0] = True  # every row keeps key 0
    out, weights = run_multi(backend, x, p, 2, dtype, mask)
    ref_out, ref_weights = reference_multi_head(x, *p.values(), 2, mask)
    assert_close(weights, ref_weights, dtype, "masked weights")
    assert_close(out, ref_out, dtype, "masked out")
    assert np.all(weights[np.broadcast_to(~mask, weights.shape)] == 0.0)


def test_a_row_with_nothing_to_attend_to_is_zero_not_nan(backend, dtype):
    x, p = random_inputs(7, (), 5, 4)
    mask = np.ones((5, 5), dtype=bool)
    mask[3] = False
    out, weights = run_single(backend, x, p["w_q"], p["w_k"], p["w_v"], dtype, mask)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(weights))
    assert np.all(weights[3] == 0.0) and np.all(out[3] == 0.0)
    assert run_entropy(backend, weights, dtype)[3] == 0.0


def test_scale_false_skips_the_division(backend, dtype):
    x, p = random_inputs(8, (), 6, 8, D=4)
    out, weights = run_single(
        backend, x, p["w_q"], p["w_k"], p["w_v"], dtype, scale=False
    )
    ref_out, ref_weights = reference_single_head(
        x, p["w_q"], p["w_k"], p["w_v"], scale=False
    )
    assert_close(weights, ref_weights, dtype, "unscaled weights")
    assert_close(out, ref_out, dtype, "unscaled out")


def test_entropy_of_uniform_causal_rows_is_log_i_plus_1(backend, dtype):
    T = 9
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    assert_close(
        run_entropy(backend, uniform, dtype), np.log(np.arange(1, T + 1)), dtype
    )


def test_entropy_of_one_hot_rows_and_of_row_0_is_zero(backend, dtype):
    one_hot = np.eye(6)[[0, 0, 2, 1, 4, 3]]
    entropy = run_entropy(backend, one_hot, dtype)
    assert np.all(entropy == 0.0) and not np.any(np.signbit(entropy))  # 0., not -0.
    empty = run_entropy(backend, np.zeros((2, 4)), dtype)  # a row with no weight
    assert np.all(empty == 0.0) and not np.any(np.signbit(empty))
    _, weights = run_multi(backend, golden("full")["x"], golden("full"), 8, dtype)
    assert np.all(run_entropy(backend, weights, dtype)[..., 0] == 0.0)


def test_entropy_of_a_single_row_of_rank_1_is_a_scalar(backend, dtype):
    entropy = run_entropy(backend, np.full(4, 0.25), dtype)  # (T,) -> ()
    assert entropy.shape == ()
    assert_close(entropy, np.log(4.0), dtype, "entropy of one uniform row")


def test_entropy_is_between_zero_and_the_causal_maximum(backend, dtype):
    g = golden("long")
    _, weights = run_multi(backend, g["x"], g, 4, dtype)
    entropy = run_entropy(backend, weights, dtype)
    T = weights.shape[-1]
    assert np.all(entropy >= 0)
    assert np.all(entropy <= np.log(np.arange(1, T + 1)) + 1e-6)
    assert_close(entropy, reference_entropy(weights), dtype)


# Bad input: every case, in every backend, is the matrix of tests/test_numerics.py
# (docs/bad-input.md). Here: the checks come before any compute.


def test_errors_come_before_any_compute(backend):
    x, w, w_o = ShapeOnly((2, 5, 8)), ShapeOnly((8, 8)), ShapeOnly((8, 8))
    with pytest.raises(ValueError, match="n_heads=3 does not divide d_model=8"):
        backend.multi_head_attention(x, w, w, w, w_o, 3)
    with pytest.raises(ValueError, match="mask of shape"):
        backend.single_head_attention(x, w, w, w, ShapeOnly((3, 3), "bool"))


# Every option away from its default (tests/test_options.py registers them):
# each keyword of the functions and the module at once, float64, against the
# oracle; a keyword dropped or swapped for another changes the numbers.


def _options(backend):
    """options_problem (tests/helpers.py) as the backend's float64 arrays."""
    from helpers import options_problem

    case = options_problem()
    cast = {
        name: backend.from_numpy(a, "float64")
        for name, a in {"x": case.x, **case.params, **case.biases}.items()
    }
    return case, cast, backend.from_numpy(case.mask)


def test_single_head_takes_every_option_away_from_its_default(backend):
    case, cast, _ = _options(backend)
    D = 4  # the first 4 columns of each weight and bias: one head of C = 8
    w = {n: case.params[n][:, :D] for n in ("w_q", "w_k", "w_v")}
    b = {n: case.biases[n][:D] for n in ("b_q", "b_k", "b_v")}
    mask = case.mask[:, 0]  # (2, T, T)
    out, weights = backend.single_head_attention(
        cast["x"],
        *(backend.from_numpy(a) for a in w.values()),
        backend.from_numpy(mask),
        scale=False,
        biases=dict(
            b_q=backend.from_numpy(b["b_q"]),
            b_k=backend.from_numpy(b["b_k"]),
            b_v=backend.from_numpy(b["b_v"]),
        ),
    )
    expected = reference_single_head(case.x, *w.values(), mask, scale=False, biases=b)
    assert_close(backend.to_numpy(out), expected[0], "float64", "out")
    assert_close(backend.to_numpy(weights), expected[1], "float64", "weights")


def test_multi_head_takes_every_option_away_from_its_default(backend):
    case, cast, mask = _options(backend)
    out, weights = backend.multi_head_attention(
        cast["x"],
        *(cast[n] for n in PARAM_NAMES),
        case.H,
        mask,
        scale=False,
        biases=dict(b_q=cast["b_q"], b_k=cast["b_k"], b_v=cast["b_v"], b_o=cast["b_o"]),
    )
    expected = reference_multi_head(
        case.x,
        *case.params.values(),
        case.H,
        case.mask,
        scale=False,
        biases=case.biases,
    )
    assert_close(backend.to_numpy(out), expected[0], "float64", "out")
    assert_close(backend.to_numpy(weights), expected[1], "float64", "weights")


def test_from_numpy_casts_to_the_dtype_asked(backend):
    a = np.random.default_rng(41).standard_normal((3, 4))
    for dtype in ("float32", "float16", "float64"):
        found = backend.to_numpy(backend.from_numpy(a, dtype=dtype))
        assert found.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(found, a.astype(dtype))
    assert backend.to_numpy(backend.from_numpy(a)).dtype == np.float64  # as given


def test_from_numpy_shares_no_memory_with_the_array_given(backend):
    """Changing the NumPy array afterwards leaves the backend's array as it
    was (jax.device_put of a NumPy array may alias it on the CPU: 4,096
    float64 did)."""
    for dtype in (None, "float64"):
        a = np.zeros(4096)
        found = backend.from_numpy(a, dtype=dtype)
        a[:] = 1.0
        assert not backend.to_numpy(found).any()


def test_the_module_takes_every_option_away_from_its_default(backend):
    """from_weights(scale=False, b_q=..., b_o=...), called with a mask, and
    decoding (which takes scale and the biases from the module)."""
    case, cast, mask = _options(backend)
    module = backend.CausalSelfAttention.from_weights(
        *case.params.values(),
        case.H,
        scale=False,
        biases=dict(
            b_q=case.biases["b_q"],
            b_k=case.biases["b_k"],
            b_v=case.biases["b_v"],
            b_o=case.biases["b_o"],
        ),
    )
    out, weights = module(cast["x"], mask)
    expected = reference_multi_head(
        case.x,
        *case.params.values(),
        case.H,
        case.mask,
        scale=False,
        biases=case.biases,
    )
    assert_close(backend.to_numpy(out), expected[0], "float64", "module out")
    assert_close(backend.to_numpy(weights), expected[1], "float64", "module weights")
    cache = module.init_cache((2,), 6)
    decoded = []
    for t in range(6):
        out_t, cache = module.decode_step(cast["x"][..., t, :], cache)
        decoded.append(backend.to_numpy(out_t))
    unmasked, _ = reference_multi_head(
        case.x, *case.params.values(), case.H, scale=False, biases=case.biases
    )
    assert_close(np.stack(decoded, axis=-2), unmasked, "float64", "module decoding")
