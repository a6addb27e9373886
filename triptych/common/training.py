"""Every way of training the model of shared/train.py behind one interface:
`make_trainer(name, task, dtype)` gives a `Trainer` whose `step(tokens)` runs
one training step of impl_<backend>/train.py (or impl_jax/train_flax.py) on
NumPy tokens, and whose `params()` and `forward(tokens)` answer in NumPy.
`triptych train` runs them side by side, `triptych bench --train` times them.

    numpy          impl_numpy.train: gradients and Adam by hand (eager by nature)
    torch-eager    impl_torch.train: autograd, torch.optim.Adam, op by op
    torch-compile  the same with torch.compile of the loss (forward and backward)
    jax-eager      impl_jax.train: jax.value_and_grad and optax.adam, op by op
    jax-jit        jax.jit of the whole step
    flax-eager     impl_jax.train_flax: the nnx.Module with nnx.Optimizer
    flax-jit       nnx.jit of the whole step

The shadow (`make_shadow`) is NumPy's trainer in the same dtype from the same
start, each of whose parameters is moved by one unit in the last place before
every step: a run that differs from NumPy's by rounding alone. How far the two
drift apart is how rounding grows through the Adam steps of this very run; the
tolerance is a multiple of it (shared/train.py, docs/train.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shared import registry
from shared.train import Task, rounding_kick
from triptych.common import backends


@dataclass(frozen=True)
class TrainerKind:
    """One way of training: its backend, whether its step is compiled, and
    the eager way it is the compiled twin of; `compiler` where its step is
    compiled by other than its framework's compile step (nnx.jit)."""

    backend: str
    compiled: bool
    eager_twin: str | None
    summary: str
    compiler: str | None = None

    def compiler_name(self) -> str | None:
        """What compiles its step ("torch.compile"); None for an eager one."""
        if not self.compiled:
            return None
        return self.compiler or registry.get(self.backend).compiler.name


TRAINERS: dict[str, TrainerKind] = {
    "numpy": TrainerKind("numpy", False, None, "gradients and Adam by hand"),
    "torch-eager": TrainerKind("torch", False, None, "autograd, torch.optim.Adam"),
    "torch-compile": TrainerKind(
        "torch", True, "torch-eager", "torch.compile of the loss, Adam eager"
    ),
    "jax-eager": TrainerKind("jax", False, None, "jax.value_and_grad, optax.adam"),
    "jax-jit": TrainerKind("jax", True, "jax-eager", "jax.jit of the whole step"),
    "flax-eager": TrainerKind("jax", False, None, "nnx.Module, nnx.Optimizer"),
    "flax-jit": TrainerKind(
        "jax", True, "flax-eager", "nnx.jit of the whole step", "nnx.jit"
    ),
}
"""Every trainer, in the order of the tables and figures."""


def trainer_names(backend_names, compiled: bool) -> list[str]:
    """The trainers of these backends ("jax" brings flax too): each
    framework's compiled step if `compiled`, else its eager one; a backend
    with no compile step (NumPy, the reference) its eager one either way."""
    return [
        name
        for name, kind in TRAINERS.items()
        if kind.backend in backend_names
        and (registry.get(kind.backend).compiler is None or kind.compiled == compiled)
    ]


@dataclass
class Trainer:
    """One way of training, ready to step.

    Attributes:
        name: a key of TRAINERS.
        step: NumPy tokens (B, T) -> the loss before this step, a float; runs
            one training step (forward, loss, backward, Adam).
        params: () -> the parameters now, by name, as NumPy arrays.
        forward: NumPy tokens (n, T) -> logits (n, T, V), [weights (n, H, T, T)
            of each layer], as NumPy arrays.
    """

    name: str
    step: Callable[[np.ndarray], float]
    params: Callable[[], dict[str, np.ndarray]]
    forward: Callable[[np.ndarray], tuple[np.ndarray, list[np.ndarray]]]


def make_trainer(name: str, task: Task, dtype: str) -> Trainer:
    """The trainer `name` from the task's initial parameters, in `dtype`
    (its backend's `trainer` hook, impl_<backend>/backend.py).

    Raises:
        BackendMissingError: its framework is not installed.
    """
    kind = TRAINERS[name]
    backends.load_backend(kind.backend)
    step, params, forward = backends.hooks(kind.backend).trainer(
        name, task, dtype, kind.compiled
    )
    return Trainer(name, step, params, forward)


def make_shadow(task: Task, dtype: str, seed: int = 0) -> Trainer:
    """NumPy's trainer with every parameter kicked by one unit in the last
    place, at random, before every step (see the module's docstring)."""
    trainer = make_trainer("numpy", task, dtype)
    rng = np.random.default_rng(seed)
    params = trainer.params()  # NumPy's own arrays: the kick changes them in place
    plain_step = trainer.step

    def step(tokens):
        rounding_kick(params, rng)  # before the step: step 1 differs too
        return plain_step(tokens)

    return Trainer("numpy-shadow", step, trainer.params, trainer.forward)
