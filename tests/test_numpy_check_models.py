"""`triptych check` on attention as today's model libraries write it
(tests/model_attention.py): the sizes it draws for each variant option (a
rotary width of 4 pairs, ALiBi at head counts that are not powers of two,
windows both sides of T, single heads narrower than x), one policy for the
rows a mask and a window leave empty, the float64 tolerance decided per
problem, a kernel's (B, H, T, D) output and a target's own exception read
without a crash, and diagnoses that say what the code does. NumPy targets:
the same in every env, run once, in the numpy env (a test_numpy_ file);
grading a folder with a torch module in it is tests/test_torch_check.py's.
"""

from __future__ import annotations

import dataclasses

import model_attention as models
import numpy as np
import pytest

from shared import Rotary
from triptych.check.adapters import adapter_for
from triptych.check.properties import Settings, run_property
from triptych.check.runner import last_error
from triptych.check.variant import Variant

FEW = Settings(examples=6)


def run(target, id, variant=None, settings=FEW, **options):
    """One property of `target`, checked in this process, told `variant`."""
    adapter = adapter_for(target, variant=variant, **options)
    return run_property(adapter, dataclasses.replace(settings, variant=variant), id)


# No crash: a kernel's (B, H, T, D), a target's own exception ------------------


def test_a_kernel_leaking_the_future_is_read_as_b_h_t_d():
    """The leak's pattern read on the kernel's own layout: no IndexError."""
    result = run(models.kernel_leaking_two, "causality")
    assert result.status == "FAIL"
    assert "future leaks at offset 2" in result.diagnosis


def test_a_target_raising_on_the_rich_problem_is_its_own_error():
    result = run(models.kernel_raising_on_six, "causality")
    assert result.status == "FAIL", result.reason


def test_the_crash_line_is_the_error_not_jax_s_note():
    stderr = (
        "Traceback (most recent call last):\n  ...\n"
        "ValueError: sequence length 6 is not supported\n"
        "--------------------\n"
        "For simplicity, JAX has removed its internal frames from the traceback "
        "of the following exception. Set JAX_TRACEBACK_FILTERING=off to include "
        "these.\n"
    )
    assert last_error(stderr) == "ValueError: sequence length 6 is not supported"


# Sizes that show every mistake the options make possible ------------------------


@pytest.mark.parametrize("fraction", [1.0, 0.25])
def test_gptj_rotating_halves_fails_at_every_rotary_fraction(fraction):
    variant = Variant(rotary=Rotary(style="gptj", fraction=fraction))
    result = run(models.gptj_rotating_halves, "oracle:float64", variant)
    assert result.status == "FAIL", result.reason
    assert "rotary positions in the other style" in result.diagnosis
    adapter = adapter_for(models.rotary_right, variant=variant)
    assert "4 pairs" in adapter.describe()
    settings = dataclasses.replace(FEW, variant=variant)
    for id in ("oracle:float64", "mask"):
        assert run_property(adapter, settings, id).status == "PASS"


def test_alibi_draws_head_counts_that_are_not_powers_of_two():
    variant = Variant(alibi=True)
    wrong = run(models.alibi_power_of_two_only, "oracle:float64", variant)
    assert wrong.status == "FAIL" and wrong.smallest["H"] in (3, 6)
    assert run(models.alibi_foundry, "oracle:float64", variant).status == "PASS"
    assert "3, 6 heads" in adapter_for(models.alibi_foundry, variant=variant).describe()


def test_single_head_divided_by_sqrt_c_is_caught():
    result = run(models.single_scaled_by_model_width, "scale")
    assert result.status == "FAIL", result.reason
    assert "the model width" in result.diagnosis
    assert run(models.single_right, "scale").status == "PASS"
    assert "narrower than x" in adapter_for(models.single_right).describe()


def test_a_window_longer_than_every_sequence_draws_one_past_it():
    variant = Variant(window=100)
    result = run(models.windowed_padded, "window", variant)
    assert result.status == "PASS", result.reason


