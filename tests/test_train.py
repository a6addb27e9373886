"""Training (shared/train.py, impl_*/train.py, triptych train): the task, the
gradients of the whole model (finite differences; every backend equals the
hand-written NumPy ones), the tolerance and what it catches, what the default
run learns, and the command (files, schema, bad input, NaN, Ctrl-C).

Step-for-step agreement of each framework's trainers with NumPy's, eager and
compiled, is in tests/test_torch_train.py and tests/test_jax_train.py.
"""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from helpers import TINY_TRAIN, name_of, per_process_cache

from shared import assert_close
from shared.tolerances import FINITE_DIFFERENCE_RTOL, FINITE_DIFFERENCE_STEP
from shared.train import (
    TRAIN_STEPS,
    TrainConfig,
    induction_accuracy,
    make_task,
    period_of,
    periods,
    rounding_kick,
    train_step_comment,
    training_tolerance,
)
from triptych import cli
from triptych.common import trained, training
from triptych.common.backends import BackendMissingError
from triptych.common.threads import thread_limits
from triptych.train import loop

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "docs" / "train.schema.json").read_text())
TINY = TrainConfig(**TINY_TRAIN, steps=4)
"""Small enough that finite differences visit every entry in a second."""
TINY_ARGS = [
    "--vocab", "8", "--seq-len", "8", "--d-model", "8", "--n-heads", "2",
    "--batch", "3",
]  # fmt: skip
ACCURACY_FLOOR = 0.9
"""The default run's induction accuracy must reach this in every backend
(measured: 1.000 in each, docs/train.md; chance is 1/64)."""


def train_module(backend):
    return importlib.import_module(f"{backend.__name__}.train")


# The task ---------------------------------------------------------------------


def test_the_task_repeats_distinct_tokens_from_one_seed():
    config = TrainConfig(**{**vars(TINY), "seq_len": 16, "vocab": 8})
    task = make_task(config)
    batches = np.stack(list(task.batches()))
    assert batches.shape == (config.steps, config.batch, 16)
    assert task.held_out.shape == (config.held_out, 16)
    seen = set()
    for tokens in (*batches, task.held_out):
        for row, k in zip(tokens, period_of(tokens), strict=True):
            assert 4 <= k <= 8  # T/4 to T/2
            assert len(set(row[:k])) == k  # k distinct tokens
            np.testing.assert_array_equal(row[k:], row[:-k])  # then again
            seen.add(int(k))
        assert tokens.min() >= 0 and tokens.max() < config.vocab
    assert seen == {4, 5, 6, 7, 8}
    again = make_task(config)
    np.testing.assert_array_equal(np.stack(list(again.batches())), batches)
    np.testing.assert_array_equal(np.stack(list(task.batches())), batches)
    for name, w in task.params.items():
        np.testing.assert_array_equal(again.params[name], w)
    longer = make_task(TrainConfig(**{**vars(config), "steps": 2 * config.steps}))
    longer_batches = np.stack(list(longer.batches()))
    np.testing.assert_array_equal(longer_batches[: config.steps], batches)
    other = make_task(TrainConfig(**{**vars(config), "seed": 1}))
    assert not np.array_equal(np.stack(list(other.batches())), batches)
    assert list(task.params) == list(config.param_names)
    assert task.params["embed"].shape == (8, 8)
    assert task.params["layer1.w_o"].shape == (8, 8)
    assert task.params["unembed"].shape == (8, 8)


def test_the_task_draws_each_parameter_in_its_shape():
    """embed (V, C), pos (T, C), unembed (C, V), with V, T and C all apart."""
    config = TrainConfig(vocab=12, seq_len=10, d_model=4, n_heads=2, n_layers=1)
    shapes = {name: w.shape for name, w in make_task(config).params.items()}
    assert shapes["embed"] == (12, 4)
    assert shapes["pos"] == (10, 4)
    assert shapes["unembed"] == (4, 12)
    assert shapes["layer0.w_q"] == (4, 4)


