"""The backend-neutral package: presets, fixtures, the oracle, golden files,
tolerances and layout converters. NumPy only."""

from __future__ import annotations

import dataclasses
import inspect
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import PARAM_NAMES, random_inputs

from impl_numpy import lesson
from shared import (
    PRESETS,
    TOLERANCES,
    TOY_SENTENCE,
    assert_close,
    golden,
    layout,
    make_fixture,
)
from shared.dtypes import dtype_key, np_dtype
from shared.golden import drift, load_golden, oracle_results
from shared.gradients import D_OUT_SEED, upstream_gradient
from shared.hostile import max_score, plain_attention, plain_multi_head
from shared.reference import (
    reference_entropy,
    reference_multi_head,
    reference_single_head,
    reference_steps,
)
from shared.steps import Step, steps_of
from shared.tolerances import derived_tolerance, is_close, max_abs_diff, tolerance

pytestmark = pytest.mark.neutral  # once, in the jax env (docs/suite.md)

ROOT = Path(__file__).resolve().parents[1]


def test_presets_are_the_seed_programs_modes():
    tiny, full = PRESETS["tiny"], PRESETS["full"]
    assert (
        tiny.tokens
        == TOY_SENTENCE
        == ("the", "cat", "sat", "on", "the", "mat", ".", "and")
    )
    assert (tiny.T, tiny.d_model, tiny.n_heads, tiny.d_head) == (8, 32, 4, 8)
    assert (full.T, full.d_model, full.n_heads, full.d_head) == (8, 64, 8, 8)
    assert PRESETS["batched"].batch and len(PRESETS["batched"].batch) >= 2
    assert PRESETS["long"].T >= 200


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_heads": 3}, "n_heads=3 does not divide d_model=32"),
        ({"n_heads": 0}, "n_heads must be a positive integer, got 0"),
        ({"n_heads": 2.0}, r"^n_heads must be a positive integer, got 2\.0$"),
        ({"d_model": 0}, r"^d_model must be >= 1, got 0$"),
        ({"tokens": ()}, "at least 1 token"),
        ({"seq_len": 8}, r"^a preset has either tokens or seq_len, not both$"),
    ],
)
def test_a_bad_preset_says_why(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(PRESETS["tiny"], **change)


def test_the_smallest_preset_is_one_feature_one_head_one_token():
    preset = dataclasses.replace(PRESETS["tiny"], d_model=1, n_heads=1, tokens=("a",))
    assert (preset.T, preset.d_model, preset.d_head) == (1, 1, 1)


@pytest.mark.parametrize("name", PRESETS)
def test_fixtures_are_seeded_float64_and_stable(name):
    first, again = make_fixture(PRESETS[name]), make_fixture(PRESETS[name])
    preset = PRESETS[name]
    assert first.x.shape == (*preset.batch, preset.T, preset.d_model)
    for a, b in zip(
        (first.x, *first.params.values()),
        (again.x, *again.params.values()),
        strict=True,
    ):
        assert a.dtype == np.float64
        np.testing.assert_array_equal(a, b)
    other = make_fixture(dataclasses.replace(preset, seed=preset.seed + 1))
    assert not np.array_equal(first.w_q, other.w_q)


def test_the_repeated_word_has_one_embedding_and_differs_only_by_position():
    f = make_fixture(PRESETS["tiny"])
    from shared.fixture import sinusoidal_positions

    embedded = f.x - sinusoidal_positions(8, 32)
    np.testing.assert_allclose(embedded[0], embedded[4], atol=1e-15)  # "the" twice
    assert not np.array_equal(f.x[0], f.x[4])


@pytest.mark.parametrize("name", PRESETS)
def test_committed_golden_files_match_a_fresh_oracle_run(name):
    assert drift(PRESETS[name]) == {}
    g = load_golden(name)
    np.testing.assert_array_equal(g["x"], make_fixture(PRESETS[name]).x)


def test_the_golden_command_writes_checks_and_names_what_drifted(
    tmp_path, monkeypatch, capsys
):
    # python -m shared.golden, into a scratch directory, on two presets
    folder = tmp_path / "new" / "fixtures"  # made, parents and all
    monkeypatch.setattr(golden, "GOLDEN_DIR", folder)
    monkeypatch.setattr(golden, "PRESETS", {n: PRESETS[n] for n in ("tiny", "full")})
    assert golden.main([]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {folder / name}.npz" for name in ("tiny", "full")
    ]
    assert golden.main(["--check"]) == 0
    assert capsys.readouterr().out.splitlines() == ["tiny: matches", "full: matches"]
    tiny = load_golden("tiny")
    tiny["multi_out"][0, 0] += 0.5  # one value moved
    del tiny["single_entropy"]  # one array lost
    np.savez(folder / "tiny.npz", **tiny, stray=np.zeros(1))  # one too many
    changed = drift(PRESETS["tiny"])
    assert changed == {
        "multi_out": pytest.approx(0.5, rel=1e-12),
        "single_entropy": math.inf,
        "stray": math.inf,
    }
    assert golden.main(["--check"]) == 1
    assert capsys.readouterr().out.splitlines()[0].startswith("tiny: DRIFT {")


def test_the_golden_command_says_what_it_does(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")  # one line per option
    with pytest.raises(SystemExit) as done:
        golden.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m shared.golden [-h] [--check]\n")
    assert "\nRegenerate (or check) the golden files in shared/fixtures/.\n" in out
    help_line = "compare the committed files with a fresh oracle run instead of writing"
    assert f"  --check     {help_line}\n" in out


def _stepped(x, X):  # written as the reading path writes a function
    # 1. project x into queries, keys and values
    q = x + 1  # a comment after code stays with it

    k = x * X
    # (a comment line is not code, nor is the blank line above)
    # 2. split heads (multi-head only)
    # 3. (continued) scores = q @ k^T, one block
    s = q @ k
    # 7. (continued) merge heads, output projection
    if s is None:
        return
    out = s
    return out


def test_steps_of_reads_a_function_by_its_step_comments():
    first = inspect.getsourcelines(_stepped)[1]  # the line of `def`
    assert steps_of(_stepped) == [
        Step(1, first + 1, ((first + 2, TEXT_OF_Q), (first + 4, "k = x * X")), False),
        Step(2, first + 6, (), False),  # nothing to do: no lines
        Step(3, first + 7, ((first + 8, "s = q @ k"),), True),
        Step(7, first + 9, ((first + 10, "if s is None:"),), True),  # to `return`
    ]


# each line whole, with its own comment; `k = x * X` ends in X: only the
# newline is cut
TEXT_OF_Q = "q = x + 1  # a comment after code stays with it"


def test_oracle_with_zero_queries_averages_the_past():
    # w_q = 0: every score is 0, so row i attends uniformly to keys 0..i.
    x, p = random_inputs(0, (), 6, 4)
    out, weights = reference_single_head(x, np.zeros((4, 4)), p["w_k"], p["w_v"])
    v = x @ p["w_v"]
    for i in range(6):
        np.testing.assert_allclose(weights[i, : i + 1], 1 / (i + 1), rtol=1e-15)
        np.testing.assert_array_equal(weights[i, i + 1 :], 0.0)
        np.testing.assert_allclose(
            out[i], v[: i + 1].mean(axis=0), rtol=1e-13, atol=1e-15
        )
    np.testing.assert_allclose(reference_entropy(weights), np.log(np.arange(1, 7)))


def test_the_oracle_computes_in_float64_whatever_it_is_given():
    # float32 x and weights: the same results as their float64 copies, to the
    # float64 tolerance (a float32 computation would be off by about 1e-7)
    x, p = random_inputs(2, (2,), 5, 4)
    x32 = x.astype(np.float32)
    w32 = [p[name].astype(np.float32) for name in PARAM_NAMES]
    w64 = [w.astype(np.float64) for w in w32]
    for given, exact in (
        (
            reference_single_head(x32, *w32[:3]),
            reference_single_head(x32.astype(np.float64), *w64[:3]),
        ),
        (
            reference_multi_head(x32, *w32, 2),
            reference_multi_head(x32.astype(np.float64), *w64, 2),
        ),
    ):
        for a, b in zip(given, exact, strict=True):
            assert a.dtype == np.float64
            assert_close(a, b, "float64")
    weights = exact[1].astype(np.float32)  # (2, H, T, T)
    entropy = reference_entropy(weights)
    assert entropy.dtype == np.float64
    assert_close(entropy, reference_entropy(weights.astype(np.float64)), "float64")


def test_max_abs_diff_is_taken_in_float64_and_is_0_for_nothing():
    a, e = np.float32([1.0000001]), np.float32([0.1])
    assert max_abs_diff(a, e) == float(np.float64(a[0]) - np.float64(e[0]))
    assert max_abs_diff(np.zeros(0), np.zeros(0)) == 0.0


def test_oracle_gives_a_fully_masked_row_zero_weights_and_output():
    x, p = random_inputs(1, (), 5, 4)
    mask = np.ones((5, 5), dtype=bool)
    mask[2] = False
    out, weights = reference_single_head(x, p["w_q"], p["w_k"], p["w_v"], mask)
    assert not weights[2].any() and not out[2].any()
    assert reference_entropy(weights)[2] == 0.0
    np.testing.assert_allclose(np.delete(weights, 2, axis=0).sum(-1), 1.0, rtol=1e-15)


def test_oracle_multi_head_is_single_heads_on_column_slices():
    x, p = random_inputs(2, (2,), 5, 6)
    out, weights = reference_multi_head(x, p["w_q"], p["w_k"], p["w_v"], p["w_o"], 3)
    heads = []
    for h in range(3):
        cols = slice(2 * h, 2 * h + 2)
        o, w = reference_single_head(
            x, p["w_q"][:, cols], p["w_k"][:, cols], p["w_v"][:, cols]
        )
        np.testing.assert_array_equal(w, weights[:, h])
        heads.append(o)
    np.testing.assert_allclose(np.concatenate(heads, -1) @ p["w_o"], out, rtol=1e-13)


def test_oracle_scale_divides_scores_by_sqrt_d():
    x, p = random_inputs(3, (), 4, 4)
    _, scaled = reference_single_head(x, p["w_q"], p["w_k"], p["w_v"])
    _, unscaled = reference_single_head(
        x, p["w_q"] / 2.0, p["w_k"], p["w_v"], scale=False
    )
    np.testing.assert_allclose(scaled, unscaled, rtol=1e-14)  # sqrt(4) = 2


def test_max_score_is_the_largest_scaled_score_of_any_head():
    """|q . k| / sqrt(D), D = C / H: here position 1 against itself in head 1,
    q = (0, 0, 3, 0) and k = (0, 0, -2, 0), C = 4, H = 2, D = 2."""
    x = np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])  # (T, C) = (2, 4)
    w_q = np.diag([1.0, 1.0, 3.0, 1.0])
    w_k = np.diag([1.0, 1.0, -2.0, 1.0])
    assert max_score(x, {"w_q": w_q, "w_k": w_k}, 2) == 6 / math.sqrt(2)
    batched = np.stack([x, x / 2])  # (2, T, C): the larger item counts
    assert max_score(batched, {"w_q": w_q, "w_k": w_k}, 2) == 6 / math.sqrt(2)
    assert max_score(x, {"w_q": w_q, "w_k": w_k}, 4) == 6.0  # D = 1


