"""How every tolerance is derived (docs/suite.md): shared.reordered's
same-dtype references, and the table checked against them.

NumPy only, and run once (marked neutral: in tox -e jax; docs/suite.md,
"CI time"): the references are NumPy elementwise arithmetic, the same bits on
every machine, so what this file proves here it proves everywhere.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from helpers import gradient_case, hostile_inputs, random_inputs

import impl_numpy
from shared import PRESETS
from shared.gradients import backend_gradients
from shared.reference import (
    reference_entropy,
    reference_multi_head,
    reference_single_head,
)
from shared.reordered import (
    N_ORDERS,
    TABLE_PROBLEMS,
    ordered_matmul,
    ordered_sum,
    preset_problems,
    random_problems,
    references,
    reordered_attention,
    reordered_attention_backward,
    reordered_entropy,
    reordered_multi_head,
    reordered_multi_head_backward,
    reordered_single_head,
    reordered_single_head_backward,
    summation_order,
    to_tf32,
    worst_errors,
)
from shared.tolerances import (
    DERIVED_MULTIPLE,
    TABLE_MULTIPLE,
    TF32,
    TOLERANCES,
    Tolerance,
    derived_tolerance,
    float32_matmul,
    max_abs_diff,
    tolerance,
    use_float32_matmul,
)

pytestmark = pytest.mark.neutral  # no framework but NumPy: runs once

# The references: the oracle in float64, rounded as the policy rounds.


@pytest.mark.parametrize("which", [0, 1, 7])
@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
def test_in_float64_every_reference_is_the_oracle(batch, which):
    x, p = random_inputs(50, batch, 9, 8)
    mask = np.random.default_rng(51).random((9, 9)) < 0.7
    for scale in (True, False):
        got = reordered_multi_head(x, *p.values(), 4, mask, scale=scale, which=which)
        want = reference_multi_head(x, *p.values(), 4, mask, scale=scale)
        for a, e in zip(got, want, strict=True):
            np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-13)
    got = reordered_single_head(x, p["w_q"], p["w_k"], p["w_v"], which=which)
    want = reference_single_head(x, p["w_q"], p["w_k"], p["w_v"])
    for a, e in zip(got, want, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-13)
    weights = want[1]
    np.testing.assert_allclose(
        reordered_entropy(weights, which), reference_entropy(weights), atol=1e-13
    )


def test_in_float64_the_reference_gradients_are_the_numpy_backward():
    x, params, H, d_out = gradient_case("batched")
    mask = np.random.default_rng(52).random(x.shape[-2:-1] * 2) < 0.8
    for form in ("single", "multi"):
        want = backend_gradients(impl_numpy, form, x, params, H, d_out, "float64", mask)
        w = list(params.values())
        if form == "multi":
            got = reordered_multi_head_backward(x, *w, H, d_out, mask, which=5)
        else:
            got = reordered_single_head_backward(x, *w[:3], d_out, mask, which=5)
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-11, atol=1e-12)


def test_per_head_references_and_their_gradients_are_the_numpy_attention():
    rng = np.random.default_rng(53)
    q, k, v, d_out = rng.standard_normal((4, 2, 7, 3))
    from impl_numpy.attention import allowed_keys, attend

    for causal in (True, False):
        allowed = allowed_keys(7) if causal else np.ones((7, 7), dtype=bool)
        want_out, want_weights = attend(q, k, v, allowed)
        out, weights = reordered_attention(q, k, v, causal=causal, which=3)
        np.testing.assert_allclose(out, want_out, atol=1e-13)
        np.testing.assert_allclose(weights, want_weights, atol=1e-13)
        grads = reordered_attention_backward(q, k, v, d_out, causal=causal)
        h = 1e-6  # one entry of each, by central differences
        for name, array in zip("qkv", (q, k, v), strict=True):
            up, down = array.copy(), array.copy()
            up[1, 4, 2] += h
            down[1, 4, 2] -= h
            args = {"q": q, "k": k, "v": v}

            def loss(a, name=name, args=args, causal=causal):
                out = reordered_attention(**(args | {name: a}), causal=causal)[0]
                return float((out * d_out).sum())

            slope = (loss(up) - loss(down)) / (2 * h)
            assert math.isclose(grads[name][1, 4, 2], slope, rel_tol=1e-6, abs_tol=1e-8)


# The orders: every sum, a permutation of its terms, summed one at a time.


def test_each_order_is_a_fixed_permutation_forward_and_reversed_first():
    np.testing.assert_array_equal(summation_order(5, 0), np.arange(5))
    np.testing.assert_array_equal(summation_order(5, 1), [4, 3, 2, 1, 0])
    shuffles = [tuple(summation_order(40, w)) for w in range(2, N_ORDERS)]
    assert len(set(shuffles)) == N_ORDERS - 2  # all different
    for order in shuffles:
        assert sorted(order) == list(range(40))


def test_an_ordered_matmul_sums_one_term_at_a_time_in_its_order():
    rng = np.random.default_rng(54)
    a = rng.standard_normal((1, 3, 17)).astype(np.float32)
    b = rng.standard_normal((1, 17, 2)).astype(np.float32)
    for which in (0, 1, 6):
        expected = np.zeros((3, 2), dtype=np.float32)
        for i in summation_order(17, which):
            expected = expected + a[0, :, i : i + 1] * b[0, i : i + 1, :]
        got = ordered_matmul(a, b, (which,))
        np.testing.assert_array_equal(got[0], expected)
        total = ordered_sum(a, (which,))[0, :, 0]
        expected_sum = np.zeros(3, dtype=np.float32)
        for i in summation_order(17, which):
            expected_sum = expected_sum + a[0, :, i]
        np.testing.assert_array_equal(total, expected_sum)


def test_the_orders_computed_at_once_are_each_order_alone():
    x, params = hostile_inputs("batched", "float32")
    H = PRESETS["batched"].n_heads
    together = references(reordered_multi_head, x, *params.values(), H)
    for which in (0, 1, 11):
        alone = reordered_multi_head(x, *params.values(), H, which=which)
        for a, b in zip(together[which], alone, strict=True):
            np.testing.assert_array_equal(a, b)
    errors = {max_abs_diff(t[0], together[0][0]) for t in together}
    assert len(errors) > N_ORDERS // 2  # the orders round differently here


def test_half_precision_rounds_where_the_policy_rounds():
    """q, k, v, the merged heads, the output and the weights in the dtype,
    the rest in float32: equal to NumPy's attention in float16 here."""
    x, p = random_inputs(55, (2,), 6, 8)
    half = [a.astype(np.float16) for a in (x, *p.values())]
    out, weights = reordered_multi_head(*half, 2)
    want_out, want_weights = impl_numpy.multi_head_attention(*half, 2)
    np.testing.assert_allclose(out, want_out.astype(np.float64), rtol=2e-3, atol=2e-3)
    assert np.array_equal(out, out.astype(np.float16).astype(np.float64))
    assert np.array_equal(weights, weights.astype(np.float16).astype(np.float64))
    np.testing.assert_allclose(weights, want_weights, rtol=2e-3, atol=2e-3)


