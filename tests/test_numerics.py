"""Masks, dtypes and hostile numerics: one policy, checked in every backend.

The policy (README, "Masks and dtypes"; docs/differences.md):

- float64, float32, float16 and bfloat16 inputs; half precision multiplies in
  float32 and rounds q, k, v and the output to x's dtype; softmax in float32.
- A row with nothing to attend to has zero weights and a zero output.
- A key a row may not attend has no effect on that row, whatever its value,
  NaN and Inf included. A NaN or Inf that a row does attend makes it NaN.
- Bad input raises the same error and message in every backend (the matrix at
  the bottom, also the table of docs/bad-input.md); the smallest good input,
  T = 1, C = 1 or D = 1, is accepted and equals the oracle.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
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
    masked_problem,
    name_of,
    partly_non_finite_row,
    projected,
    random_inputs,
    run_entropy,
    run_multi,
    run_single,
)

from shared import PRESETS, assert_close
from shared.dtypes import np_dtype
from shared.hostile import (
    HOSTILE_SCORES,
    max_score,
    with_partly_infinite_value,
)
from shared.reference import reference_multi_head, reference_single_head
from shared.tolerances import TOLERANCES

DTYPES = tuple(TOLERANCES)  # float64, float32, float16, bfloat16
HALF = ("float16", "bfloat16")
DOCS = Path(__file__).resolve().parent.parent / "docs"


def rounded(array, precision):
    """`array` rounded to `precision` and back to float64: what a backend sees."""
    return np.asarray(array).astype(np_dtype(precision)).astype(np.float64)


def fully_masked_rows(allowed):
    """Boolean (..., T): rows of a broadcast mask with no key to attend to."""
    T = allowed.shape[-1]
    return ~(allowed & np.tril(np.ones((T, T), dtype=bool))).any(axis=-1)


# Dtypes: every backend takes all four, returns them, and meets the table.


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("precision", DTYPES)
def test_every_dtype_equals_the_golden_oracle(backend, precision, preset):
    g = golden(preset)
    H = PRESETS[preset].n_heads
    single_out, single_weights = run_single(
        backend, g["x"], g["w_q"], g["w_k"], g["w_v"], precision
    )
    out, weights = run_multi(backend, g["x"], g, H, precision)
    for result in (single_out, single_weights, out, weights):
        assert result.dtype == np_dtype(precision)
    assert_close(single_weights, g["single_weights"], precision, "single weights")
    assert_close(single_out, g["single_out"], precision, "single out")
    assert_close(weights, g["multi_weights"], precision, "multi weights")
    assert_close(out, g["multi_out"], precision, "multi out")
    entropy = run_entropy(backend, weights, precision)
    assert entropy.dtype == np_dtype(precision)
    assert_close(entropy, g["multi_entropy"], precision, "entropy")


@pytest.mark.parametrize("precision", HALF)
def test_module_form_takes_half_precision_numpy_weights(backend, precision):
    g = golden("batched")
    params = (g[k].astype(np_dtype(precision)) for k in PARAM_NAMES)
    module = backend.CausalSelfAttention.from_weights(*params, 4)
    out, weights = module(backend.from_numpy(g["x"], precision))
    out, weights = backend.to_numpy(out), backend.to_numpy(weights)
    assert out.dtype == weights.dtype == np_dtype(precision)
    f_out, f_weights = run_multi(backend, g["x"], g, 4, precision)
    assert_close(weights, f_weights, precision, "module weights")
    assert_close(out, f_out, precision, "module out")


@pytest.mark.parametrize("precision", HALF)
def test_backends_agree_in_half_precision(backend_pair, precision):
    for preset in ("tiny", "batched", "long"):
        g = golden(preset)
        (out_a, w_a), (out_b, w_b) = (
            run_multi(b, g["x"], g, PRESETS[preset].n_heads, precision)
            for b in backend_pair
        )
        assert_close(w_a, w_b, precision, f"{preset} weights")
        assert_close(out_a, out_b, precision, f"{preset} out")


@pytest.mark.parametrize("precision", HALF)
def test_half_precision_matmuls_accumulate_in_float32(backend, precision):
    # 4096 ones sum to 4096 in float32 (and 4096 is a float16 and a bfloat16);
    # summed in float16 they stop at 2048, in bfloat16 at 256.
    C = 4096
    x = np.ones((1, C))  # T = 1: the one weight is 1, so out = v = x @ w_v
    zeros, ones = np.zeros((C, 1)), np.ones((C, 1))
    out, weights = run_single(backend, x, zeros, zeros, ones, precision)
    assert out.dtype == np_dtype(precision)
    np.testing.assert_array_equal(out.astype(np.float64), [[4096.0]])
    np.testing.assert_array_equal(weights.astype(np.float64), [[1.0]])


@pytest.mark.parametrize(
    ("shape", "D"),
    [((2, 1, 3), 2), ((2, 4, 1), 2), ((2, 4, 3), 1)],
    ids=["T=1", "C=1", "D=1"],
)
def test_one_position_one_feature_or_one_column_is_enough(backend, shape, D):
    rng = np.random.default_rng(27)
    x = rng.standard_normal(shape)
    w_q, w_k, w_v = rng.standard_normal((3, shape[-1], D))
    out, weights = run_single(backend, x, w_q, w_k, w_v, "float64")
    ref_out, ref_weights = reference_single_head(x, w_q, w_k, w_v)
    assert_close(out, ref_out, "float64", f"out, x {shape}, D = {D}")
    assert_close(weights, ref_weights, "float64", f"weights, x {shape}, D = {D}")


def _cast(a, like):
    """a in like's dtype, in a's own framework (.astype: NumPy, JAX; .to: torch)."""
    return a.astype(like.dtype) if hasattr(a, "astype") else a.to(like.dtype)


def rounded_at_the_documented_points(backend, x, w, n_heads=None, skip=()):
    """Attention of half-precision x written with the backend's own float32 ops
    and its `attend`, rounding to x's dtype at the documented points only.

    x and the weights go to float32; each x @ w is a float32 matmul, and q, k,
    v are rounded to x's dtype (and back: `attend` computes in float32); with
    `n_heads` (w = w_q, w_k, w_v, w_o) the heads are also rounded before they
    merge and meet w_o; the output and the weights are rounded at the end.
    `skip`: points among "q", "k", "v", "merged" not to round. Returns the
    backend's (out, weights).
    """
    f32 = backend.from_numpy(np.zeros(0), "float32")

    def through_x_dtype(t, point):  # t in float32, rounded unless skipped
        return t if point in skip else _cast(_cast(t, x), f32)

    x32 = _cast(x, f32)
    q, k, v = (
        through_x_dtype(x32 @ _cast(w_i, f32), point)
        for w_i, point in zip(w[:3], "qkv", strict=True)
    )
    attention, T = backend.attention, x.shape[-2]
    if n_heads is None:
        out, weights = attention.attend(q, k, v, attention.allowed_keys(T))
        return _cast(out, x), _cast(weights, x)
    q, k, v = (attention.split_heads(t, n_heads) for t in (q, k, v))
    heads, weights = attention.attend(q, k, v, attention.allowed_keys(T))
    merged = attention.merge_heads(through_x_dtype(heads, "merged"))
    return _cast(merged @ _cast(w[3], f32), x), _cast(weights, x)


@pytest.mark.parametrize("precision", HALF)
def test_half_precision_rounds_at_exactly_the_documented_points(backend, precision):
    """Bit for bit, not within a tolerance: single- and multi-head attention in
    half precision equal `rounded_at_the_documented_points`, which rounds q, k,
    v and the merged heads to x's dtype and computes everything else in
    float32. And each rounding point matters on these inputs: the same
    reference without it gives other bits, so an attention that skipped one
    (or rounded somewhere else) fails here, however small the difference."""
    g = golden("batched")
    x = backend.from_numpy(g["x"], precision)
    w = [backend.from_numpy(g[name], precision) for name in PARAM_NAMES]
    for n_heads, result, points in (
        (None, backend.single_head_attention(x, *w[:3]), ("q", "k", "v")),
        (4, backend.multi_head_attention(x, *w, 4), ("q", "k", "v", "merged")),
    ):
        out, weights = (backend.to_numpy(r) for r in result)
        expected = rounded_at_the_documented_points(backend, x, w, n_heads)
        what = f"{precision}, n_heads={n_heads}"
        for got, want in zip((out, weights), expected, strict=True):
            want = backend.to_numpy(want)
            assert got.dtype == want.dtype == np_dtype(precision)
            np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        for point in points:
            skipped, _ = rounded_at_the_documented_points(
                backend, x, w, n_heads, skip=(point,)
            )
            skipped = backend.to_numpy(skipped)
            assert np.any(skipped != out), f"{what}: skipping {point} changes nothing"


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_float64_and_float32_projections_are_plain_matmuls(backend, precision):
    x, p = random_inputs(3, (4,), 1, 16)  # T = 1: the one weight is 1, out = v
    x, w = (backend.from_numpy(a, precision) for a in (x, p["w_v"]))
    out, _ = backend.single_head_attention(x, w, w, w)
    np.testing.assert_array_equal(backend.to_numpy(out), backend.to_numpy(x @ w))


# Key padding, given masks and fully masked rows.


def test_key_padding_mask_from_lengths_and_from_keep(backend):
    T = 5
    lengths = np.array([3, 0, 5, 7, -1])  # above T keeps all, 0 or below none
    keep = np.arange(T) < lengths[:, None]  # (5, T)
    from_lengths = backend.to_numpy(
        backend.key_padding_mask(backend.from_numpy(lengths), T)
    )
    from_keep = backend.to_numpy(backend.key_padding_mask(backend.from_numpy(keep), T))
    assert from_lengths.dtype == from_keep.dtype == np.bool_
    assert from_lengths.shape == from_keep.shape == (5, 1, T)
    np.testing.assert_array_equal(from_lengths[:, 0], keep)
    np.testing.assert_array_equal(from_keep[:, 0], keep)
    per_head = backend.key_padding_mask(backend.from_numpy(lengths), T, multi_head=True)
    assert tuple(per_head.shape) == (5, 1, 1, T)
    unbatched = backend.key_padding_mask(backend.from_numpy(np.array(2)), T)
    np.testing.assert_array_equal(backend.to_numpy(unbatched), [[1, 1, 0, 0, 0]])


def test_key_padding_combines_with_causal(backend, dtype):
    x, p = random_inputs(11, (3,), 6, 8)
    lengths = np.array([6, 2, 4])
    keep = np.arange(6) < lengths[:, None]  # (3, T)
    for kind in (lengths, keep):
        mask = backend.key_padding_mask(backend.from_numpy(kind), 6, multi_head=True)
        args = [backend.from_numpy(a, dtype) for a in (x, *p.values())]
        out, weights = backend.multi_head_attention(*args, 2, mask)
        out, weights = backend.to_numpy(out), backend.to_numpy(weights)
        ref_out, ref_weights = reference_multi_head(
            x, *p.values(), 2, keep[:, None, None, :]
        )
        assert_close(weights, ref_weights, dtype, "key-padded weights")
        assert_close(out, ref_out, dtype, "key-padded out")
        assert np.all(weights[1, :, :, 2:] == 0.0)  # keys past length 2: never
        single_mask = backend.key_padding_mask(backend.from_numpy(kind), 6)
        single_out, single_weights = backend.single_head_attention(
            *args[:3], args[3], single_mask
        )
        ref_out, ref_weights = reference_single_head(
            x, p["w_q"], p["w_k"], p["w_v"], keep[:, None, :]
        )
        assert_close(backend.to_numpy(single_weights), ref_weights, dtype)
        assert_close(backend.to_numpy(single_out), ref_out, dtype)


@pytest.mark.parametrize("precision", DTYPES)
def test_fully_masked_rows_give_zero_weights_zero_output_never_nan(backend, precision):
    x, p, mask, empty = masked_problem()  # mask (2, 1, T, T), empty (2, T)
    T = x.shape[-2]
    # the rows it names are the mask's fully masked rows, and they exist
    np.testing.assert_array_equal(fully_masked_rows(mask)[:, 0], empty)
    assert empty[0, 2] and empty[1].all() and empty.sum() == 1 + T
    out, weights = run_multi(backend, x, p, 2, precision, mask)
    single_out, single_weights = run_single(
        backend, x, p["w_q"], p["w_k"], p["w_v"], precision, mask[:, 0]
    )
    for result in (out, weights, single_out, single_weights):
        assert np.all(np.isfinite(result.astype(np.float64)))
    assert np.all(weights.transpose(0, 2, 1, 3)[empty] == 0.0)
    assert np.all(out[empty] == 0.0)
    assert np.all(single_weights[empty] == 0.0)
    assert np.all(single_out[empty] == 0.0)
    assert np.all(run_entropy(backend, single_weights, precision)[empty] == 0.0)
    sums = single_weights.astype(np.float64).sum(axis=-1)[~empty]
    assert_close(sums, np.ones_like(sums), precision, "rows that attend sum to 1")


# Masked positions never leak; non-finite values a row attends propagate.


@pytest.mark.parametrize("i", [0, 3, 6])
def test_huge_future_keys_and_values_leave_the_past_bit_for_bit(backend, dtype, i):
    g = golden("tiny")
    x = g["x"].copy()
    # eager: jitted, XLA may compute a score twice, in other orders, and at
    # scores of 1e20 the two differ by more than exp's range (docs/contract.md)
    out, weights = run_multi(backend, x, g, 4, dtype, jit=False)
    signs = np.random.default_rng(i).choice([-1.0, 1.0], size=x[i + 1 :].shape)
    x[i + 1 :] = 1e10 * signs  # keys, values and queries of 1e10 in the future
    out2, weights2 = run_multi(backend, x, g, 4, dtype, jit=False)
    assert np.all(np.isfinite(out2)) and np.all(np.isfinite(weights2))
    np.testing.assert_array_equal(out2[: i + 1], out[: i + 1])
    np.testing.assert_array_equal(weights2[:, : i + 1], weights[:, : i + 1])


@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("precision", DTYPES)
def test_nan_and_inf_in_the_future_leave_the_past_bit_for_bit(
    backend, precision, poison
):
    i = 3
    g = golden("tiny")
    x = g["x"].copy()
    out, weights = run_multi(backend, x, g, 4, precision)
    x[i + 1 :] = poison
    with np.errstate(invalid="ignore"):  # NumPy warns on inf - inf; torch, JAX don't
        out2, weights2 = run_multi(backend, x, g, 4, precision)
    np.testing.assert_array_equal(out2[: i + 1], out[: i + 1])
    np.testing.assert_array_equal(weights2[:, : i + 1], weights[:, : i + 1])
    assert np.all(np.isnan(out2[i + 1 :].astype(np.float64)))  # they attend it


@pytest.mark.parametrize("poison", [math.nan, math.inf])
def test_nan_padding_leaves_the_real_positions_bit_for_bit(backend, poison):
    # A batch padded with garbage (uninitialized memory, a NaN fill): the real
    # positions never see it; the padded queries' own rows are NaN (ignore them).
    x, p = random_inputs(13, (2,), 7, 8)
    lengths = np.array([7, 4])
    mask = backend.key_padding_mask(backend.from_numpy(lengths), 7, multi_head=True)
    args = [backend.from_numpy(a, "float32") for a in (x, *p.values())]
    out, _ = backend.multi_head_attention(*args, 2, mask)
    x[1, 4:] = poison
    args[0] = backend.from_numpy(x, "float32")
    with np.errstate(invalid="ignore"):
        padded_out, _ = backend.multi_head_attention(*args, 2, mask)
    out, padded_out = backend.to_numpy(out), backend.to_numpy(padded_out)
    np.testing.assert_array_equal(padded_out[0], out[0])
    np.testing.assert_array_equal(padded_out[1, :4], out[1, :4])
    assert np.all(np.isnan(padded_out[1, 4:]))


# A value only partly non-finite: one entry Inf or NaN, the others finite (0,
# or huge). The policy must ask whether every entry of a key's value is finite,
# not whether any is: a row that may not attend the key gives it the weight 0,
# and 0 * Inf = NaN in the one column that holds it.
PARTIAL_RUNS = [
    pytest.param(precision, poison, rest, id=f"{precision}-{poison}-{rest}")
    for precision in DTYPES
    for poison in ("inf", "-inf")
    for rest in PARTIAL_RESTS
]


@pytest.mark.parametrize(("precision", "poison", "rest"), PARTIAL_RUNS)
def test_a_partly_infinite_value_leaks_into_no_row_that_may_not_attend_it(
    backend, precision, poison, rest
):
    j = 3  # key 3's value overflows in one column: rows 0 to 2 never attend it
    x, p = random_inputs(14, (2,), 7, 8)
    bad_x, p = with_partly_infinite_value(x, p, j, poison, rest, precision)
    v_j = projected(bad_x, p["w_v"], precision)[:, j]  # (2, C), as the backends see it
    assert np.all(np.isinf(v_j[:, 0])) and np.all(np.isfinite(v_j[:, 1:]))
    single = [p[n] for n in ("w_q", "w_k", "w_v")]
    with np.errstate(over="ignore"):  # NumPy: 4 s overflows the cast to half
        for H, (out, weights), (bad_out, bad_weights) in (
            (1, *(run_single(backend, a, *single, precision) for a in (x, bad_x))),
            (2, *(run_multi(backend, a, p, 2, precision) for a in (x, bad_x))),
        ):
            np.testing.assert_array_equal(bad_out[:, :j], out[:, :j], f"H={H}")
            np.testing.assert_array_equal(
                bad_weights[..., :j, :], weights[..., :j, :], f"H={H} weights"
            )
            assert np.all(np.isnan(bad_out[:, j:].astype(np.float64))), f"H={H}"


@pytest.mark.parametrize("rest", PARTIAL_RESTS)
@pytest.mark.parametrize("poison", PARTIAL_POISONS)
def test_attend_keeps_a_partly_non_finite_value_from_the_rows_that_may_not_attend_it(
    backend, dtype, poison, rest
):
    # attend, steps 3 to 7 of every form (and all of decoding), on a value row
    # such as [NaN, 1e307, 1e307, 1e307]: rows 0 to 2 never attend key 3
    # (causal), and with key 3 masked away no row does.
    T, j = 7, 3
    q, k, v = np.random.default_rng(15).standard_normal((3, 2, T, 4))
    bad_v = v.copy()
    bad_v[..., j, :] = partly_non_finite_row(4, poison, rest, dtype)
    q, k, v, bad_v = (backend.from_numpy(a, dtype) for a in (q, k, v, bad_v))
    every_key_but_j = backend.from_numpy(np.arange(T) != j)  # (T,)
    for mask, n_clean in ((None, j), (every_key_but_j, T)):
        allowed = backend.attention.allowed_keys(T, mask)  # (T, T)
        out, weights = backend.attention.attend(q, k, v, allowed)
        bad_out, bad_weights = backend.attention.attend(q, k, bad_v, allowed)
        out, bad_out = backend.to_numpy(out), backend.to_numpy(bad_out)
        np.testing.assert_array_equal(bad_out[:, :n_clean], out[:, :n_clean])
        np.testing.assert_array_equal(
            backend.to_numpy(bad_weights), backend.to_numpy(weights)
        )
        assert np.all(np.isnan(bad_out[:, n_clean:]))


@pytest.mark.parametrize("name", PARAM_NAMES)
def test_a_nan_in_the_weights_propagates(backend, name):
    g = golden("tiny")
    params = {k: g[k].copy() for k in PARAM_NAMES}
    params[name][5, 9] = math.nan  # column 9: head 1 of 4 (D = 8)
    out, weights = run_multi(backend, g["x"], params, 4, "float32")
    if name == "w_o":  # only output column 9 reads it
        assert np.all(np.isnan(out[:, 9]))
        clean, _ = run_multi(backend, g["x"], g, 4, "float32")
        np.testing.assert_array_equal(np.delete(out, 9, -1), np.delete(clean, 9, -1))
    else:  # head 1 is NaN, and w_o mixes it into every output
        assert np.all(np.isnan(out))
    if name in ("w_q", "w_k"):
        assert np.all(np.isnan(weights[1][np.tril(np.ones((8, 8), dtype=bool))]))


# Hostile magnitudes: scores near the top of each dtype.


@pytest.mark.parametrize("preset", ["tiny", "batched", "long"])
@pytest.mark.parametrize("precision", list(HOSTILE_SCORES))
def test_hostile_magnitudes_do_not_overflow(backend, precision, preset):
    x, params = hostile_inputs(preset, precision)
    H = PRESETS[preset].n_heads
    exact = {k: w.astype(np.float64) for k, w in params.items()}
    assert max_score(x, exact, H) > 0.9 * HOSTILE_SCORES[precision]  # the premise
    # NumPy's warnings are errors in this suite: an overflow anywhere fails here.
    # Eager; jitted JAX: tests/test_jax_numerics.py (docs/contract.md)
    out, weights = run_multi(backend, x, params, H, precision, jit=False)
    out, weights = out.astype(np.float64), weights.astype(np.float64)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(weights))
    sums = weights.sum(axis=-1)
    assert_close(sums, np.ones_like(sums), precision, "row sums")
    ref_out, ref_weights, out_tolerance, weights_tolerance = hostile_expected(
        preset, precision
    )
    assert_close(weights, ref_weights, weights_tolerance, "weights")
    assert_close(out, ref_out, out_tolerance, "out")


# Determinism: the same call twice gives the same bits.


@pytest.mark.parametrize("precision", DTYPES)
def test_two_runs_are_bit_identical(backend, precision):
    for preset in ("batched", "long"):
        g = golden(preset)
        H = PRESETS[preset].n_heads
        first, second = (run_multi(backend, g["x"], g, H, precision) for _ in range(2))
        for a, b in zip(first, second, strict=True):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
        weights = first[1]
        entropies = [run_entropy(backend, weights, precision) for _ in range(2)]
        np.testing.assert_array_equal(*(e.view(np.uint8) for e in entropies))


# The bad-input matrix: every class of bad input, in every backend, raises the
# same error with the same message, before any compute. docs/bad-input.md
# holds the same table; a test below proves the two equal.


def good_arguments():
    """float64 arguments that fit: x (2, 5, 8), four (8, 8) weights, H = 4, T = 5."""
    x, p = random_inputs(0, (2,), 5, 8)
    return {"x": x, **p, "mask": None, "n_heads": 4, "weights": x, "T": 5}


ARGUMENTS = {
    "single_head_attention": ("x", "w_q", "w_k", "w_v", "mask"),
    "multi_head_attention": ("x", "w_q", "w_k", "w_v", "w_o", "n_heads", "mask"),
    "attention_entropy": ("weights",),
    "key_padding_mask": ("lengths_or_keep", "T"),
    "CausalSelfAttention.from_weights": ("w_q", "w_k", "w_v", "w_o", "n_heads"),
}
TAKES_NUMPY = ("CausalSelfAttention.from_weights",)  # in every backend


def call(function, **changes):
    """A call of `function` on `good_arguments()` with `changes`, per backend."""

    def run(backend):
        args = {**good_arguments(), **changes}
        if function not in TAKES_NUMPY:
            args = {
                k: backend.from_numpy(a) if isinstance(a, np.ndarray) else a
                for k, a in args.items()
            }
        target = backend
        for name in function.split("."):  # "CausalSelfAttention.from_weights"
            target = getattr(target, name)
        return target(*(args[k] for k in ARGUMENTS[function]))

    return function, run


ANY_FLOAT = "(float16, bfloat16, float32, float64)"
W8 = np.zeros((8, 8))
BAD_INPUTS = {
    "x not an array": (
        call("single_head_attention", x=[[0.0] * 8] * 5),
        TypeError,
        "x must be an array with .shape and .dtype, got list",
    ),
    "x with a .shape but no .dtype": (
        call("single_head_attention", x=SimpleNamespace(shape=(5, 8))),
        TypeError,
        "x must be an array with .shape and .dtype, got SimpleNamespace",
    ),
    "x of integers": (
        call("single_head_attention", x=np.zeros((5, 8), dtype=np.int64)),
        TypeError,
        f"x must be a floating-point array {ANY_FLOAT}, got dtype int64",
    ),
    "x of booleans": (
        call("single_head_attention", x=np.zeros((5, 8), dtype=bool)),
        TypeError,
        f"x must be a floating-point array {ANY_FLOAT}, got dtype bool",
    ),
    "x of rank 1": (
        call("single_head_attention", x=np.zeros(8)),
        ValueError,
        "x must have shape (..., T, C) with rank >= 2, got (8,)",
    ),
    "T = 0": (
        call("single_head_attention", x=np.zeros((2, 0, 8))),
        ValueError,
        "x has T = 0 positions; attention needs T >= 1, got (2, 0, 8)",
    ),
    "C = 0": (
        call("single_head_attention", x=np.zeros((5, 0))),
        ValueError,
        "x has C = 0 features; attention needs C >= 1, got (5, 0)",
    ),
    "a weight not an array": (
        call("single_head_attention", w_q=W8.tolist()),
        TypeError,
        "w_q must be an array with .shape and .dtype, got list",
    ),
    "a weight of rank 3": (
        call("single_head_attention", w_k=np.zeros((8, 8, 1))),
        ValueError,
        "w_k must have rank 2, shape (C, D), got (8, 8, 1)",
    ),
    "a weight whose C is not x's": (
        call("single_head_attention", w_q=np.zeros((6, 8))),
        ValueError,
        "w_q must have shape (C, D) with C = 8 (the last axis of x), got (6, 8)",
    ),
    "w_q, w_k, w_v of different shapes": (
        call("single_head_attention", w_v=np.zeros((8, 4))),
        ValueError,
        "w_v has shape (8, 4) but w_q has (8, 8); "
        "w_q, w_k and w_v must share one shape (C, D)",
    ),
    "D = 0": (
        call("single_head_attention", **{k: np.zeros((8, 0)) for k in PARAM_NAMES}),
        ValueError,
        "w_q must have D >= 1 columns, got (8, 0)",
    ),
    "weights in another dtype than x": (
        call("single_head_attention", x=np.zeros((5, 8), dtype=np.float32)),
        ValueError,
        "x has dtype float32 but w_q has dtype float64; "
        "give x and the weights one dtype",
    ),
    "weights in another dtype than x, multi-head": (
        call("multi_head_attention", x=np.zeros((2, 5, 8), dtype=np.float32)),
        ValueError,
        "x has dtype float32 but w_q has dtype float64; "
        "give x and the weights one dtype",
    ),
    "a mask not an array": (
        call("single_head_attention", mask=[[True] * 5] * 5),
        TypeError,
        "mask must be a boolean array (True = may attend), got list",
    ),
    "a mask with a .shape but no .dtype": (
        call("single_head_attention", mask=SimpleNamespace(shape=(5, 5))),
        TypeError,
        "mask must be a boolean array (True = may attend), got SimpleNamespace",
    ),
    "a mask not boolean": (
        call("single_head_attention", mask=np.ones((5, 5))),
        ValueError,
        "mask must be a boolean array (True = may attend), got dtype float64",
    ),
    "a mask of the wrong shape": (
        call("single_head_attention", mask=np.ones((4, 4), dtype=bool)),
        ValueError,
        "mask of shape (4, 4) does not broadcast to (..., T, T) = (2, 5, 5)",
    ),
    "a mask that adds axes": (
        call("single_head_attention", mask=np.ones((3, 2, 5, 5), dtype=bool)),
        ValueError,
        "mask of shape (3, 2, 5, 5) does not broadcast to (..., T, T) = (2, 5, 5)",
    ),
    "a mask without the head axis": (
        call("multi_head_attention", mask=np.ones((2, 5, 5), dtype=bool)),
        ValueError,
        "mask of shape (2, 5, 5) does not broadcast to (..., H, T, T) = (2, 4, 5, 5)",
    ),
    "n_heads that does not divide C": (
        call("multi_head_attention", n_heads=3),
        ValueError,
        "n_heads=3 does not divide d_model=8",
    ),
    "n_heads = 0": (
        call("multi_head_attention", n_heads=0),
        ValueError,
        "n_heads must be a positive integer, got 0",
    ),
    "n_heads a float": (
        call("multi_head_attention", n_heads=2.0),
        ValueError,
        "n_heads must be a positive integer, got 2.0",
    ),
    "n_heads a bool": (
        call("multi_head_attention", n_heads=True),
        ValueError,
        "n_heads must be a positive integer, got True",
    ),
    "n_heads a NumPy integer 0": (
        call("multi_head_attention", n_heads=np.int64(0)),
        ValueError,
        "n_heads must be a positive integer, got 0",
    ),
    "w_k of another shape, multi-head": (
        call("multi_head_attention", w_k=np.zeros((8, 4))),
        ValueError,
        "w_k has shape (8, 4) but w_q has (8, 8); "
        "w_q, w_k and w_v must share one shape (C, C)",
    ),
    "w_v of another dtype, multi-head": (
        call("multi_head_attention", w_v=np.zeros((8, 8), dtype=np.float32)),
        ValueError,
        "x has dtype float64 but w_v has dtype float32; "
        "give x and the weights one dtype",
    ),
    "w_o not (C, C)": (
        call("multi_head_attention", w_o=np.zeros((8, 4))),
        ValueError,
        "w_o must have shape (C, C) = (8, 8) for multi-head attention, got (8, 4)",
    ),
    "w_q not (C, C) in multi-head": (
        call("multi_head_attention", **{k: np.zeros((8, 4)) for k in PARAM_NAMES[:3]}),
        ValueError,
        "w_q must have shape (C, C) = (8, 8) for multi-head attention, got (8, 4)",
    ),
    "n_heads that does not divide C, module form": (
        call("CausalSelfAttention.from_weights", n_heads=3),
        ValueError,
        "n_heads=3 does not divide d_model=8",
    ),
    "a weight not a NumPy array, module form": (
        call("CausalSelfAttention.from_weights", w_k=W8.tolist()),
        TypeError,
        "from_weights takes NumPy arrays; w_k is list in the (in, out) layout "
        "(to_numpy converts a framework's array)",
    ),
    "entropy of integers": (
        call("attention_entropy", weights=np.ones(3, dtype=np.int32)),
        TypeError,
        f"weights must be a floating-point array {ANY_FLOAT}, got dtype int32",
    ),
    "entropy of a scalar": (
        call("attention_entropy", weights=np.array(1.0)),
        ValueError,
        "weights must have rank >= 1 (..., T), got a scalar",
    ),
    "lengths not an array": (
        call("key_padding_mask", lengths_or_keep=[3, 5]),
        TypeError,
        "lengths_or_keep must be an array of integer lengths (...,) or a boolean "
        "keep array (..., T), got list",
    ),
    "lengths of floats": (
        call("key_padding_mask", lengths_or_keep=np.array([3.0, 5.0])),
        TypeError,
        "lengths_or_keep must be an array of integer lengths (...,) or a boolean "
        "keep array (..., T), got dtype float64",
    ),
    "a keep array of the wrong length": (
        call("key_padding_mask", lengths_or_keep=np.ones((2, 4), dtype=bool)),
        ValueError,
        "a boolean keep array must have shape (..., T) with T = 5, got (2, 4)",
    ),
    "lengths with a .shape but no .dtype": (
        call("key_padding_mask", lengths_or_keep=SimpleNamespace(shape=(2,))),
        TypeError,
        "lengths_or_keep must be an array of integer lengths (...,) or a boolean "
        "keep array (..., T), got SimpleNamespace",
    ),
    "a keep array whose T is second to last": (
        call("key_padding_mask", lengths_or_keep=np.ones((2, 5, 4), dtype=bool)),
        ValueError,
        "a boolean keep array must have shape (..., T) with T = 5, got (2, 5, 4)",
    ),
    "a keep array of rank 0": (
        call("key_padding_mask", lengths_or_keep=np.array(True)),
        ValueError,
        "a boolean keep array must have shape (..., T) with T = 5, got ()",
    ),
    "T = 0 for the padding mask": (
        call("key_padding_mask", lengths_or_keep=np.array([3, 5]), T=0),
        ValueError,
        "T must be a positive integer, got 0",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_matrix(backend, case):
    (_, run), error, message = BAD_INPUTS[case]
    with pytest.raises(error) as caught:
        run(backend)
    assert type(caught.value) is error
    assert str(caught.value) == message


@pytest.mark.parametrize("name", ["n_heads", "T"])
def test_an_array_where_a_python_int_is_needed_says_how_to_mark_it_static(
    backend, name
):
    # (not in the matrix: the message names the array, and each backend
    # writes its own: array(2), tensor(2), Array(2, dtype=int64); and only
    # JAX's, most often a traced argument of jax.jit, says how to mark it static)
    value = backend.from_numpy(np.array(2))
    with pytest.raises(ValueError) as caught:
        if name == "n_heads":
            x, w = (backend.from_numpy(a) for a in (np.ones((5, 8)), np.eye(8)))
            backend.multi_head_attention(x, w, w, w, w, value)
        else:
            backend.key_padding_mask(backend.from_numpy(np.array([3, 5])), value)
    how = (
        f'under jax.jit, mark it static: jax.jit(f, static_argnames=("{name}",)), '
        "or call the _jit twin of the function (e.g. multi_head_attention_jit)"
        if name_of(backend) == "jax"
        else f"pass int({name})"
    )
    assert str(caught.value) == (
        f"{name} must be a Python int, known before any compute, got an array "
        f"{value!r}; {how}"
    )


def test_the_docs_bad_input_table_is_the_tested_matrix():
    text = (DOCS / "bad-input.md").read_text()
    table = text.split("<!-- bad-input matrix -->")[1]
    rows = re.findall(r"^\| (.+?) \| `([\w.]+)` \| `(\w+)` \| `(.+?)` \|$", table, re.M)
    documented = {
        name: (function, error, message) for name, function, error, message in rows
    }
    tested = {
        name: (function, error.__name__, message)
        for name, ((function, _), error, message) in BAD_INPUTS.items()
    }
    assert documented == tested


def test_every_test_the_docs_name_exists():
    named = set()
    for page in ("bad-input.md", "differences.md"):
        named |= set(re.findall(r"`(test_\w+)`", (DOCS / page).read_text()))
    defined = set()
    for path in Path(__file__).parent.glob("test_*.py"):
        defined |= set(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
    assert named, "the docs name no tests"
    assert named <= defined, f"named in docs but not defined: {named - defined}"
