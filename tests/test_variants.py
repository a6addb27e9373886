"""The variants of modern attention (docs/variants.md), once per backend:
grouped-query attention, rotary positions (NeoX and GPT-J, partial, explicit
positions), the sliding window, ALiBi, soft-capping, sinks and QK-norm, each
alone and all at once, in multi_head_attention, the blockwise attention and
decoding, against the float64 oracle (float64 and float32 within the table);
their defaults leave plain attention bit for bit; a rolling cache of W slots
equals the full pass at every step and GQA's cache is H_kv / H the size;
every bad option is one message, the same in every backend, before any
compute; and the conventions where libraries differ (window, RoPE style,
causal alignment), each shown on the oracle. The other libraries run in
tests/test_torch_variants.py and tests/test_jax_variants.py."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import ShapeOnly, jitted

from shared import assert_close
from shared.reference import reference_multi_head
from shared.variants import Rotary, Variant, alibi_slopes

DOCS = Path(__file__).resolve().parents[1] / "docs"

# One small problem for every variant: B = 2, T = 6, C = 16, H = 4 query
# heads of D = 4, H_kv = 2 key/value heads (w_k, w_v (C, 8)).
B, T, C, H, H_KV = 2, 6, 16, 4, 2
D = C // H


def problem(seed=270):
    """x (B, T, C), w_q, w_o (C, C), w_k, w_v (C, H_KV * D) for GQA and their
    (C, C) twins for the rest, and the arrays the variants take; float64."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, C))
    w = {n: rng.standard_normal((C, C)) / np.sqrt(C) for n in ("w_q", "w_k", "w_v")}
    w["w_o"] = rng.standard_normal((C, C)) / np.sqrt(C)
    grouped = {n: rng.standard_normal((C, H_KV * D)) / np.sqrt(C) for n in "kv"}
    arrays = dict(
        sinks=rng.standard_normal(H),
        q_norm=1 + 0.3 * rng.standard_normal(D),
        k_norm=1 + 0.3 * rng.standard_normal(D),
        positions=np.array([5, 2, 9, 3, 0, 7]),  # any order, repeats allowed
    )
    return x, w, grouped, arrays


X, W, GROUPED, ARRAYS = problem()

# name: the options (arrays by name from ARRAYS); GQA uses the (C, 8) w_k, w_v
VARIANTS = {
    "gqa": dict(n_kv_heads=H_KV),
    "mqa": dict(n_kv_heads=1),
    "rope_neox": dict(rotary=Rotary()),
    "rope_gptj_partial": dict(rotary=Rotary(base=100.0, style="gptj", fraction=0.5)),
    "rope_positions": dict(rotary=Rotary(style="gptj"), positions="positions"),
    "window": dict(window=3),
    "alibi": dict(alibi=True),
    "softcap": dict(softcap=0.7),
    "sinks": dict(sinks="sinks"),
    "qk_norm": dict(q_norm="q_norm", k_norm="k_norm", qk_norm_eps=1e-2),
    "all": dict(
        n_kv_heads=H_KV,
        rotary=Rotary(fraction=0.5),
        window=2,
        alibi=True,
        softcap=1.5,
        sinks="sinks",
        q_norm="q_norm",
        k_norm="k_norm",
    ),
}


def cases(backend, variants):
    """Every variant for NumPy and torch; for JAX, whose calls compile each
    new shape and loop, the one with all of them and the interleaved (GPT-J)
    rotary over the whole head, which "all" (NeoX, on 2 of D = 4 features)
    does not take (tests/test_jax_variants.py adds the jitted twins)."""
    if backend.__name__ == "impl_jax":
        return {n: variants[n] for n in ("all", "rope_positions")}
    return variants


def weights_for(options, dtype="float64"):
    """w_q, w_k, w_v, w_o for the options (GQA's narrower w_k, w_v), in dtype."""
    H_kv = options.get("n_kv_heads", H)
    k, v = (
        (GROUPED[n][:, : H_kv * D] for n in "kv") if H_kv != H else (W["w_k"], W["w_v"])
    )
    return [a.astype(dtype) for a in (W["w_q"], k, v, W["w_o"])]


