"""The trained model that ships with the project (shared/fixtures/induction.npz,
triptych.common.trained): what the file holds, that retraining from the seed
with the documented command gives its parameters, and what its heads do,
measured.

Retraining: the documented command, `triptych train --backends numpy
--check-weights FILE`, runs here for the first 10 of the 350 steps (3 s
instead of 40 s; the batches and Adam's steps of a run do not depend on how
many steps follow, so these are the full run's first 10 steps). The file
recorded the SHA-256 of the parameters after steps 1, 10, 100 and 350, and 64
entries of each parameter there. Where this machine's NumPy computes the bits
of the machine that made the file, the check sees the same SHA-256 after
steps 1 and 10: bit for bit. Where it rounds otherwise (another BLAS kernel),
it sees the recorded entries within the run's own tolerance (docs/train.md).
The whole run, all 350 steps, is held to the file by
tests/test_train.py::test_the_default_run_learns_induction[numpy], which
trains it anyway.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from shared.train import TrainConfig
from triptych.cli import main
from triptych.common import trained
from triptych.train import DEFAULTS

pytestmark = pytest.mark.neutral  # once, in the jax env (docs/suite.md)


def test_the_shipped_file_is_the_default_run_in_float64_and_small():
    model = trained.load()
    assert trained.WEIGHTS.stat().st_size < 1_000_000
    assert model.config == TrainConfig(**DEFAULTS)  # triptych train's defaults
    assert all(w.dtype == np.float64 for w in model.params.values())
    assert sorted(model.params) == sorted(model.config.param_names)
    assert model.meta["made_by"] == trained.SAVE_COMMAND
    records = model.meta["records"]
    assert [r["step"] for r in records] == [1, 10, 100, model.config.steps]
    assert records[-1]["sha256"] == trained.digest(model.params)
    assert model.meta["induction_accuracy"] > 0.95


def test_retraining_the_first_steps_gives_the_shipped_runs_parameters(tmp_path, capsys):
    argv = ["train", "--backends", "numpy", "--steps", "10", "--quiet"]
    argv += ["--check-weights", str(trained.WEIGHTS), "--output-dir", str(tmp_path)]
    assert main(argv) == 0
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert verdict.startswith(f"--check-weights {trained.WEIGHTS}: ")
    assert (
        "the same bits as the saved weights after steps 1, 10 (SHA-256)" in verdict
        or "within the run's tolerance after steps 1, 10" in verdict
    )


def test_a_run_that_differs_from_the_file_fails_the_check():
    model = trained.load()
    records = [
        trained.Record(r["step"], r["sha256"], r["samples"], 1e-12)
        for r in model.meta["records"][:2]
    ]
    same = trained.compare(records, None, model)
    assert same.same_bits and same.within and same.steps == [1, 10]
    moved = {k: [v + 1e-9 for v in vs] for k, vs in records[1].samples.items()}
    records[1] = dataclasses.replace(records[1], sha256="0" * 64, samples=moved)
    other = trained.compare(records, None, model)
    assert not other.same_bits and not other.within
    assert "BEYOND the run's tolerance" in other.verdict()


def test_the_whole_parameters_are_compared_at_the_files_last_step():
    model = trained.load()
    last = model.meta["records"][-1]
    record = trained.Record(last["step"], last["sha256"], last["samples"], 1e-12)
    moved = {k: w.copy() for k, w in model.params.items()}
    moved["layer1.w_k"][3, 5] += 1e-6  # not one of the samples
    assert trained.compare([record], model.params, model).within
    assert not trained.compare([record], moved, model).within


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seed", "1"], "was made with other settings: seed 1 (the file's: 0)"),
        (["--dtype", "float32"], "--check-weights compares float64 parameters"),
    ],
)
def test_check_weights_with_other_settings_is_one_line_exit_2(
    argv, message, capsys, tmp_path
):
    full = ["train", "--backends", "numpy", "--check-weights", str(trained.WEIGHTS)]
    assert main([*full, *argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("triptych train: error: ") and err.count("\n") == 1
    assert message in err and not (tmp_path / "out").exists()


def test_a_missing_check_weights_file_is_one_clear_line(capsys, tmp_path):
    missing = tmp_path / "missing.npz"
    argv = ["train", "--backends", "numpy", "--check-weights", str(missing)]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"triptych train: error: --check-weights {missing}: no such file\n"
    )


@pytest.mark.parametrize("kind", ["text", "npy", "npz"])
def test_a_check_weights_file_that_is_not_one_says_so(kind, capsys, tmp_path):
    """A text file, an .npy or another .npz: what it is not, in one line;
    never numpy's advice to load it as a pickle (allow_pickle=)."""
    import numpy as np

    path = tmp_path / f"weights.{kind}"
    if kind == "text":
        path.write_text("these are not weights\n")
    elif kind == "npy":
        np.save(path, np.zeros(3))
    else:
        np.savez(path, w=np.zeros(3))
    argv = ["train", "--backends", "numpy", "--check-weights", str(path)]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    said = "an .npz file, but not a" if kind == "npz" else "not an .npz file"
    assert err.startswith(f"triptych train: error: --check-weights {path}: {said}")
    assert err.count("\n") == 1 and "pickle" not in err


