"""What only the NumPy module has: its own initialization (torch and flax
initialize their modules as their frameworks do)."""

from __future__ import annotations

import numpy as np

import impl_numpy


def test_a_new_module_draws_n_0_1_over_c_weights_from_its_seed():
    module = impl_numpy.CausalSelfAttention(32, 4)  # seed 0, float32, scaled
    assert module.n_heads == 4 and module.scale is True
    rng = np.random.default_rng(0)
    for w in module.projections():  # w_q, w_k, w_v, w_o, drawn in that order
        expected = (rng.standard_normal((32, 32)) / np.sqrt(32)).astype(np.float32)
        assert w.dtype == np.float32
        np.testing.assert_array_equal(w, expected)
    other = impl_numpy.CausalSelfAttention(32, 4, seed=1, dtype=np.float64)
    rng = np.random.default_rng(1)
    assert other.w_q.dtype == np.float64
    np.testing.assert_array_equal(other.w_q, rng.standard_normal((32, 32)) / 32**0.5)


def test_a_new_module_has_no_biases_unless_asked_and_then_zeros_in_its_dtype():
    plain = impl_numpy.CausalSelfAttention(8, 2)
    assert plain.biases() == {"b_q": None, "b_k": None, "b_v": None, "b_o": None}
    for dtype in (np.float32, np.float64):
        biased = impl_numpy.CausalSelfAttention(8, 2, bias=True, dtype=dtype)
        for b in biased.biases().values():
            assert b.dtype == dtype
            np.testing.assert_array_equal(b, np.zeros(8))


def test_a_module_built_with_every_option_away_from_its_default():
    """bias=True, scale=False, seed=5 and dtype=np.float64 at once: the
    weights of seed 5 in float64, biases in place, and a forward that uses
    both and divides by nothing (tests/test_options.py registers it)."""
    from helpers import options_problem

    from shared import assert_close
    from shared.reference import reference_multi_head

    case = options_problem()
    module = impl_numpy.CausalSelfAttention(
        8, case.H, bias=True, scale=False, seed=5, dtype=np.float64
    )
    rng = np.random.default_rng(5)
    for w in module.projections():
        np.testing.assert_array_equal(w, rng.standard_normal((8, 8)) / np.sqrt(8))
    for name, b in module.biases().items():
        assert b.dtype == np.float64
        b[...] = case.biases[name]  # the forward reads them in place
    out, weights = module(case.x)
    expected = reference_multi_head(
        case.x, *module.projections(), case.H, scale=False, biases=case.biases
    )
    assert out.dtype == weights.dtype == np.float64
    assert_close(out, expected[0], "float64", "out")
    assert_close(weights, expected[1], "float64", "weights")
