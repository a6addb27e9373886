"""Small helpers the test bodies share: run a backend on NumPy inputs, get
NumPy back. NumPy only: `tox -e numpy` imports this without torch or jax
(their own helpers are in tests/torch_helpers.py and tests/jax_helpers.py)."""

from __future__ import annotations

import functools
import math
import os

import numpy as np

from shared import PRESETS, make_fixture
from shared.dtypes import np_dtype
from shared.golden import load_golden
from shared.gradients import backend_gradients, upstream_gradient
from shared.hostile import (
    HOSTILE_SCORES,
    largest,
    max_score,
)
from shared.reference import reference_multi_head
from shared.reordered import (
    references,
    reordered_multi_head,
    reordered_multi_head_backward,
    reordered_single_head_backward,
)
from shared.tolerances import derived_tolerance

PARAM_NAMES = ("w_q", "w_k", "w_v", "w_o")


def name_of(backend) -> str:
    """'numpy' for the module impl_numpy."""
    return backend.__name__.removeprefix("impl_")


def jitted(backend, name):
    """backend.<name>_jit where there is one (JAX), else backend.<name>.

    Eager JAX compiles every operation of a new shape and every loop on every
    call; jitted, a case compiles once. Where eager JAX is the point, a test
    calls the function itself: tests/test_jax_*.py hold eager equal to jitted."""
    return getattr(backend, f"{name}_jit", getattr(backend, name))


def per_process_cache(function):
    """functools.cache, emptied in a forked child. `tox -e mutate` (mutmut)
    forks a worker per mutant from a process whose caches hold what the code
    computed before it was mutated (docs/mutation.md); a test that read them
    would test a result the mutant never made."""
    cached = functools.cache(function)
    os.register_at_fork(after_in_child=cached.cache_clear)
    return cached


def golden(preset_name: str) -> dict[str, np.ndarray]:
    """The committed oracle results of a preset (cached)."""
    if preset_name not in _GOLDEN:
        _GOLDEN[preset_name] = load_golden(preset_name)
    return _GOLDEN[preset_name]


_GOLDEN: dict[str, dict[str, np.ndarray]] = {}


def run_single(backend, x, w_q, w_k, w_v, dtype, mask=None, scale=True, jit=True):
    """single_head_attention (JAX's jitted twin unless jit=False) on NumPy
    inputs cast to `dtype`; NumPy (out, weights)."""
    args = [backend.from_numpy(a, dtype) for a in (x, w_q, w_k, w_v)]
    mask = None if mask is None else backend.from_numpy(mask)
    attend = (
        jitted(backend, "single_head_attention")
        if jit
        else backend.single_head_attention
    )
    out, weights = attend(*args, mask, scale=scale)
    return backend.to_numpy(out), backend.to_numpy(weights)


def run_multi(backend, x, params, n_heads, dtype, mask=None, scale=True, jit=True):
    """multi_head_attention (JAX's jitted twin unless jit=False) on NumPy
    inputs cast to `dtype`; NumPy (out, weights)."""
    args = [
        backend.from_numpy(a, dtype) for a in (x, *(params[k] for k in PARAM_NAMES))
    ]
    mask = None if mask is None else backend.from_numpy(mask)
    attend = (
        jitted(backend, "multi_head_attention") if jit else backend.multi_head_attention
    )
    out, weights = attend(*args, n_heads, mask, scale=scale)
    return backend.to_numpy(out), backend.to_numpy(weights)


def run_entropy(backend, weights, dtype):
    """attention_entropy (JAX's jitted twin) on NumPy weights cast to `dtype`;
    NumPy result."""
    entropy = jitted(backend, "attention_entropy")
    return backend.to_numpy(entropy(backend.from_numpy(weights, dtype)))


def random_inputs(seed, batch, T, C, D=None):
    """x (*batch, T, C) and (C, D) projections w_q, w_k, w_v, w_o, float64."""
    rng = np.random.default_rng(seed)
    D = C if D is None else D
    x = rng.standard_normal((*batch, T, C))
    params = {name: rng.standard_normal((C, D)) / np.sqrt(C) for name in PARAM_NAMES}
    params["w_o"] = rng.standard_normal((C, C)) / np.sqrt(C)
    return x, params


