"""`triptych lab`: each backend's seven-step walk is its library, bit for bit, and
the invariants it prints can say NO."""

from __future__ import annotations

import dataclasses
import importlib
import sys

import numpy as np
import pytest
from helpers import golden, name_of

from shared import PRESETS, assert_close, make_fixture
from triptych import lab
from triptych.cli import main

FIXTURE = make_fixture(PRESETS["tiny"])


def test_the_walk_is_single_head_attention_bit_for_bit(backend, dtype):
    walk = lab.WALKS[name_of(backend)](FIXTURE, dtype)
    out, weights = backend.single_head_attention(walk.x, *walk.projections)
    np.testing.assert_array_equal(walk.weights, backend.to_numpy(weights))
    np.testing.assert_array_equal(walk.out, backend.to_numpy(out))


def test_the_walk_uses_the_modules_weights_and_matches_the_oracle(backend, dtype):
    walk = lab.WALKS[name_of(backend)](FIXTURE, dtype)
    given = (FIXTURE.w_q, FIXTURE.w_k, FIXTURE.w_v)
    for taken, weight in zip(walk.projections, given, strict=True):
        np.testing.assert_array_equal(backend.to_numpy(taken), weight.astype(dtype))
    g = golden("tiny")
    assert_close(walk.weights, g["single_weights"], dtype, "lab weights")
    assert_close(walk.out, g["single_out"], dtype, "lab output")


def test_the_walk_has_the_seven_steps_of_the_attention_file(backend):
    walk = lab.WALKS[name_of(backend)](FIXTURE, "float32")
    assert [step.number for step in walk.steps] == list(range(1, 8))
    source = importlib.import_module(f"{backend.__name__}.attention").__file__
    with open(source, encoding="utf-8") as file:
        text = file.read()
    for step in walk.steps:
        assert f"# {step.number}. {step.title}" in text


def test_lab_prints_every_step_and_two_yes(backend, capsys):
    assert main(["lab", "--backend", name_of(backend)]) == 0
    text = capsys.readouterr().out
    for number, title in enumerate(lab.STEP_TITLES, start=1):
        assert f"{number}. {title}" in text
    assert "   q = x @ w_q" in text and "(8, 32)" in text
    assert "   out = weights @ v" in text
    lines = text.splitlines()
    assert any(line.startswith("rows sum to 1") and " YES " in line for line in lines)
    assert any(
        line.startswith("nothing above the diagonal") and " YES " in line
        for line in lines
    )
    assert lines[-1] == f"YES: both invariants hold for {name_of(backend)} (float32)"


def test_the_invariants_can_say_no():
    T = 4
    causal = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]  # uniform rows
    assert [c.holds for c in lab.invariants(causal, "float32")] == [True, True]
    leaky = np.full((T, T), 1 / T)  # attends to the future
    assert [c.holds for c in lab.invariants(leaky, "float32")] == [True, False]
    short = causal * 0.99  # rows sum to 0.99
    assert [c.holds for c in lab.invariants(short, "float32")] == [False, True]


def test_lab_exits_1_when_an_invariant_fails(capsys, monkeypatch):
    real = lab.WALKS["numpy"]

    def peeking(fixture, dtype):
        walk = real(fixture, dtype)
        return dataclasses.replace(walk, weights=np.full_like(walk.weights, 1 / 8))

    monkeypatch.setitem(lab.WALKS, "numpy", peeking)
    assert main(["lab", "--backend", "numpy"]) == 1
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
    assert text.count("== ") == 1 and "== numpy" in text


@pytest.mark.parametrize("argv", [["--backend", "tf"], ["--dtype", "int8"]])
def test_lab_bad_input_is_one_line_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["lab", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("triptych lab: error: ")
