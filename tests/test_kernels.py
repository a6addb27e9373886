"""The flash-attention kernels (impl_jax/kernel.py in Pallas, impl_torch/kernel.py
in Triton), one test body run once per kernel, in the kernel's interpreter on the
CPU (tox -e kernels; collected with --kernels only): equal to the float64 oracle
and to blockwise attention of the same backend, out and lse, for T a multiple of
the block size and not, T smaller than one block, batch and heads, causal and
not, float64 and float32 (float16 and bfloat16 on one case, where the
interpreter runs them); key-padding masks and fully masked rows (a zero output,
lse -inf, never NaN); a NaN, Inf or 1e10 a row may not attend never reaching it,
and one it attends making it NaN; scores below -2000; the same message for each
bad input in both; and docs/kernels.md's example. The variants (GQA, a window,
soft-capping) against the oracle in float64 and float32, and the key blocks a
window lets the loop visit, counted. Gradients: tests/test_jax_kernel.py and
tests/test_torch_kernel.py."""

from __future__ import annotations

import importlib
import math
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import PARAM_NAMES, golden, random_inputs, very_negative_scores

from shared import Variant, assert_close
from shared.dtypes import np_dtype
from shared.reference import reference_multi_head, reference_single_head

# (batch, T, block_size): T not a multiple of the block size, T smaller than one
# block, batch and heads with several blocks, T a multiple of the block size
CASES = [((), 37, 8), ((2,), 5, 16), ((2, 3), 13, 4), ((), 32, 8)]
C, H = 16, 4
HALF = ("float16", "bfloat16")


def backend_of(kernel):
    """impl_torch for impl_torch.kernel, impl_jax for impl_jax.kernel."""
    return importlib.import_module(kernel.__name__.partition(".")[0])


def refused(kernel, precision) -> bool:
    """Triton's interpreter cannot multiply bfloat16 (docs/kernels.md)."""
    return kernel.__name__ == "impl_torch.kernel" and precision == "bfloat16"


def with_variant(kwargs):
    """kwargs with the variant's fields given among them as one Variant."""
    fields = {
        n: kwargs.pop(n) for n in ("n_kv_heads", "window", "softcap") if n in kwargs
    }
    return kwargs | (dict(variant=Variant(**fields)) if fields else {})


def run_flash(kernel, q, k, v, precision, mask=None, **kwargs):
    """flash_attention (its _jit twin in JAX) on NumPy inputs; NumPy (out, lse);
    the variant's fields by name among kwargs."""
    backend = backend_of(kernel)
    args = [backend.from_numpy(a, precision) for a in (q, k, v)]
    mask = None if mask is None else backend.from_numpy(mask)
    attend = getattr(kernel, "flash_attention_jit", kernel.flash_attention)
    out, lse = attend(*args, mask, **with_variant(kwargs))
    return backend.to_numpy(out), backend.to_numpy(lse)


def run_multi_flash(kernel, x, p, precision, mask=None, **kwargs):
    """multi_head_flash_attention on NumPy inputs; NumPy (out, lse); the
    variant's fields by name among kwargs."""
    backend = backend_of(kernel)
    args = [backend.from_numpy(a, precision) for a in (x, *(p[n] for n in PARAM_NAMES))]
    biases = {n: backend.from_numpy(b, precision) for n, b in p.items() if n[0] == "b"}
    mask = None if mask is None else backend.from_numpy(mask)
    attend = getattr(
        kernel, "multi_head_flash_attention_jit", kernel.multi_head_flash_attention
    )
    out, lse = attend(*args, H, mask, **with_variant(kwargs), biases=biases)
    return backend.to_numpy(out), backend.to_numpy(lse)


