"""The orders every sum of the references is taken in, and the sums themselves:
loops of NumPy elementwise additions, never a BLAS call, so that they give the
same bits on every IEEE machine (shared/reordered/__init__.py says why)."""

from __future__ import annotations

import functools

import numpy as np

N_ORDERS = 24
"""How many references: forward, reversed, and 22 seeded shuffles of every sum.
The largest error of 24 varies by at most 2x from one set of 24 orders to the
next on the hostile presets (3x for sets of 12), which DERIVED_MULTIPLE covers."""
ORDER_SEED = 20241201
MATMUL_PRECISIONS = ("float32", "tf32")


@functools.cache
def summation_order(n: int, which: int) -> np.ndarray:
    """The order in which reference `which` (0 to N_ORDERS - 1) sums n terms:
    0 forward, 1 reversed, then shuffles seeded by ORDER_SEED, n and `which`."""
    if which == 0:
        return np.arange(n)
    if which == 1:
        return np.arange(n)[::-1].copy()
    return np.random.default_rng([ORDER_SEED, n, which]).permutation(n)


def orders_of(which) -> tuple[int, ...]:
    """`which` as a tuple of orders: one int, or several (computed at once)."""
    return (which,) if isinstance(which, int | np.integer) else tuple(which)


def to_tf32(a) -> np.ndarray:
    """float32 `a` rounded to TF32's 10 bits of mantissa (to nearest, ties to
    even), kept in float32: what a tensor core reads with TF32 on."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32)
    dropped = 13  # float32 keeps 23 bits of mantissa, TF32 10
    half = np.uint32(1 << (dropped - 1))
    odd = (bits >> np.uint32(dropped)) & np.uint32(1)
    with np.errstate(over="ignore"):
        rounded = (bits + half - np.uint32(1) + odd) & ~np.uint32((1 << dropped) - 1)
    finite = np.isfinite(np.asarray(a, dtype=np.float32))
    return np.where(finite, rounded, bits).view(np.float32)


def _permutations(n: int, orders) -> np.ndarray:
    return np.stack([summation_order(n, which) for which in orders])  # (O, n)


def _in_order(a, orders, axis):
    """a (1 or O, ...) with its (negative) `axis` taken in each order's
    summation_order: (O, ...). A gather, not arithmetic: the same bits."""
    perm = _permutations(a.shape[axis], orders)  # (O, n)
    if a.shape[0] == 1:  # one array for every order: take puts O before axis
        return np.moveaxis(np.take(a[0], perm, axis=axis), axis - 1, 0)
    return np.stack(
        [np.take(a_o, p, axis=axis) for a_o, p in zip(a, perm, strict=True)]
    )


def ordered_matmul(a, b, orders, matmul="float32"):
    """a (O, ..., M, K) @ b (O, ..., K, N), where O is one per order of
    `orders` (or 1, the same for every order): for each, K summed in its
    summation_order, each product and partial sum rounded to a's dtype
    (float32 or float64: the caller widens half precision first)."""
    if matmul == "tf32" and a.dtype == np.float32:
        a, b = to_tf32(a), to_tf32(b)
    a, b = _aligned(a, b)
    K = a.shape[-1]
    a, b = _in_order(a, orders, axis=-1), _in_order(b, orders, axis=-2)
    shape = np.broadcast_shapes((*a.shape[:-1], 1), (*b.shape[:-2], 1, b.shape[-1]))
    # the terms laid out term by term (K first), and every step in place: the
    # same products and sums as total = total + a_i * b_i, without a new array
    # for each of the K steps
    a_terms = np.ascontiguousarray(np.moveaxis(a, -1, 0))  # (K, ..., M)
    b_terms = np.ascontiguousarray(np.moveaxis(b, -2, 0))  # (K, ..., N)
    total = np.zeros(shape, dtype=np.result_type(a, b))
    term = np.empty_like(total)
    for i in range(K):  # the i-th term of each order's own sequence
        total += np.multiply(a_terms[i][..., None], b_terms[i][..., None, :], out=term)
    return total


def _aligned(a, b):
    """a and b with as many axes, added after the orders axis: a weight (O, C, D)
    beside x (O, ..., T, C) broadcasts over x's batch, not against it."""

    def padded(t, ndim):
        return t.reshape(t.shape[0], *(1,) * (ndim - t.ndim), *t.shape[1:])

    ndim = max(a.ndim, b.ndim)
    return padded(a, ndim), padded(b, ndim)


def ordered_sum(a, orders):
    """The sum over the last axis of a (O, ..., n), each order's in its
    summation_order, keeping the axis."""
    n = a.shape[-1]
    terms = np.ascontiguousarray(np.moveaxis(_in_order(a, orders, axis=-1), -1, 0))
    total = np.zeros(terms.shape[1:], dtype=a.dtype)  # (O, ...)
    for i in range(n):
        total += terms[i]
    return total[..., None]


def references(function, *args, matmul=None, **kwargs) -> list:
    """function(*args, **kwargs) in each of the N_ORDERS orders, computed at
    once: a list of N_ORDERS results, each what the function returns for one
    order (an (out, weights) tuple, a {name: gradient} dict), from which a
    derived tolerance reads one array each: `derived_tolerance([out for out, _
    in found], ...)`. `matmul` defaults to the suite's
    (`shared.tolerances.float32_matmul`: "tf32" under pytest --tf32)."""
    from shared.tolerances import float32_matmul

    matmul = float32_matmul() if matmul is None else matmul
    stacked = function(*args, which=range(N_ORDERS), matmul=matmul, **kwargs)
    if isinstance(stacked, dict):
        return [{name: g[i] for name, g in stacked.items()} for i in range(N_ORDERS)]
    if isinstance(stacked, np.ndarray):
        return list(stacked)
    return [tuple(part[i] for part in stacked) for i in range(N_ORDERS)]
