"""The tolerance each problem is judged by (`judge`): the working dtype's,
or float32's where the implementation, given float64 inputs of that
problem's sizes, agrees with the oracle only at float32's tolerance (it
computes in float32 somewhere inside: JAX's dot_product_attention runs its
softmax in float32; a library may compute ALiBi's slopes in float32, exact
up to 8 heads and not at 12). Measured once for each size the target is
called at, so that a target float32 inside at one head count is held to
float32 there, and to float64 wherever it computes float64.
"""

from __future__ import annotations

import contextlib

from triptych.check.problems import Problem
from triptych.check.properties.search import Settings, agree, rich_problem


def judge(adapter, settings: Settings, problem: Problem) -> str:
    """The dtype whose tolerance the properties beyond oracle:<dtype> hold
    `problem` to: the working dtype, or float32 where, in float64, the
    implementation agrees with the oracle on a problem of these sizes (causal
    attention, no mask) at float32's tolerance only. The dtype is recorded in
    `adapter.judged_now`, so that a property's reason can say so."""
    if settings.working != "float64":
        return settings.tol
    key = (problem.batch, problem.T, problem.H, problem.D, problem.width)
    if key not in adapter.judged:
        adapter.judged[key] = settings.working
        inputs = problem._replace(mask="none").inputs()
        with contextlib.suppress(Exception):  # its raising is a property's
            got = adapter.run(inputs, "float64")
            want = adapter.truth(inputs, "float64")
            if agree(got, want, "float64") and not agree(got, want, "float32"):
                adapter.judged[key] = "float32"
    adapter.judged_now.add(adapter.judged[key])
    return adapter.judged[key]


RANDOM = (
    "two calls on the same input differ (randomness inside: dropout left on? "
    "see determinism), so a change between two calls says nothing of the mask"
)


def random_calls(adapter, problem: Problem, dtype: str, tol: str) -> str | None:
    """RANDOM where calls on the same inputs differ beyond `tol` (three calls
    on the problem and on the rich one: dropout may keep all of a small
    problem twice): the one cause of any property that compares one call
    with another (causality, independence, window), named instead of a leak."""
    for each in (problem, rich_problem(adapter)):
        inputs = each.inputs()
        try:
            first, *others = (adapter.run(inputs, dtype) for _ in range(3))
        except Exception:
            return None
        if any(agree(first, other, tol) is not None for other in others):
            return RANDOM
    return None