def test_the_shortest_sequence_and_the_periods_it_allows():
    """seq_len 4 is the least (a period of 2, then its repeat); periods run
    from max(2, T // 4) to T // 2, whole numbers."""
    TrainConfig(vocab=8, seq_len=4, d_model=8, n_heads=2)  # accepted
    for T, expected in ((4, (2, 2)), (8, (2, 4)), (11, (2, 5)), (16, (4, 8))):
        found = periods(T)
        assert found == expected and all(type(n) is int for n in found), T


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"steps": 0}, "steps must be at least 1, got 0"),
        ({"seq_len": 3}, "seq_len must be at least 4 \\(a period of 2 tokens"),
        ({"vocab": 3}, "vocab 3 is too small for seq_len 8: a period draws up to 4"),
        ({"n_heads": 3}, "does not divide"),
        ({"lr": 0.0}, "Adam needs lr > 0"),
    ],
)
def test_sizes_the_task_cannot_use_raise_one_line(sizes, message):
    with pytest.raises(ValueError, match=message) as caught:
        TrainConfig(**{**vars(TINY), **sizes})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        (
            {"seq_len": 9, "vocab": 3},
            "vocab 3 is too small for seq_len 9: a period draws up to 4 distinct "
            "tokens, so vocab must be at least 4",
        ),
        ({"b1": 1.0}, "Adam needs lr > 0 and 0 <= b1, b2 < 1"),
        ({"b2": 1.0}, "Adam needs lr > 0 and 0 <= b1, b2 < 1"),
        ({"seed": -1}, "seed must be at least 0, got -1"),
    ],
)
def test_the_edges_of_the_sizes_the_task_can_use(sizes, message):
    """Each message whole; and just inside each edge is accepted: vocab
    T // 2 for an odd T, b1 = 0 and b2 = 0."""
    with pytest.raises(ValueError) as caught:
        TrainConfig(**{**vars(TINY), **sizes})
    assert str(caught.value) == message
    TrainConfig(**{**vars(TINY), "seq_len": 9, "vocab": 4})
    TrainConfig(**{**vars(TINY), "b1": 0.0, "b2": 0.0})


def test_induction_accuracy_counts_the_repeats_only():
    tokens = make_task(TINY).held_out  # (n, T)
    V = TINY.vocab
    perfect = np.eye(V)[np.roll(tokens, -1, axis=1)]  # each position names the next
    assert induction_accuracy(perfect, tokens) == 1.0
    wrong_before = perfect.copy()  # wrong wherever the token is new: t < k
    for row, k in enumerate(period_of(tokens)):
        wrong_before[row, :k] = np.eye(V)[(tokens[row, 1 : k + 1] + 1) % V]
    assert induction_accuracy(wrong_before, tokens) == 1.0
    assert induction_accuracy(np.roll(perfect, 1, axis=1), tokens) < 0.5


def test_induction_accuracy_counts_the_first_repeat_too():
    """The first inducible prediction is at position k (period k): it guesses
    token k + 1, the repeat of token 1."""
    tokens = make_task(TINY).held_out  # (n, T)
    V, T = TINY.vocab, tokens.shape[-1]
    perfect = np.eye(V)[np.roll(tokens, -1, axis=1)]
    wrong_at_k = perfect.copy()
    for row, k in enumerate(period_of(tokens)):
        wrong_at_k[row, k] = np.eye(V)[(tokens[row, k + 1] + 1) % V]
    inducible = sum(T - 1 - k for k in period_of(tokens))
    expected = 1 - len(tokens) / inducible
    assert induction_accuracy(wrong_at_k, tokens) == pytest.approx(expected)


def test_the_loss_of_rows_far_apart_is_each_rows_own_log_softmax(backend):
    """Each prediction's log-sum-exp is taken about its own max: logits 2000
    apart from one position to the next (exp(-2000) is 0) lose nothing."""
    train = train_module(backend)
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((2, 4, 5)) + 2000.0 * np.arange(4)[:, None]
    tokens = rng.integers(0, 5, size=(2, 4))
    found = float(
        backend.to_numpy(
            train.cross_entropy(backend.from_numpy(logits), train.as_tokens(tokens))
        )
    )
    shifted = logits[:, :-1] - logits[:, :-1].max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_p, tokens[:, 1:, None], axis=-1)
    assert found == pytest.approx(-picked.mean(), rel=1e-12)


