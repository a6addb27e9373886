"""PyTorch's training, eager and torch.compile'd, step for step beside
NumPy's by hand (triptych.train.loop, tolerance from shared/train.py)."""

from __future__ import annotations

import pytest
from helpers import assert_trained_step_for_step, train_beside_numpy


def test_eager_training_follows_numpy_step_for_step(dtype):
    assert_trained_step_for_step(train_beside_numpy(["torch-eager"], dtype))


def test_compiled_training_follows_numpy_and_eager_step_for_step():
    """torch.compile of the loss (forward and backward), float64: one cold
    compile of the small model, about 20 s on 2 cores."""
    results = train_beside_numpy(["torch-eager", "torch-compile"], "float64")
    assert_trained_step_for_step(results)
    assert results.runs["torch-compile"].step_s[0] > 0


@pytest.mark.parametrize("name", ["torch-eager", "torch-compile"])
def test_the_trainers_report_what_they_are(name):
    from triptych.common.training import TRAINERS

    kind = TRAINERS[name]
    assert kind.backend == "torch"
    assert kind.compiled == (name == "torch-compile")


def test_train_step_steps_on_the_loss_fn_it_is_given():
    """train_step(loss_fn=...), where compile_train_step puts the compiled
    loss: the loss returned, the gradients and so Adam's step are loss_fn's.
    With loss_fn the sum of unembed squared, one step moves unembed by Adam's
    step on 2 * unembed (helpers.adam_by_hand) and leaves every other
    parameter, which has no gradient, as it was (tests/test_options.py
    registers it)."""
    import numpy as np
    import torch
    from helpers import TINY_TRAIN, adam_by_hand

    import impl_torch.train as train
    from shared import assert_close
    from shared.train import TrainConfig, make_task

    config = TrainConfig(**TINY_TRAIN, steps=1)
    task = make_task(config)
    params = train.init_params(task.params, "float64")
    adam = train.make_optimizer(params, config.lr, config.b1, config.b2, config.eps)

    def unembed_squared(params, tokens, n_heads):
        return (params["unembed"] ** 2).sum()

    tokens = train.as_tokens(next(task.batches()))
    value = train.train_step(params, adam, tokens, 2, loss_fn=unembed_squared)
    unembed = task.params["unembed"]
    assert_close(value.numpy(), np.sum(unembed**2), "float64", "the loss returned")
    expected = adam_by_hand(
        {"unembed": unembed}, lambda p: {"unembed": 2 * p["unembed"]}, 1,
        config.lr, config.b1, config.b2, config.eps,
    )["unembed"]  # fmt: skip
    with torch.no_grad():
        assert_close(params["unembed"].numpy(), expected, "float64", "unembed")
        for name, w in task.params.items():
            if name != "unembed":
                np.testing.assert_array_equal(params[name].numpy(), w)