def numpy_options(options, dtype="float64"):
    """The options with ARRAYS' arrays in place of their names (floats in dtype)."""
    found = {}
    for name, value in options.items():
        if isinstance(value, str) and value in ARRAYS:
            value = ARRAYS[value]
            value = value if value.dtype.kind == "i" else value.astype(dtype)
        found[name] = value
    return found


def backend_variant(backend, options, dtype="float64"):
    """The Variant of the options, its arrays the backend's."""
    return Variant(**{
        n: backend.from_numpy(a) if isinstance(a, np.ndarray) else a
        for n, a in numpy_options(options, dtype).items()
    })  # fmt: skip


def expected(options, dtype="float64"):
    """The oracle on the inputs rounded to dtype."""
    x = X.astype(dtype).astype(np.float64)
    weights = [w.astype(np.float64) for w in weights_for(options, dtype)]
    arrays = {
        n: a.astype(np.float64) if a.dtype.kind == "f" else a
        for n, a in numpy_options(options, dtype).items()
        if isinstance(a, np.ndarray)
    }
    return reference_multi_head(x, *weights, H, variant=Variant(**options | arrays))


def run(
    backend,
    options,
    dtype="float64",
    function="multi_head_attention",
    jit=False,
    **more,
):
    """`function` (multi-head: eager unless `jit`; the others: jitted in JAX)."""
    x = backend.from_numpy(X, dtype)
    weights = [backend.from_numpy(w) for w in weights_for(options, dtype)]
    eager = function == "multi_head_attention" and not jit
    call = getattr(backend, function) if eager else jitted(backend, function)
    found = call(
        x, *weights, H, variant=backend_variant(backend, options, dtype), **more
    )
    return tuple(backend.to_numpy(a) for a in found)


def decode(backend, options, dtype="float64", max_len=T):
    """Decode X token by token with the options; NumPy (out (B, T, C), cache)."""
    weights = [backend.from_numpy(w) for w in weights_for(options, dtype)]
    variant = backend_variant(backend, options, dtype)
    cache = backend.init_kv_cache((B,), max_len, C, H, dtype, variant=variant)
    outs = []
    for t in range(T):
        x_t = backend.from_numpy(X[:, t].astype(dtype))
        if variant.positions is not None:  # x_t's rotary position
            position = backend.from_numpy(ARRAYS["positions"][t : t + 1])
            variant = dataclasses.replace(variant, positions=position)
        step = jitted(backend, "decode_step")
        out_t, cache = step(x_t, cache, *weights, H, variant=variant)
        outs.append(backend.to_numpy(out_t))
    return np.stack(outs, axis=-2), cache


# Every variant against the oracle, and the defaults bit for bit


def test_each_variant_equals_the_oracle(backend, dtype):
    """JAX: all at once, eager in float32 and jitted in float64
    (tests/test_jax_variants.py adds the options "all" leaves out)."""
    jit = backend.__name__ == "impl_jax" and dtype == "float64"
    for name, options in cases(backend, VARIANTS).items():
        out, weights = run(backend, options, dtype, jit=jit)
        out_expected, weights_expected = expected(options, dtype)
        assert_close(out, out_expected, dtype, f"{name}: out")
        assert_close(weights, weights_expected, dtype, f"{name}: weights")


def test_the_variants_change_the_result():
    """No variant is silently ignored: each one moves the oracle's output
    away from plain attention's (the problem is not blind to any)."""
    plain = reference_multi_head(X, *weights_for({}), H)[0]
    for name, options in VARIANTS.items():
        if options.get("n_kv_heads"):  # other weights: compare with GQA's own
            continue
        found = expected(options)[0]
        assert np.abs(found - plain).max() > 1e-3, name


