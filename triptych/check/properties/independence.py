"""Independence: a change in one batch item changes no other item, and
changing one head's projections (and its KV head's) changes no other head.
"""

from __future__ import annotations

import math

import numpy as np

from triptych.check.problems import Inputs
from triptych.check.properties.judged import judge, random_calls
from triptych.check.properties.search import (
    Finding,
    Result,
    Settings,
    cases,
    compare,
    diagnosis_of,
    failed,
    passed,
    problems,
    search,
)


def independence(adapter, settings: Settings) -> Result:
    """A change in one batch item changes no other item; changing one head's
    projections changes no other head."""
    id, title = "independence", "batch items and heads are independent"
    strategy = problems(adapter, settings, several=True)
    if strategy is None:
        return Result(
            id, title, "SKIP", "takes one sequence of one head: nothing to mix"
        )
    dtype, tol = settings.working, settings.tol
    from hypothesis import strategies as st

    def check(case):
        problem, (h,) = case
        tol = judge(adapter, settings, problem)
        inputs = problem.inputs()
        if problem.batch and problem.batch[0] > 1:
            found = other_item_changed(adapter, inputs, problem.seed, dtype, tol)
            if found is not None:
                return found
        if problem.H > 1:
            return one_head_changed(adapter, inputs, h % problem.H, dtype, tol)
        return None

    def where(case):
        H = case.problem.H
        return f", head {case.extra[0] % H} changed" if H > 1 else ""

    found = search(cases(strategy, st.integers(0, 3)), check, settings)
    if found.case is None:
        return passed(id, title, found, "no batch item or head changed another")
    if found.finding.raised:
        return failed(id, title, found, where=where)
    names = ("split", "merge", "batch flattened", "gqa order", "transposed")
    tol = judge(adapter, settings, found.case.problem)
    diagnosis = random_calls(adapter, found.case.problem, dtype, tol) or diagnosis_of(
        adapter, found.case, dtype, tol, names
    )
    return failed(id, title, found, diagnosis, where=where)


def other_item_changed(
    adapter, inputs: Inputs, seed: int, dtype: str, tol: str
) -> Finding | None:
    """Fresh x in one batch item at a time: the other items' output and
    weights stay (the same shapes, so nothing compiles again)."""
    a = adapter.run(inputs, dtype)
    fresh = np.random.default_rng(seed + 3).standard_normal(inputs.x.shape)
    for item in range(inputs.x.shape[0]):
        x = inputs.x.copy()
        x[item] = fresh[item]
        b = adapter.run(inputs.replace(x=x), dtype)
        others = np.arange(inputs.x.shape[0]) != item
        what = f"the other batch items, after item {item} changed"
        found = compare(f"out of {what}", b.out[others], a.out[others], tol)
        if found is None and a.weights is not None and b.weights is not None:
            found = compare(
                f"weights of {what}", b.weights[others], a.weights[others], tol
            )
        if found is not None:
            return found
    return None


def one_head_changed(
    adapter, inputs: Inputs, h: int, dtype: str, tol: str
) -> Finding | None:
    """Change head h's columns of w_q and its KV head's of w_k, w_v (with
    w_o's rows of the heads that KV head serves zero in both runs: h alone
    without GQA): the output and the other heads' weights stay."""
    C = inputs.x.shape[-1]
    D = inputs.w["w_q"].shape[-1] // inputs.H
    G = inputs.H // inputs.H_kv  # query heads per KV head
    g = h // G
    heads, kv = slice(h * D, (h + 1) * D), slice(g * D, (g + 1) * D)
    group = np.arange(inputs.H) // G == g
    w = {n: a.copy() for n, a in inputs.w.items()}
    w["w_o"][np.repeat(group, D)] = 0.0
    before = inputs.replace(w=w)
    changed = {n: a.copy() for n, a in w.items()}
    fresh = np.random.default_rng(h + 7).standard_normal((C, 3 * D)) / math.sqrt(C)
    for n, part in zip(("w_q", "w_k", "w_v"), np.split(fresh, 3, axis=1), strict=True):
        changed[n][:, heads if n == "w_q" else kv] = part
    a, b = adapter.run(before, dtype), adapter.run(inputs.replace(w=changed), dtype)
    others = ~group
    served = f"head {h}'s" if G == 1 else f"head {h}'s and KV head {g}'s"
    what = f"the other heads, after {served} projections changed"
    if adapter.level == "qkv":
        return compare(what, b.out[..., others, :, :], a.out[..., others, :, :], tol)
    rows = "its w_o rows are" if G == 1 else "the w_o rows of the heads it serves are"
    found = compare(
        f"out, after {served} projections changed ({rows} 0)",
        b.out,
        a.out,
        tol,
    )
    if found is None and a.weights is not None and b.weights is not None:
        found = compare(
            what, b.weights[..., others, :, :], a.weights[..., others, :, :], tol
        )
    return found