def test_the_logits_of_a_prefix_are_the_first_rows_of_the_whole(backend):
    """forward on the first t tokens of a sequence (t < seq_len): causal, so
    the logits are those of the whole sequence's first t positions."""
    train = train_module(backend)
    task = make_task(TINY)
    params = train.init_params(task.params, "float64")
    tokens = next(task.batches())  # (B, seq_len)
    whole, _ = train.forward(params, train.as_tokens(tokens), TINY.n_heads)
    prefix, _ = train.forward(params, train.as_tokens(tokens[:, :5]), TINY.n_heads)
    assert_close(
        backend.to_numpy(prefix), backend.to_numpy(whole)[:, :5], "float64", "prefix"
    )


def test_gradients_stay_finite_where_logits_are_thousands_apart(backend):
    """The softmax of the loss's backward subtracts each prediction's own max:
    position t adds 1000 t to every logit of its row (pos[t] along feature 0,
    which the unembedding reads as 1 for every token), so one max for all
    rows would make exp 0 in every row but the last (0 / 0), and adding the
    max instead of subtracting it would overflow."""
    train = train_module(backend)
    task = make_task(TINY)
    params = {name: w.copy() for name, w in task.params.items()}
    params["pos"][:, 0] = 1000.0 * np.arange(TINY.seq_len)
    params["unembed"][0] = 1.0
    params = train.init_params(params, "float64")
    tokens = next(task.batches())
    grads = train.gradients(params, train.as_tokens(tokens), TINY.n_heads)
    for name, g in grads.items():
        assert np.isfinite(backend.to_numpy(g)).all(), name


def test_numpy_as_tokens_makes_int64():
    from impl_numpy import train

    tokens = train.as_tokens(np.array([[1, 2, 3]], dtype=np.int32))
    assert tokens.dtype == np.int64


# Gradients of the whole model -------------------------------------------------


@per_process_cache
def _finite_differences():
    """dL/d entry of every parameter entry by central differences of NumPy's
    float64 loss, on the first batch of TINY."""
    import impl_numpy.train as numpy_train

    task = make_task(TINY)
    params = numpy_train.init_params(task.params, "float64")
    tokens = next(task.batches())
    h = FINITE_DIFFERENCE_STEP
    found = {}
    for name, w in params.items():
        grad = np.empty(w.size)
        for index in range(w.size):
            original = w.flat[index]
            w.flat[index] = original + h
            plus = numpy_train.loss(params, tokens, TINY.n_heads)
            w.flat[index] = original - h
            minus = numpy_train.loss(params, tokens, TINY.n_heads)
            w.flat[index] = original
            grad[index] = (plus - minus) / (2 * h)
        found[name] = grad.reshape(w.shape)
    return found


def backend_gradients(backend, dtype, config=TINY, tokens=None):
    """The backend's gradients of its loss on the first batch, in NumPy."""
    train = train_module(backend)
    task = make_task(config)
    params = train.init_params(task.params, dtype)
    tokens = next(task.batches()) if tokens is None else tokens
    grads = train.gradients(params, train.as_tokens(tokens), config.n_heads)
    return {name: backend.to_numpy(grads[name]) for name in task.params}


def relative_error(grad, expected) -> float:
    """Largest |grad - expected| / largest |expected|."""
    return float(np.max(np.abs(grad - expected)) / np.max(np.abs(expected)))


def test_gradients_of_the_whole_model_equal_finite_differences(backend):
    """NumPy's by hand, torch's by autograd, JAX's by jax.grad: each entry of
    the embeddings, every layer's projections and the unembedding."""
    grads = backend_gradients(backend, "float64")
    for name, expected in _finite_differences().items():
        error = relative_error(grads[name], expected)
        assert error < FINITE_DIFFERENCE_RTOL, f"{name_of(backend)} d_{name}: {error}"


