"""The properties that say what causal self-attention is: it equals the
float64 oracle in each dtype (`oracle`), a change in the future changes no
earlier output (`causality`), each row of weights sums to 1, the scores are
scaled by 1/sqrt(D), a given mask narrows the causal one as the oracle's
does, and batch items and heads are independent.
"""

from __future__ import annotations

import math

import numpy as np

from triptych.check import mistakes
from triptych.check.problems import Inputs
from triptych.check.properties.search import (
    Case,
    Finding,
    Result,
    Settings,
    agree,
    agree_up_to,
    cases,
    changed_after,
    compare,
    diagnosis_of,
    failed,
    passed,
    problems,
    refuses,
    rich_problem,
    search,
    tolerance_text,
)
from triptych.check.target import one_line


def oracle(adapter, settings: Settings, dtype: str) -> Result:
    """Output and weights equal the oracle on the inputs rounded to `dtype`."""
    id, title = f"oracle:{dtype}", f"equals the float64 oracle in {dtype}"
    refused = refuses(adapter, dtype)
    if refused:
        return Result(
            id,
            title,
            "SKIP",
            f"NumPy has no {dtype} of its own, and this implementation refuses "
            f"ml_dtypes' ({refused})",
        )

    def check(case):
        inputs = case.problem.inputs()
        return agree(adapter.run(inputs, dtype), adapter.truth(inputs, dtype), dtype)

    role = None if dtype == settings.working else "dtypes"
    found = search(cases(problems(adapter, settings, role)), check, settings)
    if found.case is None:
        return passed(id, title, found, f"within {tolerance_text(dtype)}")
    if found.finding.raised:
        return failed(id, title, found)
    if dtype == "float64" and float32_inside(adapter, found.case):
        return failed(
            id,
            title,
            found,
            "computes in float32 inside (JAX's dot_product_attention runs its "
            "softmax in float32 for float64 inputs)",
            "NOTE",
            f"agrees only within the float32 tolerance: {found.finding.message}",
        )
    diagnosis = diagnosis_of(adapter, found.case, dtype)
    return failed(id, title, found, diagnosis or wrong_from(adapter, found.case, dtype))


def wrong_from(adapter, case: Case, dtype: str) -> str | None:
    """Where no known mistake fits: 'right up to row 15, wrong from row 16
    on', when the first rows agree with the oracle (a block or tile edge)."""
    inputs = case.problem.inputs()
    try:
        got, want = adapter.run(inputs, dtype), adapter.truth(inputs, dtype)
    except Exception:
        return None
    T = inputs.x.shape[-2]
    for i in range(T):
        rows = np.zeros(got.out.shape[:-1], dtype=bool)
        rows[..., i] = True
        if compare("", got.out, want.out, dtype, rows) is not None:
            break
    else:
        return None
    if i == 0:
        return None
    edge = " (a block or tile edge?)" if i & (i - 1) == 0 else ""
    return f"right up to row {i - 1}, wrong from row {i} on{edge}"


def float32_inside(adapter, case: Case) -> bool:
    """Whether float64 inputs agree with the oracle at float32's tolerance only."""
    for problem in (case.problem, rich_problem(adapter)):
        inputs = problem.inputs()
        got, want = adapter.run(inputs, "float64"), adapter.truth(inputs, "float64")
        if agree(got, want, "float32") is not None:
            return False
    return True


def causality(adapter, settings: Settings) -> Result:
    """Changing x after position i changes no output (nor weights) up to i."""
    id, title = "causality", "a change in the future changes no earlier output"
    dtype, tol = settings.working, settings.tol

    def check(case):
        problem, (position,) = case
        i = position % (problem.T - 1)
        inputs = problem.inputs()
        later = changed_after(inputs, i, problem.seed)
        before, after = adapter.run(inputs, dtype), adapter.run(later, dtype)
        return agree_up_to(
            before, after, i, tol, "after x changed from position " + str(i + 1)
        )

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
    diagnosis = diagnosis_of(adapter, found.case, dtype, tol, LEAKS)
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
)
"""The mistakes that let the future in, each named by what it does."""


def leak_pattern(adapter, dtype: str, tol: str) -> str | None:
    """How the future gets in when no known mistake fits, read on a rich
    problem by changing one position of one batch item at a time: into
    another item ('batch items ...'), from every later position, from the
    future only (the mask reversed), or up to some offset ('future leaks at
    offset k')."""
    problem = rich_problem(adapter)
    inputs = problem.inputs()
    T = problem.T
    base = adapter.run(inputs, dtype)
    fresh = np.random.default_rng(1).standard_normal(inputs.x.shape)
    items = inputs.x.shape[0] if inputs.x.ndim > 2 else 0
    seen, across = set(), False  # (query, key) pairs within an item
    for item in range(max(items, 1)):
        for j in range(T):
            x = inputs.x.copy()
            where = (item, j) if items else (j,)
            x[where] = fresh[where]
            out = adapter.run(inputs.replace(x=x), dtype).out
            for i in range(T):
                rows = [(b, i) for b in range(items)] if items else [(i,)]
                for row in rows:
                    if compare("", out[row], base.out[row], tol) is None:
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


def rows_sum_to_one(adapter, settings: Settings) -> Result:
    """Each row of weights that may attend some key sums to 1."""
    id, title = "rows sum to 1", "each row of attention weights sums to 1"
    dtype, tol = settings.working, settings.tol
    probe = probe_weights(adapter, dtype)
    if isinstance(probe, Result):
        return Result(id, title, probe.status, probe.reason)
    masks = ("none", "per head") if adapter.takes_mask else ("none",)
    sinks = adapter.variant is not None and adapter.variant.sinks

    def check(case):
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
    return failed(id, title, found, diagnosis_of(adapter, found.case, dtype, tol))


def probe_weights(adapter, dtype):
    """None if the implementation returns weights (..., H, T, T); else a
    SKIP (it returns none) or a FAIL (it raises) Result."""
    inputs = rich_problem(adapter).inputs()
    try:
        weights = adapter.run(inputs, dtype).weights
    except Exception as error:
        return Result("", "", "FAIL", f"raises {one_line(error)}")
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
        inputs = case.problem.inputs()
        return agree(adapter.run(inputs, dtype), adapter.truth(inputs, dtype), tol)

    strategy = cases(problems(adapter, settings, "masks", masks=masks))
    found = search(strategy, check, settings)
    if found.case is None:
        return passed(id, title, found, "matches the oracle on every kind of mask")
    if found.finding.raised:
        return failed(id, title, found)
    names = [m.name for m in mistakes.MISTAKES if m.property == "mask"]
    diagnosis = diagnosis_of(adapter, found.case, dtype, tol, names)
    return failed(
        id, title, found, diagnosis or diagnosis_of(adapter, found.case, dtype, tol)
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
    names = ("split", "merge", "batch flattened", "gqa order")
    diagnosis = diagnosis_of(adapter, found.case, dtype, tol, names)
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
