"""The properties of a variant's own options, run where the check is told
them (docs/check.md#variants): no key older than the window reaches a query
(`window`), and scores far past the cap saturate with the masked keys kept
out (`softcap`).
"""

from __future__ import annotations

import numpy as np

from triptych.check import mistakes
from triptych.check.properties.judged import judge, random_calls
from triptych.check.properties.search import (
    Case,
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


def window(adapter, settings: Settings) -> Result:
    """Changing x at position j changes no output (nor weights) of a row
    i >= j + W: key j is older than the window there."""
    W = adapter.variant.window
    id, title = "window", f"no key older than the window of {W} reaches a query"
    dtype, tol = settings.working, settings.tol
    strategy = problems(adapter, settings, min_T=W + 1)
    if strategy is None:
        return Result(
            id,
            title,
            "SKIP",
            f"no sequence drawn is longer than the window of {W}: raise --max-t",
        )
    from hypothesis import strategies as st

    def check(case):
        problem, (position,) = case
        tol = judge(adapter, settings, problem)
        j = position % (problem.T - W)
        inputs = problem.inputs()
        before = adapter.run(inputs, dtype)
        after = adapter.run(changed_at(inputs, j, problem.seed), dtype)
        rows = slice(j + W, None)
        what = f"rows from {j + W} on, after x changed at position {j}"
        found = compare(f"out of the {what}", after.out[..., rows, :],
                        before.out[..., rows, :], tol)  # fmt: skip
        if found is None and before.weights is not None and after.weights is not None:
            found = compare(
                f"weights of the {what}",
                after.weights[..., rows, :],
                before.weights[..., rows, :],
                tol,
            )
        return found

    def where(case):
        return f", x changed at position {case.extra[0] % (case.problem.T - W)}"

    found = search(cases(strategy, st.integers(0, 127)), check, settings)
    if found.case is None:
        return passed(
            id, title, found, "later rows unchanged within " + tolerance_text(tol)
        )
    if found.finding.raised:
        return failed(id, title, found, where=where)
    names = ("window W+1", "window ignored", "not causal", "offset 1")
    tol = judge(adapter, settings, found.case.problem)
    diagnosis = random_calls(adapter, found.case.problem, dtype, tol) or diagnosis_of(
        adapter, found.case, dtype, tol, names
    )
    return failed(
        id, title, found, diagnosis or reach_of(adapter, found.case, dtype, tol),
        where=where,
    )  # fmt: skip


def changed_at(inputs, j: int, seed: int):
    """The inputs with fresh x at position j."""
    x = inputs.x.copy()
    fresh = np.random.default_rng(seed + 2).standard_normal(x.shape)
    x[..., j, :] = fresh[..., j, :]
    return inputs.replace(x=x)


def reach_of(adapter, case: Case, dtype: str, tol: str) -> str | None:
    """How far back keys reach where no known mistake fits: each position
    changed in turn, the oldest key that changes a row."""
    inputs = case.problem.inputs()
    T, W = case.problem.T, adapter.variant.window
    base = adapter.run(inputs, dtype).out
    reach = 0
    for j in range(T):
        out = adapter.run(changed_at(inputs, j, case.problem.seed), dtype).out
        for i in range(j, T):
            if compare("", out[..., i, :], base[..., i, :], tol) is not None:
                reach = max(reach, i - j)
    if reach < W:
        return None
    return (
        f"key i - {reach} reaches query i: a window of {reach + 1} keys, where "
        f"the window asked is {W} (i - {W} < j <= i)"
    )


CAP_FACTOR = 20.0
"""The largest |score| drawn by `softcap`, in caps: far into tanh's flat
tails, where a masked score capped to -c ties with the allowed ones."""


def softcap(adapter, settings: Settings) -> Result:
    """Scores up to CAP_FACTOR x c (as drawn, or with w_k = -w_q, so a row
    that attends only itself sits at -c): the output equals the oracle's, the
    cap applied to the scaled scores before the mask."""
    from hypothesis import strategies as st

    from triptych.check.properties.numerics import SIGNS, hostile_inputs

    c = adapter.variant.softcap
    id, title = (
        "soft-cap",
        f"scores past the cap of {c:g} saturate; masked keys stay out",
    )
    dtype, tol = settings.working, settings.tol
    score = CAP_FACTOR * c

    def check(case):
        problem, (sign,) = case
        tol = judge(adapter, settings, problem)
        inputs = hostile_inputs(problem.inputs(), dtype, score, sign)
        return agree(adapter.run(inputs, dtype), adapter.truth(inputs, dtype), tol)

    def where(case):
        signs = ", k = -q" if case.extra[0] != "random" else ""
        return f", the largest score {score:g}{signs}"

    strategy = cases(problems(adapter, settings, min_T=2), st.sampled_from(SIGNS))
    found = search(strategy, check, settings)
    if found.case is None:
        return passed(
            id, title, found, f"within {tolerance_text(tol)} at scores up to {score:g}"
        )
    if found.finding.raised:
        return failed(id, title, found, where=where)
    problem, (sign,) = found.case
    tol = judge(adapter, settings, problem)
    observed = []
    for each in (problem, rich_problem(adapter)):
        inputs = hostile_inputs(each.inputs(), dtype, score, sign)
        try:
            observed.append((inputs, adapter.run(inputs, dtype)))
        except Exception:
            break
    names = [m.name for m in mistakes.MISTAKES if m.property == "soft-cap"]
    diagnosis = mistakes.named(adapter, observed, dtype, tol, names)
    if diagnosis is None and agree(
        adapter.run(problem.inputs(), dtype),
        adapter.truth(problem.inputs(), dtype),
        tol,
    ):
        diagnosis = (
            f"the forward is already wrong at ordinary scores (see oracle:{dtype}): "
            f"nothing to say of large ones"
        )
    return failed(id, title, found, diagnosis, where=where)
