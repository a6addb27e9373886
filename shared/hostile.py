"""Hostile magnitudes: scores near the top of a dtype, and the yardstick that
`shared.tolerances.derived_tolerance` measures there, attention computed
plainly with every operation in the dtype. The test suite
(`test_hostile_magnitudes_do_not_overflow`) and `triptych check` both use them.

The largest |score| reached per dtype: 1e4 in float32; 6e4 in float16, 92% of
its largest value 65504 (and q @ k^T before the 1/sqrt(D) scale overflows
float16); 1e37 in bfloat16, 3% of its largest value 3.4e38, because q @ k^T
(float32, as in every framework) must not overflow before the scale divides
it by sqrt(D) <= 4. docs/differences.md ("Our numbers") has the measurements.
"""

from __future__ import annotations

import math

import numpy as np

from shared.dtypes import np_dtype

HOSTILE_SCORES = {"float32": 1e4, "float16": 6e4, "bfloat16": 1e37}


def max_score(x, params, H) -> float:
    """Largest |q . k / sqrt(D)| of x (..., T, C) and params["w_q"], ["w_k"]
    (C, C) with H heads, in float64."""
    x = np.asarray(x, dtype=np.float64)
    q, k = (x @ np.asarray(params[n], dtype=np.float64) for n in ("w_q", "w_k"))
    *batch, T, C = x.shape
    q = q.reshape(*batch, T, H, C // H).swapaxes(-3, -2)  # (..., H, T, D)
    k = k.reshape(*batch, T, H, C // H).swapaxes(-3, -2)  # (..., H, T, D)
    return float(np.abs(q @ k.swapaxes(-1, -2)).max() / math.sqrt(C // H))


def plain_attention(q, k, v):
    """Textbook causal attention of q, k, v (..., T, D), every operation in
    q's dtype (NumPy): out (..., T, D) and weights (..., T, T).

    Matmuls round to the dtype (NumPy sums half precision in float32, and its
    bfloat16 matmul returns float32); the softmax subtracts the row maximum,
    as any sane one does.
    """
    dtype = q.dtype
    T, D = q.shape[-2], q.shape[-1]
    q = (q / dtype.type(math.sqrt(D))).astype(dtype)  # scaled first, or q.k overflows
    scores = (q @ k.swapaxes(-1, -2)).astype(dtype)  # (..., T, T)
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    scores = scores.astype(dtype)
    with np.errstate(over="ignore"):  # s - max below -65504 is -inf: exp gives 0
        exp = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = (exp / exp.sum(axis=-1, keepdims=True)).astype(dtype)
    return (weights @ v).astype(dtype), weights


def plain_multi_head(x, w_q, w_k, w_v, w_o, H):
    """`plain_attention` with H heads between the four projections, every
    operation in x's dtype: out (..., T, C), weights (..., H, T, T).

    The yardstick of `derived_tolerance`: what a plain computation in this
    dtype gets wrong on these inputs.
    """
    dtype = x.dtype
    *batch, T, C = x.shape
    D = C // H

    def matmul(a, b):
        return (a @ b).astype(dtype)

    def split(t):
        return t.reshape(*batch, T, H, D).swapaxes(-3, -2)  # (..., H, T, D)

    q, k, v = (split(matmul(x, w)) for w in (w_q, w_k, w_v))
    out, weights = plain_attention(q, k, v)
    out = out.swapaxes(-3, -2).reshape(*batch, T, C)  # (..., T, C)
    return matmul(out, w_o), weights


# A partly non-finite value: one feature of one key's value overflows, the
# others stay finite (the tests, and the sharded problem of triptych shard).


def largest(precision) -> float:
    """The largest finite number of a dtype (float16 65504, bfloat16 3.39e38)."""
    import ml_dtypes

    return float(ml_dtypes.finfo(np_dtype(precision)).max)


def with_partly_infinite_value(x, params, j, poison, rest, precision):
    """x and projections in which key j's value, x[..., j, :] @ w_v multiplied in
    at least float32 and rounded to `precision`, is an overflow in column 0 only
    (poison "inf" or "-inf") and finite elsewhere: 0 (rest="zero") or a quarter
    of the dtype's largest (rest="huge"). No NaN: it would take inf - inf in the
    matmul's sum, whose order is the BLAS's to choose.

    x[..., j, :] becomes (s, 0, ..., 0), s half the dtype's largest; rows 0 of
    w_q and w_k become 0, so no query or key reads x's column 0 and only the
    value changes; the other positions stay finite. Returns float64 copies,
    x (..., T, C) and {name: (C, D)}; the caller checks the premise (tests/helpers.py's
    `projected`).
    """
    x, params = x.copy(), {name: w.copy() for name, w in params.items()}
    s = largest(precision) / 2
    x[..., j, :] = 0.0
    x[..., j, 0] = s
    for name in ("w_q", "w_k"):
        params[name][0] = 0.0
    params["w_v"][0] = 0.0 if rest == "zero" else 0.5
    params["w_v"][0, 0] = 4.0 if poison == "inf" else -4.0  # 4 s: twice the largest
    return x, params