@pytest.mark.parametrize("batch", [(), (2,), (2, 1)], ids=str)
def test_plain_multi_head_in_float64_is_the_oracle(batch):
    """The yardstick of triptych check's hostile property computes attention,
    only plainly: in float64 it is the oracle (T = 6 and D = 2: the scale is 1 / sqrt(D))."""
    x, p = random_inputs(40, batch, 6, 8)
    out, weights = plain_multi_head(x, *p.values(), 4)
    expected_out, expected_weights = reference_multi_head(x, *p.values(), 4)
    assert_close(out, expected_out, "float64", "plain out")
    assert_close(weights, expected_weights, "float64", "plain weights")


def test_plain_attention_answers_in_its_inputs_dtype():
    x, p = random_inputs(41, (2,), 6, 8)
    q, k, v = (
        (x @ p[n]).reshape(2, 6, 4, 2).swapaxes(-3, -2).astype(np.float16)
        for n in ("w_q", "w_k", "w_v")
    )
    out, weights = plain_attention(q, k, v)
    assert out.dtype == weights.dtype == np.float16
    out, weights = plain_multi_head(
        x.astype(np.float16), *(w.astype(np.float16) for w in p.values()), 4
    )
    assert out.dtype == weights.dtype == np.float16


def test_plain_attention_rounds_every_operation_to_its_dtype():
    """The yardstick makes the errors of a plain half-precision computation:
    bit for bit, every step rounded to float16; exp and the softmax taken in
    float64 would give other weights."""
    x, p = random_inputs(42, (), 7, 8)
    q, k, v = ((x @ p[n]).astype(np.float16) for n in ("w_q", "w_k", "w_v"))
    out, weights = plain_attention(q, k, v)
    half = np.float16
    q_scaled = (q / half(math.sqrt(8))).astype(half)
    scores = (q_scaled @ k.T).astype(half)
    scores = np.where(np.tril(np.ones((7, 7), dtype=bool)), scores, -np.inf)
    exp = np.exp(scores.astype(half) - scores.max(axis=-1, keepdims=True))
    expected = (exp / exp.sum(axis=-1, keepdims=True)).astype(half)
    assert exp.dtype == half
    np.testing.assert_array_equal(weights, expected)
    np.testing.assert_array_equal(out, (expected @ v).astype(half))
    wide = np.exp(scores - scores.max(axis=-1, keepdims=True).astype(np.float64))
    wide = (wide / wide.sum(axis=-1, keepdims=True)).astype(half)
    assert not np.array_equal(wide, expected)  # the premise: the rounding shows