def expected_lse(q, k, allowed, scale=True, softcap=None):
    """Each row's log-sum-exp of the scaled (and soft-capped) scores it may
    attend, in float64; -inf in a row that may attend nothing."""
    scores = q @ k.swapaxes(-1, -2) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    scores = np.where(allowed, scores, -np.inf)  # (..., T, T)
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(top == -np.inf, 0.0, top)
    with np.errstate(divide="ignore"):  # log 0 = -inf: nothing to attend
        return (top + np.log(np.exp(scores - top).sum(axis=-1, keepdims=True)))[..., 0]


def causal(T):
    return np.tril(np.ones((T, T), dtype=bool))


def in_window(T, window):
    """(T, T): key j reaches query i iff i - W < j <= i (docs/variants.md)."""
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    return (j <= i) & (j > i - window)


def oracle(q, k, v, mask=None, is_causal=True, scale=True):
    """The float64 oracle on per-head q, k, v (..., T, D): shared.reference on
    x = [q k v] with weights that pick each third (exact: products by 0 and 1)."""
    D = q.shape[-1]
    x = np.concatenate([q, k, v], axis=-1)  # (..., T, 3D)
    pick = np.eye(3 * D)  # (3D, 3D)
    w_q, w_k, w_v = (pick[:, i * D : (i + 1) * D] for i in range(3))  # (3D, D)
    out, _ = reference_single_head(
        x, w_q, w_k, w_v, mask=mask, causal=is_causal, scale=scale
    )
    return out


def _runs():
    runs = [
        (p, *case, c) for p in ("float64", "float32") for case in CASES for c in (1, 0)
    ]
    runs += [(p, *CASES[0], 1) for p in HALF]
    return [
        pytest.param(p, b, T, B, bool(c), id=f"{p}-batch{b}-T{T}-B{B}-causal{c}")
        for p, b, T, B, c in runs
    ]


@pytest.mark.parametrize(
    ("precision", "batch", "T", "block_size", "is_causal"), _runs()
)
def test_flash_equals_the_oracle(kernel, precision, batch, T, block_size, is_causal):
    x, p = random_inputs(T, batch, T, C)
    q, k, v = (x @ p[n] for n in ("w_q", "w_k", "w_v"))  # (..., T, C), float64
    kwargs = dict(block_size=block_size, causal=is_causal)
    if refused(kernel, precision):
        with pytest.raises(ValueError, match="bfloat16 does not run in Triton's"):
            run_flash(kernel, q, k, v, precision, **kwargs)
        return
    out, lse = run_flash(kernel, q, k, v, precision, **kwargs)
    assert out.dtype == np_dtype(precision)
    assert lse.dtype == np.promote_types(out.dtype, np.float32)  # the softmax dtype
    expected, _ = reference_single_head(
        x, p["w_q"], p["w_k"], p["w_v"], causal=is_causal
    )
    what = f"flash {precision}, block_size={block_size}"
    assert_close(out, expected, precision, f"{what}: out")
    allowed = causal(T) if is_causal else np.ones((T, T), dtype=bool)
    assert_close(lse, expected_lse(q, k, allowed), precision, f"{what}: lse")


@pytest.mark.parametrize("is_causal", [True, False], ids=["causal", "noncausal"])
def test_flash_equals_blockwise(kernel, dtype, is_causal):
    backend = backend_of(kernel)
    q, k, v = np.random.default_rng(1).standard_normal((3, 2, 3, 21, 8))
    out, lse = run_flash(kernel, q, k, v, dtype, block_size=8, causal=is_causal)
    blockwise = getattr(backend, "blockwise_attention_jit", backend.blockwise_attention)
    expected = blockwise(
        *(backend.from_numpy(a, dtype) for a in (q, k, v)),
        block_size=8,
        causal=is_causal,
    )
    for ours, theirs, what in zip((out, lse), expected, ("out", "lse"), strict=True):
        assert_close(
            ours, backend.to_numpy(theirs), dtype, f"flash vs blockwise {what}"
        )


