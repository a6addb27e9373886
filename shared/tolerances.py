"""The one tolerance table, by dtype, used by every test and by `triptych run`,
and the tolerance derived for one test's own inputs where the table is not
enough (docs/suite.md, "How a tolerance is derived").

A result `a` agrees with an expected `e` when, element by element,
|a - e| <= atol + rtol * |e| (the rule of `numpy.allclose`).

Every level comes from one method, the one FlashAttention's and PyTorch's
attention tests use: what a same-dtype computation in another operation order
gets wrong against a float64 reference, times a multiple. Here the same-dtype
computations are `shared.reordered`'s references, which sum in N_ORDERS fixed
orders with NumPy's elementwise arithmetic only, so that the levels are the
same on every machine (they do not depend on the BLAS, the CPU or the GPU).

- The table holds when it is at least TABLE_MULTIPLE (2, FlashAttention's
  factor) times the worst relative error, |a - e| / (1 + |e|), of the references
  over the presets and 200 seeded random problems (the property tests' kind).
  tests/test_tolerance_table.py checks it; `python -m shared.reordered` prints it.
- One test's derived tolerance (`derived_tolerance`) is DERIVED_MULTIPLE times
  the largest error of the references on that test's own inputs, never below
  the table: for scores near the top of a dtype, and for gradients, whose
  sums over every position of a batch outgrow the table (on random problems,
  the references' float32 gradients err by up to 5.9e-5).
- "tf32" is float32 with matmuls in TF32 (a GPU's tensor cores): `pytest
  --device cuda --tf32` puts it in float32's place (`use_float32_matmul`).

| dtype    | eps     | presets | 200 random problems | x 2     | atol = rtol |
|----------|---------|---------|---------------------|---------|-------------|
| float64  | 2.2e-16 | 1.7e-15 | 8.1e-15             | 1.6e-14 | 1e-12       |
| float32  | 1.2e-7  | 1.0e-6  | 6.4e-6              | 1.3e-5  | 2e-5        |
| tf32     | 9.8e-4  | 1.2e-3  | 7.0e-3              | 1.4e-2  | 2e-2        |
| float16  | 9.8e-4  | 1.3e-3  | 5.8e-3              | 1.2e-2  | 2e-2        |
| bfloat16 | 7.8e-3  | 1.0e-2  | 3.7e-2              | 7.3e-2  | 1e-1        |

(the references' worst of weights, outputs and entropy; docs/suite.md has each.)
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
    "float32": Tolerance(atol=2e-5, rtol=2e-5),
    "float16": Tolerance(atol=2e-2, rtol=2e-2),
    "bfloat16": Tolerance(atol=1e-1, rtol=1e-1),
}
TF32 = Tolerance(atol=2e-2, rtol=2e-2)
"""float32 with TF32 matmuls: in float32's place under `use_float32_matmul("tf32")`."""
TABLE_MULTIPLE = 2.0
DERIVED_MULTIPLE = 4.0
_FLOAT32 = {"float32": TOLERANCES["float32"], "tf32": TF32}
_float32_matmul = ["float32"]


def use_float32_matmul(precision: str) -> str:
    """Say how float32 matmuls are computed, "float32" (the default) or "tf32",
    and so which level `tolerance("float32")` gives; returns the previous one.
    Only the test session calls it (tests/conftest.py, for --tf32)."""
    if precision not in _FLOAT32:
        raise ValueError(f"float32 matmuls are {list(_FLOAT32)}, not {precision!r}")
    previous = _float32_matmul[0]
    _float32_matmul[0] = precision
    return previous


def float32_matmul() -> str:
    """ "float32" or "tf32": how the suite takes float32 matmuls to be computed."""
    return _float32_matmul[0]


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
    if key == "float32":
        return _FLOAT32[_float32_matmul[0]]
    return TOLERANCES[key]


def max_abs_diff(actual, expected) -> float:
    """Largest |actual - expected|, compared in float64."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(a - e), initial=0.0))


def derived_tolerance(
    references, oracle, dtype, multiple=DERIVED_MULTIPLE
) -> Tolerance:
    """The tolerance of one test, derived from its own inputs.

    Args:
        references: same-dtype results in other operation orders, a sequence
            of arrays (`shared.reordered`'s N_ORDERS references).
        oracle: the float64 oracle's result on the same inputs.
        dtype: the dtype computed in; its table entry is the floor.
        multiple: how many times the references' largest error to allow:
            DERIVED_MULTIPLE = FlashAttention's factor 2 x 2 for how much the
            worst of N_ORDERS orders varies between sets of N_ORDERS (at most
            2x over ten sets; tests/test_tolerance_table.py).

    Returns:
        Tolerance(atol = max(table atol, multiple * max_i max |ref_i - oracle|),
        rtol = table rtol), for `assert_close` in place of a dtype.
    """
    table = tolerance(dtype)
    shape = np.shape(oracle)
    for reference in references:
        if isinstance(reference, tuple | dict) or np.shape(reference) != shape:
            raise ValueError(
                "derived_tolerance takes one array per reference, each the shape "
                f"of the oracle {shape}: pick one result of each, e.g. "
                "[out for out, _ in references(...)]"
            )
    error = max((max_abs_diff(r, oracle) for r in references), default=0.0)
    if not np.isfinite(error):
        raise ValueError("a reference is not finite: no tolerance derives from it")
    return Tolerance(atol=max(table.atol, multiple * error), rtol=table.rtol)


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


# Gradients derive their tolerance on their own inputs (`derived_tolerance` of
# shared/reordered/backward.py's references): a weight's gradient sums over
# every position of every batch item, and on random problems the references'
# float32 gradients err by up to 5.9e-5 relative, beyond the table.
#
# The hand-written NumPy backward is also checked against central finite
# differences of the float64 forward, (f(a + h) - f(a - h)) / 2h. With step
# h = 1e-5 the truncation error (order h**2) and the rounding error (order
# eps / h) are both near 1e-10 relative; a wrong term in a backward shows up at
# order 1. So the check asks for a relative error (largest |difference| over the
# entries checked, divided by the largest |gradient entry|) below 1e-6.
FINITE_DIFFERENCE_STEP = 1e-5
FINITE_DIFFERENCE_RTOL = 1e-6
