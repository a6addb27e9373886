"""The one tolerance table, by dtype, used by every test and by `triptych run`.

A result `a` agrees with an expected `e` when, element by element,
|a - e| <= atol + rtol * |e| (the rule of `numpy.allclose`). The float64 and
float32 levels are about 4,500 and 84 units in the last place of 1.0
(1e-12 / 2.2e-16, 1e-5 / 1.2e-7), enough for the different summation orders
of BLAS, XLA and ATen, far below any real bug.

The float16 and bfloat16 levels are measured: at least 3x the worst error
made against the float64 oracle, as the largest |a - e| / (1 + |e|), by every
backend on every preset (against the golden files, whose inputs are not
rounded) and by NumPy on 1,500 random problems (T 1 to 64, 1 to 4 heads,
random masks, scale on and off; against the oracle on the rounded inputs).
The three backends err alike in half precision (to the digits shown, on the
presets and on 60 of the random problems): rounding q, k, v and the merged
heads to the dtype outweighs their float32 differences.

| dtype    | eps     | worst on presets | worst on random problems | atol = rtol |
|----------|---------|------------------|--------------------------|-------------|
| float64  | 2.2e-16 | 1.7e-15          | 1.8e-15                  | 1e-12       |
| float32  | 1.2e-7  | 6.2e-7           | 1.6e-6                   | 1e-5        |
| float16  | 9.8e-4  | 1.3e-3           | 4.9e-3                   | 2e-2        |
| bfloat16 | 7.8e-3  | 1.0e-2           | 3.1e-2                   | 1e-1        |
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shared.dtypes import dtype_key


class Tolerance(NamedTuple):
    """Absolute and relative tolerance of one dtype."""

    atol: float
    rtol: float


TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(atol=1e-12, rtol=1e-12),
    "float32": Tolerance(atol=1e-5, rtol=1e-5),
    "float16": Tolerance(atol=2e-2, rtol=2e-2),
    "bfloat16": Tolerance(atol=1e-1, rtol=1e-1),
}


def tolerance(dtype) -> Tolerance:
    """The tolerance of a dtype given by name ('float32') or as any dtype object.

    A Tolerance given instead of a dtype (e.g. from `derived_tolerance`) is
    returned as it is, so `is_close` and `assert_close` take either.
    """
    if isinstance(dtype, Tolerance):
        return dtype
    key = dtype_key(dtype)
    if key not in TOLERANCES:
        raise KeyError(
            f"no tolerance for dtype {key!r}; the table has {list(TOLERANCES)}"
        )
    return TOLERANCES[key]


def max_abs_diff(actual, expected) -> float:
    """Largest |actual - expected|, compared in float64."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(a - e), initial=0.0))


# Hostile magnitudes (scores of 1e4 in float32, near the top of float16's
# range) amplify rounding: a score s is only known to about eps/2 * |s| (half
# a unit in its last place), so the weights move by that much, beyond the
# table. There the tolerance is derived as PyTorch's own attention tests
# derive theirs (test_transformers.py: a reference computed in the low
# precision, its deviation from a float64 one, times a fudge factor):
# DERIVED_MULTIPLE times the largest error that a plain computation in the
# same dtype makes against the float64 oracle on the same inputs, and never
# below the table's level. Measured on the presets, the backends' error is at
# most the plain computation's (equal where the arithmetic is the same, far
# below it where their float32 softmax keeps what a half-precision one loses:
# batched, and float16 long); the measurements are in docs/differences.md.
DERIVED_MULTIPLE = 4.0


def derived_tolerance(plain, oracle, dtype, multiple=DERIVED_MULTIPLE) -> Tolerance:
    """The tolerance for inputs whose magnitudes amplify rounding.

    Args:
        plain: a plain computation's result, every operation in `dtype`.
        oracle: the float64 oracle's result on the same (dtype-rounded) inputs.
        dtype: the dtype computed in; its table entry is the floor.
        multiple: how many times the plain computation's error to allow.

    Returns:
        Tolerance(atol = max(table atol, multiple * max |plain - oracle|),
        rtol = table rtol), for `assert_close` in place of a dtype.
    """
    table = tolerance(dtype)
    atol = max(table.atol, multiple * max_abs_diff(plain, oracle))
    return Tolerance(atol=atol, rtol=table.rtol)


def is_close(actual, expected, dtype) -> bool:
    """True when every element agrees within the tolerance of `dtype`."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        return False
    atol, rtol = tolerance(dtype)
    return bool(np.all(np.abs(a - e) <= atol + rtol * np.abs(e)))


class Miss(NamedTuple):
    """The element where an array misses its expected values the most."""

    index: tuple[int, ...]
    got: float
    expected: float
    difference: float  # the largest |actual - expected| of the whole array


def largest_miss(actual, expected, dtype) -> Miss | None:
    """None when every element agrees within the tolerance of `dtype` (or a
    Tolerance); otherwise the element that exceeds it by the most (a NaN is
    the worst miss). The arrays must have one shape."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if is_close(a, e, dtype):
        return None
    atol, rtol = tolerance(dtype)
    excess = np.abs(a - e) - (atol + rtol * np.abs(e))
    excess = np.where(np.isnan(excess), np.inf, excess)  # a NaN is the worst miss
    where = np.unravel_index(np.argmax(excess), a.shape)
    return Miss(
        tuple(int(i) for i in where),
        float(a[where]),
        float(e[where]),
        max_abs_diff(a, e),
    )


def assert_close(actual, expected, dtype, what: str = "result") -> None:
    """Raise AssertionError, saying where and by how much, unless `is_close`."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise AssertionError(f"{what}: shape {a.shape} != expected {e.shape}")
    miss = largest_miss(a, e, dtype)
    if miss is None:
        return
    atol, rtol = tolerance(dtype)
    name = "derived" if isinstance(dtype, Tolerance) else dtype_key(dtype)
    raise AssertionError(
        f"{what} differs beyond the {name} tolerance "
        f"(atol={atol:g}, rtol={rtol:g}): max |diff| = {miss.difference:.3g}; "
        f"at index {miss.index} got {miss.got!r}, expected {miss.expected!r}"
    )


# Gradients are held to the same table: the backward functions of every backend
# must agree with each other and with the float64 NumPy backward within
# TOLERANCES[dtype], no multiple. Measured with `triptych grad`'s seeded
# standard-normal d_out on every preset (as |diff| / (atol + rtol * |expected|),
# worst element), float32 gradients use at most 0.71 of the float32 level (the
# `long` preset, T = 256, whose weight gradients sum 256 positions; 0.18 to 0.40
# on the others), and float64 gradients at most 0.01 of the float64 level
# (largest |diff| 1.3e-14 on gradients of size about 10).
#
# The hand-written NumPy backward is also checked against central finite
# differences of the float64 forward, (f(a + h) - f(a - h)) / 2h. With step
# h = 1e-5 the truncation error (order h**2) and the rounding error (order
# eps / h) are both near 1e-10 relative; a wrong term in a backward shows up at
# order 1. So the check asks for a relative error (largest |difference| over the
# entries checked, divided by the largest |gradient entry|) below 1e-6.
FINITE_DIFFERENCE_STEP = 1e-5
FINITE_DIFFERENCE_RTOL = 1e-6