def test_explicit_defaults_leave_plain_attention_bit_for_bit(backend):
    """Variant() (every choice at its default), and n_kv_heads = H, give the
    very bits of the plain call (the lesson's, tests/test_reading_path.py)."""
    x = backend.from_numpy(X)
    w = [backend.from_numpy(a) for a in weights_for({})]
    for function in ("multi_head_attention", "multi_head_blockwise_attention"):
        plain = getattr(backend, function)(x, *w, H)
        for variant in (Variant(), Variant(n_kv_heads=H, head_dim=D)):
            found = getattr(backend, function)(x, *w, H, variant=variant)
            for a, b in zip(plain, found, strict=True):
                np.testing.assert_array_equal(
                    backend.to_numpy(a), backend.to_numpy(b), err_msg=function
                )
    plain_decoded, _ = decode(backend, {})
    cache = backend.init_kv_cache((B,), T, C, H, "float64", variant=Variant())
    out_0, _ = backend.decode_step(
        backend.from_numpy(X[:, 0]), cache, *w, H, variant=Variant()
    )
    np.testing.assert_array_equal(backend.to_numpy(out_0), plain_decoded[:, 0])


def test_head_dim_other_than_c_over_h(backend):
    """Qwen 3's and gpt-oss's layers: H * D != C, w_q (C, H * D), w_o (H * D, C)
    (JAX: its jitted twin, one compile)."""
    rng = np.random.default_rng(271)
    head_dim = 6  # H * D = 24, C = 16
    w_q = rng.standard_normal((C, H * head_dim)) / 4
    w_k, w_v = (rng.standard_normal((C, H_KV * head_dim)) / 4 for _ in "kv")
    w_o = rng.standard_normal((H * head_dim, C)) / 4
    weights = (w_q, w_k, w_v, w_o)
    variant = Variant(n_kv_heads=H_KV, head_dim=head_dim, rotary=Rotary())
    attention = jitted(backend, "multi_head_attention")
    found = attention(
        backend.from_numpy(X), *(backend.from_numpy(w) for w in weights), H,
        variant=variant,
    )  # fmt: skip
    want = reference_multi_head(X, *weights, H, variant=variant)
    for a, e, what in zip(found, want, ("out", "weights"), strict=True):
        assert_close(backend.to_numpy(a), e, "float64", what)
    given = [backend.from_numpy(w) for w in weights]
    out, _ = jitted(backend, "multi_head_blockwise_attention")(
        backend.from_numpy(X), *given, H, block_size=4, variant=variant
    )
    assert_close(backend.to_numpy(out), want[0], "float64", "blockwise")
    cache = backend.init_kv_cache((B,), T, C, H, "float64", variant=variant)
    assert backend.to_numpy(cache.k).shape == (B, H_KV, T, head_dim)
    decode_step = jitted(backend, "decode_step")
    for t in range(T):
        out_t, cache = decode_step(
            backend.from_numpy(X[:, t]), cache, *given, H, variant=variant
        )
        assert_close(backend.to_numpy(out_t), want[0][:, t], "float64", f"decoded {t}")


# Blockwise attention and decoding


def test_blockwise_with_each_variant_equals_the_oracle(backend):
    """Block sizes 2 and 4 (T = 6: a window of 2 or 3 skips whole blocks)."""
    for name, options in cases(backend, VARIANTS).items():
        out_expected, _ = expected(options)
        for block_size in (2,) if backend.__name__ == "impl_jax" else (2, 4):
            out, lse = run(
                backend, options, function="multi_head_blockwise_attention",
                block_size=block_size,
            )  # fmt: skip
            assert_close(out, out_expected, "float64", f"{name}, B = {block_size}")
            assert lse.shape == (B, H, T)


def core_problem():
    """Per-head q, k, v (B, H, T, D) of the problem, the variant a per-head
    core takes (window, softcap, ALiBi, sinks (H,)), and the oracle's merged
    heads (B, T, C) for them (w_o the identity)."""
    w_q, w_k, w_v, _ = weights_for({})
    q, k, v = ((X @ w).reshape(B, T, H, D).swapaxes(1, 2) for w in (w_q, w_k, w_v))
    variant = Variant(window=3, softcap=2.0, alibi=True, sinks=ARRAYS["sinks"])
    merged, _ = reference_multi_head(X, w_q, w_k, w_v, np.eye(C), H, variant=variant)
    return q, k, v, variant, merged