def test_a_fixture_with_biases_casts_them_too():
    f = make_fixture(PRESETS["tiny"])
    C = f.x.shape[-1]
    biased = dataclasses.replace(f, b_q=np.ones(C), b_o=np.zeros(C))
    cast = biased.astype(np.float32)
    assert set(cast.biases) == {"b_q", "b_o"}
    assert all(b.dtype == np.float32 for b in cast.biases.values())


@pytest.mark.parametrize("name", ["tiny", "batched", "long"])
def test_the_upstream_gradient_is_seeded_with_d_out_seed_plus_the_presets(name):
    preset = PRESETS[name]
    rng = np.random.default_rng(D_OUT_SEED + preset.seed)
    expected = rng.standard_normal((*preset.batch, preset.T, preset.d_model))
    np.testing.assert_array_equal(upstream_gradient(preset), expected)


def test_the_tolerance_table_covers_every_dtype_and_tightens_with_precision():
    assert list(TOLERANCES) == ["float64", "float32", "float16", "bfloat16"]
    atols = [t.atol for t in TOLERANCES.values()]
    assert atols == sorted(atols)
    assert (
        tolerance(np.float32) == tolerance("float32") == tolerance(np.dtype("float32"))
    )
    with pytest.raises(KeyError, match="no tolerance for dtype 'int32'"):
        tolerance("int32")


