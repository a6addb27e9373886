"""JAX's training (jax.value_and_grad, optax.adam) and flax's (nnx.Module,
nnx.Optimizer), eager and jitted, step for step beside NumPy's by hand
(triptych.train.loop, tolerance from shared/train.py)."""

from __future__ import annotations

import numpy as np
from helpers import TINY_TRAIN, assert_trained_step_for_step, train_beside_numpy

from shared.train import TrainConfig, make_task


def test_jax_and_flax_follow_numpy_step_for_step_eager_and_jitted():
    """float64, the four trainers at once: each eager op and each jitted step
    compiles once (about 20 s on 2 cores)."""
    names = ["jax-eager", "jax-jit", "flax-eager", "flax-jit"]
    assert_trained_step_for_step(train_beside_numpy(names, "float64"))


def test_jitted_training_follows_numpy_in_float32():
    assert_trained_step_for_step(train_beside_numpy(["jax-jit", "flax-jit"], "float32"))


def test_the_flax_module_holds_the_shared_parameters_and_the_same_forward():
    import impl_jax.train as jax_train
    from impl_jax.train_flax import AttentionOnlyLM

    config = TrainConfig(**TINY_TRAIN, steps=1)
    task = make_task(config)
    model = AttentionOnlyLM(task.params, config.n_heads, "float64")
    held = {name: np.asarray(w) for name, w in model.params().items()}
    assert list(held) == list(task.params)
    for name, w in task.params.items():
        np.testing.assert_array_equal(held[name], w)
    tokens = jax_train.as_tokens(task.held_out)
    logits, weights = model(tokens)
    params = jax_train.init_params(task.params, "float64")
    expected, expected_weights = jax_train.forward(params, tokens, config.n_heads)
    np.testing.assert_array_equal(np.asarray(logits), np.asarray(expected))
    for a, b in zip(weights, expected_weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_flax_adam_with_every_setting_away_from_its_default_follows_adam_by_hand():
    """train_flax.make_optimizer(lr=0.05, b1=0.5, b2=0.75, eps=1e-3), then two
    steps of train_flax.train_step (under nnx.jit), float64: the parameters of two steps of
    Adam written in the test (helpers.adam_by_hand) on NumPy's gradients
    (tests/test_options.py registers it; the dict form: tests/test_train.py)."""
    from helpers import adam_expected

    import impl_jax.train as jax_train
    from impl_jax import train_flax
    from shared import assert_close

    config = TrainConfig(**TINY_TRAIN, steps=2)
    expected = adam_expected(config, 2, lr=0.05, b1=0.5, b2=0.75, eps=1e-3)
    task = make_task(config)
    model = train_flax.AttentionOnlyLM(task.params, config.n_heads, "float64")
    adam = train_flax.make_optimizer(model, lr=0.05, b1=0.5, b2=0.75, eps=1e-3)
    step = train_flax.compile_train_step()  # eager flax: 2.5 s more, the same step
    for tokens in task.batches():
        step(model, adam, jax_train.as_tokens(tokens))
    found = model.params()
    for name, w in expected.items():
        assert_close(np.asarray(found[name]), w, "float64", f"flax {name}")