def test_blockwise_core_takes_every_variant_away_from_its_default(backend):
    """blockwise_attention(q, k, v, variant=Variant(window=, softcap=,
    alibi=True, sinks=)) per head, merged, is the oracle's multi-head
    attention; lse holds the sink."""
    q, k, v, variant, merged = core_problem()
    sinks = backend.from_numpy(variant.sinks)
    out, lse = jitted(backend, "blockwise_attention")(
        *(backend.from_numpy(a) for a in (q, k, v)), block_size=4,
        variant=dataclasses.replace(variant, sinks=sinks),
    )  # fmt: skip
    found = backend.to_numpy(out).swapaxes(1, 2).reshape(B, T, C)
    assert_close(found, merged, "float64", "blockwise_attention with variants")
    lse = backend.to_numpy(lse)
    assert (lse > ARRAYS["sinks"][:, None]).all()  # the sink is one of its terms


def test_blockwise_skips_the_blocks_no_row_of_a_window_reaches(backend):
    """T = 8, B = 2, W = 2: query block i reaches key blocks i - 1 and i only,
    so 4 + 3 = 7 blocks, not the causal 10; the result still the oracle's."""
    rng = np.random.default_rng(272)
    q, k, v = (rng.standard_normal((2, 8, 4)) for _ in "qkv")
    visited = []
    out, _ = jitted(backend, "blockwise_attention")(
        *(backend.from_numpy(a) for a in (q, k, v)), block_size=2,
        variant=Variant(window=2), visit=lambda i, j: visited.append((int(i), int(j))),
    )  # fmt: skip
    assert sorted(visited) == [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (3, 3)]
    band = np.tril(np.ones((8, 8), bool)) & ~np.tril(np.ones((8, 8), bool), -2)
    scores = np.where(band, q @ k.swapaxes(-1, -2) / 2, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    want = weights / weights.sum(-1, keepdims=True) @ v
    assert_close(backend.to_numpy(out), want, "float64", "windowed blockwise")


def test_a_nan_value_behind_the_window_reaches_no_row_that_cannot_see_it(backend):
    """A NaN in key 0's value: with a window of 2, rows 0 and 1 see it (NaN
    out), rows 2 to 5 do not (finite, the oracle's), in multi-head and
    blockwise attention, whose block of 4 holds key 0 beside rows 2 and 3."""
    w_q, w_k, w_v, w_o = weights_for({})
    x = X.copy()
    x[:, 0] = 0.0
    x[:, 0, 0] = np.nan  # key 0's value (and query, key) NaN
    clean = X.copy()
    clean[:, 0] = 0.0
    want = reference_multi_head(
        clean, w_q, w_k, w_v, w_o, H, variant=Variant(window=2)
    )[0]
    given = [backend.from_numpy(a) for a in (x, w_q, w_k, w_v, w_o)]
    for function, more in (
        ("multi_head_attention", {}),
        ("multi_head_blockwise_attention", dict(block_size=4)),
    ):
        out = backend.to_numpy(
            jitted(backend, function)(*given, H, variant=Variant(window=2), **more)[0]
        )
        assert np.isnan(out[:, :2]).all(), function
        assert_close(out[:, 2:], want[:, 2:], "float64", function)


def test_decoding_with_each_variant_equals_the_full_pass_at_every_step(backend):
    for name, options in cases(backend, VARIANTS).items():
        out, _ = decode(backend, options)
        assert_close(out, expected(options)[0], "float64", f"decoded {name}")


def test_a_rolling_cache_of_w_slots_decodes_past_them(backend):
    """Window 2 with rotary positions and GQA: a cache of 2 slots per KV head
    (not T = 6), written at position % 2, equals full attention at every step;
    GQA's cache is H_kv / H the size of plain attention's."""
    options = dict(n_kv_heads=H_KV, rotary=Rotary(), window=2, alibi=True)
    out, cache = decode(backend, options, max_len=100)
    assert_close(out, expected(options)[0], "float64", "rolling cache")
    assert backend.to_numpy(cache.k).shape == (B, H_KV, 2, D)  # not (B, H, 100, D)
    assert int(backend.to_numpy(cache.length)) == T
    plain = backend.init_kv_cache((B,), T, C, H, "float64")
    grouped = backend.init_kv_cache(
        (B,), T, C, H, "float64", variant=Variant(n_kv_heads=H_KV)
    )
    for a, b in ((plain.k, grouped.k), (plain.v, grouped.v)):
        assert backend.to_numpy(b).size * H == backend.to_numpy(a).size * H_KV


def test_a_cache_longer_than_the_window_masks_by_position(backend):
    """max_len = T slots and a window of 3: no rolling, the window still holds."""
    options = dict(window=3)
    cache = backend.init_kv_cache((B,), T, C, H, "float64")  # T slots, no window
    w = [backend.from_numpy(a) for a in weights_for({})]
    outs = []
    for t in range(T):
        out_t, cache = backend.decode_step(
            backend.from_numpy(X[:, t]), cache, *w, H, variant=Variant(**options)
        )
        outs.append(backend.to_numpy(out_t))
    assert backend.to_numpy(cache.k).shape[-2] == T
    assert_close(
        np.stack(outs, -2), expected(options)[0], "float64", "window in a long cache"
    )


# Bad input: one message in every backend, before any compute

X_ = ShapeOnly((B, T, C))
WQ, WKV, WO = ShapeOnly((C, C)), ShapeOnly((C, 8)), ShapeOnly((C, C))

BAD_VARIANTS = {
    "H not a multiple of n_kv_heads": (
        dict(n_kv_heads=3),
        ValueError,
        "n_heads=4 is not a multiple of n_kv_heads=3: each key/value head serves "
        "n_heads / n_kv_heads query heads",
    ),
    "n_kv_heads = 0": (
        dict(n_kv_heads=0),
        ValueError,
        "n_kv_heads must be a positive integer, got 0",
    ),
    "w_k not (C, n_kv_heads * D)": (
        dict(n_kv_heads=1),
        ValueError,
        "w_k must have shape (C, n_kv_heads * D) = (16, 4) for n_heads=4, "
        "n_kv_heads=1, head width D = 4, got (16, 8)",
    ),
    "window below 1": (
        dict(window=0),
        ValueError,
        "window must be a positive integer, got 0",
    ),
    "odd rotary width": (
        dict(rotary=Rotary(fraction=0.75)),
        ValueError,
        "rotary positions turn pairs of features: fraction 0.75 of the head width "
        "D = 4 gives R = 3, which must be even and at least 2",
    ),
    "unknown rotary style": (
        dict(rotary=Rotary(style="llama")),
        ValueError,
        "rotary style must be 'neox' (rotate halves) or 'gptj' (interleaved pairs), "
        "got 'llama'",
    ),
    "rotary not a Rotary": (
        dict(rotary=True),
        TypeError,
        "rotary must be None or a Rotary(base, style, fraction) (from shared import "
        "Rotary), got bool",
    ),
    "positions without rotary": (
        dict(positions="positions"),
        ValueError,
        "positions are the rotary positions of x's rows: give rotary=Rotary(...) "
        "with them",
    ),
    "positions of floats": (
        dict(rotary=Rotary(), positions="float positions"),
        ValueError,
        "positions must be an integer array, got dtype float64",
    ),
    "softcap not positive": (
        dict(softcap=0.0),
        ValueError,
        "softcap must be a positive number (scores are capped to (-softcap, "
        "softcap)), got 0.0",
    ),
    "alibi not a bool": (
        dict(alibi=1),
        ValueError,
        "alibi must be True or False, got 1",
    ),
    "sinks not (H,)": (
        dict(sinks="short sinks"),
        ValueError,
        "sinks must have shape (H,) = (4,), got (3,)",
    ),
    "q_norm not (D,)": (
        dict(q_norm="long norm"),
        ValueError,
        "q_norm must have shape (D,) = (4,), got (5,)",
    ),
    "qk_norm_eps without a norm": (
        dict(qk_norm_eps=1e-5),
        ValueError,
        "qk_norm_eps is the eps of q_norm and k_norm, and neither is given",
    ),
}
BAD_ARRAYS = {
    "positions": np.arange(T),
    "float positions": np.arange(T, dtype=np.float64),
    "short sinks": np.zeros(3),
    "long norm": np.zeros(5),
}


@pytest.mark.parametrize("case", BAD_VARIANTS)
def test_a_bad_variant_raises_one_message_before_any_compute(backend, case):
    """x and the weights are ShapeOnly stand-ins: any compute would fail."""
    options, error, message = BAD_VARIANTS[case]
    given = {
        n: backend.from_numpy(BAD_ARRAYS[v]) if isinstance(v, str) else v
        for n, v in options.items()
    }
    kv = WKV if case == "w_k not (C, n_kv_heads * D)" else ShapeOnly((C, C))
    for function in (
        backend.multi_head_attention,
        backend.multi_head_blockwise_attention,
    ):
        with pytest.raises(error) as caught:
            function(X_, WQ, kv, kv, WO, H, variant=Variant(**given))
        assert str(caught.value) == message, function.__name__


def test_a_variant_is_one_value_or_none(backend):
    """The variant's options go as one Variant: anything else is refused
    before any compute, and so are the old keywords (Python's own message)."""
    for function in (
        backend.multi_head_attention,
        backend.multi_head_blockwise_attention,
    ):
        with pytest.raises(TypeError) as caught:
            function(X_, WQ, WQ, WQ, WO, H, variant=dict(window=2))
        assert str(caught.value) == (
            "variant must be None or a Variant(...) (from shared import Variant), "
            "got dict"
        )
        with pytest.raises(TypeError, match="window"):
            function(X_, WQ, WQ, WQ, WO, H, window=2)


def test_the_docs_example_runs():
    """docs/variants.md's example, as it stands (NumPy)."""
    text = (DOCS / "variants.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", text, re.S)
    exec(compile(block, "docs/variants.md", "exec"), {})


def test_every_test_docs_variants_names_exists():
    named = set(re.findall(r"`(test_\w+)`", (DOCS / "variants.md").read_text()))
    defined = set()
    here = Path(__file__).parent
    for path in [*here.glob("test_*variants.py"), here / "test_torch_checkpoint.py"]:
        defined |= set(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
    assert len(named) > 15
    assert named <= defined, named - defined


def test_the_docs_bad_variant_table_is_the_tested_one():
    text = (DOCS / "variants.md").read_text()
    table = text.split("<!-- bad variants -->")[1]
    rows = re.findall(r"^\| (.+?) \| `(\w+)` \| `(.+?)` \|$", table, re.M)
    documented = {name: (error, message) for name, error, message in rows}
    tested = {
        name: (error.__name__, message)
        for name, (_, error, message) in BAD_VARIANTS.items()
    }
    assert documented == tested


def test_a_window_without_causal_and_a_bad_cache_window_are_refused(backend):
    q = backend.from_numpy(np.zeros((4, 2)))
    with pytest.raises(ValueError) as caught:
        backend.blockwise_attention(q, q, q, causal=False, variant=Variant(window=2))
    assert str(caught.value) == (
        "window needs causal=True: a sliding window is the W keys up to each query"
    )
    with pytest.raises(ValueError) as caught:
        backend.init_kv_cache((B,), T, C, H, variant=Variant(n_kv_heads=3))
    assert "n_heads=4 is not a multiple of n_kv_heads=3" in str(caught.value)
    with pytest.raises(ValueError) as caught:
        backend.init_kv_cache((B,), T, C, H, variant=Variant(window=0))
    assert str(caught.value) == "window must be a positive integer, got 0"


# The oracle's conventions where libraries differ (docs/variants.md): NumPy only


def test_alibi_slopes_follow_the_rule_for_h_not_a_power_of_two():
    assert alibi_slopes(8) == tuple(2.0 ** -(h + 1) for h in range(8))
    # H = 6: the 4 slopes of H = 4, then the 1st and 3rd of H = 8's
    assert alibi_slopes(6) == (2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3)
    # attention-gym's 2 ** (-8 (h + 1) / H) for every H differs at H = 6
    gym = tuple(2.0 ** (-8 * (h + 1) / 6) for h in range(6))
    assert gym[0] != alibi_slopes(6)[0]


def test_neox_and_gptj_rope_are_one_permutation_of_w_q_and_w_k_apart():
    """GPT-J's pairs (2m, 2m + 1) are NeoX's (m, m + D/2) after permuting each
    head's columns of w_q and w_k: the same scores, so the same attention."""
    perm = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])  # GPT-J -> NeoX
    columns = np.concatenate([h * D + perm for h in range(H)])
    w_q, w_k, w_v, w_o = weights_for({})
    gptj_rotary = Variant(rotary=Rotary(style="gptj"))
    gptj = reference_multi_head(X, w_q, w_k, w_v, w_o, H, variant=gptj_rotary)
    neox = reference_multi_head(
        X, w_q[:, columns], w_k[:, columns], w_v, w_o, H,
        variant=Variant(rotary=Rotary(style="neox")),
    )  # fmt: skip
    assert_close(neox[1], gptj[1], "float64", "weights")
    assert_close(neox[0], gptj[0], "float64", "out")
    swapped = reference_multi_head(
        X, w_q, w_k, w_v, w_o, H, variant=Variant(rotary=Rotary(style="neox"))
    )
    assert np.abs(swapped[1] - gptj[1]).max() > 1e-3  # without the permutation


