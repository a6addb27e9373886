"""Blockwise attention (impl_*/blockwise.py), once per backend, float64 on every
case and float32, float16 and bfloat16 on a few: equal to the float64 oracle and to the
naive attention of the same backend, for T not a multiple of the block size, T
smaller than one block, block size 1, batched inputs, causal and not, with the
output in the input's dtype; the log-sum-exp it returns; a NaN, Inf or 1e10 that
a row may not attend never reaches it, even as one entry of a value whose others
are finite, and one it does attend makes it NaN; every score below -2000, and
scores near the top of each dtype; the key blocks it visits (the upper triangle
is never computed); and its errors."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    PARAM_NAMES,
    PARTIAL_POISONS,
    PARTIAL_RESTS,
    golden,
    hostile_expected,
    hostile_inputs,
    jitted,
    name_of,
    partly_non_finite_row,
    per_process_cache,
    random_inputs,
    run_multi,
    run_single,
    very_negative_scores,
)

from shared import PRESETS, TOLERANCES, assert_close
from shared.dtypes import np_dtype
from shared.hostile import HOSTILE_SCORES
from shared.reference import reference_multi_head, reference_single_head

# (batch, T, block_size): T a multiple of the block size and not, T smaller than
# one block, one block exactly, block size 1, with and without batch axes
CASES = [
    ((), 32, 8),
    ((), 37, 8),
    ((2,), 5, 16),
    ((), 16, 16),
    ((2, 3), 6, 1),
    ((2, 3), 13, 4),
]
C, H = 16, 4
PRECISIONS = tuple(TOLERANCES)  # float64, float32, float16, bfloat16


def _runs(cases, rounded_cases):
    """(precision, batch, T, block_size, causal) params: float64 on every case,
    causal and not, the precisions that round (float32, float16, bfloat16) on
    `rounded_cases` only, causal only.

    What a case's shape can break (the block edges, the tail, the loop bounds)
    shows in float64, at its tight tolerance, and so does what the mask can
    break; what rounding can break (the softmax's float32 floor, the output's
    dtype) depends on neither. And in JAX each case is a compile of its own
    (docs/suite.md, CI time)."""
    runs = [("float64", *case, causal) for case in cases for causal in (True, False)]
    runs += [
        (p, *case, True) for p in PRECISIONS if p != "float64" for case in rounded_cases
    ]
    return [
        pytest.param(
            *run,
            id=f"{run[0]}-batch{run[1]}-T{run[2]}-B{run[3]}-"
            + ("causal" if run[4] else "noncausal"),
        )
        for run in runs
    ]


@per_process_cache
def _oracle(kind, batch, T, causal, scale=True):
    """(inputs, oracle out) of one case, computed once; kind 'single' or 'multi'."""
    x, p = random_inputs(T, batch, T, C)
    if kind == "single":
        out, _ = reference_single_head(
            x, p["w_q"], p["w_k"], p["w_v"], scale=scale, causal=causal
        )
    else:
        out, _ = reference_multi_head(
            x, *(p[n] for n in PARAM_NAMES), H, scale=scale, causal=causal
        )
    return x, p, out


def _expected_lse(q, k, causal, scale):
    """Row log-sum-exp of the scaled, masked scores, directly in float64."""
    scores = q @ k.swapaxes(-1, -2)  # (..., T, T)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if causal:
        T = q.shape[-2]
        scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    return (top + np.log(np.exp(scores - top).sum(axis=-1, keepdims=True)))[..., 0]


def _run_blockwise(backend, q, k, v, dtype, **kwargs):
    args = [backend.from_numpy(a, dtype) for a in (q, k, v)]
    out, lse = jitted(backend, "blockwise_attention")(*args, **kwargs)
    return backend.to_numpy(out), backend.to_numpy(lse)


def _run_multi_blockwise(backend, x, p, dtype, **kwargs):
    args = [backend.from_numpy(a, dtype) for a in (x, *(p[n] for n in PARAM_NAMES))]
    out, lse = jitted(backend, "multi_head_blockwise_attention")(*args, H, **kwargs)
    return backend.to_numpy(out), backend.to_numpy(lse)


@pytest.mark.parametrize(
    ("precision", "batch", "T", "block_size", "causal"),
    _runs(CASES, [CASES[1], CASES[5]]),
)
def test_blockwise_equals_the_oracle_and_the_naive(
    backend, precision, batch, T, block_size, causal
):
    x, p, expected = _oracle("single", batch, T, causal)
    q, k, v = (x @ p[n] for n in ("w_q", "w_k", "w_v"))  # (..., T, C), float64
    out, lse = _run_blockwise(
        backend, q, k, v, precision, block_size=block_size, causal=causal
    )
    assert out.dtype == np_dtype(precision)
    assert lse.dtype == np.promote_types(out.dtype, np.float32)  # the softmax dtype
    what = f"blockwise {precision}, block_size={block_size}"
    assert_close(out, expected, precision, f"{what}: out")
    expected_lse = _expected_lse(q, k, causal, scale=True)
    assert_close(lse, expected_lse, precision, f"{what}: lse")
    if causal:  # the naive attention is always causal
        naive, _ = run_single(backend, x, p["w_q"], p["w_k"], p["w_v"], precision)
        assert_close(out, naive, precision, f"{what}: vs naive")


# the multi-head form adds only the projections (bit for bit, the test after
# next): three of the cases suffice, one for the precisions that round
MULTI_CASES = [CASES[1], CASES[2], CASES[5]]


@pytest.mark.parametrize(
    ("precision", "batch", "T", "block_size", "causal"), _runs(MULTI_CASES, [CASES[5]])
)
def test_multi_head_blockwise_equals_the_oracle_and_the_naive(
    backend, precision, batch, T, block_size, causal
):
    x, p, expected = _oracle("multi", batch, T, causal)
    out, lse = _run_multi_blockwise(
        backend, x, p, precision, block_size=block_size, causal=causal
    )
    assert out.dtype == np_dtype(precision)  # the projections round to it
    assert lse.dtype == np.promote_types(out.dtype, np.float32)
    assert lse.shape == (*batch, H, T)
    assert_close(out, expected, precision, f"multi-head blockwise {precision} out")
    if causal:  # the naive attention is always causal
        naive, _ = run_multi(backend, x, p, H, precision)
        assert_close(
            out, naive, precision, f"multi-head blockwise {precision} vs naive"
        )
    split = [
        (x @ p[n]).reshape(*batch, T, H, C // H).swapaxes(-3, -2)  # (..., H, T, D)
        for n in ("w_q", "w_k")
    ]
    expected_lse = _expected_lse(*split, causal, True)
    assert_close(lse, expected_lse, precision, f"multi-head {precision} lse")


@pytest.mark.parametrize("scale", [True, False], ids=["scaled", "unscaled"])
def test_multi_head_blockwise_is_its_heads_through_blockwise_attention(
    backend, dtype, scale
):
    # Bit for bit: the projections, blockwise_attention on every head with the
    # block size and scale given, the merged heads through w_o. The sizes and,
    # scaled, the call of MULTI_CASES' last case, whose programs JAX has
    # compiled (jax.jit compiles a keyword given apart from one left out)
    x, p = random_inputs(27, (2, 3), 13, C)
    x = backend.from_numpy(x, dtype)
    w_q, w_k, w_v, w_o = (backend.from_numpy(p[name], dtype) for name in PARAM_NAMES)
    unscaled = {} if scale else {"scale": False}
    out, lse = jitted(backend, "multi_head_blockwise_attention")(
        x, w_q, w_k, w_v, w_o, H, block_size=4, causal=True, **unscaled
    )
    a, blockwise = backend.attention, jitted(backend, "blockwise_attention")
    q, k, v = (a.split_heads(a.project(x, w), H) for w in (w_q, w_k, w_v))
    heads, heads_lse = blockwise(q, k, v, block_size=4, scale=scale)
    expected = a.project(a.merge_heads(heads), w_o)
    np.testing.assert_array_equal(backend.to_numpy(out), backend.to_numpy(expected))
    np.testing.assert_array_equal(backend.to_numpy(lse), backend.to_numpy(heads_lse))
    one_block, _ = blockwise(q, k, v, block_size=13, scale=scale)
    assert not np.array_equal(  # the premise: the block size shows in the bits
        backend.to_numpy(one_block), backend.to_numpy(heads)
    )


# Masked positions never leak, in blockwise attention as in the naive one
# (tests/test_numerics.py). With B = 4, i = 3 ends query block 0, and i = 4, 5
# and 6 share query block 1 with the first poisoned positions: there the
# diagonal block gives a poisoned key the weight 0 in row i, and a plain
# weights @ v would leak 0 * NaN = NaN.


@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf, 1e10], ids=str)
@pytest.mark.parametrize("i", [3, 4, 5, 6])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_poison_after_position_i_leaves_rows_up_to_i_bit_for_bit(
    backend, precision, i, poison
):
    # T = 13: three blocks of 4 and a tail of 1. The sizes and the call are
    # MULTI_CASES' last case's, whose programs JAX has compiled: the blocks
    # that i and i + 1 fall in are what this tests, not the batch or T.
    x, p = random_inputs(21, (2, 3), 13, C)
    run = dict(block_size=4, causal=True)
    clean, _ = _run_multi_blockwise(backend, x, p, precision, **run)
    x[..., i + 1 :, :] = poison  # queries, keys and values after position i
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf; 1e10 in float16
        poisoned, _ = _run_multi_blockwise(backend, x, p, precision, **run)
        finite_poison = np.isfinite(np.array(poison).astype(np_dtype(precision)))
    np.testing.assert_array_equal(poisoned[..., : i + 1, :], clean[..., : i + 1, :])
    later = poisoned[..., i + 1 :, :].astype(np.float64)
    if finite_poison:  # 1e10 (but not in float16, where it is Inf)
        assert np.all(np.isfinite(later))
    else:  # the later rows attend it: NaN in, NaN out
        assert np.all(np.isnan(later))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf], ids=str)
def test_a_non_finite_value_makes_every_row_that_attends_it_nan(
    backend, dtype, poison, causal
):
    # One value entry of key 6 (query block 1 of B = 4) poisoned: rows 0 to 5
    # never attend it (causal), rows 6 and 7 attend it in the diagonal block,
    # rows 8 to 12 in a block without a mask; NaN, not Inf, as in the naive one.
    q, k, v = np.random.default_rng(22).standard_normal((3, 2, 13, 4))
    clean, _ = _run_blockwise(backend, q, k, v, dtype, block_size=4, causal=causal)
    v[..., 6, 1] = poison
    out, _ = _run_blockwise(backend, q, k, v, dtype, block_size=4, causal=causal)
    n_before = 6 if causal else 0  # the rows that never attend key 6
    np.testing.assert_array_equal(out[..., :n_before, :], clean[..., :n_before, :])
    assert np.all(np.isnan(out[..., n_before:, :]))


@pytest.mark.parametrize("rest", PARTIAL_RESTS)
@pytest.mark.parametrize("poison", PARTIAL_POISONS)
@pytest.mark.parametrize("j", [4, 6, 7, 8])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_partly_non_finite_value_leaks_into_no_row_that_may_not_attend_it(
    backend, precision, j, poison, rest
):
    # Key j's value is one non-finite entry and finite ones, such as
    # [NaN, 1e307, 1e307, 1e307]. With B = 4, key 4 opens query block 1, 6 is
    # inside it and 7 closes it: rows 4 to 7 meet it in the diagonal block,
    # where rows before j give it the weight 0 under the mask; key 8 opens
    # block 2, which rows 4 to 7 never visit and rows 9 to 12 meet in a block
    # without a mask. Rows before j are as if the value were clean, bit for
    # bit, and the rest NaN; lse never reads values, so it does not change.
    q, k, v = np.random.default_rng(23).standard_normal((3, 2, 13, 4))
    bad_v = v.copy()
    bad_v[..., j, :] = partly_non_finite_row(4, poison, rest, precision)
    # causal=True spelled out, as the tests above and below call it: jax.jit
    # compiles a keyword given apart from one left at its default
    run = dict(block_size=4, causal=True)
    out, lse = _run_blockwise(backend, q, k, v, precision, **run)
    bad_out, bad_lse = _run_blockwise(backend, q, k, bad_v, precision, **run)
    np.testing.assert_array_equal(bad_out[..., :j, :], out[..., :j, :])
    assert np.all(np.isnan(bad_out[..., j:, :].astype(np.float64)))
    np.testing.assert_array_equal(bad_lse, lse)


# Hostile magnitudes, as for the naive attention (tests/test_numerics.py):
# every score very negative, where a running max that starts anywhere but -inf
# underflows every exp to 0, and scores near the top of each dtype.


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_score_below_minus_2000_equals_the_naive_and_the_oracle(
    backend, precision, causal
):
    x, p = very_negative_scores(24, (2,), 13, 1)  # x (2, 13, 4), single head
    q, k, v = -x, x, x  # x @ w for w_q = -I, w_k = w_v = I, exactly
    assert _expected_lse(q, k, causal, True).max() < -2000  # the premise
    out, lse = _run_blockwise(backend, q, k, v, precision, block_size=4, causal=causal)
    assert np.all(np.isfinite(out.astype(np.float64))) and np.all(np.isfinite(lse))
    expected, _ = reference_single_head(x, p["w_q"], p["w_k"], p["w_v"], causal=causal)
    assert_close(out, expected, precision, "blockwise out, scores below -2000")
    assert_close(lse, _expected_lse(q, k, causal, True), precision, "lse")
    if causal:  # the naive attention is always causal
        naive, _ = run_single(backend, x, p["w_q"], p["w_k"], p["w_v"], precision)
        assert_close(out, naive, precision, "blockwise vs naive, below -2000")


@pytest.mark.parametrize("preset", ["tiny", "batched", "long"])
@pytest.mark.parametrize("precision", list(HOSTILE_SCORES))
def test_hostile_magnitudes_do_not_overflow(backend, precision, preset):
    x, params = hostile_inputs(preset, precision)  # scores up to 1e4, 6e4, 1e37
    assert PRESETS[preset].n_heads == H
    block_size = max(4, x.shape[-2] // 4)  # four query blocks
    # NumPy's warnings are errors in this suite: an overflow anywhere fails here.
    out, lse = _run_multi_blockwise(
        backend, x, params, precision, block_size=block_size
    )
    out = out.astype(np.float64)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(lse))
    ref_out, _, tolerance, _ = hostile_expected(preset, precision)
    assert_close(out, ref_out, tolerance, f"hostile blockwise {precision} out")
    # the naive attention eager: jitted, bfloat16's hostile scores are its
    # known limit (docs/contract.md)
    naive, _ = run_multi(backend, x, params, H, precision, jit=False)
    assert_close(out, naive, tolerance, f"hostile blockwise {precision} vs naive")


@pytest.mark.parametrize("shape", [(2, 1, 4), (2, 5, 1)], ids=["T=1", "D=1"])
def test_one_position_or_one_feature_is_enough(backend, dtype, shape):
    q, k, v = np.random.default_rng(26).standard_normal((3, *shape))
    out, lse = _run_blockwise(backend, q, k, v, dtype, block_size=2)
    expected_lse = _expected_lse(q, k, True, True)  # (2, T), float64
    T = shape[-2]
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(shape[-1])  # (2, T, T)
    weights = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    weights = np.exp(weights - expected_lse[..., None])
    assert_close(out, weights @ v, dtype, f"blockwise out, shape {shape}")
    assert_close(lse, expected_lse, dtype, f"blockwise lse, shape {shape}")


def test_scale_false_divides_by_nothing(backend, dtype):
    x, p, _ = _oracle("single", (), 37, True)
    expected, _ = reference_single_head(x, p["w_q"], p["w_k"], p["w_v"], scale=False)
    q, k, v = (x @ p[n] for n in ("w_q", "w_k", "w_v"))
    out, lse = _run_blockwise(backend, q, k, v, dtype, block_size=8, scale=False)
    assert_close(out, expected, dtype, "blockwise out, scale=False")
    assert_close(lse, _expected_lse(q, k, True, False), dtype, "lse, scale=False")


@pytest.mark.parametrize(("T", "block_size"), [(64, 8), (37, 8), (7, 1), (5, 16)])
def test_causal_visits_only_the_blocks_on_and_below_the_diagonal(
    backend, T, block_size
):
    q = backend.from_numpy(np.random.default_rng(0).standard_normal((2, T, 4)))
    visited = []
    jitted(backend, "blockwise_attention")(
        q, q, q, block_size=block_size, visit=lambda i, j: visited.append((i, j))
    )
    pairs = [(int(i), int(j)) for i, j in visited]
    n = -(-T // block_size)  # query blocks = key blocks = ceil(T / B)
    assert len(pairs) == n * (n + 1) // 2  # not n * n
    assert sorted(pairs) == [(i, j) for i in range(n) for j in range(i + 1)]
    if n > 1:
        assert len(pairs) < n * n


@pytest.mark.parametrize(("T", "block_size"), [(64, 8), (37, 8)])
def test_non_causal_visits_every_block_once(backend, T, block_size):
    q = backend.from_numpy(np.random.default_rng(0).standard_normal((T, 4)))
    visited = []
    jitted(backend, "blockwise_attention")(
        q,
        q,
        q,
        block_size=block_size,
        causal=False,
        visit=lambda i, j: visited.append((int(i), int(j))),
    )
    n = -(-T // block_size)
    assert sorted(visited) == [(i, j) for i in range(n) for j in range(n)]


BAD_BLOCKWISE = [
    (
        dict(block_size=0),
        ValueError,
        "block_size must be a positive integer, got 0",
    ),
    (
        dict(block_size=2.5),
        ValueError,
        "block_size must be a positive integer, got 2.5",
    ),
    (
        dict(block_size=True),
        ValueError,
        "block_size must be a positive integer, got True",
    ),
    (
        dict(k_shape=(6, 4)),
        ValueError,
        "k has shape (6, 4) but q has (5, 4); q, k and v must share one shape (..., T, D)",
    ),
    (
        dict(v_dtype="float32"),
        ValueError,
        "q has dtype float64 but v has dtype float32; give q, k and v one dtype",
    ),
    (
        dict(q_shape=(5,)),
        ValueError,
        "q must have shape (..., T, D) with rank >= 2, got (5,)",
    ),
    (
        dict(q_shape=(0, 4), k_shape=(0, 4), v_shape=(0, 4)),
        ValueError,
        "q has T = 0 positions; attention needs T >= 1, got (0, 4)",
    ),
    (
        dict(q_shape=(5, 0), k_shape=(5, 0), v_shape=(5, 0)),
        ValueError,
        "q has D = 0 features; attention needs D >= 1, got (5, 0)",
    ),
    (
        dict(v_shape=(5, 3)),
        ValueError,
        "v has shape (5, 3) but q has (5, 4); q, k and v must share one shape (..., T, D)",
    ),
    (
        dict(k_dtype="float32"),
        ValueError,
        "q has dtype float64 but k has dtype float32; give q, k and v one dtype",
    ),
    (
        dict(v_dtype="int64"),
        TypeError,
        "v must be a floating-point array (float16, bfloat16, float32, float64), "
        "got dtype int64",
    ),
    (
        dict(q_value=[[1.0] * 4] * 5),
        TypeError,
        "q must be an array with .shape and .dtype, got list",
    ),
    (
        dict(k_dtype="int64"),
        TypeError,
        "k must be a floating-point array (float16, bfloat16, float32, float64), "
        "got dtype int64",
    ),
    (
        dict(block_size=np.array(4)),
        ValueError,
        "block_size must be a Python int, known before any compute, got an array "
        "array(4); pass int(block_size)",
    ),
]


@pytest.mark.parametrize(
    ("change", "error", "message"),
    BAD_BLOCKWISE,
    ids=[m.split(";")[0][:40] for _, _, m in BAD_BLOCKWISE],
)
def test_bad_blockwise_input_raises_the_same_message(backend, change, error, message):
    arrays = {}
    for name in ("q", "k", "v"):
        shape = change.get(f"{name}_shape", (5, 4))
        arrays[name] = change.get(f"{name}_value") or backend.from_numpy(
            np.ones(shape), change.get(f"{name}_dtype", "float64")
        )
    with pytest.raises(error) as raised:
        backend.blockwise_attention(
            *arrays.values(), block_size=change.get("block_size", 2)
        )
    assert str(raised.value) == message


def test_bad_multi_head_blockwise_input_raises_the_same_message(backend):
    x, p = random_inputs(0, (), 6, 8)
    args = [backend.from_numpy(a) for a in (x, *(p[n] for n in PARAM_NAMES))]
    with pytest.raises(ValueError) as raised:
        backend.multi_head_blockwise_attention(*args, 3)
    assert str(raised.value) == "n_heads=3 does not divide d_model=8"
    with pytest.raises(ValueError) as raised:
        backend.multi_head_blockwise_attention(*args, 2, block_size=-1)
    assert str(raised.value) == "block_size must be a positive integer, got -1"


def test_the_docs_blockwise_example_runs_and_equals_the_oracle(backend):
    doc = Path(__file__).resolve().parents[1] / "docs" / "blockwise.md"
    pattern = r"```python\n(import impl_numpy as attn  # blockwise.*?)```"
    (example,) = re.findall(pattern, doc.read_text(), re.S)
    example = example.replace(
        "import impl_numpy as", f"import impl_{name_of(backend)} as"
    )
    namespace: dict = {}
    exec(compile(example, str(doc), "exec"), namespace)
    g = golden("tiny")
    out = backend.to_numpy(namespace["out"])
    assert_close(out, g["multi_out"], "float32", "docs blockwise out")
    steps = np.stack([backend.to_numpy(s) for s in namespace["steps"]])
    assert_close(steps, out, "float32", "docs decoded steps")


# Every option away from its default (tests/test_options.py registers them):
# block_size, causal=False, scale=False, visit and the biases at once, float64,
# against the oracle. Eager in every backend (JAX's jitted twins:
# tests/test_jax_blockwise.py).


def test_blockwise_takes_every_option_away_from_its_default(backend):
    x, p = random_inputs(42, (2,), 6, 8, D=4)
    q, k, v = (x @ p[n] for n in ("w_q", "w_k", "w_v"))  # (2, 6, 4)
    visited = []
    out, lse = backend.blockwise_attention(
        *(backend.from_numpy(a) for a in (q, k, v)),
        block_size=4,
        causal=False,
        scale=False,
        visit=lambda i, j: visited.append((int(i), int(j))),
    )
    expected, _ = reference_single_head(
        x, p["w_q"], p["w_k"], p["w_v"], causal=False, scale=False
    )
    assert_close(backend.to_numpy(out), expected, "float64", "out")
    lse_expected = _expected_lse(q, k, causal=False, scale=False)
    assert_close(backend.to_numpy(lse), lse_expected, "float64", "lse")
    assert sorted(visited) == [(0, 0), (0, 1), (1, 0), (1, 1)]  # 2 x 2 blocks of 4


def test_multi_head_blockwise_takes_every_option_away_from_its_default(backend):
    from helpers import options_problem

    case = options_problem()
    cast = [backend.from_numpy(a) for a in (case.x, *case.params.values())]
    b = {n: backend.from_numpy(a) for n, a in case.biases.items()}
    out, lse = backend.multi_head_blockwise_attention(
        *cast, case.H, block_size=4, causal=False, scale=False,
        biases=dict(b_q=b["b_q"], b_k=b["b_k"], b_v=b["b_v"], b_o=b["b_o"])
    )  # fmt: skip
    expected, _ = reference_multi_head(
        case.x, *case.params.values(), case.H, causal=False, scale=False,
        biases=case.biases
    )  # fmt: skip
    assert_close(backend.to_numpy(out), expected, "float64", "out")
    q, k = (
        (case.x @ case.params[w] + case.biases[b]).reshape(2, 6, 2, 4).swapaxes(1, 2)
        for w, b in (("w_q", "b_q"), ("w_k", "b_k"))
    )  # (2, H, T, D)
    lse_expected = _expected_lse(q, k, causal=False, scale=False)
    assert_close(backend.to_numpy(lse), lse_expected, "float64", "lse")