def test_tf32_keeps_ten_bits_of_mantissa_rounded_to_nearest_even():
    ulp = 2.0**-10  # TF32's spacing at 1
    values = np.array(
        [1.0, 1 + ulp, 1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 2**-20, -3.0, 1e-40],
        dtype=np.float32,
    )
    expected = [1.0, 1 + ulp, 1.0, 1 + 2 * ulp, 1 + ulp, -3.0, 0.0]
    got = to_tf32(values)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got[:6], expected[:6])  # ties go to even
    assert abs(got[6]) < 1e-39  # a subnormal stays tiny
    inf = np.array([np.inf, -np.inf, np.nan], dtype=np.float32)
    np.testing.assert_array_equal(to_tf32(inf)[:2], inf[:2])
    assert np.isnan(to_tf32(inf)[2])


# The derived tolerance: the table is its floor, the references its measure.


def test_the_derived_tolerance_is_the_multiple_of_the_worst_reference():
    expected = np.zeros(4)
    small, large = np.full(4, 1e-7), np.array([0.0, 3e-3, 0.0, 0.0])
    derived = derived_tolerance([small, large], expected, "float32")
    assert derived == Tolerance(
        atol=DERIVED_MULTIPLE * 3e-3, rtol=TOLERANCES["float32"].rtol
    )
    assert derived_tolerance([small], expected, "float32") == TOLERANCES["float32"]
    with pytest.raises(ValueError, match="not finite"):
        derived_tolerance([np.array([np.nan, 0, 0, 0])], expected, "float32")


def test_the_float32_level_follows_the_float32_matmuls():
    assert float32_matmul() == "float32"
    try:
        assert use_float32_matmul("tf32") == "float32"
        assert tolerance("float32") == TF32
        assert tolerance("float16") == TOLERANCES["float16"]  # only float32 moves
    finally:
        use_float32_matmul("float32")
    assert tolerance("float32") == TOLERANCES["float32"]
    with pytest.raises(ValueError, match="'tf16'"):
        use_float32_matmul("tf16")


def test_the_multiple_covers_the_spread_of_the_largest_of_n_orders():
    """DERIVED_MULTIPLE is FlashAttention's 2 times the spread of the largest
    error of N_ORDERS references from one set of orders to the next: on the
    hostile float32 presets, over ten sets of N_ORDERS orders, the largest set
    stays within 2x of the smallest (1.88 on `long`, too slow to test here)."""
    for preset in ("full", "batched"):
        x, params = hostile_inputs(preset, "float32")
        H = PRESETS[preset].n_heads
        exact = [w.astype(np.float64) for w in params.values()]
        oracle, _ = reference_multi_head(x.astype(np.float64), *exact, H)
        orders = range(10 * N_ORDERS)
        outs, _ = reordered_multi_head(x, *params.values(), H, which=orders)
        errors = np.abs(outs - oracle).reshape(10, N_ORDERS, -1).max(axis=(1, 2))
        assert errors.max() <= DERIVED_MULTIPLE / 2 * errors.min(), (preset, errors)


@functools.cache
def table_problems(precision):
    """The presets and TABLE_PROBLEMS random problems, with their oracle on the
    inputs rounded to `precision` (float32's serve TF32 too)."""
    return [*preset_problems(), *random_problems(precision, TABLE_PROBLEMS)]


# The table: at least TABLE_MULTIPLE times the references' worst relative error
# on the presets and TABLE_PROBLEMS seeded random problems, in every dtype and
# with TF32 matmuls (python -m shared.reordered prints the numbers).


@pytest.mark.parametrize(
    ("precision", "matmul"),
    [(d, "float32") for d in TOLERANCES] + [("float32", "tf32")],
    ids=[*TOLERANCES, "tf32"],
)
def test_the_table_is_at_least_twice_the_references_worst_error(precision, matmul):
    level = TF32 if matmul == "tf32" else TOLERANCES[precision]
    worst = worst_errors(precision, table_problems(precision), matmul)
    for kind, error in worst.items():
        assert TABLE_MULTIPLE * error <= level.atol, (precision, matmul, kind, error)
        assert error > 0  # the references do err in this dtype