def masked_problem():
    """x (2, 6, 8), weights (8, 8), a (2, 1, T, T) mask and its fully masked rows.

    Item 0 is 3 long (keys 3 to 5 padded) and its query 2 may attend nothing;
    item 1 (length 0) has no real key at all: 1 + T = 7 fully masked rows,
    `empty` (2, T). The sizes of options_problem, (2, 6, 8) and two heads: eager
    JAX compiles each operation once per shape (docs/suite.md, "CI time"). All
    NumPy float64.
    """
    T = 6
    x, params = random_inputs(12, (2,), T, 8)
    lengths = np.array([3, 0])  # item 1: no real key at all
    rows = np.ones((2, 1, T, T), dtype=bool)
    rows[0, :, 2] = False  # item 0: query 2 may attend nothing
    mask = (np.arange(T) < lengths[:, None])[:, None, None, :] & rows  # (2, 1, T, T)
    empty = np.zeros((2, T), dtype=bool)
    empty[0, 2], empty[1] = True, True
    return x, params, mask, empty


def gradient_case(preset_name, dtype="float64"):
    """x, the four projections (NumPy, in `dtype`), H and the seeded d_out of a
    preset (`shared.gradients.upstream_gradient`)."""
    preset = PRESETS[preset_name]
    fixture = make_fixture(preset).astype(dtype)
    d_out = upstream_gradient(preset).astype(dtype)
    return fixture.x, fixture.params, preset.n_heads, d_out


def functional_gradients(backend, x, params, n_heads, d_out, dtype):
    """`multi_head_attention_backward` of a backend on NumPy inputs cast to
    `dtype`; NumPy {name: gradient}."""
    return backend_gradients(backend, "multi", x, params, n_heads, d_out, dtype)


class ShapeOnly:
    """Has .shape and .dtype, and fails on any arithmetic: proof that a call
    that raises did its checks before computing anything."""

    def __init__(self, shape, dtype="float64"):
        self.shape, self.dtype = shape, np.dtype(dtype)

    def __getattr__(self, name):
        raise AssertionError(f"computed on a bad input: .{name}")

    def __array__(self, *args, **kwargs):
        raise AssertionError("computed on a bad input: __array__")

    def __matmul__(self, other):
        raise AssertionError("computed on a bad input: @")

    __rmatmul__ = __matmul__


# Hostile magnitudes: scores near the top of each dtype (tests/test_numerics.py,
# and blockwise and decoding in tests/test_blockwise.py, tests/test_kv_cache.py);
# the levels are shared/hostile.py's, the tolerance derived from
# shared.reordered's references on the very inputs (docs/suite.md).


def hostile_inputs(preset, precision):
    """The preset with w_q and w_k scaled so max |score| = HOSTILE_SCORES."""
    g = golden(preset)
    H = PRESETS[preset].n_heads
    x, params = g["x"], {k: g[k] for k in PARAM_NAMES}
    top = max_score(x, params, H)
    factor = math.sqrt(HOSTILE_SCORES[precision] / top)
    params["w_q"], params["w_k"] = params["w_q"] * factor, params["w_k"] * factor
    return x.astype(np_dtype(precision)), {
        k: w.astype(np_dtype(precision)) for k, w in params.items()
    }


@per_process_cache
def hostile_expected(preset, precision):
    """The float64 oracle of `hostile_inputs` and the tolerances derived there:
    (out, weights, out's Tolerance, weights' Tolerance)."""
    x, params = hostile_inputs(preset, precision)
    H = PRESETS[preset].n_heads
    exact = [w.astype(np.float64) for w in params.values()]
    out, weights = reference_multi_head(x.astype(np.float64), *exact, H)
    found = references(reordered_multi_head, x, *params.values(), H)
    return (
        out,
        weights,
        derived_tolerance([r[0] for r in found], out, precision),
        derived_tolerance([r[1] for r in found], weights, precision),
    )


def derived_gradient_tolerances(form, x, params, H, d_out, dtype):
    """{name: Tolerance} for gradients of L = sum(out * d_out) in `dtype`, each
    derived from shared.reordered's references against the float64 NumPy
    backward (the table cannot hold sums over every position: docs/suite.md).
    x, params, d_out: float64 NumPy."""
    import impl_numpy

    expected = backend_gradients(impl_numpy, form, x, params, H, d_out, "float64")
    cast = [a.astype(np_dtype(dtype)) for a in (x, *params.values(), d_out)]
    if form == "multi":
        found = references(reordered_multi_head_backward, *cast[:5], H, cast[5])
    else:
        found = references(reordered_single_head_backward, *cast[:4], cast[5])
    return {
        name: derived_tolerance([r[name] for r in found], expected[name], dtype)
        for name in expected
    }


