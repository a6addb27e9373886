"""Properties over random problems (hypothesis), one body per backend.

Each example draws a problem: batch axes, T from 1 to 64, heads and head
width, a seed for the inputs, a dtype, scale on or off, and a mask (none, one
shared by the batch, one per batch item, one per head, or key padding from
random lengths). The properties:

1. the invariants: weights of rows that may attend something sum to 1, of
   rows that may not are all exactly 0; nothing masked (above the diagonal or
   by the mask) gets weight; entropy is in [0, log(number of keys attended)];
   everything finite; the backend agrees with the float64 oracle (on the
   inputs rounded to the dtype) within the tolerance table;
2. masked positions never leak: poisoning x after position i (with NaN, Inf
   or +-1e10) leaves every output and weight up to i unchanged, bit for bit,
   and a NaN reaches exactly the later rows that attend something.

Both properties are checked on every drawn problem, by one test: in JAX a
new shape is a new compile, and the poisoned second call of property 2 has the
shapes of the first, so each problem compiles once for both.

Profiles (tests/conftest.py): "ci", the default, 200 derandomized problems per
backend (100 in JAX, where each is a compile: CI_EXAMPLES_COMPILED), each
checked for both properties; "fuzz" (tox -e fuzz), 2,000 from a
fixed, printed seed. JAX runs its jitted exports, the three of a problem
(the key-padding mask, the attention, the entropy) in one jitted program: a
new shape is a new compile either way, and one compile of a whole function is
cheaper than eager JAX's one per operation.
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
from typing import NamedTuple

import numpy as np
from helpers import jitted, name_of
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import assert_close
from shared.dtypes import np_dtype
from shared.reference import reference_multi_head
from shared.tolerances import TOLERANCES, tolerance

MASK_KINDS = ("causal only", "shared", "per item", "per head", "key padding")


class Problem(NamedTuple):
    """One drawn attention problem; arrays come from `arrays()`."""

    batch: tuple[int, ...]
    T: int
    H: int
    D: int
    seed: int
    dtype: str
    scale: bool
    mask_kind: str

    def arrays(self):
        """x (*batch, T, C), the four (C, C) weights and the mask, from the seed.

        The mask is None (causal only) or boolean and broadcasts to
        (*batch, H, T, T); key padding also returns the lengths (else None).
        """
        rng = np.random.default_rng(self.seed)
        C = self.H * self.D
        x = rng.standard_normal((*self.batch, self.T, C))
        weights = [rng.standard_normal((C, C)) / math.sqrt(C) for _ in range(4)]
        density = rng.uniform(0.0, 1.0)  # 0: every row empty; 1: causal only
        shape = {
            "causal only": None,
            "shared": (self.T, self.T),
            "per item": (*self.batch, 1, self.T, self.T),
            "per head": (*self.batch, self.H, self.T, self.T),
        }.get(self.mask_kind)
        lengths = None
        if self.mask_kind == "key padding":
            lengths = rng.integers(0, self.T + 1, size=self.batch)
            mask = (np.arange(self.T) < lengths[..., None])[..., None, None, :]
        else:
            mask = None if shape is None else rng.random(shape) < density
        return x, weights, mask, lengths


problems = st.builds(
    Problem,
    batch=st.sampled_from(((), (1,), (2,), (2, 1))),
    T=st.sampled_from(range(1, 65)),  # spread evenly: integers() favours 1
    H=st.sampled_from((1, 2, 4)),
    D=st.sampled_from(range(1, 9)),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(tuple(TOLERANCES)),
    scale=st.booleans(),
    mask_kind=st.sampled_from(MASK_KINDS),
)


_calls = itertools.count(1)


def forget_compiles_now_and_then(backend):
    """Drop JAX's compiled code now and then: each new shape compiles a few MB
    of it, and 2,000 examples (tox -e fuzz) would hold about 10 GB. Every 100
    calls this test's own program, every 500 all of JAX's caches: the "ci"
    profile's 400 calls never empty the session's, which the tests after this
    one would otherwise compile again (about 21 s of the jax env's XLA time)."""
    if name_of(backend) != "jax":
        return
    calls = next(_calls)
    if calls % 500 == 0:
        sys.modules["jax"].clear_caches()
    elif calls % 100 == 0:
        one_program(backend).clear_cache()


def attend(backend, problem, x, weights, mask, lengths):
    """multi_head_attention and the entropy on NumPy inputs; NumPy results."""
    forget_compiles_now_and_then(backend)
    args = [backend.from_numpy(a, problem.dtype) for a in (x, *weights)]
    if lengths is not None:
        lengths = backend.from_numpy(lengths)
    elif mask is not None:
        mask = backend.from_numpy(mask)
    results = one_program(backend)(
        args, mask, lengths, T=problem.T, H=problem.H, scale=problem.scale
    )
    return tuple(backend.to_numpy(a) for a in results)


@functools.cache
def one_program(backend):
    """The key-padding mask (through the backend's own helper), the attention
    and its entropy: in JAX one jitted program of the three jitted exports, so
    a problem compiles once, not three times."""

    def run(args, mask, lengths, *, T, H, scale):
        if lengths is not None:
            mask = jitted(backend, "key_padding_mask")(lengths, T, multi_head=True)
        out, weights = jitted(backend, "multi_head_attention")(
            *args, H, mask, scale=scale
        )
        return out, weights, jitted(backend, "attention_entropy")(weights)

    if name_of(backend) == "jax":
        return sys.modules["jax"].jit(run, static_argnames=("T", "H", "scale"))
    return run


def allowed_keys(problem, mask):
    """(*batch, H, T, T) booleans: the causal mask and the given one."""
    T = problem.T
    allowed = np.tril(np.ones((T, T), dtype=bool))
    if mask is not None:
        allowed = allowed & mask
    return np.broadcast_to(allowed, (*problem.batch, problem.H, T, T))


CI_EXAMPLES_COMPILED = 100
"""Problems drawn under the "ci" profile where each is a compile of its own
(JAX: about 0.2 s each, 200 of them were the jax env's longest test); NumPy
and torch draw the profile's 200, `tox -e fuzz` 2,000 in every backend."""


def examples(backend) -> int:
    """How many problems `backend` is given: the profile's, but
    CI_EXAMPLES_COMPILED under "ci" where a new shape compiles."""
    if settings.get_current_profile_name() == "ci" and name_of(backend) == "jax":
        return CI_EXAMPLES_COMPILED
    return settings.default.max_examples


def test_each_problem_keeps_the_invariants_and_leaks_nothing(backend):
    """Both properties on each drawn problem: a new shape is a new compile in
    JAX, so one problem checked twice compiles once."""

    @settings(max_examples=examples(backend))
    @given(
        problem=problems,
        position=st.integers(0, 63),
        poison=st.sampled_from((math.nan, math.inf, -math.inf, 1e10, -1e10)),
    )
    def each(problem, position, poison):
        check_problem(backend, problem, position, poison)

    each()


def check_problem(backend, problem, position, poison):
    """Property 1 and property 2 on one drawn problem."""
    x, weights, mask, lengths = problem.arrays()
    first = attend(backend, problem, x, weights, mask, lengths)
    keeps_the_invariants(backend, problem, x, weights, mask, first)
    leaks_nothing(backend, problem, x, weights, mask, lengths, first, position, poison)


def keeps_the_invariants(backend, problem, x, weights, mask, results):
    """Property 1, on what `attend` returned for the problem."""
    out, attention, entropy = results
    where = f"{name_of(backend)} {problem}"
    assert out.dtype == attention.dtype == entropy.dtype == np_dtype(problem.dtype)
    out, attention = out.astype(np.float64), attention.astype(np.float64)
    entropy = entropy.astype(np.float64)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(attention)), where
    allowed = allowed_keys(problem, mask)
    attended = allowed.sum(axis=-1)  # (*batch, H, T) keys each row may attend
    assert np.all(attention[~allowed] == 0.0), where  # masked: exactly zero
    empty = attended == 0
    assert np.all(attention[empty] == 0.0), where
    assert np.all(out[empty.all(axis=-2)] == 0.0), where  # empty in every head
    sums = attention.sum(axis=-1)[~empty]
    assert_close(sums, np.ones_like(sums), problem.dtype, f"row sums, {where}")
    atol = tolerance(problem.dtype).atol
    assert np.all(entropy >= -atol), where
    assert np.all(entropy <= np.log(np.maximum(attended, 1)) + atol), where
    # the oracle sees exactly the numbers the backend got
    rounded = [a.astype(np_dtype(problem.dtype)).astype(np.float64) for a in weights]
    x = x.astype(np_dtype(problem.dtype)).astype(np.float64)
    ref_out, ref_weights = reference_multi_head(
        x, *rounded, problem.H, allowed, scale=problem.scale
    )
    assert_close(attention, ref_weights, problem.dtype, f"weights, {where}")
    assert_close(out, ref_out, problem.dtype, f"out, {where}")


def leaks_nothing(
    backend, problem, x, weights, mask, lengths, results, position, poison
):
    """Property 2: x poisoned after position i, against `results` unpoisoned."""
    i = position % problem.T
    out, attention, _ = results
    x = x.copy()
    x[..., i + 1 :, :] = poison
    with np.errstate(invalid="ignore", over="ignore"):  # NumPy's warnings
        out2, attention2, _ = attend(backend, problem, x, weights, mask, lengths)
    where = f"{name_of(backend)} {problem} i={i} poison={poison}"
    np.testing.assert_array_equal(out2[..., : i + 1, :], out[..., : i + 1, :], where)
    np.testing.assert_array_equal(
        attention2[..., : i + 1, :], attention[..., : i + 1, :], where
    )
    if math.isnan(poison):  # a later row is NaN iff some head lets it attend
        attends = allowed_keys(problem, mask).any(axis=-1).any(axis=-2)  # (..., T)
        later = out2[..., i + 1 :, :].astype(np.float64)
        assert np.all(np.isnan(later[attends[..., i + 1 :]])), where
        assert np.all(later[~attends[..., i + 1 :]] == 0.0), where
