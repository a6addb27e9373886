"""The training modes of `triptych bench --train`: one training step (forward,
loss, backward, Adam) of the model of shared/train.py, per framework, eager
and compiled, through the trainers of triptych.common.training.

    numpy-train          impl_numpy.train: gradients and Adam by hand
    torch-train-eager    impl_torch.train: autograd and torch.optim.Adam, op by op
    torch-train-compile  the same, the loss (forward and backward) torch.compile'd
    jax-train-eager      impl_jax.train: jax.value_and_grad and optax.adam, op by op
    jax-train-jit        jax.jit of the whole step
    flax-train-eager     impl_jax.train_flax: nnx.Module and nnx.Optimizer, op by op
    flax-train-jit       nnx.jit of the whole step

At a point of the sweep the model has the bench's C, H and B, T = the point's
T, L = 2 layers and V = max(64, T/2) tokens (`triptych.bench.problem.
train_config`); every mode starts from the same
parameters and steps on the same batch, call after call (each call is one more
step: the same work). The check before timing: the first call's loss, computed
before its update, must equal NumPy's at the dtype's tolerance (the parameters
step for step are `triptych train`'s check). The first call of a compiled mode
holds the trace and compile, with compile caches off as in every mode.
"""

from __future__ import annotations

import numpy as np

from shared.train import make_task
from triptych.bench.modes.base import Mode, Runner
from triptych.bench.problem import Problem, train_config
from triptych.common import backends
from triptych.common.training import TRAINERS, make_trainer


def expected_loss(problem: Problem) -> tuple[np.ndarray, None]:
    """NumPy's loss of the first step, in the problem's dtype: what every
    training mode's first call must return."""
    task = make_task(train_config(problem))
    loss = make_trainer("numpy", task, problem.dtype).step(next(task.batches()))
    return np.asarray(loss), None


def _build(name: str):
    """The build function of trainer `name`: Problem -> Runner."""

    def build(problem: Problem) -> Runner:
        if problem.device != "cpu" or problem.dtype not in ("float32", "float64"):
            raise ValueError("the training modes train on the CPU in float32 or 64")
        kind = TRAINERS[name]
        hooks = backends.hooks(kind.backend)
        if kind.compiled:
            hooks.reset_compiler()  # a real compile for this T, as torch-compile
        task = make_task(train_config(problem))
        trainer = make_trainer(name, task, problem.dtype)
        tokens = next(task.batches())

        def call():
            return np.asarray(trainer.step(tokens)), None  # float() waited for it

        first_call = None
        if kind.compiled:

            def first_call():
                return hooks.uncached(call)  # compile caches off

        return Runner(call, lambda result: result, first_call=first_call)

    return build


def _mode(name, framework, compiled, eager_twin, summary) -> Mode:
    trainer = name.replace("-train", "")
    return Mode(
        name=name,
        framework=framework,
        kind="ours",
        compiled=compiled,
        eager_twin=eager_twin,
        returns_weights=False,
        linear_memory=False,
        build=_build(trainer),
        summary=summary,
        work="training step",
        reference=expected_loss,
        baseline="numpy-train",
        compiler=TRAINERS[trainer].compiler,
    )


# The registry (triptych.bench.modes) takes these after the others; only
# --train (or --modes) runs them.
MODES = (
    _mode("numpy-train", "numpy", False, None, "impl_numpy.train: by hand"),
    _mode(
        "torch-train-eager",
        "torch",
        False,
        None,
        "impl_torch.train: autograd, torch.optim.Adam, op by op",
    ),
    _mode(
        "torch-train-compile",
        "torch",
        True,
        "torch-train-eager",
        "impl_torch.train with torch.compile of the loss; Adam eager",
    ),
    _mode(
        "jax-train-eager",
        "jax",
        False,
        None,
        "impl_jax.train: jax.value_and_grad, optax.adam, op by op",
    ),
    _mode(
        "jax-train-jit",
        "jax",
        True,
        "jax-train-eager",
        "jax.jit of impl_jax.train.train_step",
    ),
    _mode(
        "flax-train-eager",
        "jax",
        False,
        None,
        "impl_jax.train_flax: nnx.Module, nnx.Optimizer, op by op",
    ),
    _mode(
        "flax-train-jit",
        "jax",
        True,
        "flax-train-eager",
        "nnx.jit of impl_jax.train_flax.train_step",
    ),
)