@per_process_cache
def gradient_tolerances(preset_name, form, dtype):
    """`derived_gradient_tolerances` on a preset's `gradient_case`."""
    return derived_gradient_tolerances(form, *gradient_case(preset_name), dtype)


# Partly non-finite values: one entry of a key's value is Inf or NaN, the
# others finite (tests/test_numerics.py, test_blockwise.py, test_kv_cache.py).
# A value row filled whole with NaN (x's row all NaN) would hide a check that
# asks "is any entry finite?" where it must ask "is every entry finite?".

PARTIAL_POISONS = ("inf", "-inf", "nan")
PARTIAL_RESTS = ("zero", "huge")


def partly_non_finite_row(D, poison, rest, precision):
    """A value row (D,): column 0 the poison ("inf", "-inf" or "nan"), the others
    0 (rest="zero") or an eighth of the dtype's largest (rest="huge": the
    [inf, 1e290, ...] of a real overflow), float64."""
    row = np.full(D, 0.0 if rest == "zero" else largest(precision) / 8)
    row[0] = float(poison)
    return row


def projected(x, w, precision):
    """x @ w as a backend's `project` computes it: in at least float32, rounded
    to `precision` (NumPy, float64 out)."""
    dtype = np_dtype(precision)
    wide = np.promote_types(dtype, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        product = x.astype(dtype).astype(wide) @ w.astype(dtype).astype(wide)
        return product.astype(dtype).astype(np.float64)


# Every score very negative: below -2000, where exp underflows to 0 in float64
# (below -745) as in float32 (below -104), so an online softmax whose running
# max starts anywhere but -inf (say at 0) sums nothing and divides 0 by 0.


def very_negative_scores(seed, batch, T, H, D=4):
    """x (*batch, T, H * D) whose queries -x and keys x (w_q = -I, w_k = I) give
    every score -2048 - n / 2, |n| <= 12, exactly in every dtype: each head's
    first feature is 64, the others multiples of 1/4 in [-2, 2], so every
    product and sum is exact in float32 and every input exact in bfloat16.

    Returns x and the projections {w_q: -I, w_k: I, w_v: I, w_o: I}, float64.
    """
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 9, size=(*batch, T, H, D)) / 4  # (..., T, H, D)
    x[..., 0] = 64.0
    x = x.reshape(*batch, T, H * D)  # (..., T, C)
    eye = np.eye(H * D)
    return x, {"w_q": -eye, "w_k": eye, "w_v": eye, "w_o": eye}


TINY_TRAIN = dict(
    vocab=8, seq_len=8, d_model=8, n_heads=2, n_layers=2, batch=3, held_out=8
)
"""The sizes of the model the training tests share (shared.train.TrainConfig
with these and its steps): eager JAX compiles each operation once per shape,
so tests of one size compile them once (docs/suite.md, "CI time")."""


def train_beside_numpy(names, dtype, steps=8):
    """The trainers `names` and NumPy's, step for step, on the TINY_TRAIN model
    (triptych.train.loop.train); their TrainResults."""
    from shared.train import TrainConfig, make_task
    from triptych.common.threads import thread_limits
    from triptych.train import loop

    config = TrainConfig(**TINY_TRAIN, steps=steps)
    with thread_limits(1):  # as triptych train: more threads only wait on tiny work
        return loop.train(make_task(config), ["numpy", *names], dtype, rows=[])


def assert_trained_step_for_step(results) -> None:
    """Every pair of trainers within the tolerance at every step, each step's
    difference printed on failure; and every trainer has learned alike."""
    assert results.nan is None
    beyond = {pair: step for pair, step in results.first_outside().items() if step}
    assert not beyond, f"first step beyond the tolerance: {beyond}; {results.rows}"
    assert len(results.rows) == results.task.config.steps
    accuracy = {name: run.accuracy_after for name, run in results.runs.items()}
    assert len(set(accuracy.values())) == 1, accuracy


# Arrays of another framework (docs/layers.md): shared.validation.framework_of
# tells one by its type alone, so a stand-in does where that framework is not
# installed (tox -e numpy, tox -e mutate).