def test_assert_close_says_where_and_by_how_much():
    expected = np.zeros((2, 3))
    actual = expected.copy()
    actual[1, 2] = 1e-4
    assert is_close(actual, expected, "float32") is False
    assert max_abs_diff(actual, expected) == 1e-4
    with pytest.raises(AssertionError, match=r"float32 tolerance.*\(1, 2\)"):
        assert_close(actual, expected, "float32", "out")
    actual[1, 2] = math.nan
    with pytest.raises(AssertionError, match=r"\(1, 2\)"):
        assert_close(actual, expected, "float64")
    assert_close(expected + 1e-6, expected, "float32")
    with pytest.raises(AssertionError, match="shape"):
        assert_close(expected[0], expected, "float32")


def test_is_close_is_the_table_inclusive_in_float64():
    # |a - e| <= atol + rtol * |e|, equality included, taken in float64 even for
    # a float32 expected value (in float32, atol + rtol would be 3.99999990e-5)
    assert is_close([2e-5], [0.0], "float32")
    assert not is_close([2.1e-5], [0.0], "float32")
    assert is_close([1.0 + 3.99999997e-5], np.float32([1.0]), "float32")
    assert not is_close(np.zeros(3), np.zeros(4), "float64")  # shapes differ


def test_assert_close_names_the_worst_miss_relative_to_its_tolerance():
    # |diff| 0.35 at [0, 0] is within 0.01 of its tolerance (rtol * 1000), |diff|
    # 0.345 at [1, 2] is not (atol): the worst miss is [1, 2], not the largest
    # |diff|; float32 inputs are compared in float64
    expected = np.zeros((2, 3), dtype=np.float32)
    expected[0, 0] = 1000.0
    actual = expected.copy()
    actual[0, 0], actual[1, 2] = 1000.35, 0.345
    with pytest.raises(AssertionError) as caught:
        assert_close(actual, expected, "float32")
    a = float(np.float32(0.345))  # what float32 holds
    assert str(caught.value) == (
        "result differs beyond the float32 tolerance (atol=2e-05, rtol=2e-05): "
        f"max |diff| = {max_abs_diff(actual, expected):.3g}; at index (1, 2) "
        f"got {a!r}, expected {0.0!r}"
    )
    with pytest.raises(AssertionError, match=r"at index \(0,\) got inf,"):
        assert_close([math.inf, math.nan], [0.0, 0.0], "float64")  # the first worst
    derived = derived_tolerance([expected], expected, "float32")  # no error
    assert derived == tolerance("float32")  # the table is the floor
    with pytest.raises(AssertionError, match=r"^x differs beyond the derived tol"):
        assert_close(actual, expected, derived, "x")