# One policy for the rows a mask and a window leave empty --------------------------


def test_key_padding_under_a_window_is_no_false_alarm():
    """A plain windowed attention (NaN where nothing is left) passes `mask`
    under --window; its empty rows are `fully masked rows`' NOTE."""
    variant = Variant(window=3)
    assert run(models.windowed_padded, "mask", variant).status == "PASS"
    empty = run(models.windowed_padded, "fully masked rows", variant)
    assert empty.status == "NOTE" and "NaN" in empty.diagnosis


def test_empty_rows_are_judged_by_policy_in_every_comparison():
    from triptych.check.problems import Problem
    from triptych.check.properties.empty import agree_rows

    variant = Variant(window=2)
    adapter = adapter_for(models.windowed_padded, variant=variant)
    inputs = Problem((2,), 6, 2, 3, 5, "none", variant).inputs()
    inputs = inputs.replace(mask=np.array([True, True, False, False, False, False])
                            [None, None, None, :].repeat(2, 0))  # fmt: skip
    got, want = adapter.run(inputs, "float64"), adapter.truth(inputs, "float64")
    assert np.isnan(got.out).any()  # rows 3 to 5 attend nothing
    assert agree_rows(adapter, inputs, got, want, "float64", "float64") is None
    garbage = got._replace(out=np.where(np.isnan(got.out), 7.0, got.out))
    found = agree_rows(adapter, inputs, garbage, want, "float64", "float64")
    assert found is not None and "something else" in found.message


def test_the_uniform_mean_under_alibi_is_a_known_policy():
    variant = Variant(alibi=True)
    result = run(models.alibi_uniform_rows, "fully masked rows", variant)
    assert result.status == "NOTE", result.reason
    assert "transformers" in result.diagnosis


# Tolerances per problem -----------------------------------------------------------


def test_float32_slopes_at_twelve_heads_are_a_note_and_judged_there_only():
    """llm-foundry's float32 slopes are exact up to 8 heads and 1e-8 off at
    12: the NOTE says what was measured where, the other properties hold
    the 12-head problems to float32's tolerance, and no row names JAX."""
    variant = Variant(n_kv_heads=2, alibi=True)
    settings = dataclasses.replace(Settings(examples=12), variant=variant)
    adapter = adapter_for(models.alibi_foundry, variant=variant)
    found = {id: run_property(adapter, settings, id)
             for id in ("oracle:float64", "mask", "scale")}  # fmt: skip
    note = found["oracle:float64"]
    assert note.status == "NOTE", note.reason
    assert "computes in float32 inside" in note.diagnosis
    assert "H = 12" in note.diagnosis and "H = 6" not in note.diagnosis
    assert "JAX" not in note.diagnosis + note.reason
    for id in ("mask", "scale"):
        assert found[id].status == "PASS", found[id].reason
    assert adapter.judged and set(adapter.judged.values()) == {"float64", "float32"}
    assert all(
        dtype == ("float32" if key[2] == 12 else "float64")
        for key, dtype in adapter.judged.items()
    )


# Diagnoses that match the code -------------------------------------------------------


@pytest.mark.parametrize(
    "name, words",
    [
        ("no_max_float64_mask", "max not subtracted before exp"),
        ("global_max", "one max subtracted for the whole array"),
    ],
)
def test_a_softmax_that_large_scores_break_is_named_for_its_step(name, words):
    settings = Settings(dtypes=("float32",), examples=6)
    result = run(getattr(models, name), "hostile magnitudes", settings=settings)
    assert result.status == "FAIL", result.reason
    assert words in result.diagnosis
    assert "though a row max is subtracted" not in result.diagnosis


