"""The contract of DESIGN.md, checked once per backend (parametrized by `backend`)
in float64 and float32 (`dtype`), against the float64 oracle."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from helpers import (
    PARAM_NAMES,
    golden,
    name_of,
    random_inputs,
    run_entropy,
    run_multi,
    run_single,
)

import impl_numpy
from shared import PRESETS, assert_close
from shared.reference import (
    reference_entropy,
    reference_multi_head,
    reference_single_head,
)

CONTRACT = (
    "causal_mask",
    "single_head_attention",
    "multi_head_attention",
    "attention_entropy",
)


def test_exports_the_contract_with_numpys_signatures(backend):
    for name in (*CONTRACT, "CausalSelfAttention", "from_numpy", "to_numpy"):
        assert hasattr(backend, name), f"{name_of(backend)} lacks {name}"
    for name in CONTRACT:
        ours = inspect.signature(getattr(impl_numpy, name)).parameters
        theirs = inspect.signature(getattr(backend, name)).parameters
        shared_part = [p for p in theirs.values() if p.name in ours]
        assert shared_part == list(ours.values()), name
        extras = [p for p in theirs.values() if p.name not in ours]
        # a framework may add keyword-only extras (torch: device=)
        assert all(
            p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in extras
        )


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
    x, p = random_inputs(5, (2,), 7, 8)
    p["w_o"] = np.eye(8)
    out, weights = run_multi(backend, x, p, 1, dtype)
    single_out, single_weights = run_single(
        backend, x, p["w_q"], p["w_k"], p["w_v"], dtype
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
    f_out, f_weights = run_multi(backend, g["x"], g, 4, dtype)
    assert_close(weights, f_weights, dtype, "module weights")
    assert_close(out, f_out, dtype, "module out")
    if name_of(backend) != "torch":
        # The same arithmetic: NumPy's module calls the function; nnx.Linear computes
        # x @ kernel like our function. nn.Linear computes x @ weight.T through a
        # different BLAS call (addmm on the transpose), so torch agrees to rounding.
        np.testing.assert_array_equal(out, f_out)
        np.testing.assert_array_equal(weights, f_weights)


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
    assert np.all(run_entropy(backend, one_hot, dtype) == 0.0)
    _, weights = run_multi(backend, golden("full")["x"], golden("full"), 8, dtype)
    assert np.all(run_entropy(backend, weights, dtype)[..., 0] == 0.0)


def test_entropy_is_between_zero_and_the_causal_maximum(backend, dtype):
    g = golden("long")
    _, weights = run_multi(backend, g["x"], g, 4, dtype)
    entropy = run_entropy(backend, weights, dtype)
    T = weights.shape[-1]
    assert np.all(entropy >= 0)
    assert np.all(entropy <= np.log(np.arange(1, T + 1)) + 1e-6)
    assert_close(entropy, reference_entropy(weights), dtype)


# Bad input: the same error type and message text in every backend, before any
# compute. Each case builds NumPy arrays; the backend gets them cast to its own.


def _good(C=8, T=5, D=None):
    x, p = random_inputs(0, (2,), T, C, D)
    return x, p


def _single_args(x=None, w_q=None, w_k=None, w_v=None, mask=None, **_):
    gx, p = _good()
    return (
        gx if x is None else x,
        p["w_q"] if w_q is None else w_q,
        p["w_k"] if w_k is None else w_k,
        p["w_v"] if w_v is None else w_v,
        mask,
    )


SINGLE_HEAD_CASES = {
    "x rank 1": (
        dict(x=np.zeros(8)),
        ValueError,
        "x must have shape (..., T, C) with rank >= 2, got (8,)",
    ),
    "T = 0": (
        dict(x=np.zeros((2, 0, 8))),
        ValueError,
        "x has T = 0 positions; attention needs T >= 1, got (2, 0, 8)",
    ),
    "integer x": (
        dict(x=np.zeros((5, 8), dtype=np.int64)),
        TypeError,
        "x must be a floating-point array (float16, bfloat16, float32, float64), got dtype int64",
    ),
    "boolean x": (
        dict(x=np.zeros((5, 8), dtype=bool)),
        TypeError,
        "x must be a floating-point array (float16, bfloat16, float32, float64), got dtype bool",
    ),
    "C mismatch": (
        dict(w_q=np.zeros((6, 8))),
        ValueError,
        "w_q must have shape (C, D) with C = 8 (the last axis of x), got (6, 8)",
    ),
    "weight rank 3": (
        dict(w_k=np.zeros((8, 8, 1))),
        ValueError,
        "w_k must have rank 2, shape (C, D), got (8, 8, 1)",
    ),
    "weight shapes differ": (
        dict(w_v=np.zeros((8, 4))),
        ValueError,
        "w_v has shape (8, 4) but w_q has (8, 8); w_q, w_k and w_v must share one shape (C, D)",
    ),
    "mask wrong shape": (
        dict(mask=np.ones((4, 4), dtype=bool)),
        ValueError,
        "mask of shape (4, 4) does not broadcast to (..., T, T) = (2, 5, 5)",
    ),
    "mask not boolean": (
        dict(mask=np.ones((5, 5))),
        ValueError,
        "mask must be a boolean array (True = may attend), got dtype float64",
    ),
    "mask adds axes": (
        dict(mask=np.ones((3, 2, 5, 5), dtype=bool)),
        ValueError,
        "mask of shape (3, 2, 5, 5) does not broadcast to (..., T, T) = (2, 5, 5)",
    ),
}


@pytest.mark.parametrize("case", SINGLE_HEAD_CASES)
def test_bad_single_head_input_raises_the_same_message(backend, case):
    changes, error, message = SINGLE_HEAD_CASES[case]
    args = _single_args(**changes)
    cast = [None if a is None else backend.from_numpy(a) for a in args]
    with pytest.raises(error) as caught:
        backend.single_head_attention(*cast)
    assert str(caught.value) == message


def test_mismatched_dtypes_raise_the_same_message(backend):
    x, p = _good()
    args = [backend.from_numpy(x, "float32")] + [
        backend.from_numpy(p[k], "float64") for k in PARAM_NAMES
    ]
    with pytest.raises(ValueError) as caught:
        backend.multi_head_attention(*args, 2)
    assert str(caught.value) == (
        "x has dtype float32 but w_q has dtype float64; give x and the weights one dtype"
    )


MULTI_HEAD_CASES = {
    "n_heads does not divide": (dict(n_heads=3), "n_heads=3 does not divide d_model=8"),
    "n_heads zero": (dict(n_heads=0), "n_heads must be a positive integer, got 0"),
    "n_heads float": (dict(n_heads=2.0), "n_heads must be a positive integer, got 2.0"),
    "w_o wrong shape": (
        dict(w_o=np.zeros((8, 4))),
        "w_o must have shape (C, C) = (8, 8) for multi-head attention, got (8, 4)",
    ),
    "w_q not square": (
        dict(D=4),
        "w_q must have shape (C, C) = (8, 8) for multi-head attention, got (8, 4)",
    ),
    "mask per batch without head axis": (
        dict(mask=np.ones((2, 5, 5), dtype=bool)),
        "mask of shape (2, 5, 5) does not broadcast to (..., H, T, T) = (2, 4, 5, 5)",
    ),
}


@pytest.mark.parametrize("case", MULTI_HEAD_CASES)
def test_bad_multi_head_input_raises_the_same_message(backend, case):
    changes, message = MULTI_HEAD_CASES[case]
    x, p = _good(D=changes.get("D"))
    if "w_o" in changes:
        p["w_o"] = changes["w_o"]
    mask = changes.get("mask")
    args = [backend.from_numpy(a) for a in (x, *(p[k] for k in PARAM_NAMES))]
    mask = None if mask is None else backend.from_numpy(mask)
    with pytest.raises(ValueError) as caught:
        backend.multi_head_attention(*args, changes.get("n_heads", 4), mask)
    assert str(caught.value) == message


def test_bad_entropy_input(backend):
    with pytest.raises(TypeError, match="weights must be a floating-point array"):
        backend.attention_entropy(backend.from_numpy(np.ones(3, dtype=np.int32)))


def test_module_rejects_heads_that_do_not_divide(backend):
    _, p = _good(C=32)
    with pytest.raises(ValueError, match=r"^n_heads=3 does not divide d_model=32$"):
        backend.CausalSelfAttention.from_weights(*(p[k] for k in PARAM_NAMES), 3)


class ShapeOnly:
    """Has .shape and .dtype, and fails on any arithmetic: proof that a call
    that raises did its checks before computing anything."""

    def __init__(self, shape, dtype="float64"):
        self.shape, self.dtype = shape, np.dtype(dtype)

    def __getattr__(self, name):
        raise AssertionError(f"computed on a bad input: .{name}")

    def __array__(self, *args, **kwargs):
        raise AssertionError("computed on a bad input: __array__")

    def __matmul__(self, other):
        raise AssertionError("computed on a bad input: @")

    __rmatmul__ = __matmul__


def test_errors_come_before_any_compute(backend):
    x, w, w_o = ShapeOnly((2, 5, 8)), ShapeOnly((8, 8)), ShapeOnly((8, 8))
    with pytest.raises(ValueError, match="n_heads=3 does not divide d_model=8"):
        backend.multi_head_attention(x, w, w, w, w_o, 3)
    with pytest.raises(ValueError, match="mask of shape"):
        backend.single_head_attention(x, w, w, w, ShapeOnly((3, 3), "bool"))