def test_one_dtype_name_for_every_framework():
    class TorchDtype:  # what str() gives for torch.bfloat16, without torch
        def __str__(self):
            return "torch.bfloat16"

    assert dtype_key(TorchDtype()) == "bfloat16"
    assert dtype_key("float32") == dtype_key(np.float32) == "float32"
    assert dtype_key(np.dtype("float16")) == "float16"
    assert np_dtype("float64") == np.float64


def test_np_dtype_finds_bfloat16_in_a_process_that_never_imported_ml_dtypes():
    code = (
        "import sys; from shared.dtypes import np_dtype; "
        "assert 'ml_dtypes' not in sys.modules; print(np_dtype('bfloat16'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "bfloat16\n" == f"{np_dtype('bfloat16')}\n"  # as here


def test_layout_round_trips_are_exact():
    rng = np.random.default_rng(0)
    w_q, w_k, w_v = (rng.standard_normal((8, 8)) for _ in range(3))
    np.testing.assert_array_equal(
        layout.from_torch_linear(layout.to_torch_linear(w_q)), w_q
    )
    for a, b in zip(
        layout.from_torch_in_proj(layout.to_torch_in_proj(w_q, w_k, w_v)),
        (w_q, w_k, w_v),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        layout.from_flax_linear(layout.to_flax_linear(w_q)), w_q
    )
    np.testing.assert_array_equal(
        layout.from_flax_heads_in(layout.to_flax_heads_in(w_q, 4)), w_q
    )
    np.testing.assert_array_equal(
        layout.from_flax_heads_out(layout.to_flax_heads_out(w_q, 4)), w_q
    )


def test_layouts_compute_the_same_projection():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((5, 8)), rng.standard_normal((8, 8))
    np.testing.assert_array_equal(x @ layout.to_torch_linear(w).T, x @ w)
    packed = layout.to_torch_in_proj(w, 2 * w, 3 * w)  # (3C, C), torch computes x @ W.T
    np.testing.assert_allclose((x @ packed.T)[:, 8:16], x @ (2 * w), rtol=1e-14)
    heads = np.einsum("tc,chd->thd", x, layout.to_flax_heads_in(w, 4))  # (T, H, D)
    np.testing.assert_allclose(heads.reshape(5, 8), x @ w, rtol=1e-12)
    split = (x @ w).reshape(5, 4, 2)  # (T, H, D), as flax's out kernel reads it
    out = np.einsum("thd,hdc->tc", split, layout.to_flax_heads_out(w, 4))
    np.testing.assert_allclose(out, (x @ w) @ w, rtol=1e-12)


@pytest.mark.parametrize("n_heads", [1, 4])
def test_reference_steps_end_where_the_oracle_ends_and_match_the_lesson(n_heads):
    g = load_golden("tiny")
    more = [] if n_heads == 1 else [g["w_o"], n_heads]  # one head by default
    steps = reference_steps(g["x"], g["w_q"], g["w_k"], g["w_v"], *more)
    form = "single" if n_heads == 1 else "multi"
    assert_close(steps[7]["out"], g[f"{form}_out"], "float64", "out")
    assert_close(steps[6]["weights"], g[f"{form}_weights"], "float64", "weights")
    assert sorted(steps) == ([1, 3, 4, 5, 6, 7] if n_heads == 1 else list(range(1, 8)))
    if n_heads == 1:
        out, weights = lesson.single_head_attention(
            g["x"], g["w_q"], g["w_k"], g["w_v"]
        )
    else:
        out, weights = lesson.multi_head_attention(
            g["x"], g["w_q"], g["w_k"], g["w_v"], g["w_o"], n_heads
        )
    assert_close(out, steps[7]["out"], "float64", "lesson out")
    assert_close(weights, steps[6]["weights"], "float64", "lesson weights")
    masked = steps[5]["scores"]
    assert (
        np.isneginf(masked[..., 0, 1:]).all() and np.isfinite(masked[..., -1, :]).all()
    )
    causal = np.tril(np.ones((g["x"].shape[-2],) * 2, dtype=bool))
    assert steps[5]["causal"].dtype == bool  # a mask, as the lesson's
    np.testing.assert_array_equal(steps[5]["causal"], causal)


def test_reference_steps_loop_in_float64_whatever_they_are_given():
    g = load_golden("tiny")
    given = [g[n].astype(np.float32) for n in ("x", "w_q", "w_k", "w_v")]
    steps = reference_steps(*given)
    x, w_q = (a.astype(np.float64) for a in given[:2])
    assert steps[1]["q"].dtype == np.float64
    assert_close(steps[1]["q"], x @ w_q, "float64", "q of float32 inputs")


def test_the_golden_results_of_a_fixture_with_biases_use_them():
    """A real model's fixture has biases (shared/fixture.py): the single head
    takes b_q, b_k and b_v, the heads all four."""
    f = make_fixture(PRESETS["tiny"])
    C = f.x.shape[-1]
    rng = np.random.default_rng(5)
    biases = {name: rng.standard_normal(C) for name in ("b_q", "b_k", "b_v", "b_o")}
    results = oracle_results(dataclasses.replace(f, **biases))
    single = {n: b for n, b in biases.items() if n != "b_o"}
    expected = reference_single_head(f.x, f.w_q, f.w_k, f.w_v, biases=single)
    np.testing.assert_array_equal(results["single_out"], expected[0])
    expected = reference_multi_head(
        f.x, *f.params.values(), f.preset.n_heads, biases=biases
    )
    np.testing.assert_array_equal(results["multi_out"], expected[0])
    plain = oracle_results(f)
    assert np.abs(plain["single_out"] - results["single_out"]).max() > 0.1
    assert np.abs(plain["multi_out"] - results["multi_out"]).max() > 0.1