def _band(T_q, T_k, left, offset):
    """(T_q, T_k): key j reaches query i iff i + offset - left <= j <= i + offset."""
    i = np.arange(T_q)[:, None] + offset
    j = np.arange(T_k)[None, :]
    return (j <= i) & (j >= i - left)


def test_each_library_window_convention_is_ours_by_one_key():
    """Ours and transformers': i - W < j <= i (W keys). FlashAttention's
    window_size=(left, 0) and jax.nn's local_window_size=(left, 0) count the
    keys beside the query: left = W - 1 (vLLM passes (W - 1, 0)).
    attention-gym's q_idx - kv_idx <= w keeps w + 1 keys."""
    W_ = 3
    ours = np.array([[i - W_ < j <= i for j in range(8)] for i in range(8)])
    assert (ours.sum(-1)[W_ - 1 :] == W_).all()
    assert (ours == _band(8, 8, left=W_ - 1, offset=0)).all()  # flash, jax.nn, vLLM
    gym = np.array([[0 <= i - j <= W_ for j in range(8)] for i in range(8)])
    assert (gym.sum(-1)[W_:] == W_ + 1).all()
    assert (gym == _band(8, 8, left=W_, offset=0)).all()  # one key more
    options = dict(window=W_)
    w = weights_for({})
    assert (
        np.abs(
            reference_multi_head(X, *w, H, variant=Variant(window=W_ + 1))[1]
            - expected(options)[1]
        ).max()
        > 1e-3
    )  # one key more changes the weights


