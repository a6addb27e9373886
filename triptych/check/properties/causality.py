"""Causality: a change in the future changes no earlier output. A failure
is named by the mistake that lets the future in (LEAKS) or, where none fits,
by how the future gets in (`leak_pattern`: another batch item, every later
position, the future only, or up to some offset).
"""

from __future__ import annotations

import numpy as np

from triptych.check.problems import merge_heads
from triptych.check.properties.judged import judge, random_calls
from triptych.check.properties.search import (
    Result,
    Settings,
    agree_up_to,
    cases,
    changed_after,
    compare,
    diagnosis_of,
    failed,
    passed,
    problems,
    rich_problem,
    search,
    tolerance_text,
)


def causality(adapter, settings: Settings) -> Result:
    """Changing x after position i changes no output (nor weights) up to i."""
    id, title = "causality", "a change in the future changes no earlier output"
    dtype, tol = settings.working, settings.tol

    def check(case):
        problem, (position,) = case
        tol = judge(adapter, settings, problem)
        i = position % (problem.T - 1)
        inputs = problem.inputs()
        later = changed_after(inputs, i, problem.seed)
        before, after = adapter.run(inputs, dtype), adapter.run(later, dtype)
        return agree_up_to(before, after, i, tol, f"x changed from position {i + 1} on")

    from hypothesis import strategies as st

    def where(case):
        return f", x changed after position {case.extra[0] % (case.problem.T - 1)}"

    strategy = cases(problems(adapter, settings, min_T=2), st.integers(0, 127))
    found = search(strategy, check, settings)
    if found.case is None:
        return passed(
            id,
            title,
            found,
            "earlier outputs unchanged within " + tolerance_text(tol),
        )
    if found.finding.raised:
        return failed(id, title, found, where=where)
    tol = judge(adapter, settings, found.case.problem)
    diagnosis = random_calls(adapter, found.case.problem, dtype, tol) or diagnosis_of(
        adapter, found.case, dtype, tol, LEAKS
    )
    return failed(
        id, title, found, diagnosis or leak_pattern(adapter, dtype, tol), where=where
    )


LEAKS = (
    "offset 1",
    "diagonal masked",
    "causal reversed",
    "causal inverted",
    "denominator",
    "query axis",
    "batch flattened",
    "not causal",
    "split",
    "merge",
)
"""The mistakes that let the future in, each named by what it does (a split
or merge without the transpose mixes positions: named so, as the oracle
names it, not as a leak at some offset)."""


def leak_pattern(adapter, dtype: str, tol: str) -> str | None:
    """How the future gets in when no known mistake fits, read on a rich
    problem by changing one position of one batch item at a time: into
    another item ('batch items ...'), from every later position, from the
    future only (the mask reversed), or up to some offset ('future leaks at
    offset k')."""
    problem = rich_problem(adapter)
    inputs = problem.inputs()
    T = problem.T
    try:
        base = rows_of(adapter, adapter.run(inputs, dtype).out)
    except Exception:  # what it raises is the property's finding already
        return None
    fresh = np.random.default_rng(1).standard_normal(inputs.x.shape)
    items = inputs.x.shape[0] if inputs.x.ndim > 2 else 0
    seen, across = set(), False  # (query, key) pairs within an item
    for item in range(max(items, 1)):
        for j in range(T):
            x = inputs.x.copy()
            where = (item, j) if items else (j,)
            x[where] = fresh[where]
            out = rows_of(adapter, adapter.run(inputs.replace(x=x), dtype).out)
            for i in range(T):
                rows = [(b, i) for b in range(items)] if items else [(i,)]
                for row in rows:
                    if compare("", out[row], base[row], tol) is None:
                        continue
                    if items and row[0] != item:
                        across |= j > i or row[0] < item
                    else:
                        seen.add((i, j))
    future = {(i, j) for i, j in seen if j > i}
    past = {(i, j) for i, j in seen if j < i}
    pairs = T * (T - 1) // 2
    if across and not future:
        return (
            "batch items are not independent: a change in one item's future "
            "reaches another item's earlier rows"
        )
    if not future:
        return None
    if len(future) == pairs and not past:
        return (
            "the causal mask is reversed: query i depends on the positions after it, "
            "not on those before it"
        )
    if len(future) == pairs:
        return (
            "every query depends on every later position (changed one at a time); "
            "no known mistake fits"
        )
    k = max(j - i for i, j in future)
    hint = " (causal mask off by one)" if k == 1 else ""
    return f"future leaks at offset {k}: query i sees keys up to i + {k}{hint}"


def rows_of(adapter, out: np.ndarray) -> np.ndarray:
    """out with its rows (query positions) on the second axis from the end,
    (..., T, C): a kernel's (..., H, T, D) with its heads merged."""
    return merge_heads(out) if adapter.level == "qkv" else out