def test_multi_head_with_key_padding_and_biases_equals_the_oracle(kernel, dtype):
    # item 0 pads its last 4 keys, item 1 its first 3 (its queries 0 to 2 may
    # attend nothing: a zero attention output, then w_o and b_o), item 2 has no
    # key at all
    T = 11
    x, p = random_inputs(5, (3,), T, C)
    rng = np.random.default_rng(6)
    p |= {f"b_{n}": rng.standard_normal(C) for n in "qkvo"}
    keep = np.ones((3, T), dtype=bool)
    keep[0, -4:], keep[1, :3], keep[2] = False, False, False
    backend = backend_of(kernel)
    mask = backend.to_numpy(
        backend.key_padding_mask(backend.from_numpy(keep), T, multi_head=True)
    )  # (3, 1, 1, T)
    out, lse = run_multi_flash(kernel, x, p, dtype, mask, block_size=4)
    biases = {n: p[n] for n in ("b_q", "b_k", "b_v", "b_o")}
    expected, _ = reference_multi_head(
        x, *(p[n] for n in PARAM_NAMES), H, mask=mask, biases=biases
    )
    assert_close(out, expected, dtype, "multi-head flash with key padding")
    nothing = ~np.logical_or.accumulate(keep, axis=-1)  # (3, T): no key kept yet
    assert nothing.sum() == 3 + T  # the premise: fully masked rows exist
    assert lse.shape == (3, H, T)
    per_head = lse.swapaxes(0, 1)  # (H, 3, T)
    assert np.all(np.isneginf(per_head[:, nothing]))
    assert np.all(np.isfinite(per_head[:, ~nothing]))
    assert not np.isnan(out).any()


@pytest.mark.parametrize("precision", ["float64", "float32", "float16"])
def test_fully_masked_rows_give_a_zero_output_and_lse_minus_inf(kernel, precision):
    T = 9
    q, k, v = np.random.default_rng(7).standard_normal((3, 2, T, 4))
    keep = np.ones((2, T), dtype=bool)
    keep[0, :5] = False  # queries 0 to 4 of item 0 may attend nothing
    keep[1] = False  # item 1: no key at all
    mask = keep[:, None, :]  # (2, 1, T)
    out, lse = run_flash(kernel, q, k, v, precision, mask, block_size=4)
    allowed = causal(T) & mask  # (2, T, T)
    nothing = ~allowed.any(axis=-1)  # (2, T)
    assert nothing.sum() == 5 + T  # the premise
    np.testing.assert_array_equal(out[nothing], 0.0)
    assert np.all(np.isneginf(lse[nothing])) and np.all(np.isfinite(lse[~nothing]))
    assert_close(out, oracle(q, k, v, mask), precision, "flash, fully masked rows")
    expected = expected_lse(q, k, allowed)
    assert_close(lse[~nothing], expected[~nothing], precision, "lse")


# Masked positions never leak (tests/test_blockwise.py has the same for the
# blockwise attention): with B = 4, i = 5 shares query block 1 with the first
# poisoned positions, where the diagonal block masks them.


# Triton's interpreter takes a row's max with NumPy, which warns of NaN rows
@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")
@pytest.mark.parametrize("poison", [math.nan, math.inf, 1e10], ids=str)
def test_poison_after_position_i_leaves_rows_up_to_i_bit_for_bit(kernel, poison):
    x, p = random_inputs(21, (2,), 12, C)  # T = 12: three blocks of 4
    clean, _ = run_multi_flash(kernel, x, p, "float32", block_size=4)
    x[..., 6:, :] = poison  # queries, keys and values after position i = 5
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, in NumPy
        poisoned, _ = run_multi_flash(kernel, x, p, "float32", block_size=4)
    np.testing.assert_array_equal(poisoned[..., :6, :], clean[..., :6, :])
    later = poisoned[..., 6:, :]
    assert np.all(np.isfinite(later) if math.isfinite(poison) else np.isnan(later))