def test_a_difference_is_shown_with_the_digits_that_tell_it():
    from triptych.check.properties.search import compare

    found = compare("row sums", np.array([1 + 9e-8]), np.array([1.0]), "float64")
    assert found.message.endswith("got 1.0000001, expected 1")
    same = compare("out", np.array([np.nan, 1.0]), np.array([np.nan, 2.0]), "float64")
    assert "got 1, expected 2" in same.message and "nan" not in same.message


@pytest.mark.parametrize("name", list(models.ALIBI_EXPECTED))
def test_each_alibi_bug_is_named(name):
    """Sign, slopes (order, off by one, the rules of a head count that is not
    a power of two), the bias before the scale or on the query's axis: each
    named by the oracle, not a block edge; float32 slopes said so."""
    variant = Variant(alibi=True)
    result = run(getattr(models, name), "oracle:float64", variant, Settings(examples=4))
    assert result.status == "FAIL", result.reason
    assert models.ALIBI_EXPECTED[name] in result.diagnosis
    float32 = name == "alibi_slopes_geometric"
    assert ("within float32's tolerance" in result.diagnosis) == float32


def test_alibi_as_the_paper_writes_it_passes_and_an_unknown_bug_is_no_block_edge():
    """BLOOM's bias slope * j (the softmax cancels -slope * i) is right;
    slopes doubled, a bug no known mistake is, are wrong from row 1 on."""
    variant = Variant(alibi=True)
    for id in ("oracle:float64", "mask"):
        result = run(models.alibi_paper, id, variant)
        assert result.status == "PASS", (id, result.reason)
    wrong = run(models.alibi_slopes_doubled, "oracle:float64", variant)
    assert wrong.status == "FAIL" and "block" not in wrong.diagnosis
    assert wrong.diagnosis.startswith("right at row 0 only, wrong from row 1 on")


def test_dropout_is_the_one_cause_of_every_row_comparing_two_calls():
    for id in ("causality", "independence", "determinism"):
        result = run(models.dropout_on, id)
        assert result.status == "FAIL", (id, result.reason)
        assert "dropout left on" in result.diagnosis
        assert "leaks" not in result.diagnosis


# Grading variant targets without their options ---------------------------------------


def test_a_target_that_needs_its_variant_option_is_one_line_naming_it():
    from triptych.check.target import TargetError

    with pytest.raises(TargetError, match=r"raises without a variant option "
                       r"\(AttributeError: .*\): give --rotary STYLE, "):  # fmt: skip
        adapter_for(models.rotary_right)


def test_a_target_whose_variant_is_off_says_it_was_not_checked():
    adapter = adapter_for(models.windowed_padded)
    assert adapter.describe().endswith("its variant unchecked: no --window W")
    assert run(models.windowed_padded, "oracle:float64").status == "PASS"


def test_a_promise_of_batch_axes_is_held_and_k_t_breaks_it():
    """A docstring's x (..., T, C) is what is drawn: k.T fails; without the
    promise the probe narrows to the (T, C) it takes, and says so."""
    promised = adapter_for(models.single_k_t_promised)
    assert "x (..., T, C) as its docstring says" in promised.describe()
    assert run(models.single_k_t_promised, "oracle:float64").status == "FAIL"
    assert (
        adapter_for(models.single_k_t).describe().startswith("single, numpy, x (T, C)")
    )
    assert run(models.single_k_t, "oracle:float64").status == "PASS"


def test_a_single_head_failure_writes_its_model_width(tmp_path, capsys):
    import json
    from pathlib import Path

    import jsonschema

    from triptych.cli import main

    out = tmp_path / "out"
    code = main([
        "check", f"{models.__file__}:single_scaled_by_model_width", "--properties",
        "scale", "--examples", "4", "--output-dir", str(out),
    ])  # fmt: skip
    capsys.readouterr()
    assert code == 1
    doc = json.loads((out / "results.json").read_text())
    schema = Path(__file__).resolve().parents[1] / "docs" / "check.schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))
    smallest = doc["targets"][0]["properties"][0]["smallest"]
    assert smallest["width"] > smallest["D"]
