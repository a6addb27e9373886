"""`triptych lab`: it runs each backend's lesson file and prints its own source,
the lesson is the library bit for bit, and the invariants it prints can say NO."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import golden, name_of

from shared import PRESETS, assert_close, make_fixture
from shared.steps import STEPS
from triptych import lab
from triptych.cli import main

FIXTURE = make_fixture(PRESETS["tiny"])
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("multi", [False, True], ids=["one-head", "multi-head"])
def test_the_walk_is_the_library_bit_for_bit(backend, dtype, multi):
    walk = lab.walk(name_of(backend), FIXTURE, dtype, multi=multi)
    full = backend.multi_head_attention if multi else backend.single_head_attention
    out, weights = full(*walk.args)
    np.testing.assert_array_equal(walk.weights, backend.to_numpy(weights))
    np.testing.assert_array_equal(walk.out, backend.to_numpy(out))
    form = "multi" if multi else "single"
    assert_close(walk.weights, golden("tiny")[f"{form}_weights"], dtype, "weights")
    assert_close(walk.out, golden("tiny")[f"{form}_out"], dtype, "output")


def test_the_walk_prints_the_lesson_files_own_lines_and_their_values(backend):
    walk = lab.walk(name_of(backend), FIXTURE, "float64")
    assert [run.step.number for run in walk.steps] == list(range(1, 8))
    assert [run.step.title for run in walk.steps] == list(STEPS)
    source = (ROOT / walk.path).read_text().splitlines()
    for run in walk.steps:
        for number, text in run.step.lines:
            assert source[number - 1].strip() == text
    made = {m.name: m for run in walk.steps for m in run.made}
    assert [m.name for m in walk.steps[0].made] == ["q", "k", "v"]
    assert walk.steps[1].made == ()  # one head: step 2 has nothing to do
    x, w_q, *_ = (backend.to_numpy(a) for a in walk.args)
    np.testing.assert_allclose(made["q"].value, x @ w_q, rtol=1e-12)
    assert made["scores"].shape == (8, 8) and made["causal"].value.dtype == bool
    np.testing.assert_array_equal(made["weights"].value, walk.weights)
    np.testing.assert_array_equal(made["out"].value, walk.out)


def test_lab_prints_every_step_the_source_and_two_yes(backend, capsys):
    assert main(["lab", "--backends", name_of(backend), "--weights", "random"]) == 0
    text = capsys.readouterr().out
    for number, title in enumerate(STEPS, start=1):
        assert f"{number}. {title}  (impl_{name_of(backend)}/lesson.py:" in text
    assert "   out = weights @ v  # (..., T, T) @ (..., T, D) -> (..., T, D)" in text
    assert "     q (8, 32)" in text and "     weights (8, 8)" in text
    lines = text.splitlines()
    assert any(line.startswith("rows sum to 1") and " YES " in line for line in lines)
    assert any(
        line.startswith("nothing above the diagonal") and " YES " in line
        for line in lines
    )
    assert "   lesson: NaN in rows 0-7 of 8" in text
    assert f"   impl_{name_of(backend)}.single_head_attention: NaN in rows 5-7" in text
    assert f"what {name_of(backend)} adds" in text
    assert lines[-1] == f"YES: both invariants hold for {name_of(backend)} (float32)"


def test_lab_multi_walks_the_heads(backend, capsys):
    argv = ["lab", "--backend", name_of(backend), "--multi", "--weights", "random"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "multi_head_attention, tiny preset (4 heads, D = 8)" in text
    assert "     weights (4, 8, 8)" in text and "[0, :4, :4]" in text


def test_a_nan_token_reaches_every_lesson_row_and_only_the_attending_rows_of_ours(
    backend,
):
    walk = lab.walk(name_of(backend), FIXTURE, "float32")
    lesson_rows, full_rows = lab.nan_rows(name_of(backend), walk)
    assert lesson_rows == list(range(8))
    assert full_rows == list(range(lab.POISONED_TOKEN, 8))


def test_the_invariants_can_say_no():
    T = 4
    causal = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]  # uniform rows
    assert [c.holds for c in lab.invariants(causal, "float32")] == [True, True]
    leaky = np.full((T, T), 1 / T)  # attends to the future
    assert [c.holds for c in lab.invariants(leaky, "float32")] == [True, False]
    short = causal * 0.99  # rows sum to 0.99
    assert [c.holds for c in lab.invariants(short, "float32")] == [False, True]


def test_lab_exits_1_when_an_invariant_fails(capsys, monkeypatch):
    real = lab.walk

    def peeking(*args, **kwargs):
        walk = real(*args, **kwargs)
        return dataclasses.replace(walk, weights=np.full_like(walk.weights, 1 / 8))

    monkeypatch.setattr(lab, "walk", peeking)
    assert main(["lab", "--backend", "numpy", "--weights", "random"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(
        line.startswith("nothing above the diagonal") and " NO " in line
        for line in lines
    )
    assert lines[-1] == "NO: numpy: nothing above the diagonal"


def test_lab_all_walks_every_installed_backend(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "impl_torch", None)
    monkeypatch.setitem(sys.modules, "impl_jax", None)
    assert main(["lab"]) == 0
    text = capsys.readouterr().out
    headers = [line for line in text.splitlines() if line.startswith("== ")]
    assert len(headers) == 1 and headers[0].startswith("== numpy")


def test_lab_shows_the_trained_model_and_what_each_head_does(capsys):
    """By default the lab walks one induction head of the shipped model, on
    eight words said twice, and says what every head does, measured."""
    assert main(["lab", "--backend", "numpy"]) == 0
    text = capsys.readouterr().out
    assert "the trained model (shared/fixtures/induction.npz): 2 layers of 4 heads" in (
        text
    )
    roles = [line for line in text.splitlines() if line.startswith("   layer ")]
    assert len(roles) == 8
    assert any(": previous-token head: " in line for line in roles[:4])
    assert all(": induction head: " in line for line in roles[4:])
    assert sum(line.endswith("<- shown") for line in roles) == 1
    assert "x (16, 64), what enters layer 1 as the model reads: the cat sat" in text
    assert "single_head_attention, the trained model, layer 1, head " in text
    lines = text.splitlines()
    header = lines.index(next(line for line in lines if "th ca sa on a  ma" in line))
    assert lines[header + 9].startswith("    8 the ")  # the repeat: induction
    assert "   lesson: NaN in rows 0-15 of 16" in text
    assert "every head from the one-head lesson: extras.every_head" in text


def test_lab_multi_shows_every_head_of_a_layer_with_its_role(capsys):
    assert main(["lab", "--backend", "numpy", "--multi", "--layer", "0"]) == 0
    text = capsys.readouterr().out
    assert "multi_head_attention, the trained model, layer 0 (4 heads, D = 16)" in text
    for head in range(4):
        assert f"weights of head {head}, whole" in text
    assert text.count("<- shown") == 4


def test_a_text_heatmap_labels_rows_and_columns_and_shades_the_weights():
    weights = np.array([[1.0, 0.0], [0.25, 0.75]])
    lines = lab.text_heatmap(weights, ["the", "cat"])
    assert lines[0] == "       th ca"
    assert lines[1] == " 0 the @@"
    assert lines[2] == " 1 cat :: ##"
    assert lines[-1].startswith("scale: ' ' < 0.1, ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--weights", "random", "--layer", "0"], "--layer picks a part of"),
        (
            ["--weights", "random", "--layer", "0", "--head", "1"],
            "--layer and --head pick a part of",
        ),
        (["--multi", "--head", "1"], "--multi walks every head: drop --head"),
        (["--layer", "2"], "--layer 2: the trained model has 2 layers, 0 and 1"),
        (["--head", "4"], "--head 4: the trained model has 4 heads, 0 to 3"),
        (["--weights", "random", "--tokens", "the cat"], "--tokens is read by the"),
        (["--tokens", "king zebra"], "--tokens: the trained model knows 64 words"),
        (["--tokens", " "], "--tokens: the trained model reads 1 to 32 words, not 0"),
    ],
)
def test_lab_options_that_do_not_fit_are_one_line_exit_2(argv, message, capsys):
    assert main(["lab", "--backend", "numpy", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("triptych lab: error: ")
    assert message in err


def test_an_index_past_the_end_says_how_many_there_are_and_their_numbers():
    from triptych.common.errors import numbered

    assert numbered(1, "layer") == "1 layer, 0"
    assert numbered(2, "layer") == "2 layers, 0 and 1"
    assert numbered(12, "head") == "12 heads, 0 to 11"


@pytest.mark.parametrize("argv", [["--backend", "tf"], ["--dtype", "int8"]])
def test_lab_bad_input_is_one_line_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["lab", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("triptych lab: error: ")


KING = "king wore gold crown she drew small house " * 2


def test_lab_reads_a_sentence_of_ones_own(capsys):
    """--tokens as for run and read: the single head's row of the second
    'wore' attends 'gold', the token after the first 'wore'."""
    assert main(["lab", "--backend", "numpy", "--tokens", KING]) == 0
    text = capsys.readouterr().out
    assert f"what enters layer 1 as the model reads: {KING.strip()}" in text
    lines = text.splitlines()
    header = lines.index(next(line for line in lines if "ki wo go cr" in line))
    start = lines[header].index("ki")  # column j: 2 characters at start + 3 j
    row = lines[header + 10]  # row 9, the second "wore"
    assert row.startswith("    9 wore ") and row[start + 6 : start + 8] == "@@"  # gold


def test_a_sentence_shorter_than_the_poisoned_token_poisons_its_last(capsys):
    """Two words: the NaN goes into token 1 (POISONED_TOKEN is past the end),
    where it reached a token that was not there (an IndexError)."""
    assert main(["lab", "--backend", "numpy", "--tokens", "king wore"]) == 0
    text = capsys.readouterr().out
    assert "NaN in token 1 ('wore')" in text
    assert "NaN in rows 1, the rows that attend token 1" in text


def test_tokens_are_checked_by_one_helper_the_same_in_run_lab_and_read(
    tmp_path, capsys
):
    said = []
    for command in ("run", "lab", "read"):
        argv = [command, "--tokens", "king zebra"]
        if command != "lab":
            argv += ["--output-dir", str(tmp_path / command)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        said.append(err.split(": error: ", 1)[1])
    assert said[0].startswith("--tokens: the trained model knows 64 words, not ")
    assert said == [said[0]] * 3 and said[0].count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_the_single_head_is_of_the_induction_circuit_in_each_layer():
    """One meaning of 'single head' (docs/reading.md): the head run, lab and
    read take by default; layer 1's is an induction head, layer 0's a
    previous-token head (its clearest head, head 0, is a current-token head)."""
    from triptych.common import trained

    roles = {(r.layer, r.head): r.role for r in trained.head_roles()}
    assert roles[(1, trained.default_head(1))] == "induction"
    assert roles[(0, trained.default_head(0))] == "previous-token"
    assert roles[(0, trained.clearest_head(0))] == "current-token"
    assert trained.view().head == trained.default_head(1)  # lab's, read's, run's
    assert trained.view(layer=0).head == trained.default_head(0)
    assert trained.layer_record(0)["single_head"] == trained.default_head(0)
