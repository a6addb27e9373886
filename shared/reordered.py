"""Same-dtype references in other operation orders: the yardstick of every
derived tolerance (docs/suite.md, "How a tolerance is derived").

Two correct float32 attentions differ because each sums its dot products and
softmax rows in an order of its own (a BLAS blocks and vectorises its sums, a
GPU splits them across threads), and how much that matters depends on the
inputs: scores of 1e4 move the weights a thousand times more than scores of 10.
So the suite asks what the dtype itself gets wrong on the very inputs of a
test: attention computed here in that dtype, rounded where the project's
precision policy rounds (docs/contract.md, "Dtypes"), but with every sum taken
in an order fixed here, N_ORDERS times in N_ORDERS orders. The largest error of
these references against the float64 oracle, times a multiple, is the
tolerance (`shared.tolerances.derived_tolerance`).

Every sum is a loop of NumPy elementwise additions, never a BLAS call, so the
references give the same bits on every IEEE machine: the tolerance a test
derives here is the tolerance it derives everywhere. (A yardstick computed by
the machine's own matmul was one sample of one BLAS's order: on a CPU where
OpenBLAS chose another kernel it came out 40 times smaller, and correct
backends failed; docs/suite.md has the numbers.)

`matmul="tf32"` rounds every matmul operand to TF32 (10 bits of mantissa, as
NVIDIA's tensor cores read float32 with TF32 on): the references of a GPU that
computes float32 matmuls that way.
"""

from __future__ import annotations

import functools
import math

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


def wide_dtype(dtype) -> np.dtype:
    """Where the policy computes: float32 for half precision, else the dtype."""
    return np.promote_types(np.dtype(dtype), np.float32)


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


def _orders(which) -> tuple[int, ...]:
    """`which` as a tuple of orders: one int, or several (computed at once)."""
    return (which,) if isinstance(which, int | np.integer) else tuple(which)


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


def _rounded(a, dtype):
    """a rounded to `dtype` and widened again: a rounding point of the policy."""
    return a.astype(dtype).astype(wide_dtype(dtype))


def _allowed(T, mask, causal=True):
    allowed = np.ones((T, T), dtype=bool)
    if causal:
        allowed = np.tril(allowed)
    return allowed if mask is None else allowed & np.asarray(mask, dtype=bool)


def _inputs(arrays, dtype):
    """Each array in `dtype`, with a leading axis of 1: the same for every order."""
    return [np.asarray(a).astype(dtype)[None] for a in arrays]


def _results(arrays, which):
    """float64 results: stacked by order, or the one order's if `which` is an int."""
    arrays = [a.astype(np.float64) for a in arrays]
    return [a[0] for a in arrays] if isinstance(which, int | np.integer) else arrays