def test_finite_differences_catch_a_target_off_by_one():
    """The check has teeth: the gradient for the tokens shifted by one
    position (each position trained to predict itself) is far off."""
    import impl_numpy

    shifted = np.roll(next(make_task(TINY).batches()), 1, axis=1)
    wrong = backend_gradients(impl_numpy, "float64", tokens=shifted)
    assert relative_error(wrong["unembed"], _finite_differences()["unembed"]) > 1e-2


def test_gradients_equal_the_hand_written_numpy_ones(backend, dtype):
    """autograd and jax.grad against NumPy's backward by hand (float64), at
    the tolerance of the dtype."""
    import impl_numpy

    expected = backend_gradients(impl_numpy, "float64")
    grads = backend_gradients(backend, dtype)
    for name, value in expected.items():
        assert grads[name].dtype == np.dtype(dtype)
        assert_close(grads[name], value, dtype, f"{name_of(backend)} d_{name}")


def test_train_step_comment_numbers_the_steps_from_1():
    assert train_step_comment(2) == "# [2] loss: cross-entropy of every next token"
    assert [train_step_comment(n)[: len("# [n] ")] for n in range(1, 5)] == [
        f"# [{n}] " for n in range(1, 5)
    ]
    assert train_step_comment(1).endswith(TRAIN_STEPS[0])
    assert train_step_comment(4).endswith(TRAIN_STEPS[3])


@pytest.mark.reads_source
def test_the_training_step_reads_the_same_in_every_backend():
    comments = [train_step_comment(n) for n in range(1, 5)]
    for impl in ("impl_numpy", "impl_torch", "impl_jax"):
        text = (ROOT / impl / "train.py").read_text()
        found = [line.strip() for line in text.splitlines() if "# [" in line]
        assert found == comments, impl
    flax = (ROOT / "impl_jax" / "train_flax.py").read_text()
    assert [line.strip() for line in flax.splitlines() if "# [" in line] == comments


# The tolerance ----------------------------------------------------------------


def test_a_rounding_kick_moves_every_parameter_one_unit_in_the_last_place(dtype):
    params = {"w": np.linspace(-3, 3, 1001).astype(dtype)}
    before = params["w"].copy()
    rounding_kick(params, np.random.default_rng(0))
    step = np.abs(params["w"] - before)
    np.testing.assert_array_equal(step, np.spacing(np.abs(before)) * (step > 0))
    assert np.all(step > 0) or np.all(step[before != 0] > 0)
    ups = np.mean(params["w"] > before)
    assert 0.4 < ups < 0.6


def test_the_tolerance_grows_with_the_shadow_and_has_a_floor(dtype):
    from shared.tolerances import DERIVED_MULTIPLE, tolerance
    from shared.train import SHADOW_MULTIPLES

    floor = tolerance(dtype).atol
    assert training_tolerance(0.0, dtype) == floor
    assert training_tolerance(floor, dtype) == SHADOW_MULTIPLES[dtype] * floor
    assert SHADOW_MULTIPLES["float64"] == DERIVED_MULTIPLE


def test_the_tolerance_catches_adam_rounded_to_float32_once_a_step():
    """What torch.compile of torch.optim.Adam did in float64 (docs/train.md):
    its bias corrections 1 - b^t come from a float32 step counter. A NumPy Adam
    whose step counter is a float32 leaves the float64 tolerance at step 1."""
    import impl_numpy.train as numpy_train

    config = TrainConfig(steps=3)
    task = make_task(config)
    results = {}
    for which in ("float64", "float32 counter"):
        params = numpy_train.init_params(task.params, "float64")
        adam = numpy_train.make_optimizer(params, config.lr, config.b1, config.b2, 1e-8)
        if which == "float32 counter":
            adam["t"] = np.float32(0)  # so b ** t and 1 - b ** t are float32
        numpy_train.train_step(params, adam, next(task.batches()), config.n_heads)
        results[which] = params
    shadow = training.make_shadow(task, "float64")
    shadow.step(next(task.batches()))
    drift = loop.largest_difference(shadow.params(), results["float64"])
    difference = loop.largest_difference(results["float32 counter"], results["float64"])
    assert difference > 100 * training_tolerance(drift, "float64")