def test_save_weights_writes_what_load_reads(tmp_path, capsys):
    path = tmp_path / "two.npz"
    argv = ["train", "--backends", "numpy", "--steps", "2", "--quiet"]
    argv += ["--save-weights", str(path), "--output-dir", str(tmp_path / "out")]
    assert main(argv) == 0
    assert capsys.readouterr().out.endswith(f"saved NumPy's parameters to {path}\n")
    saved = trained.load(path)
    assert saved.config.steps == 2 and [r["step"] for r in saved.meta["records"]] == [
        1,
        2,
    ]
    assert saved.meta["made_by"].startswith("triptych train --steps 2 --backends")
    assert saved.meta["records"][-1]["sha256"] == trained.digest(saved.params)
    json.dumps(saved.meta)  # plain data


def test_the_heads_do_what_the_project_says_measured():
    roles = trained.head_roles()
    layer0 = [r.role for r in roles if r.layer == 0]
    layer1 = [r.role for r in roles if r.layer == 1]
    assert layer0.count("previous-token") >= 1
    assert layer1.count("induction") >= 1
    for role in roles:
        if role.role != "mixed":
            best = role.scores[role.role]
            assert best >= trained.ROLE_THRESHOLD and best > 3 * role.chance[role.role]


def test_the_measure_names_a_hand_made_head_and_calls_a_uniform_one_mixed():
    tokens = np.array([[5, 6, 7, 5, 6, 7]])  # a period of 3, repeated
    T = tokens.shape[1]
    previous = np.zeros((1, 1, T, T))
    previous[0, 0, 0, 0] = 1.0
    previous[0, 0, np.arange(1, T), np.arange(T - 1)] = 1.0
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    scores, chance = trained.head_scores(
        np.concatenate([previous, uniform[None, None]], axis=1), tokens
    )
    head = trained.HeadRole(0, 0, {p: float(s[0]) for p, s in scores.items()}, chance)
    flat = trained.HeadRole(0, 1, {p: float(s[1]) for p, s in scores.items()}, chance)
    assert head.role == "previous-token" and head.scores["previous-token"] == 1.0
    assert flat.role == "mixed"
    keys = trained.pattern_keys(tokens)
    assert keys["induction"][0].tolist() == [-1, -1, -1, 1, 2, 3]
    assert keys["duplicate-token"][0].tolist() == [-1, -1, -1, 0, 1, 2]


def test_a_word_the_model_does_not_know_is_named():
    with pytest.raises(ValueError, match="not 'zebra'"):
        trained.token_ids(["the", "zebra"])
    with pytest.raises(ValueError, match="not 'zebra', 'yak'; its words"):
        trained.token_ids(["zebra", "the", "yak", "zebra"])  # each named once
    assert len(set(trained.VOCABULARY)) == 64 == trained.load().config.vocab
