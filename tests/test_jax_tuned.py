"""impl_jax/tuned.py's `on_threads`: groups of heads, each a program called
from a thread of its own, the layer's out the sum of their projections; equal
to the float64 oracle for 2 and 4 groups (and 3 workers, which make 2), with
NaN only in the rows that attend a value that is not finite; bad `workers`
refused when the function is made. The rule for the groups: test_tuned.py."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import PARAM_NAMES, random_inputs
from test_tuned import CASES, H, _oracle

import impl_jax
from impl_jax import tuned as tuned_jax
from shared import assert_close
from shared.reference import reference_multi_head

C = 16


@pytest.fixture
def pools(monkeypatch):
    """The threads of each pool `on_threads` starts."""
    started = []

    class Recorded(tuned_jax.ThreadPoolExecutor):
        def __init__(self, max_workers, *args, **kwargs):
            started.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(tuned_jax, "ThreadPoolExecutor", Recorded)
    return started


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_heads_on_threads_equal_the_oracle(pools, dtype, workers):
    """H = 4 heads in 2, 2 and 4 groups, each called from a thread of its own:
    the sum of the groups' projections is the layer's out."""
    attention = tuned_jax.on_threads(tuned_jax.multi_head_tuned_attention_jit, workers)
    for batch, T, block_size in CASES:
        x, p, expected = _oracle(batch, T)
        args = [
            impl_jax.from_numpy(a, dtype) for a in (x, *(p[n] for n in PARAM_NAMES))
        ]
        out = impl_jax.to_numpy(attention(*args, H, block_size=block_size))
        assert out.dtype == np.dtype(dtype)
        assert_close(out, expected, dtype, f"{workers} workers, block {block_size}")
    assert pools == [4 if workers == 4 else 2] * len(CASES)


def test_heads_on_threads_make_nan_only_the_rows_that_attend_it(pools):
    x, p = random_inputs(3, (), 10, C)
    x[6] = np.nan
    args = [
        impl_jax.from_numpy(a, "float64") for a in (x, *(p[n] for n in PARAM_NAMES))
    ]
    attention = tuned_jax.on_threads(tuned_jax.multi_head_tuned_attention_jit, 2)
    out = impl_jax.to_numpy(attention(*args, H, block_size=4))
    expected, _ = reference_multi_head(x[:6], *(p[n] for n in PARAM_NAMES), H)
    assert_close(out[:6], expected, "float64", "the rows before the NaN")
    assert np.isnan(out[6:]).all()
    assert pools == [2]


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_bad_workers_are_refused_when_the_function_is_made(workers):
    message = f"workers must be a positive integer, got {workers!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        tuned_jax.on_threads(tuned_jax.multi_head_tuned_attention_jit, workers)