@pytest.mark.parametrize("is_causal", [True, False], ids=["causal", "noncausal"])
@pytest.mark.parametrize("poison", [math.nan, math.inf], ids=str)
def test_a_non_finite_value_reaches_exactly_the_rows_that_attend_it(
    kernel, poison, is_causal
):
    # key 6 has one value entry poisoned: rows that attend it are NaN (causal:
    # rows 6 on), the others as before bit for bit; key 2, masked out, holds a
    # NaN too, and no row ever sees it
    q, k, v = np.random.default_rng(22).standard_normal((3, 2, 13, 4))
    mask = np.ones((1, 13), dtype=bool)
    mask[0, 2] = False
    kwargs = dict(block_size=4, causal=is_causal)
    clean, _ = run_flash(kernel, q, k, v, "float32", mask, **kwargs)
    v[..., 2, :] = math.nan  # masked: never attended
    masked_only, _ = run_flash(kernel, q, k, v, "float32", mask, **kwargs)
    np.testing.assert_array_equal(masked_only, clean)
    v[..., 6, 1] = poison
    out, _ = run_flash(kernel, q, k, v, "float32", mask, **kwargs)
    n_before = 6 if is_causal else 0  # the rows that never attend key 6
    np.testing.assert_array_equal(out[..., :n_before, :], clean[..., :n_before, :])
    assert np.all(np.isnan(out[..., n_before:, :]))


def test_every_score_below_minus_2000_equals_the_oracle(kernel, dtype):
    x, _ = very_negative_scores(24, (2,), 13, 1)  # x (2, 13, 4), single head
    q, k, v = -x, x, x  # scores -2048 - n / 2, exactly
    out, lse = run_flash(kernel, q, k, v, dtype, block_size=4)
    assert lse.max() < -2000 and np.all(np.isfinite(out))  # the premise, and no 0 / 0
    assert_close(out, oracle(q, k, v), dtype, "flash out, scores below -2000")
    assert_close(lse, expected_lse(q, k, causal(13)), dtype, "lse")


def test_scale_false_divides_by_nothing(kernel, dtype):
    q, k, v = np.random.default_rng(8).standard_normal((3, 2, 11, 4)) / 2
    out, lse = run_flash(kernel, q, k, v, dtype, block_size=4, scale=False)
    assert_close(out, oracle(q, k, v, scale=False), dtype, "flash, scale=False")
    assert_close(lse, expected_lse(q, k, causal(11), scale=False), dtype, "lse")


# The variants: GQA, the sliding window, soft-capping (docs/variants.md)

VARIANTS = dict(n_kv_heads=2, window=6, softcap=2.0)  # 4 query heads, 2 KV heads


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_gqa_window_and_softcap_equal_the_oracle(kernel, precision):
    """multi_head_flash_attention with the three at once against the oracle,
    out and lse; in float64, flash_attention on the per-head q (2, H, T, D)
    and the KV heads' k, v (2, H_kv, T, D), its heads merged and projected,
    too (how each dtype rounds, the multi-head call shows). T = 13 in blocks
    of 4: query block 2 starts at key block 0 for its row 8 (8 - 6 < 3),
    query block 3 at key block 1: a loop that started one key late would
    miss key 3."""
    T, D = 13, C // H
    x, p = random_inputs(31, (2,), T, C)
    p["w_k"], p["w_v"] = p["w_k"][:, : 2 * D], p["w_v"][:, : 2 * D]  # (C, H_kv * D)
    out, lse = run_multi_flash(kernel, x, p, precision, block_size=4, **VARIANTS)
    expected, _ = reference_multi_head(
        x, *(p[n] for n in PARAM_NAMES), H, variant=Variant(**VARIANTS)
    )
    assert_close(out, expected, precision, f"multi-head flash, {VARIANTS}")
    q, k, v = (
        (x @ p[w]).reshape(2, T, -1, D).swapaxes(1, 2) for w in ("w_q", "w_k", "w_v")
    )  # (2, H, T, D), (2, H_kv, T, D) twice
    k_of_head = k.repeat(2, axis=1)  # (2, H, T, D): query head h reads KV head h // 2
    allowed = in_window(T, VARIANTS["window"])
    lse_expected = expected_lse(q, k_of_head, allowed, softcap=VARIANTS["softcap"])
    assert_close(lse, lse_expected, precision, "multi-head flash lse")
    if precision != "float64":
        return
    heads, lse = run_flash(kernel, q, k, v, precision, block_size=4, **VARIANTS)
    merged = heads.swapaxes(1, 2).reshape(2, T, C) @ p["w_o"]  # (2, T, C)
    assert_close(merged, expected, precision, "flash_attention's heads, merged")
    assert_close(lse, lse_expected, precision, "flash lse")