def _attend(q, k, v, allowed, scale, orders, matmul):
    """Steps 3 to 7 in the wide dtype: out (O, ..., T, D), weights (O, ..., T, T)."""
    scores = ordered_matmul(q, k.swapaxes(-1, -2), orders, matmul)  # (O, ..., T, T)
    if scale:
        scores = scores / q.dtype.type(math.sqrt(q.shape[-1]))
    scores = np.where(allowed, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(row_max == -np.inf, 0, row_max)  # a fully masked row
    exp = np.exp(scores - row_max)
    total = ordered_sum(exp, orders)
    weights = exp / np.where(total > 0, total, 1)
    return ordered_matmul(weights, v, orders, matmul), weights


def reordered_single_head(
    x, w_q, w_k, w_v, mask=None, *, scale=True, which=0, matmul="float32"
):
    """`single_head_attention` in x's dtype, summed in order `which` (an int,
    or several at once: then each result has a leading axis, one per order):
    out (..., T, D) and weights (..., T, T), float64."""
    dtype, orders = np.asarray(x).dtype, _orders(which)
    x, w_q, w_k, w_v = _inputs((x, w_q, w_k, w_v), wide_dtype(dtype))
    q, k, v = (
        _rounded(ordered_matmul(x, w, orders, matmul), dtype) for w in (w_q, w_k, w_v)
    )
    allowed = _allowed(x.shape[-2], mask)
    out, weights = _attend(q, k, v, allowed, scale, orders, matmul)
    return _results((_rounded(out, dtype), _rounded(weights, dtype)), which)


def reordered_multi_head(
    x, w_q, w_k, w_v, w_o, H, mask=None, *, scale=True, which=0, matmul="float32"
):
    """`multi_head_attention` in x's dtype, summed in order `which` (as for
    `reordered_single_head`): out (..., T, C) and weights (..., H, T, T),
    float64."""
    dtype, orders = np.asarray(x).dtype, _orders(which)
    x, w_q, w_k, w_v, w_o = _inputs((x, w_q, w_k, w_v, w_o), wide_dtype(dtype))
    q, k, v = (
        _split(_rounded(ordered_matmul(x, w, orders, matmul), dtype), H)
        for w in (w_q, w_k, w_v)
    )
    allowed = _allowed(x.shape[-2], mask)
    heads, weights = _attend(q, k, v, allowed, scale, orders, matmul)
    merged = _rounded(_merge(heads), dtype)
    out = _rounded(ordered_matmul(merged, w_o, orders, matmul), dtype)
    return _results((out, _rounded(weights, dtype)), which)


def reordered_attention(
    q, k, v, mask=None, *, scale=True, causal=True, which=0, matmul="float32"
):
    """Steps 3 to 7 on per-head q, k, v (..., T, D) in q's dtype, summed in
    order `which`: out (..., T, D), weights (..., T, T), float64. For the
    blockwise attention, the kernels and the targets of triptych check."""
    dtype = np.asarray(q).dtype
    q, k, v = _inputs((q, k, v), wide_dtype(dtype))
    allowed = _allowed(q.shape[-2], mask, causal)
    out, weights = _attend(q, k, v, allowed, scale, _orders(which), matmul)
    return _results((_rounded(out, dtype), _rounded(weights, dtype)), which)


def reordered_entropy(weights, which=0, matmul="float32"):
    """`attention_entropy` of weights (..., T) in their dtype, summed in order
    `which`: (...,), float64. (`matmul` is for `references`: no matmul here.)"""
    dtype = np.asarray(weights).dtype
    (p,) = _inputs((weights,), wide_dtype(dtype))
    (entropy,) = _results((_entropy(p, dtype, _orders(which)),), which)
    return entropy


def _entropy(p, dtype, orders):
    """The entropy of p (O, ..., T), already wide, each order's own p summed in
    that order: (O, ...), rounded to `dtype`."""
    p_log_p = p * np.log(np.where(p > 0, p, 1))
    return _rounded(-ordered_sum(p_log_p, orders), dtype)[..., 0]


def reordered_multi_head_backward(
    x, w_q, w_k, w_v, w_o, H, d_out, mask=None, *, scale=True, which=0, matmul="float32"
):
    """The gradients of L = sum(out * d_out) for `multi_head_attention`, in x's
    dtype (float32 or float64), every sum in order `which`: {"x", "w_q", "w_k",
    "w_v", "w_o"}, float64. The same chain rule as impl_numpy/backward.py."""
    orders = _orders(which)
    x, w_q, w_k, w_v, w_o, d_out = _inputs(
        (x, w_q, w_k, w_v, w_o, d_out), np.asarray(x).dtype
    )
    q, k, v = (_split(ordered_matmul(x, w, orders, matmul), H) for w in (w_q, w_k, w_v))
    allowed = _allowed(x.shape[-2], mask)
    heads, weights = _attend(q, k, v, allowed, scale, orders, matmul)
    grads = {"w_o": _over_positions(_merge(heads), d_out, orders, matmul)}
    d_heads = _split(ordered_matmul(d_out, w_o.swapaxes(-1, -2), orders, matmul), H)
    d_q, d_k, d_v = _attend_backward(q, k, v, weights, d_heads, scale, orders, matmul)
    d_ys = map(_merge, (d_q, d_k, d_v))
    grads = _project_backward(x, (w_q, w_k, w_v), d_ys, orders, matmul) | grads
    return dict(zip(grads, _results(grads.values(), which), strict=True))


def reordered_single_head_backward(
    x, w_q, w_k, w_v, d_out, mask=None, *, scale=True, which=0, matmul="float32"
):
    """As `reordered_multi_head_backward`, for `single_head_attention`:
    {"x", "w_q", "w_k", "w_v"}, float64."""
    orders = _orders(which)
    x, w_q, w_k, w_v, d_out = _inputs((x, w_q, w_k, w_v, d_out), np.asarray(x).dtype)
    q, k, v = (ordered_matmul(x, w, orders, matmul) for w in (w_q, w_k, w_v))
    allowed = _allowed(x.shape[-2], mask)
    _, weights = _attend(q, k, v, allowed, scale, orders, matmul)
    d_q, d_k, d_v = _attend_backward(q, k, v, weights, d_out, scale, orders, matmul)
    grads = _project_backward(x, (w_q, w_k, w_v), (d_q, d_k, d_v), orders, matmul)
    return dict(zip(grads, _results(grads.values(), which), strict=True))


def reordered_attention_backward(
    q, k, v, d_out, mask=None, *, scale=True, causal=True, which=0, matmul="float32"
):
    """The gradients {"q", "k", "v"} of `reordered_attention` given d_out, float64."""
    orders = _orders(which)
    q, k, v, d_out = _inputs((q, k, v, d_out), np.asarray(q).dtype)
    allowed = _allowed(q.shape[-2], mask, causal)
    _, weights = _attend(q, k, v, allowed, scale, orders, matmul)
    grads = _attend_backward(q, k, v, weights, d_out, scale, orders, matmul)
    return dict(zip("qkv", _results(grads, which), strict=True))


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


def _attend_backward(q, k, v, weights, d_out, scale, orders, matmul):
    d_weights = ordered_matmul(d_out, v.swapaxes(-1, -2), orders, matmul)  # (..., T, T)
    d_v = ordered_matmul(weights.swapaxes(-1, -2), d_out, orders, matmul)  # (..., T, D)
    d_scores = weights * (d_weights - ordered_sum(d_weights * weights, orders))
    if scale:
        d_scores = d_scores / q.dtype.type(math.sqrt(q.shape[-1]))
    d_q = ordered_matmul(d_scores, k, orders, matmul)  # (..., T, D)
    d_k = ordered_matmul(d_scores.swapaxes(-1, -2), q, orders, matmul)  # (..., T, D)
    return d_q, d_k, d_v


def _project_backward(x, weights, d_ys, orders, matmul):
    grads, d_x = {}, None
    for name, w, d_y in zip(("w_q", "w_k", "w_v"), weights, d_ys, strict=True):
        part = ordered_matmul(d_y, w.swapaxes(-1, -2), orders, matmul)  # (..., T, C)
        d_x = part if d_x is None else d_x + part
        grads[name] = _over_positions(x, d_y, orders, matmul)
    return {"x": d_x, **grads}


def _over_positions(a, d_y, orders, matmul):
    """a^T @ d_y summed over every position of every batch item: (O, C, D)."""
    rows = a.reshape(a.shape[0], -1, a.shape[-1])  # (O, B·T, C)
    d_rows = d_y.reshape(d_y.shape[0], -1, d_y.shape[-1])  # (O, B·T, D)
    return ordered_matmul(rows.swapaxes(-1, -2), d_rows, orders, matmul)


def _split(t, H):
    *batch, T, C = t.shape
    return t.reshape(*batch, T, H, C // H).swapaxes(-3, -2)  # (..., H, T, D)


def _merge(t):
    *batch, H, T, D = t.shape
    return t.swapaxes(-3, -2).reshape(*batch, T, H * D)  # (..., T, C)


# The table's check (tests/test_numpy_tolerances.py, docs/suite.md): the worst error
# of the references, relative as the table measures it, on the presets and on
# seeded random problems.


def random_problem(seed: int):
    """A seeded problem of the kind the property tests draw: x (..., T, C) and
    four (C, C) projections in float64, H, a mask or None, scale on or off,
    and a standard-normal d_out. T 1 to 64, 1 to 4 heads of width 1 to 16."""
    rng = np.random.default_rng([ORDER_SEED, seed])
    batch = ((), (2,), (2, 3))[rng.integers(3)]
    T, H, D = (
        int(rng.integers(1, 65)),
        int(rng.integers(1, 5)),
        int(rng.integers(1, 17)),
    )
    C = H * D
    x = rng.standard_normal((*batch, T, C))
    params = [rng.standard_normal((C, C)) / math.sqrt(C) for _ in range(4)]
    kind = rng.integers(4)
    if kind == 0:
        mask = None
    elif kind == 1:  # random keys hidden, rows with nothing to attend included
        mask = rng.random((*batch, 1, T, T)) < 0.7
    else:  # key padding: the first `length` keys of each sequence
        lengths = rng.integers(0 if kind == 2 else 1, T + 1, size=batch)
        mask = (np.arange(T) < np.asarray(lengths)[..., None])[..., None, None, :]
    scale = bool(rng.integers(2))
    d_out = rng.standard_normal((*batch, T, C))
    return x, params, H, mask, scale, d_out


def _relative(a, e) -> float:
    return float(np.max(np.abs(a - e) / (1 + np.abs(e)), initial=0.0))


def worst_errors(dtype, problems, matmul="float32", gradients=False) -> dict:
    """The worst relative error, max |a - e| / (1 + |e|), of the N_ORDERS
    references in `dtype` against the float64 oracle, over `problems`
    (`preset_problems`, `random_problems`): {"weights", "out", "entropy"}, and
    "gradients" if asked (float32 and float64 only).

    x and params are rounded to `dtype` here, as a backend receives them; a
    result that is not finite is an error, never a small one.
    """
    from shared.dtypes import np_dtype

    dt = np_dtype(dtype)
    kinds = ("weights", "out", "entropy") + (("gradients",) if gradients else ())
    worst = dict.fromkeys(kinds, 0.0)

    def note(kind, value, expected):
        if not np.all(np.isfinite(value)):
            raise ValueError(f"a {dtype} reference's {kind} is not finite")
        worst[kind] = max(worst[kind], _relative(value, expected))

    orders = range(N_ORDERS)
    for x, params, H, mask, scale, d_out, oracle in problems:
        x, params = x.astype(dt), [w.astype(dt) for w in params]
        out, weights = reordered_multi_head(
            x, *params, H, mask, scale=scale, which=orders, matmul=matmul
        )
        note("out", out, oracle["out"])
        note("weights", weights, oracle["weights"])
        # each order's weights, as the dtype holds them, summed in that order
        p = weights.astype(dt).astype(wide_dtype(dt))
        note("entropy", _entropy(p, dt, orders).astype(np.float64), oracle["entropy"])
        if gradients:
            grads = reordered_multi_head_backward(
                x,
                *params,
                H,
                d_out.astype(dt),
                mask,
                scale=scale,
                which=orders,
                matmul=matmul,
            )
            expected = oracle["gradients"]()  # computed only when asked
            for name, grad in grads.items():
                note("gradients", grad, expected[name])
    return worst


def _with_oracle(x, params, H, mask, scale, d_out, exact_x=None, exact_params=None):
    """A problem tuple for `worst_errors`, its oracle computed on exact_x and
    exact_params (default: x and params, float64)."""
    from shared.reference import reference_entropy, reference_multi_head

    ex = x if exact_x is None else exact_x
    ep = params if exact_params is None else exact_params
    out, weights = reference_multi_head(ex, *ep, H, mask, scale=scale)
    gradients = functools.partial(  # float64, summed forward: errs below 1e-13
        reordered_multi_head_backward, ex, *ep, H, d_out, mask, scale=scale
    )
    oracle = {
        "out": out,
        "weights": weights,
        "entropy": reference_entropy(weights),
        "gradients": gradients,
    }
    return x, params, H, mask, scale, d_out, oracle


def preset_problems():
    """The presets as `worst_errors` problems, their oracle the golden files
    (on the float64 inputs, which a backend receives rounded)."""
    from shared.config import PRESETS
    from shared.golden import load_golden
    from shared.gradients import upstream_gradient

    for name, preset in PRESETS.items():
        g = load_golden(name)
        params = [g[k] for k in ("w_q", "w_k", "w_v", "w_o")]
        d_out = upstream_gradient(preset)
        problem = _with_oracle(g["x"], params, preset.n_heads, None, True, d_out)
        oracle = problem[-1] | {
            "out": g["multi_out"],
            "weights": g["multi_weights"],
            "entropy": g["multi_entropy"],
        }
        yield (*problem[:-1], oracle)


def random_problems(dtype, count: int, start: int = 0):
    """`count` seeded random problems, their oracle on the inputs rounded to
    `dtype` (as the property tests compare, tests/test_properties.py)."""
    from shared.dtypes import np_dtype

    dt = np_dtype(dtype)
    for seed in range(start, start + count):
        x, params, H, mask, scale, d_out = random_problem(seed)
        rx = x.astype(dt).astype(np.float64)
        rp = [w.astype(dt).astype(np.float64) for w in params]
        yield _with_oracle(x, params, H, mask, scale, d_out, rx, rp)


TABLE_PROBLEMS = 200
"""How many random problems the table's check draws, besides the presets."""


def table_rows(count: int = TABLE_PROBLEMS):
    """(dtype, matmul, kind, worst on the presets, worst on `count` random
    problems) for every row of the table and TF32, gradients included."""
    from shared.tolerances import TOLERANCES

    for dtype, matmul in [(d, "float32") for d in TOLERANCES] + [("float32", "tf32")]:
        grads = dtype in ("float64", "float32")
        on_presets = worst_errors(dtype, preset_problems(), matmul, grads)
        on_random = worst_errors(dtype, random_problems(dtype, count), matmul, grads)
        for kind in on_presets:
            yield dtype, matmul, kind, on_presets[kind], on_random[kind]


def main(argv=None) -> None:
    """python -m shared.reordered [--problems N]: the table's check, printed as
    Markdown (docs/suite.md has its output)."""
    import argparse

    from shared.tolerances import TABLE_MULTIPLE, TF32, TOLERANCES

    parser = argparse.ArgumentParser(
        prog="python -m shared.reordered",
        description="the tolerance table against the references' worst errors",
    )
    parser.add_argument("--problems", type=int, default=TABLE_PROBLEMS)
    count = parser.parse_args(argv).problems
    print(
        f"| dtype | result | presets | {count} random problems "
        f"| x {TABLE_MULTIPLE:g} | table |\n|---|---|---|---|---|---|"
    )
    for dtype, matmul, kind, on_presets, on_random in table_rows(count):
        level = TF32 if matmul == "tf32" else TOLERANCES[dtype]
        table = "derived" if kind == "gradients" else f"{level.atol:g}"
        print(
            f"| {'tf32' if matmul == 'tf32' else dtype} | {kind} | {on_presets:.1e} "
            f"| {on_random:.1e} | {TABLE_MULTIPLE * max(on_presets, on_random):.1e} "
            f"| {table} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
