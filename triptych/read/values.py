"""What each step of the lesson computed on the toy sentence, per backend, and
how far it is from the float64 oracle at that step: taken from a real run at
build time (the lesson under the line tracer of `triptych.common.walk`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.reference import reference_steps
from shared.tolerances import max_abs_diff, tolerance
from triptych.common.walk import Made, walk

DRAWN = ("scores", "causal", "weights")
"""The arrays the page draws as heatmaps, every head: the raw, scaled and
masked scores (steps 3 to 5), the mask and the weights, so that what the
softmax does is seen."""


@dataclass(frozen=True)
class Shown:
    """One array a step made, as the page shows it.

    Attributes:
        name: its variable's name in the lesson.
        shape: its full shape.
        value: the whole array, float64 (bool for the mask): the page draws
            it (DRAWN) and prints it whole behind a <details>.
        error: largest |value - oracle| (equal infinities count 0), or None
            for the boolean mask, which is compared exactly.
        within: whether every element is within the dtype's tolerance of the
            oracle (exact equality for the mask).
    """

    name: str
    shape: tuple[int, ...]
    value: np.ndarray
    error: float | None
    within: bool

    @property
    def drawn(self) -> bool:
        return self.name in DRAWN

    @property
    def mask(self) -> bool:
        return self.value.dtype == bool


def lesson_values(
    backend: str, fixture, dtype: str, function: str, head: int | None = None
) -> dict:
    """{step number: [Shown]} for `function` ("single_head_attention" or
    "multi_head_attention") of the backend's lesson on `fixture`; the one-head
    lesson on the columns of `head` (None: the whole projections, D = C)."""
    from triptych.common.trained import head_columns

    multi = function == "multi_head_attention"
    run = walk(backend, fixture, dtype, multi=multi, head=head)
    f = fixture
    w_q, w_k, w_v = (
        (f.w_q, f.w_k, f.w_v) if multi or head is None else head_columns(f, head)
    )
    oracle = reference_steps(
        f.x,
        w_q,
        w_k,
        w_v,
        f.w_o if multi else None,
        f.preset.n_heads if multi else 1,
    )
    found = {}
    for step in run.steps:
        expected = dict(oracle.get(step.step.number, {}))  # 2: nothing, one head
        if multi and step.step.number == 7 and not step.step.continued:
            expected["out"] = expected["out_heads"]  # before the merge
        key = step_key(step.step)
        found[key] = [shown(made, expected, dtype) for made in step.made]
    return found


def step_key(step) -> int | str:
    """How the values of a step are found: its number, or "7 (continued)" for
    the merge and projection after the weighted sum."""
    return f"{step.number} (continued)" if step.continued else step.number


def shown(made: Made, oracle: dict, dtype: str) -> Shown:
    """How the page shows one made array, with its agreement with the oracle."""
    value = np.asarray(made.value)
    expected = oracle[made.name]
    if value.dtype == bool:
        error, within = None, bool(np.array_equal(value, expected))
    else:
        error, within = agreement(value.astype(np.float64), expected, dtype)
    whole = value if value.dtype == bool else value.astype(np.float64)
    return Shown(made.name, made.shape, whole, error, within)


def agreement(
    value: np.ndarray, expected: np.ndarray, dtype: str
) -> tuple[float, bool]:
    """Largest |value - expected| where both are finite, and whether every
    element is within the tolerance (equal infinities agree)."""
    same_inf = np.isinf(value) & (value == expected)
    value, expected = np.where(same_inf, 0.0, value), np.where(same_inf, 0.0, expected)
    level = tolerance(dtype)
    within = bool(
        np.all(np.abs(value - expected) <= level.atol + level.rtol * np.abs(expected))
    )
    return max_abs_diff(value, expected), within
