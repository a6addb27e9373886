"""What the weights are: each row that may attend some key sums to 1, the
scores are scaled by 1/sqrt(D) (the head width), and a given mask narrows
the causal one as the oracle's does.
"""

from __future__ import annotations

import numpy as np

from triptych.check import mistakes
from triptych.check.causes import raised, raised_hint
from triptych.check.properties.empty import agree_rows
from triptych.check.properties.judged import judge
from triptych.check.properties.search import (
    Finding,
    Result,
    Settings,
    agree,
    cases,
    compare,
    diagnosis_of,
    failed,
    passed,
    problems,
    rich_problem,
    search,
    tolerance_text,
)


def rows_sum_to_one(adapter, settings: Settings) -> Result:
    """Each row of weights that may attend some key sums to 1."""
    id, title = "rows sum to 1", "each row of attention weights sums to 1"
    dtype, tol = settings.working, settings.tol
    probe = probe_weights(adapter, dtype)
    if isinstance(probe, Result):
        return Result(id, title, probe.status, probe.reason, probe.diagnosis)
    masks = ("none", "per head") if adapter.takes_mask else ("none",)
    sinks = adapter.variant is not None and adapter.variant.sinks

    def check(case):
        tol = judge(adapter, settings, case.problem)
        inputs = case.problem.inputs()
        weights = adapter.run(inputs, dtype).weights
        if weights is None:
            return Finding("returned no weights this time")
        rows = inputs.allowed().any(axis=-1)
        sums = weights.sum(axis=-1)
        ones = np.ones_like(sums)
        if sinks:  # each row's sum less the sink's share, as the oracle's
            ones = adapter.truth(inputs, dtype).weights.sum(axis=-1)
        return compare("row sums", np.where(rows, sums, ones), ones, tol)

    role = "masks" if adapter.takes_mask else None
    strategy = cases(problems(adapter, settings, role, masks=masks))
    found = search(strategy, check, settings)
    if found.case is None:
        return passed(id, title, found, "every row within " + tolerance_text(tol))
    if found.finding.raised:
        return failed(id, title, found)
    tol = judge(adapter, settings, found.case.problem)
    return failed(id, title, found, diagnosis_of(adapter, found.case, dtype, tol))


def probe_weights(adapter, dtype):
    """None if the implementation returns weights (..., H, T, T); else a
    SKIP (it returns none) or a FAIL (it raises) Result."""
    inputs = rich_problem(adapter).inputs()
    try:
        weights = adapter.run(inputs, dtype).weights
    except Exception as error:
        reason = raised(error)
        return Result("", "", "FAIL", reason, raised_hint(error))
    if weights is None:
        return Result(
            "",
            "",
            "SKIP",
            "returns no attention weights of shape (..., H, T, T): only the "
            "output is checked",
        )
    return None


SCALES = ("scale missing", "scale 1/D", "scale 1/sqrt(C)", "scale times")


def scale(adapter, settings: Settings) -> Result:
    """Scores are divided by sqrt(D), the head width (D >= 2, so it matters)."""
    id, title = "scale", "scores scaled by 1/sqrt(D)"
    dtype, tol = settings.working, settings.tol

    def check(case):
        tol = judge(adapter, settings, case.problem)
        inputs = case.problem.inputs()
        return agree(adapter.run(inputs, dtype), adapter.truth(inputs, dtype), tol)

    strategy = problems(adapter, settings, min_T=2, min_D=2)
    if strategy is None:
        return Result(id, title, "SKIP", "heads of width 1: no scale to tell apart")
    found = search(cases(strategy), check, settings)
    if found.case is None:
        return passed(id, title, found, "matches the oracle's 1/sqrt(D)")
    if found.finding.raised:
        return failed(id, title, found)
    tol = judge(adapter, settings, found.case.problem)
    diagnosis = diagnosis_of(adapter, found.case, dtype, tol, SCALES)
    if diagnosis is None:
        return failed(
            id,
            title,
            found,
            status="SKIP",
            reason="cannot judge: the output matches the oracle at none of the "
            "scales 1/sqrt(D), 1, 1/D, 1/sqrt(C), sqrt(D) (see the other rows)",
        )
    return failed(id, title, found, diagnosis)


def mask(adapter, settings: Settings) -> Result:
    """A given mask (True = may attend), shared, per item, per head or key
    padding, narrows the causal mask as the oracle does."""
    id, title = "mask", "mask: True = may attend, broadcast over batch and heads"
    if not adapter.takes_mask:
        return Result(id, title, "SKIP", "takes no mask: causal attention only")
    dtype, tol = settings.working, settings.tol
    masks = ("shared", "per item", "per head", "key padding")

    def check(case):
        tol = judge(adapter, settings, case.problem)
        inputs = case.problem.inputs()
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
        return agree_rows(adapter, inputs, got, want, dtype, tol)

    strategy = cases(problems(adapter, settings, "masks", masks=masks))
    found = search(strategy, check, settings)
    if found.case is None:
        return passed(id, title, found, "matches the oracle on every kind of mask")
    if found.finding.raised:
        return failed(id, title, found)
    names = [m.name for m in mistakes.MISTAKES if m.property == "mask"]
    tol = judge(adapter, settings, found.case.problem)
    diagnosis = diagnosis_of(adapter, found.case, dtype, tol, names)
    return failed(
        id, title, found, diagnosis or diagnosis_of(adapter, found.case, dtype, tol)
    )