def foreign_array(array, host: str):
    """A stand-in for `array` as an array of a framework that `host` ('numpy',
    'torch' or 'jax') does not compute on: the shape and dtype of `array` under
    a class of the module torch (jax for the host torch)."""
    module = "jax" if host == "torch" else "torch"

    def item(self, index):  # x[0] of a stand-in: a stand-in of x[0]
        return foreign_array(np.empty(self.shape, self.dtype)[index], host)

    kind = type("Array", (), {"__module__": module, "__getitem__": item})
    stand_in = kind()
    stand_in.shape, stand_in.dtype = tuple(array.shape), np.dtype(array.dtype)
    return stand_in


# A key bias that swamps every key: b_k = 2**53 in the first feature of each
# head, w_k zero but for a small first column of each head, so that every
# key x_j @ w_k + b_k is (2**53, 0, ..., 0) exactly (|x_j @ w_k| < 1, half the
# spacing of floats at 2**53) and every score of row i is the same number. Every
# row attends its keys uniformly, in every dtype and every summation order; the
# keys without b_k would give scores of about 0.1 apart.


def swamped_keys(seed, batch, T, C, H):
    """x (*batch, T, C), the four projections and the four biases (float64)
    of a problem whose key bias swamps every key; the oracle's output of it."""
    from shared.reference import reference_multi_head

    x, params = random_inputs(seed, batch, T, C)
    rng = np.random.default_rng(seed + 1)
    firsts = np.arange(0, C, C // H)  # the first feature of each head
    params["w_k"] = np.zeros((C, C))
    params["w_k"][:, firsts] = 0.02 * rng.standard_normal((C, H))
    biases = {name: 0.1 * rng.standard_normal(C) for name in ("b_q", "b_v", "b_o")}
    biases["b_k"] = np.zeros(C)
    biases["b_k"][firsts] = 2.0**53
    assert np.abs(x @ params["w_k"]).max() < 1  # the premise: swamped
    weights = [params[n] for n in PARAM_NAMES]
    expected, attention = reference_multi_head(x, *weights, H, biases=biases)
    causal = np.tril(np.ones((T, T)))
    uniform = np.broadcast_to(causal / causal.sum(-1, keepdims=True), attention.shape)
    np.testing.assert_array_equal(attention, uniform)  # the premise: uniform
    unswamped = reference_multi_head(x, *weights, H, biases=biases | {"b_k": None})[0]
    assert np.abs(unswamped - expected).max() > 1e-3  # the premise: b_k matters
    return x, params, biases, expected


# Every option away from its default (tests/test_options.py): one small float64
# problem with a mask, biases and upstream gradients, shared by the tests that
# pass every keyword of a function at once, and the checks they share.


def options_problem(seed=40, batch=(2,), T=6, C=8, H=2):
    """A SimpleNamespace of float64 NumPy arrays: x (*batch, T, C), params
    (the four (C, C) weights), biases b_q, b_k, b_v, b_o (C,) of size about
    0.5, mask (*batch, 1, T, T) (each item its own, every row keeping key 0
    and losing others), keep (*batch, T) key padding (item 0 pads its last 2
    keys), d_out (*batch, T, C), d_lse (*batch, H, T), and H."""
    from types import SimpleNamespace

    x, params = random_inputs(seed, batch, T, C)
    rng = np.random.default_rng(seed + 1)
    biases = {name: 0.5 * rng.standard_normal(C) for name in BIAS_NAMES}
    mask = rng.random((*batch, 1, T, T)) < 0.6
    mask[..., 0] = True
    keep = np.ones((*batch, T), dtype=bool)
    keep.reshape(-1, T)[0, -2:] = False
    d_out = rng.standard_normal((*batch, T, C))
    d_lse = rng.standard_normal((*batch, H, T))
    return SimpleNamespace(
        x=x, params=params, biases=biases, mask=mask, keep=keep, d_out=d_out,
        d_lse=d_lse, H=H,
    )  # fmt: skip


BIAS_NAMES = ("b_q", "b_k", "b_v", "b_o")


def directional_derivatives(loss, arrays, n_directions=3, seed=0):
    """(directions, derivatives): central finite differences of the float64
    `loss` (a function of the dict `arrays`) along `n_directions` random
    directions over every entry at once: far cheaper than entry by entry, and
    a gradient wrong in any entry misses a random direction's derivative."""
    from shared.tolerances import FINITE_DIFFERENCE_STEP

    rng = np.random.default_rng(seed)
    h = FINITE_DIFFERENCE_STEP
    found = []
    for _ in range(n_directions):
        u = {name: rng.standard_normal(np.shape(a)) for name, a in arrays.items()}
        up = {name: a + h * u[name] for name, a in arrays.items()}
        down = {name: a - h * u[name] for name, a in arrays.items()}
        found.append((u, (loss(up) - loss(down)) / (2 * h)))
    return found


def assert_directional_derivatives(grads, found, what):
    """Each derivative of `found` (directional_derivatives) equals the
    gradients `grads` ({name: NumPy array}) projected on its direction, within
    FINITE_DIFFERENCE_RTOL of the sum of the projection's magnitudes."""
    from shared.tolerances import FINITE_DIFFERENCE_RTOL

    for u, expected in found:
        terms = [np.sum(grads[name] * u[name]) for name in u]
        size = sum(np.sum(np.abs(grads[name] * u[name])) for name in u)
        error = abs(sum(terms) - expected)
        assert error <= FINITE_DIFFERENCE_RTOL * size, f"{what}: {error} of {size}"


def logsumexp_rows(q, k, allowed, scale=True):
    """Each row's log-sum-exp of the scores q @ k^T (divided by sqrt(D) if
    `scale`) it may attend, float64; -inf where it may attend nothing."""
    scores = q @ k.swapaxes(-1, -2) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(top == -np.inf, 0.0, top)
    with np.errstate(divide="ignore"):
        return (top + np.log(np.exp(scores - top).sum(axis=-1, keepdims=True)))[..., 0]


def adam_by_hand(params, gradients, steps, lr, b1, b2, eps):
    """`steps` steps of Adam (Kingma and Ba, 2015, Algorithm 1) in float64 on
    copies of `params`, `gradients(params)` giving each step's gradients:
    written here apart from impl_numpy/train.py, so that NumPy's Adam is
    checked too."""
    params = {name: np.array(w, dtype=np.float64) for name, w in params.items()}
    m = {name: np.zeros_like(w) for name, w in params.items()}
    v = {name: np.zeros_like(w) for name, w in params.items()}
    for t in range(1, steps + 1):
        grads = gradients(params)
        for name, g in grads.items():
            m[name] = b1 * m[name] + (1 - b1) * g
            v[name] = b2 * v[name] + (1 - b2) * g**2
            m_hat, v_hat = m[name] / (1 - b1**t), v[name] / (1 - b2**t)
            params[name] = params[name] - lr * m_hat / (np.sqrt(v_hat) + eps)
    return params


def finite_differences(loss, arrays):
    """{name: dL/d entry} of the float64 `loss` (a function of the dict
    `arrays`), by central differences, entry by entry."""
    from shared.tolerances import FINITE_DIFFERENCE_STEP

    h = FINITE_DIFFERENCE_STEP
    found = {}
    for name, a in arrays.items():
        grad = np.empty(a.shape)
        for index in range(a.size):
            up, down = a.copy(), a.copy()
            up.flat[index] += h
            down.flat[index] -= h
            grad.flat[index] = (
                loss({**arrays, name: up}) - loss({**arrays, name: down})
            ) / (2 * h)
        found[name] = grad
    return found


def reference_on_qkv(q, k, v, mask=None, causal=True, scale=True):
    """The float64 oracle's output on per-head q, k, v (..., T, D): the oracle
    on x = [q k v] with weights that pick each third (exact: products by 0
    and 1)."""
    from shared.reference import reference_single_head

    D = q.shape[-1]
    x = np.concatenate([q, k, v], axis=-1)  # (..., T, 3D)
    pick = np.eye(3 * D)
    w_q, w_k, w_v = (pick[:, i * D : (i + 1) * D] for i in range(3))  # (3D, D)
    out, _ = reference_single_head(
        x, w_q, w_k, w_v, mask=mask, causal=causal, scale=scale
    )
    return out


def flash_options_loss(arrays, mask):
    """sum(out * d_out) + sum(lse * d_lse) of the oracle's non-causal,
    unscaled attention of arrays' q, k, v under the key mask (..., 1, T)."""
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    out = reference_on_qkv(q, k, v, mask, causal=False, scale=False)
    lse = logsumexp_rows(q, k, mask, scale=False)
    return float(np.sum(out * arrays["d_out"]) + np.sum(lse * arrays["d_lse"]))


@per_process_cache
def flash_options_case():
    """A flash_attention problem for every option away from its default
    (causal=False, scale=False, a key mask; tests/test_kernels.py and the
    kernels' gradient tests): q, k, v, d_out (2, 6, 4), d_lse (2, 6), the mask
    (2, 1, 6) (item 0 pads its last 2 keys: no row is left with nothing), and
    the oracle's gradients of flash_options_loss for q, k and v, entry by
    entry (144 entries, about 0.1 s)."""
    from types import SimpleNamespace

    rng = np.random.default_rng(44)
    q, k, v, d_out = rng.standard_normal((4, 2, 6, 4))
    keep = np.ones((2, 6), dtype=bool)
    keep[0, -2:] = False
    mask = keep[:, None, :]
    d_lse = rng.standard_normal((2, 6))
    given = {"d_out": d_out, "d_lse": d_lse}

    def loss(arrays):
        return flash_options_loss({**arrays, **given}, mask)

    grads = finite_differences(loss, {"q": q, "k": k, "v": v})
    return SimpleNamespace(q=q, k=k, v=v, mask=mask, grads=grads, **given)


def multi_head_flash_options_loss(arrays, mask, H):
    """sum(out * d_out) + sum(lse * d_lse) of the oracle's non-causal,
    unscaled multi-head attention of arrays' x, weights and biases under the
    key mask (..., 1, 1, T); lse (..., H, T) from the heads' queries and keys."""
    from shared.reference import reference_multi_head

    x = arrays["x"]
    weights = [arrays[n] for n in PARAM_NAMES]
    biases = {n: arrays[n] for n in BIAS_NAMES}
    out, _ = reference_multi_head(
        x, *weights, H, mask, causal=False, scale=False, biases=biases
    )
    *batch, T, C = x.shape
    q, k = (
        (x @ arrays[w] + arrays[b]).reshape(*batch, T, H, C // H).swapaxes(-3, -2)
        for w, b in (("w_q", "b_q"), ("w_k", "b_k"))
    )  # (..., H, T, D)
    lse = logsumexp_rows(q, k, mask, scale=False)
    return float(np.sum(out * arrays["d_out"]) + np.sum(lse * arrays["d_lse"]))


def assert_finite_differences(grads, expected, what):
    """Each gradient ({name: NumPy array}) within FINITE_DIFFERENCE_RTOL of the
    largest entry of its finite differences `expected`, entry by entry."""
    from shared.tolerances import FINITE_DIFFERENCE_RTOL

    for name, e in expected.items():
        error = np.abs(grads[name] - e).max() / np.abs(e).max()
        assert error < FINITE_DIFFERENCE_RTOL, f"{what} d_{name}: {error}"


@per_process_cache
def multi_head_flash_options_case():
    """options_problem for multi_head_flash_attention: its arrays (x, the
    weights, the biases), the key mask (2, 1, 1, T) of its keep, d_out, d_lse
    and the oracle's directional derivatives of multi_head_flash_options_loss."""
    from types import SimpleNamespace

    case = options_problem()
    arrays = {"x": case.x, **case.params, **case.biases}
    mask = case.keep[:, None, None, :]
    given = {"d_out": case.d_out, "d_lse": case.d_lse}

    def loss(a):
        return multi_head_flash_options_loss({**a, **given}, mask, case.H)

    found = directional_derivatives(loss, arrays)
    return SimpleNamespace(arrays=arrays, mask=mask, found=found, H=case.H, **given)


def adam_expected(config, steps, **settings):
    """The float64 parameters after `steps` training steps of `config`'s task
    with Adam's `settings` (lr, b1, b2, eps), by adam_by_hand on
    impl_numpy.train's gradients. Checks the premise of a test of the
    settings: each one alone set back to its default (TrainConfig's, which are
    torch's and optax's own) changes the result."""
    import impl_numpy.train as numpy_train
    from shared.train import TrainConfig, make_task

    task = make_task(config)

    def run(lr, b1, b2, eps):
        batches = task.batches()

        def gradients(params):
            return numpy_train.gradients(params, next(batches), config.n_heads)

        return adam_by_hand(task.params, gradients, steps, lr, b1, b2, eps)

    expected = run(**settings)
    defaults = TrainConfig()
    for name in settings:
        other = run(**{**settings, name: getattr(defaults, name)})
        moved = max(np.abs(other[n] - expected[n]).max() for n in expected)
        assert moved > 1e-6, f"{name} must matter here"
    return expected
