"""What only the NumPy backward has: it recomputes the forward by hand, and so
must round where the forward rounds (torch and JAX differentiate their forward
itself, tests/test_torch_backward.py and tests/test_jax_backward.py)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import PARAM_NAMES, gradient_case

import impl_numpy
from shared.dtypes import np_dtype


@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
def test_d_w_o_is_taken_from_the_merged_heads_rounded_to_x_dtype(precision):
    # out = merged @ w_o, so d_w_o = merged^T @ d_out, bit for bit, with the
    # merged heads rounded to x's dtype as the forward rounds them
    x, params, H, d_out = gradient_case("tiny")  # float64, x (T, C)
    dtype = np_dtype(precision)
    x, d_out = x.astype(dtype), d_out.astype(dtype)
    w = [params[name].astype(dtype) for name in PARAM_NAMES]
    a = impl_numpy.attention
    q, k, v = (a.split_heads(a.project(x, w_i), H) for w_i in w[:3])
    heads, _ = a.attend(q, k, v, a.allowed_keys(x.shape[-2]))
    merged = a.merge_heads(heads.astype(x.dtype)).astype(np.float32)  # (T, C)
    expected = (merged.T @ d_out.astype(np.float32)).astype(dtype)
    grads = impl_numpy.multi_head_attention_backward(x, *w, H, d_out)
    np.testing.assert_array_equal(grads["w_o"], expected)