# What the default run learns --------------------------------------------------


FAST = {"numpy": "numpy", "torch": "torch-eager", "jax": "jax-jit"}
"""The quickest trainer of each backend (the step-for-step tests show that the
others follow the same path)."""


def test_the_default_run_learns_induction(backend):
    """350 steps of the default model reach ACCURACY_FLOOR (chance: 1/64); in
    NumPy, they are the shipped model's (shared/fixtures/induction.npz): the
    same SHA-256, or within the saved run's tolerance where this NumPy rounds
    otherwise."""
    config = TrainConfig()
    task = make_task(config)
    with thread_limits(1):  # as triptych train: more threads only wait on tiny work
        trainer = training.make_trainer(FAST[name_of(backend)], task, "float64")
        for tokens in task.batches():
            trainer.step(tokens)
        accuracy, _ = loop.evaluate(trainer, task)
    assert accuracy >= ACCURACY_FLOOR > 10 / config.vocab
    if name_of(backend) == "numpy":  # the run the shipped weights were saved from
        saved = trained.load()
        last = saved.meta["records"][-1]  # its tolerance: the saved run's own
        params = trainer.params()
        fresh = trained.Record.of(config.steps, params, last["tolerance"])
        comparison = trained.compare([fresh], params, saved)
        assert comparison.steps == [config.steps]
        assert comparison.within, comparison.verdict()


# triptych train ---------------------------------------------------------------


def run_train(tmp_path, *argv) -> tuple[int, Path]:
    out = tmp_path / "train"
    argv = ["train", "--quiet", "--output-dir", str(out), *argv]
    try:
        code = cli.main(argv)
    except SystemExit as stop:
        code = stop.code
    return code, out


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def numpy_run(tmp_path_factory):
    """`triptych train --backends numpy` on tiny sizes, shared by the tests below."""
    tmp_path = tmp_path_factory.mktemp("numpy_run")
    return run_train(tmp_path, "--backends", "numpy", "--steps", "5", *TINY_ARGS)


def test_a_run_writes_every_file(numpy_run):
    code, out = numpy_run
    assert code == 0
    names = {p.name for p in out.iterdir()}
    assert names == {
        "results.json",
        "steps.csv",
        "summary.md",
        "loss.png",
        "agreement.png",
        "heatmaps_numpy.png",
    }
    for name in names:
        assert (out / name).stat().st_size > 0
    rows = read_rows(out / "steps.csv")
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5]
    assert set(rows[0]) == {"step", "tolerance", "shadow_drift", "loss numpy"}
    summary = (out / "summary.md").read_text()
    assert "PASS: NumPy alone trained 5 steps (no pair)" in summary


def test_results_json_matches_the_schema(numpy_run):
    _, out = numpy_run
    document = json.loads((out / "results.json").read_text())
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert document["verdict"] == "PASS"
    assert document["steps"]["step"] == [1, 2, 3, 4, 5]
    (numpy,) = document["trainers"]
    assert numpy["name"] == "numpy" and numpy["steps_done"] == 5
    assert 0 <= numpy["accuracy_after"] <= 1
    broken = {**document, "verdict": "MAYBE"}
    with pytest.raises(jsonschema.ValidationError, match="MAYBE"):
        jsonschema.validate(broken, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_the_command_in_results_repeats_the_run(numpy_run, tmp_path):
    _, out = numpy_run
    document = json.loads((out / "results.json").read_text())
    argv = document["command"].split()[2:]  # after "triptych train"
    code, again = run_train(tmp_path, *argv)
    assert code == 0
    repeated = json.loads((again / "results.json").read_text())
    assert repeated["steps"]["loss"] == document["steps"]["loss"]
    assert repeated["config"] == document["config"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
        (["--vocab", "3"], "vocab 3 is too small for seq_len 8"),
        (["--seq-len", "3"], "seq_len must be at least 4 (a period of 2 tokens"),
        (["--n-heads", "3"], "does not divide"),
        (["--lr", "nan"], "argument --lr: must be a finite number above 0, got nan"),
        (["--backends", "mxnet"], "unknown backend 'mxnet'"),
        (["--threads", "100000"], "--threads 100000 asks for more than the"),
    ],
)
def test_bad_arguments_exit_2_with_one_clear_line(tmp_path, capsys, argv, message):
    code, out = run_train(tmp_path, *TINY_ARGS, *argv)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_a_backend_asked_for_but_missing_exits_2(tmp_path, capsys, monkeypatch):
    from triptych.common import backends

    real = backends.load_backend

    def load_backend(name):
        if name == "torch":
            raise BackendMissingError("backend 'torch' is not installed (test)")
        return real(name)

    monkeypatch.setattr(backends, "load_backend", load_backend)
    code, out = run_train(tmp_path, "--backends", "numpy,torch", *TINY_ARGS)
    assert code == 2
    assert capsys.readouterr().err == (
        "triptych train: error: backend 'torch' is not installed (test)\n"
    )
    assert not out.exists()