def test_causal_alignment_when_queries_are_fewer_than_keys():
    """2 queries, 5 keys (decoding the last 2 of 5): SDPA's is_causal masks as
    tril of (2, 5), upper-left (query 0 sees key 0 only); FlashAttention's
    causal is bottom-right (query 0 is position 3: keys 0 to 3); ours, by
    position, is the bottom-right one: the full pass's last 2 rows."""
    upper_left = np.tril(np.ones((2, 5), bool))
    bottom_right = _band(2, 5, left=5, offset=5 - 2)
    assert upper_left.sum() == 3 and bottom_right.sum() == 9
    full = np.tril(np.ones((5, 5), bool))[-2:]
    assert (bottom_right == full).all() and not (upper_left == full).all()


# The module form: CausalSelfAttention with a variant


def _module_dtype(backend):
    """The keywords that make a backend's CausalSelfAttention float64."""
    if backend.__name__ == "impl_torch":
        import torch

        return dict(dtype=torch.float64)
    if backend.__name__ == "impl_jax":
        import jax.numpy as jnp
        from flax import nnx

        return dict(param_dtype=jnp.float64, rngs=nnx.Rngs(0))
    return dict(dtype=np.float64)


def _module_calls(backend):
    """forward(module, x) and step(module, x_t, cache): under nnx.jit in JAX
    (one compile each, where eager JAX compiles every operation)."""

    def forward(module, x):
        return module(x)

    def step(module, x_t, cache):
        return module.decode_step(x_t, cache)

    if backend.__name__ == "impl_jax":
        from flax import nnx

        return nnx.jit(forward), nnx.jit(step)
    return forward, step


