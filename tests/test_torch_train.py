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