def test_an_output_dir_that_cannot_be_written_exits_2(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("in the way\n")
    code, _ = run_train(tmp_path, "--backends", "numpy", "--output-dir", str(a_file))
    assert code == 2
    assert capsys.readouterr().err == (
        f"triptych train: error: cannot write to {a_file}: "
        "it is a file, not a directory\n"
    )


def test_a_nan_loss_stops_naming_the_step_and_keeps_the_steps_done(tmp_path, capsys):
    """Adam with lr 1e300 throws the parameters to 1e300 in one step: the
    next forward overflows, and the loss of step 2 is NaN."""
    argv = ["--backends", "numpy", "--steps", "5", "--lr", "1e300", *TINY_ARGS]
    code, out = run_train(tmp_path, *argv)
    assert code == 1
    err = capsys.readouterr().err
    assert err == (
        "triptych train: the loss of numpy is NaN at step 2: stopped; the 1 steps "
        f"before are written to {out}\n"
    )
    document = json.loads((out / "results.json").read_text())
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert document["nan"] == {"step": 2, "trainer": "numpy"}
    assert document["verdict"] == "FAIL"
    assert len(read_rows(out / "steps.csv")) == 1


def test_ctrl_c_keeps_the_steps_done(tmp_path, capsys, monkeypatch):
    real = training.make_trainer

    def make_trainer(name, task, dtype):
        trainer = real(name, task, dtype)
        step, done = trainer.step, []

        def interrupted_at_3(tokens):
            done.append(1)
            if len(done) == 3:
                raise KeyboardInterrupt
            return step(tokens)

        trainer.step = interrupted_at_3
        return trainer

    monkeypatch.setattr(loop, "make_trainer", make_trainer)
    code, out = run_train(tmp_path, "--backends", "numpy", "--steps", "5", *TINY_ARGS)
    assert code == 130
    kept = out / "steps.partial.csv"
    assert capsys.readouterr().err == (
        f"triptych train: interrupted; 2 rows done so far kept in {kept}\n"
    )
    assert [p.name for p in out.iterdir()] == ["steps.partial.csv"]
    assert [r["step"] for r in read_rows(kept)] == ["1", "2"]


# Adam's settings away from their defaults (tests/test_options.py registers
# them). TrainConfig's b1, b2 and eps are torch.optim.Adam's and optax.adam's
# own defaults, so a setting lost on its way there is invisible at them.


def test_adam_with_every_setting_away_from_its_default_follows_adam_by_hand(backend):
    """make_optimizer(lr=0.05, b1=0.5, b2=0.75, eps=1e-3), then two steps of
    train_step, float64: the parameters of two steps of Adam written in the
    test (helpers.adam_by_hand) on NumPy's gradients; each setting alone at its
    default would give others (checked by helpers.adam_expected)."""
    from helpers import adam_expected

    train = train_module(backend)
    expected = adam_expected(TINY, 2, lr=0.05, b1=0.5, b2=0.75, eps=1e-3)
    task = make_task(TINY)
    params = train.init_params(task.params, "float64")
    batches = task.batches()
    if name_of(backend) == "jax":  # pure: the step returns the new state
        optimizer, adam = train.make_optimizer(
            params, lr=0.05, b1=0.5, b2=0.75, eps=1e-3
        )
        step = train.compile_train_step()  # eager JAX: 4 s more, the same step
        for _ in range(2):
            tokens = train.as_tokens(next(batches))
            params, adam, _ = step(params, adam, tokens, TINY.n_heads, optimizer)
    else:  # in place on params and adam
        adam = train.make_optimizer(params, lr=0.05, b1=0.5, b2=0.75, eps=1e-3)
        for _ in range(2):
            tokens = train.as_tokens(next(batches))
            train.train_step(params, adam, tokens, TINY.n_heads)
    for name, w in expected.items():
        found = backend.to_numpy(params[name])
        assert_close(found, w, "float64", f"{name_of(backend)} {name} after 2 steps")


def test_as_tokens_makes_the_integer_dtype_each_backend_indexes_with(backend):
    """int64 in NumPy and torch (what torch's indexing takes), int32 in JAX
    (int64 needs x64), whatever integers it is given. (Kills tox -e
    mutate-torch's `from_numpy(tokens, None)`, which keeps int32 as it is.)"""
    from impl_numpy import train as numpy_train

    train = train_module(backend)
    expected = np.dtype("int32" if name_of(backend) == "jax" else "int64")
    for given in ("int32", "int64"):
        tokens = np.array([[1, 2, 3]], dtype=given)
        found = backend.to_numpy(train.as_tokens(tokens))
        assert found.dtype == expected, given
        np.testing.assert_array_equal(found, numpy_train.as_tokens(tokens))


def test_agreement_png_shows_every_pair_it_lists(monkeypatch, tmp_path):
    """Pairs whose differences are the same at every step (two trainers equal
    bit for bit, each against a third) are drawn once and named together;
    the pair of the two equal ones is listed as 0 at every step; every drawn
    line has its own dashes and markers."""
    from types import SimpleNamespace

    from triptych.train import plots

    names = ["numpy", "torch-eager", "jax-eager", "flax-eager"]
    rows = []
    for step in (1, 2, 3):
        row = {"step": step, "tolerance": 1e-11, "shadow_drift": 1e-12}
        differences = {  # jax-eager and flax-eager are equal bit for bit
            "numpy vs torch-eager": 3e-13,
            "numpy vs jax-eager": 2e-14,
            "numpy vs flax-eager": 2e-14,
            "torch-eager vs jax-eager": 2e-13,
            "torch-eager vs flax-eager": 2e-13,
            "jax-eager vs flax-eager": 0.0,
        }
        row.update({f"diff {key}": d * step for key, d in differences.items()})
        rows.append(row)
    results = SimpleNamespace(names=names, rows=rows, dtype="float64")
    groups, zero = plots.coinciding_pairs(results)
    assert zero == ["jax-eager vs flax-eager"]
    assert ["numpy vs jax-eager", "numpy vs flax-eager"] in groups
    axes = []
    monkeypatch.setattr(
        plots, "finish_line_plot", lambda fig, ax, path: axes.append(ax)
    )
    plots.save_agreement(tmp_path / "agreement.png", results)
    (ax,) = axes
    labels = "\n".join(line.get_label() for line in ax.get_lines())
    for a, b in loop.pairs_of(names):
        assert loop.pair_key(a, b) in labels  # every pair named
    assert "jax-eager vs flax-eager: 0 at every step (equal bit for bit)" in labels
    assert "6 pairs, 3 lines: pairs that are the same at every step" in ax.get_title()
    drawn = [
        line
        for line in ax.get_lines()
        if len(line.get_xdata()) and line.get_color() != "black"
    ]
    styles = {(line.get_linestyle(), line.get_marker()) for line in drawn}
    assert len(drawn) == 3 and len(styles) == 3  # told apart by dashes and markers