def test_a_window_visits_only_the_key_blocks_it_reaches(kernel, monkeypatch):
    """Each call of online_softmax_step is one key block visited by one
    program (counted in the interpreter: a Python call in Triton's, a
    jax.debug.callback in Pallas's): with a window of 5 in blocks of 4,
    exactly the blocks that hold a key some row of the query block reaches,
    7 of the 10 up to the diagonal; a loop that started one block early (at
    (i * B - W) // B) would visit 9."""
    backend = backend_of(kernel)
    T, B, window = 16, 4, 5  # query block i reaches key blocks i - 1 and i
    visits = []
    step = kernel.online_softmax_step

    def counted(*args):
        if kernel.__name__ == "impl_jax.kernel":
            jax.debug.callback(lambda: visits.append(1))
        else:
            visits.append(1)
        return step(*args)

    if kernel.__name__ == "impl_jax.kernel":
        import jax
    monkeypatch.setattr(kernel, "online_softmax_step", counted)
    q = backend.from_numpy(np.random.default_rng(9).standard_normal((T, 4)))
    kernel.flash_attention(q, q, q, block_size=B, variant=Variant(window=window))
    reached = in_window(T, window).reshape(T // B, B, T // B, B).any(axis=(1, 3))
    assert len(visits) == reached.sum() == 7  # (i, j): a key of block j in reach


BAD_FLASH = [
    (
        dict(block_size=12),
        "block_size must be a power of two (a kernel's tiles are), got 12",
    ),
    (dict(block_size=0), "block_size must be a positive integer, got 0"),
    (
        dict(shape=(5, 300)),
        "head width D = 300 is more than the flash kernels take (at most 256): use "
        "more heads, or blockwise_attention",
    ),
    (
        dict(mask=np.ones((5, 5), dtype=bool)),
        "mask of shape (5, 5) is not a key mask: the flash kernels take (..., 1, T) = "
        "(1, 5), one row of keys for every query (as key_padding_mask makes), never a "
        "(T, T) mask",
    ),
    (
        dict(mask=np.ones((1, 5))),
        "mask must be a boolean array (True = may attend), got dtype float64",
    ),
    (
        dict(mask=np.ones((1, 6), dtype=bool)),
        "mask of shape (1, 6) does not broadcast to (..., T, T) = (5, 5)",
    ),
    (dict(interpret="yes"), "interpret must be None, True or False, got 'yes'"),
    (
        dict(shape=(3, 5, 4), n_kv_heads=2),
        "n_heads=3 is not a multiple of n_kv_heads=2: each key/value head serves "
        "n_heads / n_kv_heads query heads",
    ),
    (
        dict(shape=(4, 5, 4), n_kv_heads=2),
        "k has shape (4, 5, 4) but q has (4, 5, 4): with n_kv_heads=2, k and v must "
        "have shape (..., n_kv_heads, T, D) = (2, 5, 4)",
    ),
    (dict(window=0), "window must be a positive integer, got 0"),
    (
        dict(window=3, causal=False),
        "window needs causal=True: a sliding window is the W keys up to each query",
    ),
    (
        dict(softcap=0.0),
        "softcap must be a positive number (scores are capped to (-softcap, "
        "softcap)), got 0.0",
    ),
    (
        dict(interpret=False),
        "interpret=False compiles the {language} kernel for a GPU, but the arrays are "
        "on cpu: pass interpret=True (or None) to run it in the interpreter, or put "
        "them on a GPU",
    ),
]


@pytest.mark.parametrize(
    ("change", "message"), BAD_FLASH, ids=[m.split(":")[0][:40] for _, m in BAD_FLASH]
)
def test_bad_flash_input_raises_the_same_message(kernel, change, message):
    backend = backend_of(kernel)
    change = dict(change)
    q = backend.from_numpy(np.ones(change.pop("shape", (5, 4))))
    mask = change.pop("mask", None)
    mask = None if mask is None else backend.from_numpy(mask)
    with pytest.raises(ValueError) as raised:
        kernel.flash_attention(
            q, q, q, mask, **with_variant({"block_size": 4} | change)
        )
    language = {"impl_jax.kernel": "Pallas", "impl_torch.kernel": "Triton"}
    assert str(raised.value) == message.format(language=language[kernel.__name__])


def test_bad_multi_head_flash_input_raises_the_same_message(kernel):
    backend = backend_of(kernel)
    x, p = random_inputs(0, (2,), 6, 8)
    args = [backend.from_numpy(a) for a in (x, *(p[n] for n in PARAM_NAMES))]
    with pytest.raises(ValueError) as raised:
        kernel.multi_head_flash_attention(*args, 3)
    assert str(raised.value) == "n_heads=3 does not divide d_model=8"
    per_query = backend.from_numpy(np.ones((2, 1, 6, 6), dtype=bool))
    with pytest.raises(ValueError) as raised:
        kernel.multi_head_flash_attention(*args, 2, per_query)
    assert str(raised.value) == (
        "mask of shape (2, 1, 6, 6) is not a key mask: the flash kernels take "
        "(..., H, 1, T) = (2, 2, 1, 6), one row of keys for every query (as "
        "key_padding_mask makes), never a (T, T) mask"
    )
    for variant, message in (
        (dict(n_kv_heads=3), "n_heads=2 is not a multiple of n_kv_heads=3"),
        (dict(window=-1), "window must be a positive integer, got -1"),
        (dict(softcap=math.inf), "softcap must be a positive number"),
    ):
        with pytest.raises(ValueError) as raised:
            kernel.multi_head_flash_attention(*args, 2, variant=Variant(**variant))
        assert str(raised.value).startswith(message)


def test_the_docs_example_runs_and_equals_the_oracle(kernel):
    doc = Path(__file__).resolve().parents[1] / "docs" / "kernels.md"
    (example,) = re.findall(
        r"```python\n(import numpy as np\n.*?)```", doc.read_text(), re.S
    )
    backend = backend_of(kernel)
    example = example.replace("from impl_jax import", f"from {backend.__name__} import")
    namespace: dict = {}
    exec(compile(example, str(doc), "exec"), namespace)
    g = golden("tiny")
    out = backend.to_numpy(namespace["out"])
    assert_close(out, g["multi_out"], "float32", "docs example out")
    mask = (np.arange(8) < 6)[None, None, :]  # (1, 1, T), as the example makes
    expected, _ = reference_multi_head(
        g["x"], *(g[n] for n in PARAM_NAMES), 4, mask=mask
    )
    masked = backend.to_numpy(namespace["masked"])
    assert_close(masked, expected, "float32", "docs example, key padding")


# Every option away from its default (tests/test_options.py registers them):
# the forward here, the gradients in tests/test_torch_kernel.py and
# tests/test_jax_kernel.py, on the same problems (tests/helpers.py).


def test_every_option_away_from_its_default_equals_the_oracle(kernel):
    """flash_attention and multi_head_flash_attention (and JAX's _jit twins)
    with a key mask, block_size=2, causal=False, scale=False, interpret=True
    and every bias at once, float64, out and lse against the oracle; and
    interpret=False, which compiles for a GPU, refused for CPU arrays."""
    from helpers import (
        flash_options_case,
        logsumexp_rows,
        options_problem,
        reference_on_qkv,
    )

    backend = backend_of(kernel)
    case = flash_options_case()
    qkv = [backend.from_numpy(a) for a in (case.q, case.k, case.v)]
    mask = backend.from_numpy(case.mask)
    expected = reference_on_qkv(
        case.q, case.k, case.v, case.mask, causal=False, scale=False
    )
    expected_lse = logsumexp_rows(case.q, case.k, case.mask, scale=False)
    jitted = getattr(kernel, "flash_attention_jit", None)  # JAX only
    for flash in filter(None, (kernel.flash_attention, jitted)):
        out, lse = flash(
            *qkv, mask, block_size=2, causal=False, scale=False, interpret=True
        )
        assert_close(backend.to_numpy(out), expected, "float64", "flash out")
        assert_close(backend.to_numpy(lse), expected_lse, "float64", "flash lse")
    multi = options_problem()
    H = multi.H  # 2 heads of D = 4
    x = backend.from_numpy(multi.x)
    weights = [backend.from_numpy(multi.params[n]) for n in PARAM_NAMES]
    b = {n: backend.from_numpy(a) for n, a in multi.biases.items()}
    key_mask = multi.keep[:, None, None, :]  # (2, 1, 1, T)
    expected, _ = reference_multi_head(
        multi.x, *multi.params.values(), H, key_mask, causal=False,
        scale=False, biases=multi.biases,
    )  # fmt: skip
    q, k = (
        (multi.x @ multi.params[w] + multi.biases[n]).reshape(2, 6, H, 4).swapaxes(1, 2)
        for w, n in (("w_q", "b_q"), ("w_k", "b_k"))
    )  # (2, H, T, D)
    expected_lse = logsumexp_rows(q, k, key_mask, scale=False)
    jitted = getattr(kernel, "multi_head_flash_attention_jit", None)  # JAX only
    for flash in filter(None, (kernel.multi_head_flash_attention, jitted)):
        out, lse = flash(
            x, *weights, H, backend.from_numpy(key_mask), block_size=2,
            causal=False, scale=False, interpret=True, biases=b,
        )  # fmt: skip
        assert_close(backend.to_numpy(out), expected, "float64", "multi-head out")
        assert_close(backend.to_numpy(lse), expected_lse, "float64", "multi-head lse")
    language = {"impl_jax.kernel": "Pallas", "impl_torch.kernel": "Triton"}
    refused = f"interpret=False compiles the {language[kernel.__name__]} kernel"
    with pytest.raises(ValueError, match=refused):
        kernel.flash_attention(*qkv, mask, interpret=False)
    with pytest.raises(ValueError, match=refused):
        kernel.multi_head_flash_attention(x, *weights, H, interpret=False)


@pytest.mark.parametrize("bias", ["b_q", "b_k", "b_v", "b_o"])
def test_a_bias_of_the_wrong_shape_raises_the_same_message(kernel, bias):
    """Every bias is checked before any compute, b_o (the output projection's,
    added after the kernel) too. (Kills tox -e mutate-torch's mutant of
    multi_head_flash_attention that leaves b_o out of the check.)"""
    backend = backend_of(kernel)
    x, p = random_inputs(0, (2,), 6, 8)
    args = [backend.from_numpy(a) for a in (x, *(p[n] for n in PARAM_NAMES))]
    wrong = backend.from_numpy(np.zeros(7))
    with pytest.raises(ValueError) as raised:
        kernel.multi_head_flash_attention(*args, 2, block_size=4, biases={bias: wrong})
    assert str(raised.value) == f"{bias} must have shape (C,) = (8,), got (7,)"
