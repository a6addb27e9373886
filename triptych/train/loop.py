"""The training of `triptych train`: every trainer and NumPy's shadow in
lockstep from the same start on the same batches, compared after every step.

After step t each trainer's parameters are compared with NumPy's and with
every other trainer's (the largest |difference| over every parameter), and
held to the tolerance of step t: SHADOW_MULTIPLES[dtype] times the largest
drift of the shadow so far (shared/train.py, docs/train.md). A NaN loss stops
the loop at its step. Before the first step and after the last, each trainer's
induction accuracy on the held-out sequences and its attention weights on the
first of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared.train import Task, induction_accuracy, training_tolerance
from triptych.common.trained import RECORDED_STEPS, Record
from triptych.common.training import TRAINERS, Trainer, make_shadow, make_trainer


def pairs_of(names: list[str]) -> list[tuple[str, str]]:
    """Every pair (a, b) of trainers, a before b: NumPy's first."""
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]


def pair_key(a: str, b: str) -> str:
    """The name of a pair's column: 'numpy vs jax-jit'."""
    return f"{a} vs {b}"


def row_fields(names: list[str]) -> list[str]:
    """The columns of a step's row, as steps.csv has them."""
    return [
        "step",
        "tolerance",
        "shadow_drift",
        *(f"loss {name}" for name in names),
        *(f"diff {pair_key(a, b)}" for a, b in pairs_of(names)),
    ]


@dataclass
class TrainerRun:
    """What one trainer did.

    Attributes:
        name: a key of triptych.common.training.TRAINERS.
        step_s: seconds of each step (the first holds any trace and compile).
        accuracy_before, accuracy_after: induction accuracy on the held-out
            sequences, at the start and after the last step.
        weights_before, weights_after: each layer's attention weights (H, T, T)
            on the first held-out sequence.
    """

    name: str
    step_s: list[float] = field(default_factory=list)
    accuracy_before: float | None = None
    accuracy_after: float | None = None
    weights_before: list[np.ndarray] = field(default_factory=list)
    weights_after: list[np.ndarray] = field(default_factory=list)


@dataclass
class TrainResults:
    """The run: its rows (one per step done, `row_fields`), each trainer's
    run, and where a NaN loss stopped it (None when it did not)."""

    task: Task
    dtype: str
    names: list[str]
    rows: list[dict[str, Any]]
    runs: dict[str, TrainerRun]
    nan: dict[str, Any] | None = None
    records: list[Record] = field(default_factory=list)
    numpy_params: dict[str, np.ndarray] | None = None

    def first_outside(self) -> dict[str, int | None]:
        """For each pair, the first step whose difference is beyond the
        tolerance, or None."""
        found: dict[str, int | None] = {}
        for a, b in pairs_of(self.names):
            key = f"diff {pair_key(a, b)}"
            beyond = (r["step"] for r in self.rows if not r[key] <= r["tolerance"])
            found[pair_key(a, b)] = next(beyond, None)  # NaN is beyond too
        return found

    @property
    def agree(self) -> bool:
        """Every pair within the tolerance at every step, and no NaN."""
        return self.nan is None and not any(
            step is not None for step in self.first_outside().values()
        )


def largest_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """The largest |a - b| over every parameter, in float64 (NaN if any is)."""
    return max(
        float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
        for k in a
    )


def evaluate(trainer: Trainer, task: Task) -> tuple[float, list[np.ndarray]]:
    """Induction accuracy on the held-out sequences, and each layer's
    attention weights (H, T, T) on the first of them."""
    logits, weights = trainer.forward(task.held_out)
    return induction_accuracy(logits, task.held_out), [w[0] for w in weights]


def train(
    task: Task,
    names: list[str],
    dtype: str,
    rows: list[dict[str, Any]],
    advance: Callable[[int], None] = lambda step: None,
    doing: Callable[..., None] = lambda text, note=None: None,
) -> TrainResults:
    """Build every trainer and the shadow, train them in lockstep, evaluate.

    Args:
        rows: where each step's row goes as it ends (kept on Ctrl-C).
        advance: called with the step number after each step (progress).
        doing: called with what starts, where it takes long: building, the
            compile in each compiled trainer's first step, the evaluation;
            and a note, which a narrow progress line may elide (`first_step`).
    """
    doing("building the trainers")
    trainers = {name: make_trainer(name, task, dtype) for name in names}
    shadow = make_shadow(task, dtype)
    runs = {name: TrainerRun(name) for name in names}
    for name, trainer in trainers.items():
        doing(f"evaluating {name} before training")
        runs[name].accuracy_before, runs[name].weights_before = evaluate(trainer, task)
    results = TrainResults(task, dtype, names, rows, runs)
    drift = 0.0
    for step, tokens in enumerate(task.batches(), start=1):
        row: dict[str, Any] = {"step": step}
        for name, trainer in trainers.items():
            if step == 1:
                doing(*first_step(name))
            start = time.perf_counter()
            loss = trainer.step(tokens)
            runs[name].step_s.append(time.perf_counter() - start)
            row[f"loss {name}"] = loss
            if not math.isfinite(loss):
                results.nan = {"step": step, "trainer": name}
                return results
        shadow.step(tokens)
        params = {name: trainer.params() for name, trainer in trainers.items()}
        drift = max(drift, largest_difference(shadow.params(), params["numpy"]))
        row["shadow_drift"] = drift
        row["tolerance"] = training_tolerance(drift, dtype)
        for a, b in pairs_of(names):
            row[f"diff {pair_key(a, b)}"] = largest_difference(params[a], params[b])
        if step in RECORDED_STEPS or step == task.config.steps:
            results.records.append(Record.of(step, params["numpy"], row["tolerance"]))
        rows.append(row)
        if step == 1:
            doing("training", ", ".join(names))
        advance(step)
    doing("evaluating after training")
    results.numpy_params = {k: w.copy() for k, w in trainers["numpy"].params().items()}
    for name, trainer in trainers.items():
        runs[name].accuracy_after, runs[name].weights_after = evaluate(trainer, task)
    return results


def first_step(name: str) -> tuple[str, str | None]:
    """What a trainer's first step is doing, named, and a note: the compiler
    at work for a compiled one (its first step traces and compiles). The
    text is what a progress line keeps whole; the note may be elided."""
    compiler = TRAINERS[name].compiler_name()
    if compiler is None:
        return f"step 1: {name}", None
    return f"compiling {name}'s step", f"step 1, {compiler}"