def test_the_module_takes_every_variant_away_from_its_default(backend):
    """CausalSelfAttention(variant=Variant(n_kv_heads=, head_dim=, rotary=,
    window=, alibi=, softcap=, qk_norm_eps=), sinks=True, qk_norm=True) holds
    w_q (C, H * D), w_k, w_v (C, H_kv * D), zero sinks and unit norms, and
    calls with them; from_weights(variant=Variant(rotary=, window=, alibi=,
    softcap=, sinks=, q_norm=, k_norm=, qk_norm_eps=)) reads n_kv_heads and
    head_dim from the shapes; its forward and its decoding (a rolling cache
    of the window's slots) equal the oracle's."""
    head_dim, rotary = 8, Rotary(base=100.0, fraction=0.5)
    settings = dict(rotary=rotary, window=3, alibi=True, softcap=1.5, qk_norm_eps=1e-2)
    sizes = dict(n_kv_heads=H_KV, head_dim=head_dim)
    module = backend.CausalSelfAttention(
        C, H, variant=Variant(**sizes, **settings), sinks=True, qk_norm=True,
        **_module_dtype(backend),
    )  # fmt: skip
    forward, step = _module_calls(backend)
    weights = [backend.to_numpy(w) for w in module.projections()]
    assert [w.shape for w in weights] == [(C, 32), (C, 16), (C, 16), (32, C)]
    arrays = dict(sinks=np.zeros(H), q_norm=np.ones(8), k_norm=np.ones(8))
    out, _ = forward(module, backend.from_numpy(X))
    full = Variant(**sizes, **settings, **arrays)
    want, _ = reference_multi_head(X, *weights, H, variant=full)
    assert_close(backend.to_numpy(out), want, "float64", "module")
    rng = np.random.default_rng(272)
    arrays = dict(
        sinks=rng.standard_normal(H),
        q_norm=1 + 0.3 * rng.standard_normal(head_dim),
        k_norm=1 + 0.3 * rng.standard_normal(head_dim),
    )
    loaded = backend.CausalSelfAttention.from_weights(
        *weights, H, variant=Variant(**settings, **arrays)
    )
    want, _ = reference_multi_head(
        X, *weights, H, variant=Variant(**sizes, **settings, **arrays)
    )
    out, _ = forward(loaded, backend.from_numpy(X))
    assert_close(backend.to_numpy(out), want, "float64", "from_weights")
    cache = loaded.init_cache((B,), T)
    assert backend.to_numpy(cache.k).shape == (B, H_KV, 3, head_dim)
    for t in range(T):
        out_t, cache = step(loaded, backend.from_numpy(X[:, t]), cache)
        assert_close(backend.to_numpy(out_t), want[:, t], "float64", f"decoded {t}")
